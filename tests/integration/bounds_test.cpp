// SPDX-License-Identifier: Apache-2.0
// Bounds the API promises, against real redis-servers and a server that never answers: a
// bounded wait ends by its deadline however silent a node is, a full server (maxclients) is an
// outage that passes, a client that is gone closes its sockets at once, and a forked child
// fails at once instead of hanging or sharing the parent's sockets.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dlock/dlock.hpp"
#include "script.hpp"
#include "support/checks.hpp"
#include "support/fake_peer.hpp"
#include "support/loopback.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// What a bounded wait may take beyond its deadline: the bound, on a plain build of an
// idle machine (scaled: a slow build or a busy machine wakes the caller later, and the other
// outcome, a wait for a node's timeout, is still far above it).
const milliseconds late_by_at_most = test::scaled(50ms);

TEST(DeadlineBoundTest, AWaitOnASilentNodeEndsByItsDeadline) {
  fake_peer silent{fake_peer::mode::silent};
  client node{silent.url()};
  mutex lock{node, test_key()};
  for (milliseconds wait : {100ms, 300ms, 1500ms}) {
    auto t0 = steady::now();
    EXPECT_FALSE(lock.try_lock_for(wait));
    EXPECT_LE(since(t0), wait + late_by_at_most) << "try_lock_for(" << wait.count() << "ms)";
  }
  // One round, no deadline: it ends with the node's timeout (min(ttl / 10, request_timeout)),
  // not with that plus the cleanup's own timeout on a fresh connection.
  auto t0 = steady::now();
  EXPECT_FALSE(lock.try_lock());
  EXPECT_LE(since(t0), 1000ms + late_by_at_most);

  semaphore permits{node, test_key("sem"), 2};
  for (milliseconds wait : {100ms, 300ms}) {
    auto t1 = steady::now();
    EXPECT_FALSE(permits.try_acquire_for(wait));
    EXPECT_LE(since(t1), wait + late_by_at_most) << "try_acquire_for(" << wait.count() << "ms)";
  }
  t0 = steady::now();
  std::error_code ec;
  EXPECT_FALSE(permits.try_acquire(ec));
  EXPECT_LE(since(t0), 1000ms + late_by_at_most);
}

// Every primitive's bounded wait, with its one node hung (SIGSTOP: connections stay open,
// nothing answers) after its clients connected: each returns by a 200 ms deadline (issue 37:
// a lock set took 903 ms, a latch 775-1001 ms).
TEST(DeadlineBoundTest, EveryPrimitivesWaitOnAHungNodeEndsByItsDeadline) {
  redis_server s;
  client node{s.url()};
  mutex plain{node, test_key("mutex")};
  semaphore permits{node, test_key("sem"), 2};
  shared_mutex rw{node, test_key("rw")};
  lock_set set{node, {test_key("set-a"), test_key("set-b")}};
  latch gate{node, test_key("latch")};
  election vote{node, test_key("election"), "me"};
  std::error_code ec;
  ASSERT_TRUE(gate.try_set_count(1, ec)) << ec.message();  // also connects and loads
  s.pause();
  const milliseconds wait = 200ms;
  auto bounded = [&](const char* what, auto&& call) {
    auto t0 = steady::now();
    std::error_code e;
    EXPECT_FALSE(call(t0 + wait, e)) << what;
    EXPECT_TRUE(e) << what;
    EXPECT_LE(since(t0), wait + late_by_at_most) << what << ": " << e.message();
  };
  bounded("mutex", [&](auto d, auto& e) { return bool(plain.acquire_until(d, e)); });
  bounded("semaphore", [&](auto d, auto& e) { return bool(permits.acquire_until(d, e)); });
  bounded("shared_mutex, reader",
          [&](auto d, auto& e) { return bool(rw.acquire_shared_until(d, e)); });
  bounded("shared_mutex, writer", [&](auto d, auto& e) { return bool(rw.acquire_until(d, e)); });
  bounded("lock_set", [&](auto d, auto& e) { return bool(set.acquire_until(d, e)); });
  bounded("latch", [&](auto d, auto& e) { return gate.wait_until(d, e); });
  bounded("election", [&](auto d, auto& e) { return bool(vote.campaign_until(d, e)); });
  s.resume();
}

