// SPDX-License-Identifier: Apache-2.0
#include "algo/retry.hpp"

#include <random>

#include "dlock/error.hpp"

namespace dlock::detail {

bool is_retryable(std::error_code ec) noexcept {
  if (ec.category() != category()) return false;
  switch (static_cast<errc>(ec.value())) {
    case errc::not_acquired:
    case errc::quorum_not_reached:
    case errc::lease_expired:
    case errc::node_unreachable:
    case errc::timeout:
    case errc::connection_lost:
    case errc::out_of_memory:
      return true;
    default:
      return false;
  }
}

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
