-- SPDX-License-Identifier: Apache-2.0
-- Give back a semaphore permit (or leave the queue), and pass the permits it freed on to the
-- waiters. Removes only this owner's entries. Serves both variants.
-- KEYS[1]: the expiry set (holders, or the fair variant's timeouts); KEYS[2]: weights;
-- KEYS[3]: the queue in ticket order (unfair: the waiter queue; fair: owners, where holders
--          rank too); KEYS[4]: waiter info: token -> "<deadline ms>[ <wake channel>[ h<permits>:
--          <ttl ms>:<attempt>:<limit>| f...| woken]]" ("h" unfair, "f" fair: a handoff offer),
--          present for queued waiters only (sem_acquire.lua, sem_fair_acquire.lua); KEYS[5]: the
--          fencing counter (for handoffs); KEYS[6]: the fair variant's ticket counter, which
--          expires with its last member; KEYS[7]: the name's own key, which the holders mark
--          with ARGV[4] (name_mark.lua): the mark goes with the last holder. A solo holder's
--          value there ("<mark> <token> <permits>", name_mark.lua) is deleted by its own
--          release, and made one of the holders by any other (adopt_solo).
-- ARGV[1]: the owner token; ARGV[2]: the limit (for handoffs; "" for none); ARGV[3]: "fair" for
--          the fair variant, whose waiters serve_fair_line (below) serves; ARGV[4]: the mark
--          (read_write_lock_mark or semaphore_mark, key_layout.hpp); without it (a caller of an
--          earlier version) KEYS[7] is ignored.
-- Returns 1 when the token had an unexpired entry in KEYS[1], 0 when it was gone or already
-- expired (an expired entry is removed too: it was ours, and no one else's entry is touched).
-- Passing on: a live holder frees its weight in permits (1 unless weights says more); a waiter
-- that leaves frees none, but hands on a wake-up it got and will not use, and a fair one also
-- lets those behind it move up (as if it freed what it wanted). The first live waiters in ticket
-- order that have a channel and were not woken yet are served until that many permits are
-- passed on, each counting what it wants (weights; 1 for an unfair waiter): the fair variant's
-- differently (serve_fair_line). One whose entry accepts a handoff (the unfair variant's "h"
-- field) and whose permits fit in the limit now is made a holder right here, with a fence, and
-- sent "<token> <fence> <attempt>" (as release.lua hands a lock over); any other is sent its
-- token, a wake-up, and its entry is marked "woken", so that another release serves the next
-- waiter instead (its next attempt rewrites the entry, clearing the mark). The publish's count
-- says whether the waiter still listens: none means its process is gone, and a handoff to it is
-- undone. Waiters without a channel (polling only) are passed over; those whose deadline passed
-- (they crashed) are dropped. An expired entry frees nothing here: its permits came back at its
-- expiry.
local name, owner, mark_arg = KEYS[7], ARGV[1], ARGV[4]
if not mark_arg or mark_arg == '' then name = nil end

-- Read before anything is written: a name's key that is no lock raises WRONGTYPE here, and a
-- script is not rolled back. Held by another kind of lock: nobody in this line can hold now.
local name_value = name and redis.call('GET', name)

-- A solo holder's release (name_mark.lua: "<mark> <token> <permits>" in the name's key, and no
-- other key) is a compare-and-delete. Nobody else held or waited when it was granted (its
-- transaction's EXISTS of the line, semaphore_protocol.hpp), and any script that came since
-- would have made it one of the holders, so there is no one to tell.
-- The token is random and only its holder writes it, so finding it where the mark ends, a space
-- after it, tells the value (cheaper than building the value to compare: this runs every
-- uncontended cycle). The space matters: a settled hold's token is "<token>:settled", which
-- the old token's release must leave alone.
local at = name_value and owner ~= '' and #mark_arg + 2
if at and string.find(name_value, owner, at, true) == at and
    string.byte(name_value, at + #owner) == 32 then
  redis.call('DEL', name)
  return 1
end
local expiries, weights, queue, info, fence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local tickets = KEYS[6]
local limit, fair = tonumber(ARGV[2] or ''), ARGV[3] == 'fair'
local name_held = name ~= nil and name_value ~= false and name_value ~= ARGV[4]

-- The release nobody waits for comes first, before the script defines what a handoff needs
-- (every function defined costs a closure at every run): the token is the only member of the
-- expiry set, and nobody queues (the fair variant's waiters are members of that set too: what
-- else its line holds is dead, and the walk below would drop it). The keys then go whole, and
-- the mark with them.
local only = redis.call('ZRANGE', expiries, '0', '1', 'WITHSCORES')
if only[1] == owner and not only[3] and (fair or redis.call('EXISTS', queue, info) == 0) then
  local t = redis.call('TIME')
  local live = tonumber(only[2]) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if name and name_value == ARGV[4] then
    redis.call('DEL', expiries, weights, queue, info, name)
  else
    redis.call('DEL', expiries, weights, queue, info)
  end
  return live and 1 or 0
end

-- #include node_state.lua
-- #include wake.lua
-- #include sem_holders.lua
-- #include name_mark.lua
-- #include name_kinds.lua
if name then mark = ARGV[4] end

local now = server_ms()

-- Another token's solo holder becomes one of the holders first (adopt_solo), so that the
-- permits counted below include its own.
if name then
  local adopt = fair and adopt_fair(queue, expiries, weights, tickets) or
                    adopt_unfair(expiries, weights)
  name_value = adopt_solo(name, now, adopt, name_value)  -- nothing wrote the name since
  name_held = name_value ~= false and name_value ~= ARGV[4]
end

-- The first of the expiry set, read above, is often this token (a semaphore of one permit):
-- its score then needs no ZSCORE. An adopted solo holder is another token, and moves no score.
local expiry = only[1] == owner and only[2] or redis.call('ZSCORE', expiries, owner)
local live = expiry and tonumber(expiry) > now
local entry = redis.call('HGET', info, owner)
local to_wake = 0
-- What the token's entry weighs: its permits, held or (fair) wanted.
local weighed = redis.call('HGET', weights, owner)
local weight = tonumber(weighed) or 1
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
if weighed then redis.call('HDEL', weights, owner) end
-- Unconditional: the fair variant's holders rank in the queue without an entry in info.
redis.call('ZREM', queue, owner)
if entry then redis.call('HDEL', info, owner) end

-- Whether a waiter's offer (its limit) may be taken up here: where the name is marked, the mark
-- stores the limit, and a waiter of another limit would hold beside it under the wrong mark.
local function same_limit(their_limit)
  return not name or tonumber(their_limit) == limit
end

-- Permits in use by live holders, for a handoff (as sem_acquire.lua counts them). Also notes
-- whether the weights hash exists: an empty hash is no key, and a hand_over then needs no
-- EXISTS to know that it has no expiry to push out.
local weights_exist = true
local function permits_used()
  drop_expired_holders(expiries, weights, now)
  local used, weighted = permits_in_use(expiries, weights)
  weights_exist = weighted > 0
  return used
end

-- The name's mark is pushed out before each grant's publish (hand_over); `marked_until` is the
-- latest expiry given to it so, and `handed_until` the latest of the grants that stood. When
-- the grants that stood reach at least as far as both that and the releasing token's own
-- expiry, the mark is exactly as long as the latest holder's, and the remark at the end (three
-- more calls) is not needed.
local marked_until, handed_until = 0, 0

-- Makes `member` a holder of `want` permits for `ttl_ms` and tells it. Every write comes before
-- the publish, so that no failure midway comes after the waiter was told. Returns 'handed';
-- 'gone' when no one listens on its channel any more; 'refused' when the publish was (an ACL
-- without the channel): the grant is undone in both; 'holder' when it holds already (a grant
-- whose entry an error left queued): it is left as it is.
local function hand_over(member, channel, want, ttl_ms, attempt)
  if redis.call('ZSCORE', expiries, member) then return 'holder' end
  redis.call('ZADD', expiries, now + ttl_ms, member)
  if want > 1 then
    redis.call('HSET', weights, member, want)
    weights_exist = true
  end
  -- Undone by the remark at the end, if undone. The name's value is known here (not held by
  -- another kind, or there would be no handoff): the mark, or none.
  if name then
    mark_name_until(name, now + ttl_ms, now, name_value)
    name_value = mark
    marked_until = math.max(marked_until, now + ttl_ms)
  end
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
    if weights_exist then redis.call('PEXPIREAT', weights, last[2]) end
    handed_until = math.max(handed_until, now + ttl_ms)
    return 'handed'
  end
  redis.call('ZREM', expiries, member)
  redis.call('HDEL', weights, member)
  return type(receivers) == 'number' and 'gone' or 'refused'
