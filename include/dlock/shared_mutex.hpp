// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/shared_mutex.hpp: a distributed read-write lock on one Redis node (or one Redis Cluster
/// slot).
/// - shared_mutex_options:  TTL, retry pacing, wake-ups, key prefix (an aggregate)
/// - shared_mutex:          many readers or one writer; lease-returning acquire() and
///                          acquire_shared() with async forms, and the SharedTimedLockable calls
///                          that std::unique_lock and std::shared_lock use
///
/// Readers and writers line up in one first-come, first-served queue (tickets from a counter on
/// the node). A reader is admitted when nobody ahead of it in the queue is a writer; a writer
/// when nobody is ahead of it at all. So a writer that waits stops every reader that comes after
/// it (writers are not starved by a stream of readers: a writer waits only for the readers that
/// were there before it), and readers never wait for a writer that came after them.
/// When a writer releases, one script wakes the readers queued behind it up to and including the
/// next writer (the whole batch at once, not one per release); each is admitted by its next
/// attempt, about a round trip later. A queued writer that gives up wakes those behind it too.
///
/// Every acquisition is a dlock::lease of its own: a random owner value, a fencing token drawn
/// at the grant from one counter for readers and writers alike, a validity, lost(), extend() and
/// keep_alive(). A resource that keeps the highest token seen from reads and writes, and refuses
/// a write below it (never a read), refuses a stale writer once a later reader has read. Each
/// reader's lease expires and is renewed on its own: a crashed reader holds up writers for at
/// most its TTL.
///
/// Built on the fair semaphore's scripts (dlock/semaphore.hpp): a reader takes one of
/// max_readers permits, a writer all of them. Its keys are its own
/// (shared_mutex_keys_for in dlock/key_layout.hpp), never a semaphore's of the same name.
/// Only one node: a read-write lock over N independent nodes (Redlock) would need what a
/// semaphore would, a quorum of nearly all nodes, so it is not offered; use one primary (with
/// replicas or Sentinel) and accept its failover caveats (docs/guarantees.md).
///
/// Thread-safety: a shared_mutex object may be shared by the threads of a process. The Lockable
/// calls keep one lease per thread (exclusive or shared); unlock()/unlock_shared() release the
/// calling thread's own. As with std::shared_mutex, a thread that holds it must not lock it
/// again: lock()/lock_shared() then fail with errc::invalid_argument (thrown), try_lock*() return
/// false, and what it holds is kept.
///
/// |           | try_lock()            | try_lock_shared()      | TTL ends (server clock)    |
/// |-----------|-----------------------|------------------------|----------------------------|
/// | Free      | Written               | Read by 1              | -                          |
/// | Read by n | false                 | Read by n + 1 (1)      | that reader's lease: lost  |
/// | Written   | false                 | false                  | Lost: the lease's lost()   |
/// (1) false when a writer is queued: readers do not overtake a waiting writer.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <stop_token>
#include <string>

#include "dlock/client.hpp"
#include "dlock/detail/async.hpp"
#include "dlock/detail/deadline.hpp"
#include "dlock/error.hpp"
#include "dlock/export.hpp"
#include "dlock/lease.hpp"
#include "dlock/options.hpp"

