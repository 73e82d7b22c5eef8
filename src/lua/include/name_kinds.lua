-- SPDX-License-Identifier: Apache-2.0
-- Shared by the scripts that read a name's key, after name_mark.lua (its `mark`, `rw_mark`):
-- which kind holds a name, the refusal of another kind, and the mark after a member left.

-- A solo holder's value, "<mark> <token> <permits>" (name_mark.lua): its mark, token and
-- permits; nil for any other value.
local function solo_of(value)
  if not value then return nil end
  local m, token, permits = string.match(value, '^(dlock:.+) (%S+) (%d+)$')
  if m and (m == rw_mark or string.match(m, '^dlock:semaphore %d+ %a+$')) then
    return m, token, tonumber(permits)
  end
  return nil
end

-- What holds a name whose key holds `value`: 'a read-write lock', 'a semaphore ...', or nil for
-- a lock (a mutex, a lock set, another client's SET NX) or a latch (a count).
local function kind_of(value)
  value = solo_of(value) or value
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

-- A solo holder of this kind (name_mark.lua) made one of the holders, before anything reads
-- them: `adopt(token, permits, expiry ms)`, the script's, writes its entries and answers true,
-- and the name keeps the mark alone, with the same expiry; or it answers false (a fair line
-- that was not empty when the solo grant was made, which its client saw and does not count
-- on: adopt_fair) and the value goes. Any other value is left as it is. Returns the name's
-- value after, as GET would (which raises WRONGTYPE for a key that is no string at all).
-- `value`: the name's value, when the script has read it already and written nothing since.
local function adopt_solo(name, now, adopt, value)
  if not name then return false end
  if value == nil then value = redis.call('GET', name) end
  local m, token, permits = solo_of(value)
  if m ~= mark then return value end
  local left = redis.call('PTTL', name)
  if left > 0 and adopt(token, permits, now + left) then
    redis.call('SET', name, mark, 'PX', left)
    return mark
  end
  redis.call('DEL', name)
  return false
end

-- The unfair variant's adopt (sem_acquire.lua's keys): the holder joins the holders' set, whose
-- keys live as long as their last holder. One found beside waiters (its grant saw them and was
-- not claimed; its client's script comes next) joins all the same: the unfair variant lets a
-- newcomer in ahead of its waiters, and its release, now a script's, wakes them.
local function adopt_unfair(holders, weights)
  return function(token, permits, expiry)
    redis.call('ZADD', holders, expiry, token)
    if permits > 1 then redis.call('HSET', weights, token, permits) end
    local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', holders, last[2])
    if permits > 1 or redis.call('EXISTS', weights) == 1 then
      redis.call('PEXPIREAT', weights, last[2])
    end
    return true
  end
end

-- The fair variant's (sem_fair_acquire.lua's keys). Its solo grant checked that the line was
-- empty in the same transaction as its SET (semaphore_protocol.hpp), and every script that
-- adds to the line adopts first: so a line found here was there at the grant, which its client
-- then did not count on (it goes on with the script), and the solo value goes. Otherwise the
-- holder takes the line's first place, with its ticket and expiry.
local function adopt_fair(owners, timeouts, weights, counter)
  return function(token, permits, expiry)
    if redis.call('EXISTS', owners) == 1 then return false end
    redis.call('ZADD', owners, redis.call('INCR', counter), token)
    redis.call('ZADD', timeouts, expiry, token)
    if permits > 1 then redis.call('HSET', weights, token, permits) end
    for _, key in ipairs({owners, timeouts, weights, counter}) do
      if redis.call('EXISTS', key) == 1 then redis.call('PEXPIREAT', key, expiry) end
    end
    return true
  end
end

-- For an acquire of a semaphore or read-write lock: the error to answer when the name's key
-- holds a kind that cannot share the name with this one, else nil (free, our own mark, or a
-- lock of the name, which a read-write lock waits for); and whether anything but our mark
-- holds it (name_taken). `value`: the name's value read in this script (adopt_solo's), or nil
-- to GET it here, which raises WRONGTYPE for a key that is no string at all. Read before
-- anything but an adoption is written.
local function read_name(name, value)
  if not name then return nil, false end
  if value == nil then value = redis.call('GET', name) end
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
-- every holder), and expires by itself. `value`: the name's value, when the script knows it.
local function remark_name(name, expiries, info, now, value)
  if not name then return end
  if value == nil then value = redis.call('GET', name) end
  if value ~= false and value ~= mark then return end  -- taken (name_taken)
  local latest = latest_holder_expiry(expiries, info, now)
  if latest == nil then return end
  if latest > now then
    redis.call('SET', name, mark, 'PX', latest - now)
  elseif redis.call('GET', name) == mark then
    redis.call('DEL', name)
  end
end
