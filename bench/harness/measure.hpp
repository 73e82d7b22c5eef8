// SPDX-License-Identifier: Apache-2.0
// harness/measure.hpp: the measuring parts of lock_bench.
//   row              one result line: scenario, library, variant, nodes, concurrency, figures
//   summarize        p50/p99/mean of latency samples (ms)
//   command_counts   INFO commandstats of a set of servers, summed, and deltas between two
//   run_uncontended  N threads, each its own key: lock()+unlock() cycles/s and cycle latency
//   run_uncontended_async  the same with N callback chains on dlock's I/O thread, no thread per
//                    locker: async_acquire -> async_release -> next cycle
// Both runners also report client_cpu_us_per_op: this process's CPU time (getrusage, all
// threads) per cycle or acquisition.
//   run_contended    N threads on one mutex or semaphore holding ~1 ms: acquisitions/s, handoff
//                    latency, per-worker spread (through a `contender`, one per worker)
// Not thread-safe itself; the runners start and join their own threads.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/options.hpp"
#include "dlock/semaphore.hpp"

namespace dlock::bench {

using bench_clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct row {
  std::string scenario;  // uncontended | contended | ceiling | rtt | client_cpu
  std::string library;   // dlock, node-redlock, redis-semaphore, redis-benchmark
  std::string variant;   // how it was run: "threads", "defaults", "retry 2 ms", "-P 16" ...
  int nodes = 1;
  int concurrency = 1;
  std::map<std::string, double> figures;
  std::string note;

  double get(const std::string& name) const {
    auto it = figures.find(name);
    return it == figures.end() ? std::nan("") : it->second;
  }
  bool has(const std::string& name) const { return figures.count(name) != 0; }
};

struct percentiles {
  double p50_ms = std::nan(""), p99_ms = std::nan(""), mean_ms = std::nan("");
  std::size_t samples = 0;
};
percentiles summarize(std::vector<double> samples_ms);

// Timing of one scenario: `warm` is run but not recorded, then `measure` is recorded.
struct timing {
  milliseconds warm{300};
  milliseconds measure{1500};
  milliseconds hold{1};  // contended: how long a holder keeps the lock
};

// Calls and microseconds per command name ("evalsha", "set", "config|resetstat"), summed over
// servers. A script's usec include those of the commands it runs, which are counted again
// under their own names.
struct command_stat {
  std::uint64_t calls = 0;
  std::uint64_t usec = 0;
};
using command_counts = std::map<std::string, command_stat>;
command_counts commandstats(std::vector<client>& nodes);
// Calls between two snapshots. With `only` empty: every command except the harness's own
// administration (INFO, PING, CONFIG, CLIENT, SCRIPT, FLUSHALL, HELLO, COMMAND, SELECT, AUTH).
double calls_between(const command_counts& before, const command_counts& after,
                     const std::set<std::string>& only = {});
// The figures of an uncontended row from its in-window cycle latencies (ms): cycles/s over the
// measured window, p50, p99, samples; and its errors.
void add_cycle_figures(row& r, std::vector<double> samples_ms, const timing& t, double errors);

// Commands a library sends itself (not those its scripts run inside Redis); read from its
// source: node-redlock only runs scripts; dlock also SUBSCRIBEs its waiters' wake channel and
// sends a free lock's first try as plain commands (SET, SET, INCR, MGET: "mget" stands for
// them); redis-semaphore's mutex acquires with a plain SET.
std::set<std::string> top_level_commands(const std::string& library);
// Adds the server's side of `ops` operations of `library` between two snapshots:
//   cmds_sent_per_op     commands the library sent (top_level_commands)
//   server_cmds_per_op   every command Redis ran, those inside scripts included
//   server_usec_per_op   Redis's time in the commands the library sent (scripts whole)
//   calls_per_op.<name>  each command's calls, so the JSON shows where the work went
void add_server_figures(row& r, const command_counts& before, const command_counts& after,
                        const std::string& library, double ops);
// The same for a client that sends the commands `sent` (the floors: EVALSHA, MULTI, EXEC).
void add_server_figures(row& r, const command_counts& before, const command_counts& after,
                        const std::set<std::string>& sent, double ops);

// Drops every key on the servers, so a scenario starts from the same state.
void flush_all(std::vector<client>& nodes);

row run_uncontended(std::vector<client> nodes, int lockers, const timing& t,
                    const std::string& key_prefix, lock_options options = {});
// Variant name of the async rows; report.cpp tells the two variants apart by it.
inline constexpr const char* async_variant = "async, async_acquire+async_release";
row run_uncontended_async(std::vector<client> nodes, int lockers, const timing& t,
                          const std::string& key_prefix);
// One worker's handle on the lock under test (a mutex, or a semaphore's permit).
class contender {
 public:
  virtual ~contender() = default;
  // Waits until held or `deadline`; false when not held (the deadline passed, or an error).
  virtual bool acquire_until(bench_clock::time_point deadline) = 0;
  // Gives it back; false when the library reported an error.
  virtual bool release() = 0;
};
using contender_factory = std::function<std::unique_ptr<contender>()>;
contender_factory mutex_contenders(std::vector<client> nodes, std::string key, lock_options o);
contender_factory semaphore_contenders(client node, std::string key, int limit,
                                       semaphore_options o);

struct contended_setup {
  std::string scenario = "contended";  // contended | fairness | semaphore
  std::string variant;
  int workers = 8;
  int limit = 1;        // how many may hold at once: 1 for a mutex
  bool polite = true;   // after releasing, wait until another worker acquired (see .cpp)
};
row run_contended(std::vector<client> nodes, const contended_setup& s, const timing& t,
                  const contender_factory& make);

// dlock's own round trip: blocking client.exec(PING) from one thread for `how_long` (what one
// step of a lock cycle costs before any Lua runs: the hop to the I/O thread and back included).
row run_exec_rtt(client node, milliseconds how_long);

// The callgrind mode: `cycles` uncontended lock()+unlock() cycles on one node, nothing else.
void run_cycles(client node, int cycles, const std::string& key);

}  // namespace dlock::bench
