// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/lock_set.hpp: several locks taken together, all or none, under one lease.
/// - lock_set:  a fixed set of lock names on one Redis node or a Redis Cluster; acquire,
///              try_acquire, acquire_until and their async forms, each giving one lease for the
///              whole set
/// - lock_all:  the same as a function: waits until every name is held, returns the lease
///
/// On one node the set is taken by one script, which sets every key or none. On a Redis
/// Cluster the names are grouped by slot and each slot's are taken by one script, slot after
/// slot in ascending slot order (the same global order for every client); when a slot's names
/// are held by another, the release of the slots already taken is sent (not awaited) before
/// the attempt ends, so those names stay taken for the rest of the attempt, and until their TTL
/// when that release is lost (or when a slot's script that timed out runs after it). While a
/// slot migrates, that release goes by each key alone. No attempt ever waits while holding part of a set, so clients
/// locking overlapping sets, in any order, cannot deadlock (no hold-and-wait). A set whose
/// slots take longer than its TTL to take (one round trip each, plus one for the fences) fails
/// every attempt with lease_expired: give it a TTL well above that.
/// The keys are the names' ordinary lock keys, so a set excludes and is excluded by a dlock::
/// mutex of any of its names on the same node or cluster (not a Redlock mutex over several
/// nodes, which could win a quorum elsewhere, nor a cluster mutex with `copies`, whose keys are
/// the copies'). Releasing the set hands each key to that key's first queued mutex waiter, as a
/// mutex's release does (on a cluster it wakes the waiter, as there). A set does not queue, so
/// it may take a free name ahead of a fair mutex's waiters.
/// One fencing token serves the whole set: every name's counter is raised to it, so it is
/// larger than any token drawn before for any of the names, and every later one is larger. On
/// a cluster the token is the highest the slots drew, and the other slots' counters are raised
/// to it (one more round trip) before the lease is returned; the slots' masters draw from their
/// own wall clocks when a counter expired, so this holds while those clocks differ by less
/// than the TTL (docs/guarantees.md, assumption 1, as for Redlock nodes).
/// Thread-safety: a lock_set may be shared by the threads of a process; each acquisition
/// returns its own lease.
///
/// |        | try_acquire()               | lease.release()            | validity ends / lost      |
/// |--------|-----------------------------|----------------------------|---------------------------|
/// | Free   | Held (every name), or empty | -                          | -                         |
/// | Held   | empty (not reentrant)       | Free: each name is freed   | Lost: lost() fires (1)    |
/// (1) A renewal that finds any of the names gone or another's loses the lease. An acquisition
/// waits by polling (retry_delay, or sooner when the holder's key expires sooner), not in the
/// names' wait queues: a set would otherwise queue in several, holding places in some while
/// waiting in others. N independent nodes (Redlock) are not offered, and the replication
/// guard is refused (invalid_argument).
/// The lease's key() is the keys joined by ',' (a label, not a key).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/detail/async.hpp"
#include "dlock/detail/deadline.hpp"
#include "dlock/detail/unique_function.hpp"
#include "dlock/error.hpp"
#include "dlock/export.hpp"
#include "dlock/lease.hpp"
#include "dlock/options.hpp"

namespace dlock {

namespace detail {
class lock_set_core;
}

/// A fixed set of lock names on one node or cluster, acquired all or none. lock_set.hpp has the
/// rest.
class DLOCK_EXPORT lock_set {
 public:
  using clock = std::chrono::steady_clock;  ///< the clock of deadlines and validity

  /// The locks `names` (keys key_prefix + name; duplicates count once) on `node`. Throws
  /// std::system_error(errc::invalid_argument), before any I/O, for no names or more than
  /// 1000, any name a dlock::mutex refuses, options a mutex refuses, `fair`, `copies` or
  /// `reentrant`, and a client with the replication guard.
  lock_set(client node, std::vector<std::string> names, lock_options options = {});
  ~lock_set();
  lock_set(const lock_set&) = delete;
  lock_set& operator=(const lock_set&) = delete;

