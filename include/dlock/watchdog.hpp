// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/watchdog.hpp: keeping a lease alive automatically.
/// - keep_alive_options:  renewal interval, caps, an optional callback for the loss
///
/// lease::keep_alive(options) starts it (see lease.hpp). Renewals are timers on dlock's I/O
/// thread, not a thread per lock, and renewals due together to one node leave in one write
/// (the connection pipelines). Renewal ends, with no race, when the lease is released: a renewal
/// in flight cannot resurrect the key (extend is compare-and-pexpire) and its answer is ignored.
#pragma once

#include <chrono>
#include <functional>
#include <system_error>

namespace dlock {

/// How lease::keep_alive() renews: the interval, caps, and an optional callback for the loss.
struct keep_alive_options {
  /// Time between renewals; 0 picks ttl / 3, with +-10 % jitter so that many leases taken
  /// together do not renew together. A renewal comes sooner, after half the validity left, when
  /// that is shorter: at keep_alive() on a lease that has little left, and after a manual
  /// extend() to a short TTL (each extend replans the next renewal). After a failed renewal that
  /// may heal (node unreachable, timeout, no quorum) the next try comes after a quarter of the
  /// interval, or again half the validity left if sooner.
  std::chrono::milliseconds interval{0};
  /// Stop renewing once the lease has been held this long since keep_alive() (0: no cap). The
  /// lease then runs out, and lost() fires at the end of its validity.
  std::chrono::milliseconds max_hold{0};
  /// Stop renewing after this many renewals (0: no cap); likewise.
  int max_renewals = 0;
  /// Called once, on dlock's I/O thread, when the lease is lost (the same moment lost() fires),
  /// with lease_lost (the key was gone or not ours) or lease_expired (validity ran out before a
  /// renewal succeeded). Must not block.
  std::function<void(std::error_code)> on_lost{};
};

}  // namespace dlock
