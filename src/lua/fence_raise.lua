-- SPDX-License-Identifier: Apache-2.0
-- Raise a fencing counter to at least a value (set-if-greater): Redlock's fencing round, a
-- lock set's slots, a straggler that granted behind the fence.
-- KEYS[1]: the fencing counter; ARGV[1]: the value it must reach; ARGV[2]: the grant's TTL in
-- ms: a counter raised lives that long, as one made does (next_fence, in node_state.lua).
-- Returns the counter's value afterwards.
-- A counter that no longer exists (it expired, or the node lost it, while the raise was on its
-- way), or that a plain INCR started again from 0, starts again from the server's clock, as next_fence starts one: set to a value drawn
-- before, it would hand out tokens that were already given.
local fence_key, floor, ttl_ms = KEYS[1], tonumber(ARGV[1]), ARGV[2]

local held = redis.call('GET', fence_key)
local current = tonumber(held or '0')
-- 2^40: a counter below it was made by a plain INCR (acquire_unqueued) after the last one
-- expired, and counts as one that no longer exists (fence_clock_range, node_state.lua).
if not held or current < 1099511627776 then
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  floor = math.max(floor, now_ms * 1024)
end
if current < floor then
  redis.call('SET', fence_key, string.format('%.0f', floor), 'PX', ttl_ms)
  return floor
end
return current
