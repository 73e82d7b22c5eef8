// SPDX-License-Identifier: Apache-2.0
// Waiting without polling: a release wakes the first queued waiter through pub/sub; the
// retry delay is only a backstop; fair mode serves waiters in arrival order.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <future>
#include <optional>
#include <stop_token>
#include <thread>
#include <utility>

#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "support/background_wait.hpp"
#include "support/checks.hpp"
#include "support/rounds.hpp"
#include "support/commandstats.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// The waiter's acquire_until on another thread (support/background_wait.hpp).
test::background_wait waiting_on(mutex& waiter) {
  return test::background_wait{
      [&waiter](auto deadline, const wait_control& control, std::error_code& ec) {
        return waiter.acquire_until(deadline, control, nullptr, ec);
      }};
}

class WakeupTest : public ::testing::Test {
 protected:
  // The queue holds an entry per waiter; wait until it has `n`.
  void wait_for_queue(std::size_t n) {
    if (!eventually([&] {
          return static_cast<std::size_t>(
                     client_.exec({"ZCARD", "{" + test_key() + "}:waiters"}).integer()) >= n;
        })) {
      FAIL() << "waiters did not queue";
    }
  }

  // How long a waiter with the backstop needs after its holder's release, if it got the lock
  // within woken_within() of it (else it is stopped: nullopt).
  std::optional<steady::duration> handoff(lock_options waiter_options) {
    bool wakes = waiter_options.wake_on_release;
    waiter_options.retry_delay = backstop;
    mutex holder{client_, test_key(), {.ttl = 2 * backstop}};
    mutex waiter{client_, test_key(), std::move(waiter_options)};
    EXPECT_TRUE(holder.try_lock());
    auto waiting = waiting_on(waiter);
    if (wakes) wait_for_queue(1);
    // It found the lock held (and queued, with wake-ups): from here only the release or its
    // 15-30 s backstop moves it.
    EXPECT_TRUE(eventually([&] { return waiting.failed > 0; }));
    auto released = steady::now();
    holder.unlock();
    return waiting.got_within(released, woken_within());
  }

  redis_server server_;
  client client_{server_.url()};
};

TEST_F(WakeupTest, ReleaseWakesTheWaiterLongBeforeItsBackstop) {
  // The backstop sleeps 15-30 s; a woken waiter takes about a round trip.
  auto woken = handoff({});
  EXPECT_TRUE(woken.has_value()) << "not woken within " << woken_within().count() << " ms";
  if (woken) std::printf("[ report   ] handoff with wake-up: %.1f ms\n", ms(*woken));
  // The same wait with notifications off is plain polling: it shows the test can fail.
  auto polled = handoff({.wake_on_release = false});
  EXPECT_FALSE(polled.has_value()) << "polling got the lock " << ms(polled.value_or(0s))
                                   << " ms after the release";
}

TEST_F(WakeupTest, ALostNotificationCostsAtMostTheBackstop) {
  mutex holder{client_, test_key(), {.ttl = 30s}};
  ASSERT_TRUE(holder.try_lock());
  mutex waiter{client_, test_key(), {.retry_delay = 300ms}};
  auto waiting = waiting_on(waiter);
  wait_for_queue(1);
  auto freed = steady::now();
  client_.exec({"DEL", test_key()});  // freed behind dlock's back: nobody is told
  // Within the 150-300 ms backstop, with room for a slow build; never told, it would wait
  // for its 60 s deadline.
  auto took = waiting.got_within(freed, scaled(1s));
  EXPECT_TRUE(took.has_value()) << "not within " << scaled(1s).count() << " ms";
  holder.current_lease();
}

