// SPDX-License-Identifier: Apache-2.0
// Several locks at once, all or none, against a real redis-server: no client ever holds part
// of a set, overlapping sets in any order never deadlock, and the per-key counters they guard
// come out exact.
#include "dlock/lock_set.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <stop_token>
#include <thread>
#include <vector>

#include "dlock/key_layout.hpp"
#include "dlock/mutex.hpp"
#include "support/checks.hpp"
#include "support/overlapping_sets.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::redis_server;
using test::test_key;

class LockSetTest : public ::testing::Test {
 protected:
  std::string name(int i) { return test_key("r" + std::to_string(i)); }
  redis_server server_;
  client client_{server_.url()};
};

TEST_F(LockSetTest, AllOrNothing) {
  lock_set ab{client_, {name(1), name(2)}, {.ttl = 5s}};
  mutex b{client_, name(2)};
  auto held_b = b.acquire();
  std::error_code ec;
  auto none = ab.try_acquire(ec);
  EXPECT_FALSE(none);
  EXPECT_EQ(ec, errc::not_acquired);
  EXPECT_EQ(client_.exec({"EXISTS", name(1)}).integer(), 0) << "part of the set was taken";
  held_b.release();
  auto both = ab.try_acquire(ec);
  ASSERT_TRUE(both) << ec.message();
  EXPECT_EQ(client_.exec({"GET", name(1)}).str(), both.value());
  EXPECT_EQ(client_.exec({"GET", name(2)}).str(), both.value());
  // A mutex of any name in the set is excluded while the set is held.
  EXPECT_FALSE(b.try_acquire(ec));
  EXPECT_FALSE(both.release());
  EXPECT_EQ(client_.exec({"EXISTS", name(1), name(2)}).integer(), 0);
}

TEST_F(LockSetTest, OneFenceAboveEveryNamesTokensBeforeAndBelowAfter) {
  mutex a{client_, name(1)}, b{client_, name(2)};
  std::uint64_t before = 0;
  for (int i = 0; i < 3; ++i) before = std::max(before, a.acquire().fencing_token());
  before = std::max(before, b.acquire().fencing_token());
  auto set = lock_all(client_, {name(1), name(2)});
  EXPECT_GT(set.fencing_token(), before);
  auto fence = set.fencing_token();
  set.release();
  EXPECT_GT(a.acquire().fencing_token(), fence);
  EXPECT_GT(b.acquire().fencing_token(), fence);
}

TEST_F(LockSetTest, OverlappingSetsInRandomOrderNeverDeadlockAndCountersAreExact) {
  constexpr int rounds = 60, names = 5;
  // Mutex users of single names take part too.
  std::atomic<long long> by_mutex{0};
  std::thread single([&] {
    client mine{server_.url()};
    mutex m{mine, name(0), {.retry_delay = 5ms}};
    for (int r = 0; r < rounds; ++r) {
      std::unique_lock guard{m};
      auto now = mine.exec({"GET", name(0) + ":count"});
      long long v = now.is_nil() ? 0 : std::stoll(now.str());
      mine.exec({"SET", name(0) + ":count", std::to_string(v + 1)});
      ++by_mutex;
    }
  });
  auto raised = test::lock_overlapping_sets(server_.url(), [&](int i) { return name(i); },
                                            /*threads=*/8, rounds, names);
  single.join();
  raised[0] += by_mutex;
  for (int i = 0; i < names; ++i) {
    auto got = client_.exec({"GET", name(i) + ":count"});
    EXPECT_EQ(got.is_nil() ? 0 : std::stoll(got.str()), raised[static_cast<std::size_t>(i)])
        << name(i);
  }
}

TEST_F(LockSetTest, KeepAliveRenewsEveryKeyAndLossOfAnyFiresLost) {
  lock_set set{client_, {name(1), name(2), name(3)}, {.ttl = 300ms}};
  std::error_code ec;
  auto held = set.try_acquire(ec);
  ASSERT_TRUE(held);
  held.keep_alive();
  std::this_thread::sleep_for(900ms);
  EXPECT_FALSE(held.lost().stop_requested());
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(client_.exec({"GET", name(i)}).str(), held.value());
  client_.exec({"DEL", name(2)});  // one of them is taken away
  EXPECT_TRUE(eventually([&] { return held.lost().stop_requested(); }));
}

