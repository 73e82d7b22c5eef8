// SPDX-License-Identifier: Apache-2.0
// The count-down latch against a real redis-server: waiters released at zero and not before,
// woken through Pub/Sub, and an abandoned latch that disappears instead of opening.
#include "dlock/latch.hpp"

#include <gtest/gtest.h>

#include <asio/use_future.hpp>

#include <atomic>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "dlock/key_layout.hpp"
#include "dlock/prometheus.hpp"
#include "support/commandstats.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

class LatchTest : public ::testing::Test {
 protected:
  redis_server server_;
  client client_{server_.url()};
};

TEST_F(LatchTest, WaitersAreReleasedWhenTheLastWorkerCountsDownAndNotBefore) {
  latch coordinator{client_, test_key()};
  std::error_code ec;
  ASSERT_TRUE(coordinator.try_set_count(8, ec)) << ec.message();
  std::atomic<int> counted{0};
  std::atomic<int> seen_at_release{-1};
  auto waiter = std::async(std::launch::async, [&] {
    latch mine{client{server_.url()}, test_key()};
    std::error_code wec;
    mine.wait(wec);
    seen_at_release = counted.load();
    return wec;
  });
  std::vector<std::thread> workers;
  for (int i = 0; i < 8; ++i) {
    workers.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30 * i));
      latch mine{client{server_.url()}, test_key()};
      ++counted;  // before the count down: the waiter must see all 8
      std::error_code wec;
      EXPECT_GE(mine.count_down(wec), 0);
      EXPECT_FALSE(wec);
    });
  }
  for (auto& w : workers) w.join();
  ASSERT_EQ(waiter.wait_for(test::scaled(5s)), std::future_status::ready);
  EXPECT_FALSE(waiter.get());
  EXPECT_EQ(seen_at_release.load(), 8);
  EXPECT_EQ(coordinator.count(ec), 0);
}

TEST_F(LatchTest, CountDownSaysWhatIsLeftAndStopsAtZero) {
  latch l{client_, test_key()};
  std::error_code ec;
  ASSERT_TRUE(l.try_set_count(5, ec));
  EXPECT_FALSE(l.try_set_count(9, ec));  // exists: left as it is
  EXPECT_EQ(l.count(ec), 5);
  EXPECT_EQ(l.count_down(2, ec), 3);
  EXPECT_EQ(l.count_down(ec), 2);
  EXPECT_EQ(l.count_down(10, ec), 0);
  EXPECT_EQ(l.count_down(ec), 0);  // open stays open
  EXPECT_FALSE(ec);
  EXPECT_TRUE(l.wait_for(test::scaled(1s), ec));  // at once
}

// A wait whose deadline is already due still reads once: an open latch is open.
TEST_F(LatchTest, AWaitWithNoTimeLeftStillFindsAnOpenLatchOpen) {
  latch l{client_, test_key(), {.ttl = 60s}};
  std::error_code ec;
  ASSERT_TRUE(l.try_set_count(1, ec));
  EXPECT_FALSE(l.wait_for(0ms, ec));
  EXPECT_EQ(ec, errc::timeout);
  EXPECT_EQ(l.count_down(ec), 0);
  for (int i = 0; i < 20; ++i) {  // the deadline passes before the read can answer, each time
    EXPECT_TRUE(l.wait_for(0ms, ec)) << ec.message();
  }
}

TEST_F(LatchTest, AWaitEndsAtItsDeadlineAndWaitsByPubSubNotPolling) {
  latch l{client_, test_key(), {.ttl = 60s}};
  std::error_code ec;
  ASSERT_TRUE(l.try_set_count(1, ec));
  auto before = test::command_calls(client_)["get"];
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(l.wait_for(600ms, ec));
  EXPECT_EQ(ec, errc::timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 600ms);
  // One read at the start, one once subscribed: nothing in between.
  EXPECT_LE(test::command_calls(client_)["get"] - before, 3);
}

TEST_F(LatchTest, AnAbandonedLatchDisappearsAndItsWaitersAreTold) {
  latch l{client_, test_key(), {.ttl = 300ms}};
  std::error_code ec;
  ASSERT_TRUE(l.try_set_count(3, ec));
  EXPECT_EQ(l.count_down(ec), 2);  // keeps it alive for another TTL
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(l.wait_for(test::scaled(5s), ec));
  EXPECT_EQ(ec, errc::not_found) << ec.message();  // abandoned, not opened
  EXPECT_LT(std::chrono::steady_clock::now() - t0, test::scaled(2s)) << "told at the deadline";
  EXPECT_EQ(l.count_down(ec), -1);
  EXPECT_EQ(ec, errc::not_found);
  EXPECT_EQ(l.count(ec), -1);
  EXPECT_EQ(ec, errc::not_found);
}

