// dlock/lease.hpp: proof of holding a lock.
//   lease  move-only value: owner token, fencing token, validity, loss signal; releases the
//          lock (best effort) when destroyed while still held
// A lease may be read from any thread; release() and extend() are safe to call concurrently
// with reads and with each other.
//
// |       | extend()                         | release()               | validity ends / lost  |
// | Held  | Held, longer validity; or Lost   | Released                | Lost: lost() fires    |
// | Lost  | errc::lease_lost                 | errc::not_held (no-op)  | -                     |
// | Empty | errc::not_held                   | no-op                   | -                     |
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <system_error>

#include "dlock/watchdog.hpp"

namespace dlock {

class lease;
namespace detail {
class lease_owner;
struct lease_state;
lease make_lease(std::shared_ptr<lease_owner> owner, std::shared_ptr<lease_state> state) noexcept;
}  // namespace detail

class lease {
 public:
  lease() noexcept = default;  // empty: holds nothing
  lease(lease&&) noexcept = default;
  lease& operator=(lease&& other) noexcept;
  lease(const lease&) = delete;
  lease& operator=(const lease&) = delete;
  // Releases the lock if still held: blocking up to the node timeout on a user thread,
  // fire-and-forget on dlock's I/O thread. Never throws.
  ~lease();

  // True when this lease was granted and has not been released (it may still have expired:
  // check remaining() or lost()).
  explicit operator bool() const noexcept;

  // The lock's key, as stored in Redis (prefix included).
  const std::string& key() const noexcept;
  // The random owner id stored as the key's value.
  const std::string& value() const noexcept;
  // Strictly increasing per lock name across all acquisitions (see docs/guarantees.md); give it
  // to the protected resource with each write so it can refuse stale holders.
  std::uint64_t fencing_token() const noexcept;
  // Until when the holder may assume exclusivity, on steady_clock (TTL minus the time the
  // acquisition took minus the drift allowance).
  std::chrono::steady_clock::time_point valid_until() const noexcept;
  // valid_until() - now, or zero when past.
  std::chrono::milliseconds remaining() const noexcept;
  // Stop is requested when the lease is known lost: an extend found the key gone or not ours,
  // or validity ran out before an extend succeeded. Never requested by a normal release.
  std::stop_token lost() const noexcept;

  // Resets the key's expiry to `ttl` (default: the lock's TTL) on a quorum of nodes, within the
  // remaining validity. Blocks. On success validity restarts from the extend's start.
  // Fails with lease_lost (the lease is then lost and lost() fires), lease_expired,
  // quorum_not_reached (nodes unreachable; the lease may still be held), not_held.
  std::error_code extend() noexcept;
  std::error_code extend(std::chrono::milliseconds ttl) noexcept;

  // Renews the lease in the background until it is released, lost, or a cap in `options` is
  // reached (see watchdog.hpp). Returns at once. Calling it again replaces the earlier renewal.
  // Returns not_held for an empty or released lease.
  std::error_code keep_alive(keep_alive_options options = {}) noexcept;

  // Deletes the key on every node where it is still ours (compare-and-delete). Blocks up to
  // the node timeout; never throws. Returns not_held when no node had it (expired or released
  // before), or the error that kept a node from answering. The lease is empty afterwards.
  std::error_code release() noexcept;

  // Gives up the lease without releasing the lock (the key stays until it expires); returns
  // the owner token so another process can release it (see `dlock release`).
  std::string detach() noexcept;

 private:
  friend lease detail::make_lease(std::shared_ptr<detail::lease_owner>,
                                  std::shared_ptr<detail::lease_state>) noexcept;
  lease(std::shared_ptr<detail::lease_owner> owner,
        std::shared_ptr<detail::lease_state> state) noexcept;

  std::shared_ptr<detail::lease_owner> owner_;
  std::shared_ptr<detail::lease_state> state_;
};

}  // namespace dlock
