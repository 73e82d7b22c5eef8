-- SPDX-License-Identifier: Apache-2.0
-- Quarantine a node that may have forgotten locks. Each client with restart_quarantine set runs
-- this on each new connection, before anything else goes out on it, so that no acquire reaches
-- a node that lost its data before the quarantine is in place.
-- KEYS[1]: the node's identity mark: the run_id of the process that last checked (no expiry).
-- KEYS[2]: the quarantine: while it exists, the acquire scripts grant nothing (key_layout.hpp).
-- KEYS[3]: the fence floor: every fencing token drawn from now on is above it (no expiry).
-- ARGV[1]: this process's run_id, from INFO server; ARGV[2]: a lower bound of its uptime in ms
--          ("" when unknown); ARGV[3]: the quarantine in ms.
-- Returns the quarantine's remaining ms (0: none).
local identity, quarantine, fence_floor = KEYS[1], KEYS[2], KEYS[3]
local run_id, uptime, hold_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local known = redis.call('GET', identity)
if known ~= run_id then
  local hold = hold_ms
  if not known then
    -- No mark: a dataset new to dlock, or one that was lost (a restart without persistence).
    -- What it forgot was granted before the process started, so it has expired one
    -- quarantine after the start. (A FLUSHALL on a running node is not seen: it keeps the mark
    -- only if it keeps everything.)
    hold = hold_ms - (uptime or 0)
  end
  -- Another process's mark came from disk (a restart, which may have lost the last writes) or
  -- from a former master (a promotion, which may have lost what had not replicated): when those
  -- writes were made is unknown, so one whole quarantine from now.
  redis.call('SET', identity, run_id)
  if hold > 0 and redis.call('PTTL', quarantine) < hold then
    redis.call('SET', quarantine, run_id, 'PX', hold)
  end
  -- Counters restored from disk or replicated may lag behind tokens already given: the next
  -- tokens start above the server's clock in ms x 1024, as a missing counter does.
  local t = redis.call('TIME')
  local floor = (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) * 1024
  if floor > tonumber(redis.call('GET', fence_floor) or '0') then
    redis.call('SET', fence_floor, string.format('%.0f', floor))
  end
end
return math.max(redis.call('PTTL', quarantine), 0)
