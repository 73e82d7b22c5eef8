-- SPDX-License-Identifier: Apache-2.0
-- Raise a fencing counter to at least a value (set-if-greater), for Redlock's fencing round.
-- KEYS[1]: the fencing counter; ARGV[1]: the value it must reach; ARGV[2]: the grant's TTL in
-- ms: a counter raised lives that long, as one made does (next_fence, in node_state.lua).
-- Returns the counter's value afterwards.
local fence_key, floor, ttl_ms = KEYS[1], tonumber(ARGV[1]), ARGV[2]

local current = tonumber(redis.call('GET', fence_key) or '0')
if current < floor then
  redis.call('SET', fence_key, string.format('%.0f', floor), 'PX', ttl_ms)
  return floor
end
return current
