-- SPDX-License-Identifier: Apache-2.0
-- Extend a semaphore permit, if it is still live.
-- KEYS[1]: the expiry set (holders, or the fair variant's timeouts); KEYS[2]: weights;
-- KEYS[3], KEYS[4], KEYS[5] (fair variant only): owners, waiter info, the ticket counter; all
-- the keys expire with the last member's expiry, as sem_fair_acquire.lua sets them (an info key
-- that outlived owners would keep the entries of waiters that left; a counter
-- that went before a refreshed holder would let a client of an earlier version, which does not
-- restart it above the tickets in line, rank a newcomer ahead of it).
-- KEYS[6] (KEYS[3] for the unfair variant, which has no KEYS[3..5]): the name's own key, which
-- the holders mark with ARGV[4] (name_mark.lua): an extend moves the mark out with the permit, a
-- settle sets it to the latest holder's expiry; a holder that finds another value there has
-- lost the name (its mark was lost: a restart, a FLUSH) and is refused, as a lost permit is.
-- Without ARGV[4] (a caller of an earlier version) there is no mark. A solo holder (its value
-- "<mark> <token> <permits>" there, and no other key: name_mark.lua) is renewed in that key.
-- ARGV[1]: the owner token; ARGV[2]: the TTL in milliseconds; ARGV[3]: "" to extend, or a
-- successor token to settle (as extend.lua):
--   extend  the permit's expiry becomes at least the server's now + TTL; it never moves earlier,
--           so a refresh delayed in the network cannot cut back a later, longer one;
--   settle  the permit passes to the successor token (same ticket, same weight) and expires
--           exactly TTL from now: refreshes still on their way for the old token find nothing.
-- Returns 1 when extended, 0 when the permit was gone or had expired: a lost permit is never
-- added back (an expired entry is removed instead), so the caller learns it was lost.
local expiries, weights, owners, info, tickets, name
if #KEYS == 3 then
  expiries, weights, name = KEYS[1], KEYS[2], KEYS[3]
else
  expiries, weights, owners, info, tickets, name = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
end
local owner, ttl_ms, successor = ARGV[1], tonumber(ARGV[2]), ARGV[3] or ''

-- A solo holder (name_mark.lua: "<mark> <token> <permits>" in the name's key, and no other
-- key) is renewed there: extend pushes the key's expiry out (never in), settle writes the
-- successor's value with exactly the TTL.
if name and ARGV[4] and ARGV[4] ~= '' then
  local solo = ARGV[4] .. ' ' .. owner .. ' '
  local value = redis.call('GET', name)
  if value and string.sub(value, 1, #solo) == solo then
    if successor ~= '' then
      local permits = string.sub(value, #solo + 1)
      redis.call('SET', name, ARGV[4] .. ' ' .. successor .. ' ' .. permits, 'PX', ttl_ms)
    elseif redis.call('PTTL', name) < ttl_ms then
      redis.call('PEXPIRE', name, ttl_ms)
    end
    return 1
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- #include name_mark.lua
-- #include name_kinds.lua
if ARGV[4] and ARGV[4] ~= '' then mark = ARGV[4] else name = nil end

local expiry = redis.call('ZSCORE', expiries, owner)
if not expiry then return 0 end
if tonumber(expiry) <= now or name_taken(name) then
  redis.call('ZREM', expiries, owner)
  redis.call('HDEL', weights, owner)
  if owners then redis.call('ZREM', owners, owner) end
  return 0
end

if successor ~= '' then
  -- The successor is added before the owner is removed: removing the last member first would
  -- delete the key, and on a Redis Cluster node whose slot is migrating away, writing to a key
  -- this script deleted fails the script midway (the permit would vanish, or lose its weight).
  redis.call('ZADD', expiries, now + ttl_ms, successor)
  redis.call('ZREM', expiries, owner)
  local weight = redis.call('HGET', weights, owner)
  if weight then
    redis.call('HSET', weights, successor, weight)
    redis.call('HDEL', weights, owner)
  end
  local ticket = owners and redis.call('ZSCORE', owners, owner)
  if ticket then
    redis.call('ZADD', owners, ticket, successor)
    redis.call('ZREM', owners, owner)
  end
elseif now + ttl_ms > tonumber(expiry) then
  redis.call('ZADD', expiries, 'XX', now + ttl_ms, owner)
end
if successor ~= '' then
  -- Exact when the walk can tell; and never shorter than the successor's own hold.
  remark_name(name, expiries, info, now)
  mark_name_until(name, now + ttl_ms, now)
else
  mark_name_until(name, math.max(now + ttl_ms, tonumber(expiry)), now)
end
local last = redis.call('ZRANGE', expiries, -1, -1, 'WITHSCORES')
for _, key in ipairs({expiries, weights, owners, info, tickets}) do
  if redis.call('EXISTS', key) == 1 then redis.call('PEXPIREAT', key, last[2]) end
end
return 1
