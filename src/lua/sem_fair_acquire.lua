-- SPDX-License-Identifier: Apache-2.0
-- Take permits of a fair (first come, first served) counting semaphore, atomically, judged by
-- the server's clock. Each new arrival draws a ticket from a counter; the owners set ranks by
-- ticket, so nobody who came later can take a permit before an earlier waiter.
-- KEYS[1]: owners, a sorted set: member = owner token, score = its ticket.
-- KEYS[2]: timeouts, a sorted set: member = owner token, score = its expiry in server ms (a
--          holder's TTL, or a queued waiter's short lease that each poll renews).
-- KEYS[3]: weights, a hash: owner token -> permits wanted, only for more than one.
-- KEYS[4]: the ticket counter; it expires with the last member, and a ticket it gives that
--          is not above the highest still in line is moved above it.
-- KEYS[5]: waiter info, a hash: owner token -> "<deadline ms>[ <wake channel>[ <offer>]]" for
--          every queued waiter (ARGV[6]; " woken" replaces the offer once sem_release.lua woke
--          it); holders have none.
-- KEYS[6]: the fencing counter, drawn at each grant; it expires one TTL after it was set
--          (next_fence, in node_state.lua).
-- ARGV[1]: the owner token; ARGV[2]: the limit; ARGV[3]: permits wanted (1..limit);
-- ARGV[4]: the TTL in milliseconds; ARGV[5]: how long to keep a place in the queue when not
--          granted, in milliseconds (0: leave at once, as a non-blocking try does, or keep
--          the place an earlier attempt queued for, as it stands, for the give-up to remove);
-- ARGV[6]: the wake channel a release may PUBLISH our token on while we queue, or "";
--          "<wake channel> <attempt>" to queue and accept a handoff: a release whose walk down
--          the line finds our permits fit makes us a holder itself (sem_release.lua) and sends
--          "<token> <fence> <attempt>". The entry then carries " f<permits>:<ttl ms>:<attempt>:
--          <limit>" ("f", not the unfair variant's "h": a release of an earlier version, which
--          would hand over as to an unfair waiter, only wakes such an entry).
-- KEYS[7]: the name's own key, which the holders mark with ARGV[7] (name_mark.lua): a read-
--          write lock grants nobody while a lock of the name holds it, and is refused (WRONGTYPE)
--          where another kind holds it; a semaphore is refused wherever anything but its own
--          mark holds it (another kind, or a semaphore of another limit or fairness).
--          A solo holder there ("<mark> <token> <permits>", granted by plain commands:
--          semaphore_protocol.hpp) first takes the line's first place (adopt_solo).
-- ARGV[7]: the mark: read_write_lock_mark or semaphore_mark(limit, fair) (key_layout.hpp);
--          without it, KEYS[7] is ignored (no mark, as callers of earlier versions).
-- Returns {1, fence, rank} when granted (also when this token already holds: a retried attempt
-- whose reply was lost, which draws a new fence), {0, ticket, rank} when queued, {0, 0, rank}
-- when not granted and not queued; {0, ticket or 0, rank, 1} when the name's own key is held by
-- another kind of lock or another client, whose release wakes nobody in this line: the waiter
-- watches that key. Time comes from TIME.
local owners, timeouts, weights, counter, info = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local fence_key, name = KEYS[6], KEYS[7]
local owner, limit, want = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local ttl_ms, queue_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local channel, attempt = string.match(ARGV[6] or '', '^(%S*) ?(%d*)$')
channel, attempt = channel or '', attempt or ''
if not ARGV[7] or ARGV[7] == '' then name = nil end

-- #include node_state.lua
local now  -- the server's time in ms, read once the checks that need none passed

-- The fence is drawn at the grant, not at arrival: with a limit above 1, waiters may be granted
-- out of ticket order (the one that polls first), and fences must grow in grant order. A
-- counter that does not exist yet also starts above every ticket so far, because earlier
-- versions handed out the tickets as fences. Most draws find it: next_fence's INCR is kept
-- where next_fence would keep it, and is undone otherwise, so that the draw goes the full way
-- (which saves asking first whether the counter exists).
local function draw_fence()
  local fence = redis.call('INCR', fence_key)
  if fence >= fence_clock_range and fence > fence_floor() then return fence end
  if fence == 1 then redis.call('DEL', fence_key) else redis.call('INCRBY', fence_key, '-1') end
  if redis.call('EXISTS', fence_key) == 0 then
    local start = math.max(tonumber(redis.call('GET', counter) or '0'), now * 1024)
    redis.call('SET', fence_key, string.format('%.0f', start), 'PX', ttl_ms)
  end
  return next_fence(fence_key, now, ttl_ms)