// Over three nodes with one hung, a campaign wins on the other two by its deadline: it does not
// wait for the hung node's answer (issue 37: 999 ms for a 300 ms deadline).
TEST(DeadlineBoundTest, ACampaignOverThreeNodesWithOneHungEndsByItsDeadline) {
  redis_server a, b, c;
  std::vector<client> nodes{client{a.url()}, client{b.url()}, client{c.url()}};
  election vote{nodes, test_key(), "me"};
  std::error_code ec;
  for (auto& n : nodes) n.exec({"PING"}, ec);  // connected before the hang
  c.pause();
  auto t0 = steady::now();
  lease leading = vote.campaign_until(t0 + 300ms, ec);
  auto took = since(t0);
  c.resume();
  EXPECT_TRUE(leading) << ec.message();
  EXPECT_LE(took, 300ms + late_by_at_most);
}

// A zero or past timeout is try_lock(), as for std::timed_mutex: one whole attempt.
TEST(DeadlineBoundTest, AZeroWaitMakesOneWholeAttempt) {
  redis_server s;
  client node{s.url()};
  mutex lock{node, test_key()};
  semaphore permits{node, test_key("sem"), 1};
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(lock.try_lock_for(0ms)) << "try " << i;
    lock.unlock();
    ASSERT_TRUE(lock.try_lock_until(steady::now() - 1s)) << "try " << i;
    lock.unlock();
    lease permit = permits.try_acquire_for(0ms);
    ASSERT_TRUE(permit) << "try " << i;
    permit.release();
  }
}

TEST(DeadlineBoundTest, ARedlockWithOneSilentNodeEndsByItsDeadlineWhenTheLockIsTaken) {
  redis_server a, b;
  fake_peer silent{fake_peer::mode::silent};
  std::vector<client> nodes{client{a.url()}, client{b.url()}, client{silent.url()}};
  const std::string key = test_key();
  mutex holder{nodes, key};
  auto held = holder.acquire();  // the two live nodes grant: a quorum without the silent one
  ASSERT_TRUE(held);
  mutex waiter{nodes, key};
  for (milliseconds wait : {100ms, 300ms, 1500ms}) {
    auto t0 = steady::now();
    EXPECT_FALSE(waiter.try_lock_for(wait));
    EXPECT_LE(since(t0), wait + late_by_at_most) << "try_lock_for(" << wait.count() << "ms)";
  }
  // The holder is untouched: the waiter's give-ups removed nothing of it.
  EXPECT_NE(raw_command(a.port(), "GET " + key).find(held.value()), std::string::npos);
  EXPECT_NE(raw_command(b.port(), "GET " + key).find(held.value()), std::string::npos);
}

