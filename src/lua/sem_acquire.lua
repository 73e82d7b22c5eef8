-- SPDX-License-Identifier: Apache-2.0
-- Take permits of an unfair counting semaphore, atomically, judged by the server's clock;
-- optionally queue as a waiter that a release will wake.
-- KEYS[1]: holders, a sorted set: member = owner token, score = its expiry in server ms.
-- KEYS[2]: weights, a hash: owner token -> permits held, only for holders of more than one.
-- KEYS[3]: the fencing counter; it expires one TTL after it was set (next_fence).
-- KEYS[4]: the waiter queue (zset: owner token -> ticket); KEYS[5]: waiter info (hash: owner
--          token -> "<deadline ms> <wake channel>", " woken" appended by sem_release.lua);
--          KEYS[6]: the queue's ticket counter. The queue only orders wake-ups: a permit still
--          goes to whoever asks while it is free.
-- KEYS[7]: the name's own key, which the holders mark with ARGV[6] (name_mark.lua) until the
--          latest holder's expiry: a lock or another kind of the name, or a semaphore of
--          another limit or fairness, is refused (WRONGTYPE) instead of counting beside them.
--          A solo holder there ("<mark> <token> <permits>", granted by plain commands:
--          semaphore_protocol.hpp) first becomes one of the holders (adopt_solo).
-- ARGV[1]: the owner token; ARGV[2]: the limit; ARGV[3]: permits wanted (1..limit);
-- ARGV[4]: the TTL in milliseconds;
-- ARGV[5]: "<waiter ttl ms> <wake channel>" to queue when not granted, or "" not to queue;
--          "<waiter ttl ms> <wake channel> <attempt>" to queue and accept a handoff:
--          sem_release.lua may then make this token a holder of ARGV[3] permits for ARGV[4] ms
--          and send it "<token> <fence> <attempt>", which saves it the round trip of trying
--          again; the entry then reads "<deadline> <channel> h<permits>:<ttl ms>:<attempt>:<limit>"
--          (the release grants within the smaller of its own limit and this one);
-- ARGV[6]: the mark, semaphore_mark(limit, false) (key_layout.hpp); without it (a caller of an
--          earlier version) KEYS[7] is ignored.
-- Returns {1, fence} when granted (also when this token already holds: a retried attempt whose
-- reply was lost; its expiry is pushed out), {0, ms until the earliest holder expires} when
-- fewer than ARGV[3] permits are free. Time comes from TIME, never from a client.
local holders, weights, fence_key = KEYS[1], KEYS[2], KEYS[3]
local queue, info, tickets = KEYS[4], KEYS[5], KEYS[6]
local owner, limit, want, ttl_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local waiter = ARGV[5] or ''
local name = KEYS[7]
if not ARGV[6] or ARGV[6] == '' then name = nil end

-- #include node_state.lua
-- #include name_mark.lua
if name then mark = ARGV[6] end

-- The uncontended grant comes first, before the script defines what a wait needs (every
-- function defined costs a closure at every run): nobody holds or waits and the name's key
-- does not exist (one EXISTS of them all; a name marked by this kind already goes the full way,
-- which reads it), no quarantine. It writes what the full way below would.
if want <= limit and redis.call('EXISTS', holders, weights, queue, info, name or holders) == 0 and
    quarantine_left() == 0 then
  local now = server_ms()
  local expiry = string.format('%.0f', now + ttl_ms)  -- one conversion for its uses
  redis.call('ZADD', holders, expiry, owner)
  redis.call('PEXPIREAT', holders, expiry)
  if want > 1 then
    redis.call('HSET', weights, owner, want)
    redis.call('PEXPIREAT', weights, expiry)
  end
  mark_name_until(name, now + ttl_ms, now, false)
  return {1, next_fence(fence_key, now, ttl_ms)}
end

local now = server_ms()

-- #include name_kinds.lua

-- A counter that a plain INCR made (the solo grant's, which found no counter: semaphore_protocol
-- .hpp) holds no token and no expiry: it goes before any answer, as acquire.lua's does. (pcall:
-- a counter of another type is for the grant to report.)
local counted = redis.pcall('GET', fence_key)
counted = type(counted) == 'string' and tonumber(counted)
if counted and counted < fence_clock_range then redis.call('DEL', fence_key) end

-- Read before anything else is written (a script is not rolled back); a solo holder of this
-- kind first becomes one of the holders.
local refused = read_name(name, adopt_solo(name, now, adopt_unfair(holders, weights)))
if refused then return refused end

-- #include sem_holders.lua
-- #include waiter_queue.lua

-- The permits of expired holders come back without a wake-up: queued waiters find them at
-- their next poll, which is never later than the earliest expiry this script reports (or the
-- retry delay).
drop_expired_holders(holders, weights, now)

-- The keys vanish by themselves when the last holder's expiry passes (the fence counter
-- expires on its own), and so does the name's mark, which lasts as long as they do.
local function expire_with_last_holder()
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', holders, last[2])
    if redis.call('EXISTS', weights) == 1 then redis.call('PEXPIREAT', weights, last[2]) end
    mark_name_until(name, tonumber(last[2]), now)
  end
end

local quarantined = quarantine_left()

local function draw_fence() return next_fence(fence_key, now, ttl_ms) end

-- A holder is no waiter: an entry left by an earlier attempt of this acquisition goes. Both
-- calls, always: an info entry can outlive its queue entry (the two keys' expiries may differ
-- by a millisecond), and a holder's release that found one would count it as a leaving waiter
-- and wake nobody for its permits.
local function grant()
  redis.call('ZREM', queue, owner)
  redis.call('HDEL', info, owner)
  expire_with_last_holder()
  return {1, draw_fence()}
end

-- Already holding: an earlier attempt of this acquisition whose reply was lost, or one that
-- lands late after a later attempt was granted and extended. The expiry only moves out, never
-- back: the holder's lease may already count on a later one.
local held_until = redis.call('ZSCORE', holders, owner)
-- In quarantine, an entry of ours may have been restored after it was released: not ours.
if held_until and quarantined > 0 then return {0, quarantined} end
if held_until then
  if now + ttl_ms > tonumber(held_until) then
    redis.call('ZADD', holders, 'XX', now + ttl_ms, owner)
  end
  return grant()
end

local used = permits_in_use(holders, weights)
if quarantined == 0 and used + want <= limit then
  redis.call('ZADD', holders, now + ttl_ms, owner)
  if want > 1 then redis.call('HSET', weights, owner, want) end
  return grant()
end

if waiter ~= '' then
  local waiter_ttl, channel, attempt = string.match(waiter, '^(%d+) (%S+) ?(%d*)$')
  waiter_ttl = tonumber(waiter_ttl)
  if attempt ~= '' then
    channel = channel .. ' h' .. want .. ':' .. ttl_ms .. ':' .. attempt .. ':' .. limit
  end
  queue_waiter(queue, info, tickets, owner, now, waiter_ttl, channel)
end
local first = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
if first[2] then return {0, math.max(tonumber(first[2]) - now, quarantined)} end
return {0, quarantined}