TEST_F(WakeupTest, OneReleaseWakesOneWaiterNotAll) {
  mutex holder{client_, test_key(), {.ttl = 2 * backstop}};
  ASSERT_TRUE(holder.try_lock());
  constexpr int waiters = 12;
  std::vector<std::future<void>> done;
  std::vector<std::unique_ptr<mutex>> locks;
  std::atomic<int> winners{0};
  std::atomic<bool> hand_on{false};
  for (int i = 0; i < waiters; ++i) {
    locks.push_back(
        std::make_unique<mutex>(client_, test_key(), lock_options{.retry_delay = backstop}));
    // The mutex itself, not locks[i]: the next push_back may move the vector's storage (TSan).
    done.push_back(std::async(std::launch::async, [&, m = locks.back().get()] {
      if (!m->try_lock_for(4 * backstop)) return;
      ++winners;
      while (!hand_on) std::this_thread::sleep_for(1ms);  // the others keep waiting meanwhile
      m->unlock();  // wakes the next one
    }));
  }
  // Every attempt that queued has run its script: from here each waits for a wake-up or its
  // 15-30 s backstop.
  wait_for_queue(waiters);
  auto before = test::scripts_run(client_);
  holder.unlock();  // one EVALSHA: the release, which hands the lock to one waiter
  // The first wake-up, within a bound below the shortest backstop sleep: no poll can pass it.
  EXPECT_TRUE(test::holds_within([&] { return winners > 0; }, within_wakeups(3s)));
  std::this_thread::sleep_for(scaled(200ms));  // a herd would show up here
  auto after = test::scripts_run(client_);
  EXPECT_EQ(winners.load(), 1);
  // Expected: the release alone (1), since it hands the lock over. A herd would be 1 + waiters;
  // a busy machine has been seen to add a stray retry.
  EXPECT_LE(after - before, 4) << "a release woke more than one waiter";
  std::printf("[ report   ] scripts run after one release with %d waiters queued: %lld\n", waiters,
              static_cast<long long>(after - before));
  hand_on = true;
  for (auto& d : done) d.get();
  EXPECT_EQ(winners.load(), waiters);
}

TEST_F(WakeupTest, FairModeGrantsInArrivalOrder) {
  mutex holder{client_, test_key()};
  ASSERT_TRUE(holder.try_lock());
  constexpr int waiters = 6;
  std::vector<std::future<void>> done;
  for (int i = 0; i < waiters; ++i) {
    done.push_back(std::async(std::launch::async, [&, i] {
      mutex m{client_, test_key(), {.retry_delay = 20ms, .fair = true}};
      ASSERT_TRUE(m.try_lock_for(30s));
      client_.exec({"RPUSH", test_key("order"), std::to_string(i)});
      m.unlock();
    }));
    wait_for_queue(static_cast<std::size_t>(i) + 1);  // arrival order is i's order
  }
  holder.unlock();
  for (auto& d : done) d.get();
  auto order = client_.exec({"LRANGE", test_key("order"), "0", "-1"});
  ASSERT_EQ(order.elements().size(), static_cast<std::size_t>(waiters));
  for (int i = 0; i < waiters; ++i) EXPECT_EQ(order.elements()[i].str(), std::to_string(i));
}

TEST_F(WakeupTest, ACrashedWaiterAtTheHeadStallsOthersOnlyUntilItsTicketExpires) {
  mutex holder{client_, test_key()};
  ASSERT_TRUE(holder.try_lock());
  test::child_process crashed({test::self_dir() + "/lock_worker", "queue", "--lock", server_.url(),
                               "--key", test_key(), "--fair", "--retry-delay", "100"});
  wait_for_queue(1);
  crashed.signal(SIGKILL);
  crashed.wait();
  mutex next{client_, test_key(), {.retry_delay = 100ms, .fair = true}};
  auto asked = steady::now();
  // The lease form: the Lockable calls keep a lease per thread, and this one is read here.
  auto got = std::async(std::launch::async, [&] {
    std::error_code ec;
    return next.acquire_until(steady::now() + 60s, ec);
  });
  wait_for_queue(2);
  holder.unlock();  // wakes the dead head; the live waiter must still get through
  lease won = got.get();
  EXPECT_TRUE(won);
  // The dead entry lives max(4 x 100 ms, 1 s) from its last refresh, then the backstop finds it
  // (a head that stalled the queue for good would hold it up until the 60 s deadline).
  EXPECT_LT(steady::now() - asked, std::min<std::chrono::milliseconds>(scaled(5s), 30s));
  won.release();
}

void contend(redis_server& server, const std::string& key, int processes, int threads,
             int rounds, bool fair) {
  std::vector<test::child_process> workers;
  for (int p = 0; p < processes; ++p) {
    std::vector<std::string> argv{test::self_dir() + "/lock_worker", "counter", "--lock",
                                  server.url(), "--resource", server.url(), "--key", key,
                                  "--iterations", std::to_string(rounds), "--threads",
                                  std::to_string(threads), "--retry-delay", "200"};
    if (fair) argv.push_back("--fair");
    workers.emplace_back(std::move(argv));
  }
  for (auto& w : workers) EXPECT_EQ(w.wait(scaled(120s)), 0);
  client c{server.url()};
  EXPECT_EQ(c.exec({"GET", key + ":counter"}).str(), std::to_string(processes * threads * rounds));
  auto waits = c.exec({"HVALS", key + ":maxwait"});
  long long longest = 0;
  for (const auto& w : waits.elements()) longest = std::max(longest, std::stoll(w.str()));
  ASSERT_EQ(waits.elements().size(), static_cast<std::size_t>(processes * threads));
  std::printf("[ report   ] %d waiters%s: longest wait for the lock %lld ms\n", processes * threads,
              fair ? " (fair)" : "", longest);
  if (fair) {
    EXPECT_LT(longest, scaled(30s).count()) << "a waiter starved";
  }
}

