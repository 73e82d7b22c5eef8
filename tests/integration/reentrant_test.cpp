// SPDX-License-Identifier: Apache-2.0
// Opt-in reentrancy (lock_options::reentrant) against real redis-servers: an owner re-enters
// the lock it holds, through any mutex object, sync or async, on one node or a Redlock; the
// nested leases share one owner value, fence and validity; the lock is released, and handed to
// a waiter, only when the last of them is.
#include <gtest/gtest.h>

#include <asio/use_future.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "dlock/election.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/lock_set.hpp"
#include "dlock/mutex.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

class ReentrantTest : public ::testing::Test {
 protected:
  lock_options owned_by(std::string owner, std::chrono::milliseconds ttl = 10s) {
    return {.ttl = ttl, .reentrant = std::move(owner)};
  }
  std::string value_in_redis() {
    auto r = client_.exec({"GET", test_key()});
    return r.is_nil() ? "" : r.str();
  }
  redis_server server_;
  client client_{server_.url()};
};

TEST_F(ReentrantTest, NestedAcquisitionsShareOneHoldingReleasedAtZero) {
  mutex outer{client_, test_key(), owned_by("request-1")};
  mutex inner{client{server_.url()}, test_key(), owned_by("request-1")};
  mutex someone_else{client_, test_key(), owned_by("request-2")};
  lease first = outer.acquire();
  std::error_code ec;
  lease second = inner.try_acquire(ec);  // another object, another client: same lock and owner
  ASSERT_TRUE(second) << ec.message();
  EXPECT_EQ(second.value(), first.value());
  EXPECT_EQ(second.fencing_token(), first.fencing_token());
  lease third = outer.acquire();
  EXPECT_EQ(third.value(), first.value());
  EXPECT_FALSE(someone_else.try_acquire(ec));

  EXPECT_FALSE(first.release());  // the outer one first: order does not matter
  EXPECT_EQ(value_in_redis(), second.value()) << "released while nested leases held it";
  EXPECT_FALSE(someone_else.try_acquire(ec));
  EXPECT_FALSE(third.release());
  EXPECT_EQ(value_in_redis(), second.value());
  EXPECT_FALSE(second.release());
  EXPECT_EQ(value_in_redis(), "");
  lease theirs = someone_else.try_acquire(ec);
  EXPECT_TRUE(theirs) << ec.message();
  // Once released, the owner's next acquisition goes to Redis again, and waits like anyone's.
  EXPECT_FALSE(outer.try_acquire(ec));
  EXPECT_EQ(ec, errc::not_acquired);
}

TEST_F(ReentrantTest, ReentryIsImmediateForAsyncCallsToo) {
  mutex m{client_, test_key(), owned_by("task-7")};
  lease first = m.acquire();
  auto again = m.async_acquire(asio::use_future);
  ASSERT_EQ(again.wait_for(test::scaled(2s)), std::future_status::ready);
  lease second = again.get();
  ASSERT_TRUE(second);
  EXPECT_EQ(second.value(), first.value());
  // No round trip: the nested lease came without a script on the server.
  auto before = client_.exec({"INFO", "commandstats"}).str();
  lease third = m.acquire();
  auto after = client_.exec({"INFO", "commandstats"}).str();
  auto evalsha_calls = [](const std::string& stats) {
    auto at = stats.find("cmdstat_evalsha:calls=");
    return at == std::string::npos ? 0L : std::stol(stats.substr(at + 22));
  };
  EXPECT_EQ(evalsha_calls(after), evalsha_calls(before));
  EXPECT_TRUE(third);
}

TEST_F(ReentrantTest, AnExtendThroughOneReachesAllAndSoDoesTheLoss) {
  mutex m{client_, test_key(), owned_by("job", 400ms)};
  lease first = m.acquire();
  lease second = m.acquire();
  ASSERT_EQ(second.value(), first.value());
  EXPECT_FALSE(second.extend(5s));
  EXPECT_GT(first.remaining(), 3s) << "the outer lease did not see the inner one's extend";
  EXPECT_GT(client_.exec({"PTTL", test_key()}).integer(), 3000);
  client_.exec({"DEL", test_key()});  // someone deletes it: both are lost
  EXPECT_EQ(first.extend(), errc::lease_lost);
  EXPECT_TRUE(first.lost().stop_requested());
  EXPECT_TRUE(second.lost().stop_requested());
  // A lost holding is not re-entered: the owner's next acquisition is a new one.
  std::error_code ec;
  lease fresh = m.try_acquire(ec);
  ASSERT_TRUE(fresh) << ec.message();
  EXPECT_NE(fresh.value(), first.value());
  EXPECT_GT(fresh.fencing_token(), first.fencing_token());
}

