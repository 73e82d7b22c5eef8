-- SPDX-License-Identifier: Apache-2.0
-- A semaphore's or read-write lock's mark on its name kept for at least ARGV[2] ms, while the
-- name's Redis Cluster slot migrates (name_mark.lua: the renewal that does it with the permit,
-- sem_refresh.lua, is refused there). A name held by something else is lost, as the renewal
-- finds it.
-- KEYS[1]: the name's own key; ARGV[1]: the mark; ARGV[2]: ms.
-- Returns 1 when the name is marked, 0 when something else holds it.
local name = KEYS[1]

-- #include name_mark.lua
-- #include name_kinds.lua
mark = ARGV[1]
if name_taken(name) then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
mark_name_until(name, now + tonumber(ARGV[2]), now)
return 1