TEST_F(WakeupTest, EightWaitersAcrossProcessesKeepExclusion) {
  contend(server_, test_key(), 8, 1, 30, false);
}

TEST_F(WakeupTest, EightFairWaitersAcrossProcessesNeitherOverlapNorStarve) {
  contend(server_, test_key(), 8, 1, 30, true);
}

TEST_F(WakeupTest, SixtyFourWaitersAcrossProcessesKeepExclusion) {
  contend(server_, test_key(), 8, 8, 5, false);
}

TEST_F(WakeupTest, SixtyFourFairWaitersNeitherOverlapNorStarve) {
  contend(server_, test_key(), 8, 8, 5, true);
}

// A single node hands the lock over inside the release script: when unlock() returns, the key
// already holds the waiter's token, and the waiter needs no acquire of its own.
TEST_F(WakeupTest, ReleaseHandsTheLockToTheQueuedWaiter) {
  mutex holder{client_, test_key(), {.ttl = 2 * backstop}};
  ASSERT_TRUE(holder.try_lock());
  auto holder_fence = holder.current_lease()->fencing_token();
  // Queued, then only the 15-30 s backstop: no attempt of its own while the test looks.
  mutex waiter{client_, test_key(), {.retry_delay = backstop}};
  // The lease form: the Lockable calls keep a lease per thread, and this one is read here.
  auto got = std::async(std::launch::async, [&] {
    std::error_code ec;
    return waiter.acquire_until(steady::now() + 2 * backstop, ec);
  });
  wait_for_queue(1);
  auto before = test::scripts_run(client_);
  holder.unlock();
  auto now_held_by = client_.exec({"GET", test_key()});
  ASSERT_FALSE(now_held_by.is_nil()) << "the release left the lock free";
  EXPECT_GT(client_.exec({"PTTL", test_key()}).integer(), 0);
  lease won = got.get();
  ASSERT_TRUE(won);
  EXPECT_EQ(won.value(), now_held_by.str());
  EXPECT_EQ(won.fencing_token(), holder_fence + 1);
  EXPECT_EQ(test::scripts_run(client_) - before, 1) << "the waiter ran an acquire of its own";
  EXPECT_EQ(client_.exec({"ZCARD", "{" + test_key() + "}:waiters"}).integer(), 0);
  won.release();
  EXPECT_TRUE(client_.exec({"GET", test_key()}).is_nil());
}

// A holder that is not a dlock client (node-redlock, redsync, redis-py: a plain SET NX PX of a
// random value) publishes nothing when it lets go. The waiter watches the key through Redis's
// client-side caching instead, and learns of every change of it at once: here an extension
// (woken, it finds the key held still and watches again), then the release.
TEST_F(WakeupTest, AForeignHoldersReleaseWakesTheWaiter) {
  client other{server_.url()};
  other.exec({"SET", test_key(), "node-redlock:8f2a", "PX", "60000"});
  auto watches = [&] { return test::command_calls(client_)["client|tracking"]; };
  // How long the waiter needs after the release, if it got the lock within woken_within().
  auto waited_after_release = [&](lock_options options) {
    bool wakes = options.wake_on_release;
    mutex waiter{client_, test_key(), std::move(options)};
    auto before = watches();
    auto waiting = waiting_on(waiter);
    if (wakes) {
      EXPECT_TRUE(eventually([&] { return watches() != before; }));
      EXPECT_EQ(watches(), before + 1) << "the waiter does not watch the foreign holder's key";
      other.exec({"PEXPIRE", test_key(), "60000"});  // the holder extends: wakes, watches again
      EXPECT_TRUE(eventually([&] { return watches() != before + 1; }));
      EXPECT_EQ(watches(), before + 2) << "an extension did not make the waiter watch again";
    }
    // It found the key held (and watches it, with wake-ups: it does so on its way to sleep):
    // from here only the release or its 15-30 s backstop moves it.
    EXPECT_TRUE(eventually([&] { return waiting.failed > 0; }));
    auto released = steady::now();
    other.exec({"DEL", test_key()});
    auto took = waiting.got_within(released, woken_within());
    other.exec({"SET", test_key(), "node-redlock:8f2a", "PX", "60000"});
    return took;
  };
  // The backstop sleeps 15-30 s (the foreign key lives 60 s); a woken waiter takes about a
  // round trip.
  auto woken = waited_after_release({.retry_delay = backstop});
  EXPECT_TRUE(woken.has_value()) << "not woken within " << woken_within().count() << " ms";
  if (woken) {
    std::printf("[ report   ] a foreign holder's release woke the waiter in %.1f ms\n", ms(*woken));
  }
  // Without wake-ups it is plain polling: it shows the test can fail.
  auto polled = waited_after_release({.retry_delay = backstop, .wake_on_release = false});
  EXPECT_FALSE(polled.has_value()) << "polling got the lock " << ms(polled.value_or(0s))
                                   << " ms after the release";
}

