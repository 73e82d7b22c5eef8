// SPDX-License-Identifier: Apache-2.0
// harness/server_cost.hpp: what a lock cycle costs Redis, against floors measured in the same
// run (issue 39, part 1).
//   run_floor            N callback chains on one connection, each on its own key, doing the
//                        least a fenced lock must: "fenced, Lua" (EVALSHA of SET NX PX + INCR
//                        fence, then EVALSHA of a compare-and-delete) or "fenced, no Lua" (MULTI
//                        / SET NX PX / INCR fence / EXEC as one pipelined request, then the same
//                        compare-and-delete); library "floor", scenario "uncontended"
//   run_primitive_async  the same chains through dlock's semaphore (limit 1, unfair or fair) or
//                        read-write lock (exclusive or shared): async_acquire -> async_release;
//                        library "dlock semaphore" / "dlock shared_mutex"
// Rows carry the uncontended figures (cycles_per_s, p50/p99, client CPU) and the server's
// (server_usec_per_op ...) from commandstats around the run, warm-up included.
#pragma once

#include <string>

#include "harness/measure.hpp"

namespace dlock::bench {

enum class floor_kind { lua, native };
inline constexpr const char* floor_library = "floor";
const char* floor_variant(floor_kind k);  // "fenced, Lua" | "fenced, no Lua"

// Loads the floor's scripts on `node` (SCRIPT LOAD) and runs `chains` chains on a connection of
// their own to the same endpoint.
row run_floor(client node, floor_kind kind, int chains, const timing& t,
              const std::string& key_prefix);

enum class primitive { semaphore, fair_semaphore, rwlock_exclusive, rwlock_shared };
row run_primitive_async(client node, primitive p, int chains, const timing& t,
                        const std::string& key_prefix);

}  // namespace dlock::bench
