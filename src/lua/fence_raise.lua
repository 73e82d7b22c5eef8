-- Raise a fencing counter to at least a value (set-if-greater), for Redlock's fencing round.
-- KEYS[1]: the fencing counter; ARGV[1]: the value it must reach.
-- Returns the counter's value afterwards.
local fence_key, floor = KEYS[1], tonumber(ARGV[1])

local current = tonumber(redis.call('GET', fence_key) or '0')
if current < floor then
  redis.call('SET', fence_key, floor)
  return floor
end
return current
