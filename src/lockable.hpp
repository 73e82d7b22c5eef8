// SPDX-License-Identifier: Apache-2.0
// lockable.hpp: what the Lockable facades (mutex, shared_mutex) share. Private.
//   holding            what one thread holds through the Lockable calls, and how its last call went
//   lockable_holdings  one holding per thread: what lock() records, unlock() releases and
//                      current_lease()/last_error() read
// Thread-safe: one mutex guards the holdings; a release, which may block, runs outside it.
#pragma once

#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dlock/error.hpp"
#include "dlock/lease.hpp"

namespace dlock::detail {

// Each facade uses the fields it has: a mutex `nested` (lock_options::reentrant) and
// `last_results`, a shared_mutex `shared`.
struct holding {
  lease held;
  std::vector<lease> nested;  // re-entries on `held`, innermost last
  bool shared = false;        // `held` is a reader's
  std::error_code last_error;
  node_results last_results;  // the per-node votes of the last round
};

class lockable_holdings {
 public:
  // Records a lock call for the calling thread: its error and votes become the last call's, and
  // `l`, when not empty, is held (as a reader's when `shared`). A lease with the owner value of
  // the one held is a re-entry and nests on it; any other replaces what was held, which is
  // released.
  void remember(lease l, std::error_code ec, node_results results, bool shared = false) noexcept;
  // Whether the calling thread holds nothing; if it holds something, its last error becomes
  // invalid_argument (for a facade that refuses to lock again, as std::shared_mutex does).
  bool holds_nothing();
  // unlock(): releases the calling thread's innermost re-entry, else what it holds if it holds
  // it the way `shared` says, and records the outcome as its last error (not_held when there
  // was nothing to release).
  void unlock(bool shared = false) noexcept;

  // The calling thread's lease, or nullptr; valid until that thread's next unlock().
  const lease* current() const noexcept;
  std::error_code last_error() const noexcept;  // of the calling thread's last call, or none
  node_results last_results() const;             // of the calling thread's last round

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::thread::id, holding> by_thread_;
};

}  // namespace dlock::detail
