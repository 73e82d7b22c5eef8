// SPDX-License-Identifier: Apache-2.0
// One meaning per call (issue 37, docs/design.md): on every primitive, acquire() waits until
// acquired, try_acquire() is one attempt that returns an empty lease when taken, and
// try_acquire_for(d) waits up to d; the throwing forms exist beside the error-code ones. Against
// a real redis-server, each primitive held by another client, which lets go after 600 ms.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <thread>

#include "dlock/dlock.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using test::redis_server;
using test::test_key;

class OneMeaningTest : public ::testing::Test {
 protected:
  // While `held` is held by the other client: one attempt and a 100 ms wait come back empty,
  // then acquire() waits until the other lets go (600 ms after it began) and gets it.
  void expect_the_three_waits(lease held, const std::function<lease()>& try_once,
                              const std::function<lease()>& try_for_100ms,
                              const std::function<lease()>& wait_until_acquired) {
    EXPECT_FALSE(try_once());
    auto t0 = steady::now();
    EXPECT_FALSE(try_for_100ms());
    EXPECT_GE(steady::now() - t0, 90ms);  // waited (its last attempt starts 1 ms early)
    auto letting_go = std::async(std::launch::async, [&] {
      std::this_thread::sleep_for(600ms);
      return held.release();
    });
    t0 = steady::now();
    lease got = wait_until_acquired();
    EXPECT_TRUE(got) << "acquire() gave up";
    EXPECT_GE(steady::now() - t0, 400ms) << "acquired while the other held it";
    EXPECT_EQ(letting_go.get(), std::error_code());
  }

  redis_server server_;
  client other_{server_.url()}, mine_{server_.url()};
};

TEST_F(OneMeaningTest, AMutexWaitsUntilAcquired) {
  mutex theirs{other_, test_key()}, lock{mine_, test_key()};
  expect_the_three_waits(
      theirs.acquire(), [&] { return lock.try_acquire(); },
      [&] { return lock.try_acquire_for(100ms); }, [&] { return lock.acquire(); });
}

TEST_F(OneMeaningTest, ASharedMutexWaitsUntilAcquired) {
  shared_mutex theirs{other_, test_key()}, rw{mine_, test_key()};
  expect_the_three_waits(
      theirs.acquire(), [&] { return rw.try_acquire_shared(); },
      [&] { return rw.try_acquire_shared_for(100ms); }, [&] { return rw.acquire_shared(); });
  shared_mutex reader{other_, test_key()};
  expect_the_three_waits(
      reader.acquire_shared(), [&] { return rw.try_acquire(); },
      [&] { return rw.try_acquire_for(100ms); }, [&] { return rw.acquire(); });
}

TEST_F(OneMeaningTest, ALockSetWaitsUntilAcquired) {
  mutex theirs{other_, test_key("b")};
  lock_set set{mine_, {test_key("a"), test_key("b")}};
  expect_the_three_waits(
      theirs.acquire(), [&] { return set.try_acquire(); },
      [&] { return set.try_acquire_for(100ms); }, [&] { return set.acquire(); });
}

TEST_F(OneMeaningTest, AnElectionWaitsUntilLeading) {
  election theirs{other_, test_key(), "them"}, vote{mine_, test_key(), "me"};
  expect_the_three_waits(
      theirs.campaign(), [&] { return vote.try_campaign(); },
      [&] { return vote.try_campaign_for(100ms); }, [&] { return vote.campaign(); });
}

TEST_F(OneMeaningTest, ALatchWaitsUntilOpen) {
  latch gate{other_, test_key()}, waiting{mine_, test_key()};
  std::error_code ec;
  ASSERT_TRUE(gate.try_set_count(1, ec)) << ec.message();
  auto t0 = steady::now();
  EXPECT_FALSE(waiting.wait_for(100ms));
  EXPECT_GE(steady::now() - t0, 90ms);  // waited (its last attempt starts 1 ms early)
  auto opening = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(600ms);
    std::error_code e;
    return gate.count_down(e);
  });
  t0 = steady::now();
  waiting.wait();
  EXPECT_GE(steady::now() - t0, 400ms);
  EXPECT_EQ(opening.get(), 0);
  // An error that waiting cannot cure throws: the latch is gone.
  latch none{mine_, test_key("none")};
  EXPECT_THROW(none.wait(), std::system_error);
  EXPECT_THROW((void)none.wait_for(100ms), std::system_error);
}

// An error that retrying cannot cure throws from every throwing form: the name holds another
// kind (a string no lock wrote), WRONGTYPE.
TEST_F(OneMeaningTest, TheThrowingFormsThrowWhatWaitingCannotCure) {
  std::error_code ec;
  other_.exec({"HSET", test_key(), "f", "v"}, ec);
  ASSERT_FALSE(ec) << ec.message();
  mutex lock{mine_, test_key()};
  shared_mutex rw{mine_, test_key()};
  lock_set set{mine_, {test_key(), test_key("x")}};
  EXPECT_THROW((void)lock.try_acquire(), std::system_error);
  EXPECT_THROW((void)lock.try_acquire_for(100ms), std::system_error);
  EXPECT_THROW((void)lock.acquire(), std::system_error);
  EXPECT_THROW((void)rw.try_acquire(), std::system_error);
  EXPECT_THROW((void)set.try_acquire(), std::system_error);
  EXPECT_THROW((void)set.acquire(), std::system_error);
}

}  // namespace
}  // namespace dlock
