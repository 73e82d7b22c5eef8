-- SPDX-License-Identifier: Apache-2.0
-- Announce an election's news on one node, while (and only while) the announcing leader still
-- holds the leadership's lock: append it to the election's record and tell the observers.
-- KEYS[1]: the lock key; KEYS[2]: the record (a stream, key_layout.hpp: election_record_key),
--          whose name is also the channel the news goes out on.
-- ARGV[1]: the leader's owner value; ARGV[2]: its term (the lease's fencing token);
-- ARGV[3]: the candidate's value; ARGV[4]: "elected" or "resigned".
-- The entry's id is "<term>-0" for elected and "<term>-1" for resigned, so that observers on
-- several nodes can merge the records by id, and a repeated announcement (a retry after a
-- timeout) finds its entry already there. The record keeps the last 16 entries and expires
-- with the lock (each renewal moves its expiry too: extend.lua's KEYS[2]).
-- Returns 1 when the entry is in the record (now or before), 0 when the lock is not this
-- owner's (not or no longer the leader), and an error when a later term is already recorded.
local key, record = KEYS[1], KEYS[2]
local owner, term, value, event = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('GET', key) ~= owner then return 0 end
local id = term .. (event == 'resigned' and '-1' or '-0')
local added = redis.pcall('XADD', record, 'MAXLEN', '16', id, 'owner', owner, 'value', value,
                          'event', event)
if type(added) == 'table' and added.err then
  local last = redis.call('XREVRANGE', record, '+', '-', 'COUNT', 1)[1]
  if not (last and last[1] == id) then return added end
end
local left = redis.call('PTTL', key)
if left > 0 then redis.call('PEXPIRE', record, left) end
redis.call('PUBLISH', record, id)
return 1
