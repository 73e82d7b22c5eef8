-- SPDX-License-Identifier: Apache-2.0
-- Release a lock by its key alone (compare-and-delete), while its Redis Cluster slot migrates:
-- release.lua names the lock's queue and fence too, and Redis refuses a script whose keys are
-- not all on one node, or do not all exist, for as long as the slot migrates (TRYAGAIN). One
-- key is always served (by the node that has it, or after ASK by the one importing it).
-- Nobody is handed the lock or woken: the waiters find it free at their next attempt.
-- KEYS[1]: the lock key; ARGV[1]: the owner value.
-- Returns 1 when the key held the value and was deleted, 0 when it was gone or someone else's.
local key, owner = KEYS[1], ARGV[1]

-- #include name_mark.lua
if is_mark(owner) or redis.call('GET', key) ~= owner then return 0 end
redis.call('DEL', key)
return 1
