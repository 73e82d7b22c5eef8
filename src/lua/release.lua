-- Release a lock only if this owner holds it (compare-and-delete), and pass it on.
-- KEYS[1]: the lock key; KEYS[2]: the waiter queue; KEYS[3]: waiter info; KEYS[4]: the fencing
-- counter (see acquire.lua). ARGV[1]: the owner token.
-- Returns 1 when the key held the token and was deleted, 0 when it was gone or someone else's.
-- Only the queue's first live waiter is told, so a release wakes one waiter, not all of them.
-- A waiter whose entry asks for a handoff ("<deadline> <channel> <ttl ms> <attempt>") is given
-- the lock right here: the key is set to its token and it is sent "<token> <fence> <attempt>",
-- which saves it the round trip of trying again. Any other waiter is sent its token, a wake-up.
-- PUBLISH counts the subscribers that got the message: none means the waiter's process is gone
-- (its connection closed), so its entry is dropped and the next one is served instead.
local key, queue, info, fence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner = ARGV[1]

if redis.call('GET', key) ~= owner then
  return 0
end
redis.call('DEL', key)
if redis.call('EXISTS', queue) == 0 then
  return 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
while true do
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if not head then break end
  local entry = redis.call('HGET', info, head)
  local deadline, channel, ttl_ms, attempt
  if entry then
    deadline, channel, ttl_ms, attempt = string.match(entry, '^(%d+) (%S+) ?(%d*) ?(%d*)$')
  end
  if deadline and tonumber(deadline) > now then
    local handoff = ttl_ms ~= '' and attempt ~= ''
    local message = head
    local fence
    if handoff then
      -- Drawn only once someone received it (below): a vanished waiter leaves no gap.
      fence = (tonumber(redis.call('GET', fence_key)) or 0) + 1
      message = head .. ' ' .. fence .. ' ' .. attempt
    end
    -- pcall: the key is already deleted (a script is never rolled back), so a refused PUBLISH
    -- (an ACL user without the channel) must not turn this release into an error; the waiter
    -- then finds the lock free at its next poll.
    local receivers = redis.pcall('PUBLISH', channel, message)
    if type(receivers) ~= 'number' then break end
    if receivers > 0 then
      if handoff then
        redis.call('SET', fence_key, fence)
        redis.call('SET', key, head, 'PX', ttl_ms)
        redis.call('ZREM', queue, head)
        redis.call('HDEL', info, head)
      end
      break
    end
  end
  redis.call('ZREM', queue, head)
  redis.call('HDEL', info, head)
end
return 1
