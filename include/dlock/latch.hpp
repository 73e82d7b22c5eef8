// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/latch.hpp: a distributed count-down latch on one Redis node or one Redis Cluster.
/// - latch_options:  TTL (how long an abandoned latch lives) and key prefix (an aggregate)
/// - latch:          try_set_count, count_down, count, and waits for zero: wait, wait_for,
///                   wait_until, async_wait
///
/// Like std::latch across processes: a coordinator sets the count, workers count down, and
/// waiters are released when it reaches zero. The count is one key (key_prefix + name) holding
/// an integer; every change sets its TTL anew, so a latch that nobody touches for a TTL
/// disappears on its own (an abandoned batch leaves nothing behind). One that reached zero
/// stays open, at 0, for a TTL; after that it is gone too.
/// Thread-safety: a latch object may be shared by the threads of a process.
///
/// |          | try_set_count(n) | count_down(k)                 | wait()                | TTL passes  |
/// |----------|------------------|-------------------------------|-----------------------|-------------|
/// | Absent   | Counting (n > 0) | not_found                     | not_found             | -           |
/// | Counting | false            | Counting, or Open at 0 (wakes)| blocks until Open     | Absent (1)  |
/// | Open (0) | false            | stays Open                    | returns at once       | Absent      |
/// (1) A waiter then gets not_found: the latch was abandoned, not opened.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "dlock/client.hpp"
#include "dlock/detail/async.hpp"
#include "dlock/detail/deadline.hpp"
#include "dlock/error.hpp"
#include "dlock/export.hpp"

namespace dlock {

/// The knobs of a latch. An aggregate.
struct latch_options {
  /// How long the latch lives after its last change (set or count down). 1 ms to 30 days.
  std::chrono::milliseconds ttl{std::chrono::hours(1)};
  /// Prepended to the latch's name to form its key.
  std::string key_prefix{};
};

/// A count-down latch on one Redis node or cluster. latch.hpp has its states and what threads
/// may share.
class DLOCK_EXPORT latch {
 public:
  using clock = std::chrono::steady_clock;  ///< the clock of deadlines

  /// The latch `name` (key key_prefix + name). Throws std::system_error(errc::invalid_argument),
  /// before any I/O, for an empty name, a key over max_key_bytes or one of dlock's companion
  /// keys, and a TTL outside 1 ms..30 days. On a Redis Cluster the count and its channel
  /// share the name's slot, and waiters subscribe on that slot's master.
  latch(client node, std::string name, latch_options options = {});

  /// Creates the latch with `count` (1 .. 2^53) if it does not exist: true; false when it
  /// exists already (counting or open), which is left as it is. Blocks for one round trip.
  bool try_set_count(std::int64_t count, std::error_code& ec);
  /// Subtracts `n` (>= 1), not below zero, and returns what is left; at zero the latch opens
  /// and its waiters are woken. not_found (and -1) when the latch does not exist.
  std::int64_t count_down(std::int64_t n, std::error_code& ec);
  std::int64_t count_down(std::error_code& ec) { return count_down(1, ec); }  ///< by one
  /// The count now (0: open); not_found (and -1) when the latch does not exist.
  std::int64_t count(std::error_code& ec);

  /// Blocks until the count is zero. Learns of it through Pub/Sub (a connection of its own
  /// while it waits), not by polling; while the node does not answer it looks again after
  /// 250 ms, doubling to 4 s, and at once when the subscription is back. not_found when the
  /// latch does not exist or vanishes (its TTL passed) while waited for.
  void wait(std::error_code& ec) { wait_until(clock::time_point::max(), ec); }
  /// As above; throws std::system_error on failure.
  void wait();
  /// The same until `deadline` (steady_clock): false, with ec timeout, when it passes.
  bool wait_until(clock::time_point deadline, std::error_code& ec);
  /// The same for a duration.
  template <class Rep, class Period>
  bool wait_for(const std::chrono::duration<Rep, Period>& d, std::error_code& ec) {
    return wait_until(detail::deadline_after(d), ec);
  }
  /// Until the count is zero or `d` has passed: false when the time ran out (or the node did
  /// not answer); throws std::system_error for other errors (not_found, wrong_type, ACL ...).
  template <class Rep, class Period>
  bool wait_for(const std::chrono::duration<Rep, Period>& d) {
    return wait_or_throw(detail::deadline_after(d));
  }
  /// As above, until `tp` (of any clock, converted once on entry). A wait or deadline too far
  /// to count (over 100 years: duration::max(), time_point::max()) waits as wait() does.
  template <class Clock, class Duration>
  bool wait_until(const std::chrono::time_point<Clock, Duration>& tp) {
    return wait_or_throw(detail::deadline_at(tp));
  }
  /// Asynchronous wait(): signature void(std::error_code). Asio's per-operation cancellation
  /// ends it with errc::cancelled; emit the signal on the handler's executor, as Asio requires
  /// (mutex::async_acquire).
  template <class CompletionToken>
  auto async_wait(CompletionToken&& token) {
    return detail::initiate_stoppable<void(std::error_code)>(
        std::forward<CompletionToken>(token), node_.get_executor(),
        [this](detail::unique_function<void(std::error_code)> h, std::stop_token stop) {
          start_wait(clock::time_point::max(), std::move(h), std::move(stop));
        });
  }

  const std::string& key() const noexcept { return key_; }  ///< the latch's key

 private:
  void start_wait(clock::time_point deadline, detail::unique_function<void(std::error_code)> h,
                  std::stop_token stop = {});
  bool wait_or_throw(clock::time_point deadline);

  client node_;
  std::string key_;
  std::string channel_;
  latch_options options_;
};

}  // namespace dlock
