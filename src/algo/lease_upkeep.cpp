// SPDX-License-Identifier: Apache-2.0
// A lease's release and extend on every node of a lock, judged as quorums, and on every key
// of a lock set, judged all or nothing.
#include "algo/lease_upkeep.hpp"

#include <algorithm>
#include <utility>

namespace dlock::detail {

// ---- quorum_release ----

quorum_release::quorum_release(const lock_target& target, std::string value,
                               std::vector<bool> skip, std::size_t enough)
    : open_(target.nodes, false), enough_(enough) {
  skip.resize(target.nodes, false);
  for (std::size_t i = 0; i < target.nodes; ++i) {
    if (skip[i]) continue;
    open_[i] = true;
    ++outstanding_;
    requests_.push_back(request_for(target, i, value));
  }
  if (outstanding_ == 0) {
    reported_ = true;
    outcome_ = so_far_;
  }
}

std::vector<request> quorum_release::take_requests() { return std::exchange(requests_, {}); }

void quorum_release::on_reply(std::uint64_t request_id, std::error_code ec, const reply& r) {
  std::size_t node = request_id - 1;
  if (node >= open_.size() || !open_[node]) return;
  open_[node] = false;
  count(so_far_, ec, r);
  --outstanding_;
  if (reported_) return;
  if (outstanding_ == 0 || so_far_.answered >= enough_) {
    reported_ = true;
    outcome_ = so_far_;
  }
}

request quorum_release::request_for(const lock_target& target, std::size_t node,
                                     std::string value) {
  return request{node + 1, node, &release_script, lock_release_keys(target.keys_on(node)),
                 {std::move(value)}, target.node_timeout};
}

void quorum_release::count(tally& t, std::error_code ec, const reply& r) {
  if (ec && !t.first_error) t.first_error = ec;
  if (!ec && r.is_integer()) {
    ++t.answered;
    if (r.integer() == 1) ++t.released;
  }
}

std::optional<quorum_release::tally> quorum_release::take_outcome() {
  return std::exchange(outcome_, std::nullopt);
}

// Released once the nodes that answered leave too few that may still hold the key to form a
// quorum: from then on no quorum can vouch for this lease, and the next holder may form its
// own. With fewer answers, a quorum may still hold the key until it expires, and the caller is
// told so (quorum_not_reached, or the error when no node answered at all) even if some node
// did delete it.
std::error_code quorum_release::judge(const tally& t, std::size_t nodes) {
  if (t.answered >= release_quorum(nodes)) {
    return t.released > 0 ? std::error_code() : std::error_code(errc::not_held);
  }
  if (t.answered == 0 && t.first_error) return t.first_error;
  return errc::quorum_not_reached;
}

// ---- quorum_extend ----

quorum_extend::quorum_extend(const lock_target& target, std::string token, milliseconds ttl,
                             std::string successor, steady::time_point now)
    : round_(target.nodes, now, ttl, target.drift_factor) {
  std::string ttl_text = std::to_string(ttl.count());
  for (std::size_t i = 0; i < target.nodes; ++i) {
    script_keys keys{target.keys_on(i).key};
    if (!target.lives_with_lock.empty()) keys.push_back(target.lives_with_lock);
    requests_.push_back(request{i + 1, i, &extend_script, keys,
                                {token, ttl_text, successor}, target.node_timeout});
  }
}

std::vector<request> quorum_extend::take_requests() { return std::exchange(requests_, {}); }

void quorum_extend::on_reply(std::uint64_t request_id, steady::time_point now,
                             std::optional<steady::time_point> deadline, std::error_code ec,
                             const reply& r) {
  std::size_t node = request_id - 1;
  if (node >= round_.size()) return;
  if (ec) {
    round_.failed(node, ec, r.is_error() ? r.str() : std::string());
  } else if (r.is_integer() && r.integer() == 1) {
    round_.granted(node, 0);
  } else {
    round_.taken(node, -1);  // gone, or someone else's
  }
  if (reported_ || !round_.decided()) return;
  // Without a quorum, wait for the stragglers (at most node_timeout) while their votes could
  // still prove the lease lost rather than the nodes down.
  if (!round_.quorum_granted() && !round_.failure_settled()) return;
  reported_ = true;
  // An extend that lands after the old validity ended cannot vouch for the gap.
  if (deadline && now >= *deadline) {
    outcome_ = verdict{errc::lease_expired, {}};
  } else if (round_.quorum_granted()) {
    outcome_ = verdict{{}, round_.valid_until(), {}};
    for (std::size_t i = 0; i < round_.size(); ++i) {
      if (round_.votes()[i].outcome == node_result::vote::granted) {
        outcome_->extended.push_back(i);
      }
    }
  } else {
    std::error_code failure = round_.failure();
    outcome_ = verdict{failure == errc::not_acquired ? std::error_code(errc::lease_lost) : failure,
                       {}};
  }
}

std::optional<quorum_extend::verdict> quorum_extend::take_outcome() {
  return std::exchange(outcome_, std::nullopt);
}

// ---- set_release, set_extend ----

set_release::set_release(const lock_set_target& target, const std::string& value,
                         std::size_t groups) {
  groups = std::min(groups, target.groups.size());
  for (std::size_t g = 0; g < groups; ++g) {
    for (auto i : target.groups[g].members) {
      requests_.push_back(request{requests_.size() + 1, 0, &release_script,
                                  lock_release_keys(target.names[i]), {value},
                                  target.node_timeout});
    }
  }
  outstanding_ = requests_.size();
  open_.assign(outstanding_, true);
  if (outstanding_ == 0) outcome_ = std::error_code();
}

void set_release::on_reply(std::uint64_t request_id, std::error_code ec, const reply& r) {
  std::size_t k = request_id - 1;
  if (k >= open_.size() || !open_[k]) return;
  open_[k] = false;
  if (!ec && r.is_error()) ec = error_from_reply(r);
  if (ec && !first_error_) first_error_ = ec;
  if (!ec && r.is_integer() && r.integer() == 1) ++ours_;
  if (--outstanding_ > 0) return;
  if (first_error_) {
    outcome_ = first_error_;
  } else {
    outcome_ = ours_ == open_.size() ? std::error_code() : std::error_code(errc::not_held);
  }
}

set_extend::set_extend(const lock_set_target& target, const std::string& token, milliseconds ttl,
                       const std::string& successor, steady::time_point now)
    : valid_until_(now + ttl - drift_allowance(ttl, target.drift_factor)) {
  std::string ttl_text = std::to_string(ttl.count());
  for (const auto& name : target.names) {
    requests_.push_back(request{requests_.size() + 1, 0, &extend_script, {name.key},
                                {token, ttl_text, successor}, target.node_timeout});
  }
  outstanding_ = requests_.size();
  open_.assign(outstanding_, true);
}

void set_extend::on_reply(std::uint64_t request_id, steady::time_point now,
                          std::optional<steady::time_point> deadline, std::error_code ec,
                          const reply& r) {
  std::size_t k = request_id - 1;
  if (k >= open_.size() || !open_[k]) return;
  open_[k] = false;
  if (!ec && r.is_error()) ec = error_from_reply(r);
  if (ec && !first_error_) first_error_ = ec;
  if (!ec && r.is_integer()) ++(r.integer() == 1 ? ours_ : theirs_);
  if (--outstanding_ > 0) return;
  if (theirs_ > 0) {
    outcome_ = quorum_extend::verdict{errc::lease_lost};
  } else if (ours_ < open_.size()) {
    outcome_ = quorum_extend::verdict{first_error_ ? first_error_
                                                   : std::error_code(errc::protocol_error)};
  } else if (deadline && now >= *deadline) {
    outcome_ = quorum_extend::verdict{errc::lease_expired};
  } else {
    outcome_ = quorum_extend::verdict{{}, valid_until_, {0}};
  }
}

}  // namespace dlock::detail
