#include "algo/retry.hpp"

#include <random>

namespace dlock::detail {

std::chrono::steady_clock::duration jittered_delay(std::chrono::milliseconds retry_delay,
                                                   std::uint64_t random) {
  auto full = std::chrono::duration_cast<std::chrono::microseconds>(retry_delay).count();
  if (full <= 0) return {};
  auto half = full / 2;
  auto span = static_cast<std::uint64_t>(full - half) + 1;
  return std::chrono::microseconds(half + static_cast<long long>(random % span));
}

std::uint64_t jitter_random() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return generator();
}

}  // namespace dlock::detail
