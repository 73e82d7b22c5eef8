// SPDX-License-Identifier: Apache-2.0
// The nemesis (issue 40): real network faults between network namespaces. Every redis-server,
// the fenced resource and each worker process live in a namespace of their own, joined by a
// bridge (netns_lab.hpp); the nemesis cuts links (both ways, silently: no RST, no FIN), cuts
// one way (a worker stops hearing one node while its requests still run there), and flaps a
// link, on a seeded schedule that the test prints. It also pauses holders, crashes and
// restarts nodes with persistence and restarts them without, and jumps a client's clock (libfaketime: the wall clock alone, or every
// clock). In every row each worker process (fault_worker) holds, one thread each, the lock on
// one node, a Redlock over 3 or 5, a semaphore of 2 permits (unfair and fair), a read-write
// lock, a lock set, an election over all nodes and `dlock run` over all nodes, and writes a
// register on the resource through the fence. One checker judges every run (history.hpp):
// mutual exclusion of the validity the holders believed in (except in the two rows that break
// a documented assumption), fences rising in real time at the register (no stale write
// accepted), and liveness once healed: each lock held again within a bound after each heal.
// tests/fault/nemesis_table.py turns fault-results.log into docs/guarantees.md's matrix.
//   DLOCK_NEMESIS_SEED=<n>     replays a schedule (each test prints its seed)
//   DLOCK_NEMESIS_SECONDS=<s>  the long mode: each run lasts s seconds (default 12, the last 6
//                              of them quiet, to measure the recovery after the last heal)
// Skips, saying why, where the machine cannot make namespaces (not root, no `ip`).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fault/history.hpp"
#include "fault/netns_lab.hpp"
#include "fault/scenario.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"

