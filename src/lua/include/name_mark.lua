-- SPDX-License-Identifier: Apache-2.0
-- One name is one lock. A name's own key is the one a mutex of the name holds; the other kinds
-- keep a mark in it while they hold, so that each finds the name taken:
--   read-write lock  rw_mark (dlock/key_layout.hpp: read_write_lock_mark) while readers or a
--                    writer hold (dlock::shared_mutex, a fair semaphore under :rw: keys);
--   semaphore        "dlock:semaphore <limit> fair|unfair" (key_layout.hpp: semaphore_mark)
--                    while permits are held: its limit and fairness are stored, so that a
--                    holder that counts another limit is refused instead of counting its own;
--   latch            its count, a decimal number (latch.lua), which is refused where
--                    anything else holds the name. A lock waits for a count as for another
--                    client's lock: hand-made locks write "1" too.
-- A mutex of the name and a read-write lock are one lock: each waits for the other. Any other
-- two kinds cannot share a name, and the one that comes second is refused with WRONGTYPE,
-- which names the kind found (read_name). The mark lasts until the latest holder's
-- expiry at least: every grant and renewal marks the name before anyone is told (a script is
-- not rolled back: an error later on must not leave a told holder unmarked), and a release or
-- settle sets the mark to the latest holder's expiry exactly, or takes it off with the last
-- holder. A solo holder (one holder, nobody else in line: the uncontended grant by plain
-- commands, semaphore_protocol.hpp) keeps "<mark> <token> <permits>" there instead, with its
-- own expiry, and no other key; the first script that reads the holders makes it one of them
-- (adopt_solo, name_kinds.lua), and its release is a compare-and-delete (sem_release.lua).
-- A script sets `name` and `mark` (the engine sends its kind's mark) before it calls
-- these; without a mark (a caller of an earlier version) `name` is nil: no mark. What reads a
-- name (which kind holds it) and what marks it anew after a member left are name_kinds.lua's,
-- included after this file by the scripts that need them: a script's uncontended path, which
-- runs before them, defines no closure it does not call.
local rw_mark = 'dlock:read-write-lock'
local semaphore_prefix = 'dlock:semaphore '
local mark

-- Whether a value is a mark, alone or a solo holder's (name_kinds.lua), which is nobody's
-- owner value (release.lua, extend.lua).
local function is_mark(value)
  return value == rw_mark or string.sub(value, 1, #rw_mark + 1) == rw_mark .. ' ' or
             string.sub(value, 1, #semaphore_prefix) == semaphore_prefix
end

-- Marks the name until `until_ms` (a holder's expiry, server ms) at least; never shortens it.
-- `value`: what the name's key held when the caller read it in this script (false: nothing),
-- or nil to read it here.
local function mark_name_until(name, until_ms, now, value)
  if not name or until_ms <= now then return end
  if value == nil then value = redis.call('GET', name) end
  if value and value ~= mark then return end  -- taken (name_taken)
  local ms = until_ms - now
  if not value or redis.call('PTTL', name) < ms then redis.call('SET', name, mark, 'PX', ms) end
end
