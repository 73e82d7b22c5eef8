// SPDX-License-Identifier: Apache-2.0
// Leases that never lie: the watchdog keeps them, the loss signal fires when they are gone,
// fencing tokens increase, and the resource-side helpers refuse stale holders.
#include "dlock/lease.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <csignal>
#include <thread>
#include <vector>

#include "dlock/fencing.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "dlock/with_lock.hpp"
#include "support/commandstats.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"
#include "support/checks.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

class LeaseTest : public ::testing::Test {
 protected:
  redis_server server_;
  client client_{server_.url()};
};

TEST_F(LeaseTest, KeepAliveHoldsTheLockWellPastSeveralTtls) {
  constexpr auto ttl = 300ms;
  mutex m{client_, test_key(), {.ttl = ttl}};
  auto l = m.acquire();
  ASSERT_FALSE(l.keep_alive());  // renews every ~100 ms
  std::int64_t lowest = ttl.count();
  auto until = std::chrono::steady_clock::now() + 5 * ttl;
  while (std::chrono::steady_clock::now() < until) {
    lowest = std::min(lowest, client_.exec({"PTTL", test_key()}).integer());
    std::this_thread::sleep_for(5ms);
  }
  // The renewal comes every ttl/3 (+-10 %): PTTL never falls far below 2/3 of the TTL.
  EXPECT_GT(lowest, ttl.count() / 3) << "lowest PTTL seen: " << lowest;
  EXPECT_FALSE(l.lost().stop_requested());
  EXPECT_GT(l.remaining(), ttl / 3);
  EXPECT_EQ(client_.exec({"GET", test_key()}).str(), l.value());
  EXPECT_FALSE(l.release());
  EXPECT_TRUE(client_.exec({"GET", test_key()}).is_nil());
}

// release_after: the key stays exactly as long as asked, the watchdog renews it no more, and
// the lease is empty at once.
TEST_F(LeaseTest, ReleaseAfterLeavesTheKeyForThatLongThenItExpires) {
  mutex m{client_, test_key(), {.ttl = 300ms}};
  auto l = m.acquire();
  ASSERT_FALSE(l.keep_alive());  // renews every ~100 ms to 300 ms
  std::string value = l.value();
  // 1.5 s: after the sleep below about 1.1 s is left, far above the 300 ms a renewal would set.
  ASSERT_FALSE(l.release_after(1500ms));
  EXPECT_FALSE(l);
  auto left = client_.exec({"PTTL", test_key()}).integer();
  EXPECT_GT(left, 1000);
  EXPECT_LE(left, 1500);
  std::this_thread::sleep_for(400ms);  // past the old TTL: a renewal would have set 300 ms
  left = client_.exec({"PTTL", test_key()}).integer();
  EXPECT_GT(left, 300) << "a renewal came after release_after";
  // Still ours, under the settled value that no renewal in flight can match.
  EXPECT_EQ(client_.exec({"GET", test_key()}).str().rfind(value, 0), 0u);
  EXPECT_TRUE(eventually([&] { return client_.exec({"EXISTS", test_key()}).integer() == 0; }, 5s));
  EXPECT_EQ(l.release_after(1s), errc::not_held);
  // A lease that is no longer ours: the error, and nothing left behind.
  auto lost = m.acquire();
  client_.exec({"SET", test_key(), "someone-else", "PX", "5000"});
  EXPECT_EQ(lost.release_after(1s), errc::lease_lost);
  EXPECT_EQ(client_.exec({"GET", test_key()}).str(), "someone-else");
}

