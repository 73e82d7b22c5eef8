// SPDX-License-Identifier: Apache-2.0
// tests/fault/scenario.hpp: one fault scenario, from the servers up to its one-line verdict.
//   scenario_options  how many nodes, persistence, proxies, clock shims, workers, duration
//   outcome           what the checkers found: acquisitions, overlaps, fence audit, errors
//   scenario          starts N redis nodes and one resource server, runs fault_worker processes
//                     that contend for three locks, lets the test inject faults meanwhile, then
//                     heals everything, collects the workers' reports and judges them
// The locks: "single", a dlock::mutex on node 0; "redlock", a dlock::mutex over all nodes; and
// "sem", a dlock::semaphore with 2 permits on node 0; with rwlock, "rw", a dlock::shared_mutex
// on node 0 (its writers write through the fence); with lockset, "set", a dlock::lock_set of
// two names on node 0 (its holders write through the fence). Sets contend with sets only: a
// mutex of the same name would keep them out (a set waits by polling, not in the queue that a
// mutex's release hands the key to). With mixed_kinds, "mix" on node 0 is taken, per holding
// at random, as a dlock::mutex, a dlock::shared_mutex writer or reader, or a dlock::lock_set of
// {mix, mix-pair}: one name is one lock, so these exclude each other (readers share) and their
// fences grow across the kinds; the checkers judge them as one lock, its readers as shared.
// With fair_semaphore, "fair", a fair dlock::semaphore with 2 permits on node 0. With election,
// "elect", a dlock::election over all nodes, whose leaders write through the fence (the term).
// With cli_run, "cli", the dlock command's `run` over all nodes, its CMD writing DLOCK_FENCE
// through the fence (recorded from CMD's start to its last write).
// The fenced resource is the separate resource server (never faulted), written with
// dlock::fenced_set.
// Not thread-safe: one test thread drives a scenario.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fault/history.hpp"
#include "fault/netns_lab.hpp"
#include "fault/tcp_proxy.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_group.hpp"

namespace dlock::fault {

struct scenario_options {
  int nodes = 3;             // Redlock over all of them; 1 leaves out the "redlock" lock
  bool persistence = false;  // the nodes run --appendonly yes --appendfsync always
  bool proxied = false;      // each worker reaches each node through a tcp_proxy of its own
  std::vector<int> shimmed{};  // nodes started under clock_shim (set_clock moves them)
  bool semaphore = true;     // also contend for the semaphore "sem"
  bool rwlock = false;       // also for the read-write lock "rw" on node 0 (readers and writers)
  bool lockset = false;      // also for the lock set {set, set-pair} on node 0, named "set"
  bool mixed_kinds = false;  // also for "mix" on node 0, as every kind that shares one name
  bool fair_semaphore = false;  // also for "fair", a fair semaphore of 2 permits on node 0
  bool election = false;  // also for "elect", an election over all nodes (its term the fence)
  bool cli_run = false;   // also for "cli": `dlock run` over all nodes (its CMD writes)
  int processes = 3;         // worker processes, one thread per lock in each
  std::chrono::milliseconds duration{5000};  // how long the workers contend
  std::chrono::milliseconds ttl{800};
  std::vector<std::string> worker_flags{};  // more fault_worker flags (--stale-check, --mixed ...)
  // Node 0 is a master with one replica (node 1), watched by 3 sentinels whose down-after is
  // 5 s (test::sentinel_group), and the workers reach it by its redis-sentinel:// URL. The
  // replica replicates through replication_link(), a proxy that can make it lag. Needs
  // nodes = 1. The heal leaves a killed data node dead: the sentinels moved on.
  bool sentinel = false;
  // The nemesis: every node, the resource and each worker process in a network namespace of its
  // own, joined by a bridge (netns_lab): net() cuts links, and the heal restores them. Not with
  // sentinel, proxied or shimmed. The test skips where netns_lab::unavailable() says why.
  bool netns = false;
  // Each worker runs under libfaketime (Debian's), its clock moved by jump_client_clock(): only
  // the wall clock (CLOCK_REALTIME, which an NTP step moves), or with fake_monotonic every
  // clock, steady_clock's too, which dlock's validity reads. The history is stamped in real
  // time all the same (history.hpp).
  bool faked_client_clocks = false;
  bool fake_monotonic = false;
};

struct outcome {
  long long acquisitions = 0;
  std::map<std::string, long long> acquisitions_by_lock;  // "mix" per kind: "mix.reader" ...
  std::size_t overlaps = 0;
  std::map<std::string, std::size_t> overlaps_by_lock;
  fence_audit fence;
  long long lost = 0;                       // holdings whose lost() had fired by their end
  // Registers on the resource whose final value is below the highest token a write saw
  // accepted: an accepted update was lost to an older holder's write.
  std::size_t lost_updates = 0;
  std::map<std::string, long long> errors;  // "acquire.timeout" -> count
  int failed_workers = 0;                   // workers that did not exit 0 in time
  std::string line;                         // the one line printed
  report history;                           // every worker's, merged
};

class scenario {
 public:
  scenario(std::string name, scenario_options options = {});
  ~scenario();
  scenario(const scenario&) = delete;
  scenario& operator=(const scenario&) = delete;

