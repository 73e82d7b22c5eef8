-- SPDX-License-Identifier: Apache-2.0
-- Shared by a read-write lock's scripts (dlock::shared_mutex, a fair semaphore under :rw:
-- keys): one name is one lock. While readers or a writer hold it, the name's own key holds
-- rw_mark (dlock/key_layout.hpp: read_write_lock_mark) until the latest holder's expiry at
-- least, so that a mutex, a lock set or another client's SET NX of the name finds it taken; a
-- reader or writer finds it taken while any other value holds it. Every grant and renewal
-- marks the name before anyone is told (a script is not rolled back: an error later on must
-- not leave a told holder unmarked), and a release or settle sets the mark to the latest
-- holder's expiry exactly, or takes it off with the last holder. `name` is nil for a semaphore
-- (no mark).
local rw_mark = 'dlock:read-write-lock'

-- Whether the name's key holds something other than this lock's mark (GET raises WRONGTYPE for
-- a key that is no lock at all: callers read it before they write anything).
local function name_taken(name)
  if not name then return false end
  local value = redis.call('GET', name)
  return value ~= false and value ~= rw_mark
end

-- Marks the name until `until_ms` (a holder's expiry, server ms) at least; never shortens it.
local function mark_name_until(name, until_ms, now)
  if not name or until_ms <= now or name_taken(name) then return end
  local ms = until_ms - now
  if redis.call('PTTL', name) < ms then redis.call('SET', name, rw_mark, 'PX', ms) end
end

-- The latest expiry among the live holders (0 when none holds), or nil when the 1000 latest
-- entries are all waiters'. A holder has a live expiry and no waiter
-- entry; the walk goes down the expiries, latest first, and stops at the first holder, so a
-- release among many readers reads a few entries, not the whole line.
local function latest_holder_expiry(expiries, info, now)
  local from = 1  -- counted from the latest
  while from <= 1000 do
    local batch = redis.call('ZRANGE', expiries, -(from + 99), -from, 'WITHSCORES')
    local members = {}
    for i = 1, #batch, 2 do members[#members + 1] = batch[i] end
    if #members == 0 then return 0 end
    local entries = redis.call('HMGET', info, unpack(members))
    for i = #members, 1, -1 do
      local expiry = tonumber(batch[2 * i])
      if expiry <= now then return 0 end
      if not entries[i] then return expiry end
    end
    if #members < 100 then return 0 end
    from = from + 100
  end
  return nil
end

-- After a member left or settled: the mark lasts exactly as long as the latest holder, and goes
-- with the last. When the walk cannot tell, the mark keeps what it has (it lasts as long as
-- every holder), and expires by itself.
local function remark_name(name, expiries, info, now)
  if not name or name_taken(name) then return end
  local latest = latest_holder_expiry(expiries, info, now)
  if latest == nil then return end
  if latest > now then
    redis.call('SET', name, rw_mark, 'PX', latest - now)
  elseif redis.call('GET', name) == rw_mark then
    redis.call('DEL', name)
  end
end