// A kept-alive lease watches its key (CLIENT TRACKING through the client's inbox): another
// client deleting or overwriting it fires lost() at once, not at the next renewal (here 40 s
// away).
TEST_F(LeaseTest, KeepAliveReportsAnotherClientTakingTheKeyAtOnce) {
  client other{server_.url()};
  auto watches = [&] { return test::command_calls(other)["client|tracking"]; };
  for (bool overwrite : {false, true}) {
    SCOPED_TRACE(overwrite ? "overwritten" : "deleted");
    mutex m{client_, test_key(), {.ttl = 120s}};  // renewed every 40 s
    auto l = m.acquire();
    std::atomic<int> reason{0};
    auto before = watches();
    ASSERT_FALSE(l.keep_alive({.on_lost = [&](std::error_code ec) { reason = ec.value(); }}));
    ASSERT_TRUE(eventually([&] { return watches() > before; })) << "the lease is not watched";
    auto taken = std::chrono::steady_clock::now();
    if (overwrite) {
      other.exec({"SET", test_key(), "another-library", "PX", "30000"});
    } else {
      other.exec({"DEL", test_key()});
    }
    ASSERT_TRUE(eventually([&] { return l.lost().stop_requested(); }, 5s));
    EXPECT_LT(std::chrono::steady_clock::now() - taken,
              std::min<std::chrono::milliseconds>(scaled(2s), 20s))
        << "found at a renewal, not at once";
    EXPECT_TRUE(eventually([&] { return reason.load() != 0; }, 1s));
    EXPECT_EQ(reason.load(), static_cast<int>(errc::lease_lost));
    other.exec({"DEL", test_key()});
  }
}

// The invalidations come on the inbox's subscriber connection. When it drops, the watches
// it carried are told at once (the lease renews and watches anew), so that a takeover after
// the drop is still found at once rather than at the next renewal, 40 s away here.
TEST_F(LeaseTest, KeepAliveWatchesAgainAfterTheInboxConnectionDrops) {
  client other{server_.url()};
  auto watches = [&] { return test::command_calls(other)["client|tracking"]; };
  mutex m{client_, test_key(), {.ttl = 120s}};
  auto l = m.acquire();
  auto before = watches();
  ASSERT_FALSE(l.keep_alive());
  ASSERT_TRUE(eventually([&] { return watches() > before; })) << "the lease is not watched";
  auto watched = watches();
  other.exec({"CLIENT", "KILL", "TYPE", "pubsub"});
  ASSERT_TRUE(eventually([&] { return watches() > watched; }, 5s))
      << "the lease did not watch again after its inbox connection dropped";
  auto taken = std::chrono::steady_clock::now();
  other.exec({"SET", test_key(), "another-library", "PX", "30000"});
  ASSERT_TRUE(eventually([&] { return l.lost().stop_requested(); }, 9s));
  EXPECT_LT(std::chrono::steady_clock::now() - taken,
            std::min<std::chrono::milliseconds>(scaled(5s), 20s))
      << "found at a renewal, not at once";
  other.exec({"DEL", test_key()});
}

// The renewals change the key too; they must not read as someone else's change (which would
// renew again at once, and again): about one extend per interval.
TEST_F(LeaseTest, KeepAliveRenewalsDoNotSetOffTheirOwnWatch) {
  mutex m{client_, test_key(), {.ttl = 300ms}};
  auto l = m.acquire();
  auto scripts = [&] { return test::scripts_run(client_); };
  auto before = scripts();
  ASSERT_FALSE(l.keep_alive());  // every ~100 ms
  std::this_thread::sleep_for(1500ms);
  auto renewals = scripts() - before;
  EXPECT_FALSE(l.lost().stop_requested());
  EXPECT_GE(renewals, 8);
  EXPECT_LE(renewals, 25) << "renewals set off more renewals";
  auto ec = l.release();
  EXPECT_FALSE(ec) << ec.message();
}

TEST_F(LeaseTest, CapsStopTheRenewalsAndTheLeaseThenRunsOut) {
  mutex m{client_, test_key(), {.ttl = 150ms}};
  auto l = m.acquire();
  std::atomic<int> reason{0};
  l.keep_alive({.max_renewals = 2, .on_lost = [&](std::error_code ec) { reason = ec.value(); }});
  ASSERT_TRUE(eventually([&] { return l.lost().stop_requested(); }, 2s));
  EXPECT_TRUE(eventually([&] { return reason.load() != 0; }, 1s));
  EXPECT_EQ(reason.load(), static_cast<int>(errc::lease_expired));
  EXPECT_TRUE(eventually([&] { return client_.exec({"EXISTS", test_key()}).integer() == 0; }));
}

