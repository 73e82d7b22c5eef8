-- Give back a semaphore permit (or leave the queue), and pass the permits it freed on to the
-- waiters. Removes only this owner's entries. Serves both variants.
-- KEYS[1]: the expiry set (holders, or the fair variant's timeouts); KEYS[2]: weights;
-- KEYS[3]: the queue in ticket order (unfair: the waiter queue; fair: owners, where holders
--          rank too); KEYS[4]: waiter info: token -> "<deadline ms>[ <wake channel>[ h<permits>:
--          <ttl ms>:<attempt>:<limit>| woken]]", present for queued waiters only (sem_acquire.lua,
--          sem_fair_acquire.lua); KEYS[5]: the fencing counter (the unfair variant's handoff).
-- ARGV[1]: the owner token; ARGV[2]: the limit (the unfair variant's handoff; "" for none).
-- Returns 1 when the token had an unexpired entry in KEYS[1], 0 when it was gone or already
-- expired (an expired entry is removed too: it was ours, and no one else's entry is touched).
-- Passing on: a live holder frees its weight in permits (1 unless weights says more); a waiter
-- that leaves frees none, but hands on a wake-up it got and will not use, and a fair one also
-- lets those behind it move up (as if it freed what it wanted). The first live waiters in ticket
-- order that have a channel and were not woken yet are served until that many permits are
-- passed on, each counting what it wants (weights; 1 for an unfair waiter). One whose entry accepts a handoff (the unfair variant's "h" field) and
-- whose permits fit in the limit now is made a holder right here, with a fencing token, and
-- sent "<token> <fence> <attempt>" (as release.lua hands a lock over); any other is sent its
-- token, a wake-up, and its entry is marked "woken", so that another release serves the next
-- waiter instead (its next attempt rewrites the entry, clearing the mark). The publish's count
-- says whether the waiter still listens: none means its process is gone, and a handoff to it is
-- undone. Waiters without a channel (polling only) are passed over; those whose deadline passed
-- (they crashed) are dropped. An expired entry frees nothing here: its permits came back at its
-- expiry.
local expiries, weights, queue, info, fence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, limit = ARGV[1], tonumber(ARGV[2] or '')

-- #include wake.lua
-- #include node_state.lua
-- #include sem_holders.lua

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local expiry = redis.call('ZSCORE', expiries, owner)
local live = expiry and tonumber(expiry) > now
local entry = redis.call('HGET', info, owner)
local to_wake = 0
-- What the token's entry weighs: its permits, held or (fair) wanted.
local weight = tonumber(redis.call('HGET', weights, owner)) or 1
if entry then
  if string.match(entry, ' woken$') then to_wake = 1 end
  -- A fair waiter (its place in line has a live entry in the expiry set too) may be all that
  -- kept those behind it waiting (a read-write lock's writer, ahead of readers): they are
  -- woken as if it had freed what it wanted. The unfair variant's waiters block nobody.
  if live then to_wake = math.max(to_wake, weight) end
elseif live then
  to_wake = weight
end
redis.call('ZREM', expiries, owner)
redis.call('HDEL', weights, owner)
redis.call('ZREM', queue, owner)
redis.call('HDEL', info, owner)

-- Permits in use by live holders, for a handoff (as sem_acquire.lua counts them).
local function permits_used()
  drop_expired_holders(expiries, weights, now)
  return permits_in_use(expiries, weights)
end

-- Makes `member` a holder of `want` permits for `ttl_ms` and tells it. Every write comes before
-- the publish, so that no failure midway comes after the waiter was told. Returns 'handed';
-- 'gone' when no one listens on its channel any more; 'refused' when the publish was (an ACL
-- without the channel): the grant is undone in both; 'holder' when it holds already (a grant
-- whose entry an error left queued): it is left as it is.
local function hand_over(member, channel, want, ttl_ms, attempt)
  if redis.call('ZSCORE', expiries, member) then return 'holder' end
  redis.call('ZADD', expiries, now + ttl_ms, member)
  if want > 1 then redis.call('HSET', weights, member, want) end
  local fence = string.format('%.0f', next_fence(fence_key, now, ttl_ms))
  local receivers = publish_wake(channel, member .. ' ' .. fence .. ' ' .. attempt)
  if type(receivers) == 'number' and receivers > 0 then
    -- The entry goes after the publish; an error in between leaves a holder queued, which
    -- the holder's own release removes.
    redis.call('ZREM', queue, member)
    redis.call('HDEL', info, member)
    -- The holders' keys vanish with the last holder, as sem_acquire.lua keeps them.
    local last = redis.call('ZRANGE', expiries, -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', expiries, last[2])
    if redis.call('EXISTS', weights) == 1 then redis.call('PEXPIREAT', weights, last[2]) end
    return 'handed'
  end
  redis.call('ZREM', expiries, member)
  redis.call('HDEL', weights, member)
  return type(receivers) == 'number' and 'gone' or 'refused'
end

local used  -- read once a handoff is weighed
local quarantined = nil
local start = 0
while to_wake > 0 do
  local batch = redis.call('ZRANGE', queue, start, start + 99)
  if #batch == 0 then break end
  local dropped = 0
  for _, member in ipairs(batch) do
    local e = redis.call('HGET', info, member)
    if e then
      local deadline, channel, rest = string.match(e, '^(%d+) ?(%S*) ?(.*)$')
      local woken = rest ~= nil and string.find(rest, 'woken$') ~= nil
      local want, ttl_ms, attempt
      local their_limit
      if rest then
        want, ttl_ms, attempt, their_limit = string.match(rest, '^h(%d+):(%d+):(%d+):(%d+)')
      end
      if not deadline or tonumber(deadline) <= now then
        redis.call('ZREM', queue, member)
        redis.call('HDEL', info, member)
        redis.call('ZREM', expiries, member)
        redis.call('HDEL', weights, member)
        dropped = dropped + 1
      elseif channel ~= '' and not woken then
        local outcome
        if want and limit and fence_key then
          want = tonumber(want)
          if quarantined == nil then quarantined = quarantine_left() > 0 end
          used = used or permits_used()
          -- No handoff in quarantine, which grants nothing: the waiter is only woken.
          -- Within the smaller limit: clients that disagree (a limit being lowered) never
          -- grant past either.
          if not quarantined and used + want <= math.min(limit, tonumber(their_limit)) then
            outcome = hand_over(member, channel, want, tonumber(ttl_ms), attempt)
          end
        end
        if outcome == 'handed' then
          used = used + want
          to_wake = to_wake - want
          dropped = dropped + 1
        elseif outcome == 'gone' or outcome == 'holder' then
          redis.call('ZREM', queue, member)
          redis.call('HDEL', info, member)
          dropped = dropped + 1
        elseif outcome == 'refused' then
          -- The waiters find the permits at their next poll.
          to_wake = 0
        else
          -- A refused publish (publish_wake's pcall) leaves the waiter to find the permit at
          -- its next poll.
          -- The mark replaces the handoff offer (moot until the waiter's next attempt rewrites
          -- the entry): "<deadline> <channel> woken" is also what a release of an earlier
          -- version reads (three fields; four would make it drop the waiter).
          publish_wake(channel, member)
          redis.call('HSET', info, member, deadline .. ' ' .. channel .. ' woken')
          -- A woken waiter takes what it wants of the permits passed on (the fair variant
          -- keeps waiters' wants in weights; 1 otherwise): a read-write lock's writer that
          -- releases wakes the readers behind it up to and including the next writer.
          to_wake = to_wake - (tonumber(redis.call('HGET', weights, member)) or 1)
        end
        if to_wake <= 0 then break end
      end
    end
  end
  start = start + #batch - dropped
end

if live then return 1 end
return 0