// The wait ends at its deadline with the acquire still unanswered, and its cleanup goes out
// behind it. If that acquire comes back NOSCRIPT while the release script is cached, the
// release runs first; the acquire's EVAL fallback must then not follow, or it would set the key
// after the cleanup and leave it orphaned for the TTL (found by review).
TEST(DeadlineBoundTest, AnAttemptGivenUpAtTheDeadlineIsNotResentAfterItsCleanup) {
  redis_server s;
  client node{s.url()};
  client admin{s.url()};
  const std::string key = test_key();
  mutex warm_up{node, test_key("warm")};
  ASSERT_TRUE(warm_up.try_lock());  // connected, scripts cached
  warm_up.unlock();
  admin.exec({"SCRIPT", "FLUSH"});
  admin.exec({"SCRIPT", "LOAD", std::string(detail::release_script.body)});
  // EVALSHA calls that failed (NOSCRIPT): the acquire's is the first since the flush. (Before
  // Redis 7 there is no failed_calls: all calls, the acquire's first among them.)
  auto noscripts = [&] {
    auto info = admin.exec({"INFO", "commandstats"}).str();
    auto line = info.find("cmdstat_evalsha:");
    if (line == std::string::npos) return 0LL;
    auto end = info.find('\n', line);
    auto at = info.find("failed_calls=", line);
    if (at == std::string::npos || at > end) at = info.find("calls=", line);
    return std::atoll(info.c_str() + info.find('=', at) + 1);
  };
  auto failed_before = noscripts();
  admin.exec({"CLIENT", "PAUSE", "400", "ALL"});
  mutex lock{node, key};
  EXPECT_FALSE(lock.try_lock_for(100ms));
  // The pause is over and the acquire's NOSCRIPT went back, behind it on the wire the cleanup.
  EXPECT_TRUE(test::eventually([&] { return noscripts() > failed_before; }));
  // A negative check: time for the NOSCRIPT to reach the client and for a late EVAL, were one
  // sent on it, to land (the count above rose before the client read the reply).
  std::this_thread::sleep_for(test::scaled(300ms));
  EXPECT_EQ(raw_command(s.port(), "EXISTS " + key), ":0\r\n") << "orphaned by a late EVAL";
  mutex other{client{s.url()}, key};
  EXPECT_TRUE(other.try_lock());
}

// A bare connection that PINGs once, so that the server counts it as a client; -1 on failure.
int take_a_client_slot(unsigned short port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = loopback_address(port);
  const char ping[] = "PING\r\n";
  char buf[16];
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::write(fd, ping, sizeof ping - 1) != static_cast<ssize_t>(sizeof ping - 1) ||
      ::read(fd, buf, sizeof buf) <= 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A server at maxclients accepts the connection, answers "ERR max number of clients reached"
// and closes it: an outage of that node that passes when a client leaves, as LOADING does.
TEST(OutageTest, MaxClientsIsRetriedUntilASlotFrees) {
  redis_server s{server_options{.extra = {"--maxclients", "2"}}};
  std::vector<int> blockers{take_a_client_slot(s.port()), take_a_client_slot(s.port())};
  ASSERT_GE(blockers[0], 0);
  ASSERT_GE(blockers[1], 0);
  client node{s.url(), {.reconnect_backoff_min = 10ms, .reconnect_backoff_max = 50ms}};
  mutex lock{node, test_key(), {.retry_delay = 50ms}};
  // Attempts the full server refused (an outage, not contention).
  std::atomic<int> refused{0};
  wait_control control;
  control.on_retry = [&](const wait_progress& p) {
    if (p.kind == failure_kind::unavailable) ++refused;
    return true;
  };
  // Free the slots once an attempt was refused (the lock's wake-up inbox needs a connection
  // too).
  std::thread freer([&] {
    EXPECT_TRUE(test::eventually([&] { return refused.load() > 0; })) << "never refused";
    for (int fd : blockers) ::close(fd);
  });
  std::error_code ec;
  lease got = lock.acquire_until(steady::now() + test::scaled(10s), control, nullptr, ec);
  freer.join();
  EXPECT_TRUE(got) << ec.message();
  EXPECT_GE(refused.load(), 1) << "acquired while the server refused every client?";
}

TEST(OutageTest, MaxClientsRefusalIsAMissingVoteNotAnError) {
  redis_server s{server_options{.extra = {"--maxclients", "1"}}};
  int fd = take_a_client_slot(s.port());
  ASSERT_GE(fd, 0);
  client node{s.url()};
  std::error_code ec;
  node.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::node_unreachable) << ec.message();
  ::close(fd);
}

