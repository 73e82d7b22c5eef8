-- SPDX-License-Identifier: Apache-2.0
-- A semaphore permit renewed or ended by its expiry set alone, while its Redis Cluster slot
-- migrates (sem_refresh.lua and sem_release.lua name keys that may not exist, and Redis
-- refuses such a script for as long as the slot migrates: TRYAGAIN).
-- KEYS[1]: the expiry set (holders, or the fair variant's timeouts); ARGV[1]: the owner token;
-- ARGV[2]: the TTL in ms, or "0" to end the permit now; ARGV[3] (renew): how long the set itself
-- must live at least, in ms.
--   renew  the entry's expiry becomes at least now + TTL (never earlier), and the set's own
--          expiry at least ARGV[3]: as long as the keys that live with the permits (weights,
--          the fair queue), which were kept alive before it, so that the set is still there
--          when they are, and the scripts that drop its expired entries drop theirs too (a
--          weight or a place in the queue whose entry vanished with its set would count for
--          ever);
--   end    the entry's expiry becomes 0, which every node's clock has passed: every script
--          counts it as gone and clears it with its weight and ticket, as it does an expired
--          holder's (one key cannot reach those), and no renewal still on its way revives it.
-- Returns 1 when the entry was live, 0 when it was gone or had expired (left to the scripts
-- that clear expired entries).
local expiries, owner, ttl_ms, set_ms = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = tonumber(redis.call('ZSCORE', expiries, owner))
if not expiry or expiry <= now then return 0 end
if ttl_ms == 0 then
  redis.call('ZADD', expiries, 'XX', 0, owner)
  return 1
end
if now + ttl_ms > expiry then redis.call('ZADD', expiries, 'XX', now + ttl_ms, owner) end
local left = redis.call('PTTL', expiries)
if left >= 0 and left < set_ms then redis.call('PEXPIRE', expiries, set_ms) end
return 1
