-- SPDX-License-Identifier: Apache-2.0
-- Shared by a read-write lock's scripts (dlock::shared_mutex, a fair semaphore under :rw:
-- keys): one name is one lock. While readers or a writer hold it, the name's own key holds
-- rw_mark, expiring with the lock's last member, so that a mutex, a lock set or another
-- client's SET NX of the name finds it taken; a reader or writer finds it taken while any other
-- value holds it. `name` is nil for a semaphore (no mark).
local rw_mark = 'dlock:read-write-lock'

-- Whether the name's key holds something other than this lock's mark (GET raises WRONGTYPE for
-- a key that is no lock at all).
local function name_taken(name)
  if not name then return false end
  local value = redis.call('GET', name)
  return value ~= false and value ~= rw_mark
end

-- Marks the name until the last member's expiry (`expiries`: the timeouts set), never earlier
-- than it is marked already. Called when someone holds.
local function mark_name(name, expiries, now)
  if not name or name_taken(name) then return end
  local last = redis.call('ZRANGE', expiries, -1, -1, 'WITHSCORES')
  if not last[2] or tonumber(last[2]) <= now then return end
  local ms = tonumber(last[2]) - now
  if redis.call('PTTL', name) < ms then redis.call('SET', name, rw_mark, 'PX', ms) end
end

-- Whether some live member of the line (`queue`, ticket order) holds: a holder has a live
-- expiry and no waiter entry. A holder was granted when the permits of the live members up to
-- and including it fitted in `limit`, and those ahead of it can only have left since, so the
-- walk ends where the sum passes the limit. A line too long to walk keeps the mark, which
-- expires by itself.
local function someone_holds(queue, expiries, weights, info, limit, now)
  local in_line, start = 0, 0
  while start < 1000 do
    local batch = redis.call('ZRANGE', queue, start, start + 99)
    if #batch == 0 then return false end
    local entries = redis.call('HMGET', info, unpack(batch))
    local wants = redis.call('HMGET', weights, unpack(batch))
    for i, member in ipairs(batch) do
      local expiry = tonumber(redis.call('ZSCORE', expiries, member))
      if expiry and expiry > now then
        if not entries[i] then return true end
        in_line = in_line + (tonumber(wants[i]) or 1)
        if limit and in_line > limit then return false end
      end
    end
    start = start + #batch
  end
  return true
end

-- After a member left: the mark stays (and lasts) while someone holds, and goes otherwise.
local function remark_name(name, queue, expiries, weights, info, limit, now)
  if not name then return end
  if someone_holds(queue, expiries, weights, info, limit, now) then
    return mark_name(name, expiries, now)
  end
  if redis.call('GET', name) == rw_mark then redis.call('DEL', name) end
end
