// SPDX-License-Identifier: Apache-2.0
// One home for the argument checks that a lock and a semaphore share, made before any I/O:
//   reject_argument        throws std::system_error(invalid_argument) with the text given
//   check_shared_options   the name and key, ttl, retry_delay, node_timeout and drift_factor,
//                          which lock_options and semaphore_options both have (they stay
//                          separate aggregates, so that designated initializers keep working)
// Each primitive checks what only it has (nodes and fairness; the limit) itself.
#pragma once

#include <chrono>
#include <string>
#include <system_error>

#include "dlock/error.hpp"
#include "dlock/options.hpp"

namespace dlock::detail {

[[noreturn]] inline void reject_argument(const std::string& what) {
  throw std::system_error(make_error_code(errc::invalid_argument), what);
}

// `what`: "lock" or "semaphore", for the messages.
template <class Options>
void check_shared_options(const char* what, const std::string& name, const std::string& key,
                          const Options& o) {
  std::string kind(what);
  if (name.empty()) reject_argument("the " + kind + " name is empty");
  if (key.size() > max_key_bytes) {
    reject_argument("the " + kind + " key is longer than dlock::max_key_bytes");
  }
  if (o.ttl < std::chrono::milliseconds(1) || o.ttl > max_ttl) {
    reject_argument("TTL must be 1 ms to 30 days");
  }
  if (o.retry_delay.count() < 0) reject_argument("retry_delay is negative");
  if (o.node_timeout.count() < 0) reject_argument("node_timeout is negative");
  if (!(o.drift_factor >= 0.0 && o.drift_factor <= 0.5)) {
    reject_argument("drift_factor must be 0 to 0.5");
  }
}

}  // namespace dlock::detail