TEST_F(ReentrantTest, AKeyDeletedUnderAKeptAliveHoldingIsLostForAll) {
  mutex m{client_, test_key(), owned_by("job", 1s)};
  lease first = m.acquire();
  lease second = m.acquire();
  lease third = m.acquire();
  ASSERT_FALSE(second.keep_alive());
  client_.exec({"DEL", test_key()});  // someone else's hand: the key's watch or a renewal sees it
  // The thread that finds the loss spreads it lease by lease, so each is awaited.
  EXPECT_TRUE(eventually([&] { return second.lost().stop_requested(); }));
  EXPECT_TRUE(eventually([&] { return first.lost().stop_requested(); }));
  EXPECT_TRUE(eventually([&] { return third.lost().stop_requested(); }));
  EXPECT_EQ(third.release(), errc::lease_lost);  // an inner release tells of the loss
}

TEST_F(ReentrantTest, AnotherDatabaseIsAnotherLock) {
  std::string url = server_.url();
  client db1{url + "/1"};
  mutex in_db0{client_, test_key(), owned_by("same-owner")};
  mutex in_db1{db1, test_key(), owned_by("same-owner")};
  mutex rival{db1, test_key()};
  lease held0 = in_db0.acquire();
  lease rivals = rival.acquire();
  std::error_code ec;
  EXPECT_FALSE(in_db1.try_acquire(ec)) << "re-entered a holding of another database";
  EXPECT_EQ(ec, errc::not_acquired);
}

TEST_F(ReentrantTest, AnExpiredHoldingIsNotReentered) {
  mutex m{client_, test_key(), owned_by("job", 150ms)};
  lease first = m.acquire();
  // Expired on the server, and so (its validity ends a drift before that) in this process.
  ASSERT_TRUE(eventually([&] { return value_in_redis().empty(); }));
  std::error_code ec;
  lease later = m.try_acquire(ec);
  ASSERT_TRUE(later) << ec.message();
  EXPECT_NE(later.value(), first.value());
  EXPECT_FALSE(later.release());
  EXPECT_EQ(first.release(), errc::not_held);  // its key had expired; nothing of later's touched
}

TEST_F(ReentrantTest, LockableCallsNestPerThreadAndAWaiterGetsItAtZero) {
  mutex m{client_, test_key(), owned_by("worker")};
  m.lock();
  m.lock();  // would wait forever without reentrancy
  ASSERT_NE(m.current_lease(), nullptr);
  std::string held = m.current_lease()->value();
  std::atomic<bool> waiter_holds{false};
  std::error_code waiter_ec;
  std::thread waiter([&] {
    mutex theirs{client{server_.url()}, test_key()};
    lease l = theirs.acquire_until(std::chrono::steady_clock::now() + 10s, waiter_ec);
    waiter_holds = static_cast<bool>(l);
  });
  auto queue = lock_keys_for(test_key()).waiters;
  // (EXPECT: an ASSERT's return would leave the thread unjoined.)
  EXPECT_TRUE(eventually([&] { return client_.exec({"ZCARD", queue}).integer() == 1; }))
      << "the waiter never queued";
  m.unlock();
  EXPECT_FALSE(m.last_error());
  EXPECT_EQ(value_in_redis(), held);
  std::this_thread::sleep_for(200ms);  // time to be handed the lock, wrongly
  EXPECT_FALSE(waiter_holds.load()) << "handed over before the last unlock";
  m.unlock();
  EXPECT_FALSE(m.last_error());
  waiter.join();
  EXPECT_TRUE(waiter_holds.load()) << waiter_ec.message();
  m.unlock();
  EXPECT_EQ(m.last_error(), errc::not_held);
}

TEST_F(ReentrantTest, WorksOnRedlockAndIsRefusedWhereItHasNoMeaning) {
  redis_server b, c;
  std::vector<client> nodes{client_, client{b.url()}, client{c.url()}};
  mutex m{nodes, test_key(), owned_by("r")};
  lease first = m.acquire();
  lease second = m.acquire();
  EXPECT_EQ(second.value(), first.value());
  EXPECT_FALSE(first.release());
  EXPECT_EQ(client{c.url()}.exec({"GET", test_key()}).str(), second.value());
  EXPECT_FALSE(second.release());
  EXPECT_TRUE(client{c.url()}.exec({"GET", test_key()}).is_nil());
  EXPECT_TRUE(test::is_invalid_argument(
      [&] { election e(client_, test_key("e"), "v", {.lock = owned_by("r")}); }));
  EXPECT_TRUE(test::is_invalid_argument(
      [&] { lock_set s(client_, {test_key("a"), test_key("b")}, owned_by("r")); }));
}

}  // namespace
}  // namespace dlock::test
