// SPDX-License-Identifier: Apache-2.0
// algo/quorum_round.hpp: the arithmetic of one Redlock round, without sockets or clocks.
//   quorum_round  collects each node's vote, says when the round is decided (a quorum granted,
//                 or a quorum became impossible), and judges it: validity, fence, error
//   quorum_of     the majority of N nodes
//   drift_allowance, plan_fence  the formulas, exposed for the unit tests
// Not thread-safe: one round is driven by one thread (dlock's I/O thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <system_error>
#include <utility>
#include <vector>

#include "dlock/error.hpp"

#include "algo/small_vector.hpp"

namespace dlock::detail {

using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// A majority of `nodes`: what a Redlock round must win, and what a release must leave unable to
// vouch for the key.
constexpr std::size_t quorum_of(std::size_t nodes) noexcept { return nodes / 2 + 1; }

// drift = ttl * factor + 2 ms: 1 ms for Redis's expiry precision plus 1 ms of minimum drift,
// which dominates for small TTLs.
steady::duration drift_allowance(milliseconds ttl, double drift_factor);

class quorum_round {
 public:
  quorum_round(std::size_t nodes, steady::time_point start, milliseconds ttl, double drift_factor);

  std::size_t size() const noexcept { return votes_.size(); }
  std::size_t quorum() const noexcept { return quorum_of(votes_.size()); }

  // Votes; each node's first vote counts, later ones are ignored.
  void granted(std::size_t node, std::int64_t fence);
  void taken(std::size_t node, long long holder_ttl_ms);
  void failed(std::size_t node, std::error_code ec, std::string message);

  std::size_t granted_count() const noexcept { return granted_; }
  // Decided as soon as a quorum granted or can no longer grant; stragglers are not awaited.
  bool decided() const noexcept;
  bool quorum_granted() const noexcept { return granted_ >= quorum(); }

  // The failure of an undecidable or lost round: an error retrying cannot cure (wrong_type,
  // no_permission, ...) when more nodes gave it than a quorum can spare; not_acquired when
  // the votes of other owners alone make a quorum impossible; the shared error when every node
  // failed alike; else quorum_not_reached.
  std::error_code failure() const;
  // Whether failure() would say the same whatever the nodes yet to vote say: false while their
  // votes could still make an incurable error deny the quorum, prove another owner
  // (not_acquired), or while every vote so far is the same error. A round decided early on
  // failures may wait for this to name the cause.
  bool failure_settled() const noexcept;
  // When the lock may be used until: start + ttl - drift. The round succeeds iff a quorum
  // granted and this is after the moment of decision.
  steady::time_point valid_until() const noexcept;

  std::int64_t fence_of(std::size_t node) const { return fences_[node]; }
  const node_results& votes() const noexcept { return votes_; }
  node_results& votes() noexcept { return votes_; }

 private:
  bool first_vote(std::size_t node) const;
  std::pair<std::error_code, std::size_t> commonest_incurable() const;

  steady::time_point start_;
  milliseconds ttl_;
  double drift_factor_;
  node_results votes_;
  small_vector<std::int64_t, 5> fences_;
  std::size_t granted_ = 0, taken_ = 0, failed_ = 0;
};

// Redlock's fencing token: the maximum counter among granting nodes, which must be known to
// hold at least that value on a quorum of the granting nodes before the lock is reported
// (docs/guarantees.md has the proof sketch). plan_fence says which granting nodes already
// hold it and which must be raised.
struct fence_plan {
  std::int64_t fence = 0;
  std::size_t already_at_fence = 0;
  std::vector<std::size_t> to_raise;
};
fence_plan plan_fence(const quorum_round& round);

}  // namespace dlock::detail