TEST_F(LockSetTest, ReleaseHandsEachKeyToItsQueuedMutexWaiter) {
  // Only a handoff is quick: the waiter's polls are test::scaled(10s) apart at the soonest, and
  // neither the set's expiry nor the waiter's deadline comes sooner.
  auto set = lock_all(client_, {name(1), name(2)}, {.ttl = test::scaled(60s)});
  mutex waiter{client{server_.url()}, name(2), {.retry_delay = test::scaled(20s)}};
  auto waiting = std::async(std::launch::async, [&] {
    std::error_code ec;
    return waiter.acquire_until(std::chrono::steady_clock::now() + test::scaled(30s), ec);
  });
  auto queue = lock_keys_for(name(2)).waiters;
  ASSERT_TRUE(eventually([&] { return client_.exec({"ZCARD", queue}).integer() == 1; }))
      << "the waiter never queued";
  auto t0 = std::chrono::steady_clock::now();
  set.release();
  ASSERT_EQ(waiting.wait_for(test::scaled(3s)), std::future_status::ready);
  EXPECT_TRUE(waiting.get());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, test::scaled(2s));
}

TEST_F(LockSetTest, AcquireUntilWaitsForTheKeyInTheWayAndGivesUpAtItsDeadline) {
  mutex b{client_, name(2)};
  auto held_b = b.acquire();
  held_b.detach();
  lock_set ab{client_, {name(1), name(2)}, {.retry_delay = 10s}};
  std::error_code ec;
  EXPECT_FALSE(ab.acquire_until(std::chrono::steady_clock::now() + 100ms, ec));
  EXPECT_EQ(ec, errc::not_acquired);
  // The key in the way expires by itself in 400 ms (only now: a slow start must not outlast it).
  client_.exec({"PEXPIRE", name(2), "400"});
  // It sleeps until the holder's key expires, not the 10 s retry_delay.
  auto both = ab.acquire_until(std::chrono::steady_clock::now() + 5s, ec);
  EXPECT_TRUE(both) << ec.message();
}

