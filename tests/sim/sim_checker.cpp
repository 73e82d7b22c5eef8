// SPDX-License-Identifier: Apache-2.0
// The invariants. Claims are kept in true time: a claim's end is first the true time at which
// its client's clock reaches valid_until (a pure function of true time, so known in advance),
// and only ever moves to an earlier "now" (release sent, lease lost) or, by an extend while it
// lasts, to a later validity. Checking each claim against the others when it begins is then
// enough for mutual exclusion and for the semaphore's limit: the permits claimed only ever grow
// when a claim begins.
//
// The node-side checks read the keys as GET, PTTL and ZSCORE would (node::peek*, after the world
// set the node's clock), without running commands.
#include "sim_checker.hpp"

#include "algo/lock_protocol.hpp"
#include "algo/semaphore_protocol.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace dlock::sim {
namespace {

bool starts_with(const std::optional<std::string>& v, const std::string& prefix) {
  return v && v->compare(0, prefix.size(), prefix) == 0;
}

std::string show(const std::optional<std::string>& v) { return v ? "\"" + *v + "\"" : "(none)"; }

bool share_a_key(const std::vector<std::size_t>& a, const std::vector<std::size_t>& b) {
  return std::find_first_of(a.begin(), a.end(), b.begin(), b.end()) != a.end();
}

// The read-write lock's mark, alone or a solo holder's ("<mark> <token> <permits>").
bool rw_marked(const std::optional<std::string>& v) {
  return v && (*v == read_write_lock_mark ||
               v->rfind(std::string(read_write_lock_mark) + " ", 0) == 0);
}

bool free_or_marked(const std::optional<std::string>& v) { return !v || rw_marked(v); }

bool is_solo_request(const detail::request& r) {
  return r.code == &detail::sem_solo_commands;
}

}  // namespace

checker::checker(world& w, lock_keys keys, std::size_t nodes)
    : checker(w, std::vector<lock_keys>{std::move(keys)}, nodes) {}

checker::checker(world& w, const std::vector<lock_keys>& pool, std::size_t nodes)
    : w_(w),
      nodes_(nodes),
      quorum_(detail::quorum_of(nodes)),
      last_fence_(pool.size()),
      last_exclusive_fence_(pool.size()) {
  for (const auto& k : pool) keys_.push_back(k.key);
}

checker::checker(world& w, const std::vector<lock_keys>& pool, semaphore_keys read_write,
                 std::ptrdiff_t readers)
    : checker(w, pool, 1) {
  rw_ = std::move(read_write);
  limit_ = readers;
}

checker::checker(world& w, semaphore_keys keys, std::ptrdiff_t limit)
    : w_(w), sem_(std::move(keys)), limit_(limit), nodes_(1), quorum_(1) {}

void checker::violation(const std::string& what) {
  if (failure_) return;
  failure_ = format_time(w_.now()) + ": " + what;
  if (w_.tracing()) w_.note("VIOLATION: " + what);
}

std::string checker::on_keys(const claim& k) const {
  std::string on;  // named only when there is a choice
  for (std::size_t j = 0; keys_.size() > 1 && j < k.keys.size(); ++j) {
    on += (j == 0 ? " on " : ",") + keys_[k.keys[j]];
  }
  return on;
}

std::string checker::describe(const claim& k) const {
  std::string kind = !k.read_write ? "" : k.permits < limit_ ? " to read" : " to write";
  return "c" + std::to_string(k.client) + "'s claim" + kind + on_keys(k) + " (token " + k.token +
         ", fence " + std::to_string(k.fence) +
         (sem_ ? ", " + std::to_string(k.permits) + " permit(s)" : std::string()) + ", from " +
         format_time(k.begin) + " until " + format_time(k.end) + ")";
}

checker::claim* checker::active(std::size_t c) {
  if (c >= current_.size() || !current_[c]) return nullptr;
  claim& k = claims_[*current_[c]];
  return k.end > w_.now() ? &k : nullptr;
}

