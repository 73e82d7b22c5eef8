// SPDX-License-Identifier: Apache-2.0
// harness/peers.hpp: the npm peer libraries, run by bench/peers/peer_bench.cjs under node.
//   peers        where they are installed and whether they can run (else: why not)
//   run_peer     one scenario of one peer against the given ports; its JSON line as a row
// Each run is a child process (node) bounded by timeout(1); nothing is shared with dlock but
// the servers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/measure.hpp"

namespace dlock::bench {

struct peers {
  std::string dir;       // bench/peers
  bool usable = false;
  std::string why_not;   // when not usable: what is missing
};
peers find_peers(const std::string& dir);

struct peer_scenario {
  std::string library;   // "node-redlock" or "redis-semaphore"
  std::string scenario;  // uncontended | contended | fairness | semaphore (as in measure.hpp)
  int nodes = 1;         // the first `nodes` ports; more than one: the library's Redlock
  int concurrency = 1;
  int retry_ms = 0;      // 0: the library's defaults
  int limit = 1;         // > 1: redis-semaphore's Semaphore with that many permits
};

// Runs one scenario; on failure returns nullopt and says why in `error`. Commands per
// operation come from the servers' commandstats around the run.
std::optional<row> run_peer(const peers& p, const peer_scenario& s,
                            const std::vector<unsigned short>& ports, std::vector<client>& nodes,
                            const timing& t, std::string& error);

// The "foreign" scenario: node-redlock (peer_bench.cjs --scenario holder) takes one key over
// and over, holding it ~20 ms, while one dlock waiter with `options` wants the same lock. Each
// dlock acquisition whose lock() began before a foreign release is paired with that release:
// the figures are how long after it the waiter held the lock (p50/p99, ms).
std::optional<row> run_behind_foreign_holder(const peers& p, unsigned short port, client node,
                                             const lock_options& options,
                                             const std::string& variant, const timing& t,
                                             std::string& error);

// Parses a flat JSON object of strings and numbers (what peer_bench.cjs prints).
bool parse_flat_json(const std::string& text, std::map<std::string, std::string>& strings,
                     std::map<std::string, double>& numbers);

}  // namespace dlock::bench
