// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/lease.hpp: proof of holding a lock.
/// - lease:  move-only value: owner token, fencing token, validity, loss signal; releases the
///           lock (best effort) when destroyed while still held; async_release() and
///           async_extend() for any Asio completion token
///
/// A lease may be read from any thread; release(), extend() and keep_alive() are safe to call
/// concurrently with reads and with each other (a released lease keeps its innards until it is
/// destroyed or assigned to, and reads as empty). Destruction, assignment, async_release(),
/// detach() and release_after() change the object itself, so they must not race with other
/// calls on it.
///
/// |       | extend()                         | release()               | validity ends / lost  |
/// |-------|----------------------------------|-------------------------|-----------------------|
/// | Held  | Held, longer validity; or Lost   | Empty                   | Lost: lost() fires    |
/// | Lost  | errc::lease_lost                 | errc::not_held; Empty   | -                     |
/// | Empty | errc::not_held                   | no-op (async: not_held) | -                     |
/// Empty: default-constructed, moved from, released, or detached.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <system_error>
#include <utility>

#include "dlock/detail/async.hpp"
#include "dlock/detail/unique_function.hpp"
#include "dlock/export.hpp"
#include "dlock/watchdog.hpp"

namespace dlock {

class lease;
namespace detail {
class lease_owner;
struct lease_state;
lease make_lease(std::shared_ptr<lease_owner> owner, std::shared_ptr<lease_state> state) noexcept;
// Takes the owner and state out of `l`, which is left empty (nothing is released).
void split_lease(lease& l, std::shared_ptr<lease_owner>& owner,
                 std::shared_ptr<lease_state>& state) noexcept;
}  // namespace detail

/// Proof of holding a lock, or a semaphore's permits: a move-only value with the owner token,
/// the fencing token, the validity and the loss signal. Releases what it holds (best effort)
/// when destroyed. lease.hpp has its states and what may run concurrently.
class DLOCK_EXPORT lease {
 public:
  lease() noexcept = default;         ///< empty: holds nothing
  lease(lease&&) noexcept = default;  ///< takes over what the other holds; it is left empty
  /// Releases what this lease holds, as release() does (on dlock's I/O thread: started, not
  /// awaited), then takes `other`'s.
  lease& operator=(lease&& other) noexcept;
  lease(const lease&) = delete;
  lease& operator=(const lease&) = delete;
  /// Releases the lock if still held, as release() does: blocking up to the node timeout on a
  /// user thread, started and not awaited on dlock's I/O thread. Never throws.
  ~lease();

  /// True when this lease was granted and has not been released or detached (it may still have
  /// expired: check remaining() or lost()). An empty lease's accessors return "", 0, the epoch,
  /// zero and a stop_token that never fires.
  explicit operator bool() const noexcept;

  /// The lock's key, as stored in Redis (prefix included).
  const std::string& key() const noexcept;
  /// The random owner id stored as the key's value.
  const std::string& value() const noexcept;
  /// Strictly increasing per lock name across all acquisitions (see docs/guarantees.md); give it
  /// to the protected resource with each write so it can refuse stale holders.
  std::uint64_t fencing_token() const noexcept;
  /// Until when the holder may assume exclusivity, on steady_clock (TTL minus the time the
  /// acquisition took minus the drift allowance).
  std::chrono::steady_clock::time_point valid_until() const noexcept;
  /// valid_until() - now, or zero when past.
  std::chrono::milliseconds remaining() const noexcept;
  /// The loss signal: stop is requested when the lease is known lost (an extend found the key
  /// gone or not ours, or validity ran out before an extend succeeded), never by a normal release.
  /// A lock's lease under keep_alive() also watches its key (Redis 6 or later; not on a
  /// cluster or under Sentinel): another client deleting or overwriting it fires the signal
  /// within about a round trip, not at the next renewal. On Redlock, where the key is taken
  /// node by node, within a quarter of the keep-alive interval after the node that completes a
  /// majority. A connection that dropped meanwhile ends its watch until the next renewal.
  std::stop_token lost() const noexcept;