TEST_F(LeaseTest, RestartWithoutPersistenceFiresTheLossSignal) {
  mutex m{client_, test_key(), {.ttl = 600ms}};
  auto l = m.acquire();
  std::atomic<int> reason{0};
  l.keep_alive({.on_lost = [&](std::error_code ec) { reason = ec.value(); }});
  server_.restart();  // the key is gone
  ASSERT_TRUE(eventually([&] { return l.lost().stop_requested(); }, 3s));
  EXPECT_TRUE(eventually([&] { return reason.load() != 0; }, 1s));
  // Either the renewal found the key gone, or validity ran out first while reconnecting.
  EXPECT_TRUE(reason == static_cast<int>(errc::lease_lost) ||
              reason == static_cast<int>(errc::lease_expired));
  EXPECT_EQ(l.release(), errc::not_held);
  mutex other{client_, test_key()};
  EXPECT_TRUE(other.try_lock_for(scaled(2s)));
  other.unlock();
}

TEST_F(LeaseTest, UnlockWhileRenewalsAreInFlightLeavesNoKey) {
  mutex m{client_, test_key(), {.ttl = 2s}};
  for (int i = 0; i < 100; ++i) {
    auto l = m.acquire();
    l.keep_alive({.interval = 1ms});  // renewals back to back
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (i % 10)));
    EXPECT_FALSE(l.release());
    EXPECT_FALSE(l.lost().stop_requested());
    ASSERT_EQ(client_.exec({"EXISTS", test_key()}).integer(), 0) << "round " << i;
  }
  std::this_thread::sleep_for(scaled(50ms));  // a late renewal would have resurrected it by now
  EXPECT_EQ(client_.exec({"EXISTS", test_key()}).integer(), 0);
}

TEST_F(LeaseTest, KeepAliveOnALeaseWithLittleValidityLeftRenewsBeforeItEnds) {
  mutex m{client_, test_key(), {.ttl = 3s}};
  auto l = m.acquire();
  ASSERT_TRUE(eventually([&] { return l.remaining() <= 700ms; }, 3s));
  // The default interval (ttl/3 = 1 s) is longer than what is left: renew at half of that.
  ASSERT_FALSE(l.keep_alive());
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(l.lost().stop_requested());
  EXPECT_GT(client_.exec({"PTTL", test_key()}).integer(), 1500);
  EXPECT_GT(l.remaining(), 1s);
  EXPECT_FALSE(l.release());
}

TEST_F(LeaseTest, ShortManualExtendBringsTheNextRenewalForward) {
  mutex m{client_, test_key(), {.ttl = 3s}};
  auto l = m.acquire();
  ASSERT_FALSE(l.keep_alive());  // planned for ~1 s from now
  ASSERT_FALSE(l.extend(400ms));  // the key now expires before that
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(l.lost().stop_requested());
  EXPECT_EQ(client_.exec({"GET", test_key()}).str(), l.value());
  EXPECT_GT(client_.exec({"PTTL", test_key()}).integer(), 1000);
  EXPECT_FALSE(l.release());
}

// lease.hpp promises reads, extend() and release() from any thread at once; run under TSan too.
TEST_F(LeaseTest, ReadsAndExtendsRacingWithReleaseAreSafe) {
  mutex m{client_, test_key(), {.ttl = 5s}};
  for (int round = 0; round < 20; ++round) {
    auto l = m.acquire();
    ASSERT_FALSE(l.keep_alive({.interval = 1ms}));
    std::atomic<bool> stop{false};
    std::atomic<int> reads{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < 2; ++t) {
      pool.emplace_back([&] {
        while (!stop) {
          std::string token = l.value() + l.key();
          bool held = static_cast<bool>(l);
          if (held && token.empty()) ADD_FAILURE() << "a held lease without a token";
          (void)l.fencing_token();
          (void)l.remaining();
          (void)l.valid_until();
          (void)l.lost().stop_requested();
          ++reads;
        }
      });
    }
    pool.emplace_back([&] {
      while (!stop) {
        std::error_code ec = l.extend();
        if (ec && ec != errc::not_held) ADD_FAILURE() << "extend: " << ec.message();
      }
    });
    pool.emplace_back([&] {
      while (!stop) (void)l.keep_alive({.interval = 1ms});
    });
    ASSERT_TRUE(eventually([&] { return reads.load() > 50; }, 2s));
    std::error_code first, second;
    std::thread other([&] { second = l.release(); });
    first = l.release();
    other.join();
    stop = true;
    for (auto& t : pool) t.join();
    // One of them released; the other found it released: both a success, as for an empty lease.
    EXPECT_FALSE(first) << first.message();
    EXPECT_FALSE(second) << second.message();
    EXPECT_FALSE(l);
    EXPECT_FALSE(l.lost().stop_requested());
    EXPECT_EQ(l.extend(), errc::not_held);
    EXPECT_EQ(l.keep_alive(), errc::not_held);
    ASSERT_EQ(client_.exec({"EXISTS", test_key()}).integer(), 0) << "round " << round;
  }
  std::this_thread::sleep_for(scaled(50ms));  // a late renewal would have resurrected it by now
  EXPECT_EQ(client_.exec({"EXISTS", test_key()}).integer(), 0);
}

