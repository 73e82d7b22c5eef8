// SPDX-License-Identifier: Apache-2.0
// algo/transaction_backoff.hpp: how long an optimistic transaction waits after a conflict.
// Private; no clocks read here.
#pragma once

#include <chrono>
#include <cstdint>

namespace dlock::detail {

// The sleep after the `aborted`-th aborted attempt (1-based): random in [d/2, d] with
// d = min(base * 2^(aborted-1), cap). Doubling spreads writers that keep colliding on one key;
// the jitter keeps two of them from colliding again in lock-step. `random` is any 64-bit value.
std::chrono::steady_clock::duration transaction_backoff(std::chrono::milliseconds base,
                                                        std::chrono::milliseconds cap,
                                                        int aborted, std::uint64_t random);

}  // namespace dlock::detail
