-- Release a lock only if this owner holds it (compare-and-delete).
-- KEYS[1]: the lock key; ARGV[1]: the owner token.
-- Returns 1 when the key held the token and was deleted, 0 when it was gone or someone else's.
local key, owner = KEYS[1], ARGV[1]

if redis.call('GET', key) == owner then
  return redis.call('DEL', key)
end
return 0
