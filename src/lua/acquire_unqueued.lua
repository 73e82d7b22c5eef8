-- SPDX-License-Identifier: Apache-2.0
-- The uncontended acquire without Lua, written as the script it stands for. The library sends
-- it as plain commands in one transaction (script.cpp, transaction_command), which Redis runs
-- several times cheaper than acquire.lua:
--   MULTI; SET KEYS[1] ARGV[1] NX PX ARGV[2]; SET KEYS[2] 0 NX PX ARGV[2]; INCR KEYS[2];
--   MGET dlock:node:quarantine dlock:node:fence-floor; EXEC
-- and this script answers exactly as that EXEC does (the simulator runs it; ScriptsTest checks
-- the two against a real server): {OK or nil, OK or nil, the counter or its error,
-- {quarantine, floor}}. The counter's SET NX gives a counter that INCR would make an expiry,
-- so that no counter outlives its use (next_fence).
-- KEYS[1]: the lock key; KEYS[2]: its fencing counter; ARGV[1]: the owner value; ARGV[2]: the
-- TTL in ms. Nothing else of acquire.lua is here: no queue, no fair mode, no handoff, no mark
-- check, no quarantine or floor of its own. The caller (lock_protocol) claims the grant only
-- when the key was set, the node is not quarantined and the counter drew a token of the
-- clock's range above the floor; otherwise it runs acquire.lua for the same round, which
-- decides from what the key holds then (next_fence starts a counter that a plain INCR made).
local set = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
local made = redis.pcall('SET', KEYS[2], '0', 'NX', 'PX', ARGV[2])
local fence = redis.pcall('INCR', KEYS[2])
return {set, made, fence, redis.call('MGET', 'dlock:node:quarantine', 'dlock:node:fence-floor')}
