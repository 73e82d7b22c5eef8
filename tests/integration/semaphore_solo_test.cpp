// SPDX-License-Identifier: Apache-2.0
// The solo grant (issue 39), against a real redis-server: a semaphore's or read-write lock's
// first holder on a free name is granted by plain commands and kept whole in the name's key,
// "<mark> <token> <permits>" (semaphore_protocol.hpp, name_mark.lua). What it must keep: the
// first script that meets it makes it one of the holders (never two holders over the limit, its
// permits counted), the other kinds find the name taken as before, the fair line's order holds,
// its refresh and release work on that key, fences keep rising, and no key outlives it.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <system_error>
#include <thread>

#include "algo/request.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/latch.hpp"
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

class SemaphoreSoloTest : public semaphore_name_test {
 protected:
  // Every key of the server but the counters (fences, the fair line's tickets) that expire on
  // their own.
  std::vector<std::string> keys_but_fences() {
    std::vector<std::string> out;
    auto all = admin_.exec({"KEYS", "*"});
    for (const auto& k : all.elements()) {
      bool counter = k.str().find(":fence") != std::string::npos ||
                     k.str().find(":counter") != std::string::npos;
      if (!counter || pttl(k.str()) < 0) out.push_back(k.str());
    }
    return out;
  }
};