namespace dlock {

namespace detail {
class semaphore_core;
class lockable_holdings;  // what each thread holds through the Lockable calls (src/lockable.hpp)
}

/// The knobs of a read-write lock. An aggregate, for designated initializers.
struct shared_mutex_options {
  /// How long the server keeps a reader's or the writer's hold if its holder vanishes.
  /// Valid: 1 ms to 30 days.
  std::chrono::milliseconds ttl{10'000};
  /// Between two attempts a waiter sleeps a random time in [retry_delay/2, retry_delay], cut
  /// short when a release wakes it; it keeps its place in the queue for about two of these.
  std::chrono::milliseconds retry_delay{50};
  /// Waiters queue and a release wakes them through pub/sub (one extra connection per client);
  /// retry_delay remains the backstop. Off: plain polling every retry_delay.
  bool wake_on_release = true;
  /// Deadline for each request to the node. 0 picks min(ttl / 10, the client's request_timeout).
  std::chrono::milliseconds node_timeout{0};
  /// Validity = ttl - time the acquisition took - (ttl * drift_factor + 2 ms). Valid: 0 to 0.5.
  double drift_factor = 0.01;
  /// Prepended to the lock's name to form its key.
  std::string key_prefix{};
};

/// A distributed read-write lock on one Redis node: many readers or one writer, first come
/// first served, each hold a fenced dlock::lease. shared_mutex.hpp has its rules, states and
/// what threads may share.
class DLOCK_EXPORT shared_mutex {
 public:
  using clock = std::chrono::steady_clock;  ///< the clock of deadlines and validity
  /// How many readers may hold it at once; a writer counts as all of them.
  static constexpr std::ptrdiff_t max_readers = std::ptrdiff_t{1} << 20;

  /// The read-write lock `name` (key: key_prefix + name) on `node`. Throws
  /// std::system_error(errc::invalid_argument), before any I/O, for an empty name, a key longer
  /// than max_key_bytes, a TTL outside 1 ms..max_ttl, a negative delay or timeout, or a
  /// drift_factor outside 0..0.5.
  shared_mutex(client node, std::string name, shared_mutex_options options = {});
  ~shared_mutex();  ///< releases what threads still hold through lock()/lock_shared()
  shared_mutex(const shared_mutex&) = delete;
  shared_mutex& operator=(const shared_mutex&) = delete;

  /// @name Lease-returning API
  /// The exclusive (writer's) and shared (reader's) forms of each call. On failure the lease is
  /// empty and ec says why: not_acquired (held the other way, or a writer is ahead),
  /// lease_expired, timeout / connection_lost / node_unreachable, or an error that waiting
  /// cannot cure (wrong_type, no_permission, auth_failed ...).
  /// @{

  /// Waits until granted, without a deadline; fails only with an error waiting cannot cure.
  lease acquire(std::error_code& ec);
  lease acquire_shared(std::error_code& ec);  ///< the reader's acquire()
  lease acquire();         ///< as above; throws std::system_error on failure
  lease acquire_shared();  ///< the reader's; throws std::system_error on failure
  /// Attempts until granted or `deadline` passes.
  lease acquire_until(clock::time_point deadline, std::error_code& ec);
  /// The same, ended early by `control` (cancelled), which also hears of each failed attempt.
  lease acquire_until(clock::time_point deadline, const wait_control& control,
                      std::error_code& ec);
  /// The reader's acquire_until().
  lease acquire_shared_until(clock::time_point deadline, std::error_code& ec);
  lease acquire_shared_until(clock::time_point deadline, const wait_control& control,
                             std::error_code& ec);  ///< the reader's, with control
  /// One attempt, without queueing. Blocks for one round trip.
  lease try_acquire(std::error_code& ec);
  lease try_acquire_shared(std::error_code& ec);  ///< the reader's try_acquire()
  /// One attempt: an empty lease when held the other way (or the node did not answer in
  /// time); throws std::system_error for errors that retrying cannot cure.
  lease try_acquire();
  lease try_acquire_shared();  ///< the reader's
  /// Attempts until granted or `d` has passed: an empty lease when the time ran out; throws
  /// like try_acquire(). A wait too far to count (over 100 years: duration::max()) is none: it
  /// waits as acquire() does, and throws what ends such a wait.
  template <class Rep, class Period>
  lease try_acquire_for(const std::chrono::duration<Rep, Period>& d) {
    return acquire_or_throw(detail::deadline_after(d), max_readers);
  }
  /// The reader's try_acquire_for().
  template <class Rep, class Period>
  lease try_acquire_shared_for(const std::chrono::duration<Rep, Period>& d) {
    return acquire_or_throw(detail::deadline_after(d), 1);
  }

