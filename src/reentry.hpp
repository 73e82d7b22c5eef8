// SPDX-License-Identifier: Apache-2.0
// reentry.hpp: opt-in reentrancy of a mutex (lock_options::reentrant). Private.
//   reentry_enter   a lease on what `owner` already holds of a lock in this process, or empty
//   reentry_hold_first  makes a freshly granted lease the first of its owner's nested ones
// Re-entry happens in this process only, and never talks to Redis: the owner's first
// acquisition takes the lock as any other does; each further acquisition by the same owner
// while that one is valid gets a lease of its own on the same holding (same owner value, same
// fence, same validity, lost() firing together). The lock is released when the last of them is.
#pragma once

#include <string>
#include <vector>

#include "dlock/lease.hpp"

namespace dlock::detail {

// Where an owner's holding is filed: the lock (its key, then each node) and the owner id, each
// part length-prefixed, so that no two different locks or owners share a slot.
std::string reentry_slot(const std::vector<std::string>& lock, const std::string& owner);

// A lease nested in the holding filed at `slot`, when one is there and still valid (not
// released, not lost, validity left); an empty lease otherwise.
lease reentry_enter(const std::string& slot);

// Files `granted` (a lease just granted by the lock) at `slot` as a holding of count 1 and
// returns the first lease on it. An empty lease comes back as it is.
lease reentry_hold_first(const std::string& slot, lease granted);

}  // namespace dlock::detail