  /// One attempt: a lease holding every name, or an empty lease with not_acquired when any is
  /// held (by another set or mutex), or the node's error. Blocks for one round trip (on a
  /// cluster, one per slot of the set's names, and one more when their fences differ).
  lease try_acquire(std::error_code& ec);
  /// Attempts until every name is held or `deadline` (steady_clock) passes (not_acquired, or
  /// the last error). Between two attempts it sleeps retry_delay (jittered), or until the key
  /// that was in the way expires, when sooner. Errors that retrying cannot cure end it at once;
  /// without a deadline (time_point::max()), so do lasting out_of_memory and lease_expired (as
  /// mutex::acquire()).
  lease acquire_until(clock::time_point deadline, std::error_code& ec);
  /// The same, ended early by `control` (a stop request: cancelled, nothing held), which also
  /// hears of each failed attempt that another will follow (wait_control::on_retry). A stop
  /// takes effect when the attempt in flight has answered (up to a node timeout per slot); a
  /// set granted before the stop is returned as usual.
  lease acquire_until(clock::time_point deadline, const wait_control& control,
                      std::error_code& ec);
  /// Attempts until every name is held.
  lease acquire(std::error_code& ec) { return acquire_until(clock::time_point::max(), ec); }
  /// As above; throws std::system_error on failure.
  lease acquire();
  /// One attempt: an empty lease when a name is held (or the node did not answer in time);
  /// throws std::system_error for errors that retrying cannot cure.
  lease try_acquire();
  /// Attempts until every name is held or `d` has passed: an empty lease when the time ran
  /// out; throws like try_acquire().
  template <class Rep, class Period>
  lease try_acquire_for(const std::chrono::duration<Rep, Period>& d) {
    return acquire_or_throw(detail::deadline_after(d));
  }
  /// As above, until `tp` (of any clock, converted once on entry). A wait or deadline too far
  /// to count (over 100 years: duration::max(), time_point::max()) waits as acquire() does.
  template <class Clock, class Duration>
  lease try_acquire_until(const std::chrono::time_point<Clock, Duration>& tp) {
    return acquire_or_throw(detail::deadline_at(tp));
  }

  /// Asynchronous try_acquire(): signature void(std::error_code, lease).
  template <class CompletionToken>
  auto async_try_acquire(CompletionToken&& token) {
    return detail::initiate<void(std::error_code, lease)>(
        std::forward<CompletionToken>(token), get_executor(),
        [core = core_](detail::unique_function<void(std::error_code, lease)> h) {
          start_try_acquire(core, std::move(h));
        });
  }
  /// Asynchronous acquire_until(): signature void(std::error_code, lease). It goes on when the
  /// lock_set object is gone; `control` ends it early (a stop: cancelled, nothing held), and so
  /// does the handler's cancellation slot, emitted on the handler's executor as Asio requires
  /// (mutex::async_acquire).
  template <class CompletionToken>
  auto async_acquire_until(clock::time_point deadline, wait_control control,
                           CompletionToken&& token) {
    return detail::initiate_stoppable<void(std::error_code, lease)>(
        std::forward<CompletionToken>(token), get_executor(),
        [core = core_, deadline, control = std::move(control)](
            detail::unique_function<void(std::error_code, lease)> h, std::stop_token stop) {
          start_acquire(core, deadline, control, std::move(h), std::move(stop));
        });
  }
  /// As above, without control.
  template <class CompletionToken>
  auto async_acquire_until(clock::time_point deadline, CompletionToken&& token) {
    return async_acquire_until(deadline, wait_control{}, std::forward<CompletionToken>(token));
  }
  /// Asynchronous acquire(): signature void(std::error_code, lease).
  template <class CompletionToken>
  auto async_acquire(CompletionToken&& token) {
    return async_acquire_until(clock::time_point::max(), std::forward<CompletionToken>(token));
  }

  /// The keys, sorted, without duplicates.
  const std::vector<std::string>& keys() const noexcept;
  /// dlock's I/O executor, where async completions run unless the handler names another.
  detail::io_executor get_executor() const noexcept;

 private:
  lease acquire_or_throw(clock::time_point deadline);
  // Static, on the core: an async operation started late (a deferred token) must not need
  // the lock_set object.
  static void start_try_acquire(const std::shared_ptr<detail::lock_set_core>& core,
                                detail::unique_function<void(std::error_code, lease)> handler);
  // `cancel`: the handler's cancellation slot's (async forms), besides control.stop.
  static void start_acquire(const std::shared_ptr<detail::lock_set_core>& core,
                            clock::time_point deadline, const wait_control& control,
                            detail::unique_function<void(std::error_code, lease)> handler,
                            std::stop_token cancel = {});

  std::shared_ptr<detail::lock_set_core> core_;
};

/// Waits until every lock in `names` is held on `node` and returns one lease for them all
/// (lock_set::acquire). Throws std::system_error on failure.
DLOCK_EXPORT lease lock_all(client node, std::vector<std::string> names, lock_options options = {});

}  // namespace dlock