// dlock's own holders wake one waiter each when they let go; watching their keys as well would
// wake every waiter at every release and extension.
TEST_F(WakeupTest, DlocksOwnHoldersAreNotWatched) {
  mutex holder{client_, test_key()};
  ASSERT_TRUE(holder.try_lock());
  mutex a{client_, test_key(), {.retry_delay = 10s}}, b{client_, test_key(), {.retry_delay = 10s}};
  auto first = std::async(std::launch::async, [&] {
    bool ok = a.try_lock_for(20s);
    if (ok) a.unlock();
    return ok;
  });
  auto second = std::async(std::launch::async, [&] {
    bool ok = b.try_lock_for(20s);
    if (ok) b.unlock();
    return ok;
  });
  wait_for_queue(2);
  holder.unlock();
  EXPECT_TRUE(first.get());
  EXPECT_TRUE(second.get());
  EXPECT_EQ(test::command_calls(client_)["client|tracking"], 0);
}

// A FLUSHDB (or FLUSHALL) invalidates every tracked key at once, with a nil list of keys.
TEST_F(WakeupTest, AFlushWakesWaitersOnForeignHolders) {
  client other{server_.url()};
  other.exec({"SET", test_key(), "redsync-value", "PX", "60000"});
  mutex waiter{client_, test_key(), {.retry_delay = backstop}};
  auto waiting = waiting_on(waiter);
  // It watches the key on its way to its 15-30 s backstop sleep.
  EXPECT_TRUE(eventually([&] { return test::command_calls(client_)["client|tracking"] != 0; }));
  auto flushed = steady::now();
  other.exec({"FLUSHDB"});
  auto took = waiting.got_within(flushed, woken_within());
  EXPECT_TRUE(took.has_value()) << "not woken within " << woken_within().count() << " ms";
}

// A waiter that gave up, whose entry a late attempt queued again (here: put back by hand), is
// handed the lock by the next release: its client gives the lock back at once, also when the
// mutex object is already gone, so the lock is not held by nobody for its TTL.
TEST_F(WakeupTest, ALockHandedToAWaiterThatGaveUpIsGivenBack) {
  for (bool destroyed : {false, true}) {
    SCOPED_TRACE(destroyed ? "mutex object destroyed" : "mutex object alive");
    client_.exec({"FLUSHALL"});
    mutex holder{client_, test_key(), {.ttl = 30s}};
    ASSERT_TRUE(holder.try_lock());
    std::optional<mutex> waiter;
    // A 120 s TTL: a lock handed to it and not given back outlasts every wait below.
    waiter.emplace(client_, test_key(), lock_options{.ttl = 120s, .retry_delay = 4s});
    auto gave_up = std::async(std::launch::async, [&] { return waiter->try_lock_for(scaled(1s)); });
    const std::string waiters = "{" + test_key() + "}:waiters", info = "{" + test_key() + "}:waiter-info";
    // Its entry, read while it waits (it gives up after a second).
    std::vector<reply> entries;
    EXPECT_TRUE(eventually([&] {
      entries = client_.exec({"HGETALL", info}).elements();
      return !entries.empty();
    })) << "the waiter did not queue";
    ASSERT_EQ(entries.size(), 2u);
    std::string id = entries[0].str(), entry = entries[1].str();
    EXPECT_FALSE(gave_up.get());
    // Its cleanup ran (under load it may still be on its way when the call returns).
    ASSERT_TRUE(eventually([&] { return client_.exec({"ZCARD", waiters}).integer() == 0; }));
    if (destroyed) waiter.reset();
    client_.exec({"ZADD", waiters, "99", id});  // the late attempt
    client_.exec({"HSET", info, id, entry});
    holder.unlock();
    // Never as long as the waiter's 120 s TTL, however slow the build: that expiry would pass.
    EXPECT_TRUE(test::holds_within(
        [&] { return client_.exec({"EXISTS", test_key()}).integer() == 0; },
        std::min<std::chrono::milliseconds>(scaled(5s), 60s)))
        << "held by nobody";
    mutex newcomer{client_, test_key()};
    EXPECT_TRUE(newcomer.try_lock());
    newcomer.unlock();
  }
}

