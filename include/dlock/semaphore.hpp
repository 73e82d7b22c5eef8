// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/semaphore.hpp: a distributed counting semaphore on one Redis node.
/// - semaphore_options:  TTL, fairness, retry pacing, wake-ups, key prefix (an aggregate)
/// - semaphore:          at most `limit` permits out at once; acquire/try_acquire/_for/_until in
///                       std::counting_semaphore's names, each returning a permit as a dlock::lease
///
/// Every permit is a lease: its own random id (value()), a fencing token, a validity on
/// steady_clock, the loss signal lost(), extend() (refresh) and keep_alive() (auto-refresh), and
/// release on destruction. Expiry is judged by the server's clock only (Lua `TIME`), so a client
/// whose clock is wrong can neither take a permit that is not free nor keep one past its TTL.
/// Thread-safety: a semaphore object may be shared by the threads of a process; each acquisition
/// returns its own permit.
///
/// Two variants, chosen by `fair` (each acquire is one atomic Lua script):
/// - unfair:  one sorted set of holders scored by their expiry; whoever asks when a permit is
///            free gets it. Cheapest.
/// - fair:    first come, first served: a counter hands out tickets, an owner set ranks by
///            ticket, a timeouts set expires holders (ZINTERSTORE ... WEIGHTS 0 1 drops them from
///            both). A blocking acquire keeps its place in the queue while it waits; a later
///            arrival never overtakes it. The fencing token comes from a separate counter, drawn
///            at the grant: with limit > 1, waiters may be granted out of ticket order.
///
/// All processes using one name must agree on `fair` and on `limit` (they are not stored).
///
/// Waiting does not poll (wake_on_release): a waiter that will try again queues itself with its
/// client's pub/sub inbox, and a release wakes as many queued waiters as permits it gave back,
/// the first live ones in queue order, so a freed permit passes on within about a round trip.
/// retry_delay remains the backstop for a lost wake-up and for a holder that expired instead of
/// releasing (expiry wakes nobody).
///
/// Only one node: a majority quorum over N independent nodes cannot bound the holders of a
/// semaphore the way it bounds a mutex. With limit L, L + 1 holders can each hold a majority
/// while no node counts more than L (N = 3, L = 2: {1,2}, {2,3}, {1,3}); a safe quorum must exceed
/// N * L / (L + 1) nodes, nearly all of them. Use one primary (with replicas or Sentinel for
/// availability) and accept its failover caveats.
///
/// When fewer permits are free than asked for, acquire() and try_acquire_for/until wait
/// (retrying), try_acquire() returns an empty lease at once. Each permit then lives like this:
/// |       | extend() (refresh)              | release() / destruction | TTL ends (server clock) |
/// |-------|---------------------------------|-------------------------|-------------------------|
/// | Held  | Held, expiry = server now + ttl | Free: the slot returns  | Lost (1)                |
/// | Lost  | lease_lost; never added back    | not_held (no-op)        | -                       |
/// | Empty | not_held                        | no-op                   | -                       |
///
/// (1) lost() fires at the next refresh or watchdog renewal.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
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
}

/// A distributed counting semaphore on one Redis node: at most `limit` permits out at once,
/// each acquisition a dlock::lease. semaphore.hpp has its variants, the permits' states and
/// what threads may share.
class DLOCK_EXPORT semaphore {
 public:
  using clock = std::chrono::steady_clock;  ///< the clock of deadlines and validity

  /// `limit` permits under key_prefix + name. Throws std::system_error(errc::invalid_argument),
  /// before any I/O, for limit <= 0, an empty name, a key longer than max_key_bytes, a TTL outside
  /// 1 ms..max_ttl, a negative delay or timeout, a drift_factor outside 0..0.5.
  semaphore(client node, std::string name, std::ptrdiff_t limit, semaphore_options options = {});
  ~semaphore();  ///< permits already out stay valid: each keeps what it needs
  semaphore(const semaphore&) = delete;
  semaphore& operator=(const semaphore&) = delete;

  /// @name Acquiring
  /// Every acquiring call takes `permits` (1..limit) at once, as one permit lease that releases
  /// them all; permits outside 1..limit fail with invalid_argument before any I/O. On failure the
  /// lease is empty. Errors: not_acquired (not enough free permits), lease_expired (the attempt
  /// took longer than the TTL allows), timeout / connection_lost / node_unreachable, and errors
  /// that retrying cannot cure (wrong_type, no_permission, auth_failed ...).
  /// @{

