// SPDX-License-Identifier: Apache-2.0
#include "algo/retry.hpp"

#include <algorithm>
#include <random>

#include "algo/quorum_round.hpp"
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

std::error_code endless_wait_rule::gives_up_on(std::error_code ec, const node_results& votes,
                                               std::chrono::steady_clock::time_point now) noexcept {
  if (!is_retryable(ec)) return ec;
  std::error_code lasting;
  if (ec == errc::lease_expired || ec == errc::out_of_memory) lasting = ec;
  // A Redlock round fails with quorum_not_reached when the nodes failed in different ways: the
  // full ones alone may deny every quorum.
  auto full = static_cast<std::size_t>(
      std::count_if(votes.begin(), votes.end(), [](const node_result& v) {
        return v.outcome == node_result::vote::failed && v.error == errc::out_of_memory;
      }));
  if (full > 0 && full > votes.size() - quorum_of(votes.size())) lasting = errc::out_of_memory;
  if (!lasting) {
    repeated_ = {};
    count_ = 0;
    return {};
  }
  if (lasting != repeated_) {
    repeated_ = lasting;
    count_ = 0;
    since_ = now;
  }
  ++count_;
  return count_ >= in_a_row && now - since_ >= lasting_for ? lasting : std::error_code();
}

bool is_silence(std::error_code ec) noexcept {
  return ec == errc::timeout || ec == errc::connection_lost || ec == errc::node_unreachable;
}

bool throws_from_wait(std::error_code ec, std::chrono::steady_clock::time_point deadline) noexcept {
  if (!ec || ec == errc::not_acquired) return false;
  return !is_retryable(ec) || deadline == std::chrono::steady_clock::time_point::max();
}

std::chrono::steady_clock::duration jittered_delay(std::chrono::milliseconds retry_delay,
                                                   std::uint64_t random) {
  auto full = std::chrono::duration_cast<std::chrono::microseconds>(retry_delay).count();
  if (full <= 0) return {};
  auto half = full / 2;
  auto span = static_cast<std::uint64_t>(full - half) + 1;
  return std::chrono::microseconds(half + static_cast<long long>(random % span));
}

// splitmix64: small, fast, and the same sequence everywhere for one seed (the simulator
// replays seeds).
std::uint64_t next_random(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t jitter_random() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return generator();
}

}  // namespace dlock::detail
