// SPDX-License-Identifier: Apache-2.0
// lock_bench: dlock's macro benchmark. Starts five throwaway redis-servers on loopback ports,
// then in one run measures, on those same servers:
//   the ceiling      redis-benchmark: SET NX PX, EVALSHA <release>, plain and -P 16; PING RTT
//   uncontended      dlock lock()+unlock() cycles/s, p50/p99, 1/8/64 lockers, 1, 3 and 5 nodes:
//                    N threads (blocking calls), and N async callback chains on the I/O thread
//   contended        8 and 64 workers on one key holding ~1 ms: acquisitions/s, handoff p50/p99
//   fairness         8 greedy workers: acquisitions per worker, unfair and fair mode
//   semaphore        limit 4, 8 and 64 workers holding ~1 ms: acquisitions/s, handoff p50/p99
//   cluster          a 3-master Redis Cluster (mode 1, a lock per slot): uncontended 1 and 64
//                    lockers, contended 64 workers (library "dlock (cluster)")
//   peers            node-redlock and redis-semaphore (npm, bench/peers) in the same scenarios
//   foreign          one dlock waiter behind node-redlock's holder: release -> dlock holds
//   election         dlock::election, 4 candidates, the leader crashes 20 times: failover time
//   rwlock           16 workers, 90 % reads holding ~1 ms: dlock::shared_mutex against a
//                    dlock::mutex taking every cycle exclusively
//   server cost      fenced floors (Lua; MULTI/EXEC), dlock's semaphore and read-write lock in
//                    async chains: Redis's us per cycle against the lock's and the peers'
//   user driver      one client, N threads lock()+unlock() vs N async chains, as a user's
//                    program measures them: threads/async at 8 and 64 lockers
//   command handoff  `dlock run` to `dlock run`: one CMD's end to the next waiting run's CMD
//                    start, quiet and with 2 busy threads, beside a bare spawn of the same CMD
//   client CPU       with --callgrind: instructions per cycle, counted by valgrind's callgrind
// and writes bench/results/latest.{json,md} plus plot data, then prints the Markdown.
//
//   lock_bench [--seconds 1.5] [--warm-ms 300] [--out DIR] [--no-peers] [--callgrind]
//   lock_bench --cycles N     one server, N cycles, nothing else (what callgrind runs)
//   lock_bench --async-lockers N [--seconds S]   one server, the async uncontended scenario
//                             with N lockers, nothing else (for perf); prints one line
//   lock_bench --thread-lockers N [--seconds S]  the same with N threads (lock()+unlock())
//   lock_bench --foreign [--seconds S]   one server, the "foreign" scenario only; prints its rows
//   lock_bench --contended [--seconds S] one server, the lock's and the semaphore's handoffs
//                             (8 and 64 workers, defaults; the semaphore of 1 permit and of 4),
//                             in PING round trips; a line each
//   lock_bench --election     the election scenario only, on 1 and 3 servers; a line each
//   lock_bench --rwlock [--seconds S]   one server, the rwlock scenario only; a line each
//   lock_bench --cli-handoff [--samples N]   one server, the command handoff only; a line each
//   lock_bench --server-cost [--seconds S]   one server: the floors, dlock's lock (async), semaphore
//                             and read-write lock, the peers' uncontended rows; the table
//   lock_bench --user-driver [--seconds S] [--ud-lockers N] [--ud-variant V,...]   one server,
//                             the user driver (8 and 64 lockers); V adds one of lock_bench's
//                             habits: async-first, barrier, warm, vector, five-servers, after-bench
//
// Every run is bounded: scenarios by their window, child processes by timeout(1). On SIGINT
// or SIGTERM the servers are killed before exiting.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/options.hpp"
#include "harness/ceiling.hpp"
#include "harness/cli_handoff.hpp"
#include "harness/election.hpp"
#include "harness/rwlock.hpp"
#include "harness/server_cost.hpp"
#include "harness/user_driver.hpp"
#include "harness/measure.hpp"
#include "harness/peers.hpp"
#include "harness/report.hpp"
#include "support/redis_cluster.hpp"
#include "script.hpp"
#include "local_redis/local_redis.hpp"

