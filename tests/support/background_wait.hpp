// SPDX-License-Identifier: Apache-2.0
// tests/support/background_wait.hpp: timing how soon a release wakes a waiter (wakeup_test,
// semaphore_wakeup_test).
//   backstop         the retry delay of a waiter whose wake-up a test times: it sleeps a
//                    jittered 15-30 s between attempts, which a wake-up must beat by far
//   within_wakeups   a bound on what wake-ups alone take: scaled, but below the shortest
//                    backstop sleep, so that a waiter that polled instead can never pass
//   woken_within     how soon after a release a woken waiter holds: about a round trip, with room
//   background_wait  an acquire_until(twice the backstop) on another thread, counting its failed
//                    attempts (each followed by a sleep: its backstop, or until woken)
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <stop_token>
#include <system_error>

#include <gtest/gtest.h>

#include "dlock/lease.hpp"
#include "dlock/options.hpp"
#include "support/checks.hpp"

namespace dlock::test {

inline constexpr std::chrono::seconds backstop{30};

inline std::chrono::milliseconds within_wakeups(std::chrono::milliseconds bound) {
  return std::min<std::chrono::milliseconds>(scaled(bound),
                                             backstop / 2 - std::chrono::seconds(3));
}

inline std::chrono::milliseconds woken_within() { return within_wakeups(std::chrono::seconds(1)); }

struct background_wait {
  using steady = std::chrono::steady_clock;

  // acquire(deadline, control, ec) -> lease runs on another thread: a mutex's or a
  // semaphore's acquire_until, say.
  template <class Acquire>
  explicit background_wait(Acquire acquire)
      : result(std::async(std::launch::async, [this, acquire = std::move(acquire)]() mutable {
          wait_control control{.stop = stop.get_token(), .on_retry = [this](const wait_progress&) {
                                 ++failed;
                                 return true;
                               }};
          std::error_code ec;
          lease got = acquire(steady::now() + 2 * backstop, control, ec);
          returned_at = steady::now();
          return got;
        })) {}
  ~background_wait() { finish(); }
  background_wait(const background_wait&) = delete;
  background_wait& operator=(const background_wait&) = delete;

  // Stops the wait and joins it.
  void finish() {
    stop.request_stop();
    if (result.valid()) result.wait();
  }

  // How long after `since` it got what it waited for, if it did by since + limit (else it is
  // stopped: nullopt). What it got is released before this returns.
  std::optional<steady::duration> got_within(steady::time_point since,
                                             std::chrono::milliseconds limit) {
    if (result.wait_until(since + limit) != std::future_status::ready) {
      finish();
      return std::nullopt;
    }
    lease got = result.get();
    EXPECT_TRUE(got);
    EXPECT_FALSE(got.release());
    return returned_at - since;
  }

  std::atomic<int> failed{0};
  std::stop_source stop;
  steady::time_point returned_at;  // written before `result` is ready
  std::future<lease> result;
};

}  // namespace dlock::test
