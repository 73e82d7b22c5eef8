-- SPDX-License-Identifier: Apache-2.0
-- Shared by the scripts that read a name's key, after name_mark.lua (its `mark`, `rw_mark`):
-- which kind holds a name, the refusal of another kind, and the mark after a member left.

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
