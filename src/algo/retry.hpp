// algo/retry.hpp: how long to sleep between two lock rounds. Private; no clocks read here.
#pragma once

#include <chrono>
#include <cstdint>

namespace dlock::detail {

// A uniformly random delay in [retry_delay/2, retry_delay] (redsync, node-redlock), so that
// lockers that failed together do not retry together. `random` is any 64-bit random value.
std::chrono::steady_clock::duration jittered_delay(std::chrono::milliseconds retry_delay,
                                                   std::uint64_t random);

// A fresh random value from a per-thread generator (not cryptographic; for jitter only).
std::uint64_t jitter_random();

}  // namespace dlock::detail
