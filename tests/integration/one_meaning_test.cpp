// SPDX-License-Identifier: Apache-2.0
// One meaning per call (issue 37, docs/design.md): on every primitive, acquire() waits until
// acquired, try_acquire() is one attempt that returns an empty lease when taken, and
// try_acquire_for(d) waits up to d; the throwing forms exist beside the error-code ones. Against
// a real redis-server, each primitive held by another client, which lets go after 600 ms. A
// deadline too far for steady_clock (time_point::max(), duration::max()) is no deadline; a wait
// without one ends on what waiting cannot cure (a full node, a TTL shorter than a round trip).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <stop_token>
#include <thread>
#include <utility>

#include "dlock/dlock.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

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

  // `wait` has a deadline too far to count: it takes a free lock at once, and waits for a held
  // one until the holder (taken by `hold`) lets go after 600 ms, as acquire() does. `undo`
  // gives back what `wait` took.
  void expect_waits_for_ever(const std::function<lease()>& hold, const std::function<bool()>& wait,
                             const std::function<void()>& undo) {
    ASSERT_TRUE(wait()) << "not acquired while free";
    undo();
    lease held = hold();
    ASSERT_TRUE(held);
    auto letting_go = std::async(std::launch::async, [&] {
      std::this_thread::sleep_for(600ms);
      return held.release();
    });
    auto t0 = steady::now();
    EXPECT_TRUE(wait()) << "gave up while held";
    EXPECT_GE(steady::now() - t0, 400ms) << "acquired while the other held it";
    EXPECT_EQ(letting_go.get(), std::error_code());
    undo();
  }
  // The same for a lease-returning form.
  void expect_waits_for_ever(const std::function<lease()>& hold,
                             const std::function<lease()>& wait) {
    lease got;
    expect_waits_for_ever(
        hold, [&] { return static_cast<bool>(got = wait()); },
        [&] { EXPECT_FALSE(got.release()); });
  }

  // `wait`, a wait without a deadline, ends by itself with `expected`, nothing held. One that
  // goes on is stopped after 3 s (scaled), so that the test ends: it reports cancelled.
  using controlled_wait = std::function<lease(const wait_control&, std::error_code&)>;
  static void expect_gives_up(errc expected, const controlled_wait& wait) {
    std::stop_source stop;
    auto ended = std::async(std::launch::async, [&] {
      std::error_code ec;
      lease got = wait(wait_control{.stop = stop.get_token(), .on_retry = {}}, ec);
      return std::make_pair(static_cast<bool>(got), ec);
    });
    // The failure must last endless_wait_rule::lasting_for (2 s) before the wait ends.
    if (ended.wait_for(test::scaled(5s)) != std::future_status::ready) stop.request_stop();
    auto [got, ec] = ended.get();
    EXPECT_FALSE(got);
    EXPECT_EQ(ec, expected) << ec.message();
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

// A deadline too far for steady_clock to count, and a wait as long, is no deadline: each form
// waits as acquire() does, where the conversion used to overflow (one attempt, or undefined
// behaviour). Of any clock, duration and representation.
using far_seconds = std::chrono::time_point<std::chrono::system_clock, std::chrono::seconds>;

TEST_F(OneMeaningTest, AMutexWithAFarDeadlineWaitsUntilAcquired) {
  mutex theirs{other_, test_key()}, lock{mine_, test_key()};
  auto hold = [&] { return theirs.acquire(); };
  expect_waits_for_ever(hold, [&] { return lock.try_acquire_until(steady::time_point::max()); });
  expect_waits_for_ever(
      hold, [&] { return lock.try_acquire_until(std::chrono::system_clock::time_point::max()); });
  expect_waits_for_ever(hold, [&] { return lock.try_acquire_until(far_seconds::max()); });
  expect_waits_for_ever(hold,
                        [&] { return lock.try_acquire_for(std::chrono::nanoseconds::max()); });
  expect_waits_for_ever(
      hold, [&] { return lock.try_lock_for(std::chrono::hours::max()); }, [&] { lock.unlock(); });
}

TEST_F(OneMeaningTest, ASemaphoreWithAFarDeadlineWaitsUntilAcquired) {
  semaphore theirs{other_, test_key(), 1}, permits{mine_, test_key(), 1};
  auto hold = [&] { return theirs.acquire(); };
  expect_waits_for_ever(hold, [&] { return permits.try_acquire_until(far_seconds::max()); });
  expect_waits_for_ever(hold, [&] { return permits.try_acquire_for(std::chrono::hours::max()); });
}

TEST_F(OneMeaningTest, ASharedMutexWithAFarDeadlineWaitsUntilAcquired) {
  shared_mutex theirs{other_, test_key()}, rw{mine_, test_key()};
  expect_waits_for_ever([&] { return theirs.acquire(); },
                        [&] { return rw.try_acquire_shared_for(std::chrono::nanoseconds::max()); });
  expect_waits_for_ever(
      [&] { return theirs.acquire_shared(); },
      [&] { return rw.try_lock_until(std::chrono::system_clock::time_point::max()); },
      [&] { rw.unlock(); });
}

TEST_F(OneMeaningTest, ALockSetWithAFarDeadlineWaitsUntilAcquired) {
  mutex theirs{other_, test_key("b")};
  lock_set set{mine_, {test_key("a"), test_key("b")}};
  expect_waits_for_ever([&] { return theirs.acquire(); },
                        [&] { return set.try_acquire_until(far_seconds::max()); });
}

TEST_F(OneMeaningTest, AnElectionWithAFarDeadlineWaitsUntilLeading) {
  election theirs{other_, test_key(), "them"}, vote{mine_, test_key(), "me"};
  expect_waits_for_ever([&] { return theirs.campaign(); },
                        [&] { return vote.try_campaign_for(std::chrono::nanoseconds::max()); });
}

TEST_F(OneMeaningTest, ALatchWithAFarDeadlineWaitsUntilOpen) {
  latch gate{other_, test_key()}, waiting{mine_, test_key()};
  std::error_code ec;
  ASSERT_TRUE(gate.try_set_count(1, ec)) << ec.message();
  auto opening = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(600ms);
    std::error_code e;
    return gate.count_down(e);
  });
  auto t0 = steady::now();
  EXPECT_TRUE(waiting.wait_for(std::chrono::nanoseconds::max()));
  EXPECT_GE(steady::now() - t0, 400ms);
  EXPECT_EQ(opening.get(), 0);
  EXPECT_TRUE(waiting.wait_until(far_seconds::max()));  // open: at once
}

