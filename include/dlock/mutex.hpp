// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/mutex.hpp: a distributed mutex over one Redis node or N independent ones (Redlock).
/// - mutex:  Lockable + TimedLockable facade (works with std::unique_lock, std::scoped_lock),
///           lease-returning acquire(), and async_acquire() for any Asio completion token
///
/// One concept for both deployments: with one client it is the classic single-instance lock
/// (SET NX PX + compare-and-delete), with N it runs Redlock's quorum round over all N at once.
/// Thread-safety: a mutex object may be shared by threads of one process; like std::mutex it is
/// not reentrant (a second lock() from the holder's process waits for the first unlock()),
/// unless lock_options::reentrant names an owner: then every acquisition through the object is
/// that owner's and re-enters (threads that share one such object do not exclude each other:
/// give each request or task an object, or an id, of its own); a thread's lock() calls nest and
/// each unlock() undoes one. The
/// Lockable calls keep one lease per thread: unlock() releases the calling thread's own
/// acquisition only, never one another thread made after the caller's lease ran out; as with
/// std::mutex, the thread that locked must be the one that unlocks.
///
/// |      | try_lock()               | unlock()                 | validity ends / lease lost  |
/// |------|--------------------------|--------------------------|-----------------------------|
/// | Free | Held, or false if taken  | no-op                    | -                           |
/// | Held | false (1)                | Free (best effort)       | Lost: the lease's lost()    |
///
/// (1) With lock_options::reentrant, true for the owner that holds it (re-entered).
#pragma once

#include <chrono>
#include <climits>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/detail/deadline.hpp"
#include "dlock/error.hpp"
#include "dlock/export.hpp"
#include "dlock/lease.hpp"
#include "dlock/options.hpp"

namespace dlock {

namespace detail {
class lock_core;
class lockable_holdings;  // what each thread holds through the Lockable calls (src/lockable.hpp)
struct access;  // the library's way in to the private cores (src/access.hpp)
}

/// A distributed mutex over one Redis node or N independent ones (Redlock): lease-returning
/// acquire() and async_acquire(), and the Lockable + TimedLockable calls that std::unique_lock
/// uses. mutex.hpp has its states and what threads may share.
class DLOCK_EXPORT mutex {
 public:
  using clock = std::chrono::steady_clock;  ///< the clock of deadlines and validity

  /// The lock `name` on one node; its key is key_prefix + name. Throws
  /// std::system_error(errc::invalid_argument), before any I/O, for: no nodes, an empty
  /// name, a key longer than max_key_bytes, a key that is another name's companion key
  /// (is_companion_key in dlock/key_layout.hpp, such as "{x}:fence"), a TTL outside
  /// 1 ms..max_ttl, a negative delay or timeout, a drift_factor outside 0..0.5.
  mutex(client node, std::string name, lock_options options = {});
  /// The same over N independent nodes (Redlock). The quorum is N/2 + 1; use N >= 3 odd.
  mutex(std::vector<client> nodes, std::string name, lock_options options = {});
  ~mutex();  ///< releases a lease still held through lock()/try_lock*()

  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;

  /// @name Lease-returning API
  /// @{

  /// Waits until acquired, as lock() and every primitive's acquire() (docs/design.md, "One
  /// meaning per call"): rounds while another holds the lock or nodes are down, woken by the
  /// release or sleeping retry_delay (jittered) between them. Blocks. It fails only with an
  /// error that retrying cannot cure: a node error when every node failed the same way, or when
  /// more nodes than a quorum can spare gave one (wrong_type, auth_failed, no_permission, ...);
  /// or one that lasts (5 rounds in a row over 2 s at least): out_of_memory (nodes at
  /// maxmemory), lease_expired (a TTL shorter than a round trip).
  /// For one round use try_acquire(), for a bound acquire_until().
  lease acquire(std::error_code& ec);
  /// As above; `nodes`, when not null, gets the last round's votes.
  lease acquire(node_results* nodes, std::error_code& ec);
  lease acquire();  ///< as above; throws std::system_error on failure
  /// One round, no retry.
  lease try_acquire(std::error_code& ec);
  /// One round, no retry; `nodes`, when not null, gets its votes.
  lease try_acquire(node_results* nodes, std::error_code& ec);
  /// One round: an empty lease when another holds the lock or the nodes did not answer in
  /// time; throws std::system_error for errors that retrying cannot cure.
  lease try_acquire();
  /// Rounds until acquired or `d` has passed (or until `tp`, of any clock, converted once on
  /// entry): an empty lease when the time ran out; throws like try_acquire(). A wait or deadline
  /// too far to count (over 100 years: duration::max(), time_point::max()) is none: it waits
  /// as acquire() does, and throws what ends such a wait.
  template <class Rep, class Period>
  lease try_acquire_for(const std::chrono::duration<Rep, Period>& d) {
    return acquire_or_throw(detail::deadline_after(d));
  }
  /// As above, until `tp`.
  template <class Clock, class Duration>
  lease try_acquire_until(const std::chrono::time_point<Clock, Duration>& tp) {
    return acquire_or_throw(detail::deadline_at(tp));
  }
  /// Rounds until acquired or `deadline` (a steady_clock time point) passes.
  lease acquire_until(clock::time_point deadline, std::error_code& ec);
  /// As above; `nodes`, when not null, gets the last round's votes.
  lease acquire_until(clock::time_point deadline, node_results* nodes, std::error_code& ec);
  /// The same, ended early by `control` (a stop request: cancelled), which also hears of each
  /// failed round. Waits in the queue like any waiter, so a release hands the lock over.
  lease acquire_until(clock::time_point deadline, const wait_control& control, node_results* nodes,
                      std::error_code& ec);