bool checker::claiming(std::size_t c) const {
  return c < current_.size() && current_[c] && claims_[*current_[c]].end > w_.now();
}

std::optional<std::string> checker::value_on(std::size_t i, std::size_t key) {
  auto& n = w_.redis(i);
  n.set_time(w_.wall_ms());
  return n.peek(keys_[key]);
}

bool checker::holds(std::size_t i, const claim& k) {
  for (auto j : k.keys) {
    if (value_on(i, j) != k.token) return false;
  }
  return true;
}

std::vector<std::size_t> checker::key_indices(const std::vector<std::string>& keys) {
  std::vector<std::size_t> found;
  for (std::size_t j = 0; j < keys_.size(); ++j) {
    if (keys.empty() || std::find(keys.begin(), keys.end(), keys_[j]) != keys.end()) {
      found.push_back(j);
    }
  }
  if (!keys.empty() && found.size() != keys.size()) violation("a claim on a key not watched");
  return found;
}

// --- claims ---

void checker::granted(std::size_t c, const std::string& token, std::uint64_t fence,
                      steady::time_point valid_until, std::ptrdiff_t permits,
                      const std::vector<std::string>& keys, bool read_write_lock) {
  ++grants_;
  sim_time end = w_.when(c, valid_until);
  if (w_.tracing()) {
    w_.note("c" + std::to_string(c) + " GRANTED " + token + " fence " + std::to_string(fence) +
            (sem_ ? ", " + std::to_string(permits) + " permit(s)" : std::string()) +
            ", valid until " + format_time(end));
  }
  if (claiming(c))
    violation("c" + std::to_string(c) + " granted " + token + " while its claim " +
              describe(claims_[*current_[c]]) + " lasts");
  if (valid_until <= w_.clock(c)) {
    violation("c" + std::to_string(c) + " granted " + token + " already expired on its clock");
    return;
  }
  auto claimed = sem_ ? std::vector<std::size_t>{} : key_indices(keys);
  // A semaphore's grants may arrive out of the node's order: its fences are checked there. So
  // may readers' (two at once): a reader's fence is only above every exclusive grant's before.
  bool exclusive = permits >= limit_;
  for (auto j : claimed) {
    auto& last = last_fence_[j];
    auto& above = exclusive ? last : last_exclusive_fence_[j];
    if (safety_ && fences_ && fence_order_ && above && fence <= *above) {
      violation("c" + std::to_string(c) + " granted " + token + " with fence " +
                std::to_string(fence) + ", not above the previous " +
                (exclusive ? "grant's " : "exclusive grant's ") + std::to_string(*above) +
                (keys_.size() > 1 ? " on " + keys_[j] : ""));
    }
    last = std::max(last.value_or(0), fence);
    if (exclusive) last_exclusive_fence_[j] = fence;
  }
  open_claim(c, token, fence, end, permits, std::move(claimed), read_write_lock);
}

void checker::open_claim(std::size_t c, const std::string& token, std::uint64_t fence, sim_time end,
                         std::ptrdiff_t permits, std::vector<std::size_t> keys, bool read_write) {
  claim k{c, token, fence, w_.now(), end, std::vector<bool>(nodes_), permits, std::move(keys),
          read_write};
  if (sem_) {
    if (safety_) check_limit(k);
    if (checks_holders()) check_permit_outlives(k);
  } else {
    check_exclusion(k);
  }
  if (c >= current_.size()) current_.resize(c + 1);
  current_[c] = claims_.size();
  claims_.push_back(std::move(k));
}

void checker::check_limit(const claim& k) {
  std::ptrdiff_t claimed = k.permits;
  std::string others;
  for (std::size_t other = 0; other < current_.size(); ++other) {
    if (other == k.client || !current_[other]) continue;
    const claim& theirs = claims_[*current_[other]];
    if (theirs.end <= w_.now()) continue;
    claimed += theirs.permits;
    others += " " + describe(theirs) + ";";
  }
  if (claimed > limit_) {
    violation("OVER LIMIT: " + std::to_string(claimed) + " permits claimed, limit " +
              std::to_string(limit_) + ": " + describe(k) + " begins during" + others);
  }
}