  /// Pushes the key's expiry out to at least `ttl` from now (default: the lock's TTL) on a
  /// quorum of nodes, within the remaining validity; it never moves the expiry earlier, so that
  /// an extend delayed in the network cannot cut back a later one. Blocks. On success validity
  /// restarts from the extend's start, for `ttl`. (To let go at a set time: release_after.)
  /// Fails with lease_lost (the lease is then lost and lost() fires), lease_expired,
  /// quorum_not_reached (nodes unreachable; the lease may still be held), not_held, and for a
  /// lock in copies (lock_options::copies) cluster_error when two of its copies now sit on one
  /// master (the lease keeps its old validity).
  std::error_code extend() noexcept;
  std::error_code extend(std::chrono::milliseconds ttl) noexcept;  ///< the same, for `ttl`
  /// Asynchronous extend(): signature void(std::error_code), same outcomes. The lease keeps its
  /// state; do not move or destroy it before the completion if you still need it afterwards.
  template <class CompletionToken>
  auto async_extend(CompletionToken&& token) {
    return async_extend(default_ttl(), std::forward<CompletionToken>(token));
  }
  /// The same, for `ttl`.
  template <class CompletionToken>
  auto async_extend(std::chrono::milliseconds ttl, CompletionToken&& token) {
    return detail::initiate<void(std::error_code)>(
        std::forward<CompletionToken>(token), get_executor(),
        [this, ttl](detail::unique_function<void(std::error_code)> h) {
          start_extend(ttl, std::move(h));
        });
  }

  /// Renews the lease in the background until it is released, lost, or a cap in `options` is
  /// reached (see watchdog.hpp). Returns at once. Calling it again replaces the earlier renewal.
  /// Returns not_held for an empty or released lease.
  std::error_code keep_alive(keep_alive_options options = {}) noexcept;

  /// Deletes the key on every node where it is still ours (compare-and-delete). Blocks up to
  /// the node timeout; never throws. Returns not_held when no node had it (expired before), or
  /// the error that kept a node from answering. The lease reads as empty from the moment the
  /// call starts; a second release(), concurrent or later, is a no-op that returns success at
  /// once (it does not wait for the first). On dlock's I/O thread (in a completion handler) it
  /// cannot wait: it starts the release and returns would_block_io_thread at once, meaning
  /// "sent, outcome not awaited" (use async_release to learn the outcome). Move-assigning over
  /// a held lease and destroying one release it this way too.
  std::error_code release() noexcept;
  /// Asynchronous release(): signature void(std::error_code), same outcomes; does not block.
  /// The lease is empty as soon as the operation starts (for a callback or use_future, before
  /// async_release returns); the release itself outlives the lease and the lock object. Unlike
  /// release(), an empty lease (default, moved from, released before) completes with not_held.
  /// The completion runs on the handler's associated executor (by default dlock's I/O thread).
  template <class CompletionToken>
  auto async_release(CompletionToken&& token) {
    return detail::initiate<void(std::error_code)>(
        std::forward<CompletionToken>(token), get_executor(),
        [this](detail::unique_function<void(std::error_code)> h) { start_release(std::move(h)); });
  }

  /// Gives up the lease without releasing the lock (the key stays until it expires); returns
  /// the owner token so another process can release it (see `dlock release`).
  std::string detach() noexcept;

  /// Lets the lock go `ttl` from now instead of at once: stops the renewals, sets the key's
  /// remaining life to exactly `ttl` where it is still ours, under a new value that no renewal
  /// or extend still in the network matches (so none can move that expiry), and leaves it to
  /// expire; the lease is empty afterwards. For work that must not run again too soon elsewhere
  /// (a job scheduled on several hosts: ShedLock's lockAtLeastFor, `dlock run --min-hold`).
  /// ttl <= 0 is release(). Blocks up to the node timeout; on failure (the lease was lost, a
  /// node did not answer) the key is released where it was not settled yet (where it was, it
  /// expires after `ttl`), and the error returned. On dlock's I/O thread it
  /// returns would_block_io_thread and changes nothing.
  std::error_code release_after(std::chrono::milliseconds ttl) noexcept;

 private:
  friend lease detail::make_lease(std::shared_ptr<detail::lease_owner>,
                                  std::shared_ptr<detail::lease_state>) noexcept;
  friend void detail::split_lease(lease&, std::shared_ptr<detail::lease_owner>&,
                                  std::shared_ptr<detail::lease_state>&) noexcept;
  lease(std::shared_ptr<detail::lease_owner> owner,
        std::shared_ptr<detail::lease_state> state) noexcept;

  // The type-erased cores of the async API. The executor is the owner's I/O executor, or the
  // runtime's for an empty lease.
  detail::io_executor get_executor() const noexcept;
  std::chrono::milliseconds default_ttl() const noexcept;
  void start_release(detail::unique_function<void(std::error_code)> handler);
  void start_extend(std::chrono::milliseconds ttl,
                    detail::unique_function<void(std::error_code)> handler);

  std::shared_ptr<detail::lease_owner> owner_;
  std::shared_ptr<detail::lease_state> state_;
};

}  // namespace dlock