INSTANTIATE_TEST_SUITE_P(Variants, SemaphoreSoloTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Fair" : "Unfair"; });

TEST_P(SemaphoreSoloTest, TheFirstHolderLivesInTheNamesKeyAloneAndItsReleaseLeavesNoKey) {
  semaphore sem{client_, test_key(), 3, options()};
  warm(sem);
  std::error_code ec;
  lease held = sem.try_acquire(2, ec);
  ASSERT_TRUE(held) << ec.message();
  EXPECT_EQ(name_value(), mark(3) + " " + held.value() + " 2");
  EXPECT_GT(pttl(test_key()), 9'000);
  EXPECT_FALSE(exists(keys().expiries));
  EXPECT_FALSE(exists(keys().weights));
  EXPECT_EQ(keys_but_fences(), std::vector<std::string>{test_key()});
  EXPECT_EQ(held.release(), std::error_code{});
  EXPECT_EQ(name_value(), "");
  EXPECT_TRUE(keys_but_fences().empty());
}

TEST_P(SemaphoreSoloTest, ASecondHolderAdoptsTheSoloHolderAndNeverGoesOverTheLimit) {
  semaphore sem{client_, test_key(), 1, options()};
  warm(sem);
  std::error_code ec;
  lease first = sem.try_acquire(ec);
  ASSERT_TRUE(first) << ec.message();
  ASSERT_EQ(name_value(), mark(1) + " " + first.value() + " 1");
  EXPECT_FALSE(sem.try_acquire(ec)) << "two holders of a semaphore of 1";
  // The script that refused made the solo holder one of the holders, with its expiry.
  EXPECT_EQ(name_value(), mark(1));
  auto score = admin_.exec({"ZSCORE", keys().expiries, first.value()});
  ASSERT_FALSE(score.is_nil());
  EXPECT_GT(pttl(test_key()), 9'000);
  // Its refresh and release now take the holders' way.
  EXPECT_EQ(first.extend(), std::error_code{});
  EXPECT_EQ(first.release(), std::error_code{});
  EXPECT_EQ(name_value(), "");
  lease second = sem.try_acquire(ec);
  EXPECT_TRUE(second) << ec.message();
}

TEST_P(SemaphoreSoloTest, ASoloHoldersPermitsCountOnceAdopted) {
  semaphore sem{client_, test_key(), 3, options()};
  warm(sem);
  std::error_code ec;
  lease two = sem.try_acquire(2, ec);
  ASSERT_TRUE(two) << ec.message();
  ASSERT_EQ(name_value(), mark(3) + " " + two.value() + " 2");
  EXPECT_FALSE(sem.try_acquire(2, ec)) << "4 permits of 3";
  lease one = sem.try_acquire(1, ec);
  ASSERT_TRUE(one) << ec.message();
  EXPECT_FALSE(sem.try_acquire(1, ec)) << "4 permits of 3";
  EXPECT_EQ(admin_.exec({"HGET", keys().weights, two.value()}).str(), "2");
  two.release();
  lease more = sem.try_acquire(2, ec);
  EXPECT_TRUE(more) << ec.message();
}

TEST_P(SemaphoreSoloTest, FencesRiseAcrossSoloAndScriptGrants) {
  semaphore sem{client_, test_key(), 2, options()};
  warm(sem);
  std::error_code ec;
  std::uint64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    lease a = sem.try_acquire(ec);  // solo
    ASSERT_TRUE(a) << ec.message();
    EXPECT_GT(a.fencing_token(), last);
    lease b = sem.try_acquire(ec);  // adopts a
    ASSERT_TRUE(b) << ec.message();
    EXPECT_GT(b.fencing_token(), a.fencing_token());
    last = b.fencing_token();
    a.release();
    b.release();
  }
}

TEST_P(SemaphoreSoloTest, OtherKindsFindASoloHeldNameTaken) {
  semaphore sem{client_, test_key(), 2, options()};
  warm(sem);
  std::error_code ec;
  lease held = sem.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  ASSERT_NE(name_value(), mark(2));
  mutex plain{client_, test_key()};
  EXPECT_FALSE(plain.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  shared_mutex rw{client_, test_key()};
  EXPECT_FALSE(rw.try_acquire_shared(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  latch gate{client_, test_key()};
  EXPECT_FALSE(gate.try_set_count(3, ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  semaphore other{client_, test_key(), 5, options()};
  EXPECT_FALSE(other.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  // None of them adopted or moved it: it is still the solo holder's, and its release frees it.
  EXPECT_EQ(name_value(), mark(2) + " " + held.value() + " 1");
  EXPECT_EQ(held.release(), std::error_code{});
  EXPECT_TRUE(plain.try_acquire(ec)) << ec.message();
}

TEST_P(SemaphoreSoloTest, ARefreshPushesTheSoloValuesExpiryOutAndASettleMovesIt) {
  semaphore sem{client_, test_key(), 2, options(3s)};
  warm(sem);
  std::error_code ec;
  lease held = sem.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  EXPECT_LE(pttl(test_key()), 3'000);
  EXPECT_EQ(held.extend(20s), std::error_code{});
  EXPECT_GT(pttl(test_key()), 19'000);
  EXPECT_EQ(name_value(), mark(2) + " " + held.value() + " 1");
  auto before = name_value();
  EXPECT_EQ(held.release_after(5s), std::error_code{});
  auto after = name_value();
  EXPECT_EQ(after.rfind(mark(2) + " ", 0), 0u) << after;
  EXPECT_NE(after, before) << "the settle kept the old token";
  EXPECT_LE(pttl(test_key()), 5'000);
  EXPECT_FALSE(sem.try_acquire(2, ec)) << "the settled permit stopped counting";
}

TEST_P(SemaphoreSoloTest, ALostSoloPermitIsReportedLost) {
  semaphore sem{client_, test_key(), 2, options()};
  warm(sem);
  std::error_code ec;
  lease held = sem.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  admin_.exec({"DEL", test_key()});
  EXPECT_EQ(held.extend(), errc::lease_lost);
}

// A fair newcomer that finds the name free but a line waiting (its holder expired, the waiters
// have not polled since) must not take a permit ahead of them.
TEST(SemaphoreSoloFairTest, ANewcomerNeverOvertakesAFairLineWhoseHolderExpired) {
  redis_server server;
  client admin{server.url()};
  client c{server.url()};
  auto k = semaphore_keys_for(test_key(), true);
  auto mark = semaphore_mark(1, true);
  auto attempt = [&](const char* token, const char* ttl_ms, const char* queue_ms) {
    return admin.exec({"EVAL", detail::sem_fair_acquire_script.body, "7", k.owners, k.expiries,
                       k.weights, k.tickets, k.waiter_info, k.fence, test_key(), token, "1", "1",
                       ttl_ms, queue_ms, "", mark});
  };
  ASSERT_EQ(attempt("aa01", "300", "0").elements()[0].integer(), 1);  // a holder, 300 ms
  ASSERT_EQ(attempt("bb02", "10000", "30000").elements()[0].integer(), 0);  // queued behind
  ASSERT_TRUE(eventually([&] { return admin.exec({"EXISTS", test_key()}).integer() == 0; }, 10s));
  semaphore sem{c, test_key(), 1, {.ttl = 10s, .fair = true}};
  std::error_code ec;
  // A live counter (the holder's went with its 300 ms TTL), so that the newcomer's solo try
  // draws a token and only the line can stop it.
  admin.exec({"SET", k.fence, "4000000000000000", "PX", "60000"});
  EXPECT_FALSE(sem.try_acquire(ec)) << "a newcomer overtook the waiting bb02";
  EXPECT_EQ(admin.exec({"GET", test_key()}).is_nil(), true) << "a solo value was left behind";
  EXPECT_EQ(attempt("bb02", "10000", "30000").elements()[0].integer(), 1);
}

TEST(SemaphoreSoloRwTest, AReaderIsSoloAMutexWaitsForItAndTheNextReaderAdoptsIt) {
  redis_server server;
  client c{server.url()};
  client admin{server.url()};
  shared_mutex rw{c, test_key()};
  std::error_code ec;
  ASSERT_EQ(rw.try_acquire_shared(ec).release(), std::error_code{}) << ec.message();  // warm
  lease reader = rw.try_acquire_shared(ec);
  ASSERT_TRUE(reader) << ec.message();
  EXPECT_EQ(admin.exec({"GET", test_key()}).str(),
            std::string(read_write_lock_mark) + " " + reader.value() + " 1");
  mutex plain{c, test_key()};
  EXPECT_FALSE(plain.try_acquire(ec));
  EXPECT_EQ(ec, errc::not_acquired) << "a mutex of the name is the same lock: " << ec.message();
  EXPECT_FALSE(rw.try_acquire(ec)) << "a writer beside a reader";
  lease second = rw.try_acquire_shared(ec);
  ASSERT_TRUE(second) << ec.message();
  EXPECT_EQ(admin.exec({"GET", test_key()}).str(), read_write_lock_mark);
  EXPECT_GT(second.fencing_token(), reader.fencing_token());
  reader.release();
  second.release();
  EXPECT_TRUE(admin.exec({"GET", test_key()}).is_nil());
  lease writer = rw.try_acquire(ec);
  ASSERT_TRUE(writer) << ec.message();
  EXPECT_EQ(admin.exec({"GET", test_key()}).str(),
            std::string(read_write_lock_mark) + " " + writer.value() + " 1048576");
  EXPECT_FALSE(rw.try_acquire_shared(ec)) << "a reader beside a writer";
  writer.release();
  EXPECT_TRUE(plain.try_acquire(ec)) << ec.message();
}

// A solo holder's release (the compare-and-delete) serves nobody in the unfair queue, so a
// waiter queued before the grant and not woken (the release before woke another, which is
// gone; or the holder expired) must see the grant go through the script, whose holder's
// release wakes it, as the control below does; not be left to its backstop. (Failed before the
// solo grant checked the unfair line.)
TEST(SemaphoreSoloWaiterTest, ASoloHoldersReleaseWakesTheNextWaiterAsAScriptHoldersDoes) {
  redis_server server;
  client admin{server.url()};
  client c{server.url()};
  auto k = semaphore_keys_for(test_key(), false);
  auto mark = semaphore_mark(1, false);
  auto acquire = [&](const std::string& token, const std::string& waiter) {
    return admin.exec({"EVAL", detail::sem_acquire_script.body, "7", k.expiries, k.weights,
                       k.fence, k.waiters, k.waiter_info, k.tickets, test_key(), token, "1", "1",
                       "60000", waiter, mark});
  };
  auto release = [&](const std::string& token) {
    return admin.exec({"EVAL", detail::sem_release_script.body, "7", k.expiries, k.weights,
                       k.waiters, k.waiter_info, k.fence, k.tickets, test_key(), token, "1",
                       "unfair", mark});
  };
  auto woken = [&](const std::string& token) {
    auto e = admin.exec({"HGET", k.waiter_info, token});
    return e.is_string() && e.str().ends_with(" woken");
  };
  ASSERT_EQ(acquire("aa01", "").elements()[0].integer(), 1);  // H holds
  ASSERT_EQ(acquire("bb02", "60000 review-w1").elements()[0].integer(), 0);  // W1 queues
  ASSERT_EQ(acquire("cc03", "60000 review-w2").elements()[0].integer(), 0);  // W2 queues
  release("aa01");  // wakes W1, which is gone and never comes back
  ASSERT_TRUE(woken("bb02"));
  ASSERT_FALSE(woken("cc03"));
  ASSERT_TRUE(admin.exec({"GET", test_key()}).is_nil());  // the name is free
  // S: tries the solo grant, which finds W2 in line, so the script grants it.
  semaphore sem{c, test_key(), 1, {.ttl = 10s}};
  std::error_code ec;
  lease s = sem.try_acquire(ec);
  ASSERT_TRUE(s) << ec.message();
  ASSERT_EQ(admin.exec({"GET", test_key()}).str(), mark) << "a holder among the holders";
  ASSERT_EQ(s.release(), std::error_code{});
  EXPECT_TRUE(woken("cc03")) << "the solo holder's release left W2 to its backstop";
  // The control: the same cycle through the scripts wakes W2.
  admin.exec({"HSET", k.waiter_info, "cc03", "99999999999999 review-w2"});
  ASSERT_EQ(acquire("dd04", "").elements()[0].integer(), 1);
  release("dd04");
  EXPECT_TRUE(woken("cc03")) << "control";
}
}  // namespace
}  // namespace dlock::test
