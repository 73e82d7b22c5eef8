// SPDX-License-Identifier: Apache-2.0
// Bounded Redis memory: a lock or a semaphore costs no key once it is released and its TTL has
// passed, however many distinct names were used (per-entity locks such as orders:<id>), and its
// fencing tokens still rise when it is used again after its counter expired. Against real
// redis-server processes; DBSIZE is read over a plain socket, not through dlock.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "dlock/dlock.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

long long dbsize(const redis_server& s) {
  auto r = raw_command(s.port(), "DBSIZE");
  return r.size() > 1 && r[0] == ':' ? std::stoll(r.substr(1)) : -1;
}

// Until DBSIZE is 0 or `within` (scaled) passed; the last count seen.
long long wait_until_empty(const redis_server& s, std::chrono::milliseconds within) {
  long long n = -1;
  (void)test::eventually([&] { return (n = dbsize(s)) == 0; }, within);
  return n;
}

// The keys left, for the failure message.
std::string keys_left(const redis_server& s) {
  return raw_command(s.port(), "SCAN 0 COUNT 20");
}

// Long enough that a stall of the loaded test machine (2 cores, sanitizers) does not expire a
// lease the test still holds; every wait below is bounded by a few TTLs.
constexpr std::chrono::milliseconds ttl{1000};

// 10,000 distinct names, each locked and released once: nothing is left one TTL later (plus the
// server's expiry cycle, which samples keys ten times a second).
TEST(MemoryTest, TenThousandLockNamesLeaveNoKeyOnceTheirTtlPassed) {
  redis_server server;
  client c{server.url()};
  const auto prefix = test::test_key() + ":order:";
  for (int i = 0; i < 10'000; ++i) {
    mutex m{c, prefix + std::to_string(i), {.ttl = ttl}};
    auto l = m.acquire();
    ASSERT_TRUE(l);
    ASSERT_FALSE(l.release());
  }
  EXPECT_EQ(wait_until_empty(server, ttl + 3s), 0) << keys_left(server);
}

// Contended: waiters queue (queue, info and ticket keys), releases hand the lock over. The
// queue's keys live twice the waiter entry's TTL (1 s at the least), then go too.
TEST(MemoryTest, ContendedLocksLeaveNoKeyOnceTheirWaitersAreGone) {
  redis_server server;
  const auto prefix = test::test_key() + ":job:";
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      client c{server.url()};
      for (int i = 0; i < 50; ++i) {
        mutex m{c, prefix + std::to_string(i), {.ttl = ttl, .retry_delay = 10ms}};
        // Waits as long as it takes, within a bound: a hang fails the test instead of its run.
        std::error_code ec;
        auto l = m.acquire_until(std::chrono::steady_clock::now() + test::scaled(60s), ec);
        ASSERT_TRUE(l) << ec.message();
        std::this_thread::sleep_for(1ms);
        EXPECT_FALSE(l.release());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wait_until_empty(server, 2 * 1s + ttl + 3s), 0) << keys_left(server);
}

TEST(MemoryTest, SemaphoresUnfairAndFairLeaveNoKeyOnceTheirTtlPassed) {
  redis_server server;
  client c{server.url()};
  const auto prefix = test::test_key() + ":sem:";
  for (bool fair : {false, true}) {
    for (int i = 0; i < 1'000; ++i) {
      semaphore s{c, prefix + (fair ? "fair:" : "") + std::to_string(i), 2,
                  {.ttl = ttl, .fair = fair}};
      auto p = s.acquire();
      ASSERT_TRUE(p);
      ASSERT_FALSE(p.release());
    }
  }
  EXPECT_EQ(wait_until_empty(server, 2 * 1s + ttl + 3s), 0) << keys_left(server);
}

TEST(MemoryTest, RedlockLeavesNoKeyOnAnyNode) {
  redis_server a, b, c;
  std::vector<client> nodes{client{a.url()}, client{b.url()}, client{c.url()}};
  const auto prefix = test::test_key() + ":rl:";
  for (int i = 0; i < 1'000; ++i) {
    mutex m{nodes, prefix + std::to_string(i), {.ttl = ttl}};
    auto l = m.acquire();
    ASSERT_TRUE(l);
    ASSERT_FALSE(l.release());
  }
  for (auto* s : {&a, &b, &c}) EXPECT_EQ(wait_until_empty(*s, ttl + 3s), 0) << keys_left(*s);
}

