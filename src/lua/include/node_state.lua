-- SPDX-License-Identifier: Apache-2.0
-- Shared by the acquire and release scripts: cmake/EmbedLua.cmake pastes it where they name it.
-- The node's quarantine and fence floor (client_options::restart_quarantine; node_check.lua
-- sets them; dlock/key_layout.hpp). While the quarantine lasts the node grants nothing: a lock
-- or permit it forgot, or one it was restored with, may be another's. Every token drawn is
-- above the floor. (One MGET of both costs more server time than these two reads: 0.72 against
-- 0.45 us, measured.) pcall: a user whose ACL does not reach these keys is not stopped by them.
-- The server's clock in ms.
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function quarantine_left()
  local ms = redis.pcall('PTTL', 'dlock:node:quarantine')
  if type(ms) == 'number' and ms > 0 then return ms end
  return 0
end
local function fence_floor()
  local floor = redis.pcall('GET', 'dlock:node:fence-floor')
  return type(floor) == 'string' and tonumber(floor) or 0
end

-- Every counter that next_fence starts begins far above this (the clock in ms x 1024); one
-- below it was made by a plain INCR, which counts from 0 (acquire_unqueued's, sent without
-- Lua: lock_protocol.hpp), and is started again from the clock like a new one.
-- lock_protocol.hpp's fence_clock_range is the same.
local fence_clock_range = 1099511627776  -- 2^40

-- The next token of the fencing counter `fence_key`, `now` being the server's time in ms (or a
-- function that reads it, called only for a counter that starts: TIME is a command too). A
-- counter that does not exist yet starts from the server's clock, at ms x 1024, not at 0: when
-- it expired (below) or was lost with the node's data (a restart without persistence), its
-- tokens still rise past every one it gave before, as long as the clock did not go back and
-- fewer than 1024 tokens were drawn per ms (docs/guarantees.md). So the counter need not
-- outlive its use: it expires `keep_ms` (the grant's TTL) after it was set (made, started again,
-- raised or handed over; INCR keeps the expiry), and a lock or semaphore no one uses leaves no
-- key behind. In steady use it starts again from the clock once per TTL, which costs nothing,
-- where pushing the expiry out at every draw would cost a command per grant (8 % of a cycle's
-- server time, measured). %.0f: Lua's own formatting would write 1.8e+15.
local function next_fence(fence_key, now, keep_ms)
  local fence = redis.call('INCR', fence_key)
  local floor = fence_floor()
  if fence < fence_clock_range then
    if type(now) == 'function' then now = now() end
    floor = math.max(floor, now * 1024)
  end
  if fence > floor then return fence end
  fence = floor + 1
  redis.call('SET', fence_key, string.format('%.0f', fence), 'PX', keep_ms)
  return fence
end