namespace {

using namespace dlock::bench;
using dlock::local::redis_server;

// The servers' pids, for the signal handler: kill(2) is async-signal-safe, destructors are not.
std::array<std::atomic<pid_t>, 8> server_pids{};

void on_signal(int sig) {
  for (auto& pid : server_pids) {
    pid_t p = pid.load();
    if (p > 0) ::kill(p, SIGKILL);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

struct options {
  double seconds = 1.5;
  int warm_ms = 300;
  std::string out = DLOCK_BENCH_RESULTS_DIR;
  std::string peers_dir = DLOCK_BENCH_PEERS_DIR;
  bool peers = true;
  bool callgrind = false;
  int cycles = 0;  // > 0: the callgrind mode
  int async_lockers = 0;  // > 0: only the async uncontended scenario (profiling)
  int thread_lockers = 0;  // > 0: only the threads uncontended scenario (profiling)
  bool foreign_only = false;  // only the "foreign" scenario
  bool contended_only = false;  // only the contended lock and semaphore handoffs (defaults)
  bool election_only = false;   // only the election's failover
  bool rwlock_only = false;     // only the read-write lock's mixed load
  bool cli_handoff_only = false;  // only the command handoff
  int samples = 30;               // command handoffs per variant
  bool server_cost_only = false;  // only the server cost rows
  bool user_driver_only = false;  // only the user driver
  bool seconds_given = false;     // --seconds was passed (the user driver's default is 2.5 s)
  int ud_lockers = 0;             // > 0: the user driver at these lockers only
  std::string ud_variant;         // the user driver's switches, comma-separated
  std::string command;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) o.command += ' ';
    o.command += argv[i];
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--seconds") o.seconds = std::stod(value()), o.seconds_given = true;
    else if (a == "--warm-ms") o.warm_ms = std::stoi(value());
    else if (a == "--out") o.out = value();
    else if (a == "--peers-dir") o.peers_dir = value();
    else if (a == "--no-peers") o.peers = false;
    else if (a == "--callgrind") o.callgrind = true;
    else if (a == "--cycles") o.cycles = std::stoi(value());
    else if (a == "--async-lockers") o.async_lockers = std::stoi(value());
    else if (a == "--thread-lockers") o.thread_lockers = std::stoi(value());
    else if (a == "--foreign") o.foreign_only = true;
    else if (a == "--contended") o.contended_only = true;
    else if (a == "--election") o.election_only = true;
    else if (a == "--rwlock") o.rwlock_only = true;
    else if (a == "--cli-handoff") o.cli_handoff_only = true;
    else if (a == "--samples") o.samples = std::stoi(value());
    else if (a == "--server-cost") o.server_cost_only = true;
    else if (a == "--user-driver") o.user_driver_only = true;
    else if (a == "--ud-lockers") o.ud_lockers = std::stoi(value());
    else if (a == "--ud-variant") o.ud_variant = value();
    else throw std::runtime_error("unknown argument " + a + " (see the comment atop lock_bench.cpp)");
  }
  return o;
}

std::string first_line_of(const std::string& file, const std::string& prefix) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return {};
}

dlock::bench::run_info describe(const options& o, dlock::client& node) {
  run_info info;
  char buf[64];
  std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  info.started = buf;
  info.cpu = first_line_of("/proc/cpuinfo", "model name\t: ");
  info.cores = static_cast<int>(std::thread::hardware_concurrency());
  std::ifstream("/proc/loadavg") >> info.load_before;
  std::istringstream server(node.exec({"INFO", "server"}).str());
  std::string line;
  while (std::getline(server, line)) {
    if (line.rfind("redis_version:", 0) == 0) info.redis_version = line.substr(14);
  }
  while (!info.redis_version.empty() && std::isspace(static_cast<unsigned char>(info.redis_version.back())))
    info.redis_version.pop_back();
  info.command = o.command;
  info.measure_s = o.seconds;
  return info;
}

// Instructions of a whole `--cycles n` run under callgrind (client process, all threads).
double callgrind_instructions(const std::string& self, int cycles, const std::string& out_file) {
  std::string cmd = "timeout 600 valgrind --tool=callgrind --callgrind-out-file=" + out_file +
                    " " + self + " --cycles " + std::to_string(cycles) + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return -1;
  std::string summary = first_line_of(out_file, "summary: ");
  if (summary.empty()) summary = first_line_of(out_file, "totals: ");
  return summary.empty() ? -1 : std::stod(summary);
}

// Inclusive instructions per function, from callgrind_annotate.
std::map<std::string, double> inclusive_costs(const std::string& out_file) {
  std::map<std::string, double> costs;
  std::string cmd = "callgrind_annotate --inclusive=yes --threshold=100 " + out_file + " 2>/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return costs;
  char buf[8192];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) {
    // "29,099,007 (36.70%)  ???:dlock::detail::run_script(...) [/path/lock_bench]"
    std::string line = buf;
    auto paren = line.find(" (");
    auto name = line.find(")  ");
    if (paren == std::string::npos || name == std::string::npos || paren > 20) continue;
    std::string number;
    for (char c : line.substr(0, paren)) {
      if (std::isdigit(static_cast<unsigned char>(c))) number += c;
    }
    if (number.empty()) continue;
    std::string function = line.substr(name + 3);
    while (!function.empty() && std::isspace(static_cast<unsigned char>(function.back()))) function.pop_back();
    costs[function] += std::stod(number);
  }
  ::pclose(pipe);
  return costs;
}

