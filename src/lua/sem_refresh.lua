-- Extend a semaphore permit: its expiry becomes the server's now + TTL, if it is still live.
-- KEYS[1]: the expiry set (holders, or the fair variant's timeouts); KEYS[2]: weights;
-- KEYS[3] (fair variant only): owners.
-- ARGV[1]: the owner token; ARGV[2]: the new TTL in milliseconds.
-- Returns 1 when extended, 0 when the permit was gone or had expired: a lost permit is never
-- added back (an expired entry is removed instead), so the caller learns it was lost.
local expiries, weights, owners = KEYS[1], KEYS[2], KEYS[3]
local owner, ttl_ms = ARGV[1], tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local expiry = redis.call('ZSCORE', expiries, owner)
if not expiry then return 0 end
if tonumber(expiry) <= now then
  redis.call('ZREM', expiries, owner)
  redis.call('HDEL', weights, owner)
  if owners then redis.call('ZREM', owners, owner) end
  return 0
end

redis.call('ZADD', expiries, 'XX', now + ttl_ms, owner)
local last = redis.call('ZRANGE', expiries, -1, -1, 'WITHSCORES')
for _, key in ipairs({expiries, weights, owners}) do
  if redis.call('EXISTS', key) == 1 then redis.call('PEXPIREAT', key, last[2]) end
end
return 1