end

-- The fair variant. A waiter is granted when the permits of everyone live in line up to and
-- including it, holders and waiters alike, fit in the limit (sem_fair_acquire.lua). So the
-- walk goes down the line in ticket order adding up what each wants, and ends where the sum
-- passes the limit: nobody behind that point can be granted now. Each waiter before it that
-- offers a handoff (" f<permits>:<ttl ms>:<attempt>:<limit>") is made a holder right here and
-- sent "<token> <fence> <attempt>", so that a writer's release lets the whole batch of readers
-- behind it in with this one script; one that offers none (woken already, or of an earlier
-- version) is woken; one without a channel finds its permit at its next poll. Members whose
-- expiry passed are dropped, as sem_fair_acquire.lua drops them.
local function drop_from_line(member)
  redis.call('ZREM', queue, member)
  redis.call('ZREM', expiries, member)
  redis.call('HDEL', weights, member)
  redis.call('HDEL', info, member)
end
local function serve_fair_line()
  local handed = false
  local quarantined = quarantine_left() > 0
  local in_line = 0  -- the permits wanted by the live members walked so far
  local start = 0
  while true do
    local batch = redis.call('ZRANGE', queue, start, start + 99)
    if #batch == 0 then return handed end
    local wants = redis.call('HMGET', weights, unpack(batch))
    local entries = redis.call('HMGET', info, unpack(batch))
    local dropped = 0
    for i, member in ipairs(batch) do
      local expiry = tonumber(redis.call('ZSCORE', expiries, member))
      if not expiry or expiry <= now then
        drop_from_line(member)
        dropped = dropped + 1
      else
        local want = tonumber(wants[i]) or 1
        in_line = in_line + want
        if in_line > limit then return handed end
        local place, channel, rest
        if entries[i] then
          place, channel, rest = string.match(entries[i], '^(%d+ (%S+)) ?(.*)$')
        end
        if channel then  -- a waiter that listens (holders have no entry)
          local ttl_ms, attempt, their_limit = string.match(rest, '^f%d+:(%d+):(%d+):(%d+)$')
          -- No handoff in quarantine, which grants nothing; within the smaller limit, as in
          -- the unfair variant.
          -- While another kind holds the name, the waiters are only woken: their next attempt
          -- learns what holds it, and watches that key.
          -- Nor to a waiter that counts another limit where the name is marked (as above).
          if ttl_ms and not quarantined and not name_held and same_limit(their_limit) and
              in_line <= tonumber(their_limit) then
            ttl_ms = tonumber(ttl_ms)
            -- The place in line becomes a holder's permit: same ticket, the TTL as its expiry.
            -- Every write comes before the publish, as in hand_over: the name's mark too.
            local until_ms = math.max(expiry, now + ttl_ms)
            redis.call('ZADD', expiries, until_ms, member)
            mark_name_until(name, until_ms, now)
            -- The line's keys live as long as their last member (pushed out at the end too):
            -- an error later in this script must not let them expire under a told holder.
            for _, key in ipairs({queue, expiries, weights, info, tickets}) do
              local left = redis.call('PTTL', key)
              if left >= 0 and now + left < until_ms then redis.call('PEXPIREAT', key, until_ms) end
            end
            local fence = string.format('%.0f', next_fence(fence_key, now, ttl_ms))
            local receivers = publish_wake(channel, member .. ' ' .. fence .. ' ' .. attempt)
            if type(receivers) ~= 'number' then
              -- Refused (an ACL without the channel): undone; the waiters find their permits
              -- at their next poll.
              redis.call('ZADD', expiries, expiry, member)
              return handed
            elseif receivers > 0 then
              redis.call('HDEL', info, member)
              handed = true
            else
              -- Nobody listens: the waiter's process is gone, and so is its place.
              drop_from_line(member)
              in_line = in_line - want
              dropped = dropped + 1
            end
          elseif rest ~= 'woken' then
            publish_wake(channel, member)
            redis.call('HSET', info, member, place .. ' woken')
          end
        end
      end
    end
    start = start + #batch - dropped
  end