// Per-cycle inclusive cost of each function: the difference of two runs, so start-up, connect
// and one-off initialisation cancel out. Written to callgrind-top.txt for docs/benchmarks.md.
void write_per_cycle_profile(const std::string& small_file, const std::string& large_file,
                             int cycles, const std::string& path) {
  auto a = inclusive_costs(small_file), b = inclusive_costs(large_file);
  std::vector<std::pair<double, std::string>> per_cycle;
  for (const auto& [function, cost] : b) {
    double d = (cost - (a.count(function) ? a[function] : 0.0)) / cycles;
    if (d >= 200) per_cycle.emplace_back(d, function);
  }
  std::sort(per_cycle.rbegin(), per_cycle.rend());
  std::ofstream out(path);
  out << "# Inclusive instructions per uncontended lock()+unlock() cycle, by function\n"
      << "# (callgrind, difference of a " << cycles << "-cycle-longer run; all threads)\n";
  for (std::size_t i = 0; i < per_cycle.size() && i < 60; ++i) {
    char num[32];
    std::snprintf(num, sizeof num, "%10.0f  ", per_cycle[i].first);
    out << num << per_cycle[i].second.substr(0, 220) << "\n";
  }
}

std::optional<row> client_cpu(const options& o) {
  if (std::system("command -v valgrind >/dev/null 2>&1") != 0) {
    std::cerr << "lock_bench: valgrind not installed; skipping the client CPU figure\n";
    return std::nullopt;
  }
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string dir = std::filesystem::temp_directory_path() / ("dlock-callgrind-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const int small = 200, large = 1200;
  std::cerr << "lock_bench: callgrind, " << small << " and " << large << " cycles ...\n";
  double a = callgrind_instructions(self, small, dir + "/small.out");
  double b = callgrind_instructions(self, large, dir + "/large.out");
  if (a <= 0 || b <= a) {
    std::cerr << "lock_bench: callgrind run failed (see " << dir << ")\n";
    return std::nullopt;
  }
  row r{"client_cpu", "dlock", "callgrind, lock()+unlock(), 1 node, 1 locker", 1, 1, {}, {}};
  r.figures["instructions_per_cycle"] = (b - a) / (large - small);
  write_per_cycle_profile(dir + "/small.out", dir + "/large.out", large - small,
                          o.out + "/callgrind-per-cycle.txt");
  std::filesystem::remove_all(dir);
  return r;
}

int run_cycles_mode(const options& o) {
  redis_server server;
  server_pids[0] = server.pid();
  dlock::client node{server.url()};
  run_cycles(node, 20, "cg:warm");  // connect and load the scripts outside the difference
  run_cycles(node, o.cycles, "cg:key");
  server_pids[0] = 0;
  return 0;
}

// The warm-up, window and hold the options ask for.
timing timing_of(const options& o) {
  return {std::chrono::milliseconds(o.warm_ms),
          std::chrono::milliseconds(static_cast<long>(o.seconds * 1000)), std::chrono::milliseconds(1)};
}

// A dlock waiter behind node-redlock's holder: woken by the key's invalidation (CLIENT
// TRACKING), and, for comparison, polling at the default retry_delay.
std::vector<row> run_foreign(const peers& p, unsigned short port, std::vector<dlock::client>& set,
                             const timing& t) {
  std::vector<row> rows;
  dlock::lock_options polling;
  polling.wake_on_release = false;
  for (auto& [variant, options] : std::vector<std::pair<std::string, dlock::lock_options>>{
           {"defaults (watches the key)", {}}, {"polling (wake_on_release = false)", polling}}) {
    std::cerr << "lock_bench: dlock behind a node-redlock holder, " << variant << "\n";
    flush_all(set);
    std::string error;
    auto r = run_behind_foreign_holder(p, port, set[0], options, variant, t, error);
    if (r) rows.push_back(*r);
    else std::cerr << "lock_bench: the foreign holder failed: " << error << "\n";
  }
  return rows;
}

int run_foreign_mode(const options& o) {
  peers p = find_peers(o.peers_dir);
  if (!p.usable) throw std::runtime_error("the npm peers cannot run: " + p.why_not);
  redis_server server;
  server_pids[0] = server.pid();
  std::vector<dlock::client> set{dlock::client{server.url()}};
  timing t = timing_of(o);
  for (const auto& r : run_foreign(p, server.port(), set, t)) {
    std::cout << r.variant << ": " << r.get("samples") << " samples, p50 " << r.get("p50_ms")
              << " ms, p99 " << r.get("p99_ms") << " ms (" << r.get("foreign_releases")
              << " foreign releases)\n";
  }
  server_pids[0] = 0;
  return 0;
}

// The election rows: 4 candidates, TTL 500 ms, 20 crashes, on 1 and on 3 servers.
std::vector<row> election_rows(std::vector<dlock::client> servers) {
  std::vector<row> rows;
  for (std::size_t n : {1u, 3u}) {
    std::vector<dlock::client> set(servers.begin(), servers.begin() + static_cast<std::ptrdiff_t>(n));
    flush_all(set);
    rows.push_back(run_election_failover(set, 4, std::chrono::milliseconds(500), 20));
  }
  return rows;
}

int run_election_mode() {
  std::vector<std::unique_ptr<redis_server>> servers;
  std::vector<dlock::client> clients;
  for (std::size_t i = 0; i < 3; ++i) {
    servers.push_back(std::make_unique<redis_server>());
    server_pids[i] = servers.back()->pid();
    clients.emplace_back(servers.back()->url());
  }
  for (const auto& r : election_rows(clients)) {
    std::cout << "election, " << r.nodes << " node(s), " << r.variant << ": failover p50 "
              << r.get("failover_p50_ms") << " ms, max " << r.get("failover_max_ms")
              << " ms; beyond the crashed lease's PTTL p50 " << r.get("added_p50_ms") << " ms = "
              << r.get("added_p50_rtts") << " RTT, p99 " << r.get("added_p99_ms") << " ms ("
              << r.get("samples") << " crashes)\n";
  }
  for (auto& pid : server_pids) pid = 0;
  return 0;
}

// The read-write lock rows: 16 workers, 90 % reads, hold 1 ms; shared_mutex, then the same
// load on a mutex.
std::vector<row> rwlock_rows(dlock::client node, const timing& t) {
  std::vector<row> rows;
  std::vector<dlock::client> set{node};
  for (bool exclusive_only : {false, true}) {
    flush_all(set);
    rows.push_back(run_rwlock_mix(node, 16, 90, exclusive_only, t));
  }
  return rows;
}

int run_rwlock_mode(const options& o) {
  redis_server server;
  server_pids[0] = server.pid();
  for (const auto& r : rwlock_rows(dlock::client{server.url()}, timing_of(o))) {
    std::cout << r.variant << ", " << r.concurrency << " workers: " << r.get("cycles_per_s")
              << " cycles/s (" << r.get("reads_per_s") << " reads/s), most readers at once "
              << r.get("most_readers") << ", read wait p50/p99 " << r.get("read_wait_p50_ms")
              << "/" << r.get("read_wait_p99_ms") << " ms, write wait p50/p99/max "
              << r.get("write_wait_p50_ms") << "/" << r.get("write_wait_p99_ms") << "/"
              << r.get("write_wait_max_ms") << " ms, overlaps " << r.get("overlaps")
              << ", errors " << r.get("errors") << "\n";
  }
  server_pids[0] = 0;
  return 0;
}

// The command handoff rows: quiet, then with two threads spinning (a busy 2-core machine).
std::vector<row> cli_handoff_rows(dlock::client node, const std::string& url, const options& o) {
  std::vector<row> rows;
  std::vector<dlock::client> set{node};
  for (int busy : {0, 2}) {
    flush_all(set);
    rows.push_back(run_cli_handoff(node, {DLOCK_BENCH_CLI, DLOCK_BENCH_STAMP, url, o.samples, busy}));
  }
  return rows;
}

int run_cli_handoff_mode(const options& o) {
  redis_server server;
  server_pids[0] = server.pid();
  for (const auto& r : cli_handoff_rows(dlock::client{server.url()}, server.url(), o)) {
    std::cout << "command handoff, " << r.variant << ": p50 " << r.get("handoff_p50_ms")
              << " ms, p99 " << r.get("handoff_p99_ms") << " ms, max " << r.get("handoff_max_ms")
              << " ms (" << r.get("samples") << " handoffs, " << r.get("unqueued")
              << " not counted, " << r.get("overlaps") << " overlaps); a bare spawn of CMD p50 " << r.get("floor_p50_ms")
              << " ms: the handoff is " << r.get("handoff_p50_floors") << " of them\n";
  }
  server_pids[0] = 0;
  return 0;
}

// Issue 39's server cost rows on one server: the two fenced floors, then dlock's semaphore
// (unfair and fair, limit 1) and read-write lock (exclusive and shared) in async chains.
std::vector<row> server_cost_rows(dlock::client node, const timing& t,
                                  const std::vector<int>& floor_lockers,
                                  const std::vector<int>& primitive_lockers) {
  std::vector<row> rows;
  std::vector<dlock::client> set{node};
  auto progress = [](const std::string& what) { std::cerr << "lock_bench: " << what << "\n"; };
  for (auto kind : {floor_kind::lua, floor_kind::native}) {
    for (int c : floor_lockers) {
      progress(std::string("floor, ") + floor_variant(kind) + ", " + std::to_string(c) + " lockers");
      flush_all(set);
      rows.push_back(run_floor(node, kind, c, t, "bench:floor:" + std::to_string(c) + ":"));
    }
  }
  for (auto p : {primitive::semaphore, primitive::fair_semaphore, primitive::rwlock_exclusive,
                 primitive::rwlock_shared}) {
    for (int c : primitive_lockers) {
      flush_all(set);
      rows.push_back(run_primitive_async(node, p, c, t, "bench:prim:" + std::to_string(c) + ":"));
      progress(rows.back().library + ", " + rows.back().variant + ", " + std::to_string(c) + " lockers");
    }
  }
  return rows;
}

// Prints the verdicts of issue 39 among `verdicts`.
void print_issue39_verdicts(const std::vector<verdict>& verdicts) {
  for (const auto& v : verdicts) {
    bool ours = v.target.rfind("fenced lock", 0) == 0 || v.target.rfind("semaphore and", 0) == 0 ||
                v.target.rfind("user driver", 0) == 0;
    if (ours) std::cout << "- " << v.target << ": " << v.status << " (" << v.measured << ")\n";
  }
}

int run_server_cost_mode(const options& o) {
  redis_server server;
  server_pids[0] = server.pid();
  std::vector<dlock::client> set{dlock::client{server.url()}};
  timing t = timing_of(o);
  std::vector<row> rows;
  for (int c : {1, 8, 64}) {
    std::cerr << "lock_bench: dlock lock, async, " << c << " lockers\n";
    flush_all(set);
    rows.push_back(run_uncontended_async(set, c, t, "bench:ua:" + std::to_string(c) + ":"));
  }
  for (auto& r : server_cost_rows(set[0], t, {1, 8, 64}, {8})) rows.push_back(std::move(r));
  peers p = find_peers(o.peers_dir);
  if (!o.peers || !p.usable) {
    std::cerr << "lock_bench: without the npm peers: " << (o.peers ? p.why_not : "--no-peers") << "\n";
  } else {
    for (std::string lib : {"node-redlock", "redis-semaphore"}) {
      for (int c : {1, 8, 64}) {
        std::cerr << "lock_bench: " << lib << " uncontended, " << c << " lockers\n";
        flush_all(set);
        std::string error;
        auto r = run_peer(p, {lib, "uncontended", 1, c, 0}, {server.port()}, set, t, error);
        if (r) rows.push_back(*r);
        else std::cerr << "lock_bench: " << lib << " failed: " << error << "\n";
      }
    }
  }
  add_ratios(rows);
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  std::cout << server_cost_markdown(rows) << "\nload average (1 min) at the end: " << load << "\n\n";
  print_issue39_verdicts(judge_targets(rows));
  server_pids[0] = 0;
  return 0;
}

// The user driver's switches, from --ud-variant (comma-separated).
user_driver_setup user_driver_of(const options& o, const std::string& url, int lockers) {
  user_driver_setup s{url, lockers, o.seconds_given ? o.seconds : 2.5, 2};
  std::istringstream list(o.ud_variant);
  for (std::string v; std::getline(list, v, ',');) {
    if (v == "async-first") s.async_first = true;
    else if (v == "barrier") s.barrier = true;
    else if (v == "warm") s.warm_ms = o.warm_ms;
    else if (v == "vector") s.node_vector = true;
    else if (v != "five-servers" && v != "after-bench" && !v.empty())
      throw std::runtime_error("unknown --ud-variant " + v);
  }
  return s;
}

std::vector<row> user_driver_rows(const options& o, const std::string& url) {
  std::vector<row> rows;
  std::vector<int> lockers{8, 64};
  if (o.ud_lockers > 0) lockers = {o.ud_lockers};
  for (int n : lockers) {
    std::cerr << "lock_bench: user driver, " << n << " lockers\n";
    rows.push_back(run_user_driver(user_driver_of(o, url, n)));
  }
  return rows;
}

// The user driver alone. Two switches act here, around it: five-servers (four more idle
// servers, each with a client, as make bench has) and after-bench (lock_bench's uncontended
// threads and async rows at the same lockers first, in this process).
int run_user_driver_mode(const options& o) {
  std::vector<std::unique_ptr<redis_server>> servers;
  std::vector<dlock::client> clients;
  bool five = o.ud_variant.find("five-servers") != std::string::npos;
  for (std::size_t i = 0; i < (five ? 5u : 1u); ++i) {
    servers.push_back(std::make_unique<redis_server>());
    server_pids[i] = servers.back()->pid();
    if (five) clients.emplace_back(servers.back()->url());
  }
  for (auto& c : clients) c.exec({"PING"});
  if (o.ud_variant.find("after-bench") != std::string::npos) {
    std::vector<dlock::client> set{dlock::client{servers[0]->url()}};
    timing t = timing_of(o);
    for (int n : {8, 64}) {
      if (o.ud_lockers > 0 && n != o.ud_lockers) continue;
      auto th = run_uncontended(set, n, t, "bench:u:" + std::to_string(n) + ":");
      auto as = run_uncontended_async(set, n, t, "bench:ua:" + std::to_string(n) + ":");
      std::cout << "lock_bench's rows first, " << n << " lockers: threads "
                << th.get("cycles_per_s") << ", async " << as.get("cycles_per_s") << " cycles/s: "
                << th.get("cycles_per_s") / as.get("cycles_per_s") << "\n";
    }
  }
  auto rows = user_driver_rows(o, servers[0]->url());
  for (const auto& r : rows) {
    std::cout << r.concurrency << " lockers, " << r.variant << ": threads "
              << r.get("threads_cycles_per_s") << ", async " << r.get("async_cycles_per_s")
              << " cycles/s: " << r.get("ratio") << " (rounds";
    for (int i = 1; r.has("ratio_" + std::to_string(i)); ++i)
      std::cout << " " << r.get("threads_" + std::to_string(i)) << "/"
                << r.get("async_" + std::to_string(i)) << " = " << r.get("ratio_" + std::to_string(i));
    std::cout << "); per cycle: threads " << r.get("threads_switches_per_cycle") << " switches "
              << r.get("threads_cpu_us_per_cycle") << " us, async "
              << r.get("async_switches_per_cycle") << " switches " << r.get("async_cpu_us_per_cycle")
              << " us; load " << r.get("load_before") << " -> " << r.get("load_after") << "\n";
  }
  std::cout << user_driver_markdown(rows);
  print_issue39_verdicts(judge_targets(rows));
  for (auto& pid : server_pids) pid = 0;
  return 0;
}

int run_single_scenario_mode(const options& o) {
  redis_server server;
  server_pids[0] = server.pid();
  std::vector<dlock::client> nodes{dlock::client{server.url()}};
  timing t = timing_of(o);
  bool async = o.async_lockers > 0;
  int lockers = async ? o.async_lockers : o.thread_lockers;
  auto r = async ? run_uncontended_async(nodes, lockers, t, "bench:a:")
                 : run_uncontended(nodes, lockers, t, "bench:t:");
  std::cout << lockers << (async ? " async" : " thread") << " lockers, 1 node: "
            << r.get("cycles_per_s")
            << " cycles/s, p50 " << r.get("p50_ms") << " ms, p99 " << r.get("p99_ms")
            << " ms, client CPU " << r.get("client_cpu_us_per_op") << " us/cycle, errors "
            << r.get("errors") << ", " << r.get("cycles_total") << " cycles in all\n";
  server_pids[0] = 0;
  return 0;
}

// The handoffs alone, in round trips of a blocking client.exec(PING) on the same server (p50;
// a quicker and noisier basis than redis-benchmark's mean that make bench divides by): for
// comparing the lock's and the semaphore's within one run.
int run_contended_mode(const options& o) {
  redis_server server;
  server_pids[0] = server.pid();
  std::vector<dlock::client> set{dlock::client{server.url()}};
  timing t = timing_of(o);
  double rtt = run_exec_rtt(set[0], std::chrono::milliseconds(500)).get("p50_ms");
  for (int workers : {8, 64}) {
    // The semaphore of one permit beside the mutex: the same handoff, apples to apples; of 4,
    // the row make bench reports (four times the acquisitions, so a busier server).
    for (int sem : {0, 1, 4}) {
      flush_all(set);
      auto r = sem ? run_contended(set, {"semaphore", "limit " + std::to_string(sem), workers, sem, true}, t,
                                   semaphore_contenders(set[0], "bench:sem", sem, {}))
                   : run_contended(set, {"contended", "defaults", workers, 1, true}, t,
                                   mutex_contenders(set, "bench:contended", {}));
      std::cout << (sem ? "semaphore of " + std::to_string(sem) : std::string("mutex         ")) << " "
                << workers << " workers: "
                << r.get("acquisitions_per_s") << " acq/s, handoff p50 " << r.get("handoff_p50_ms")
                << " ms = " << r.get("handoff_p50_ms") / rtt << " RTT, p99 "
                << r.get("handoff_p99_ms") << " ms (exec(PING) p50 " << rtt << " ms); per acquisition: "
                << r.get("cmds_sent_per_op") << " commands sent, server "
                << r.get("server_usec_per_op") << " us, client CPU "
                << r.get("client_cpu_us_per_op") << " us\n";
    }
  }
  server_pids[0] = 0;
  return 0;
}

int run_all(const options& o) {
  std::filesystem::create_directories(o.out);
  timing t = timing_of(o);
  timing contended_t = t;
  contended_t.measure = t.measure * 2;  // handoffs are rarer than cycles: more samples

  std::vector<std::unique_ptr<redis_server>> servers;
  std::vector<dlock::client> clients;
  for (int i = 0; i < 5; ++i) {
    servers.push_back(std::make_unique<redis_server>());
    server_pids[static_cast<std::size_t>(i)] = servers.back()->pid();
    clients.emplace_back(servers.back()->url());
  }
  auto first = [&](int n) { return std::vector<dlock::client>(clients.begin(), clients.begin() + n); };
  std::vector<unsigned short> ports;
  for (auto& s : servers) ports.push_back(s->port());

  const auto& release = dlock::detail::release_script;
  for (auto& c : clients) {
    auto sha = c.exec({"SCRIPT", "LOAD", release.body}).str();
    if (sha != release.sha1) throw std::runtime_error("SCRIPT LOAD gave " + sha + ", embedded " + std::string(release.sha1));
  }
  run_info info = describe(o, clients[0]);
  std::vector<row> rows;
  auto progress = [](const std::string& what) { std::cerr << "lock_bench: " << what << "\n"; };

  progress("ceiling (redis-benchmark) ...");
  auto ceiling_rows = run_ceiling(ports[0], clients[0], release, {1, 8, 64}, o.seconds * 0.5);
  rows.insert(rows.end(), ceiling_rows.begin(), ceiling_rows.end());
  rows.push_back(run_exec_rtt(clients[0], t.measure / 2));

  for (int nodes : {1, 3, 5}) {
    for (bool async : {false, true}) {
      for (int lockers : {1, 8, 64}) {
        progress("dlock uncontended" + std::string(async ? " async, " : ", ") +
                 std::to_string(nodes) + " node(s), " + std::to_string(lockers) + " lockers");
        auto set = first(nodes);
        flush_all(set);
        std::string prefix = std::string(async ? "bench:ua:" : "bench:u:") +
                             std::to_string(nodes) + ":" + std::to_string(lockers) + ":";
        rows.push_back(async ? run_uncontended_async(set, lockers, t, prefix)
                             : run_uncontended(set, lockers, t, prefix));
      }
    }
  }
  progress("server cost: fenced floors, semaphore, read-write lock ...");
  for (auto& r : server_cost_rows(clients[0], t, {1, 8, 64}, {1, 8, 64})) rows.push_back(std::move(r));
  for (auto& r : user_driver_rows(o, servers[0]->url())) rows.push_back(std::move(r));

  // Contended mutex: the defaults (waiters woken by the release) and plain polling every 2 ms.
  dlock::lock_options polling;
  polling.retry_delay = std::chrono::milliseconds(2);
  polling.wake_on_release = false;
  dlock::lock_options fair;
  fair.fair = true;
  struct contended_plan {
    contended_setup setup;
    dlock::lock_options options;
  };
  std::vector<contended_plan> contended_runs;
  for (int workers : {8, 64}) {
    contended_runs.push_back({{"contended", "defaults (wake on release)", workers, 1, true}, {}});
    contended_runs.push_back({{"contended", "polling, retry_delay 2 ms", workers, 1, true}, polling});
  }
  contended_runs.push_back({{"fairness", "defaults (unfair), greedy workers", 8, 1, false}, {}});
  contended_runs.push_back({{"fairness", "fair = true, greedy workers", 8, 1, false}, fair});
  for (const auto& run : contended_runs) {
    progress("dlock " + run.setup.scenario + ", " + std::to_string(run.setup.workers) +
             " workers, " + run.setup.variant);
    auto set = first(1);
    flush_all(set);
    rows.push_back(run_contended(set, run.setup, contended_t,
                                 mutex_contenders(set, "bench:" + run.setup.scenario, run.options)));
  }
  for (int workers : {8, 64}) {
    progress("dlock semaphore (limit 4), " + std::to_string(workers) + " workers");
    auto set = first(1);
    flush_all(set);
    rows.push_back(run_contended(set, {"semaphore", "limit 4, defaults", workers, 4, true},
                                 contended_t, semaphore_contenders(set[0], "bench:sem", 4, {})));
  }

  {
    // Mode 1 on a 3-master cluster. Server figures (and the command counts drawn from them)
    // are left out: INFO through a cluster client reaches one master, not all three.
    progress("dlock on a Redis Cluster (3 masters) ...");
    dlock::test::redis_cluster cluster;
    for (int i = 0; i < cluster.size(); ++i) server_pids[5 + static_cast<std::size_t>(i)] = cluster.node(i).pid();
    std::vector<dlock::client> set{dlock::client{cluster.seeds_url()}};
    auto as_cluster_row = [](row r, const std::string& mode) {
      r.library = "dlock (cluster)";
      r.variant = mode + ", 3 masters, " + r.variant;
      r.nodes = 3;
      for (auto it = r.figures.begin(); it != r.figures.end();) {
        bool from_info = it->first.rfind("server_", 0) == 0 || it->first.rfind("cmds_", 0) == 0;
        it = from_info ? r.figures.erase(it) : std::next(it);
      }
      return r;
    };
    for (int lockers : {1, 64}) {
      progress("dlock (cluster) uncontended, " + std::to_string(lockers) + " lockers");
      rows.push_back(as_cluster_row(
          run_uncontended(set, lockers, t, "bench:cl:u:" + std::to_string(lockers) + ":"),
          "mode 1"));
    }
    progress("dlock (cluster) contended, 64 workers");
    rows.push_back(as_cluster_row(
        run_contended(set, {"contended", "defaults (wake on release)", 64, 1, true}, contended_t,
                      mutex_contenders(set, "bench:cl:contended", {})),
        "mode 1"));
    // Mode 2: three copies on three masters, taken by quorum.
    dlock::lock_options copies;
    copies.copies = 3;
    for (int lockers : {1, 64}) {
      progress("dlock (cluster) 3 copies, uncontended, " + std::to_string(lockers) + " lockers");
      rows.push_back(as_cluster_row(
          run_uncontended(set, lockers, t, "bench:cl:c:" + std::to_string(lockers) + ":", copies),
          "mode 2 (3 copies)"));
    }
    progress("dlock (cluster) 3 copies, contended, 64 workers");
    rows.push_back(as_cluster_row(
        run_contended(set, {"contended", "defaults (wake on release)", 64, 1, true},
                      contended_t, mutex_contenders(set, "bench:cl:c:contended", copies)),
        "mode 2 (3 copies)"));
    for (int i = 0; i < cluster.size(); ++i) server_pids[5 + static_cast<std::size_t>(i)] = 0;
  }

  if (o.peers) {
    peers p = find_peers(o.peers_dir);
    if (!p.usable) {
      std::cerr << "lock_bench: skipping the npm peers: " << p.why_not << "\n";
    } else {
      std::vector<peer_scenario> plan;
      for (std::string lib : {"node-redlock", "redis-semaphore"}) {
        for (int nodes : {1, 3, 5})
          for (int c : {1, 8, 64}) plan.push_back({lib, "uncontended", nodes, c, 0});
      }
      for (std::string lib : {"node-redlock", "redis-semaphore"}) {
        for (int c : {8, 64})
          for (int retry : {0, 2}) plan.push_back({lib, "contended", 1, c, retry});
        plan.push_back({lib, "fairness", 1, 8, 0});
      }
      for (int c : {8, 64}) plan.push_back({"redis-semaphore", "semaphore", 1, c, 0, 4});
      auto set = first(1);
      for (auto& r : run_foreign(p, ports[0], set, contended_t)) rows.push_back(std::move(r));
      for (const auto& s : plan) {
        int nodes = s.nodes;
        progress(s.library + " " + s.scenario + ", " + std::to_string(nodes) + " node(s), " +
                 std::to_string(s.concurrency) + (s.retry_ms ? ", retry 2 ms" : ""));
        auto set = first(nodes);
        flush_all(set);
        std::vector<unsigned short> ps(ports.begin(), ports.begin() + nodes);
        std::string error;
        auto r = run_peer(p, s, ps, set, s.scenario == "uncontended" ? t : contended_t, error);
        if (r) rows.push_back(*r);
        else std::cerr << "lock_bench: " << s.library << " failed: " << error << "\n";
      }
    }
  }

  progress("dlock election, leader crashes, 1 and 3 nodes ...");
  for (auto& r : election_rows(first(3))) rows.push_back(std::move(r));
  progress("dlock read-write lock, 90 % reads, 16 workers ...");
  for (auto& r : rwlock_rows(clients[0], contended_t)) rows.push_back(std::move(r));
  progress("dlock run -> dlock run, the command handoff, quiet and busy ...");
  for (auto& r : cli_handoff_rows(clients[0], servers[0]->url(), o)) rows.push_back(std::move(r));

  if (o.callgrind) {
    if (auto r = client_cpu(o)) rows.push_back(*r);
  }

  std::ifstream("/proc/loadavg") >> info.load_after;
  add_ratios(rows);
  auto verdicts = judge_targets(rows);
  write_json(o.out + "/latest.json", info, rows, verdicts);
  auto md = markdown(info, rows, verdicts);
  std::ofstream(o.out + "/latest.md") << md;
  write_plot_data(o.out, rows);
  std::cout << md;

  for (auto& pid : server_pids) pid = 0;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  ::signal(SIGPIPE, SIG_IGN);
  try {
    options o = parse(argc, argv);
    if (o.cycles > 0) return run_cycles_mode(o);
    if (o.async_lockers > 0 || o.thread_lockers > 0) return run_single_scenario_mode(o);
    if (o.foreign_only) return run_foreign_mode(o);
    if (o.contended_only) return run_contended_mode(o);
    if (o.election_only) return run_election_mode();
    if (o.rwlock_only) return run_rwlock_mode(o);
    if (o.cli_handoff_only) return run_cli_handoff_mode(o);
    if (o.server_cost_only) return run_server_cost_mode(o);
    if (o.user_driver_only) return run_user_driver_mode(o);
    return run_all(o);
  } catch (const std::exception& e) {
    std::cerr << "lock_bench: " << e.what() << "\n";
    return 1;
  }
}
