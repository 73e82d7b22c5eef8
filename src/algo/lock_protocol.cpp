// SPDX-License-Identifier: Apache-2.0
// The lock's attempts. A round sends acquire.lua to all N nodes at once, each under
// node_timeout, so its duration follows the slowest answering node rather than the sum of all;
// it is decided as soon as a quorum granted or became impossible (quorum_round), without
// waiting for stragglers. With N > 1 the fencing token needs one more step before success
// (plan_fence). Validity is start + ttl - drift on the driver's steady clock, judged at the
// moment of decision.
//
// A failed round releases on every node that did not answer "taken", including those that
// timed out or errored, because their SET may have run (or may still run) after the answer was
// lost; the round concludes only after those releases returned, so that a retry never meets
// our own leftovers.
//
// Ownership is per round: round n writes "<id>.<n>", a handoff "<id>.h<n>", and every release
// compares the exact value. A release whose outcome we never learned can therefore only ever
// delete the key of the round it was sent for, never that of a later round; a later round
// takes over a key that holds any value of its acquisition (acquire.lua), so a late SET of an
// earlier round still counts as ours.
#include "algo/lock_protocol.hpp"

#include <algorithm>
#include <charconv>
#include <utility>

#include "dlock/key_layout.hpp"

#include "algo/retry.hpp"

