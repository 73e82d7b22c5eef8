// SPDX-License-Identifier: Apache-2.0
// slot_migration.hpp: keeping and giving back leases while their Redis Cluster slot migrates.
// Private.
//   refused_while_migrating    the answer was TRYAGAIN: Redis runs a script that names several
//                              keys only when they all exist on the node that runs it, so a
//                              lease's scripts (whose queue or weights may not exist) are refused
//                              until the migration ends, however long that takes
//   release_lock_key           a lock released by its key alone
//   refresh_permit_key_by_key  a semaphore permit (or read-write lock hold) renewed one key at
//                              a time: the name's mark and the companion keys first, so that
//                              they outlive the permit, then the permit's entry
//   end_permit                 a permit given back by its entry alone: it expires now
// One key is always served, by the node that has it or (after ASK) by the one importing it.
// Each step answers as the script it stands in for does (1 kept or released, 0 gone).
#pragma once

#include <chrono>
#include <string>
#include <system_error>

#include "algo/acquisition.hpp"
#include "dlock/client.hpp"
#include "dlock/reply.hpp"

namespace dlock::detail {

bool refused_while_migrating(const reply& r) noexcept;

using step_handler = unique_function<void(std::error_code, reply)>;

void release_lock_key(client node, std::string key, std::string owner,
                      std::chrono::milliseconds timeout, step_handler done);

void refresh_permit_key_by_key(client node, const semaphore_target& target, std::string owner,
                               std::chrono::milliseconds ttl, step_handler done);

void end_permit(client node, const semaphore_target& target, std::string owner,
                step_handler done);

}  // namespace dlock::detail
