-- SPDX-License-Identifier: Apache-2.0
-- Shared by the release scripts: tells a waiter on its channel. A cluster client's channel
-- ("s:{tag}dlock:wake:<random>", net/inbox.hpp) is sharded: it hashes to the lock's slot, and
-- SPUBLISH reaches only that slot's master, where the waiter subscribed, rather than every node
-- of the cluster; its count is then the waiter's subscription or none. pcall: a refused publish
-- (an ACL user without the channel) must not fail a release that already happened.
local function publish_wake(channel, message)
  local verb = string.sub(channel, 1, 2) == 's:' and 'SPUBLISH' or 'PUBLISH'
  return redis.pcall(verb, channel, message)
end