end

local used  -- read once a handoff is weighed
local quarantined = nil
local start = 0
if fair and limit and fence_key then
  -- (Nobody to serve without a waiter's entry.) The keys live as long as their last member,
  -- which a handoff may have become; a handoff undone (nobody listened, or the publish was
  -- refused) may have pushed them out for nothing, and an emptied line keeps none of them.
  if to_wake > 0 and redis.call('EXISTS', info) == 1 then
    serve_fair_line()
    local last = redis.call('ZRANGE', expiries, -1, -1, 'WITHSCORES')
    for _, key in ipairs({queue, expiries, weights, info, tickets}) do
      if not last[2] then
        redis.call('DEL', key)
      elseif redis.call('EXISTS', key) == 1 then
        redis.call('PEXPIREAT', key, last[2])
      end
    end
  end
  to_wake = 0
end
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
          -- Nor while another kind holds the name (its mark was lost under us), nor to a
          -- waiter that counts another limit where the name is marked: it is only woken, and
          -- its next attempt is refused (name_mark.lua), as it would have been had it come now.
          if not quarantined and not name_held and same_limit(their_limit) and
              used + want <= math.min(limit, tonumber(their_limit)) then
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

-- The name's mark lasts as long as the latest holder left (a handoff may have made new ones),
-- and goes with the last: a mutex waiting on the name watches its key, and wakes.
local mark_exact = handed_until > 0 and handed_until >= marked_until and
                       handed_until >= (tonumber(expiry) or 0)
if name and not name_held and not mark_exact then
  remark_name(name, expiries, info, now, name_value)
end
if live then return 1 end
return 0