// Also records which nodes hold the claim's token. Two claims on a key exclude each other
// unless their permits fit together: only readers' do.
void checker::check_exclusion(claim& k) {
  std::size_t c = k.client;
  const std::string& token = k.token;
  if (safety_) {
    for (std::size_t other = 0; other < current_.size(); ++other) {
      if (other == c || !current_[other]) continue;
      const claim& theirs = claims_[*current_[other]];
      if (theirs.end > w_.now() && share_a_key(k.keys, theirs.keys) &&
          k.permits + theirs.permits > limit_) {
        violation("MUTUAL EXCLUSION: " + describe(k) + " begins during " + describe(theirs));
      }
    }
  }
  if (k.read_write) {
    if (checks_holders()) check_mark_outlives(k);
    return;
  }
  std::size_t held = 0;
  std::string where;
  for (std::size_t i = 0; i < nodes_; ++i) {
    k.holders[i] = holds(i, k);
    held += k.holders[i];
    for (auto j : k.keys) {
      where += " n" + std::to_string(i) + (keys_.size() > 1 ? "[" + keys_[j] + "]" : "") + "=" +
               show(value_on(i, j));
    }
  }
  if (checks_holders() && held < quorum_) {
    violation("HOLDERS: c" + std::to_string(c) + " claims token " + token + " held by only " +
              std::to_string(held) + " of " + std::to_string(nodes_) + " nodes:" + where);
  }
  if (checks_holders() && held >= quorum_) check_key_outlives(k);
}

void checker::check_key_outlives(const claim& k) {
  std::vector<sim_time> deaths;
  std::string where;
  for (std::size_t i = 0; i < nodes_; ++i) {
    if (!k.holders[i]) continue;
    auto& n = w_.redis(i);
    n.set_time(w_.wall_ms());
    // The node holds the claim until the first of its keys dies.
    sim_time death = INT64_MAX;
    for (auto j : k.keys) {
      auto pttl = n.peek_pttl(keys_[j]);
      // Redis expires a key once its clock passes the deadline: the first true microsecond of
      // the millisecond after now + PTTL. No expiry: it outlives any claim.
      if (pttl >= 0) death = std::min(death, (w_.now() / 1000 + pttl + 1) * 1000);
    }
    deaths.push_back(death);
    where += " n" + std::to_string(i) + " until " +
             (death == INT64_MAX ? "forever" : format_time(death));
  }
  std::sort(deaths.rbegin(), deaths.rend());
  if (deaths.size() >= quorum_ && deaths[quorum_ - 1] < k.end) {
    violation("VALIDITY: " + describe(k) + " outlives its key on a quorum:" + where);
  }
}

// The entry is gone once the node's clock reaches its score (the scripts drop score <= now),
// or when its key expires, whichever comes first.
void checker::check_permit_outlives(const claim& k) {
  const auto& expiries = sem_ ? sem_->expiries : rw_->expiries;
  auto& n = w_.redis(0);
  n.set_time(w_.wall_ms());
  auto score = n.peek_score(expiries, k.token);
  if (!score) {
    // A solo holder: the name's key holds "<mark> <token> <permits>", with the permit's expiry.
    const auto& name = sem_ ? sem_->name : rw_->name;
    auto value = n.peek(name);
    auto middle = " " + k.token + " ";
    if (!value || value->rfind("dlock:", 0) != 0 || value->find(middle) == std::string::npos) {
      return violation("HOLDERS: during " + describe(k) + ", the node has no entry for it");
    }
    auto pttl = n.peek_pttl(name);
    sim_time death = pttl < 0 ? INT64_MAX : (w_.now() / 1000 + pttl + 1) * 1000;
    if (death < k.end) {
      violation("VALIDITY: " + describe(k) + " outlives its solo value (until " +
                format_time(death) + ")");
    }
    return;
  }
  auto left_ms = static_cast<std::int64_t>(*score) - n.time();
  sim_time death = (w_.now() / 1000 + left_ms) * 1000;
  auto pttl = n.peek_pttl(expiries);
  if (pttl >= 0) death = std::min(death, (w_.now() / 1000 + pttl + 1) * 1000);
  if (death < k.end) {
    violation("VALIDITY: " + describe(k) + " outlives its permit on the node (entry until " +
              format_time(death) + ", key PTTL " + std::to_string(pttl) + " ms)");
  }
}

