// SPDX-License-Identifier: Apache-2.0
// Waiting for a permit without polling: a release wakes as many queued waiters as permits it
// freed, through pub/sub; the retry delay is only a backstop; fair mode still serves in ticket
// order; the limit holds. Each test runs once per variant (unfair and fair).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <optional>
#include <memory>
#include <stop_token>
#include <thread>
#include <vector>

#include "dlock/key_layout.hpp"
#include "dlock/semaphore.hpp"
#include "semaphore_core.hpp"
#include "support/background_wait.hpp"
#include "support/checks.hpp"
#include "support/commandstats.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// The waiter's acquire_until of `permits` on another thread (support/background_wait.hpp).
test::background_wait waiting_on(semaphore& waiter, std::ptrdiff_t permits = 1) {
  return test::background_wait{
      [&waiter, permits](auto deadline, const wait_control& control, std::error_code& ec) {
        return waiter.acquire_until(deadline, permits, control, ec);
      }};
}

long long integer_of(const reply& r) { return r.is_nil() ? 0 : std::stoll(r.str()); }

// INCR on entry with the highest value kept, DECR on exit (as in semaphore_test.cpp).
constexpr std::string_view enter_script =
    "local v = redis.call('INCR', KEYS[1]) "
    "if v > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], v) end "
    "return v";

class SemaphoreWakeupBase : public ::testing::Test {
 protected:
  virtual bool fair() const = 0;
  semaphore_options options(semaphore_options o = {}) const {
    o.fair = fair();
    return o;
  }
  semaphore_keys keys() const { return semaphore_keys_for(test_key(), fair()); }

  // Every queued waiter has an entry in waiter-info (both variants), with its wake channel once
  // its client's inbox is subscribed; wait until `n` of them can be woken (or just queued).
  void wait_for_queue(std::size_t n, bool wakeable = true) {
    if (!eventually([&] {
          std::size_t count = 0;
          auto entries = client_.exec({"HVALS", keys().waiter_info});
          for (const auto& e : entries.elements()) {
            if (!wakeable || e.str().find(" dlock:wake:") != std::string::npos) ++count;
          }
          return count >= n;
        })) {
      FAIL() << "waiters did not queue";
    }
  }

  long long scripts_run() { return test::scripts_run(client_); }

  // Entries of waiter info that offer a handoff (" h..." unfair, " f..." fair).
  std::size_t offering() {
    std::size_t count = 0;
    reply entries = client_.exec({"HVALS", keys().waiter_info});
    for (const auto& e : entries.elements()) {
      if (e.str().find(fair() ? " f" : " h") != std::string::npos) ++count;
    }
    return count;
  }

  // Two holders of one permit each of 2, and `w`, a waiter for both whose backstop (15-30 s)
  // leaves only wake-ups and handoffs to move it between its attempts.
  struct both_permits_held {
    both_permits_held(client& c, const SemaphoreWakeupBase& base)
        : a{c, test_key(), 2, base.options({.ttl = 2 * backstop})},
          b{c, test_key(), 2, base.options({.ttl = 2 * backstop})},
          w{c, test_key(), 2, base.options({.ttl = 30s, .retry_delay = backstop})},
          held_a{a.try_acquire()},
          held_b{b.try_acquire()} {}
    semaphore a, b, w;
    lease held_a, held_b;
  };

