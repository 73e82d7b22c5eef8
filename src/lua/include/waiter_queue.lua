-- SPDX-License-Identifier: Apache-2.0
-- Shared by the acquire scripts (acquire.lua, sem_acquire.lua): queues `member` with its entry
-- "<deadline ms> <rest>" in `info`. A waiter keeps its ticket across attempts; rewriting its
-- entry clears a " woken" mark. The queue vanishes on its own once every waiter is gone: its
-- keys live up to twice the longest waiter ttl, and never less than 1.5 times this one's, which
-- outlasts its entry (only ever pushed out, so a waiter with a short one cannot cut a longer
-- one's). Pushed out only below 1.5 times: the attempts of a waiter, and of those queued beside
-- it, within half a waiter ttl of the last push cost a PTTL per key, not also a PEXPIRE.
local function queue_waiter(queue, info, tickets, member, now, waiter_ttl, rest)
  if redis.call('ZSCORE', queue, member) == false then
    redis.call('ZADD', queue, redis.call('INCR', tickets), member)
  end
  redis.call('HSET', info, member, (now + waiter_ttl) .. ' ' .. rest)
  for _, k in ipairs({queue, info, tickets}) do
    if redis.call('PTTL', k) < 1.5 * waiter_ttl then redis.call('PEXPIRE', k, 2 * waiter_ttl) end
  end
end
