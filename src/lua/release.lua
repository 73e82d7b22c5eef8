-- SPDX-License-Identifier: Apache-2.0
-- Release a lock only if this owner holds it (compare-and-delete), and pass it on.
-- KEYS[1]: the lock key; KEYS[2]: the waiter queue; KEYS[3]: waiter info; KEYS[4]: the fencing
-- counter (see acquire.lua).
-- ARGV[1]: the owner value to release (exact match), or with ARGV[2] = "give-up" an acquisition
--          id: a waiter that gives up leaves the queue and releases whatever value of its own
--          the key holds (a handoff that reached it after it stopped listening, or a late SET
--          of one of its rounds). Leaving and releasing in one script keeps them in order even
--          when one of two separate scripts would have to be re-sent after NOSCRIPT: a release
--          run before the leave could hand the lock to the departing waiter.
-- Returns 1 when the key held the value and was deleted, 0 when it was gone or someone else's.
-- Only the queue's first live waiter is told, so a release wakes one waiter, not all of them.
-- A waiter whose entry asks for a handoff ("<deadline> <channel> <ttl ms> <round>") is given
-- the lock right here: the key is set to "<its id>.h<round>" and it is sent
-- "<id> <fence> <round>", which saves it the round trip of trying again. Any other waiter is
-- sent its id, a wake-up. PUBLISH counts the subscribers that got the message: none means the
-- waiter's process is gone (its connection closed), so its entry is dropped and the next one is
-- served instead.
local key, queue, info, fence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, give_up = ARGV[1], ARGV[2] == 'give-up'

local holder = redis.call('GET', key)
-- A key this script empties is deleted, and on a Redis Cluster node whose slot is migrating
-- away, touching a key the script deleted fails the script midway (the key belongs to the
-- importing node now, and a script is never rolled back). So every touch of the queue that may
-- come after such a deletion goes through here: that refusal counts as "gone"; any other error
-- (READONLY, MISCONF, NOPERM ...) is raised as redis.call raises it, so that a refused write
-- can never leave the loop below going round the same head.
local function touch(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'non local key', 1, true) then return false end
    return redis.call(...)
  end
  return r
end

-- The common release first (ours, nobody waits), before the script defines what a handoff
-- needs: every function defined costs a closure at every run. Every mark begins "dlock:" and
-- no owner value dlock writes does, so a mark never takes this way (is_mark, below).
local queued  -- whether anyone waits, once asked
if holder == owner and not give_up and string.sub(owner, 1, 6) ~= 'dlock:' then
  queued = touch('EXISTS', queue) == 1
  if not queued then
    redis.call('DEL', key)
    return 1
  end
end

-- #include name_mark.lua
-- A read-write lock's or semaphore's mark on the name is nobody's owner value (`dlock release
-- NAME` with it, copied from `dlock status`, would take the name from its holders).
if is_mark(owner) then return 0 end

if give_up then
  redis.call('ZREM', queue, owner)
  redis.call('HDEL', info, owner)
  if not holder or string.sub(holder, 1, #owner + 1) ~= owner .. '.' then return 0 end
elseif holder ~= owner then
  return 0
end
-- The key is overwritten for a handoff and deleted otherwise, and every write to it comes
-- before the PUBLISH that tells a waiter it holds the lock, so that a failure midway never
-- comes after the waiter was told (tests/integration/cluster_test found two holders so).
if queued == nil then queued = touch('EXISTS', queue) == 1 end
if not queued then
  redis.call('DEL', key)
  return 1
end
-- #include node_state.lua
-- #include wake.lua

local now = server_ms()
local quarantined = quarantine_left() > 0
local handed = false
while true do
  local heads = touch('ZRANGE', queue, 0, 0)
  local head = heads and heads[1]
  if not head then break end
  local entry = touch('HGET', info, head)
  local deadline, channel, ttl_ms, round
  if entry then
    deadline, channel, ttl_ms, round = string.match(entry, '^(%d+) (%S+) ?(%d*) ?(%d*)$')
  end
  if deadline and tonumber(deadline) > now then
    -- No handoff in quarantine, which grants nothing: the waiter is only woken.
    local handoff = ttl_ms ~= '' and round ~= '' and not quarantined
    local message = head
    local fence
    if handoff then
      -- Drawn only once someone received it (below): a vanished waiter leaves no gap. A
      -- missing counter starts from the clock, and the floor holds, as in acquire.lua.
      local current = tonumber(redis.call('GET', fence_key))
      if not current or current < fence_clock_range then current = now * 1024 end
      fence = string.format('%.0f', math.max(current, fence_floor()) + 1)
      message = head .. ' ' .. fence .. ' ' .. round
    end
    -- A handoff that cannot be written (OOM at maxmemory: this is the script's first write)
    -- becomes a plain wake-up.
    if handoff and redis.pcall('SET', key, head .. '.h' .. round, 'PX', ttl_ms).err then
      handoff = false
      message = head
    end
    -- A refused publish (publish_wake's pcall) ends the loop; the waiter then finds the lock
    -- free at its next poll.
    local receivers = publish_wake(channel, message)
    if type(receivers) ~= 'number' then break end
    if receivers > 0 then
      if handoff then
        handed = true
        redis.call('SET', fence_key, fence, 'PX', ttl_ms)
        touch('ZREM', queue, head)
        touch('HDEL', info, head)
      end
      break
    end
  end
  touch('ZREM', queue, head)
  touch('HDEL', info, head)
end
if not handed then redis.call('DEL', key) end
return 1
