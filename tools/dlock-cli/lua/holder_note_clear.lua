-- SPDX-License-Identifier: Apache-2.0
-- Deletes the command's holder note KEYS[1] (holder_key) only where it names the token ARGV[1],
-- its first field: one script, so a run can send it unawaited just before its release and
-- never delete the note of a holder that came after it.
local note = redis.call('GET', KEYS[1])
if note and string.sub(note, 1, #ARGV[1] + 1) == ARGV[1] .. '\t' then
  return redis.call('DEL', KEYS[1])
end
return 0
