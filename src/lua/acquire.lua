-- SPDX-License-Identifier: Apache-2.0
-- Acquire a lock and draw its fencing token, atomically; optionally queue as a waiter.
-- KEYS[1]: the lock key (value = owner value, expiry = PX).
-- KEYS[2]: the lock's fencing counter; it expires one TTL after it was set (next_fence, in
--          node_state.lua).
-- KEYS[3]: the waiter queue (zset: acquisition id -> ticket); KEYS[4]: waiter info (hash:
--          acquisition id -> "<deadline ms> <wake channel>"); KEYS[5]: the ticket counter. All
--          five keys share one hash slot (dlock/key_layout.hpp).
-- ARGV[1]: this round's owner value, "<acquisition id>.<round>": each round of an acquisition
--          writes a value of its own, so that a release sent for one round (compare-and-delete
--          on the exact value) can never delete the key a later round holds;
-- ARGV[2]: the TTL in ms;
-- ARGV[3]: "<waiter ttl ms> <wake channel>" to queue when not granted, or "" not to queue;
--          "<waiter ttl ms> <wake channel> <ttl ms> <round>" to queue and accept a handoff:
--          release.lua then gives the lock straight to this waiter, for <ttl ms>, under the
--          value "<acquisition id>.h<round>", and names <round> so that the waiter can date it;
-- ARGV[4]: "fair" to grant only to the queue's head (or when the queue is empty), else "".
-- Returns {1, fence} when granted (also when the key already holds an earlier value of this
-- acquisition: a late SET of an earlier round, or a handoff; the key is then rewritten to this
-- round's value, so that a release still in flight for the earlier value finds nothing),
-- {0, holder's PTTL} when not (0 when the lock is free but another waiter is ahead in fair
-- mode; the quarantine's remaining ms when the node is quarantined and the lock is free),
-- {0, holder's PTTL, 1} when the holder is not a dlock client (see the end),
-- and a WRONGTYPE error when the key holds something that is not a lock (SET NX alone would
-- say "busy" forever; GET raises it), or the name is a semaphore's or a latch's
-- (name_mark.lua; a read-write lock's mark is this lock's: it waits for it).
local key, fence_key, queue, info, tickets = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, ttl_ms, waiter, fair = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == 'fair'
local id = string.match(owner, '^[^.]*')

-- #include node_state.lua

local now  -- the server's time in ms, read once it is needed
local function draw_fence() return next_fence(fence_key, now or server_ms, ttl_ms) end

-- `fence`: the token already drawn for this ownership, or nil to draw a new one. A grant always
-- takes the acquisition out of the queue, whether or not this round queued: an entry an
-- earlier round left would otherwise make the holder's own release hand the lock back to it.
-- `first`: round 0's SET NX took the key; there is no earlier round, so that is skipped (a
-- command of every uncontended cycle). Its info entry goes only when a queue entry did. An
-- info entry left without its queue entry (the two keys' expiries may differ by a millisecond)
-- is never read: live_head and release.lua read info for queue members only.
local function grant(fence, first)
  if not first and redis.call('ZREM', queue, id) == 1 then redis.call('HDEL', info, id) end
  return {1, fence or draw_fence()}
end

-- The uncontended grant comes first, before the script defines what only a wait needs: every
-- function defined costs a closure at every run, and most runs end here.
local quarantined = quarantine_left()
if not fair and quarantined == 0 and redis.call('SET', key, owner, 'NX', 'PX', ttl_ms) then
  return grant(nil, owner == id .. '.0')
end

-- A counter that a plain INCR made (acquire_unqueued, which found no counter) holds no token
-- and no expiry: gone before any answer below, a refusal or an error as much as a grant, so
-- that none leaves it behind and no client of an earlier version takes its count for one.
-- (pcall: a counter of another type is for the grant to report, as before.)
local counted = redis.pcall('GET', fence_key)
counted = type(counted) == 'string' and tonumber(counted)
if counted and counted < fence_clock_range then redis.call('DEL', fence_key) end

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

-- #include name_mark.lua
-- #include name_kinds.lua
-- #include waiter_queue.lua

-- Fair: only the queue's head, or anyone when nobody waits.
if fair and quarantined == 0 then
  now = server_ms()
  local head = live_head(now)
  if (head == nil or head == id) and redis.call('SET', key, owner, 'NX', 'PX', ttl_ms) then
    return grant(nil, owner == id .. '.0')
  end
end

-- Where a value of this acquisition stands in its history: round n writes "<id>.<n>", and the
-- handoff to round n's queue entry "<id>.h<n>" comes after round n ran and before round n + 1.
local function order(value)
  local handoff, n = string.match(string.sub(value, #id + 2), '^(h?)(%d+)$')
  if not n then return nil end
  return 2 * tonumber(n) + (handoff == 'h' and 1 or 0)
end

local holder = redis.call('GET', key)
-- A read-write lock's mark, alone or a solo holder's (name_kinds.lua), is this lock's: it waits.
if holder and (solo_of(holder) or holder) ~= rw_mark and kind_of(holder) then
  return kind_error(holder, 'a lock')
end
if holder and string.sub(holder, 1, #id + 1) == id .. '.' then
  local theirs, ours = order(holder), order(owner)
  if holder ~= owner and not (theirs and ours and theirs < ours) then
    -- A later value of ours holds the key: this is an earlier round that ran late. It must not
    -- take the key back (a release still on its way for its value would then delete it), nor
    -- queue.
    return {0, math.max(redis.call('PTTL', key), 0)}
  end
  -- In quarantine, an earlier value of ours may have been restored from disk or a replica
  -- after it was released and the lock taken by another: it is ours no more.
  if quarantined > 0 then return {0, math.max(redis.call('PTTL', key), quarantined)} end
  -- A handoff drew its token with the value (release.lua), and the counter reads it or a later
  -- count nobody claimed (a plain INCR that found the key taken): drawing again would only
  -- leave a gap. Any other value of ours may have been set without a draw: acquire_unqueued's
  -- SET NX runs before its INCR, and a crash or a cut connection can drop the INCR, so the
  -- counter may still read the previous holder's token. A new one is drawn. So is one for a
  -- counter that expired since, that a plain INCR made again, or one below the floor.
  redis.call('SET', key, owner, 'PX', ttl_ms)
  local current = theirs and theirs % 2 == 1 and tonumber(redis.call('GET', fence_key))
  if current and (current < fence_clock_range or current <= fence_floor()) then current = nil end
  return grant(current or nil)
end

if waiter ~= '' then
  now = now or server_ms()
  local waiter_ttl, rest = string.match(waiter, '^(%d+) (.+)$')
  waiter_ttl = tonumber(waiter_ttl)
  queue_waiter(queue, info, tickets, id, now, waiter_ttl, rest)
end
local left = math.max(redis.call('PTTL', key), quarantined)
-- A holder whose value is not dlock's ("<hex id>.<round>" or "<hex id>.h<round>") is another
-- client's (node-redlock, redsync, redis-py...), whose release wakes nobody: the third element
-- tells the waiter to watch the key instead (CLIENT TRACKING, net/inbox.hpp). So is dlock's own
-- settled value ("<value>:settled", lease::release_after), whose expiry wakes nobody either.
-- Not for dlock's holders otherwise, whose release wakes exactly one waiter; watching those
-- would wake them all.
if holder and not string.match(holder, '^%x+%.h?%d+$') then return {0, left, 1} end
return {0, left}
