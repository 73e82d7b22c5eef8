// SPDX-License-Identifier: Apache-2.0
// One name is one lock, across kinds (issue 36), against a real redis-server: a semaphore's
// holders mark the name with its limit and fairness (name_mark.lua), so that a mutex, a lock
// set, a read-write lock, a latch, another client's SET NX, or a semaphore that counts another
// limit or fairness, is refused (errc::wrong_type) or kept out instead of running beside them;
// the mark lasts as long as the latest holder and goes with the last.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <system_error>
#include <thread>

#include "dlock/key_layout.hpp"
#include "dlock/latch.hpp"
#include "dlock/lock_set.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "dlock/shared_mutex.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/semaphore_name.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

using NameKindTest = semaphore_name_test;

INSTANTIATE_TEST_SUITE_P(Variants, NameKindTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Fair" : "Unfair"; });

TEST_P(NameKindTest, ASemaphoresHoldersMarkTheNameWithItsLimitAndFairnessUntilTheLastGoes) {
  semaphore sem{client_, test_key(), 3, options()};
  std::error_code ec;
  lease first = sem.try_acquire(ec);
  ASSERT_TRUE(first) << ec.message();
  EXPECT_EQ(name_value(), semaphore_mark(3, fair()));
  EXPECT_EQ(name_value(), std::string("dlock:semaphore 3 ") + (fair() ? "fair" : "unfair"));
  EXPECT_GT(pttl(test_key()), 9'000);
  EXPECT_LE(pttl(test_key()), 10'000);
  lease second = sem.try_acquire(ec);
  ASSERT_TRUE(second) << ec.message();
  first.release();
  EXPECT_EQ(name_value(), semaphore_mark(3, fair())) << "the mark went before the last holder";
  second.release();
  EXPECT_EQ(name_value(), "") << "the mark outlived the last holder";
}

TEST_P(NameKindTest, AHeldSemaphoreRefusesAMutexALockSetAReadWriteLockAndALatch) {
  semaphore sem{client_, test_key(), 2, options()};
  std::error_code ec;
  lease held = sem.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  mutex plain{client_, test_key()};
  EXPECT_FALSE(plain.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  // A wait is refused at once too, not after its time: waiting cannot cure it.
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(plain.acquire_until(std::chrono::steady_clock::now() + 5s, ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);
  lock_set set{client_, {test_key() + "-other", test_key()}};
  EXPECT_FALSE(set.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  shared_mutex rw{client_, test_key()};
  EXPECT_FALSE(rw.try_acquire_shared(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  EXPECT_FALSE(rw.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  latch gate{client_, test_key()};
  EXPECT_FALSE(gate.try_set_count(3, ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  EXPECT_TRUE(admin_.exec({"SET", test_key(), "x", "NX", "PX", "60000"}).is_nil())
      << "another client's SET NX took a name a semaphore holds";
  EXPECT_EQ(name_value(), semaphore_mark(2, fair()));
  held.release();
  EXPECT_TRUE(plain.try_acquire(ec)) << ec.message();
}

TEST_P(NameKindTest, ASemaphoreIsRefusedWhereALockAReadWriteLockOrALatchHoldsTheName) {
  semaphore sem{client_, test_key(), 2, options()};
  std::error_code ec;
  {
    mutex plain{client_, test_key()};
    lease held = plain.try_acquire(ec);
    ASSERT_TRUE(held) << ec.message();
    EXPECT_FALSE(sem.try_acquire(ec));
    EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  }
  {
    shared_mutex rw{client_, test_key()};
    lease held = rw.try_acquire_shared(ec);
    ASSERT_TRUE(held) << ec.message();
    EXPECT_FALSE(sem.try_acquire(ec));
    EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  }
  {
    latch gate{client_, test_key(), {.ttl = 10s}};
    ASSERT_TRUE(gate.try_set_count(2, ec)) << ec.message();
    EXPECT_FALSE(sem.try_acquire(ec));
    EXPECT_EQ(ec, errc::wrong_type) << ec.message();
    EXPECT_EQ(name_value(), "2") << "the refused semaphore touched the latch";
    admin_.exec({"DEL", test_key()});
  }
  // Nothing of the refused attempts is left in the semaphore's keys: with the name free, both
  // permits are there.
  lease a = sem.try_acquire(ec), b = sem.try_acquire(ec);
  EXPECT_TRUE(a && b) << ec.message();
}

// Holders that disagree about the limit or the fairness are refused while the first ones hold
// (consul lock -n gives the same error); once they are gone, a new limit may start.
TEST_P(NameKindTest, ASemaphoreOfAnotherLimitOrFairnessIsRefusedWhileTheFirstHolds) {
  semaphore three{client_, test_key(), 3, options()};
  semaphore five{client_, test_key(), 5, options()};
  semaphore other_fairness{client_, test_key(), 3, {.ttl = 10s, .fair = !fair()}};
  std::error_code ec;
  lease held = three.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  EXPECT_FALSE(five.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  EXPECT_FALSE(other_fairness.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  EXPECT_EQ(name_value(), semaphore_mark(3, fair()));
  lease again = three.try_acquire(ec);
  EXPECT_TRUE(again) << ec.message();
  held.release();
  again.release();
  lease now_five = five.try_acquire(ec);
  EXPECT_TRUE(now_five) << ec.message();
  EXPECT_EQ(name_value(), semaphore_mark(5, fair()));
}

// The mark follows each holder's renewal, and is never the owner value of a lock.
TEST_P(NameKindTest, TheMarkFollowsARenewalAndReleasesNothingAsAnOwnerValue) {
  semaphore sem{client_, test_key(), 2, options(1s)};
  std::error_code ec;
  lease held = sem.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  ASSERT_LE(pttl(test_key()), 1'000);
  ec = held.extend(20s);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_GT(pttl(test_key()), 19'000) << "the mark did not follow the renewal";
  // dlock release NAME "dlock:semaphore 2 ...", copied from a status line, frees nothing.
  mutex plain{client_, test_key()};
  lease adopted = plain.adopt(name_value());
  EXPECT_EQ(adopted.release(), errc::not_held);
  EXPECT_EQ(name_value(), semaphore_mark(2, fair()));
}

// A release that hands permits to a queued waiter marks the name for the new holder.
TEST_P(NameKindTest, AHandoffKeepsTheNameMarkedForTheNewHolder) {
  semaphore sem{client_, test_key(), 1, options(2s)};
  std::error_code ec;
  lease first = sem.try_acquire(ec);
  ASSERT_TRUE(first) << ec.message();
  std::error_code waited_ec;
  lease second;
  std::thread waiter(
      [&] { second = sem.acquire_until(std::chrono::steady_clock::now() + 10s, waited_ec); });
  std::this_thread::sleep_for(300ms);  // let it queue
  first.release();
  waiter.join();
  ASSERT_TRUE(second) << waited_ec.message();
  EXPECT_EQ(name_value(), semaphore_mark(1, fair()));
  EXPECT_GT(pttl(test_key()), 1'000);
  mutex plain{client_, test_key()};
  EXPECT_FALSE(plain.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type);
  second.release();
  EXPECT_EQ(name_value(), "");
}

// After a handoff the mark lasts exactly as long as the latest holder: the release that hands
// the permit on to a waiter with a shorter TTL than its own leaves no mark past the new
// holder's entry (a mutex waiting for the name would wait that much longer after a crash),
// and one to a waiter with a longer TTL pushes the mark and the holders' keys out to it.
// sem_release.lua skips its final remark when the grant's expiry covers both; this checks both
// sides of that.
TEST_P(NameKindTest, AfterAHandoffTheMarkLastsAsLongAsTheLatestHolder) {
  struct span {
    std::chrono::milliseconds held, handed;
  };
  for (auto [held_ttl, handed_ttl] : {span{60s, 5s}, span{3s, 30s}}) {
    SCOPED_TRACE("held for " + std::to_string(held_ttl.count()) + " ms, handed for " +
                 std::to_string(handed_ttl.count()) + " ms");
    const std::string name = test_key(std::to_string(held_ttl.count()));
    const auto keys = semaphore_keys_for(name, fair());
    semaphore holder{client_, name, 1, options(held_ttl)};
    // Its backstop is far off: only the release's handoff makes it a holder in time.
    semaphore waiter{client_, name, 1, {.ttl = handed_ttl, .fair = fair(), .retry_delay = 20s}};
    lease first = holder.try_acquire();
    ASSERT_TRUE(first);
    std::error_code waited_ec;
    lease second;
    std::thread waiting(
        [&] { second = waiter.acquire_until(std::chrono::steady_clock::now() + 10s, waited_ec); });
    EXPECT_TRUE(eventually([&] {
      auto entries = admin_.exec({"HVALS", keys.waiter_info});
      return entries.elements().size() == 1 &&
             entries.elements()[0].str().find(fair() ? " f" : " h") != std::string::npos;
    })) << "the waiter never queued with a handoff offer";
    EXPECT_FALSE(first.release());
    waiting.join();
    ASSERT_TRUE(second) << waited_ec.message();
    auto pttl = [&](const std::string& key) { return admin_.exec({"PTTL", key}).integer(); };
    // The new holder's entry: its TTL from now (unfair), or its place in line's expiry if that
    // is later (fair: sem_release.lua's serve_fair_line keeps the later of the two).
    auto server_now = admin_.exec({"TIME"});
    auto now_ms = std::stoll(server_now.elements()[0].str()) * 1000 +
                  std::stoll(server_now.elements()[1].str()) / 1000;
    auto entry_ms = std::stoll(admin_.exec({"ZSCORE", keys.expiries, second.value()}).str()) - now_ms;
    EXPECT_GT(entry_ms, handed_ttl.count() - 2'000);
    if (!fair()) {
      EXPECT_LE(entry_ms, handed_ttl.count());
    }
    EXPECT_EQ(admin_.exec({"GET", name}).str(), semaphore_mark(1, fair()));
    EXPECT_NEAR(pttl(name), entry_ms, 500) << "the mark does not end with the only holder";
    EXPECT_GE(pttl(keys.expiries), entry_ms - 500) << "the holders' key expires before the holder";
    EXPECT_FALSE(second.release());
    EXPECT_EQ(admin_.exec({"EXISTS", name}).integer(), 0);
  }
}

// A waiter that counts another limit is never handed permits by a release where the name is
// marked: it would hold under the wrong mark (its renewals refused, the mark stale). It is
// woken, and its next attempt is refused while the other limit's holders hold (found by review:
// before, the release handed it a permit).
TEST_P(NameKindTest, AReleaseNeverHandsPermitsToAWaiterThatCountsAnotherLimit) {
  // The waiter polls only after the release: what the release does decides.
  semaphore five{client_, test_key(), 5, {.ttl = 10s, .fair = fair(), .retry_delay = 5s}};
  semaphore three{client_, test_key(), 3, options()};
  const auto keys = semaphore_keys_for(test_key(), fair());
  std::error_code ec;
  lease all = five.try_acquire(5, ec);
  ASSERT_TRUE(all) << ec.message();
  std::error_code waited_ec;
  lease waited;
  std::thread waiter(
      [&] { waited = five.acquire_until(std::chrono::steady_clock::now() + 10s, waited_ec); });
  // Queued with its wake channel and an offer to take a handoff (" h..." unfair, " f..." fair):
  // it then sleeps until woken or handed permits.
  auto offers_handoff = [&] {
    auto entries = admin_.exec({"HVALS", keys.waiter_info});
    return entries.elements().size() == 1 &&
           entries.elements()[0].str().find(fair() ? " f" : " h") != std::string::npos;
  };
  bool queued = eventually(offers_handoff);
  // The limit-5 holder vanishes as if its TTL had passed: its entries and its mark go.
  admin_.exec({"ZREM", keys.expiries, all.value()});
  admin_.exec({"HDEL", keys.weights, all.value()});
  if (fair()) admin_.exec({"ZREM", keys.owners, all.value()});
  admin_.exec({"DEL", test_key()});
  lease a = three.try_acquire(ec), b = three.try_acquire(ec);
  bool both = a && b;
  EXPECT_EQ(name_value(), semaphore_mark(3, fair()));
  a.release();
  waiter.join();
  ASSERT_TRUE(queued) << "the waiter never queued with a handoff offer";
  ASSERT_TRUE(both) << ec.message();
  EXPECT_FALSE(waited) << "a limit-5 waiter was handed a permit under a limit-3 mark";
  EXPECT_EQ(waited_ec, errc::wrong_type) << waited_ec.message();
  EXPECT_EQ(name_value(), semaphore_mark(3, fair()));
  b.release();
  EXPECT_EQ(name_value(), "");
}

// A latch is refused where a lock holds the name; a lock waits for a count as for another
// client's lock (hand-made locks write "1"), never beside it.
TEST(NameKindLatchTest, ALatchIsRefusedWhereALockHoldsTheNameAndALockWaitsForALatch) {
  redis_server server;
  client c{server.url()};
  std::error_code ec;
  mutex plain{c, test_key()};
  latch gate{c, test_key(), {.ttl = 10s}};
  {
    lease held = plain.try_acquire(ec);
    ASSERT_TRUE(held) << ec.message();
    EXPECT_FALSE(gate.try_set_count(2, ec));
    EXPECT_EQ(ec, errc::wrong_type) << ec.message();
    EXPECT_EQ(gate.count_down(1, ec), -1);
    EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  }
  ASSERT_TRUE(gate.try_set_count(2, ec)) << ec.message();
  EXPECT_FALSE(plain.try_acquire(ec));
  EXPECT_EQ(ec, errc::not_acquired) << ec.message();
}

}  // namespace
}  // namespace dlock::test
