// SPDX-License-Identifier: Apache-2.0
// algo/retry.hpp: whether to try again, and how long to sleep between two lock rounds.
// Private; no clocks read here.
#pragma once

#include <chrono>
#include <cstdint>
#include <system_error>

namespace dlock::detail {

// Errors that another attempt may cure (contention, nodes down or slow) versus those it cannot
// (credentials, ACLs, wrong key type, a peer that is not Redis).
bool is_retryable(std::error_code ec) noexcept;

// A uniformly random delay in [retry_delay/2, retry_delay] (redsync, node-redlock), so that
// lockers that failed together do not retry together. `random` is any 64-bit random value.
std::chrono::steady_clock::duration jittered_delay(std::chrono::milliseconds retry_delay,
                                                   std::uint64_t random);

// A fresh random value from a per-thread generator (not cryptographic; for jitter only).
std::uint64_t jitter_random();

}  // namespace dlock::detail
