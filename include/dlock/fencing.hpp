// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/fencing.hpp: the resource's side of fencing tokens, which stops a holder that lost its
/// lease without knowing (paused, partitioned) from writing after the next holder.
/// - fence_checker:  in-process: admits tokens not older than the highest admitted so far
/// - fenced_set:     for data kept in Redis: SET only if the token is not older than any seen
///
/// For SQL, keep the token in the row: `UPDATE t SET v = $v, fence = $token`
///                                      `WHERE id = $id AND fence <= $token`
/// and treat "0 rows updated" as a stale holder (docs/guarantees.md).
/// fence_checker is thread-safe; fenced_set is as thread-safe as dlock::client.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "dlock/client.hpp"
#include "dlock/export.hpp"

namespace dlock {

/// The in-process side of fencing: admits tokens not older than the highest admitted so far.
/// Thread-safe.
class DLOCK_EXPORT fence_checker {
 public:
  /// True, and remembered, when `token` >= every token admitted before; false for a stale one.
  /// Equal tokens pass, so one holder may write several times.
  bool admit(std::uint64_t token) noexcept {
    std::uint64_t seen = highest_.load(std::memory_order_relaxed);
    while (token >= seen) {
      if (highest_.compare_exchange_weak(seen, token, std::memory_order_acq_rel)) return true;
    }
    return false;
  }
  /// The highest token admitted so far; 0 before the first.
  std::uint64_t highest() const noexcept { return highest_.load(std::memory_order_acquire); }

 private:
  std::atomic<std::uint64_t> highest_{0};
};

/// Atomically, on the server: if `token` >= the highest token recorded for `key` (kept in
/// high_fence_key(key): "{key}:high-fence" for a plain key), SET key value, record the token
/// and return true; else return false and leave the key alone. Blocks up to the client's
/// request timeout; errors go to ec.
DLOCK_EXPORT bool fenced_set(client& redis, std::string_view key, std::string_view value,
                             std::uint64_t token, std::error_code& ec);

}  // namespace dlock
