// SPDX-License-Identifier: Apache-2.0
// harness/election.hpp: the leader election's failover, measured.
//   run_election_failover  `candidates` threads campaign in one election (TTL `ttl`); `rounds`
//                          times the leader "crashes" (its lease is detached: no renewal, no
//                          resignation, the key expires as a dead process's would), and an
//                          observer in the bench times the next `elected`. Figures: failover
//                          (crash -> new leader seen), and what it adds to the crashed lease's
//                          remaining TTL, in ms and in round trips
#pragma once

#include <chrono>
#include <vector>

#include "harness/measure.hpp"

namespace dlock::bench {

row run_election_failover(std::vector<client> nodes, int candidates, std::chrono::milliseconds ttl,
                          int rounds);

}  // namespace dlock::bench
