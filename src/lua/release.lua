-- Release a lock only if this owner holds it (compare-and-delete), and wake the next waiter.
-- KEYS[1]: the lock key; KEYS[2]: the waiter queue; KEYS[3]: waiter info (see acquire.lua).
-- ARGV[1]: the owner token.
-- Returns 1 when the key held the token and was deleted, 0 when it was gone or someone else's.
-- Only the queue's first live waiter is told (PUBLISH of its token on its wake channel), so a
-- release wakes one waiter, not all of them.
local key, queue, info = KEYS[1], KEYS[2], KEYS[3]
local owner = ARGV[1]

if redis.call('GET', key) ~= owner then
  return 0
end
redis.call('DEL', key)
if redis.call('EXISTS', queue) == 1 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then break end
    local entry = redis.call('HGET', info, head)
    local deadline, channel
    if entry then deadline, channel = string.match(entry, '^(%d+) (.+)$') end
    if deadline and tonumber(deadline) > now then
      -- pcall: the key is already deleted (a script is never rolled back), so a refused
      -- PUBLISH (an ACL user without the channel) must not turn this release into an error;
      -- the waiter then finds the lock free at its next poll.
      redis.pcall('PUBLISH', channel, head)
      break
    end
    redis.call('ZREM', queue, head)
    redis.call('HDEL', info, head)
  end
end
return 1
