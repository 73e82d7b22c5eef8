-- Acquire a lock and draw its fencing token, atomically; optionally queue as a waiter.
-- KEYS[1]: the lock key (value = owner token, expiry = PX).
-- KEYS[2]: the lock's fencing counter; it never expires.
-- KEYS[3]: the waiter queue (zset: owner token -> ticket); KEYS[4]: waiter info (hash: owner
--          token -> "<deadline ms> <wake channel>"); KEYS[5]: the ticket counter. All five keys
--          share one hash slot.
-- ARGV[1]: the owner token; ARGV[2]: the TTL in ms;
-- ARGV[3]: "<waiter ttl ms> <wake channel>" to queue when not granted, or "" not to queue;
--          "<waiter ttl ms> <wake channel> <ttl ms> <attempt>" to queue and accept a handoff:
--          release.lua then gives the lock straight to this waiter, for <ttl ms>, and names
--          <attempt> (the waiter's count of its attempts) so that the waiter can date the grant;
-- ARGV[4]: "fair" to grant only to the queue's head (or when the queue is empty), else "".
-- Returns {1, fence} when granted (also when the key already holds this owner's token, e.g. a
-- late SET of our own earlier attempt, or a handoff), {0, holder's PTTL} when not (0 when the
-- lock is free but another waiter is ahead in fair mode), and a WRONGTYPE error when the key
-- holds something that is not a lock (SET NX alone would say "busy" forever; GET raises it).
local key, fence_key, queue, info, tickets = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, ttl_ms, waiter, fair = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == 'fair'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The first waiter whose deadline has not passed; dead ones (crashed waiters) are dropped.
local function live_head(now)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then return nil end
    local entry = redis.call('HGET', info, head)
    local deadline = entry and tonumber(string.match(entry, '^(%d+)'))
    if deadline and deadline > now then return head end
    redis.call('ZREM', queue, head)
    redis.call('HDEL', info, head)
  end
end

-- `fence`: the token already drawn for this ownership, or nil to draw a new one.
local function grant(fence)
  if waiter ~= '' or fair then
    redis.call('ZREM', queue, owner)
    redis.call('HDEL', info, owner)
  end
  return {1, fence or redis.call('INCR', fence_key)}
end

local now
local our_turn = true
if fair then
  now = now_ms()
  local head = live_head(now)
  our_turn = head == nil or head == owner
end

if our_turn and redis.call('SET', key, owner, 'NX', 'PX', ttl_ms) then
  return grant()
end
if redis.call('GET', key) == owner then
  -- Whatever set our token (a late SET of ours, a handoff) drew a fence then, and nobody can
  -- have drawn one since, so the counter still reads it: drawing again would only leave gaps.
  redis.call('PEXPIRE', key, ttl_ms)
  return grant(tonumber(redis.call('GET', fence_key)))
end

if waiter ~= '' then
  now = now or now_ms()
  local waiter_ttl, rest = string.match(waiter, '^(%d+) (.+)$')
  if redis.call('ZSCORE', queue, owner) == false then
    redis.call('ZADD', queue, redis.call('INCR', tickets), owner)
  end
  redis.call('HSET', info, owner, (now + tonumber(waiter_ttl)) .. ' ' .. rest)
  -- The queue vanishes on its own once every waiter is gone.
  for _, k in ipairs({queue, info, tickets}) do
    redis.call('PEXPIRE', k, 2 * tonumber(waiter_ttl))
  end
end
return {0, math.max(redis.call('PTTL', key), 0)}