// The mark keeps every mutex and lock set out of the name while a reader or writer holds it.
void checker::check_mark_outlives(const claim& k) {
  check_permit_outlives(k);
  auto mark = value_on(0);
  if (!rw_marked(mark)) {
    return violation("HOLDERS: during " + describe(k) + ", the name's key holds " + show(mark) +
                     ", not the read-write lock's mark");
  }
  auto pttl = w_.redis(0).peek_pttl(keys_[0]);
  sim_time death = pttl < 0 ? INT64_MAX : (w_.now() / 1000 + pttl + 1) * 1000;
  if (death < k.end) {
    violation("VALIDITY: " + describe(k) + " outlives the name's mark (until " +
              format_time(death) + ")");
  }
}

void checker::extended(std::size_t c, steady::time_point valid_until) {
  sim_time end = w_.when(c, valid_until);
  if (w_.tracing()) w_.note("c" + std::to_string(c) + " EXTENDED, valid until " + format_time(end));
  claim* k = active(c);
  if (!k) {
    // The extend succeeded after the claim had lapsed: whatever happened in between, the
    // client claims the lock again from now.
    if (c >= current_.size() || !current_[c])
      return violation("c" + std::to_string(c) + " extended a lease it never had");
    claim old = claims_[*current_[c]];
    return open_claim(c, old.token, old.fence, end, old.permits, old.keys, old.read_write);
  }
  k->end = end;
  if (sem_ || k->read_write) {
    if (checks_holders()) sem_ ? check_permit_outlives(*k) : check_mark_outlives(*k);
    return;
  }
  std::size_t held = 0;
  for (std::size_t i = 0; i < nodes_; ++i) {
    k->holders[i] = holds(i, *k);
    held += k->holders[i];
  }
  if (!safety_ || !fences_ || !holders_) return;
  if (held < quorum_) {
    return violation("HOLDERS: c" + std::to_string(c) + " extended " + describe(*k) + " but only " +
                     std::to_string(held) + " node(s) hold it");
  }
  check_key_outlives(*k);
}

void checker::ended(std::size_t c, const std::string& why) {
  claim* k = active(c);
  if (!k) return;
  k->end = w_.now();
  if (w_.tracing()) w_.note("c" + std::to_string(c) + " claim ends: " + why);
}

// --- node side ---

void checker::before_script(std::size_t i, const detail::request& r) {
  looked_.clear();
  before_values_.clear();
  if (sem_) return;
  for (std::size_t j = 0; j < keys_.size(); ++j) {
    if (std::find(r.keys.begin(), r.keys.end(), keys_[j]) == r.keys.end()) continue;
    looked_.push_back(j);
    before_values_.push_back(value_on(i, j));
  }
}

void checker::after_script(std::size_t i, const detail::request& r, const reply& result) {
  if (sem_) return after_semaphore_script(r, result);
  for (std::size_t n = 0; n < looked_.size(); ++n) {
    after_lock_script(i, r, result, looked_[n], before_values_[n]);
  }
  looked_.clear();
  if (!rw_) return;
  check_node_fence(r, result);
  if (!checks_holders()) return;
  for (const auto& k : claims_) {
    if (k.read_write && k.end > w_.now()) check_mark_outlives(k);
  }
}