TEST_F(LatchTest, AnOpenLatchStaysOpenForItsTtlThenIsGone) {
  latch l{client_, test_key(), {.ttl = 300ms}};
  std::error_code ec;
  ASSERT_TRUE(l.try_set_count(1, ec));
  EXPECT_EQ(l.count_down(ec), 0);
  // Open for its TTL, no longer: the server's expiry says so whatever the machine's speed.
  auto pttl = client_.exec({"PTTL", l.key()}).integer();
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 300);
  EXPECT_TRUE(l.wait_for(test::scaled(1s), ec));
  EXPECT_TRUE(eventually([&] { return client_.exec({"EXISTS", l.key()}).integer() == 0; }))
      << "left behind after its TTL";
  EXPECT_FALSE(l.wait_for(1s, ec));
  EXPECT_EQ(ec, errc::not_found);
}

TEST_F(LatchTest, AsyncWaitCompletesWhenOpened) {
  latch l{client_, test_key()};
  std::error_code ec;
  ASSERT_TRUE(l.try_set_count(2, ec));
  auto opened = l.async_wait(asio::use_future);
  EXPECT_EQ(opened.wait_for(100ms), std::future_status::timeout);
  l.count_down(2, ec);
  ASSERT_EQ(opened.wait_for(test::scaled(5s)), std::future_status::ready);
  EXPECT_NO_THROW(opened.get());
}

// A wait whose node is down looks for it less and less often (250 ms, doubling to 4 s), not
// every 250 ms until its deadline; it still ends at its deadline.
TEST_F(LatchTest, AWaitBacksOffWhileItsNodeIsDown) {
  latch gate{client_, test_key()};
  std::error_code ec;
  ASSERT_TRUE(gate.try_set_count(1, ec)) << ec.message();
  auto metrics = std::make_shared<prometheus_metrics>();
  set_observer(metrics);
  // Every request dlock sent to the node so far, whatever its result.
  auto requests = [&] {
    std::istringstream text(metrics->render());
    const std::string series = "dlock_node_requests_total{node=\"127.0.0.1:" +
                               std::to_string(server_.port()) + "\"";
    long long sum = 0;
    for (std::string line; std::getline(text, line);) {
      if (line.rfind(series, 0) == 0) sum += std::stoll(line.substr(line.rfind(' ') + 1));
    }
    return sum;
  };
  server_.kill();
  latch mine{client{server_.url()}, test_key()};
  auto began = std::chrono::steady_clock::now();
  EXPECT_FALSE(mine.wait_for(5s, ec));
  EXPECT_EQ(ec, errc::timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - began, 5s);
  auto reads = requests();
  set_observer(nullptr);
  EXPECT_LE(reads, 7) << "every 250 ms would be 20";
  EXPECT_GE(reads, 2);
}

TEST_F(LatchTest, BadInputIsRefused) {
  auto refused = [](auto make) { return test::is_invalid_argument(make); };
  EXPECT_TRUE(refused([&] { latch{client_, ""}; }));
  EXPECT_TRUE(refused([&] { latch{client_, "x", {.ttl = 0ms}}; }));
  EXPECT_TRUE(refused([&] { latch{client_, "{x}:fence"}; }));
  latch l{client_, test_key()};
  std::error_code ec;
  EXPECT_FALSE(l.try_set_count(0, ec));
  EXPECT_EQ(ec, errc::invalid_argument);
  EXPECT_EQ(l.count_down(0, ec), -1);
  EXPECT_EQ(ec, errc::invalid_argument);
  // A key that holds something else is not mistaken for a latch.
  client_.exec({"SET", test_key("text"), "hello"});
  latch text{client_, test_key("text")};
  text.count_down(ec);
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_FALSE(text.wait_for(5s, ec)) << "a text is no latch that is still counting";
  EXPECT_EQ(ec, errc::wrong_type);
  client_.exec({"HSET", test_key("hash"), "a", "b"});
  latch hash{client_, test_key("hash")};
  hash.count_down(ec);
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_FALSE(hash.wait_for(1s, ec));
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_FALSE(hash.try_set_count(3, ec));
  EXPECT_EQ(ec, errc::wrong_type);  // not "it exists"
  EXPECT_EQ(hash.count(ec), -1);
  EXPECT_EQ(ec, errc::wrong_type);
}

}  // namespace
}  // namespace dlock::test