// The waiter cannot know when the release ran, only that it ran after the round that queued
// it: its lease counts from that round, never from the message's arrival.
TEST_F(WakeupTest, AHandedOverLeaseCountsFromTheRoundThatQueued) {
  mutex holder{client_, test_key()};
  ASSERT_TRUE(holder.try_lock());
  mutex waiter{client_, test_key(), {.ttl = 10s, .retry_delay = 20s}};
  // The lease form: the Lockable calls keep a lease per thread, and this one is read here.
  auto got = std::async(std::launch::async, [&] {
    std::error_code ec;
    return waiter.acquire_until(steady::now() + 20s, ec);
  });
  wait_for_queue(1);
  // The time between the queueing and the handoff: the two counts differ by it (2 s, wider
  // than the 1.5 s left below for the steps around it on a slow build).
  std::this_thread::sleep_for(2s);
  holder.unlock();
  lease won = got.get();
  ASSERT_TRUE(won);
  EXPECT_GT(client_.exec({"PTTL", test_key()}).integer(), 8500);  // the server counts from now
  EXPECT_LT(won.remaining(), 8000ms);       // we count from the queueing: 10 s - 2 s - drift
  EXPECT_GT(won.remaining(), 6000ms);
  won.release();
}

// PUBLISH reports how many subscribers got the message: none means the waiter's process is
// gone, and the release serves the next waiter instead of handing the lock to nobody.
TEST_F(WakeupTest, AWaiterNobodyListensForIsSkipped) {
  mutex holder{client_, test_key(), {.ttl = 2 * backstop}};
  ASSERT_TRUE(holder.try_lock());
  mutex waiter{client_, test_key(), {.retry_delay = backstop}};
  // The lease form: the Lockable calls keep a lease per thread, and this one is read here.
  auto got = std::async(std::launch::async, [&] {
    std::error_code ec;
    return waiter.acquire_until(steady::now() + 2 * backstop, ec);
  });
  wait_for_queue(1);
  // A ghost ahead of the live waiter, as a crashed process leaves it: live deadline, no listener.
  std::string queue = "{" + test_key() + "}:waiters", info = "{" + test_key() + "}:waiter-info";
  client_.exec({"ZADD", queue, "-1", "ghost"});
  client_.exec({"HSET", info, "ghost", "99999999999999 dlock:wake:nobody-listens 30000 0"});
  auto released = steady::now();
  holder.unlock();
  EXPECT_NE(client_.exec({"GET", test_key()}).str(), "ghost");
  lease won = got.get();
  ASSERT_TRUE(won);
  EXPECT_LT(steady::now() - released, woken_within());  // not the 15-30 s backstop
  EXPECT_EQ(client_.exec({"ZSCORE", queue, "ghost"}).is_nil(), true);
  won.release();
}

// Waiters that give up (short timeouts) while releases hand the lock on: a handoff that reaches
// a waiter after it stopped listening must be given back, or the lock would sit with nobody
// until its TTL ran out.
TEST_F(WakeupTest, WaitersThatGiveUpLeaveNoOrphanedLock) {
  constexpr int threads = 8;
  std::atomic<bool> stop{false};
  std::atomic<int> acquired{0}, gave_up{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      client own{server_.url()};
      // A 120 s TTL: a lock handed to a quitter and not given back outlasts the check below.
      mutex m{own, test_key(), {.ttl = 120s, .retry_delay = 200ms}};
      for (int i = 0; !stop; ++i) {
        if (!m.try_lock_for(std::chrono::microseconds(200 + 300 * ((t + i) % 7)))) {
          ++gave_up;
          continue;
        }
        ++acquired;
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        m.unlock();
      }
    });
  }
  std::this_thread::sleep_for(3s);  // the churn runs this long
  EXPECT_TRUE(eventually([&] { return acquired > 0 && gave_up > 0; }));
  stop = true;
  for (auto& t : pool) t.join();
  std::printf("[ report   ] %d acquisitions, %d waits given up\n", acquired.load(), gave_up.load());
  EXPECT_GT(acquired.load(), 0);
  EXPECT_GT(gave_up.load(), 0);
  // Every holder released and every quitter gave its handoffs back: nobody holds the lock (a
  // give-up's release may still be on its way for a moment).
  // Never as long as the 120 s TTL, however slow the build: that expiry would pass.
  EXPECT_TRUE(test::holds_within([&] { return client_.exec({"GET", test_key()}).is_nil(); },
                                 std::min<std::chrono::milliseconds>(scaled(5s), 60s)))
      << "held by a waiter that gave up; PTTL " << client_.exec({"PTTL", test_key()}).integer();
}

