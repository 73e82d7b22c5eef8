-- SPDX-License-Identifier: Apache-2.0
-- Write a value only if the writer's fencing token is not older than any seen before.
-- KEYS[1]: the data key; KEYS[2]: the highest token seen for it (same hash slot).
-- ARGV[1]: the writer's fencing token; ARGV[2]: the value.
-- Returns 1 when written (and the token recorded), 0 when rejected as stale.
local data_key, high_key = KEYS[1], KEYS[2]
local token, value = tonumber(ARGV[1]), ARGV[2]

local highest = tonumber(redis.call('GET', high_key) or '0')
if token < highest then
  return 0
end
redis.call('SET', high_key, ARGV[1])
redis.call('SET', data_key, value)
return 1
