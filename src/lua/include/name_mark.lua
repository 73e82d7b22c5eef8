-- SPDX-License-Identifier: Apache-2.0
-- One name is one lock. A name's own key is the one a mutex of the name holds; the other kinds
-- keep a mark in it while they hold, so that each finds the name taken:
--   read-write lock  rw_mark (dlock/key_layout.hpp: read_write_lock_mark) while readers or a
--                    writer hold (dlock::shared_mutex, a fair semaphore under :rw: keys);
--   semaphore        "dlock:semaphore <limit> fair|unfair" (key_layout.hpp: semaphore_mark)
--                    while permits are held: its limit and fairness are stored, so that a
--                    holder that counts another limit is refused instead of counting its own;
--   latch            its count, a decimal number (latch.lua), which is refused where
--                    anything else holds the name. A lock waits for a count as for another
--                    client's lock: hand-made locks write "1" too.
-- A mutex of the name and a read-write lock are one lock: each waits for the other. Any other
-- two kinds cannot share a name, and the one that comes second is refused with WRONGTYPE,
-- which names the kind found (read_name). The mark lasts until the latest holder's
-- expiry at least: every grant and renewal marks the name before anyone is told (a script is
-- not rolled back: an error later on must not leave a told holder unmarked), and a release or
-- settle sets the mark to the latest holder's expiry exactly, or takes it off with the last
-- holder. A script sets `name` and `mark` (the engine sends its kind's mark) before it calls
-- these; without a mark (a caller of an earlier version) `name` is nil: no mark.
local rw_mark = 'dlock:read-write-lock'
local semaphore_prefix = 'dlock:semaphore '
local mark

-- Whether a value is a mark, which is nobody's owner value (release.lua, extend.lua).
local function is_mark(value)
  return value == rw_mark or string.sub(value, 1, #semaphore_prefix) == semaphore_prefix
end

-- What holds a name whose key holds `value`: 'a read-write lock', 'a semaphore ...', or nil for
-- a lock (a mutex, a lock set, another client's SET NX) or a latch (a count).
local function kind_of(value)
  if value == rw_mark then return 'a read-write lock' end
  if string.sub(value, 1, #semaphore_prefix) == semaphore_prefix then
    local limit, fairness = string.match(value, '^dlock:semaphore (%d+) (%a+)$')
    if not limit then return 'a semaphore' end
    return 'a semaphore of ' .. limit .. (limit == '1' and ' permit' or ' permits') .. ' (' ..
               fairness .. ')'
  end
  return nil
end

-- The same for a message: a count may be a latch's or a hand-made lock's ("1"); it says so.
local function held_as(value)
  return kind_of(value) or (string.match(value, '^%d+$') and 'a latch or a lock' or 'a lock')
end

-- The WRONGTYPE error that refuses `wanted` (what the caller takes the name for) because
-- `value` holds the name as something else.
local function kind_error(value, wanted)
  return redis.error_reply('WRONGTYPE dlock: the name is held as ' .. held_as(value) ..
                               ', not as ' .. wanted)
end

-- For an acquire of a semaphore or read-write lock, with one GET: the error to answer when the
-- name's key holds a kind that cannot share the name with this one, else nil (free, our own
-- mark, or a lock of the name, which a read-write lock waits for); and whether anything but
-- our mark holds it (name_taken). GET raises WRONGTYPE for a key that is no string at all.
-- Read before anything is written.
local function read_name(name)
  if not name then return nil, false end
  local value = redis.call('GET', name)
  if not value or value == mark then return nil, false end
  if mark == rw_mark and kind_of(value) == nil then return nil, true end
  return kind_error(value, held_as(mark)), true
end

-- Whether the name's key holds something other than this kind's mark.
local function name_taken(name)
  if not name then return false end
  local value = redis.call('GET', name)
  return value ~= false and value ~= mark
end

-- Marks the name until `until_ms` (a holder's expiry, server ms) at least; never shortens it.
-- `value`: what the name's key held when the caller read it in this script (false: nothing),
-- or nil to read it here.
local function mark_name_until(name, until_ms, now, value)
  if not name or until_ms <= now then return end
  if value == nil then value = redis.call('GET', name) end
  if value and value ~= mark then return end  -- taken (name_taken)
  local ms = until_ms - now
  if not value or redis.call('PTTL', name) < ms then redis.call('SET', name, mark, 'PX', ms) end
end

-- The latest expiry among the live holders (0 when none holds), or nil when the 1000 latest
-- entries are all waiters'. A holder has a live expiry and no waiter entry (`info` nil: the
-- unfair variant's refresh, whose expiries hold only holders); the walk goes down the
-- expiries, latest first, and stops at the first holder, so a release among many readers reads
-- a few entries, not the whole line.
local function latest_holder_expiry(expiries, info, now)
  local from = 1  -- counted from the latest
  while from <= 1000 do
    local batch = redis.call('ZRANGE', expiries, -(from + 99), -from, 'WITHSCORES')
    local members = {}
    for i = 1, #batch, 2 do members[#members + 1] = batch[i] end
    if #members == 0 then return 0 end
    local entries = info and redis.call('HMGET', info, unpack(members)) or {}
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
    redis.call('SET', name, mark, 'PX', latest - now)
  elseif redis.call('GET', name) == mark then
    redis.call('DEL', name)
  end
end
