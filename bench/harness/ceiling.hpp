// SPDX-License-Identifier: Apache-2.0
// harness/ceiling.hpp: the Redis server's own ceiling, measured with redis-benchmark.
//   run_ceiling  SET NX PX and EVALSHA <release> at each concurrency, plain and pipelined,
//                combined as 1 / (1/SET + 1/EVALSHA) lock+unlock cycles/s; PING round trip
//   combined     that formula
// Runs redis-benchmark (Debian redis-tools) as a child process, each run bounded by timeout(1).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "harness/measure.hpp"
#include "script.hpp"

namespace dlock::bench {

double combined(double set_rps, double evalsha_rps);

// Rows: scenario "ceiling" (variant "SET", "EVALSHA", "cycle" for the combination; "plain" or
// "-P 16" in the note field's place) and one "rtt" row for PING at one client. `seconds` is
// the target duration of each redis-benchmark run; `node` (the same server) reads commandstats.
// The release script's KEYS[n] count is read from its body, so the EVALSHA passes as many keys
// as dlock does (the lock key plus the waiter queue's, which do not exist here).
std::vector<row> run_ceiling(unsigned short port, client node, const dlock::detail::script& release,
                             const std::vector<int>& concurrencies, double seconds);

}  // namespace dlock::bench