void checker::after_lock_script(std::size_t i, const detail::request& r, const reply& result,
                                std::size_t key, const std::optional<std::string>& before) {
  auto after = value_on(i, key);
  const std::string owner(r.args.at(0));
  std::string on = keys_.size() > 1 ? " (" + keys_[key] + ")" : "";
  bool owns = false;
  if (r.code == &detail::release_script) {
    bool give_up = r.args.size() > 1 && r.args[1] == "give-up";
    owns = give_up ? starts_with(before, owner + ".") : before == owner;
    if (give_up && !result.is_error() && starts_with(after, owner + ".")) {
      // A handoff (or a late round) that reached the acquisition before it gave up would lie
      // orphaned for a whole TTL, keeping every waiter out. (A give-up that did not run, a
      // NOSCRIPT its client no longer waited to re-send, leaves it: bounded by the TTL.)
      violation("ORPHAN: the give-up of " + owner + " on n" + std::to_string(i) +
                " left the lock key" + on + " holding its " + show(after));
    }
  } else if (r.code == &detail::extend_script) {
    owns = before == owner;
  } else if (r.code == &detail::acquire_script) {
    owns = !before || starts_with(before, owner.substr(0, owner.find('.')) + ".");
  } else if (r.code == &detail::acquire_unqueued_commands) {
    owns = !before;  // SET NX: only a free key
  } else if (r.code == &detail::acquire_all_script) {
    owns = !before;  // a fresh token per attempt: it only ever takes free keys
  } else if (r.code == &detail::sem_fair_acquire_script || r.code == &detail::sem_release_script ||
             r.code == &detail::sem_refresh_script || is_solo_request(r)) {
    // A read-write lock's script marks the name where it is free, and moves or takes off its
    // own mark: it never touches another holder's value, nor leaves one.
    owns = free_or_marked(before) && free_or_marked(after);
  }
  if (!owns && after != before) {
    violation("OWNERSHIP: " + std::string(script_name(r.code)) + " for \"" + owner + "\" on n" +
              std::to_string(i) + " changed the lock key" + on + " from " + show(before) +
              " to " + show(after) + " (reply " + result.to_string() + ")");
  }
  if (!safety_ || !fences_ || !holders_) return;
  for (auto& k : claims_) {
    if (k.end <= w_.now() || !k.holders[i] || after == k.token) continue;
    if (std::find(k.keys.begin(), k.keys.end(), key) == k.keys.end()) continue;
    k.holders[i] = false;
    auto held = static_cast<std::size_t>(std::count(k.holders.begin(), k.holders.end(), true));
    if (held < quorum_) {
      violation("HOLDERS: during " + describe(k) + ", " + std::string(script_name(r.code)) +
                " for \"" + owner + "\" on n" + std::to_string(i) + " found " + show(after) +
                on + " instead (was " + show(before) + "): " + std::to_string(held) +
                " node(s) still hold it, a quorum is " + std::to_string(quorum_));
    }
  }
}

