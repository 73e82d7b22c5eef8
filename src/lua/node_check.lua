-- Quarantine a node that may have forgotten locks. Each client with restart_quarantine set runs
-- this on each new connection, before anything else goes out on it, so that no acquire reaches
-- a node that lost its data before the quarantine is in place.
-- KEYS[1]: the node's identity mark: the run_id of the process that last checked (no expiry).
-- KEYS[2]: the quarantine: while it exists, the acquire scripts grant nothing (key_layout.hpp).
-- ARGV[1]: this process's run_id, from INFO ("" when INFO is refused: changes then go unseen);
-- ARGV[2]: its uptime in ms, rounded down ("" when unknown); ARGV[3]: the quarantine in ms.
-- Returns the quarantine's remaining ms (0: none).
local identity, quarantine = KEYS[1], KEYS[2]
local run_id, uptime, hold_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local known = redis.call('GET', identity)
if known ~= run_id then
  local hold = hold_ms
  if not known then
    -- No mark: a dataset new to dlock, or one that was lost (a restart without persistence, a
    -- flush). What it forgot was granted before the process started, so it has expired one
    -- quarantine after the start.
    hold = hold_ms - (uptime or 0)
  end
  -- Another process's mark came from disk (a restart, which may have lost the last writes) or
  -- from a former master (a promotion, which may have lost what had not replicated): when those
  -- writes were made is unknown, so one whole quarantine from now.
  redis.call('SET', identity, run_id)
  if hold > 0 and redis.call('PTTL', quarantine) < hold then
    redis.call('SET', quarantine, run_id, 'PX', hold)
  end
end
return math.max(redis.call('PTTL', quarantine), 0)
