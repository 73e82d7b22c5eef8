-- SPDX-License-Identifier: Apache-2.0
-- Leave a lock's waiter queue (a waiter that gave up or was granted elsewhere).
-- KEYS[1]: the waiter queue; KEYS[2]: waiter info (see acquire.lua); ARGV[1]: the owner token.
-- Returns the number of entries removed.
local queue, info = KEYS[1], KEYS[2]
local owner = ARGV[1]

redis.call('HDEL', info, owner)
return redis.call('ZREM', queue, owner)
