-- SPDX-License-Identifier: Apache-2.0
-- Extend a lock only if this owner holds it (compare-and-pexpire).
-- KEYS[1]: the lock key; KEYS[2], optional: a key that lives as long as the lock (a leader
-- election's record, dlock::election), whose expiry follows the lock's where it has one;
-- ARGV[1]: the owner value; ARGV[2]: the TTL in milliseconds;
-- ARGV[3]: "" to extend, or a successor value to settle:
--   extend  the key's remaining life becomes at least the TTL; it is never shortened, so an
--           extend delayed in the network (sent on a connection given up after a timeout) that
--           lands after a later, longer one cannot cut the key back under its holder;
--   settle  the key becomes the successor value with exactly the TTL left (lease::
--           release_after): requests still on their way for the old value then find nothing.
-- Returns 1 when the key held the owner value, 0 when it was gone or someone else's (the lease
-- is lost).
local key, owner, ttl_ms, successor = KEYS[1], ARGV[1], ARGV[2], ARGV[3] or ''

-- #include name_mark.lua
-- A read-write lock's or semaphore's mark on the name is nobody's owner value.
if is_mark(owner) or redis.call('GET', key) ~= owner then return 0 end
if successor ~= '' then
  redis.call('SET', key, successor, 'PX', ttl_ms)
elseif redis.call('PTTL', key) < tonumber(ttl_ms) then
  redis.call('PEXPIRE', key, ttl_ms)
end
local companion = KEYS[2]
if companion and redis.call('PTTL', companion) >= 0 then
  redis.call('PEXPIRE', companion, redis.call('PTTL', key))
end
return 1