TEST_F(LeaseTest, WithLockRenewsReleasesAndRethrows) {
  mutex m{client_, test_key(), {.ttl = 200ms}};
  int result = with_lock(m, [&](lease& l) {
    std::this_thread::sleep_for(700ms);  // several TTLs
    EXPECT_FALSE(l.lost().stop_requested());
    EXPECT_EQ(client_.exec({"GET", test_key()}).str(), l.value());
    return 42;
  });
  EXPECT_EQ(result, 42);
  EXPECT_TRUE(client_.exec({"GET", test_key()}).is_nil());
  EXPECT_THROW(with_lock(m, [](lease&) { throw std::runtime_error("boom"); }), std::runtime_error);
  EXPECT_TRUE(client_.exec({"GET", test_key()}).is_nil());
}

TEST_F(LeaseTest, FenceCheckerAdmitsOnlyFreshTokens) {
  fence_checker checker;
  EXPECT_TRUE(checker.admit(5));
  EXPECT_TRUE(checker.admit(5));
  EXPECT_TRUE(checker.admit(9));
  EXPECT_FALSE(checker.admit(8));
  EXPECT_EQ(checker.highest(), 9u);
}

TEST_F(LeaseTest, FencedSetRejectsAStaleToken) {
  std::error_code ec;
  EXPECT_TRUE(fenced_set(client_, test_key("data"), "a", 10, ec));
  EXPECT_TRUE(fenced_set(client_, test_key("data"), "b", 11, ec));
  EXPECT_FALSE(fenced_set(client_, test_key("data"), "stale", 10, ec));
  EXPECT_FALSE(ec);
  EXPECT_EQ(client_.exec({"GET", test_key("data")}).str(), "b");
}

TEST_F(LeaseTest, TokensStrictlyIncreaseAcrossConcurrentClients) {
  constexpr int threads = 4, rounds = 250;
  std::vector<std::thread> pool;
  std::atomic<int> violations{0};
  std::atomic<std::uint64_t> first{~std::uint64_t{0}};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      client own{server_.url()};
      mutex m{own, test_key(), {.retry_delay = 1ms}};
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard guard{m};
        auto fence = m.current_lease()->fencing_token();
        auto last = own.exec({"GET", test_key("last")});
        if (last.is_nil()) first = fence;
        if (!last.is_nil() && std::stoull(last.str()) >= fence) ++violations;
        own.exec({"SET", test_key("last"), std::to_string(fence)});
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(violations.load(), 0);
  // Gaps are allowed: a first try without Lua (acquire_unqueued) draws a token even when the
  // key was taken. But each grant draws at most one try's worth: never more tokens than tries.
  auto last = std::stoull(client_.exec({"GET", test_key("last")}).str());
  EXPECT_GE(last - first.load() + 1, static_cast<std::uint64_t>(threads * rounds));
  EXPECT_LE(last - first.load() + 1, static_cast<std::uint64_t>(2 * threads * rounds));
  EXPECT_GT(first.load(), 1'700'000'000'000ull * 1024) << "the counter did not start from the clock";
}