  /// Waits until the permits are granted, like std::counting_semaphore::acquire: attempts
  /// without limit, sleeping retry_delay (jittered, or until woken) between them. Blocks. Fails
  /// only with invalid_argument or an error that waiting cannot cure (wrong_type, no_permission,
  /// auth_failed ...); not_acquired, timeouts and unreachable nodes are waited out. For a
  /// bounded wait use try_acquire_for/until or acquire_until.
  lease acquire(std::error_code& ec);
  /// The same for `permits` at once.
  lease acquire(std::ptrdiff_t permits, std::error_code& ec);
  /// As above; throws std::system_error on failure.
  lease acquire(std::ptrdiff_t permits = 1);
  /// Attempts until acquired or `deadline` (steady_clock) passes. Blocks up to the deadline plus
  /// one node_timeout.
  lease acquire_until(clock::time_point deadline, std::error_code& ec);
  /// The same for `permits` at once.
  lease acquire_until(clock::time_point deadline, std::ptrdiff_t permits, std::error_code& ec);
  /// The same, ended early by `control` (a stop request: cancelled), which also hears of each
  /// failed attempt.
  lease acquire_until(clock::time_point deadline, std::ptrdiff_t permits,
                      const wait_control& control, std::error_code& ec);

  /// One attempt, no waiting (a fair semaphore does not queue). Blocks for one round trip.
  lease try_acquire(std::error_code& ec);
  /// The same for `permits` at once.
  lease try_acquire(std::ptrdiff_t permits, std::error_code& ec);
  /// As above. Returns an empty lease when the permits were not free or the node did not answer
  /// in time; throws std::system_error for invalid_argument and errors retrying cannot cure.
  lease try_acquire(std::ptrdiff_t permits = 1);
  /// Waits up to `d` (or until `tp`, of any clock, converted to steady_clock once on entry).
  /// Returns an empty lease when the deadline passed; throws like try_acquire(). A wait or
  /// deadline too far to count (over 100 years: duration::max(), time_point::max()) is none: it
  /// waits as acquire() does, and throws what ends such a wait.
  template <class Rep, class Period>
  lease try_acquire_for(const std::chrono::duration<Rep, Period>& d, std::ptrdiff_t permits = 1) {
    return wait_until(detail::deadline_after(d), permits);
  }
  /// As above, until `tp`.
  template <class Clock, class Duration>
  lease try_acquire_until(const std::chrono::time_point<Clock, Duration>& tp,
                          std::ptrdiff_t permits = 1) {
    return wait_until(detail::deadline_at(tp), permits);
  }
  /// @}

  /// Gives a permit back early: permit.release() after checking that it came from this
  /// semaphore, by key (else invalid_argument, and the permit is untouched). not_held when the
  /// permit is empty or had already expired: only its own entry is removed, never another
  /// holder's. Blocks up to node_timeout. Never throws. (Dropping the permit does the same.)
  std::error_code release(lease& permit) noexcept;

  /// Asynchronous acquire(): signature void(std::error_code, lease); any completion token. The
  /// handler runs on its associated executor (by default dlock's I/O thread: do not block there).
  /// Its cancellation slot ends the wait with errc::cancelled, nothing held; emit the signal on
  /// the handler's executor, as Asio requires (mutex::async_acquire).
  template <class CompletionToken>
  auto async_acquire(CompletionToken&& token) {
    return async_acquire(1, std::forward<CompletionToken>(token));
  }
  /// The same for `permits` at once.
  template <class CompletionToken>
  auto async_acquire(std::ptrdiff_t permits, CompletionToken&& token) {
    return detail::initiate_stoppable<void(std::error_code, lease)>(
        std::forward<CompletionToken>(token), get_executor(),
        [this, permits](detail::unique_function<void(std::error_code, lease)> h,
                        std::stop_token stop) {
          start_acquire(permits, std::move(h), std::move(stop));
        });
  }

  /// key_prefix + name (also each permit's key()). The Redis keys come from it and share its
  /// hash slot: semaphore_keys_for(key, fair) in dlock/key_layout.hpp, such as
  /// {key}:sem:holders or {key}:fairsem:owners for a key without a hash tag.
  const std::string& key() const noexcept;
  std::ptrdiff_t limit() const noexcept;              ///< how many permits may be out at once
  const semaphore_options& options() const noexcept;  ///< the options it was created with
  /// dlock's I/O executor, where async completions run unless the handler names another.
  detail::io_executor get_executor() const noexcept;

 private:
  // The type-erased core of async_acquire: attempts until granted or a fatal error.
  void start_acquire(std::ptrdiff_t permits,
                     detail::unique_function<void(std::error_code, lease)> handler,
                     std::stop_token stop = {});
  lease wait_until(clock::time_point deadline, std::ptrdiff_t permits);

  std::shared_ptr<detail::semaphore_core> core_;
};

}  // namespace dlock
