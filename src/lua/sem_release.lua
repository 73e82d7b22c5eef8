-- Give back a semaphore permit (or leave the queue), and wake as many waiters as permits it
-- freed. Removes only this owner's entries. Serves both variants.
-- KEYS[1]: the expiry set (holders, or the fair variant's timeouts); KEYS[2]: weights;
-- KEYS[3]: the queue in ticket order (unfair: the waiter queue; fair: owners, where holders
--          rank too); KEYS[4]: waiter info: token -> "<deadline ms>[ <wake channel>[ woken]]",
--          present for queued waiters only (see sem_acquire.lua, sem_fair_acquire.lua).
-- ARGV[1]: the owner token.
-- Returns 1 when the token had an unexpired entry in KEYS[1], 0 when it was gone or already
-- expired (an expired entry is removed too: it was ours, and no one else's entry is touched).
-- Wake-ups: a live holder frees its weight in permits (1 unless weights says more); a waiter
-- that leaves frees none, but hands on a wake-up it got and will not use. That many of the first
-- live waiters in ticket order that have a channel and were not woken yet each get their token
-- PUBLISHed on their channel, and their entry is marked " woken", so that another release
-- wakes the next waiter instead (their next attempt rewrites the entry, clearing the mark).
-- Waiters without a channel (polling only) are passed over; those whose deadline passed (they
-- crashed) are dropped. An expired entry frees nothing here: its permits came back at its expiry.
local expiries, weights, queue, info = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner = ARGV[1]

-- #include wake.lua

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local expiry = redis.call('ZSCORE', expiries, owner)
local live = expiry and tonumber(expiry) > now
local entry = redis.call('HGET', info, owner)
local to_wake = 0
if entry then
  if string.match(entry, ' woken$') then to_wake = 1 end
elseif live then
  to_wake = tonumber(redis.call('HGET', weights, owner)) or 1
end
redis.call('ZREM', expiries, owner)
redis.call('HDEL', weights, owner)
redis.call('ZREM', queue, owner)
redis.call('HDEL', info, owner)

local start = 0
while to_wake > 0 do
  local batch = redis.call('ZRANGE', queue, start, start + 99)
  if #batch == 0 then break end
  local dropped = 0
  for _, member in ipairs(batch) do
    local e = redis.call('HGET', info, member)
    if e then
      local deadline, channel, woken = string.match(e, '^(%d+) ?(%S*) ?(%S*)$')
      if not deadline or tonumber(deadline) <= now then
        redis.call('ZREM', queue, member)
        redis.call('HDEL', info, member)
        redis.call('ZREM', expiries, member)
        redis.call('HDEL', weights, member)
        dropped = dropped + 1
      elseif channel ~= '' and woken == '' then
        -- A refused publish (publish_wake's pcall) leaves the waiter to find the permit at
        -- its next poll.
        publish_wake(channel, member)
        redis.call('HSET', info, member, e .. ' woken')
        to_wake = to_wake - 1
        if to_wake == 0 then break end
      end
    end
  end
  start = start + #batch - dropped
end

if live then return 1 end
return 0