TEST_F(WakeupTest, FairModeIsRejectedForSeveralNodes) {
  redis_server second;
  EXPECT_THROW((mutex{{client_, client{second.url()}}, test_key(), {.fair = true}}),
               std::system_error);
  EXPECT_THROW((mutex{client_, test_key(), {.wake_on_release = false, .fair = true}}),
               std::system_error);
}

// The queue keys live twice the longest waiter ttl: a waiter with a short retry_delay must not
// cut them to its own, or a patient waiter would lose its place (and fair mode its order).
TEST_F(WakeupTest, AHastyWaiterNeverShortensThePatientOnesQueue) {
  mutex holder{client_, test_key()};
  ASSERT_TRUE(holder.try_lock());
  mutex patient{client_, test_key(), {.retry_delay = 5s}};  // entry 20 s: queue keys 40 s
  auto p = std::async(std::launch::async, [&] {
    std::error_code ec;
    return patient.acquire_until(steady::now() + 20s, ec);
  });
  wait_for_queue(1);
  mutex hasty{client_, test_key(), {.retry_delay = 10ms}};  // entry 1 s: would set 2 s
  auto h = std::async(std::launch::async, [&] {
    std::error_code ec;
    return hasty.acquire_until(steady::now() + scaled(500ms), ec);  // queues, then gives up
  });
  wait_for_queue(2);
  for (const char* suffix : {":waiters", ":waiter-info", ":tickets"}) {
    EXPECT_GT(client_.exec({"PTTL", "{" + test_key() + "}" + suffix}).integer(), 30000) << suffix;
  }
  EXPECT_FALSE(h.get());
  holder.unlock();
  lease won = p.get();
  EXPECT_TRUE(won);
}

// A node that refuses connections makes every round fail at once, and its inbox can never
// subscribe: the retry pacing must hold all the same (3 retries: at least 3 x retry_delay / 2).
TEST_F(WakeupTest, RetriesKeepTheirPaceWhenTheNodeIsDown) {
  client dead{"redis://127.0.0.1:" + std::to_string(test::free_port()),
              client_options{.reconnect_backoff_min = 1ms, .reconnect_backoff_max = 5ms}};
  mutex m{dead, test_key(), {.retry_delay = 200ms}};
  auto start = steady::now();
  std::error_code ec;
  EXPECT_FALSE(test::acquire_rounds(m, 4, ec));
  EXPECT_EQ(ec, errc::node_unreachable);
  EXPECT_GE(steady::now() - start, 300ms) << "the sleeps between retries were cut short";
}

// Semaphores wait through the same inbox (wake_waiter): their pace holds too.
TEST_F(WakeupTest, SemaphoreRetriesKeepTheirPaceWhenTheNodeIsDown) {
  client dead{"redis://127.0.0.1:" + std::to_string(test::free_port()),
              client_options{.reconnect_backoff_min = 1ms, .reconnect_backoff_max = 5ms}};
  for (bool fair : {false, true}) {
    semaphore s{dead, test_key(), 2, {.fair = fair, .retry_delay = 200ms}};
    auto start = steady::now();
    std::error_code ec;
    // acquire() would wait out the outage; four attempts (three sleeps) end this wait.
    wait_control four_attempts{.on_retry = [](const wait_progress& p) { return p.attempts < 4; }};
    EXPECT_FALSE(s.acquire_until(semaphore::clock::time_point::max(), 1, four_attempts, ec));
    EXPECT_EQ(ec, errc::node_unreachable);
    EXPECT_GE(steady::now() - start, 300ms)
        << (fair ? "fair" : "unfair") << ": the sleeps between retries were cut short";
  }
}
}  // namespace
}  // namespace dlock::test
