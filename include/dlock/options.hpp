// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/options.hpp: the knobs of a lock and of a semaphore, as aggregates for designated
/// initializers:
/// ```
/// dlock::mutex lock{nodes, "orders:42", {.ttl = 10s, .retry_delay = 50ms}};
/// ```
/// Plain values; thread-safe. Every member of dlock's public aggregates has a default member
/// initializer (`{}` at least), so designating a few of them compiles warning-free under
/// -Wextra (-Wmissing-field-initializers).
#pragma once

#include <chrono>
#include <functional>
#include <stop_token>
#include <string>
#include <string_view>

#include "dlock/error.hpp"

namespace dlock {

/// The knobs of a mutex: TTL, retry pacing, node timeout, drift, key prefix, wake-ups and
/// fairness. An aggregate, for designated initializers.
struct lock_options {
  /// How long the servers keep the lock if its holder vanishes. Valid: 1 ms to 30 days.
  std::chrono::milliseconds ttl{10'000};
  /// Between two attempts the locker sleeps a random time in [retry_delay/2, retry_delay],
  /// so that contending lockers do not retry in lock-step.
  std::chrono::milliseconds retry_delay{50};
  // (retry_count is gone: acquire() waits until acquired, as lock() and every primitive's
  // acquire() do. For one round use try_acquire(), for a bounded wait acquire_until().)
  /// Deadline for each node's answer in a round; a hung node is skipped after it. 0 picks
  /// min(ttl / 10, the client's request_timeout).
  std::chrono::milliseconds node_timeout{0};
  /// Clock drift allowance: drift = ttl * drift_factor + 2 ms. Valid: 0 to 0.5.
  double drift_factor = 0.01;
  /// Prepended to the lock's name to form the key.
  std::string key_prefix{};
  /// A waiter queues on the nodes and the release wakes the first one through pub/sub, so a
  /// freed lock passes on within about a round trip; retry_delay remains the backstop for a lost
  /// wake-up. Behind a holder of another library (node-redlock, redsync...), the waiter watches
  /// the key instead (Redis's CLIENT TRACKING): its release, expiry or overwrite wakes it.
  /// Off: plain polling every retry_delay (for servers without pub/sub).
  bool wake_on_release = true;
  /// First come, first served: the lock goes to waiters in arrival order, and newcomers do not
  /// barge in. Needs wake_on_release and a single node (with N nodes each node's queue could
  /// name a different head, and no waiter would reach a quorum).
  bool fair = false;
  /// Redis Cluster only (one redis-cluster:// client): keep this many copies of the lock (odd,
  /// 3 to 15), each in a slot of its own (key_layout.hpp: lock_copy_key), and acquire them as
  /// a Redlock quorum with its fencing tokens, so that the failover of one master, whose
  /// replica may lack the lock, leaves the holder a quorum of copies elsewhere. As with any
  /// Redlock, that margin is only as wide as the grant: a lock won by a bare quorum (a copy
  /// that did not grant, and one that is then lost) can reach a second client. The copies
  /// that grant must sit on distinct masters: a grant made while two of them share one fails
  /// with errc::cluster_error (after it is released). 0 or 1: one copy on the master of the
  /// key's slot. Waiters are woken, not handed the lock, as with any Redlock.
  int copies = 0;
  /// Opt-in reentrancy: the owner id under which this mutex's acquisitions re-enter (empty:
  /// not reentrant). While an acquisition made with owner id X holds the lock in this process,
  /// any further acquisition of the same lock (same key, same nodes: through any mutex object)
  /// with owner id X is granted at once, without a round trip, as a lease of its own on the
  /// same holding: the same owner value and fencing token, one validity (an extend through any
  /// of them extends it), lost() firing for all. The lock is released when the last of them is
  /// released. An id, not a thread: pass a request's or a task's id, so that re-entry works in
  /// async code that hops threads (and threads that share the id are one owner). Only within
  /// one process, and for the same key on the same nodes named the same way (URL, database):
  /// another process with the same id waits as anyone else. Re-entry skips the queue (fair mode
  /// too), since the owner already holds; a release hands the lock to a waiter only once the
  /// count is back at zero. release_after() and detach() on a lease that others still share
  /// only count it out (detach's token is the holding's: releasing it ends the holding for all).
  std::string reentrant{};
};

/// The knobs of a semaphore: TTL, fairness, retry pacing, wake-ups, key prefix. An aggregate,
/// for designated initializers.
struct semaphore_options {
  /// How long the server keeps a permit if its holder vanishes. Valid: 1 ms to 30 days.
  std::chrono::milliseconds ttl{10'000};
  /// First come, first served (see semaphore.hpp) instead of whoever asks when a permit is free.
  bool fair = false;
  /// Between two attempts the caller sleeps a random time in [retry_delay/2, retry_delay], cut
  /// short when a release wakes it. A fair waiter keeps its place in the queue for about two of
  /// these between polls.
  std::chrono::milliseconds retry_delay{50};
  /// A waiter queues itself and a release wakes as many waiters as permits it freed, through
  /// pub/sub (one extra connection per client); retry_delay remains the backstop for a lost
  /// wake-up. Off: plain polling every retry_delay (for servers without pub/sub).
  bool wake_on_release = true;
  /// Deadline for each request to the node. 0 picks min(ttl / 10, the client's request_timeout).
  std::chrono::milliseconds node_timeout{0};
  /// Validity = ttl - time the acquisition took - (ttl * drift_factor + 2 ms). Valid: 0 to 0.5.
  double drift_factor = 0.01;
  /// Prepended to the semaphore's name to form its key.
  std::string key_prefix{};
};

/// Limits checked before any I/O: the longest key (key_prefix + name), in bytes.
inline constexpr std::size_t max_key_bytes = 1024;
/// The longest TTL: 30 days.
inline constexpr std::chrono::milliseconds max_ttl{30LL * 24 * 3600 * 1000};

/// What a wait reports between two attempts (wait_control::on_retry).
struct wait_progress {
  std::chrono::steady_clock::duration waited{};  ///< since the wait began
  int attempts = 0;                              ///< made so far
  std::error_code last_error{};                  ///< why the last one failed
  failure_kind kind = failure_kind::contention;  ///< what that failure means
  const node_results* votes = nullptr;           ///< the last attempt's, per node
  /// The id this wait queues under, as waiters are listed on the server (a mutex's
  /// acquisition id, a semaphore's or read-write lock's owner token); empty for a lock set,
  /// which does not queue. Valid during the call only.
  std::string_view waiter_id{};
};

/// Control over a blocking wait (mutex::acquire_until, semaphore::acquire_until), for callers
/// that must end it from outside, or show what it waits for (the `dlock` command does both).
struct wait_control {
  /// A stop request ends the wait with errc::cancelled, leaving nothing held or queued.
  std::stop_token stop{};
  /// Runs on dlock's I/O thread after each failed attempt that another will follow; returning
  /// false ends the wait with that attempt's error. Keep it short; it must not block.
  std::function<bool(const wait_progress&)> on_retry{};
};

}  // namespace dlock
