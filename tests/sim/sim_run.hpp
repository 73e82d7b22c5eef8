// SPDX-License-Identifier: Apache-2.0
// tests/sim/sim_run.hpp: one simulated schedule, from a seed to a verdict.
//   topology      the configuration families (two test shards each): a single node (handoff,
//                 sometimes polling), a single fair node, Redlock on 3 and on 5 nodes, a
//                 counting semaphore (limit 1-3, sometimes weighted) unfair and fair, the
//                 read-write lock, lock sets with mutexes on one node, and one name taken
//                 as a mutex, a lock set's member and a read-write lock at once
//   run_config    everything a seed decides: lock options (short TTLs, so that leases expire
//                 within a run), clients and their clocks, network, fault schedule
//   run_result    the verdict (the first violation, if any), statistics, and the trace when
//                 asked for
//   run_schedule  builds the world, clients and checker, schedules the faults, runs to the end
//   report        a failure as the test prints it: seed, configuration, violation, last events
// Faults happen only before fault_end; after them the network calms down (no more slow
// messages), and the liveness bound applies from the moment every fault's effect is over.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim_client.hpp"
#include "sim_world.hpp"

namespace dlock::sim {

// rwlock: dlock::shared_mutex, a fair semaphore of shared_mutex::max_readers permits where an
// acquisition takes 1 (a reader) or all of them (a writer). lockset: a pool of lock names on one
// node, locked by dlock::lock_set clients (random subsets) and by mutexes of one name each.
// mixed: one name on one node taken by every kind that shares it ("one name is one lock"):
// mutexes of the name, lock sets of it and one more name, and readers and writers of its
// dlock::shared_mutex (its own keys, its mark in the name's key, the mutex's fence counter).
enum class topology {
  single,
  single_fair,
  redlock3,
  redlock5,
  semaphore,
  semaphore_fair,
  rwlock,
  lockset,
  mixed
};
inline bool is_semaphore(topology t) {
  return t == topology::semaphore || t == topology::semaphore_fair || t == topology::rwlock;
}

struct fault_mix {  // relative weights; 0 disables a kind for this seed
  int drop = 0, node_pause = 0, crash = 0, client_pause = 0;
  int amnesia_after_ttl = 0;  // restart without data, down longer than any TTL: assumed safe
  int amnesia = 0;            // restart without data at once: outside the assumptions
  int script_flush = 0;       // SCRIPT FLUSH (as a failover to a replica would): NOSCRIPT again
};

struct run_config {
  std::uint64_t seed = 0;
  topology topo = topology::single;
  std::size_t nodes = 1;
  lock_options lock;  // a semaphore takes the same settings (semaphore_options())
  std::ptrdiff_t limit = 0;        // > 0: a semaphore (mixed: the read-write lock) of this many
  std::ptrdiff_t max_permits = 1;  // semaphore: an acquisition asks for 1..this many
  bool readers_and_writers = false;  // ... or for 1 or max_permits, nothing between (rwlock)
  // lockset, mixed: the names "sim:lock:0" .. and, per client, the name its mutex locks, or
  // set_client (a lock_set client of random subsets of them), or (mixed) read_write_client (a
  // reader or writer of the shared_mutex of "sim:lock:0", the name the mutexes lock).
  static constexpr std::size_t set_client = SIZE_MAX;
  static constexpr std::size_t read_write_client = SIZE_MAX - 1;
  std::size_t lock_names = 0;
  std::vector<std::size_t> mutex_name;

  std::chrono::milliseconds request_timeout{1000};
  std::size_t clients = 2;
  int cycles = 3;
  std::int64_t max_rate_ppm = 2000;  // client clocks run within +-0.2% of true time
  network_profile net;               // while faults happen
  network_profile calm_net;          // after
  // Redlock: one node far away, its links `far_factor` times slower (its replies come back
  // after the others' have decided the round).
  std::optional<std::size_t> far_node;
  std::int64_t far_factor = 1;
  sim_time fault_end = 0;
  sim_time fault_gap_max = 0;  // between two faults: uniform in [0, this]
  fault_mix faults;
  sim_time resubscribe_max = 0;
  client_bug bug = client_bug::none;  // lockset: the set clients' only
  bool check_holders = true;  // holders and the key's remaining life
  bool check_fences = true;
  bool unbounded_only = false;  // every acquisition is a lock() (for liveness repros)

  std::string describe() const;
  semaphore_options semaphore() const;
};

// The configuration seed `seed` gives in the family `t`.
run_config make_config(std::uint64_t seed, topology t);
// Every delay of `p` times `factor`.
network_profile scaled(network_profile p, std::int64_t factor);

struct run_result {
  std::string failure;  // empty: every invariant held
  bool within_assumptions = true;
  std::uint64_t faults = 0, grants = 0;
  sim_time ended_at = 0, quiet_from = 0, max_free_wait = 0;
  world_stats world;
  client_stats clients;  // summed over the clients (longest_free_wait: the largest)
  std::vector<std::string> trace;
};

// trace: keep the trace in the result; echo: also print it to stderr as it happens.
run_result run_schedule(const run_config& c, bool trace = false, bool echo = false);

// The seed, the configuration, the violation and the last `lines` events of the trace.
std::string report(const run_config& c, const run_result& r, std::size_t lines = 300);

}  // namespace dlock::sim
