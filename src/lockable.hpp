// SPDX-License-Identifier: Apache-2.0
// lockable.hpp: what the Lockable facades (mutex, shared_mutex) share. Private.
//   release_for_unlock  releases the lease an unlock() finds, and says why it did not count
#pragma once

#include <chrono>
#include <system_error>

#include "dlock/error.hpp"
#include "dlock/lease.hpp"

namespace dlock::detail {

// not_held for an empty lease; else the release's result, where "not ours" becomes lease_lost
// or lease_expired when the lease was lost or ran out before. Judged before the release: once
// it has run, "not ours" could not tell a lease that ran out (another owner may have held the
// lock meanwhile) from one released twice.
inline std::error_code release_for_unlock(lease& held) noexcept {
  if (!held) return errc::not_held;
  bool lost = held.lost().stop_requested();
  bool expired = held.remaining() == std::chrono::milliseconds::zero();
  std::error_code ec = held.release();
  if (ec == errc::not_held && lost) ec = errc::lease_lost;
  if (ec == errc::not_held && expired) ec = errc::lease_expired;
  return ec;
}

}  // namespace dlock::detail