// What no wait can cure ends a wait without a deadline with its error, as a wrong type does,
// once it lasted 5 attempts in a row over 2 s: a node at maxmemory (noeviction) refuses every
// write with OOM; a TTL shorter than the round trip (1 ms, less than its drift allowance) spends
// every grant's validity before the answer, lease_expired. A wait with a deadline rides both
// out until it: the node may free memory, a stall may pass.
TEST_F(OneMeaningTest, AWaitWithoutADeadlineEndsWhenTheNodeIsOutOfMemory) {
  std::error_code ec;
  other_.exec({"CONFIG", "SET", "maxmemory-policy", "noeviction"}, ec);
  ASSERT_FALSE(ec) << ec.message();
  other_.exec({"CONFIG", "SET", "maxmemory", "1"}, ec);
  ASSERT_FALSE(ec) << ec.message();
  mutex lock{mine_, test_key()};
  semaphore permits{mine_, test_key("sem"), 2};
  semaphore fair{mine_, test_key("fair"), 2, {.fair = true}};
  shared_mutex rw{mine_, test_key("rw")};
  const auto never = steady::time_point::max();
  expect_gives_up(errc::out_of_memory, [&](const wait_control& c, std::error_code& e) {
    return lock.acquire_until(never, c, nullptr, e);
  });
  expect_gives_up(errc::out_of_memory, [&](const wait_control& c, std::error_code& e) {
    return permits.acquire_until(never, 1, c, e);
  });
  expect_gives_up(errc::out_of_memory, [&](const wait_control& c, std::error_code& e) {
    return fair.acquire_until(never, 1, c, e);
  });
  expect_gives_up(errc::out_of_memory, [&](const wait_control& c, std::error_code& e) {
    return rw.acquire_shared_until(never, c, e);
  });
  if (HasFailure()) return;  // the forms below would wait for ever
  EXPECT_THROW((void)lock.acquire(), std::system_error);
  EXPECT_THROW((void)lock.try_acquire_until(never), std::system_error);
  // With a deadline it waits until the deadline.
  auto t0 = steady::now();
  EXPECT_FALSE(lock.acquire_until(steady::now() + 300ms, ec));
  EXPECT_GE(steady::now() - t0, 250ms);
  EXPECT_EQ(ec, errc::out_of_memory);
  other_.exec({"CONFIG", "SET", "maxmemory", "0"}, ec);
  EXPECT_TRUE(lock.try_acquire_until(never)) << "the node has room again";
}

TEST_F(OneMeaningTest, AWaitWithoutADeadlineEndsWhenTheTtlIsShorterThanARoundTrip) {
  // 1 ms: validity = ttl - drift (2.01 ms) is spent before any answer. node_timeout: the
  // answer, however late, is not a timeout.
  mutex lock{mine_, test_key(), {.ttl = 1ms, .retry_delay = 5ms, .node_timeout = 1s}};
  semaphore permits{mine_, test_key("sem"), 2,
                    {.ttl = 1ms, .retry_delay = 5ms, .node_timeout = 1s}};
  semaphore fair{mine_, test_key("fair"), 2,
                 {.ttl = 1ms, .fair = true, .retry_delay = 5ms, .node_timeout = 1s}};
  shared_mutex rw{mine_, test_key("rw"), {.ttl = 1ms, .retry_delay = 5ms, .node_timeout = 1s}};
  const auto never = steady::time_point::max();
  expect_gives_up(errc::lease_expired, [&](const wait_control& c, std::error_code& e) {
    return lock.acquire_until(never, c, nullptr, e);
  });
  expect_gives_up(errc::lease_expired, [&](const wait_control& c, std::error_code& e) {
    return permits.acquire_until(never, 1, c, e);
  });
  expect_gives_up(errc::lease_expired, [&](const wait_control& c, std::error_code& e) {
    return fair.acquire_until(never, 1, c, e);
  });
  expect_gives_up(errc::lease_expired, [&](const wait_control& c, std::error_code& e) {
    return rw.acquire_until(never, c, e);
  });
  if (HasFailure()) return;  // the forms below would wait for ever
  EXPECT_THROW((void)lock.acquire(), std::system_error);
  std::error_code ec;
  auto t0 = steady::now();
  EXPECT_FALSE(lock.acquire_until(steady::now() + 300ms, ec));
  EXPECT_GE(steady::now() - t0, 250ms);
  EXPECT_EQ(ec, errc::lease_expired);
}

}  // namespace
}  // namespace dlock::test