TEST_F(LockSetTest, BadInputIsRefusedBeforeAnyIo) {
  auto refused = [](auto make) { return test::is_invalid_argument(make); };
  EXPECT_TRUE(refused([&] { lock_set{client_, {}}; }));
  EXPECT_TRUE(refused([&] { lock_set{client_, {"a", ""}}; }));
  EXPECT_TRUE(refused([&] { lock_set{client_, {"a", "{x}:fence"}}; }));
  EXPECT_TRUE(refused([&] { lock_set{client_, {"a"}, {.ttl = 0ms}}; }));
  EXPECT_TRUE(refused([&] { lock_set{client_, {"a"}, {.fair = true}}; }));
  EXPECT_TRUE(refused([&] { lock_set{client_, {"a"}, {.reentrant = "me"}}; }));
  lock_set dup{client_, {"b", "a", "b"}};
  EXPECT_EQ(dup.keys(), (std::vector<std::string>{"a", "b"}));
  // A key of another type is a clear error, and nothing of the set is taken.
  client_.exec({"HSET", name(5), "x", "y"});
  lock_set typed{client_, {name(4), name(5)}};
  std::error_code ec;
  EXPECT_FALSE(typed.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_EQ(client_.exec({"EXISTS", name(4)}).integer(), 0);
  // So is a fencing counter that holds no number: checked before any key is set.
  client_.exec({"SET", lock_keys_for(name(7)).fence, "not a number"});
  lock_set counted{client_, {name(6), name(7)}};
  EXPECT_FALSE(counted.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_EQ(client_.exec({"EXISTS", name(6), name(7)}).integer(), 0);
  EXPECT_TRUE(refused([&] {
    lock_set{client{server_.url(), {.replication_guard = {.enabled = true}}}, {"a"}};
  }));
}

TEST_F(LockSetTest, AReleaseAfterPartOfTheSetWasLostSaysSo) {
  lock_set set{client_, {name(1), name(2)}};
  std::error_code ec;
  auto held = set.try_acquire(ec);
  ASSERT_TRUE(held);
  client_.exec({"SET", name(2), "someone else"});
  EXPECT_EQ(held.release(), errc::not_held);
  EXPECT_EQ(client_.exec({"EXISTS", name(1)}).integer(), 0);            // ours: freed
  EXPECT_EQ(client_.exec({"GET", name(2)}).str(), "someone else");       // theirs: untouched
}

TEST_F(LockSetTest, AsyncAcquireWaitsForTheNameInTheWayAndGoesOnWhenTheSetIsGone) {
  using outcome = std::pair<std::error_code, lease>;
  mutex b{client_, name(2)};
  auto held_b = b.acquire();
  std::promise<outcome> tried, acquired;
  {
    lock_set ab{client_, {name(1), name(2)}, {.retry_delay = 20ms}};
    ab.async_try_acquire([&](std::error_code ec, lease l) { tried.set_value({ec, std::move(l)}); });
    auto [tried_ec, tried_lease] = tried.get_future().get();
    EXPECT_FALSE(tried_lease);
    EXPECT_EQ(tried_ec, errc::not_acquired);
    ab.async_acquire([&](std::error_code ec, lease l) { acquired.set_value({ec, std::move(l)}); });
  }
  auto waiting = acquired.get_future();
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout) << "took a held name";
  // One more waiter, stopped from outside: cancelled, and it never takes the set.
  std::stop_source stopper;
  std::promise<outcome> stopped;
  std::atomic<int> tries{0};
  lock_set{client_, {name(1), name(2)}, {.retry_delay = 20ms}}.async_acquire_until(
      std::chrono::steady_clock::time_point::max(),
      wait_control{.stop = stopper.get_token(),
                   .on_retry =
                       [&](const wait_progress&) {
                         ++tries;
                         return true;
                       }},
      [&](std::error_code ec, lease l) { stopped.set_value({ec, std::move(l)}); });
  // Stopped in the midst of its wait.
  EXPECT_TRUE(eventually([&] { return tries.load() > 0; })) << "it never waited";
  stopper.request_stop();
  auto [stopped_ec, stopped_lease] = stopped.get_future().get();
  EXPECT_FALSE(stopped_lease);
  EXPECT_EQ(stopped_ec, errc::cancelled);
  held_b.release();
  ASSERT_EQ(waiting.wait_for(test::scaled(5s)), std::future_status::ready);
  auto [ec, both] = waiting.get();
  ASSERT_TRUE(both) << ec.message();
  EXPECT_EQ(client_.exec({"GET", name(1)}).str(), both.value());
  EXPECT_EQ(client_.exec({"GET", name(2)}).str(), both.value());
  EXPECT_FALSE(both.release());
}

TEST_F(LockSetTest, AWaitEndsOnAStopOrWhenOnRetrySaysSoAndHoldsNothing) {
  mutex b{client_, name(2)};
  auto held_b = b.acquire();
  lock_set ab{client_, {name(1), name(2)}, {.retry_delay = 20ms}};
  std::stop_source stopper;
  std::atomic<int> retries{0};
  wait_control control{.stop = stopper.get_token(), .on_retry = [&](const wait_progress& p) {
                         EXPECT_EQ(p.last_error, errc::not_acquired);
                         EXPECT_EQ(p.kind, failure_kind::contention);
                         ++retries;
                         return true;
                       }};
  std::thread stop_later([&] {
    (void)eventually([&] { return retries.load() > 2; });  // a stop in the midst of a wait
    stopper.request_stop();
  });
  std::error_code ec;
  EXPECT_FALSE(ab.acquire_until(std::chrono::steady_clock::now() + 10s, control, ec));
  stop_later.join();
  EXPECT_EQ(ec, errc::cancelled);
  EXPECT_GT(retries.load(), 2) << "on_retry hears of each failed attempt";
  EXPECT_EQ(client_.exec({"EXISTS", name(1)}).integer(), 0);

  wait_control refuse{.on_retry = [](const wait_progress&) { return false; }};
  EXPECT_FALSE(ab.acquire_until(std::chrono::steady_clock::now() + 10s, refuse, ec));
  EXPECT_EQ(ec, errc::not_acquired);
  std::stop_source stopped;
  stopped.request_stop();
  held_b.release();
  EXPECT_FALSE(ab.acquire_until(std::chrono::steady_clock::now() + 10s,
                                wait_control{.stop = stopped.get_token()}, ec));
  EXPECT_EQ(ec, errc::cancelled) << "a wait stopped before it began takes nothing";
  EXPECT_EQ(client_.exec({"EXISTS", name(1), name(2)}).integer(), 0);
}

}  // namespace
}  // namespace dlock
