-- SPDX-License-Identifier: Apache-2.0
-- A key that lives with a semaphore's permits (weights, the fair queue, its ticket counter)
-- kept alive for at least ARGV[1] ms, while its Redis Cluster slot migrates: the renewal that
-- does it with the permit (sem_refresh.lua) is refused there. Never shortens a life, gives none
-- to a key that has no expiry, and creates nothing.
-- KEYS[1]: the key; ARGV[1]: the time to live in ms. Returns 1 when the key exists.
local key, ms = KEYS[1], tonumber(ARGV[1])
local left = redis.call('PTTL', key)
if left == -2 then return 0 end
if left >= 0 and left < ms then redis.call('PEXPIRE', key, ms) end
return 1