end

-- #include name_mark.lua
if name then mark = ARGV[7] end

-- The uncontended grant comes first, before the script defines what a wait needs (every
-- function defined costs a closure at every run): nobody is in line and the name's key does
-- not exist (one EXISTS of them all; a name marked by this kind already goes the full way,
-- which reads it), no quarantine. It writes what the full way below would: a ticket from the
-- counter, the entries, the keys' expiry (expire_with_last_member's), the mark, the fence.
if want <= limit and redis.call('EXISTS', owners, timeouts, info, weights, name or owners) == 0 and
    quarantine_left() == 0 then
  now = server_ms()
  local expiry = string.format('%.0f', now + ttl_ms)  -- one conversion for its uses
  redis.call('ZADD', owners, redis.call('INCR', counter), owner)
  redis.call('ZADD', timeouts, expiry, owner)
  redis.call('PEXPIREAT', owners, expiry)
  redis.call('PEXPIREAT', timeouts, expiry)
  if want > 1 then
    redis.call('HSET', weights, owner, want)
    redis.call('PEXPIREAT', weights, expiry)
  end
  redis.call('PEXPIREAT', counter, expiry)
  mark_name_until(name, now + ttl_ms, now, false)
  return {1, draw_fence(), 0}
end

now = server_ms()

-- #include name_kinds.lua

-- A counter that a plain INCR made (the solo grant's, which found no counter: semaphore_protocol
-- .hpp) holds no token and no expiry: it goes before any answer, as acquire.lua's does. (pcall:
-- a counter of another type is for the grant to report.)
local counted = redis.pcall('GET', fence_key)
counted = type(counted) == 'string' and tonumber(counted)
if counted and counted < fence_clock_range then redis.call('DEL', fence_key) end

-- Read before anything else is written: a name's key of another kind is refused here (a key
-- that is no string raises WRONGTYPE), and a script is not rolled back. A solo holder of this
-- kind first takes the line's first place (or goes: adopt_fair).
local adopted = adopt_solo(name, now, adopt_fair(owners, timeouts, weights, counter))
local refused, name_held = read_name(name, adopted)
if refused then return refused end
local function not_granted(ticket_or_0, rank)
  if name_held then return {0, ticket_or_0, rank, 1} end
  return {0, ticket_or_0, rank}
end

-- The keys vanish by themselves when the last member's expiry passes, all five at once: owners
-- must never outlive timeouts, or members whose expiry and weight are gone would stay in line
-- for good; the counter goes with them (sem_refresh.lua keeps it too), and a ticket it gives
-- that is not above the tickets in line (it went anyway: a client of an earlier version
-- refreshed) is moved above them, below.
local function expire_with_last_member()
  local last = redis.call('ZRANGE', timeouts, -1, -1, 'WITHSCORES')
  if not last[2] then return end
  for _, key in ipairs({owners, timeouts, weights, info, counter}) do
    if redis.call('EXISTS', key) == 1 then redis.call('PEXPIREAT', key, last[2]) end
  end
end