// A node restarted without persistence has lost every fencing counter: the next tokens still
// rise above all it gave before (the counters start again from the server's clock), so the
// resource does not refuse every new holder as stale. Before: 1, 1 and 1 after the restart.
TEST(LeaseRestartTest, TokensStillRiseAfterARestartWithoutPersistence) {
  redis_server server;
  client c{server.url()};
  const std::string key = test_key();
  mutex single{c, key};
  // Names of their own: one name is one lock, and these three are held at once.
  semaphore unfair{c, key + ":unfair", 3};
  semaphore fair{c, key + ":fair", 3, {.fair = true}};
  auto before = std::array{single.acquire().fencing_token(), unfair.acquire().fencing_token(),
                           fair.acquire().fencing_token()};
  server.restart();
  auto after = std::array{single.acquire().fencing_token(), unfair.acquire().fencing_token(),
                          fair.acquire().fencing_token()};
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_GT(after[i], before[i]) << "lock, unfair semaphore, fair semaphore: " << i;
  }
}

TEST(LeaseRedlockTest, TokensStrictlyIncreaseWhileANodeRestartsWithPersistence) {
  std::vector<std::unique_ptr<redis_server>> servers;
  std::vector<client> nodes;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(std::make_unique<redis_server>(test::server_options{.persistence = true}));
    nodes.emplace_back(servers.back()->url(), client_options{.request_timeout = 300ms});
  }
  redis_server resource_server;
  client resource{resource_server.url()};
  std::atomic<bool> stop{false};
  std::atomic<int> acquisitions{0}, violations{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 3; ++t) {
    pool.emplace_back([&] {
      mutex m{nodes, test_key(), {.ttl = 2s, .retry_delay = 2ms}};
      while (!stop) {
        if (!m.try_lock_for(200ms)) continue;
        auto fence = m.current_lease()->fencing_token();
        auto last = resource.exec({"GET", "last"});
        if (!last.is_nil() && std::stoull(last.str()) >= fence) ++violations;
        resource.exec({"SET", "last", std::to_string(fence)});
        ++acquisitions;
        m.unlock();
      }
    });
  }
  std::this_thread::sleep_for(500ms);  // contention before the restart
  servers[1]->restart();  // kill -9, then start again from its fsync'd AOF
  std::this_thread::sleep_for(700ms);  // and after it
  // A slow build makes fewer rounds in that time: let them reach the count checked below.
  EXPECT_TRUE(eventually([&] { return acquisitions.load() > 50; }));
  stop = true;
  for (auto& t : pool) t.join();
  EXPECT_GT(acquisitions.load(), 50);
  EXPECT_EQ(violations.load(), 0);
}

TEST_F(LeaseTest, PausedHolderLosesTheLeaseAndItsFencedWriteIsRejected) {
  constexpr auto ttl = 400ms;
  test::child_process holder({test::self_dir() + "/lock_worker", "fenced", "--lock", server_.url(),
                              "--resource", server_.url(), "--key", test_key(), "--ttl",
                              std::to_string(ttl.count())});
  ASSERT_TRUE(eventually([&] {
    return client_.exec({"EXISTS", test_key() + ":worker:accepted"}).integer() == 1;
  }));
  holder.signal(SIGSTOP);  // a GC pause, a swap storm, a debugger
  mutex m{client_, test_key(), {.retry_delay = 10ms}};
  ASSERT_TRUE(m.try_lock_for(scaled(5s)));  // the paused holder's key expires; we take it
  auto ours = m.current_lease()->fencing_token();
  auto theirs = std::stoull(client_.exec({"GET", test_key() + ":worker:fence"}).str());
  EXPECT_GT(ours, theirs);
  std::error_code ec;
  ASSERT_TRUE(fenced_set(client_, test_key() + ":data", "new holder", ours, ec));
  holder.signal(SIGCONT);  // it wakes up believing it still holds the lock
  EXPECT_EQ(holder.wait(scaled(10s)), 0);
  EXPECT_EQ(client_.exec({"GET", test_key() + ":worker:lost"}).str(), "1");
  EXPECT_GE(std::stoll(client_.exec({"GET", test_key() + ":worker:rejected"}).str()), 1);
  EXPECT_EQ(client_.exec({"GET", test_key() + ":data"}).str(), "new holder");
  m.unlock();
}

}  // namespace
}  // namespace dlock::test