  /// A lease for a token that another process obtained (`dlock acquire` prints it), so this one
  /// can extend or release it. Nothing is checked until then: with a wrong token, release()
  /// returns not_held and extend() lease_lost, and the real holder's key is untouched. The
  /// validity is unknown, so valid_until() starts at now.
  lease adopt(std::string token, std::uint64_t fencing_token = 0);

  /// Asynchronous acquire() (waits until acquired): signature void(std::error_code, lease).
  /// Like every async wait of dlock, it honours Asio's per-operation cancellation (the
  /// handler's cancellation slot, any type): the wait ends with errc::cancelled, and what its
  /// attempt in flight won is given back. As Asio requires of any slot, emit the signal on the
  /// handler's executor, or bind the slot with asio::bind_cancellation_slot from that executor:
  /// a slot is not thread-safe.
  template <class CompletionToken>
  auto async_acquire(CompletionToken&& token) {
    return detail::initiate_stoppable<void(std::error_code, lease)>(
        std::forward<CompletionToken>(token), get_executor(),
        [this](detail::unique_function<void(std::error_code, lease)> h, std::stop_token stop) {
          start_acquire(clock::time_point::max(), INT_MAX, std::move(h), nullptr, std::move(stop));
        });
  }
  /// Asynchronous acquire_until(): retries until acquired or `deadline`.
  template <class CompletionToken>
  auto async_acquire_until(clock::time_point deadline, CompletionToken&& token) {
    return detail::initiate_stoppable<void(std::error_code, lease)>(
        std::forward<CompletionToken>(token), get_executor(),
        [this, deadline](detail::unique_function<void(std::error_code, lease)> h,
                         std::stop_token stop) {
          start_acquire(deadline, INT_MAX, std::move(h), nullptr, std::move(stop));
        });
  }
  /// @}

  /// @name Lockable / TimedLockable
  /// One lease per thread, kept by the mutex (see current_lease()).
  /// @{

  /// Waits until acquired (retrying while held by another or while nodes are down). Throws
  /// std::system_error only for what ends acquire() (auth, ACL, wrong type, protocol; lasting
  /// out_of_memory or lease_expired).
  void lock();
  /// One round: false when not acquired (last_error() says why).
  [[nodiscard]] bool try_lock();
  /// Retries until acquired or `d` has passed.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return lock_until(detail::deadline_after(d));
  }
  /// Retries until acquired or `tp` passes; a deadline of another clock is converted to
  /// steady_clock once, on entry. One too far to count (over 100 years) waits as lock() does.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& tp) {
    return lock_until(detail::deadline_at(tp));
  }
  /// Releases the lease the calling thread took by lock()/try_lock*(). Never throws; see
  /// last_error(): not_held when this thread holds nothing, lease_expired (or lease_lost) when
  /// its lease had run out (or was lost) before, so that another owner may have held the lock
  /// meanwhile, quorum_not_reached when a quorum of nodes may still hold the key until it expires.
  void unlock() noexcept;

  /// The lease the calling thread holds through the Lockable API, or nullptr. Valid until this
  /// thread's unlock().
  const lease* current_lease() const noexcept;
  /// The error of the calling thread's last Lockable call (try_lock's reason, unlock's
  /// failure), or none.
  std::error_code last_error() const noexcept;
  /// The per-node votes of the calling thread's last Lockable round.
  node_results last_results() const;
  /// @}

  /// The key in Redis: key_prefix + name.
  const std::string& key() const noexcept;
  std::size_t node_count() const noexcept;  ///< how many nodes it runs on (1: single instance)
  /// dlock's I/O executor, where async completions run unless the handler names another.
  detail::io_executor get_executor() const noexcept;

 private:
  friend struct detail::access;

  // The type-erased core of the async API: up to `attempts` rounds until `deadline`.
  void start_acquire(clock::time_point deadline, int attempts,
                     detail::unique_function<void(std::error_code, lease)> handler,
                     node_results* nodes = nullptr, std::stop_token stop = {});
  bool lock_until(clock::time_point deadline);
  lease acquire_or_throw(clock::time_point deadline);
  lease acquire_blocking(clock::time_point deadline, int attempts, std::error_code& ec,
                         node_results* nodes);

  std::shared_ptr<detail::lock_core> core_;
  // Declared after core_, so that the threads' leases are released before the core goes.
  std::unique_ptr<detail::lockable_holdings> holdings_;
};

}  // namespace dlock
