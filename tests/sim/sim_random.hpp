// SPDX-License-Identifier: Apache-2.0
// tests/sim/sim_random.hpp: the simulator's one source of randomness.
//   splitmix64  expands a seed into well-mixed 64-bit words (seeds xoshiro, derives sub-seeds)
//   rng         xoshiro256** with the uniform helpers the simulator needs: below, between,
//               chance, pick
// Written out here rather than taken from <random>: the std:: distributions' output is
// implementation-defined, and a seed must replay the very same schedule on every toolchain.
// Not thread-safe: one rng per simulated world.
#pragma once

#include <cstdint>
#include <vector>

namespace dlock::sim {

inline std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class rng {
 public:
  explicit rng(std::uint64_t seed) noexcept {
    for (auto& word : s_) word = splitmix64(seed);
  }

  std::uint64_t next() noexcept {
    std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n); 0 when n is 0. Rejecting the draws below 2^64 mod n keeps it exact.
  std::uint64_t below(std::uint64_t n) noexcept {
    if (n == 0) return 0;
    std::uint64_t threshold = (0 - n) % n;
    for (;;) {
      std::uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

  // Uniform in [lo, hi], both included; lo when hi < lo.
  std::int64_t between(std::int64_t lo, std::int64_t hi) noexcept {
    if (hi <= lo) return lo;
    return lo + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(hi - lo) + 1));
  }

  // True with probability p (53 bits of resolution; IEEE doubles make it portable).
  bool chance(double p) noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }

  template <class T>
  const T& pick(const std::vector<T>& from) noexcept {
    return from[below(from.size())];
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

}  // namespace dlock::sim