  // `got`, handed both permits of 2 with one script run since `before`, holds them alone: a
  // newcomer finds none. Then it gives them back.
  void expect_handed_both_permits(lease got, long long before) {
    ASSERT_TRUE(got);
    EXPECT_EQ(scripts_run() - before, 1);
    EXPECT_EQ(client_.exec({"HGET", keys().weights, got.value()}).str(), "2");
    // Its weight and its entry last as long as it does (30 s): the keys were pushed out for it.
    EXPECT_GT(client_.exec({"PTTL", keys().weights}).integer(), 25'000);
    EXPECT_GT(client_.exec({"PTTL", keys().expiries}).integer(), 25'000);
    semaphore late{client_, test_key(), 2, options()};
    EXPECT_FALSE(late.try_acquire());
    EXPECT_FALSE(got.release());
  }

  // Waiters that each take one permit, on threads of their own, sleeping 15-30 s between
  // attempts (start_herd): a winner counts itself in `winners`, holds until hand_on, then
  // releases, which wakes the next.
  struct herd {
    std::atomic<int> winners{0};
    std::atomic<bool> hand_on{false};
    std::vector<std::unique_ptr<semaphore>> sems;
    std::vector<std::future<void>> done;
    // Lets the winners go, and waits until every waiter has held and released.
    void finish() {
      hand_on = true;
      for (auto& d : done) d.get();
    }
    ~herd() { hand_on = true; }  // a test that stopped early must not leave a winner waiting
  };
  void start_herd(herd& h, int waiters, std::ptrdiff_t limit) {
    for (int i = 0; i < waiters; ++i) {
      h.sems.push_back(std::make_unique<semaphore>(client_, test_key(), limit,
                                                   options({.ttl = 30s, .retry_delay = backstop})));
    }
    for (int i = 0; i < waiters; ++i) {
      h.done.push_back(std::async(std::launch::async, [&h, i] {
        auto p = h.sems[i]->try_acquire_for(4 * backstop);
        if (!p) return;
        ++h.winners;
        while (!h.hand_on) std::this_thread::sleep_for(1ms);  // the others keep waiting meanwhile
        EXPECT_FALSE(p.release());                            // wakes the next one
      }));
    }
  }

  // Loads every semaphore script, so that no NOSCRIPT round trip is counted later.
  void load_scripts() {
    semaphore warm{client_, test_key("warm"), 1, options()};
    auto p = warm.try_acquire();
    ASSERT_TRUE(p);
    ASSERT_FALSE(p.release());
  }

  // How long a waiter with the backstop needs after its holder's release, if it got the
  // permit within woken_within() of it (else it is stopped: nullopt).
  std::optional<steady::duration> handoff(bool wake) {
    semaphore holder{client_, test_key(), 1, options({.ttl = 2 * backstop})};
    semaphore waiter{client_, test_key(), 1,
                     options({.retry_delay = backstop, .wake_on_release = wake})};
    auto held = holder.try_acquire();
    EXPECT_TRUE(held);
    auto waiting = waiting_on(waiter);
    if (wake || fair()) wait_for_queue(1, wake);  // a polling fair waiter queues too
    // It found no permit free (and queued, with wake-ups): from here only the release or its
    // 15-30 s backstop moves it.
    EXPECT_TRUE(eventually([&] { return waiting.failed > 0; }));
    auto released = steady::now();
    EXPECT_FALSE(held.release());
    return waiting.got_within(released, woken_within());
  }

  redis_server server_;
  client client_{server_.url()};
};

// Runs each test once per variant.
class SemaphoreWakeupTest : public SemaphoreWakeupBase, public ::testing::WithParamInterface<bool> {
 protected:
  bool fair() const override { return GetParam(); }
};

// The base with the variant fixed, for the tests of one variant only.
template <bool Fair>
class SemaphoreFixedVariant : public SemaphoreWakeupBase {
 protected:
  bool fair() const override { return Fair; }
};

using SemaphoreWakeupFairTest = SemaphoreFixedVariant<true>;

INSTANTIATE_TEST_SUITE_P(Variants, SemaphoreWakeupTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Fair" : "Unfair"; });

TEST_P(SemaphoreWakeupTest, ReleaseWakesTheWaiterLongBeforeItsBackstop) {
  auto woken = handoff(true);
  EXPECT_TRUE(woken.has_value()) << "not woken within " << woken_within().count() << " ms";
  // The same wait with wake-ups off is plain polling: it shows the test can fail.
  auto polled = handoff(false);
  EXPECT_FALSE(polled.has_value()) << "polling got the permit " << ms(polled.value_or(0s))
                                   << " ms after the release";
  std::printf("[ report   ] handoff with wake-up %.1f ms; polling (15-30 s backstop): none "
              "within %lld ms\n",
              ms(woken.value_or(0s)), static_cast<long long>(woken_within().count()));
}

// A holder of the only permit releases while a waiter is queued, asleep in its 15-30 s
// backstop: the release alone makes the waiter a holder, which runs no attempt after it.
TEST_P(SemaphoreWakeupTest, AReleaseMakesTheWaiterAHolderWithoutAnotherAttempt) {
  load_scripts();
  semaphore holder{client_, test_key(), 1, options({.ttl = 2 * backstop})};
  semaphore waiter{client_, test_key(), 1, options({.ttl = 30s, .retry_delay = backstop})};
  auto held = holder.try_acquire();
  ASSERT_TRUE(held);
  auto waiting = waiting_on(waiter);
  wait_for_queue(1);
  ASSERT_EQ(offering(), 1u);
  // Its attempt that queued has run its script, and it failed one: no attempt of its own
  // comes before its backstop now.
  EXPECT_TRUE(eventually([&] { return waiting.failed > 0; }));
  auto before = scripts_run();
  auto released = steady::now();
  EXPECT_FALSE(held.release());
  ASSERT_EQ(waiting.result.wait_until(released + woken_within()), std::future_status::ready)
      << "not made a holder within " << woken_within().count() << " ms";
  auto got = waiting.result.get();
  auto waited = waiting.returned_at - released;
  ASSERT_TRUE(got);
  EXPECT_LT(waited, woken_within()) << ms(waited) << " ms";
  EXPECT_EQ(scripts_run() - before, 1) << "the waiter ran an attempt after the release";
  EXPECT_GT(got.fencing_token(), held.fencing_token());
  // A holder now, with the TTL as its expiry and no waiter entry; the fair variant's keeps
  // its place in line (holders rank there too), the unfair one's leaves the queue.
  EXPECT_FALSE(client_.exec({"ZSCORE", keys().expiries, got.value()}).is_nil());
  if (fair()) {
    EXPECT_FALSE(client_.exec({"ZSCORE", keys().owners, got.value()}).is_nil());
  } else {
    EXPECT_EQ(client_.exec({"ZCARD", keys().waiters}).integer(), 0);
  }
  EXPECT_EQ(client_.exec({"HLEN", keys().waiter_info}).integer(), 0);
  EXPECT_GT(client_.exec({"PTTL", keys().expiries}).integer(), 25'000);
  EXPECT_GT(got.remaining(), 25s);
  semaphore late{client_, test_key(), 1, options()};
  EXPECT_FALSE(late.try_acquire()) << "the handed-over permit was not counted";
  EXPECT_FALSE(got.release());  // the permit is the waiter's own
  EXPECT_EQ(client_.exec({"ZCARD", keys().expiries}).integer(), 0);
}

TEST_P(SemaphoreWakeupTest, OneReleaseWakesOneWaiterNotAHerd) {
  load_scripts();
  semaphore holder{client_, test_key(), 1, options({.ttl = 2 * backstop})};
  auto held = holder.try_acquire();
  ASSERT_TRUE(held);
  constexpr int waiters = 12;
  herd h;
  start_herd(h, waiters, 1);
  // Every attempt that queued has run its script: from here each waits for a wake-up or its
  // 15-30 s backstop.
  wait_for_queue(waiters);
  auto before = scripts_run();
  EXPECT_FALSE(held.release());  // one script (the release), then the woken waiter's acquire
  // The first wake-up, within a bound below the shortest backstop sleep: no poll can pass it.
  EXPECT_TRUE(test::holds_within([&] { return h.winners > 0; }, within_wakeups(3s)));
  std::this_thread::sleep_for(scaled(200ms));  // a herd would show up here
  auto after = scripts_run();
  EXPECT_EQ(h.winners.load(), 1);
  // Expected 2; a herd would be 1 + waiters. A busy machine may add a stray retry.
  EXPECT_LE(after - before, 4) << "a release woke more than one waiter";
  std::printf("[ report   ] scripts run after one release with %d waiters queued: %lld\n", waiters,
              after - before);
  auto start = steady::now();
  h.finish();  // each winner's release wakes the next: no backstop in this chain
  EXPECT_EQ(h.winners.load(), waiters);
  EXPECT_LT(steady::now() - start, within_wakeups(4s))
      << "a handoff waited for its 15-30 s backstop";
}

TEST_P(SemaphoreWakeupTest, WeightedReleaseOfKPermitsWakesKWaiters) {
  load_scripts();
  constexpr std::ptrdiff_t k = 3;
  constexpr int waiters = 7;
  semaphore holder{client_, test_key(), k, options({.ttl = 2 * backstop})};
  auto held = holder.try_acquire(k);
  ASSERT_TRUE(held);
  herd h;
  start_herd(h, waiters, k);
  wait_for_queue(waiters);  // each has run the attempt that queued it: now it sleeps 15-30 s
  auto before = scripts_run();
  EXPECT_FALSE(held.release());  // frees k permits: wakes the first k waiters, nobody else
  // All k woken by the one release, within a bound below the shortest backstop sleep.
  EXPECT_TRUE(test::holds_within([&] { return h.winners >= k; }, within_wakeups(3s)));
  std::this_thread::sleep_for(scaled(200ms));  // more would show up here
  auto after = scripts_run();
  EXPECT_EQ(h.winners.load(), k);
  EXPECT_LE(after - before, 1 + k + 2) << "expected the release and " << k << " acquires";
  std::printf("[ report   ] scripts run after releasing %td permits with %d waiters queued: %lld\n",
              k, waiters, after - before);
  h.finish();
  EXPECT_EQ(h.winners.load(), waiters);
}

TEST_P(SemaphoreWakeupTest, ALostNotificationCostsAtMostTheBackstop) {
  semaphore holder{client_, test_key(), 1, options({.ttl = 30s})};
  auto held = holder.try_acquire();
  ASSERT_TRUE(held);
  semaphore waiter{client_, test_key(), 1, options({.retry_delay = 300ms})};
  auto waiting = waiting_on(waiter);
  wait_for_queue(1);
  // Freed behind dlock's back, as an expiry would: nobody is told.
  auto freed = steady::now();
  client_.exec({"ZREM", keys().expiries, held.value()});
  if (fair()) client_.exec({"ZREM", keys().owners, held.value()});
  // The 150-300 ms backstop, with room for a slow build; never told, it would wait for its 60 s
  // deadline.
  auto took = waiting.got_within(freed, scaled(1s));
  EXPECT_TRUE(took.has_value()) << "not within " << scaled(1s).count() << " ms";
  held.detach();
}

TEST_P(SemaphoreWakeupTest, AWaiterThatGivesUpLeavesTheQueue) {
  semaphore holder{client_, test_key(), 1, options({.ttl = 30s})};
  auto held = holder.try_acquire();
  ASSERT_TRUE(held);
  semaphore waiter{client_, test_key(), 1, options({.retry_delay = 50ms})};
  auto gave_up =
      std::async(std::launch::async, [&] { return !waiter.try_acquire_for(scaled(1s)); });
  wait_for_queue(1);
  EXPECT_TRUE(gave_up.get());
  // The give-up's cleanup may still be on its way when the call returns (under load): poll.
  EXPECT_TRUE(
      eventually([&] { return client_.exec({"HLEN", keys().waiter_info}).integer() == 0; }));
  EXPECT_EQ(client_.exec({"ZCARD", keys().waiters}).integer(), fair() ? 1 : 0);  // the holder
  EXPECT_FALSE(held.release());
}

TEST_P(SemaphoreWakeupTest, AWokenWaiterThatGivesUpHandsItsWakeUpOn) {
  // Two queued waiters; the release wakes the first, which leaves without using the permit (as
  // when its deadline passed just then). Its leaving must wake the second one at once.
  load_scripts();
  semaphore holder{client_, test_key(), 1, options({.ttl = 2 * backstop})};
  auto held = holder.try_acquire();
  ASSERT_TRUE(held);
  semaphore second{client_, test_key(), 1, options({.retry_delay = backstop})};
  // The first waiter, queued by hand under a channel nobody listens on.
  auto k = keys();
  if (fair()) {
    client_.exec({"EVAL", detail::sem_fair_acquire_script.body, "6", k.owners, k.expiries,
                  k.weights, k.tickets, k.waiter_info, k.fence, "gone", "1", "1", "30000", "30000",
                  "dlock:wake:nobody"});
  } else {
    client_.exec({"EVAL", detail::sem_acquire_script.body, "6", k.expiries, k.weights, k.fence,
                  k.waiters, k.waiter_info, k.tickets, "gone", "1", "1", "30000",
                  "30000 dlock:wake:nobody"});
  }
  auto waiting = waiting_on(second);
  wait_for_queue(2);
  EXPECT_TRUE(eventually([&] { return waiting.failed > 0; }));  // asleep in its 15-30 s backstop
  EXPECT_FALSE(held.release());      // wakes "gone" only
  auto info = client_.exec({"HGET", k.waiter_info, "gone"}).str();
  EXPECT_NE(info.find(" woken"), std::string::npos) << info;
  auto left = steady::now();
  client_.exec({"EVALSHA", detail::sem_release_script.sha1, "5", k.expiries, k.weights,
                k.waiters, k.waiter_info, k.fence, "gone", "1"});
  auto took = waiting.got_within(left, woken_within());
  EXPECT_TRUE(took.has_value()) << "not woken within " << woken_within().count() << " ms";
}

TEST_P(SemaphoreWakeupTest, WokenWaitersNeverExceedTheLimit) {
  // Progress comes from wake-ups alone (the backstop is 1-2 s): the limit must still hold.
  constexpr std::ptrdiff_t limit = 3;
  constexpr int threads = 8, rounds = 10;
  std::string occupancy = test_key("occupancy"), highest = test_key("max");
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  auto start = steady::now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      semaphore s{client_, test_key(), limit, options({.retry_delay = 2s})};
      for (int i = 0; i < rounds; ++i) {
        std::ptrdiff_t want = (t + i) % 3 == 0 ? 2 : 1;  // some weighted permits among them
        auto p = s.try_acquire_for(scaled(30s), want);
        if (!p) {
          ++failures;
          return;
        }
        for (std::ptrdiff_t w = 0; w < want; ++w) {
          client_.exec({"EVAL", enter_script, "2", occupancy, highest});
        }
        std::this_thread::sleep_for(2ms);
        client_.exec({"DECRBY", occupancy, std::to_string(want)});
        EXPECT_FALSE(p.release());
      }
    });
  }
  for (auto& t : pool) t.join();
  auto took = steady::now() - start;
  EXPECT_EQ(failures, 0);
  long long max = integer_of(client_.exec({"GET", highest}));
  EXPECT_LE(max, limit);
  EXPECT_EQ(max, limit) << "no contention: the test proved nothing";
  EXPECT_EQ(integer_of(client_.exec({"GET", occupancy})), 0);
  std::printf("[ report   ] %d acquisitions by %d threads, limit %td, 1-2 s backstop: %.0f ms\n",
              threads * rounds, threads, limit, ms(took));
}

TEST_F(SemaphoreWakeupFairTest, GrantsInTicketOrderThroughWakeUps) {
  semaphore holder{client_, test_key(), 1, options({.ttl = 2 * backstop})};
  auto held = holder.try_acquire();
  ASSERT_TRUE(held);
  constexpr int waiters = 6;
  std::vector<std::future<void>> done;
  for (int i = 0; i < waiters; ++i) {
    done.push_back(std::async(std::launch::async, [&, i] {
      semaphore s{client_, test_key(), 1, options({.retry_delay = backstop})};
      auto p = s.try_acquire_for(4 * backstop);
      ASSERT_TRUE(p);
      client_.exec({"RPUSH", test_key("order"), std::to_string(i)});
      EXPECT_FALSE(p.release());  // wakes the next ticket
    }));
    wait_for_queue(static_cast<std::size_t>(i) + 1);  // arrival order is i's order
  }
  auto start = steady::now();
  EXPECT_FALSE(held.release());
  for (auto& d : done) d.get();
  auto took = steady::now() - start;
  auto order = client_.exec({"LRANGE", test_key("order"), "0", "-1"});
  ASSERT_EQ(order.elements().size(), static_cast<std::size_t>(waiters));
  for (int i = 0; i < waiters; ++i) EXPECT_EQ(order.elements()[i].str(), std::to_string(i));
  // Six handoffs by polling would take 15-30 s each.
  EXPECT_LT(took, within_wakeups(2s)) << ms(took) << " ms";
}

// The unfair variant's handoff (sem_release.lua): the release makes the first waiter a holder
// itself, so the waiter needs no attempt of its own after the wake-up.
using SemaphoreHandoffTest = SemaphoreFixedVariant<false>;

// A waiter for 2 permits of 2 while two holders have 1 each: the first release frees one,
// which is not enough (a wake-up only: its attempt fails); the second makes it a holder of 2.
TEST_F(SemaphoreHandoffTest, AWaiterIsHandedPermitsOnlyWhenAllItWantsAreFree) {
  load_scripts();
  both_permits_held t{client_, *this};
  ASSERT_TRUE(t.held_a && t.held_b);
  auto acquired = waiting_on(t.w, 2);
  wait_for_queue(1);
  EXPECT_TRUE(eventually([&] { return acquired.failed > 0; }));  // asleep in its backstop
  auto woken_once = acquired.failed.load();
  auto scripts_before_release = scripts_run();
  EXPECT_FALSE(t.held_a.release());
  // Woken, it tried again (a script after the release's own) and queued again (its entry no
  // longer marked woken), and sleeps.
  EXPECT_TRUE(eventually([&] {
    auto e = client_.exec({"HVALS", keys().waiter_info});
    return scripts_run() >= scripts_before_release + 2 && acquired.failed > woken_once &&
           e.elements().size() == 1 && e.elements()[0].str().find("woken") == std::string::npos;
  }));
  EXPECT_EQ(acquired.result.wait_for(0s), std::future_status::timeout);
  auto before = scripts_run();
  EXPECT_FALSE(t.held_b.release());
  ASSERT_EQ(acquired.result.wait_for(scaled(10s)), std::future_status::ready);
  expect_handed_both_permits(acquired.result.get(), before);
}

// An attempt that ran after its acquisition gave up (it had timed out on its way) queues the
// token again, and a release hands it a permit: the client, which no longer waits for that
// token, gives it back at once instead of leaving it held by nobody for the TTL (a review found
// that). The late attempt is written by hand here, as the entry the waiter itself had queued.
TEST_F(SemaphoreHandoffTest, APermitHandedToAWaiterThatGaveUpIsGivenBack) {
  load_scripts();
  // Also once the waiter's semaphore object is gone, as after a scoped try_acquire_for.
  for (bool destroyed : {false, true}) {
    SCOPED_TRACE(destroyed ? "semaphore object destroyed" : "semaphore object alive");
    client_.exec({"FLUSHALL"});
    semaphore holder{client_, test_key(), 1, options({.ttl = 30s})};
    std::optional<semaphore> waiter;
    // A 120 s TTL: a permit handed to it and not given back outlasts every wait below.
    waiter.emplace(client_, test_key(), 1, options({.ttl = 120s, .retry_delay = 4s}));
    auto held = holder.try_acquire();
    ASSERT_TRUE(held);
    auto gave_up =
        std::async(std::launch::async, [&] { return waiter->try_acquire_for(scaled(1s)); });
    // Its entry, read while it waits (it gives up after a second).
    std::vector<reply> entries;
    EXPECT_TRUE(eventually([&] {
      entries = client_.exec({"HGETALL", keys().waiter_info}).elements();
      return !entries.empty() && entries.back().str().find(" dlock:wake:") != std::string::npos;
    })) << "the waiter did not queue";
    ASSERT_EQ(entries.size(), 2u);
    std::string token = entries[0].str(), entry = entries[1].str();
    ASSERT_NE(entry.find(" h1:120000:"), std::string::npos) << entry;
    EXPECT_FALSE(gave_up.get());
    // Its cleanup ran (under load it may still be on its way when the call returns).
    ASSERT_TRUE(eventually([&] { return client_.exec({"ZCARD", keys().waiters}).integer() == 0; }));
    if (destroyed) waiter.reset();
    client_.exec({"ZADD", keys().waiters, "99", token});  // the late attempt
    client_.exec({"HSET", keys().waiter_info, token, entry});
    EXPECT_FALSE(held.release());
    // Never as long as the waiter's 120 s TTL, however slow the build: that expiry would pass.
    EXPECT_TRUE(test::holds_within(
        [&] { return client_.exec({"ZCARD", keys().expiries}).integer() == 0; },
        std::min<std::chrono::milliseconds>(scaled(5s), 60s)))
        << "held by nobody";
    semaphore newcomer{client_, test_key(), 1, options()};
    auto permit = newcomer.try_acquire();
    EXPECT_TRUE(permit);
  }
}

// The fair variant's handoff: a release walks the line in ticket order and makes every waiter
// whose permits fit, counting everyone ahead of it, a holder itself (sem_release.lua).
using SemaphoreFairHandoffTest = SemaphoreFixedVariant<true>;

// A waiter for 2 permits of 2 behind two holders of 1: the first release leaves it neither
// handed over nor woken (what is in line up to it does not fit), the second hands it both.
TEST_F(SemaphoreFairHandoffTest, AWaiterIsHandedItsPermitsOnlyWhenAllAheadOfItFit) {
  load_scripts();
  both_permits_held t{client_, *this};
  ASSERT_TRUE(t.held_a && t.held_b);
  auto acquired =
      std::async(std::launch::async, [&] { return t.w.try_acquire_for(2 * backstop, 2); });
  wait_for_queue(1);
  auto before = scripts_run();
  EXPECT_FALSE(t.held_a.release());
  std::this_thread::sleep_for(scaled(100ms));  // a wake-up's attempt would show up here
  EXPECT_EQ(scripts_run() - before, 1) << "the waiter was woken for permits that do not fit";
  EXPECT_EQ(offering(), 1u);
  EXPECT_EQ(acquired.wait_for(0s), std::future_status::timeout);
  before = scripts_run();
  EXPECT_FALSE(t.held_b.release());
  expect_handed_both_permits(acquired.get(), before);
}

// A waiter whose process is gone (nobody listens on its channel) loses its place at the
// release that would have handed it the permit, and the one behind it is served instead.
TEST_F(SemaphoreFairHandoffTest, AWaiterThatNoLongerListensIsDroppedAndTheNextServed) {
  load_scripts();
  semaphore holder{client_, test_key(), 1, options({.ttl = 2 * backstop})};
  // Between its attempts only wake-ups, no poll: its backstop is 15-30 s (or the ghost's
  // expiry, 20 s away).
  semaphore waiter{client_, test_key(), 1, options({.ttl = 30s, .retry_delay = backstop})};
  auto held = holder.try_acquire();
  ASSERT_TRUE(held);
  // Ahead of the real waiter: an entry offering a handoff on a channel nobody listens on.
  auto now_s = std::stoll(client_.exec({"TIME"}).elements()[0].str());
  auto live_until = std::to_string(now_s * 1000 + 20'000);
  client_.exec({"ZADD", keys().owners, "2", "ghost"});
  client_.exec({"ZADD", keys().expiries, live_until, "ghost"});
  client_.exec({"HSET", keys().waiter_info, "ghost",
                live_until + " dlock:wake:nobody f1:30000:0:1"});
  auto acquired =
      std::async(std::launch::async, [&] { return waiter.try_acquire_for(2 * backstop); });
  wait_for_queue(2);
  auto before = scripts_run();
  EXPECT_FALSE(held.release());
  auto got = acquired.get();
  ASSERT_TRUE(got);
  // Handed over by that release, not found by a poll of its own (after its 15-30 s backstop).
  EXPECT_EQ(scripts_run() - before, 1);
  EXPECT_TRUE(client_.exec({"ZSCORE", keys().owners, "ghost"}).is_nil());
  EXPECT_TRUE(client_.exec({"ZSCORE", keys().expiries, "ghost"}).is_nil());
  EXPECT_FALSE(got.release());
}

}  // namespace
}  // namespace dlock::test