  const scenario_options& options() const noexcept { return options_; }
  // With sentinel: 0 is the first master, 1 its replica.
  test::redis_server& node(int i) {
    return sentinels_ ? sentinels_->node(i) : *nodes_.at(static_cast<std::size_t>(i));
  }
  test::sentinel_group& sentinels() { return *sentinels_; }  // with options().sentinel
  tcp_proxy& replication_link() { return *replication_link_; }  // with options().sentinel
  test::redis_server& resource() { return *resource_; }
  tcp_proxy& proxy(int process, int node);
  // Sets a shimmed node's wall clock: offset from real time, and rate (1 = real speed).
  void set_clock(int node, std::chrono::milliseconds offset, double rate = 1.0);
  // The worker process that holds `lock` now and means to hold it for at least `left` more (as it
  // announced on the resource), or -1.
  int holder_of(const std::string& lock,
                std::chrono::milliseconds left = std::chrono::milliseconds(0));
  // How long the current holder of `lock` still means to hold it (the PTTL of its announcement
  // on the resource), or -1 ms when nobody holds it: a jump up means a new holding began.
  std::chrono::milliseconds holder_left(const std::string& lock);
  // With netns: the lab, and the members that the nodes, the resource and the workers are.
  netns_lab& net() { return *lab_; }
  int node_member(int node) const { return node_members_.at(static_cast<std::size_t>(node)); }
  int worker_member(int process) const {
    return worker_members_.at(static_cast<std::size_t>(process));
  }
  int resource_member() const { return resource_member_; }
  // With faked_client_clocks: from now on, the worker's clocks read `offset` more than they
  // would have (libfaketime's relative offset).
  void jump_client_clock(int process, std::chrono::milliseconds offset);
  void pause_worker(int process);
  void resume_worker(int process);

  // Starts the workers, runs `faults` on this thread (it should return soon after running() turns
  // false), heals (resumes nodes and workers, proxies back to pass), waits for the workers, judges
  // their reports and prints outcome::line.
  outcome run(const std::function<void(scenario&)>& faults);
  // True while the workers are meant to contend.
  bool running() const;
  // Sleeps for `d`, or less when contention ends first.
  void sleep(std::chrono::milliseconds d) const;

 private:
  std::vector<std::string> urls_for(int process) const;
  outcome judge(const report& r, int failed_workers) const;
  // outcome::lost_updates, read from the resource once the workers have ended.
  std::size_t lost_updates(const std::vector<write_record>& writes) const;

  std::string name_;
  scenario_options options_;
  std::string dir_;
  std::unique_ptr<netns_lab> lab_;  // before the processes in it: removed after they end
  std::vector<int> node_members_, worker_members_;
  int resource_member_ = -1;
  std::vector<std::unique_ptr<test::redis_server>> nodes_;
  std::unique_ptr<tcp_proxy> replication_link_;  // outlives the replica that uses it
  std::unique_ptr<test::sentinel_group> sentinels_;
  std::unique_ptr<test::redis_server> resource_;
  std::vector<std::vector<std::unique_ptr<tcp_proxy>>> proxies_;  // [process][node]
  std::vector<std::unique_ptr<test::child_process>> workers_;
  std::vector<bool> worker_paused_;
  std::chrono::steady_clock::time_point end_{};
};

// Appends `line` to fault-results.log next to the test binary (the lines of the last runs).
void log_result(const std::string& line);

}  // namespace dlock::fault
