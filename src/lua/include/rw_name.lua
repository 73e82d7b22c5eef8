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

-- The latest expiry among the line's live holders (0 when none holds), or nil when the line is
-- too long to walk. A holder has a live expiry and no waiter entry. It was granted when the
-- permits of the live members up to and including it fitted in `limit`, and those ahead of it
-- can only have left since, so every holder lies before the point where the sum passes it.
local function latest_holder_expiry(queue, expiries, weights, info, limit, now)
  local latest, in_line, start = 0, 0, 0
  while start < 1000 do
    local batch = redis.call('ZRANGE', queue, start, start + 99)
    if #batch == 0 then return latest end
    local entries = redis.call('HMGET', info, unpack(batch))
    local wants = redis.call('HMGET', weights, unpack(batch))
    for i, member in ipairs(batch) do
      local expiry = tonumber(redis.call('ZSCORE', expiries, member))
      if expiry and expiry > now then
        if not entries[i] then latest = math.max(latest, expiry) end
        in_line = in_line + (tonumber(wants[i]) or 1)
        if limit and in_line > limit then return latest end
      end
    end
    start = start + #batch
  end
  return nil
end

-- After a member left or settled: the mark lasts exactly as long as the latest holder, and goes
-- with the last. A line too long to walk keeps the mark it has (it lasts as long as every
-- holder), which then expires by itself.
local function remark_name(name, queue, expiries, weights, info, limit, now)
  if not name or name_taken(name) then return end
  local latest = latest_holder_expiry(queue, expiries, weights, info, limit, now)
  if latest == nil then return end
  if latest > now then
    redis.call('SET', name, rw_mark, 'PX', latest - now)
  elseif redis.call('GET', name) == rw_mark then
    redis.call('DEL', name)
  end
end
