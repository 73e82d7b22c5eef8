-- SPDX-License-Identifier: Apache-2.0
-- Acquire several locks at once, all or none (dlock::lock_set), and draw one fencing token for
-- them all. Atomic, so a client never holds part of a set: no hold-and-wait, no deadlock.
-- KEYS: for each lock, its key then its fencing counter (2 per lock; key_layout.hpp).
-- ARGV[1]: the owner value written to every key, a fresh one per attempt (so that the cleanup
-- of a failed attempt, which may run late, never deletes what a later attempt took); ARGV[2]:
-- the TTL in ms.
-- Returns {1, fence} when every key was free and now holds the owner value. The fence is the
-- highest of the keys' next tokens, and every counter is raised to it: it is above any token
-- drawn before for any of these names, and each name's next token will be above it.
-- Returns {0, i, PTTL} when lock i (1-based) is held (by anyone), {0, 0, ms} while the node is
-- quarantined, and WRONGTYPE when a key holds something that is not a lock (GET raises it), or
-- a name is a semaphore's or a latch's (name_mark.lua).
local owner, ttl_ms = ARGV[1], ARGV[2]
local count = #KEYS / 2

-- #include node_state.lua
-- #include name_mark.lua
-- #include name_kinds.lua

local quarantined = quarantine_left()
if quarantined > 0 then return {0, 0, quarantined} end
-- Everything that could fail is read before anything is written: a script is not rolled back.
for i = 1, count do
  local holder = redis.call('GET', KEYS[2 * i - 1])
  -- A read-write lock's mark, alone or a solo holder's (name_kinds.lua), is this lock's: it waits.
  if holder and (solo_of(holder) or holder) ~= rw_mark and kind_of(holder) then
    return kind_error(holder, 'a lock')
  end
  if holder then return {0, i, redis.call('PTTL', KEYS[2 * i - 1])} end
  local counter = redis.call('GET', KEYS[2 * i])
  if counter and not tonumber(counter) then
    return redis.error_reply('WRONGTYPE a fencing counter holds no number: ' .. KEYS[2 * i])
  end
end
local top = 0
for i = 1, count do
  redis.call('SET', KEYS[2 * i - 1], owner, 'PX', ttl_ms)
  top = math.max(top, next_fence(KEYS[2 * i], server_ms, ttl_ms))
end
local fence = string.format('%.0f', top)
for i = 1, count do
  if tonumber(redis.call('GET', KEYS[2 * i])) < top then
    redis.call('SET', KEYS[2 * i], fence, 'PX', ttl_ms)
  end
end
return {1, top}