// A fair semaphore's ticket counter expires with its last member, and a refresh keeps it as
// long as the holder. Should it go anyway (a client of an earlier version refreshed, whose
// script does not push the counter), a newcomer's ticket must still rank behind the holder's,
// or it is granted a permit the holder has: the simulator found 2 holders of 1 with the first
// version of the expiring counter, whose refresh did not keep it either.
TEST(MemoryTest, AFairNewcomerAfterTheTicketCounterExpiredRanksBehindTheHolder) {
  redis_server server;
  client c{server.url()};
  const auto name = test::test_key();
  semaphore s{c, name, 1, {.ttl = ttl, .fair = true}};
  ASSERT_FALSE(s.acquire().release());
  ASSERT_FALSE(s.acquire().release());
  auto held = s.acquire();
  ASSERT_TRUE(held);
  // A solo holder (semaphore_protocol.hpp) takes a ticket once another attempt meets it.
  semaphore other{client{server.url()}, name, 1, {.ttl = ttl, .fair = true}};
  std::error_code refused;
  ASSERT_FALSE(other.try_acquire(refused));
  // The holder has a ticket: a counter that started again lower would rank a newcomer ahead.
  ASSERT_NE(raw_command(server.port(), "ZSCORE " + semaphore_keys_for(name, true).owners + " " +
                                           held.value()),
            "$-1\r\n");
  for (int i = 0; i < 8; ++i) {
    std::this_thread::sleep_for(ttl / 4);
    ASSERT_FALSE(held.extend());
  }
  const auto tickets = semaphore_keys_for(name, true).tickets;
  EXPECT_EQ(raw_command(server.port(), "EXISTS " + tickets), ":1\r\n")
      << "the refreshes were expected to keep the counter with its holder";
  semaphore newcomer{client{server.url()}, name, 1, {.ttl = ttl, .fair = true}};
  // Gone, or started again at 1 by a client of an earlier version (the next ticket is then 2).
  for (const std::string& reset : {"DEL " + tickets, "SET " + tickets + " 1"}) {
    ASSERT_NE(raw_command(server.port(), reset).substr(0, 1), "-") << reset;
    std::error_code ec;
    EXPECT_FALSE(newcomer.try_acquire(ec)) << "a second permit of 1 after " << reset;
    EXPECT_EQ(ec, errc::not_acquired);
  }
  EXPECT_FALSE(held.release());
}

// The counter expired with the lock, or a TTL after it was made while the lock is in steady
// use: the next holder's token still rises above every earlier one, because a counter that does
// not exist starts from the server's clock (ms x 1024).
TEST(MemoryTest, FencesKeepRisingAfterTheCounterExpired) {
  redis_server server;
  client c{server.url()};
  const auto name = test::test_key();
  mutex m{c, name, {.ttl = ttl}};
  std::uint64_t last = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 5; ++i) {
      auto l = m.acquire();
      EXPECT_GT(l.fencing_token(), last) << "round " << round << ", grant " << i;
      last = l.fencing_token();
      EXPECT_FALSE(l.release());
    }
    ASSERT_EQ(wait_until_empty(server, ttl + 3s), 0) << keys_left(server);
  }
  // In steady use: the counter starts again from the clock once per TTL, while grants go on.
  // (One grant first: the counter is gone after the wait above, and that start is not one.)
  last = m.acquire().fencing_token();
  auto fence_key = lock_keys_for(name).fence;
  int restarts = 0;
  for (auto until = std::chrono::steady_clock::now() + 2 * ttl + 500ms;
       std::chrono::steady_clock::now() < until;) {
    auto l = m.acquire();
    EXPECT_GT(l.fencing_token(), last);
    restarts += l.fencing_token() > last + 1024;  // a jump: the clock's start, not an increment
    last = l.fencing_token();
    EXPECT_FALSE(l.release());
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GE(restarts, 2) << "the counter was expected to start again under steady use";
  EXPECT_NE(raw_command(server.port(), "PTTL " + fence_key), ":-1\r\n") << "a counter without expiry";
  semaphore s{c, name + ":sem", 3, {.ttl = ttl}};
  last = 0;
  for (int round = 0; round < 2; ++round) {
    auto p = s.acquire();
    EXPECT_GT(p.fencing_token(), last);
    last = p.fencing_token();
    EXPECT_FALSE(p.release());
    ASSERT_EQ(wait_until_empty(server, ttl + 3s), 0) << keys_left(server);
  }
}

}  // namespace
}  // namespace dlock::test
