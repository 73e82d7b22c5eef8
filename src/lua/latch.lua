-- SPDX-License-Identifier: Apache-2.0
-- A count-down latch (dlock::latch): one key holding the count, which each change keeps alive
-- for another TTL.
-- KEYS[1]: the latch.
-- ARGV[1]: "set" or "down"; ARGV[2]: the count to set, or how much to subtract; ARGV[3]: the TTL
--          in ms; ARGV[4]: the channel its opening is published on (key_layout.hpp:
--          latch_channel). Not a key: on a Redis Cluster whose slot migrates, a script naming a
--          key that does not exist is refused until the migration ends (TRYAGAIN).
-- set:  creates the latch unless it exists; returns 1 when created, 0 when it existed.
-- down: returns what is left, not below 0 (0: open, and the waiters are told), or -1 when the
--       latch does not exist. An open latch stays as it is.
-- A key that holds no count answers WRONGTYPE (one of another type, or a string that is no
-- count: the name is a lock's, a read-write lock's or a semaphore's, name_mark.lua).
local key = KEYS[1]
local op, n, ttl, channel = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]

-- #include name_mark.lua
-- #include name_kinds.lua
local held = redis.call('GET', key)  -- raises WRONGTYPE for a key of another type
local left = held and tonumber(held)
if held and (not left or left < 0 or left ~= math.floor(left)) then
  return kind_error(held, 'a latch')
end
if op == 'set' then
  if held then return 0 end
  redis.call('SET', key, ARGV[2], 'PX', ttl)
  return 1
end
if not held then return -1 end
if left == 0 then return 0 end
left = math.max(0, left - n)
redis.call('SET', key, string.format('%.0f', left), 'PX', ttl)
if left == 0 then redis.call('PUBLISH', channel, 'open') end
return left