void checker::check_node_fence(const detail::request& r, const reply& result) {
  if (is_solo_request(r)) {
    // The semaphore's solo grant, read as its protocol reads it, while the name's key still
    // holds its value (as acquire_unqueued's below).
    auto a = detail::read_solo_answer(result);
    bool theirs = rw_ && r.keys[1] != rw_->fence;
    auto& n = w_.redis(r.node);
    n.set_time(w_.wall_ms());
    if (a.granted && !theirs && n.peek(std::string(r.keys[0])) == r.args.at(0)) {
      note_node_fence(r, a.fence, false);
    }
    return;
  }
  if (r.code == &detail::acquire_unqueued_commands) {
    // Its grant as the lock's protocol reads it; anything else is acquire.lua's to settle. Its
    // commands may run apart (sim_world.hpp): a grant whose key no longer holds its value once
    // the last one ran is claimed by no one (the key expired, and the round's validity with
    // it, or the client gave up on the answer and released), and drew its token before the
    // grants that came in between.
    auto a = detail::read_unqueued_answer(result);
    bool theirs = rw_ && std::find(r.keys.begin(), r.keys.end(), rw_->fence) == r.keys.end();
    auto key = std::find(keys_.begin(), keys_.end(), r.keys[0]);
    bool still_ours =
        key != keys_.end() && value_on(r.node, static_cast<std::size_t>(key - keys_.begin())) ==
                                  r.args.at(0);
    if (a.granted && !theirs && still_ours) note_node_fence(r, a.fence, false);
    return;
  }
  bool draws = r.code == &detail::sem_acquire_script ||
               r.code == &detail::sem_fair_acquire_script || r.code == &detail::acquire_script ||
               r.code == &detail::acquire_all_script;
  if (!draws || !result.is_array() || result.elements().size() < 2 ||
      !result.elements()[0].is_integer() || result.elements()[0].integer() != 1 ||
      !result.elements()[1].is_integer()) {
    return;
  }
  // A lock set without the read-write lock's name draws from other counters.
  if (rw_ && std::find(r.keys.begin(), r.keys.end(), rw_->fence) == r.keys.end()) return;
  // acquire.lua grants the holder of an earlier value of the acquisition again with the
  // counter as it stands: nobody can have drawn since.
  note_node_fence(r, result.elements()[1].integer(), r.code == &detail::acquire_script);
}

void checker::note_node_fence(const detail::request& r, std::int64_t fence, bool may_repeat) {
  if (safety_ && fences_ && fence_order_ && last_node_fence_ &&
      (fence < *last_node_fence_ || (fence == *last_node_fence_ && !may_repeat))) {
    violation("FENCES: the node granted " + std::string(r.args.at(0)) + " fence " + std::to_string(fence) +
              ", not above its previous grant's " + std::to_string(*last_node_fence_));
  }
  last_node_fence_ = std::max(last_node_fence_.value_or(0), fence);
}

void checker::after_semaphore_script(const detail::request& r, const reply& result) {
  check_node_fence(r, result);
  if (!checks_holders()) return;
  for (const auto& k : claims_) {
    if (k.end > w_.now()) check_permit_outlives(k);
  }
}

// --- assumptions and liveness ---

void checker::leave_assumptions(const std::string& why) {
  if (safety_ && w_.tracing()) w_.note("outside the assumptions from here: " + why);
  safety_ = false;
}

void checker::forget_fences(const std::string& why) {
  if (fences_ && w_.tracing()) w_.note("fences and holders unchecked from here: " + why);
  fences_ = false;
}

sim_time checker::free_time(sim_time from, sim_time to, std::ptrdiff_t wanted,
                            const std::vector<std::string>& keys) const {
  if (to <= from) return 0;
  std::vector<std::size_t> wanted_keys;
  for (std::size_t j = 0; j < keys_.size(); ++j) {
    if (std::find(keys.begin(), keys.end(), keys_[j]) != keys.end()) wanted_keys.push_back(j);
  }
  std::vector<std::pair<sim_time, std::ptrdiff_t>> changes;  // when, permits claimed (+) or back
  for (const auto& k : claims_) {
    if (!sem_ && !keys.empty() && !share_a_key(k.keys, wanted_keys)) continue;
    sim_time b = std::max(k.begin, from), e = std::min(k.end, to);
    if (b >= e) continue;
    changes.emplace_back(b, k.permits);
    changes.emplace_back(e, -k.permits);
  }
  std::sort(changes.begin(), changes.end());
  sim_time free = 0, at = from;
  std::ptrdiff_t claimed = 0;
  for (auto [when, delta] : changes) {
    if (claimed + wanted <= limit_) free += when - at;
    at = when;
    claimed += delta;
  }
  if (claimed + wanted <= limit_) free += to - at;
  return free;
}

}  // namespace dlock::sim
