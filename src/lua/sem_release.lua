-- Give back a semaphore permit (or leave the fair queue): removes only this owner's entries.
-- KEYS[1]: the expiry set (holders, or the fair variant's timeouts); KEYS[2]: weights;
-- KEYS[3] (fair variant only): owners.
-- ARGV[1]: the owner token.
-- Returns 1 when the token had an unexpired entry, 0 when it was gone or already expired (an
-- expired entry is removed too: it was ours, and no one else's entry is touched).
local expiries, weights, owners = KEYS[1], KEYS[2], KEYS[3]
local owner = ARGV[1]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local expiry = redis.call('ZSCORE', expiries, owner)
redis.call('ZREM', expiries, owner)
redis.call('HDEL', weights, owner)
if owners then redis.call('ZREM', owners, owner) end
if expiry and tonumber(expiry) > now then return 1 end
return 0