-- Drop expired holders and waiters that stopped polling from the timeouts set; intersecting
-- with weights 0 (timeouts) and 1 (owners) drops them from owners too and keeps the tickets.
-- ZINTERSTORE writes owners anew, without its expiry, which is therefore set again at once
-- (an attempt that neither is granted nor queues would otherwise leave it unset). An expired holder's permits come back without a wake-up: the waiters' next poll
-- finds them.
-- An owners set without an expiry is one an earlier version of this script left behind: it may
-- hold members whose timeout is gone, and is cleaned up the same way.
local expired = redis.call('ZRANGEBYSCORE', timeouts, '-inf', now)
if #expired > 0 or redis.call('PTTL', owners) == -1 then
  redis.call('ZREMRANGEBYSCORE', timeouts, '-inf', now)
  for i = 1, #expired, 1000 do
    redis.call('HDEL', weights, unpack(expired, i, math.min(i + 999, #expired)))
    redis.call('HDEL', info, unpack(expired, i, math.min(i + 999, #expired)))
  end
  redis.call('ZINTERSTORE', owners, 2, timeouts, owners, 'WEIGHTS', 0, 1)
  expire_with_last_member()
end

-- The entry's expiry only moves out, never back: an attempt that lands late (after a later
-- attempt of this acquisition was granted and extended) must not cut the holder's permit short.
local function keep(expiry)
  local current = redis.call('ZSCORE', timeouts, owner)
  if not current or expiry > tonumber(current) then redis.call('ZADD', timeouts, expiry, owner) end
  expire_with_last_member()
end

local ticket = redis.call('ZSCORE', owners, owner)
if ticket then
  ticket = tonumber(ticket)
else
  ticket = redis.call('INCR', counter)
  -- A newcomer is never ranked ahead of anyone still in line, whatever became of the counter:
  -- it may have expired under a holder an earlier version's refresh kept, and such a client
  -- may have started it again at 1, which would let too many holders in.
  local last = redis.call('ZRANGE', owners, -1, -1, 'WITHSCORES')
  if last[2] and ticket <= tonumber(last[2]) then
    ticket = tonumber(last[2]) + 1
    redis.call('SET', counter, string.format('%.0f', ticket))
  end
  redis.call('ZADD', owners, ticket, owner)
end
-- Written on every attempt, not only the first: a weight that went missing (see above) would
-- count the token as one permit.
if want > 1 then redis.call('HSET', weights, owner, want) end

-- Granted when the permits wanted by everyone up to and including us fit in the limit.
local rank = redis.call('ZRANK', owners, owner)
if rank < limit and quarantine_left() == 0 and not name_held then
  local used = rank + 1
  if redis.call('EXISTS', weights) == 1 then
    local ahead = redis.call('ZRANGE', owners, 0, rank)
    for i = 1, #ahead, 1000 do
      local wanted = redis.call('HMGET', weights, unpack(ahead, i, math.min(i + 999, #ahead)))
      for _, w in ipairs(wanted) do used = used + (tonumber(w) or 1) - 1 end
    end
  end
  if used <= limit then
    redis.call('HDEL', info, owner)
    keep(now + ttl_ms)
    -- Gone already when a TTL of a millisecond or so ran out while this script ran (PEXPIREAT
    -- deletes a key whose time has come): the grant is born expired, the mark as short.
    mark_name_until(name, tonumber(redis.call('ZSCORE', timeouts, owner)) or now + ttl_ms, now)
    return {1, draw_fence(), rank}
  end
end

-- A token that holds a permit (a live expiry and no waiter entry: a release handed it over, or
-- an earlier attempt's answer was lost) and is refused, which only quarantine does, neither
-- queues nor leaves: its entries stay for the give-up, as sem_acquire.lua keeps them in
-- quarantine (an engine that accepted a handoff meanwhile holds the permit; one that did not
-- gives it back). An offer queued onto a holder would be handed over again after quarantine.
local place = redis.call('HGET', info, owner)
local expiry = redis.call('ZSCORE', timeouts, owner)
if expiry and not place then return not_granted(0, rank) end

if queue_ms > 0 then
  -- Rewriting the entry clears a " woken" mark: this poll was the wake-up's answer.
  local entry = tostring(now + queue_ms)
  if channel ~= '' then
    entry = entry .. ' ' .. channel
    if attempt ~= '' then
      entry = entry .. ' f' .. want .. ':' .. ttl_ms .. ':' .. attempt .. ':' .. limit
    end
  end
  redis.call('HSET', info, owner, entry)
  keep(now + queue_ms)
  return not_granted(ticket, rank)
end
-- Not queueing (a try, or an acquisition's last attempt). A live place that an earlier attempt
-- of this acquisition queued for with a wake channel stays until the give-up that follows
-- (sem_release.lua, which the engine sends after any attempt queued with a channel), so that
-- its leaving wakes those it kept waiting. Any other entry of this token goes now.
if expiry and string.find(place, ' ', 1, true) then return not_granted(0, rank) end
redis.call('ZREM', owners, owner)
redis.call('ZREM', timeouts, owner)
redis.call('HDEL', weights, owner)
redis.call('HDEL', info, owner)
-- A ticket this attempt drew may have made the counter, without an expiry: nobody else in line
-- holds a ticket then, so it goes.
if redis.call('PTTL', counter) == -1 then
  if redis.call('EXISTS', timeouts) == 1 then
    expire_with_last_member()
  else
    redis.call('DEL', counter)
  end
end
return not_granted(0, rank)
