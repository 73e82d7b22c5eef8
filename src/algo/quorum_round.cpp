// SPDX-License-Identifier: Apache-2.0
#include "algo/quorum_round.hpp"

#include <algorithm>
#include <utility>

#include "algo/retry.hpp"

namespace dlock::detail {

steady::duration drift_allowance(milliseconds ttl, double drift_factor) {
  auto proportional = std::chrono::duration_cast<steady::duration>(
      std::chrono::duration<double, std::milli>(static_cast<double>(ttl.count()) * drift_factor));
  return proportional + milliseconds(2);
}

quorum_round::quorum_round(std::size_t nodes, steady::time_point start, milliseconds ttl,
                           double drift_factor)
    : start_(start), ttl_(ttl), drift_factor_(drift_factor), votes_(nodes), fences_(nodes, 0) {}

bool quorum_round::first_vote(std::size_t node) const {
  return node < votes_.size() && votes_[node].outcome == node_result::vote::pending;
}

void quorum_round::granted(std::size_t node, std::int64_t fence) {
  if (!first_vote(node)) return;
  votes_[node].outcome = node_result::vote::granted;
  fences_[node] = fence;
  ++granted_;
}

void quorum_round::taken(std::size_t node, long long holder_ttl_ms) {
  if (!first_vote(node)) return;
  votes_[node].outcome = node_result::vote::taken;
  votes_[node].holder_ttl_ms = holder_ttl_ms;
  ++taken_;
}

void quorum_round::failed(std::size_t node, std::error_code ec, std::string message) {
  if (!first_vote(node)) return;
  votes_[node].outcome = node_result::vote::failed;
  votes_[node].error = ec;
  votes_[node].message = message.empty() ? ec.message() : std::move(message);
  ++failed_;
}

bool quorum_round::decided() const noexcept {
  std::size_t still_possible = votes_.size() - taken_ - failed_;
  return granted_ >= quorum() || still_possible < quorum();
}

// The incurable error (one retrying cannot cure) shared by the most failed votes, and how many.
std::pair<std::error_code, std::size_t> quorum_round::commonest_incurable() const {
  std::pair<std::error_code, std::size_t> best{};
  for (const auto& v : votes_) {
    if (v.outcome != node_result::vote::failed || is_retryable(v.error)) continue;
    auto alike = static_cast<std::size_t>(
        std::count_if(votes_.begin(), votes_.end(), [&](const node_result& other) {
          return other.outcome == node_result::vote::failed && other.error == v.error;
        }));
    if (alike > best.second) best = {v.error, alike};
  }
  return best;
}

std::error_code quorum_round::failure() const {
  // More nodes refusing for good than a quorum can spare: no retry can win the lock.
  auto [incurable, refusing] = commonest_incurable();
  if (refusing > votes_.size() - quorum()) return incurable;
  if (votes_.size() - taken_ < quorum()) return errc::not_acquired;
  if (failed_ == votes_.size()) {
    std::error_code shared = votes_.front().error;
    bool alike = std::all_of(votes_.begin(), votes_.end(),
                             [&](const node_result& v) { return v.error == shared; });
    if (alike) return shared;
  }
  return errc::quorum_not_reached;
}

bool quorum_round::failure_settled() const noexcept {
  std::size_t pending = votes_.size() - granted_ - taken_ - failed_;
  if (pending == 0) return true;
  // The stragglers could still make an incurable error deny the quorum.
  std::size_t spare = votes_.size() - quorum();
  auto refusing = commonest_incurable().second;
  if (refusing > spare) return true;
  if (refusing > 0 && refusing + pending > spare) return false;
  if (votes_.size() - taken_ < quorum()) return true;
  // Enough outstanding votes against would make it not_acquired.
  if (votes_.size() - taken_ - pending < quorum()) return false;
  // Every vote so far failed the same way: all of them failing so would name that error.
  if (granted_ == 0 && taken_ == 0) {
    const std::error_code* shared = nullptr;
    for (const auto& v : votes_) {
      if (v.outcome != node_result::vote::failed) continue;
      if (shared && v.error != *shared) return true;
      shared = &v.error;
    }
    return false;
  }
  return true;
}

steady::time_point quorum_round::valid_until() const noexcept {
  return start_ + ttl_ - drift_allowance(ttl_, drift_factor_);
}

fence_plan plan_fence(const quorum_round& round) {
  fence_plan plan;
  const auto& votes = round.votes();
  for (std::size_t i = 0; i < votes.size(); ++i) {
    if (votes[i].outcome == node_result::vote::granted)
      plan.fence = std::max(plan.fence, round.fence_of(i));
  }
  for (std::size_t i = 0; i < votes.size(); ++i) {
    if (votes[i].outcome != node_result::vote::granted) continue;
    if (round.fence_of(i) == plan.fence) {
      ++plan.already_at_fence;
    } else {
      plan.to_raise.push_back(i);
    }
  }
  return plan;
}

}  // namespace dlock::detail