  /// Asynchronous acquire(): signature void(std::error_code, lease); any completion token. Its
  /// cancellation slot ends the wait with errc::cancelled, nothing held; emit the signal on the
  /// handler's executor, as Asio requires (mutex::async_acquire).
  template <class CompletionToken>
  auto async_acquire(CompletionToken&& token) {
    return detail::initiate_stoppable<void(std::error_code, lease)>(
        std::forward<CompletionToken>(token), get_executor(),
        [this](detail::unique_function<void(std::error_code, lease)> h, std::stop_token stop) {
          start_acquire(max_readers, std::move(h), std::move(stop));
        });
  }
  /// Asynchronous acquire_shared().
  template <class CompletionToken>
  auto async_acquire_shared(CompletionToken&& token) {
    return detail::initiate_stoppable<void(std::error_code, lease)>(
        std::forward<CompletionToken>(token), get_executor(),
        [this](detail::unique_function<void(std::error_code, lease)> h, std::stop_token stop) {
          start_acquire(1, std::move(h), std::move(stop));
        });
  }
  /// @}

  /// @name SharedTimedLockable
  /// One lease per thread, kept by the shared_mutex (current_lease()). lock() and lock_shared()
  /// wait without a deadline and throw std::system_error for errors waiting cannot cure.
  /// @{
  void lock();                  ///< as a writer
  [[nodiscard]] bool try_lock();  ///< one attempt as a writer
  /// Attempts as a writer until `d` has passed.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return lock_until(detail::deadline_after(d), max_readers);
  }
  /// Attempts as a writer until `tp` (of any clock, converted to steady_clock once). A wait or
  /// deadline too far to count (over 100 years) waits as lock() does, in every timed form.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& tp) {
    return lock_until(detail::deadline_at(tp), max_readers);
  }
  /// Releases the calling thread's writer's hold; see last_error() (not_held, lease_expired,
  /// lease_lost). Never throws.
  void unlock() noexcept;

  void lock_shared();                  ///< as a reader
  [[nodiscard]] bool try_lock_shared();  ///< one attempt as a reader
  /// Attempts as a reader until `d` has passed.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d) {
    return lock_until(detail::deadline_after(d), 1);
  }
  /// Attempts as a reader until `tp`.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& tp) {
    return lock_until(detail::deadline_at(tp), 1);
  }
  /// Releases the calling thread's reader's hold, as unlock() does a writer's.
  void unlock_shared() noexcept;

  /// The lease the calling thread holds through the Lockable calls, or nullptr.
  const lease* current_lease() const noexcept;
  /// The error of the calling thread's last Lockable call, or none.
  std::error_code last_error() const noexcept;
  /// @}

  /// key_prefix + name; the Redis keys come from it (shared_mutex_keys_for).
  const std::string& key() const noexcept;
  const shared_mutex_options& options() const noexcept;  ///< as constructed
  /// dlock's I/O executor, where async completions run unless the handler names another.
  detail::io_executor get_executor() const noexcept;

 private:
  // `permits`: max_readers for a writer, 1 for a reader.
  void start_acquire(std::ptrdiff_t permits,
                     detail::unique_function<void(std::error_code, lease)> handler,
                     std::stop_token stop = {});
  lease acquire_blocking(clock::time_point deadline, int attempts, std::ptrdiff_t permits,
                         std::error_code& ec, const wait_control& control = {});
  lease acquire_or_throw(clock::time_point deadline, std::ptrdiff_t permits);
  // `once`: one attempt (try_lock), which never throws.
  bool lock_until(clock::time_point deadline, std::ptrdiff_t permits, bool once = false);

  shared_mutex_options options_;
  std::shared_ptr<detail::semaphore_core> core_;
  // Declared after core_, so that the threads' leases are released before the core goes.
  std::unique_ptr<detail::lockable_holdings> holdings_;
};

}  // namespace dlock
