-- Extend a lock only if this owner holds it (compare-and-pexpire).
-- KEYS[1]: the lock key; ARGV[1]: the owner token; ARGV[2]: the new TTL in milliseconds.
-- Returns 1 when extended, 0 when the key was gone or someone else's (the lease is lost).
local key, owner, ttl_ms = KEYS[1], ARGV[1], ARGV[2]

if redis.call('GET', key) == owner then
  return redis.call('PEXPIRE', key, ttl_ms)
end
return 0
