// SPDX-License-Identifier: Apache-2.0
// tests/support/rounds.hpp: a mutex acquisition of at most `rounds` rounds, for the tests of
// what a round, or the last of a few, does. The public API no longer offers such a bound
// (acquire() waits until acquired; try_acquire() is one round), the engine still does.
#pragma once

#include <chrono>
#include <system_error>

#include "access.hpp"
#include "dlock/mutex.hpp"
#include "lock_core.hpp"

namespace dlock::test {

inline lease acquire_rounds(mutex& m, int rounds, node_results* votes, std::error_code& ec) {
  return detail::access::core_of(m)->acquire_blocking(std::chrono::steady_clock::time_point::max(),
                                                      rounds, ec, votes);
}

inline lease acquire_rounds(mutex& m, int rounds, std::error_code& ec) {
  return acquire_rounds(m, rounds, nullptr, ec);
}

}  // namespace dlock::test
