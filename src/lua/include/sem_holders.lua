-- SPDX-License-Identifier: Apache-2.0
-- Shared by the unfair semaphore's scripts: cmake/EmbedLua.cmake pastes it where they name it.
-- `holders`: member = owner token, score = its expiry in server ms; `weights`: token ->
-- permits, for holders of more than one (sem_acquire.lua).

-- Holders past their expiry are gone, whether or not they said so: their entries go.
local function drop_expired_holders(holders, weights, now)
  local expired = redis.call('ZRANGEBYSCORE', holders, '-inf', now)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
    for i = 1, #expired, 1000 do
      redis.call('HDEL', weights, unpack(expired, i, math.min(i + 999, #expired)))
    end
  end
end

-- The permits the holders take (after drop_expired_holders), and how many holders weigh more
-- than one (0: the weights hash does not exist).
local function permits_in_use(holders, weights)
  local used = redis.call('ZCARD', holders)
  local weighted = redis.call('HVALS', weights)
  for _, w in ipairs(weighted) do used = used + tonumber(w) - 1 end
  return used, #weighted
end
