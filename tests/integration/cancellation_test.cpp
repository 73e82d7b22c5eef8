// SPDX-License-Identifier: Apache-2.0
// Asio per-operation cancellation of dlock's async waits, against a real redis-server (issue
// 37): a wait whose handler's cancellation slot emits ends promptly with errc::cancelled, and
// holds nothing afterwards; the lock, once let go, goes to someone else. The handler runs on a
// test io_context, where the signal is emitted too (Asio's rule: one thread per slot).
#include <gtest/gtest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "dlock/dlock.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// How soon after the signal a cancelled wait must have ended.
const auto prompt = test::scaled(100ms);

class CancellationTest : public ::testing::Test {
 protected:
  // Starts `start(handler)` with a handler bound to a cancellation slot and to `ctx_`, emits
  // terminal cancellation after 200 ms, and returns how long the wait took to end after that,
  // with its error. The handler's lease, if any, is kept in `won_`.
  template <class Start>
  std::optional<std::chrono::milliseconds> cancel_after_200ms(Start start, std::error_code& got) {
    asio::cancellation_signal signal;
    std::optional<steady::time_point> ended;
    steady::time_point emitted{};
    auto on_done = [&](std::error_code ec, auto&&... l) {
      got = ec;
      ended = steady::now();
      if constexpr (sizeof...(l) > 0) won_ = lease(std::move(l)...);
    };
    start(asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(ctx_, on_done)));
    asio::steady_timer timer{ctx_, 200ms};
    timer.async_wait([&](std::error_code) {
      emitted = steady::now();
      signal.emit(asio::cancellation_type::terminal);
    });
    ctx_.run_for(test::scaled(5s));
    ctx_.restart();
    if (!ended) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::milliseconds>(*ended - emitted);
  }

  // The wait `start` begins ends with cancelled, promptly, holding nothing.
  template <class Start>
  void expect_cancelled(const char* what, Start start) {
    SCOPED_TRACE(what);
    std::error_code got;
    auto took = cancel_after_200ms(start, got);
    ASSERT_TRUE(took) << "the wait did not end";
    EXPECT_EQ(got, errc::cancelled) << got.message();
    EXPECT_LE(*took, prompt);
    EXPECT_FALSE(won_);
  }

  redis_server server_;
  client holder_{server_.url()}, waiter_{server_.url()};
  asio::io_context ctx_;
  lease won_;
};

TEST_F(CancellationTest, AMutexWaitEndsAndHoldsNothing) {
  mutex held_by_other{holder_, test_key()};
  lease other = held_by_other.acquire();
  ASSERT_TRUE(other);
  mutex lock{waiter_, test_key()};
  for (bool bounded : {false, true}) {
    SCOPED_TRACE(bounded ? "async_acquire_until" : "async_acquire");
    std::error_code ec;
    auto took = cancel_after_200ms(
        [&](auto handler) {
          if (bounded) {
            lock.async_acquire_until(steady::now() + 60s, std::move(handler));
          } else {
            lock.async_acquire(std::move(handler));
          }
        },
        ec);
    ASSERT_TRUE(took) << "the wait did not end";
    EXPECT_EQ(ec, errc::cancelled) << ec.message();
    EXPECT_LE(*took, prompt);
    EXPECT_FALSE(won_);
  }
  // Once the holder lets go, the cancelled waiters take nothing: a third client gets it.
  EXPECT_EQ(other.release(), std::error_code());
  std::this_thread::sleep_for(300ms);
  client third{server_.url()};
  mutex after{third, test_key()};
  std::error_code ec;
  EXPECT_TRUE(after.try_acquire(ec)) << ec.message();
}

TEST_F(CancellationTest, ASemaphoreAndReadWriteLockWaitEndAndHoldNothing) {
  semaphore taken{holder_, test_key("sem"), 1};
  lease permit = taken.acquire();
  ASSERT_TRUE(permit);
  shared_mutex rw_other{holder_, test_key("rw")};
  std::error_code ec;
  lease writer = rw_other.acquire(ec);
  ASSERT_TRUE(writer) << ec.message();

  semaphore permits{waiter_, test_key("sem"), 1};
  shared_mutex rw{waiter_, test_key("rw")};
  expect_cancelled("semaphore", [&](auto h) { permits.async_acquire(std::move(h)); });
  expect_cancelled("shared_mutex, writer", [&](auto h) { rw.async_acquire(std::move(h)); });
  expect_cancelled("shared_mutex, reader",
                   [&](auto h) { rw.async_acquire_shared(std::move(h)); });
  EXPECT_EQ(permit.release(), std::error_code());
  EXPECT_EQ(writer.release(), std::error_code());
  std::this_thread::sleep_for(300ms);
  client third{server_.url()};
  semaphore after{third, test_key("sem"), 1};
  shared_mutex rw_after{third, test_key("rw")};
  EXPECT_TRUE(after.try_acquire(ec)) << ec.message();
  EXPECT_TRUE(rw_after.try_acquire(ec)) << ec.message();
}

TEST_F(CancellationTest, ALockSetElectionAndLatchWaitEnd) {
  mutex blocker{holder_, test_key("b")};
  lease in_the_way = blocker.acquire();
  ASSERT_TRUE(in_the_way);
  election leading{holder_, test_key("vote"), "them"};
  lease leader = leading.campaign();
  ASSERT_TRUE(leader);
  latch gate{holder_, test_key("gate")};
  std::error_code ec;
  ASSERT_TRUE(gate.try_set_count(1, ec)) << ec.message();

  lock_set set{waiter_, {test_key("a"), test_key("b")}};
  election vote{waiter_, test_key("vote"), "me"};
  latch waiting{waiter_, test_key("gate")};
  expect_cancelled("lock_set", [&](auto h) { set.async_acquire(std::move(h)); });
  expect_cancelled("election", [&](auto h) { vote.async_campaign(std::move(h)); });
  expect_cancelled("latch", [&](auto h) { waiting.async_wait(std::move(h)); });
  EXPECT_EQ(in_the_way.release(), std::error_code());
  std::this_thread::sleep_for(300ms);
  mutex a{holder_, test_key("a")};
  EXPECT_TRUE(a.try_acquire(ec)) << "the cancelled set kept a name: " << ec.message();
}

}  // namespace
}  // namespace dlock::test