namespace dlock::detail {
namespace {

script_keys lock_acquire_keys(const lock_keys& k) {
  return {k.key, k.fence, k.waiters, k.waiter_info, k.tickets};
}

}  // namespace

// A holder's remaining life of 0 means "free, but a fair queue's head goes first": no expiry
// to wait for.
pacing lock_protocol::pace() const noexcept {
  return pacing_of(target_, target_.nodes, 1, waiter_entry_ttl(target_.retry_delay));
}

std::string lock_protocol::waiter_entry(const wait_loop& loop, std::size_t node,
                                        const std::vector<std::string>& channels) const {
  std::string entry;
  if (loop.last_attempt() || node >= channels.size() || channels[node].empty()) return entry;
  auto entry_ttl = std::to_string(waiter_entry_ttl(target_.retry_delay).count());
  auto round = std::to_string(loop.attempt_index());
  // Sized once: this runs at every attempt, and each append that grew it was an allocation.
  entry.reserve(entry_ttl.size() + channels[node].size() + target_.ttl_text.size() +
                round.size() + 3);
  entry.append(entry_ttl).append(" ").append(channels[node]);
  // "<lock ttl> <round>": release.lua may hand the lock to this entry (on_handoff).
  if (target_.accepts_handoff()) {
    entry.append(" ").append(target_.ttl_text).append(" ").append(round);
  }
  return entry;
}

void lock_protocol::emit_acquire(wait_loop& loop, std::size_t node, std::string entry) {
  if (!entry.empty()) loop.mark_queued();
  loop.emit(node, acquire_script, lock_acquire_keys(target_.keys_on(node)),
            {round_.value, target_.ttl_text, entry, target_.fair ? "fair" : ""},
            purpose::attempt);
}

void lock_protocol::begin(wait_loop& loop, steady::time_point,
                          const std::vector<std::string>& channels) {
  std::size_t index = loop.attempt_index();
  auto round = std::to_string(index);
  round_ = round_state{};
  round_.value.reserve(loop.id().size() + 1 + round.size());
  round_.value.append(loop.id()).append(".").append(round);
  if (index == 0 && unqueued_first_ && !unqueued_refused_) {
    round_.unqueued = true;
    round_.entry = waiter_entry(loop, 0, channels);
    const auto& k = target_.keys_on(0);
    loop.emit(0, acquire_unqueued_commands, {k.key, k.fence}, {round_.value, target_.ttl_text},
              purpose::attempt);
    return;
  }
  for (std::size_t i = 0; i < target_.nodes; ++i) emit_acquire(loop, i, waiter_entry(loop, i, channels));
}

void lock_protocol::on_answer(wait_loop& loop, purpose what, std::size_t node,
                              steady::time_point now, std::error_code ec, const reply& r) {
  switch (what) {
    case purpose::attempt:
      return on_vote(loop, node, now, ec, r);
    case purpose::step:
      return on_fence(loop, now, ec, r);
    case purpose::cleanup:
      return on_cleanup(loop, now);
    case purpose::final_cleanup:
      return;
  }
}

std::array<plain_command, 3> unqueued_commands(std::string_view key, std::string_view fence,
                                               std::string_view owner,
                                               std::string_view ttl) noexcept {
  return {{{{"SET", key, owner, "NX", "PX", ttl}, 6},
           {{"INCR", fence}, 2},
           {{"MGET", node_quarantine_key, node_fence_floor_key}, 3}}};
}

bool refused_for_good(const reply& r) noexcept {
  if (!r.is_error()) return false;
  const auto& text = r.str();
  if (text.rfind("NOPERM", 0) == 0 || text.rfind("ERR unknown command", 0) == 0) return true;
  return text.rfind("EXECABORT", 0) == 0 && (text.find("NOPERM") != std::string::npos ||
                                             text.find("unknown command") != std::string::npos);
}

// {SET's OK or nil, INCR's count, MGET's {quarantine, floor}}, each command's own answer or
// error. Claimed only when the SET was ours, and then sound although the three are no
// transaction (unqueued_commands):
// - Nobody is granted the key while our SET holds it (acquire.lua grants a free key or one of
//   its own acquisition's values; a handoff needs the releaser's value in the key), so the
//   INCR after it draws above every token granted before, unless our key expired in between:
//   then the round's validity, counted from before the SET went out, has passed too.
// - A count below the clock's range is no token: a counter our INCR made (there was none, or
//   another client's refusal deleted one below the range in between); acquire.lua, which
//   follows, starts it again from the clock, with an expiry.
// - The MGET runs after the INCR: a quarantine or a floor raised before it shows; one after it
//   is one after the grant, as with acquire.lua.
unqueued_answer read_unqueued_answer(const reply& r) noexcept {
  unqueued_answer a;
  const auto& e = r.elements();
  if (!r.is_array() || e.size() != 3) {
    a.unknown = true;
    a.never = refused_for_good(r);
    return a;
  }
  a.never = std::any_of(e.begin(), e.end(), refused_for_good);
  a.wrote = e[0].is_string();
  if (!a.wrote || !e[1].is_integer() || !e[2].is_array() || e[2].elements().size() != 2) return a;
  const auto& quarantine = e[2].elements()[0];
  const auto& floor = e[2].elements()[1];
  std::int64_t floor_value = 0;
  if (floor.is_string()) {
    // A floor that is no number: acquire.lua decides (tonumber, as next_fence reads it).
    auto text = floor.str();
    auto [end, parse_error] = std::from_chars(text.data(), text.data() + text.size(), floor_value);
    if (parse_error != std::errc{} || end != text.data() + text.size()) return a;
  }
  a.fence = e[1].integer();
  a.granted = quarantine.is_nil() && a.fence >= fence_clock_range && a.fence > floor_value;
  return a;
}

void lock_protocol::on_vote(wait_loop& loop, std::size_t node, steady::time_point now,
                            std::error_code ec, const reply& r) {
  auto& votes = loop.votes();
  const auto& e = r.elements();
  if (std::exchange(round_.unqueued, false) && (!ec || r.is_error())) {
    // Anything but a clean grant is for acquire.lua to settle, with this round's value: it
    // queues us, waits for a quarantine, or takes over the key we just set and draws a token
    // in order from the counter a plain INCR may have made.
    auto a = read_unqueued_answer(r);
    round_.wrote_unqueued = a.wrote || a.unknown;
    if (a.never) unqueued_refused_ = true;
    if (!a.granted) return emit_acquire(loop, node, std::move(round_.entry));
    votes.granted(node, a.fence);
  } else if (ec) {
    votes.failed(node, ec, r.is_error() ? r.str() : std::string());
  } else if (r.is_array() && (e.size() == 2 || e.size() == 3) && e[0].is_integer() &&
             e[1].is_integer()) {
    if (e[0].integer() == 1) {
      votes.granted(node, e[1].integer());
    } else {
      votes.taken(node, e[1].integer());
      // {0, ttl, 1}: the holder is another client's (acquire.lua).
      if (e.size() == 3 && e[2].is_integer() && e[2].integer() == 1) {
        loop.note_foreign_holder(node);
      }
    }
  } else {
    votes.failed(node, errc::protocol_error, "unexpected reply " + r.to_string());
  }
  if (round_.decided || !votes.decided()) return;
  round_.decided = true;
  if (!votes.quorum_granted()) return conclude_round(loop, now, votes.failure());
  auto plan = plan_fence(votes);
  round_.fence = plan.fence;
  round_.fence_confirmed = plan.already_at_fence;
  if (round_.fence_confirmed >= votes.quorum()) return conclude_round(loop, now, {});
  // Granting nodes disagree on the counter (one missed acquisitions while down, or a failed
  // round bumped some). The fence may only be reported once a quorum of granting nodes holds
  // at least it, so that the next holder's quorum, which must intersect ours, reads a higher
  // value.
  round_.fence_outstanding = plan.to_raise.size();
  for (std::size_t i : plan.to_raise) {
    loop.emit(i, fence_raise_script, {target_.keys_on(i).fence},
              {std::to_string(plan.fence), target_.ttl_text}, purpose::step);
  }
}

void lock_protocol::on_fence(wait_loop& loop, steady::time_point now, std::error_code ec,
                             const reply& r) {
  --round_.fence_outstanding;
  if (!ec && r.is_integer() && r.integer() >= round_.fence) ++round_.fence_confirmed;
  if (round_.concluded) return;
  if (round_.fence_confirmed >= loop.votes().quorum()) return conclude_round(loop, now, {});
  if (round_.fence_outstanding == 0) conclude_round(loop, now, errc::quorum_not_reached);
}

void lock_protocol::conclude_round(wait_loop& loop, steady::time_point now, std::error_code ec) {
  if (!ec && now >= loop.votes().valid_until()) ec = errc::lease_expired;
  if (!ec) return round_done(loop, now, {});
  round_.concluded = true;
  // Not where the node answered "taken": that answer proves this round set nothing there,
  // and under contention those releases were a quarter of all commands sent (bench/).
  round_.failure = ec;
  // Votes still unanswered no longer count: if one comes back NOSCRIPT, its EVAL must not
  // follow the cleanup below.
  loop.abandon_attempt_requests();
  for (std::size_t i = 0; i < target_.nodes; ++i) {
    // acquire.lua's "taken" after acquire_unqueued set the key (a quarantine) leaves our value.
    bool ours_left = i == 0 && round_.wrote_unqueued;
    if (loop.votes().votes()[i].outcome == node_result::vote::taken && !ours_left) continue;
    auto awaited_for = loop.awaited_cleanup(i, purpose::cleanup);
    if (awaited_for) ++round_.cleanup_outstanding;
    loop.emit(i, release_script, lock_release_keys(target_.keys_on(i)), {round_.value},
              awaited_for);
  }
  if (round_.cleanup_outstanding == 0) round_done(loop, now, ec);
}

void lock_protocol::on_cleanup(wait_loop& loop, steady::time_point now) {
  if (--round_.cleanup_outstanding > 0) return;
  // A round lost early to fast failures (dead nodes refuse at once) is judged again now:
  // each node answers our release after the acquire sent before it on the same connection,
  // so every node that answers at all has voted by now. Votes against may prove another
  // owner (not_acquired), or too many nodes may have failed alike (wrong_type, auth_failed).
  std::error_code ec = round_.failure;
  if (!loop.votes().quorum_granted()) ec = loop.votes().failure();
  round_done(loop, now, ec);
}

// Won: the round's value is the lease's, and a give-up (the caller stopped meanwhile) gives it
// back. Lost: the round's cleanup has gone out already.
void lock_protocol::round_done(wait_loop& loop, steady::time_point now, std::error_code ec) {
  round_.concluded = true;
  attempt_verdict v{ec};
  if (!ec) {
    // Moved: a granting round's value is the lease's alone from here (a give-up after the
    // grant releases the verdict's token).
    v.token = std::move(round_.value);
    v.fence = static_cast<std::uint64_t>(round_.fence);
    v.valid_until = loop.votes().valid_until();
    v.leftovers = true;
  }
  loop.attempt_over(now, std::move(v));
}

// A node that granted after the round was decided holds our key with a counter that may lag
// behind the fence: raise it too, so that the counters converge on every node that grants, not
// only on the quorum that answered first (a later loss of other nodes' counters then cannot
// bring an older fence back).
void lock_protocol::on_late_answer(wait_loop& loop, std::size_t node, std::error_code ec,
                                   const reply& r) {
  const auto& e = r.elements();
  bool granted = !ec && r.is_array() && e.size() == 2 && e[0].is_integer() && e[0].integer() == 1 &&
                 e[1].is_integer();
  if (!granted || e[1].integer() >= round_.fence) return;
  loop.emit(node, fence_raise_script, {target_.keys_on(node).fence},
            {std::to_string(round_.fence), target_.ttl_text}, std::nullopt);
}

void lock_protocol::give_up(wait_loop& loop, const attempt_verdict* ended) {
  // Won after the caller stopped waiting: give it back (only this round's value).
  if (ended && ended->leftovers) emit_release(loop, ended->token, purpose::final_cleanup);
  leave_queues(loop, false);
}

void lock_protocol::emit_release(wait_loop& loop, const std::string& value,
                                 std::optional<purpose> awaited_for) {
  for (std::size_t i = 0; i < target_.nodes; ++i) {
    loop.emit(i, release_script, lock_release_keys(target_.keys_on(i)), {value}, awaited_for);
  }
}

// A grant (acquire.lua) or a handoff (release.lua) takes the id out of the granting node's
// queue in the same script. Every other entry must go, or the next release would wake, or hand
// the lock to, a waiter that no longer waits. On a single node that is never a script of its
// own: after a SCRIPT FLUSH it could fail NOSCRIPT and run only after our release.
void lock_protocol::leave_queues(wait_loop& loop, bool granted) {
  if (!loop.queued() || (granted && target_.nodes == 1)) return;
  // Giving up: a release may have handed us the lock after we stopped listening. The same
  // script that takes us out of the queue gives such a key back (to the next waiter).
  bool give_up = !granted && target_.accepts_handoff();
  std::optional<purpose> awaited_for;
  if (!granted) awaited_for = purpose::final_cleanup;
  for (std::size_t i = 0; i < target_.nodes; ++i) {
    const auto& k = target_.keys_on(i);
    if (give_up) {
      loop.emit(i, release_script, lock_release_keys(k), {loop.id(), "give-up"}, awaited_for);
    } else {
      loop.emit(i, leave_script, {k.waiters, k.waiter_info}, {loop.id()}, awaited_for);
    }
  }
}

// A release handed us the key under "<id>.h<r>" after round r began. But a later round than r
// may have run after the release and taken the key over (acquire.lua rewrites it, and that
// round's cleanup may delete it and hand it on). Round r + 1 answering "taken" proves it ran
// before the release, and then so did every earlier round: the handoff is trusted once that
// round, in flight when the message came, has answered so. In every other case (that round
// failed or was granted, or a later one has begun) the message is a mere wake-up, and the next
// round settles what the key holds (it takes a handoff still standing over).
acquire_protocol::handoff_timing lock_protocol::timing_of_handoff(const wait_loop& loop,
                                                                  std::size_t r) const {
  if (r + 1 >= loop.attempts_begun()) return handoff_timing::take;
  if (loop.in_flight() && r + 2 == loop.attempts_begun()) return handoff_timing::defer;
  return handoff_timing::wake_only;
}

// A handoff's owner value: release.lua writes "<id>.h<round>" (round as decimal text).
std::string lock_protocol::handoff_token(const wait_loop& loop, std::size_t r) const {
  return loop.id() + ".h" + std::to_string(r);
}

// Only this handoff's own value can be deleted by the release, whenever it runs.
void lock_protocol::refuse_handoff(wait_loop& loop, std::size_t r) {
  emit_release(loop, handoff_token(loop, r), std::nullopt);
}

// release.lua in give-up mode: leave the queue, release whatever value of this id the key
// holds (a handoff, or a late round's own SET).
void lock_protocol::give_back_script(const wait_loop& loop,
                                     acquisition::late_handoff_give_back& plan) const {
  auto keys = lock_release_keys(target_.keys_on(0));
  plan.code = &release_script;
  plan.keys.assign(keys.begin(), keys.end());
  plan.args = {loop.id(), "give-up"};
}

std::string_view lock_protocol::holder_key(std::size_t node) const noexcept {
  return target_.keys_on(node).key;
}

std::uint16_t lock_protocol::slot(std::size_t node) const noexcept {
  return hash_slot(target_.keys_on(node).key);
}

}  // namespace dlock::detail
