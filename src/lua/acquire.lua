-- Acquire a lock and draw its fencing token, atomically.
-- KEYS[1]: the lock key (value = owner token, expiry = PX).
-- KEYS[2]: the lock's fencing counter, in the same hash slot; it never expires.
-- ARGV[1]: the owner token (random, 128 bits); ARGV[2]: the TTL in milliseconds.
-- Returns {1, fence} when granted (also when the key already holds this owner's token, e.g. a
-- late SET of our own earlier attempt), {0, holder's PTTL} when another owner holds it, and a
-- WRONGTYPE error when the key holds something that is not a lock (SET NX alone would say "busy").
local key, fence_key = KEYS[1], KEYS[2]
local owner, ttl_ms = ARGV[1], ARGV[2]

if redis.call('SET', key, owner, 'NX', 'PX', ttl_ms) then
  return {1, redis.call('INCR', fence_key)}
end
if redis.call('TYPE', key).ok ~= 'string' then
  return redis.error_reply('WRONGTYPE the lock key holds a value that is not a string')
end
if redis.call('GET', key) == owner then
  redis.call('PEXPIRE', key, ttl_ms)
  return {1, redis.call('INCR', fence_key)}
end
return {0, redis.call('PTTL', key)}