namespace dlock::fault {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using test::eventually;

#define SKIP_WITHOUT_NAMESPACES()                                               \
  do {                                                                          \
    if (auto why = netns_lab::unavailable(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)
#define SKIP_WITHOUT_IPTABLES()                                                 \
  do {                                                                          \
    if (auto why = netns_lab::no_iptables(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

// After the last heal, every lock must be held again within this: the holder cut off before
// the heal may keep its key for a TTL (800 ms), a waiter's reconnect may wait out a SYN
// retransmit (1 s, then 3 s), and a Redlock round needs its quorum back.
constexpr milliseconds recovery_bound = 6s;

unsigned nemesis_seed() {
  if (const char* s = std::getenv("DLOCK_NEMESIS_SEED"); s && *s) {
    return static_cast<unsigned>(std::strtoul(s, nullptr, 10));
  }
  return std::random_device{}();
}

milliseconds nemesis_duration() {
  if (const char* s = std::getenv("DLOCK_NEMESIS_SECONDS"); s && *s) {
    return milliseconds(static_cast<long long>(std::atof(s) * 1000));
  }
  return 12s;
}

// One run's schedule: the seed it draws from, and its heals with the start of the fault after
// each (history.hpp's heal_window).
struct schedule {
  explicit schedule(const char* name) : seed(nemesis_seed()), rng(seed) {
    std::printf("nemesis %s: seed %u (DLOCK_NEMESIS_SEED=%u replays it)\n", name, seed, seed);
    std::fflush(stdout);
  }
  milliseconds between(milliseconds lo, milliseconds hi) {
    return milliseconds(std::uniform_int_distribution<long long>(lo.count(), hi.count())(rng));
  }
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
  // Heals the lab, and remembers when.
  void heal(scenario& s) {
    s.net().heal();
    healed();
  }
  // A fault undone now (a heal, a resumed process, a restarted node).
  void healed() { heals.push_back({now_stamp(), 0}); }
  // Runs `fault` (which injects, waits and heals, within `longest`) again and again while one
  // more would still end a recovery_bound before the run does: the last heal's recovery is
  // measured too.
  template <class Fault>
  void repeat(scenario& s, stamp started, milliseconds longest, Fault fault) {
    auto ns = [](milliseconds d) { return std::chrono::nanoseconds(d).count(); };
    stamp until = started + ns(s.options().duration);
    s.sleep(500ms);  // every worker holds once before the first fault
    while (s.running() && now_stamp() + ns(longest + recovery_bound) < until) {
      if (!heals.empty()) heals.back().next_fault = now_stamp();
      fault();
      s.sleep(between(300ms, 700ms));
    }
    if (!heals.empty()) heals.back().next_fault = until;
  }

  unsigned seed;
  std::mt19937 rng;
  std::vector<heal_window> heals;
};

// The locks a scenario's workers contend for (scenario.hpp).
std::vector<std::string> locks_of(const scenario_options& o) {
  std::vector<std::string> locks{"single"};
  if (o.nodes > 1) locks.push_back("redlock");
  if (o.semaphore) locks.push_back("sem");
  if (o.rwlock) locks.push_back("rw");
  if (o.lockset) locks.push_back("set");
  if (o.fair_semaphore) locks.push_back("fair");
  if (o.election) locks.push_back("elect");
  if (o.cli_run) locks.push_back("cli");
  return locks;
}

scenario_options nemesis_options(int nodes) {
  scenario_options o;
  o.netns = true;
  o.nodes = nodes;
  o.processes = 3;
  o.ttl = 800ms;
  // Every workload in every row: each worker process runs one thread per lock.
  o.rwlock = o.lockset = o.fair_semaphore = o.election = o.cli_run = true;
  // At least the quiet tail and some faults before it.
  o.duration = std::max(nemesis_duration(), recovery_bound + 4s);
  return o;
}

// What a run must show (a row that breaks a documented assumption is not held to exclusion).
enum class expected { exclusion, no_stale_write };

// The checker's verdict on one run, and its row for docs/guarantees.md (nemesis_table.py):
// every lock held, no stale write accepted, each lock held again after each heal, and, unless
// the row breaks an assumption, no overlap.
void expect_held_up(const char* name, const scenario& s, const outcome& o, const schedule& sched,
                    expected what) {
  EXPECT_EQ(o.failed_workers, 0) << o.line;
  EXPECT_GT(o.fence.accepted, 15u) << o.line;
  if (what == expected::exclusion) {
    EXPECT_EQ(o.overlaps, 0u) << o.line << "\nfirst overlap:\n"
                              << first_overlap_window(o.history.intervals);
  }
  EXPECT_EQ(o.fence.wrongly_accepted, 0u) << o.line;
  EXPECT_EQ(o.lost_updates, 0u) << o.line;
  for (const auto& [error, n] : o.errors) {  // `dlock run` failed in a way no fault explains
    EXPECT_NE(error.rfind("cli_run.", 0), 0u) << error << ": " << n << ". " << o.line;
  }
  if (s.options().faked_client_clocks) {
    auto jumped = o.history.counters.find("clock.jumped");
    EXPECT_TRUE(jumped != o.history.counters.end() && jumped->second > 0)
        << "no worker saw its clock jump (is libfaketime preloaded?) " << o.line;
  }
  auto locks = locks_of(s.options());
  for (const auto& lock : locks) {
    auto held = o.acquisitions_by_lock.count(lock) ? o.acquisitions_by_lock.at(lock) : 0;
    EXPECT_GT(held, 2) << lock << " was hardly held. " << o.line;
  }
  auto recovery = longest_recovery(o.history.intervals, locks, sched.heals,
                                   std::chrono::nanoseconds(recovery_bound).count());
  std::string row;
  for (const auto& [lock, took] : recovery) {
    EXPECT_GE(took, 0) << lock << " was not held again within " << recovery_bound.count()
                       << " ms of a heal (seed " << sched.seed << ")";
    row += " " + lock + "=" +
           (took < 0 ? std::string("none") : std::to_string(took / 1000000) + "ms");
  }
  std::printf("nemesis %s: seed %u heals %zu, longest recovery after a heal:%s\n", name,
              sched.seed, sched.heals.size(), row.c_str());
  std::fflush(stdout);
  log_result("nemesis " + std::string(name) + ": seed " + std::to_string(sched.seed) +
             " heals " + std::to_string(sched.heals.size()) + " recovery" + row + " | " + o.line);
}

// One nemesis run: `fault(scenario, schedule)` injects one fault, waits and undoes it, within
// `longest`, again and again (schedule::repeat); the checker then judges the run.
template <class Fault>
void run_nemesis(const char* name, const scenario_options& options, milliseconds longest,
                 Fault fault, expected what = expected::exclusion) {
  scenario s(std::string("nemesis_") + name, options);
  schedule sched(name);
  auto o = s.run([&](scenario& sc) {
    sched.repeat(sc, now_stamp(), longest, [&] { fault(sc, sched); });
  });
  expect_held_up(name, s, o, sched, what);
}

// Restarts a node without persistence: it comes back empty.
void restart_a_node(scenario& sc, schedule& sched) {
  sc.node(sched.pick(3)).restart();
  sched.healed();
  sc.sleep(sched.between(800ms, 1200ms));
}

// A TCP connection to host:port within `limit` (a cut peer never answers the SYN, and a
// blocking connect would wait minutes).
int connect_within(const std::string& host, unsigned short port, milliseconds limit) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return -1;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (::poll(&p, 1, static_cast<int>(limit.count())) != 1 ||
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `command` on `fd` and waits up to `limit` for a reply's first bytes ("" if none).
std::string exchange(int fd, const std::string& command, milliseconds limit) {
  std::string line = command + "\r\n";
  if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    return {};
  }
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(limit.count())) != 1) return {};
  char buf[256];
  auto n = ::recv(fd, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// The lab itself, against a real server: a cut member is unreachable and a heal brings it back;
// cut_between parts two members while others still reach both; drop_from is one way: on a
// connection made before, the member's command runs on the server, but its reply never comes.
TEST(nemesis, lab_cuts_heals_and_drops_one_way) {
  SKIP_WITHOUT_NAMESPACES();
  SKIP_WITHOUT_IPTABLES();
  netns_lab lab;
  int server_member = lab.add_member();
  int client_member = lab.add_member();
  test::server_options options;
  options.launcher = lab.launcher(server_member);
  options.address = lab.address(server_member);
  test::redis_server server(options);
  // From this process (on the bridge): does the server answer on a new connection?
  auto answers = [&] {
    int fd = connect_within(server.host(), server.port(), 1s);
    if (fd < 0) return false;
    bool pong = exchange(fd, "PING", 1s).rfind("+PONG", 0) == 0;
    ::close(fd);
    return pong;
  };
  auto exists = [&](const std::string& key) {
    return test::raw_command(server.host(), server.port(), "EXISTS " + key).rfind(":1", 0) == 0;
  };
  // The client member's own connection, made from a thread inside its namespace.
  int client_fd = -1;
  std::thread([&] {
    lab.enter(client_member);
    client_fd = connect_within(server.host(), server.port(), 1s);
  }).join();
  ASSERT_GE(client_fd, 0);
  ASSERT_EQ(exchange(client_fd, "SET before 1", 1s).rfind("+OK", 0), 0u);
  ASSERT_TRUE(answers());

  lab.cut(server_member);
  EXPECT_FALSE(answers()) << "a cut member answered";
  lab.heal();
  EXPECT_TRUE(eventually(answers)) << "the heal did not restore the link";

  lab.cut_between(server_member, client_member);
  EXPECT_EQ(exchange(client_fd, "SET parted 1", 1s), "") << "cut_between let a reply through";
  EXPECT_TRUE(answers()) << "cut_between parted others too";
  EXPECT_FALSE(exists("parted")) << "cut_between let the request through";
  lab.heal();
  // TCP retransmits the parted SET once healed: it lands late, as a real network's would.
  EXPECT_TRUE(eventually([&] { return exists("parted"); }));
  // Takes the late +OK off the connection, and anything else still coming.
  for (pollfd p{client_fd, POLLIN, 0}; ::poll(&p, 1, 300) == 1;) {
    char buf[256];
    if (::recv(client_fd, buf, sizeof buf, 0) <= 0) break;
  }

  lab.drop_from(client_member, server_member);  // the client stops hearing the server
  EXPECT_EQ(exchange(client_fd, "SET one-way 1", 1s), "") << "a reply came through a one-way cut";
  EXPECT_TRUE(exists("one-way")) << "the request did not reach the server";
  EXPECT_EQ(lab.faults(), "drop " + std::to_string(client_member) + "<-" +
                              std::to_string(server_member));
  lab.heal();
  EXPECT_EQ(lab.faults(), "none");
  ::close(client_fd);
}

// Cuts `count` nodes in a row (from `first`, wrapping) off from everyone for 0.8-1.6 s, then
// heals.
void cut_nodes(scenario& sc, schedule& sched, int first, int count) {
  for (int i = 0; i < count; ++i) sc.net().cut(sc.node_member((first + i) % sc.options().nodes));
  sc.sleep(sched.between(800ms, 1600ms));
  sched.heal(sc);
}

// One node of three cut off from everyone (the single-node lock's and the semaphore's node
// too, when it is node 0), for longer than a TTL, again and again.
TEST(nemesis, partition_minority) {
  SKIP_WITHOUT_NAMESPACES();
  run_nemesis("partition_minority", nemesis_options(3), 1600ms, [](scenario& sc, schedule& sched) {
    cut_nodes(sc, sched, sched.pick(3), 1);
  });
}

// Two nodes of three cut off: no quorum for the Redlock, which must wait, not split.
TEST(nemesis, partition_majority) {
  SKIP_WITHOUT_NAMESPACES();
  run_nemesis("partition_majority", nemesis_options(3), 1600ms, [](scenario& sc, schedule& sched) {
    cut_nodes(sc, sched, sched.pick(3), 2);
  });
}

// A 5-node Redlock: two nodes cut (a minority: it goes on), or three (a majority: it waits).
TEST(nemesis, redlock5_minority_and_majority) {
  SKIP_WITHOUT_NAMESPACES();
  auto options = nemesis_options(5);
  options.semaphore = false;
  run_nemesis("redlock5_minority_and_majority", options, 1600ms,
              [](scenario& sc, schedule& sched) {
                int count = 2 + sched.pick(2);
                cut_nodes(sc, sched, sched.pick(5), count);
              });
}

// One way: a worker stops hearing a node while its requests still reach it, so its SETs and
// releases run there but it never learns so (the case where a client believes it failed).
TEST(nemesis, one_way_replies_lost) {
  SKIP_WITHOUT_NAMESPACES();
  SKIP_WITHOUT_IPTABLES();
  auto fault = [](scenario& sc, schedule& sched) {
    int worker = sched.pick(3);
    int node = sched.pick(3);
    sc.net().drop_from(sc.worker_member(worker), sc.node_member(node));
    sc.sleep(sched.between(800ms, 1600ms));
    sched.heal(sc);
  };
  run_nemesis("one_way_replies_lost", nemesis_options(3), 1600ms, fault);
}

// A flapping link: one node's link goes down and up every 50-250 ms for about 2 s, so replies
// are in flight whenever it heals.
TEST(nemesis, flapping_link) {
  SKIP_WITHOUT_NAMESPACES();
  run_nemesis("flapping_link", nemesis_options(3), 2500ms, [](scenario& sc, schedule& sched) {
    int node = sched.pick(3);
    auto until = std::chrono::steady_clock::now() + 2s;
    while (sc.running() && std::chrono::steady_clock::now() < until) {
      if (!sched.heals.empty()) sched.heals.back().next_fault = now_stamp();
      sc.net().cut(sc.node_member(node));
      sc.sleep(sched.between(50ms, 250ms));
      sched.heal(sc);
      sc.sleep(sched.between(50ms, 250ms));
    }
  });
}

// A worker cut off from everything (the nodes and the resource) for 2-3 TTLs: its lease runs
// out while it cannot even renew, others take the locks, and its belief must have ended first.
TEST(nemesis, client_partitioned_past_its_ttl) {
  SKIP_WITHOUT_NAMESPACES();
  auto fault = [](scenario& sc, schedule& sched) {
    sc.net().cut(sc.worker_member(sched.pick(3)));
    sc.sleep(sched.between(1600ms, 2400ms));
    sched.heal(sc);
  };
  run_nemesis("client_partitioned_past_its_ttl", nemesis_options(3), 2400ms, fault);
}

// A holder paused (SIGSTOP) for 1.5 TTLs inside its namespace. The workers check their lease
// right before each write, so a pause ends their belief; what they write after waking carries
// an old token, which the register refuses.
TEST(nemesis, holder_paused_past_its_ttl) {
  SKIP_WITHOUT_NAMESPACES();
  auto fault = [](scenario& sc, schedule& sched) {
    const char* lock = sched.pick(2) ? "single" : "redlock";
    int holder = sc.holder_of(lock, 200ms);
    if (holder < 0) holder = sched.pick(3);
    sc.pause_worker(holder);
    sc.sleep(sc.options().ttl * 3 / 2);
    sc.resume_worker(holder);
    sched.healed();
  };
  run_nemesis("holder_paused_past_its_ttl", nemesis_options(3), 1400ms, fault);
}

// A client's clock jumps by one or two TTLs, forward or back, for 0.8-1.6 s, then returns: the
// holder's of the single-node lock or the Redlock where one holds (libfaketime).
void jump_a_clock(scenario& sc, schedule& sched) {
  const char* lock = sched.pick(2) ? "single" : "redlock";
  int worker = sc.holder_of(lock, 200ms);
  if (worker < 0) worker = sched.pick(3);
  auto by = sc.options().ttl * (1 + sched.pick(2)) * (sched.pick(2) ? 1 : -1);
  sc.jump_client_clock(worker, by);
  sc.sleep(sched.between(800ms, 1600ms));
  sc.jump_client_clock(worker, 0ms);
  sched.healed();
}

scenario_options jumped_clock_options(bool monotonic) {
  auto options = nemesis_options(3);
  options.faked_client_clocks = true;
  options.fake_monotonic = monotonic;
  // Not `dlock run` with a faked monotonic clock: its guard process is forked, never exec'd,
  // and libfaketimeMT holds one global lock across every faked clock read, with no fork
  // handler; a fork while another thread reads the clock leaves the guard stalled on it.
  options.cli_run = !monotonic;
  return options;
}

// An NTP step on a client: its wall clock jumps. dlock measures validity on the monotonic clock,
// so nothing changes.
TEST(nemesis, client_wall_clock_jumps) {
  SKIP_WITHOUT_NAMESPACES();
  run_nemesis("client_wall_clock_jumps", jumped_clock_options(false), 1600ms, jump_a_clock);
}

// The monotonic clock itself jumps, which Linux never does, but which stands for a client clock
// that runs slow or fast by a TTL within one. A step back (a jump back, or the return from a
// jump forward) makes a holder believe in a lease that ran out on the servers, and its renewal
// timer fire late: this breaks assumption 1 (docs/guarantees.md), and holdings may overlap; the
// fence still refuses every stale write.
TEST(nemesis, client_monotonic_clock_jumps) {
  SKIP_WITHOUT_NAMESPACES();
  run_nemesis("client_monotonic_clock_jumps", jumped_clock_options(true), 1600ms, jump_a_clock,
              expected::no_stale_write);
}

// Nodes killed (SIGKILL: a crash) and restarted 0.3-0.8 s later with their AOF fsynced at
// every write (assumption 4): they come back with every key, so nothing is granted twice.
TEST(nemesis, crash_and_restart_with_persistence) {
  SKIP_WITHOUT_NAMESPACES();
  auto options = nemesis_options(3);
  options.persistence = true;
  run_nemesis("crash_and_restart_with_persistence", options, 2000ms,
              [](scenario& sc, schedule& sched) {
                auto& node = sc.node(sched.pick(3));
                node.kill();
                sc.sleep(sched.between(300ms, 800ms));
                node.restart();
                sched.healed();
                sc.sleep(sched.between(800ms, 1200ms));
              });
}

// Nodes restarted without persistence (they forget every key and counter), with every client
// quarantining a node it finds restarted for 1.25 TTLs (client_options::restart_quarantine).
TEST(nemesis, restart_without_persistence_quarantined) {
  SKIP_WITHOUT_NAMESPACES();
  auto options = nemesis_options(3);
  options.worker_flags = {"--quarantine", "1000"};
  run_nemesis("restart_without_persistence_quarantined", options, 1300ms, restart_a_node);
}

// The same restarts without the quarantine break mutual exclusion (docs/guarantees.md: a node
// that forgets a held key grants it again); the fence still refuses every stale write.
TEST(nemesis, restart_without_persistence) {
  SKIP_WITHOUT_NAMESPACES();
  run_nemesis("restart_without_persistence", nemesis_options(3), 1300ms, restart_a_node,
              expected::no_stale_write);
}

}  // namespace
}  // namespace dlock::fault