int open_descriptors() {
  int n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

long long connected_clients(unsigned short port) {
  std::string info = raw_command(port, "INFO clients");
  auto at = info.find("connected_clients:");
  return at == std::string::npos ? -1 : std::atoll(info.c_str() + at + 18);
}

// 100 clients, each with a request in flight on a hung server, then destroyed: their sockets
// close at once, not when the requests' 60 s deadlines pass.
// The descriptors open now, once dlock's I/O thread (epoll, eventfd, timerfd) has started.
int descriptors_with_dlock_started(const redis_server& s) {
  client warm_up{s.url()};
  warm_up.exec({"PING"});
  return open_descriptors() - 1;  // less warm_up's socket
}

TEST(ClientLifetimeTest, ADestroyedClientClosesItsSocketsAtOnce) {
  redis_server s;
  int before = descriptors_with_dlock_started(s);
  s.pause();
  {
    std::vector<client> clients;
    for (int i = 0; i < 100; ++i) {
      clients.emplace_back(s.url(), client_options{.request_timeout = 60s});
      clients.back().async_exec(command{"PING"}, [](std::error_code, reply) {});
    }
    // Let every one connect (the kernel accepts on behalf of the stopped server).
    EXPECT_TRUE(test::eventually([&] { return open_descriptors() >= before + 90; }))
        << open_descriptors() - before << " sockets";
  }
  // Closed at once: long before the requests' 60 s deadlines.
  EXPECT_TRUE(test::eventually([&] { return open_descriptors() <= before + 2; }, 2s))
      << "sockets of destroyed clients stay open";
  s.resume();
  EXPECT_TRUE(test::eventually([&] { return connected_clients(s.port()) <= 1; }, 5s))
      << connected_clients(s.port()) << " clients";
}

TEST(ClientLifetimeTest, ACompletedRequestLeavesNoTimerHoldingTheConnection) {
  redis_server s;
  int before = descriptors_with_dlock_started(s);
  for (int i = 0; i < 50; ++i) {
    client c{s.url(), {.request_timeout = 60s}};
    EXPECT_EQ(c.exec({"PING"}).str(), "PONG");
  }
  // Closed at once: long before a 60 s timer would let go.
  EXPECT_TRUE(test::eventually([&] { return open_descriptors() <= before + 2; }, 2s))
      << open_descriptors() - before << " descriptors left";
}

// After fork() the child has no I/O thread, and shares the parent's sockets: every call there
// fails at once with errc::forked_process, and nothing reaches the parent's connections.
TEST(ForkTest, TheChildFailsAtOnceAndTheParentGoesOn) {
  redis_server s;
  client node{s.url()};
  mutex lock{node, test_key()};
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();
  const auto fast = test::scaled(100ms);  // read here: the child only compares
  pid_t child = ::fork();
  if (child == 0) {
    auto t0 = steady::now();
    std::error_code ec;
    lease l = lock.try_acquire(ec);
    bool failed_fast = !l && ec == errc::forked_process && since(t0) < fast;
    node.exec({"PING"}, ec);
    failed_fast = failed_fast && ec == errc::forked_process;
    bool threw = false;
    try {
      node.async_exec(command{"PING"}, [](std::error_code, reply) {});
    } catch (const std::system_error& e) {
      threw = e.code() == errc::forked_process;
    }
    ::_exit(failed_fast && threw ? 0 : 1);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  // The parent's connection is intact.
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
  EXPECT_EQ(node.exec({"PING"}).str(), "PONG");
}

// LeakSanitizer at a forked child's exit: the parent's threads are not there to be scanned, so
// what they hold reads as leaked. The children here are about time, not memory.
bool in_a_forked_child = false;
extern "C" int __lsan_is_turned_off() { return in_a_forked_child ? 1 : 0; }

// The file whose code made the blocking system call that process `pid` waits in: the last field
// of /proc/PID/syscall is its program counter, and /proc/PID/maps names what is mapped there.
// Empty when it is not in a system call or cannot be read.
std::string blocked_in(pid_t pid) {
  std::ifstream call("/proc/" + std::to_string(pid) + "/syscall");
  std::vector<std::string> fields{std::istream_iterator<std::string>(call), {}};
  if (fields.size() < 3) return {};  // "running", or unreadable
  auto pc = std::stoull(fields.back(), nullptr, 16);
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream row(line);
    std::string range, perms, offset, device, inode, file;
    row >> range >> perms >> offset >> device >> inode >> file;
    auto dash = range.find('-');
    if (dash == std::string::npos) continue;
    auto low = std::stoull(range.substr(0, dash), nullptr, 16);
    auto high = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (pc >= low && pc < high) return file;
  }
  return {};
}

// A child that drops its clients and exits normally, while the parent's I/O thread is busy:
// it must neither touch the parent's I/O state (whose locks fork() may have copied held) nor
// wait for an I/O thread it does not have.
TEST(ForkTest, AChildThatDropsItsClientsAndExitsEndsAtOnce) {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer's own runtime makes the exit of a child forked from a busy multithreaded
  // process slow at times (over 0.5 s once in CI); the ASan build runs this test.
  GTEST_SKIP() << "timing of forked children under ThreadSanitizer";
#endif
  redis_server s;
  client node{s.url()};
  std::atomic<bool> busy{true};
  std::thread load([&] {  // batches of async requests: the I/O thread is never idle for long
    while (busy) {
      std::atomic<int> left{64};
      for (int i = 0; i < 64; ++i) node.async_exec(command{"PING"}, [&](std::error_code, reply) { --left; });
      while (left > 0) std::this_thread::yield();
    }
  });
  // The bugs: a deadlock on a lock copied held (the child never exits; it happens only when a
  // fork meets the lock held, so one hang in 40 is the bug), or waiting out the I/O thread's
  // 1 s stop at exit (over 1 s every time). A normal exit takes milliseconds, though a loaded
  // machine makes a few slow: more than half of them slow is the second bug, not the load.
  // AddressSanitizer's own allocator is not fork-safe in GCC 12's libasan (LLVM added its fork
  // handler in PR 75290, 2023): a child forked while another thread refilled a size class waits
  // forever on that class's lock at its next malloc or free (about 1 child in 500 here; CI saw
  // it). Such a hang waits in a futex called from libasan; it is the sanitizer's, not dlock's.
  constexpr int children = 40;
  const auto hung_after = test::scaled(5s);
  int slow = 0, hung = 0, hung_in_sanitizer = 0;
  for (int i = 0; i < children; ++i) {
    pid_t child = ::fork();
    if (child == 0) {
      in_a_forked_child = true;
      {
        client mine{s.url()};
        mutex lock{mine, test_key()};
        client copy = node;
      }
      std::exit(0);
    }
    auto t0 = steady::now();
    int status = 0;
    while (::waitpid(child, &status, WNOHANG) == 0 && since(t0) < hung_after) {
      std::this_thread::sleep_for(1ms);
    }
    if (since(t0) >= hung_after) {
      auto where = blocked_in(child);
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      if (where.find("/libasan.so") != std::string::npos) {
        ++hung_in_sanitizer;
      } else {
        ++hung;
        ADD_FAILURE() << "a child never exited; it waited in " << (where.empty() ? "?" : where);
      }
    } else if (since(t0) > 900ms) {
      ++slow;
    }
  }
  busy = false;
  load.join();
  if (hung_in_sanitizer) {
    std::printf("[ report   ] %d child(ren) hung on libasan's allocator lock, copied held\n",
                hung_in_sanitizer);
  }
  EXPECT_LT(hung_in_sanitizer, children / 2) << "too many to be the sanitizer's rare race";
  EXPECT_EQ(hung, 0) << "children that never exited";
  EXPECT_LT(slow, children / 2) << "children that took over 0.9 s to exit";
}

// fork then exec, as the CLI runs CMD: the program sees none of dlock's sockets.
TEST(ForkTest, AnExecutedChildInheritsNoSocketOfDlock) {
  redis_server s;
  client node{s.url()};
  mutex lock{node, test_key()};
  ASSERT_TRUE(lock.try_lock());
  pid_t child = ::fork();
  if (child == 0) {
    ::execl("/bin/sh", "sh", "-c", "ls -l /proc/$$/fd | grep -c socket: >/dev/null && exit 1; exit 0",
            static_cast<char*>(nullptr));
    ::_exit(2);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a socket leaked into exec";
  lock.unlock();
}

}  // namespace
}  // namespace dlock::test
