// SPDX-License-Identifier: Apache-2.0
// The one acquisition engine: every lock (1 and N nodes) and every semaphore attempt, retry,
// handoff and give-up is decided here, from the events the driver feeds in.
//
// Lock rounds. A round sends acquire.lua to all N nodes at once, each under node_timeout, so its
// duration follows the slowest answering node rather than the sum of all; it is decided as
// soon as a quorum granted or became impossible (quorum_round), without waiting for
// stragglers. With N > 1 the fencing token needs one more step before success (plan_fence).
// Validity is start + ttl - drift on the driver's steady clock, judged at the moment of decision.
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
//
// Semaphore attempts. One node, one script per attempt, and one owner token for all attempts:
// an attempt whose reply was lost cannot leave a ghost permit that competes with us, because
// the next attempt's script finds the token and treats it as ours, and giving up removes it.
//
// Waiting. An attempt that may be followed by another queues the waiter under the wake
// channels the driver passes (acquire.lua, sem_*acquire.lua); a release publishes to the first
// live waiter, which cuts the driver's sleep short. The sleep stays as the backstop for
// anything lost on the way.
#include "algo/acquisition.hpp"

#include <algorithm>
#include <charconv>

#include "algo/retry.hpp"

namespace dlock::detail {
namespace {

using std::chrono::milliseconds;

// splitmix64: small, fast, and the same sequence everywhere for one seed (the simulator
// replays seeds).
std::uint64_t next_random(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

script_keys lock_acquire_keys(const lock_keys& k) {
  return {k.key, k.fence, k.waiters, k.waiter_info, k.tickets};
}

// A handoff's owner value: release.lua writes "<id>.h<round>" (round as decimal text).
std::string handed_over_value(std::string_view id, std::string_view round) {
  std::string value(id);
  return value.append(".h").append(round);
}

}  // namespace

script_keys lock_release_keys(const lock_keys& k) {
  return {k.key, k.waiters, k.waiter_info, k.fence};
}

script_keys semaphore_refresh_keys(const semaphore_keys& k, bool fair) {
  script_keys keys{k.expiries, k.weights};
  if (fair) {
    keys.push_back(k.owners);
    keys.push_back(k.waiter_info);
    keys.push_back(k.tickets);
  }
  if (!k.name.empty()) keys.push_back(k.name);  // the holders' mark (name_mark.lua)
  return keys;
}

script_keys semaphore_release_keys(const semaphore_keys& k) {
  script_keys keys{k.expiries, k.weights, k.waiters, k.waiter_info, k.fence, k.tickets};
  if (!k.name.empty()) keys.push_back(k.name);  // the holders' mark (name_mark.lua)
  return keys;
}

}  // namespace dlock::detail

namespace dlock {

// A mixed round (some nodes taken, the rest failed, no quorum either way) counts as contention
// when the failures alone could not have denied a quorum: the holder's release would let us in.
failure_kind classify_failure(std::error_code ec, const node_results& votes) {
  if (ec == errc::not_acquired) return failure_kind::contention;
  if (!detail::is_retryable(ec)) return failure_kind::fatal;
  if (ec == errc::quorum_not_reached) {
    std::size_t failed = 0, taken = 0;
    for (const auto& v : votes) {
      if (v.outcome == node_result::vote::failed) ++failed;
      if (v.outcome == node_result::vote::taken) ++taken;
    }
    std::size_t n = votes.size();
    if (taken > 0 && failed <= n - detail::quorum_of(n)) return failure_kind::contention;
  }
  return failure_kind::unavailable;
}

}  // namespace dlock

namespace dlock::detail {

semaphore_reply parse_semaphore_reply(const reply& r, bool fair, std::error_code& ec) {
  ec.clear();
  const auto& e = r.elements();
  std::size_t expected = fair ? 3 : 2;
  // Fair, not granted: a fourth element 1 says the name's own key holds another kind of lock.
  bool name_held = fair && e.size() == 4;
  bool shape = r.is_array() && (e.size() == expected || name_held);
  for (std::size_t i = 0; shape && i < e.size(); ++i) shape = e[i].is_integer();
  if (!shape || (e[0].integer() != 0 && e[0].integer() != 1)) {
    ec = errc::protocol_error;
    return {};
  }
  semaphore_reply out;
  out.granted = e[0].integer() == 1;
  if (name_held && (out.granted || e[3].integer() != 1)) {
    ec = errc::protocol_error;
    return {};
  }
  out.name_held = name_held;
  if (fair) {
    out.ticket = e[1].integer();
    out.queued = !out.granted && out.ticket != 0;
  } else if (out.granted) {
    out.ticket = e[1].integer();
  } else {
    out.next_expiry_ms = std::max<std::int64_t>(e[1].integer(), 0);
  }
  return out;
}

milliseconds effective_node_timeout(milliseconds configured, milliseconds ttl,
                                    milliseconds request_timeout) {
  if (configured.count() != 0) return configured;
  return std::min(std::max(ttl / 10, milliseconds(1)), request_timeout);
}

milliseconds waiter_entry_ttl(milliseconds retry_delay) {
  return std::max(4 * retry_delay, milliseconds(1000));
}

lock_target make_lock_target(std::size_t nodes, std::string_view key, const lock_options& o,
                             milliseconds request_timeout, bool cluster) {
  lock_target t;
  t.nodes = nodes;
  t.cluster = cluster;
  t.keys = lock_keys_for(key);
  for (int i = 0; o.copies > 1 && i < o.copies; ++i) {
    t.copies.push_back(lock_keys_for(lock_copy_key(key, i, o.copies)));
  }
  t.ttl = o.ttl;
  t.ttl_text = std::to_string(o.ttl.count());
  t.retry_delay = o.retry_delay;
  t.node_timeout = effective_node_timeout(o.node_timeout, o.ttl, request_timeout);
  t.drift_factor = o.drift_factor;
  t.fair = o.fair;
  t.wake_on_release = o.wake_on_release;
  return t;
}

semaphore_target make_semaphore_target(std::string_view key, std::ptrdiff_t limit,
                                       const semaphore_options& o,
                                       milliseconds request_timeout, bool cluster) {
  semaphore_target t;
  t.cluster = cluster;
  t.keys = semaphore_keys_for(key, o.fair);
  t.limit = limit;
  t.limit_text = std::to_string(limit);
  t.ttl_text = std::to_string(o.ttl.count());
  t.fair = o.fair;
  t.variant_text = o.fair ? "fair" : "";
  t.name_mark = semaphore_mark(limit, o.fair);
  t.wake_on_release = o.wake_on_release;
  t.ttl = o.ttl;
  t.retry_delay = o.retry_delay;
  t.node_timeout = effective_node_timeout(o.node_timeout, o.ttl, request_timeout);
  t.drift_factor = o.drift_factor;
  // A fair waiter's place must outlive the gap between two polls: at most one jittered delay
  // plus one request. Twice that, so one slow poll does not cost the place; a waiter that
  // crashed blocks the queue no longer than this.
  t.queue_ttl = 2 * (o.retry_delay + t.node_timeout) + milliseconds(20);
  return t;
}

struct acquisition::impl {
  // What an answer is for.
  // final_cleanup: what a give-up sends (leave the queues, give back what it won); the outcome
  // waits for its answers, so that a caller who exits or retries at once meets none of it,
  // except past the deadline or from a node that stopped answering (awaited_cleanup): then it
  // is only sent, and a process that exits at once may leave it unsent (the TTL bounds that).
  enum class purpose { vote, fence, cleanup, sem_attempt, final_cleanup };
  struct pending {
    std::uint64_t id;
    purpose what;
    std::size_t node;
    std::size_t round;  // the attempt it belongs to: a late answer never counts for a later one
  };
  // The round in flight (a lock's; a semaphore attempt is a round of one node).
  struct round_state {
    std::size_t index = 0;
    std::string value;
    quorum_round votes;
    bool decided = false;
    bool concluded = false;  // its outcome reached the acquisition (or it was cut short)
    std::int64_t fence = 0;
    std::size_t fence_confirmed = 0, fence_outstanding = 0;
    std::size_t cleanup_outstanding = 0;
    std::error_code failure{};  // while cleaning up: why it failed
  };

  const lock_target* lock = nullptr;
  const semaphore_target* sem = nullptr;
  std::string id;  // lock: the acquisition id; semaphore: the owner token
  std::string permits;
  steady::time_point deadline;
  int attempts = 1;
  int made = 0;
  bool last = false;  // the attempt begun last cannot be followed by another
  std::uint64_t random_state;
  std::uint64_t next_request = 1;
  std::vector<pending> awaited;
  std::vector<request> out;
  std::optional<steady::duration> sleep;
  std::optional<outcome> result;
  bool finished = false;
  bool queued = false;
  // Semaphore: an attempt's answer was lost or came too late, so it may have left a permit or
  // a place behind.
  bool attempt_lost = false;
  // Lock: when each round began, by index.
  std::vector<steady::time_point> round_started;
  std::optional<round_state> round;
  // A handoff naming an earlier round that came while a later round was in flight: that round
  // may have taken the handed-over key over (acquire.lua), so its answer decides (on_handoff).
  std::optional<std::pair<std::uint64_t, std::size_t>> deferred_handoff;  // fence, round
  // What a give-up reports once its final cleanup answered (final_cleanup_left).
  std::optional<outcome> after_cleanup;
  std::size_t final_cleanup_left = 0;
  std::optional<std::error_code> stopped;  // stop(): why
  // Lock, granted: the round (as pending::round counts) and its fence, for the stragglers.
  std::size_t granted_round = 0;
  std::int64_t granted_fence = 0;
  std::error_code last_error;
  node_results last_votes;
  endless_wait_rule endless;  // fed every failed attempt, in order
  // Lock: the nodes where the round begun last found a holder that is not a dlock client.
  std::vector<std::size_t> foreign_holders;
  // The time of the call being handled (each entry point sets it): emit() judges by it.
  steady::time_point now_{};
  // Attempt requests given up on while unanswered (wants_fallback).
  std::vector<std::uint64_t> abandoned;

  std::size_t nodes() const noexcept { return lock ? lock->nodes : 1; }
  milliseconds retry_delay() const noexcept { return lock ? lock->retry_delay : sem->retry_delay; }
  milliseconds node_timeout() const noexcept {
    return lock ? lock->node_timeout : sem->node_timeout;
  }
  bool accepts_handoff() const noexcept {
    return lock ? lock->accepts_handoff() : sem->accepts_handoff();
  }

  std::string round_value(std::size_t r) const { return id + "." + std::to_string(r); }
  std::string handoff_value(std::size_t r) const {
    return handed_over_value(id, std::to_string(r));
  }

  const std::vector<std::string>& node_names() const noexcept {
    return lock ? lock->node_names : sem->node_names;
  }

  bool past_deadline() const noexcept {
    return deadline != steady::time_point::max() && now_ >= deadline;
  }
  // The node's last vote (the round in flight's, else the last round's) timed out or lost its
  // connection: the connection was closed, so a request to it now waits for a fresh connect
  // and a whole node timeout if the node still does not answer.
  bool lost_touch_with(std::size_t node) const noexcept {
    const node_results& votes = round ? round->votes.votes() : last_votes;
    if (node >= votes.size() || votes[node].outcome != node_result::vote::failed) return false;
    return votes[node].error == errc::timeout || votes[node].error == errc::connection_lost;
  }
  // A cleanup is awaited (a failed round's before the next, a give-up's before the outcome) so
  // that what follows meets none of it; but never past the caller's deadline, nor, on a single
  // node, on one that stopped answering (try_lock() would take two node timeouts). Not on a
  // Redlock: there the awaited cleanup of a timed-out node also paces the rounds, and without
  // it two waiters that each win a different node wake each other into a livelock (found by
  // the simulator: 4 Redlock-3 schedules in 83,000). Not awaited, a cleanup still goes out,
  // after our earlier requests to that node (one connection, FIFO), and can delete only the
  // values it names.
  std::optional<purpose> awaited_cleanup(std::size_t node, purpose what) const noexcept {
    if (past_deadline() || (nodes() == 1 && lost_touch_with(node))) return std::nullopt;
    return what;
  }

  std::uint64_t emit(std::size_t node, const script& code, script_keys keys,
                     std::vector<std::string> args, std::optional<purpose> awaited_for) {
    if (awaited_for == purpose::cleanup || awaited_for == purpose::final_cleanup) {
      awaited_for = awaited_cleanup(node, *awaited_for);
    }
    std::uint64_t rid = next_request++;
    if (out.empty()) out.reserve(nodes());
    out.push_back(request{rid, node, &code, std::move(keys), std::move(args), node_timeout()});
    if (awaited_for) {
      awaited.push_back(pending{rid, *awaited_for, node, static_cast<std::size_t>(made)});
      if (*awaited_for == purpose::final_cleanup) ++final_cleanup_left;
    }
    return rid;
  }
  // The pending entry for `rid`, removed; nullopt for a stale or fire-and-forget answer.
  std::optional<pending> claim(std::uint64_t rid) {
    auto it = std::find_if(awaited.begin(), awaited.end(),
                           [&](const pending& p) { return p.id == rid; });
    if (it == awaited.end()) return std::nullopt;
    pending p = *it;
    awaited.erase(it);
    return p;
  }

  bool queues_next(steady::time_point now) const noexcept {
    // An attempt after which none could start before the deadline is the last: next_sleep
    // ends a sleep last_attempt_lead before the deadline at the latest.
    return made + 1 < attempts &&
           (deadline == steady::time_point::max() || now + acquisition::last_attempt_lead < deadline);
  }

  steady::duration retry_delay_after(const node_results& votes) {
    steady::duration delay = jittered_delay(retry_delay(), next_random(random_state));
    // While another owner holds it with less time left than our delay, wake up at its expiry.
    // A lock's 0 means "free, but a fair queue's head goes first": no expiry to wait for.
    long long shortest_hint = lock ? 1 : 0;
    for (const auto& v : votes) {
      if (v.outcome == node_result::vote::taken && v.holder_ttl_ms >= shortest_hint) {
        delay = std::min<steady::duration>(delay, milliseconds(v.holder_ttl_ms + 1));
      }
    }
    return delay;
  }
  // After a failed attempt: the error that ends a wait without a deadline all the same (a full
  // node, a TTL shorter than a round trip: endless_wait_rule), or none. A wait with a deadline
  // rides those out until it.
  std::error_code ends_for_good(steady::time_point now, std::error_code ec,
                                const node_results& votes) {
    auto why = endless.gives_up_on(ec, votes, now);
    return deadline == steady::time_point::max() ? why : std::error_code();
  }
  // The sleep before the next attempt, or nullopt to give up. A backstop that would end past
  // the deadline is cut to end last_attempt_lead before it, for one last attempt: meanwhile a
  // release may wake the waiter (or hand it the lock), and the driver cuts a sleep short once
  // an attempt that could not queue can (its inboxes subscribed). Giving up instead would end
  // try_lock_for(2s) after one round whenever retry_delay is above 2 s.
  std::optional<steady::duration> next_sleep(steady::time_point now, steady::duration delay,
                                             std::error_code ec) const {
    if (!is_retryable(ec) || made >= attempts) return std::nullopt;
    if (deadline == steady::time_point::max() || now + delay < deadline) return delay;
    auto until_last = deadline - now - acquisition::last_attempt_lead;
    if (until_last <= steady::duration::zero()) return std::nullopt;
    return until_last;
  }
  // ---- lock ----

  void begin_lock_round(steady::time_point now, const std::vector<std::string>& channels) {
    std::size_t index = round_started.size();
    round_started.push_back(now);
    foreign_holders.clear();
    round.emplace(round_state{index, round_value(index),
                              quorum_round(nodes(), now, lock->ttl, lock->drift_factor)});
    const auto& names = node_names();
    for (std::size_t i = 0; i < nodes() && i < names.size(); ++i) {
      round->votes.votes()[i].node = names[i];
    }
    std::string mode = lock->fair ? "fair" : "";
    for (std::size_t i = 0; i < nodes(); ++i) {
      std::string entry;
      if (!last && i < channels.size() && !channels[i].empty()) {
        entry.append(std::to_string(waiter_entry_ttl(lock->retry_delay).count()))
            .append(" ")
            .append(channels[i]);
        // "<lock ttl> <round>": release.lua may hand the lock to this entry (see on_handoff).
        if (accepts_handoff()) {
          entry.append(" ").append(lock->ttl_text).append(" ").append(std::to_string(index));
        }
        queued = true;
      }
      emit(i, acquire_script, lock_acquire_keys(lock->keys_on(i)),
           {round->value, lock->ttl_text, std::move(entry), mode}, purpose::vote);
    }
  }

  void on_vote(std::size_t node, steady::time_point now, std::error_code ec, const reply& r) {
    auto& votes = round->votes;
    const auto& e = r.elements();
    if (ec) {
      votes.failed(node, ec, r.is_error() ? r.str() : std::string());
    } else if (r.is_array() && (e.size() == 2 || e.size() == 3) && e[0].is_integer() &&
               e[1].is_integer()) {
      if (e[0].integer() == 1) {
        votes.granted(node, e[1].integer());
      } else {
        votes.taken(node, e[1].integer());
        // {0, ttl, 1}: the holder is another client's (acquire.lua).
        if (e.size() == 3 && e[2].is_integer() && e[2].integer() == 1) {
          foreign_holders.push_back(node);
        }
      }
    } else {
      votes.failed(node, errc::protocol_error, "unexpected reply " + r.to_string());
    }
    if (round->decided || !votes.decided()) return;
    round->decided = true;
    if (!votes.quorum_granted()) return conclude_round(now, votes.failure());
    auto plan = plan_fence(votes);
    round->fence = plan.fence;
    round->fence_confirmed = plan.already_at_fence;
    if (round->fence_confirmed >= votes.quorum()) return conclude_round(now, {});
    // Granting nodes disagree on the counter (one missed acquisitions while down, or a failed
    // round bumped some). The fence may only be reported once a quorum of granting nodes holds
    // at least it, so that the next holder's quorum, which must intersect ours, reads a higher
    // value.
    round->fence_outstanding = plan.to_raise.size();
    for (std::size_t i : plan.to_raise) {
      emit(i, fence_raise_script, {lock->keys_on(i).fence},
           {std::to_string(plan.fence), lock->ttl_text}, purpose::fence);
    }
  }

  void on_fence(steady::time_point now, std::error_code ec, const reply& r) {
    --round->fence_outstanding;
    if (!ec && r.is_integer() && r.integer() >= round->fence) ++round->fence_confirmed;
    if (round->concluded) return;
    if (round->fence_confirmed >= round->votes.quorum()) return conclude_round(now, {});
    if (round->fence_outstanding == 0) conclude_round(now, errc::quorum_not_reached);
  }

  void conclude_round(steady::time_point now, std::error_code ec) {
    if (!ec && now >= round->votes.valid_until()) ec = errc::lease_expired;
    if (!ec) return round_done(now, {});
    round->concluded = true;
    // Not where the node answered "taken": that answer proves this round set nothing there,
    // and under contention those releases were a quarter of all commands sent (bench/).
    round->failure = ec;
    // Votes still unanswered no longer count: if one comes back NOSCRIPT, its EVAL must not
    // follow the cleanup below.
    for (const auto& p : awaited) {
      if (p.what == purpose::vote && p.round == round->index + 1) abandoned.push_back(p.id);
    }
    for (std::size_t i = 0; i < nodes(); ++i) {
      if (round->votes.votes()[i].outcome == node_result::vote::taken) continue;
      auto awaited_for = awaited_cleanup(i, purpose::cleanup);
      if (awaited_for) ++round->cleanup_outstanding;
      emit(i, release_script, lock_release_keys(lock->keys_on(i)), {round->value}, awaited_for);
    }
    if (round->cleanup_outstanding == 0) round_done(now, ec);
  }

  void on_cleanup(steady::time_point now) {
    if (--round->cleanup_outstanding > 0) return;
    // A round lost early to fast failures (dead nodes refuse at once) is judged again now:
    // each node answers our release after the acquire sent before it on the same connection,
    // so every node that answers at all has voted by now. Votes against may prove another
    // owner (not_acquired), or too many nodes may have failed alike (wrong_type, auth_failed).
    std::error_code ec = round->failure;
    if (!round->votes.quorum_granted()) ec = round->votes.failure();
    round_done(now, ec);
  }

  void round_done(steady::time_point now, std::error_code ec) {
    round->concluded = true;
    auto deferred = std::exchange(deferred_handoff, std::nullopt);
    round_state done_round = std::move(*round);
    round.reset();
    if (!ec && !stopped) {
      // The votes go to the outcome, not copied: after a grant nothing judges the nodes by
      // them (a single node's grant leaves no queue; lost_touch_with is for single nodes).
      last_votes.clear();
      granted_round = done_round.index + 1;
      granted_fence = done_round.fence;
      return finish_granted(std::move(done_round.value),
                            static_cast<std::uint64_t>(done_round.fence),
                            done_round.votes.valid_until(), std::move(done_round.votes.votes()));
    }
    last_votes = done_round.votes.votes();  // what the cleanups below judge the nodes by
    if (!ec) {
      // Won after the caller stopped waiting: give it back (only this round's value).
      emit_lock_release(done_round.value, purpose::final_cleanup);
      return finish_failed(*stopped, done_round.votes.votes());
    }
    last_error = ec;
    if (stopped) return finish_failed(*stopped, done_round.votes.votes());
    // The round found the key another's, so it ran before the handoff did and cannot have
    // taken the handed-over key over: the handoff stands.
    if (deferred && deferred->second + 1 == done_round.index &&
        done_round.votes.votes()[0].outcome == node_result::vote::taken &&
        accept_handoff(now, deferred->first, deferred->second)) {
      return;
    }
    if (auto why = ends_for_good(now, ec, done_round.votes.votes())) {
      return finish_failed(why, std::move(done_round.votes.votes()));
    }
    auto delay = next_sleep(now, retry_delay_after(done_round.votes.votes()), ec);
    if (!delay) return finish_failed(ec, std::move(done_round.votes.votes()));
    sleep = delay;
  }

  // A node that granted after the round was decided holds our key with a counter that may lag
  // behind the fence: raise it too, so that the counters converge on every node that grants,
  // not only on the quorum that answered first (a later loss of other nodes' counters then
  // cannot bring an older fence back).
  void raise_straggler(std::size_t node, std::error_code ec, const reply& r) {
    const auto& e = r.elements();
    bool granted = !ec && r.is_array() && e.size() == 2 && e[0].is_integer() &&
                   e[0].integer() == 1 && e[1].is_integer();
    if (!granted || e[1].integer() >= granted_fence) return;
    emit(node, fence_raise_script, {lock->keys_on(node).fence},
         {std::to_string(granted_fence), lock->ttl_text}, std::nullopt);
  }

  bool accept_handoff(steady::time_point now, std::uint64_t fence, std::size_t r) {
    auto valid_until =
        round_started[r] + lock->ttl - drift_allowance(lock->ttl, lock->drift_factor);
    if (now >= valid_until || stopped) {
      // Born expired (queued longer than the TTL before the release), or no longer wanted:
      // give it back. Only this handoff's own value can be deleted by it, whenever it runs.
      emit_lock_release(handoff_value(r), std::nullopt);
      return false;
    }
    finish_handed_over(handoff_value(r), fence, valid_until);
    return true;
  }

  // Granted by a release's handoff (release.lua, sem_release.lua): the one node's vote.
  void finish_handed_over(std::string token, std::uint64_t fence, steady::time_point valid_until) {
    node_results votes(1);
    if (!node_names().empty()) votes[0].node = node_names()[0];
    votes[0].outcome = node_result::vote::granted;
    finish_granted(std::move(token), fence, valid_until, std::move(votes));
    result->handoff = true;
  }

  void emit_lock_release(const std::string& value, std::optional<purpose> awaited_for) {
    for (std::size_t i = 0; i < nodes(); ++i) {
      emit(i, release_script, lock_release_keys(lock->keys_on(i)), {value}, awaited_for);
    }
  }

  // A grant (acquire.lua) or a handoff (release.lua) takes the id out of the granting node's
  // queue in the same script. Every other entry must go, or the next release would wake, or
  // hand the lock to, a waiter that no longer waits. On a single node that is never a script
  // of its own: after a SCRIPT FLUSH it could fail NOSCRIPT and run only after our release.
  void leave_queues(bool granted) {
    if (!queued || (granted && nodes() == 1)) return;
    // Giving up: a release may have handed us the lock after we stopped listening. The same
    // script that takes us out of the queue gives such a key back (to the next waiter).
    bool give_up = !granted && accepts_handoff();
    std::optional<purpose> awaited_for;
    if (!granted) awaited_for = purpose::final_cleanup;
    for (std::size_t i = 0; i < nodes(); ++i) {
      if (give_up) {
        emit(i, release_script, lock_release_keys(lock->keys_on(i)), {id, "give-up"}, awaited_for);
      } else {
        emit(i, leave_script, {lock->keys_on(i).waiters, lock->keys_on(i).waiter_info}, {id}, awaited_for);
      }
    }
  }

  void finish_granted(std::string token, std::uint64_t fence, steady::time_point valid_until,
                      node_results votes) {
    finished = true;
    sleep.reset();
    if (lock) leave_queues(true);
    result = outcome{{}, std::move(token), fence, valid_until, std::move(votes)};
  }
  void finish_failed(std::error_code ec, node_results votes) {
    finished = true;
    sleep.reset();
    if (lock) leave_queues(false);
    outcome failed{ec, {}, 0, {}, std::move(votes)};
    if (final_cleanup_left > 0) {
      after_cleanup = std::move(failed);
    } else {
      result = std::move(failed);
    }
  }

  bool on_handoff(steady::time_point now, std::string_view grant) {
    if (finished) return true;
    if (!accepts_handoff()) return false;
    std::uint64_t fence = 0;
    std::size_t r = 0;
    auto space = grant.find(' ');
    if (space == std::string_view::npos) return false;
    auto parse = [](std::string_view text, auto& value) {
      auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
      return err == std::errc() && end == text.data() + text.size();
    };
    if (!parse(grant.substr(0, space), fence) || !parse(grant.substr(space + 1), r) ||
        r >= round_started.size()) {
      return false;
    }
    if (sem) return on_semaphore_handoff(now, fence, r);
    // A release handed us the key under "<id>.h<r>" when it ran, after round r began: round r
    // wrote the entry the release used. Counting the lease from that round's start is
    // therefore safe whatever delayed the message. But a later round than r may have run
    // after the release and taken the key over (acquire.lua rewrites it, and that round's
    // cleanup may delete it and hand it on). Round r + 1 answering "taken" proves it ran
    // before the release, and then so did every earlier round: the handoff is trusted once
    // that round, in flight when the message came, has answered so. In every other case (that
    // round failed or was granted, or a later one has begun) the message is a mere wake-up,
    // and the next round settles what the key holds (it takes a handoff still standing over).
    if (r + 1 < round_started.size()) {
      if (round && r + 2 == round_started.size()) {
        deferred_handoff.emplace(fence, r);
      }
      return false;
    }
    return accept_handoff(now, fence, r);
  }

  // ---- semaphore ----

  // A release made our token a holder (sem_release.lua), for the attempt r that wrote the
  // entry it used, so after attempt r began: the permit's validity counts from there. The
  // token is the same in every attempt, so an attempt that runs after the handoff finds itself
  // holding and is granted again (with a fence of its own), harmlessly; but one still in flight
  // must not be left behind: it could run after our release and take a permit nobody holds.
  // So with an attempt in flight the handoff waits for its answer: "not granted" proves it ran
  // before the release, and the handoff stands; "granted" supersedes it; an error (it may yet
  // run) makes the message a mere wake-up, and the next attempt finds the permit.
  bool on_semaphore_handoff(steady::time_point now, std::uint64_t fence, std::size_t r) {
    if (round) {
      deferred_handoff.emplace(fence, r);
      return false;
    }
    return accept_semaphore_handoff(now, fence, r);
  }

  bool accept_semaphore_handoff(steady::time_point now, std::uint64_t fence, std::size_t r) {
    auto valid_until = round_started[r] + sem->ttl - drift_allowance(sem->ttl, sem->drift_factor);
    // Born expired (queued for longer than the TTL), or no longer wanted: a mere wake-up. No
    // release of its own: the token is the same in every attempt, so one that ran late could
    // take back a permit a later attempt won (the simulator found that). The next attempt
    // finds itself holding and takes the permit over with a new validity, or the give-up's
    // cleanup removes it.
    if (now >= valid_until || stopped) return false;
    finish_handed_over(id, fence, valid_until);
    return true;
  }

  void begin_semaphore_attempt(steady::time_point now, const std::vector<std::string>& channels) {
    foreign_holders.clear();
    round_started.push_back(now);  // index made - 1: a handoff names the attempt it answers
    round.emplace(round_state{static_cast<std::size_t>(made - 1), id,
                              quorum_round(1, now, sem->ttl, sem->drift_factor)});
    if (!node_names().empty()) round->votes.votes()[0].node = node_names()[0];
    std::string channel = !last && !channels.empty() ? channels[0] : std::string();
    if (!channel.empty()) queued = true;
    const auto& limit = sem->limit_text;
    const auto& ttl = sem->ttl_text;
    const auto& k = sem->keys;
    if (sem->fair) {
      // Queued (queue_ms > 0) even without a channel: its ticket keeps its place in the queue.
      auto queue_ms = last ? milliseconds::zero() : sem->queue_ttl;
      // "<channel> <attempt>": sem_release.lua may make this token a holder (see on_handoff).
      if (!channel.empty() && accepts_handoff()) {
        channel.append(" ").append(std::to_string(made - 1));
      }
      script_keys keys{k.owners, k.expiries, k.weights, k.tickets, k.waiter_info, k.fence};
      if (!k.name.empty()) keys.push_back(k.name);  // the holders' mark (name_mark.lua)
      emit(0, sem_fair_acquire_script, std::move(keys),
           {id, limit, permits, ttl, std::to_string(queue_ms.count()), channel, sem->name_mark},
           purpose::sem_attempt);
    } else {
      std::string waiter;
      if (!channel.empty()) {
        waiter = std::to_string(waiter_entry_ttl(sem->retry_delay).count()) + " " + channel;
        // "<attempt>": sem_release.lua may make this token a holder (see on_handoff).
        if (accepts_handoff()) waiter.append(" ").append(std::to_string(made - 1));
      }
      script_keys keys{k.expiries, k.weights, k.fence, k.waiters, k.waiter_info, k.tickets};
      if (!k.name.empty()) keys.push_back(k.name);  // the holders' mark (name_mark.lua)
      emit(0, sem_acquire_script, std::move(keys), {id, limit, permits, ttl, waiter, sem->name_mark},
           purpose::sem_attempt);
    }
  }

  void on_semaphore_reply(steady::time_point now, std::error_code ec, const reply& r) {
    semaphore_reply parsed;
    if (!ec) parsed = parse_semaphore_reply(r, sem->fair, ec);
    auto& votes = round->votes;
    if (ec) {
      votes.failed(0, ec, r.is_error() ? r.str() : std::string());
    } else if (parsed.granted) {
      votes.granted(0, parsed.ticket);
    } else {
      votes.taken(0, parsed.next_expiry_ms);
      // Another kind of lock holds the name: its release wakes nobody here; watch its key.
      if (parsed.name_held) foreign_holders.push_back(0);
    }
    round_state done_round = std::move(*round);
    round.reset();
    // A handoff that came while this attempt was in flight (on_semaphore_handoff).
    auto deferred = std::exchange(deferred_handoff, std::nullopt);
    if (deferred && !ec && !parsed.granted &&
        accept_semaphore_handoff(now, deferred->first, deferred->second)) {
      return;
    }
    auto delay = retry_delay_after(done_round.votes.votes());
    if (ec) {
      // The script may have run before the answer was lost: the next attempt (same token)
      // finds what it left, and giving up must remove it (also after later attempts that
      // neither were granted nor queued: in quarantine they leave a held permit be).
      attempt_lost = true;
      return retry_or_give_up(now, delay, ec, true, done_round.votes.votes());
    }
    if (parsed.granted && stopped) {
      // Granted after the caller stopped waiting: the cleanup gives the permit back.
      return retry_or_give_up(now, delay, *stopped, true, done_round.votes.votes());
    }
    if (parsed.granted) {
      auto valid_until = done_round.votes.valid_until();
      if (now < valid_until) {
        // The granting script dequeued us: no entry is left to remove.
        return finish_granted(id, static_cast<std::uint64_t>(parsed.ticket), valid_until,
                              std::move(done_round.votes.votes()));
      }
      // Granted too late to be of use. The entry is ours: a retry renews it, giving up drops
      // it (also after a later attempt that a quarantine refused, which leaves it be).
      attempt_lost = true;
      return retry_or_give_up(now, delay, errc::lease_expired, true, done_round.votes.votes());
    }
    retry_or_give_up(now, delay, errc::not_acquired, parsed.queued, done_round.votes.votes());
  }

  void retry_or_give_up(steady::time_point now, steady::duration delay, std::error_code ec,
                        bool cleanup, node_results votes) {
    last_error = ec;
    last_votes = votes;
    std::optional<steady::duration> next;
    if (stopped) {
      ec = *stopped;
    } else if (auto why = ends_for_good(now, ec, votes)) {
      ec = why;
    } else {
      next = next_sleep(now, delay, ec);
    }
    if (next) {
      sleep = next;
      return;
    }
    // An earlier attempt may have queued us although the last one did not. Leave no permit or
    // queue place behind, and report only after the removal answered, so that a caller who
    // retries at once does not meet our own leftover. A wake-up we got and will not use is
    // handed on to the next waiter by the same script.
    if (!cleanup && !queued && !attempt_lost) return finish_failed(ec, std::move(votes));
    const auto& k = sem->keys;
    emit(0, sem_release_script, semaphore_release_keys(k),
         {id, sem->limit_text, sem->variant_text, sem->name_mark}, purpose::final_cleanup);
    finish_failed(ec, std::move(votes));
  }
};

acquisition::acquisition(const lock_target& target, std::string id, steady::time_point deadline,
                         int attempts, std::uint64_t seed)
    : impl_(std::make_unique<impl>()) {
  impl_->lock = &target;
  impl_->id = std::move(id);
  impl_->deadline = deadline;
  impl_->attempts = std::max(attempts, 1);
  impl_->random_state = seed;
}

acquisition::acquisition(const semaphore_target& target, std::string token,
                         std::ptrdiff_t permits, steady::time_point deadline, int attempts,
                         std::uint64_t seed)
    : impl_(std::make_unique<impl>()) {
  impl_->sem = &target;
  impl_->id = std::move(token);
  impl_->permits = std::to_string(permits);
  impl_->deadline = deadline;
  impl_->attempts = std::max(attempts, 1);
  impl_->random_state = seed;
}

acquisition::acquisition(acquisition&&) noexcept = default;
acquisition& acquisition::operator=(acquisition&&) noexcept = default;
acquisition::~acquisition() = default;

bool acquisition::queues_next(steady::time_point now) const noexcept {
  return impl_->queues_next(now);
}

void acquisition::begin_attempt(steady::time_point now, const std::vector<std::string>& channels) {
  auto& s = *impl_;
  s.now_ = now;
  if (s.finished || s.round) return;  // a driver bug; nothing sensible to do
  s.sleep.reset();
  if (s.made > 0 && s.deadline != steady::time_point::max() && now >= s.deadline) {
    // A sleep that ended at the deadline (a late timer): no attempt starts after it.
    if (s.lock) return s.finish_failed(s.last_error, s.last_votes);
    return s.retry_or_give_up(now, {}, s.last_error, true, s.last_votes);
  }
  s.last = !s.queues_next(now);
  ++s.made;
  if (s.lock) {
    s.begin_lock_round(now, channels);
  } else {
    s.begin_semaphore_attempt(now, channels);
  }
}

void acquisition::on_reply(std::uint64_t request_id, steady::time_point now, std::error_code ec,
                           const reply& r) {
  auto& s = *impl_;
  s.now_ = now;
  auto p = s.claim(request_id);
  if (!p) return;
  using purpose = impl::purpose;
  if (p->what == purpose::final_cleanup) {
    if (--s.final_cleanup_left == 0 && s.after_cleanup) {
      s.result = std::move(s.after_cleanup);
      s.after_cleanup.reset();
    }
    return;
  }
  if (s.finished && s.lock && p->what == purpose::vote && p->round == s.granted_round &&
      s.granted_round > 0) {
    return s.raise_straggler(p->node, ec, r);
  }
  if (s.finished || !s.round) return;  // a handoff came first; this round found the key taken
  if (p->round != s.round->index + 1) return;  // an earlier round's straggler
  switch (p->what) {
    case purpose::vote:
      return s.on_vote(p->node, now, ec, r);
    case purpose::fence:
      return s.on_fence(now, ec, r);
    case purpose::cleanup:
      return s.on_cleanup(now);
    case purpose::sem_attempt:
      return s.on_semaphore_reply(now, ec, r);
    default:
      return;
  }
}

acquisition::late_handoff_give_back acquisition::give_back_plan() const {
  late_handoff_give_back plan;
  script_keys keys;
  if (impl_->lock) {
    keys = lock_release_keys(impl_->lock->keys_on(0));
    plan.code = &release_script;
    plan.args = {impl_->id, "give-up"};
  } else {
    keys = semaphore_release_keys(impl_->sem->keys);
    plan.code = &sem_release_script;
    plan.args = {impl_->id, impl_->sem->limit_text, impl_->sem->variant_text,
                 impl_->sem->name_mark};
  }
  plan.keys.assign(keys.begin(), keys.end());
  plan.timeout = impl_->node_timeout();
  // As long as a queued place that may still be handed over lives: a fair one lives queue_ttl.
  auto place = waiter_entry_ttl(impl_->retry_delay());
  if (impl_->sem && impl_->sem->fair) place = std::max(place, impl_->sem->queue_ttl);
  plan.window = std::max<steady::duration>(std::chrono::seconds(10),
                                           place + impl_->node_timeout());
  return plan;
}

bool acquisition::on_handoff(steady::time_point now, std::string_view grant) {
  impl_->now_ = now;
  return impl_->on_handoff(now, grant);
}

void acquisition::on_start(steady::time_point now) {
  auto& s = *impl_;
  if (s.made > 0 || s.deadline == steady::time_point::max() || now < s.deadline) return;
  s.deadline = steady::time_point::max();
  s.attempts = 1;
}

void acquisition::on_deadline(steady::time_point now) {
  auto& s = *impl_;
  s.now_ = now;
  if (now < gives_up_at()) return;
  // Whatever is still awaited has missed the deadline: it counts as timed out, and its answer,
  // when it comes, is ignored (stale). What that ends (the round, the give-up's cleanup) sends
  // its cleanups without awaiting them, since the deadline has passed.
  using purpose = impl::purpose;
  for (const auto& p : s.awaited) {
    if (p.what != purpose::cleanup && p.what != purpose::final_cleanup) s.abandoned.push_back(p.id);
  }
  for (const auto& p : std::vector<impl::pending>(s.awaited)) on_reply(p.id, now, errc::timeout, {});
}

steady::time_point acquisition::gives_up_at() const noexcept {
  auto d = impl_->deadline;
  return d >= steady::time_point::max() - answer_grace ? steady::time_point::max() : d + answer_grace;
}

bool acquisition::wants_fallback(std::uint64_t request_id) const noexcept {
  const auto& a = impl_->abandoned;
  return std::find(a.begin(), a.end(), request_id) == a.end();
}

fallback_gate acquisition::gate() const noexcept {
  return {this, [](const void* engine, std::uint64_t request_id) {
            return static_cast<const acquisition*>(engine)->wants_fallback(request_id);
          }};
}

void acquisition::stop(steady::time_point now, std::error_code why) {
  auto& s = *impl_;
  s.now_ = now;
  if (s.finished || s.stopped) return;
  s.stopped = why;
  if (s.round) return;  // the attempt in flight concludes first
  s.sleep.reset();
  if (s.lock) return s.finish_failed(why, s.last_votes);
  // Between two semaphore attempts: an earlier one may have queued us.
  s.retry_or_give_up(now, {}, why, true, s.last_votes);
}

steady::time_point acquisition::deadline() const noexcept { return impl_->deadline; }
milliseconds acquisition::node_timeout() const noexcept { return impl_->node_timeout(); }
std::error_code acquisition::last_error() const noexcept { return impl_->last_error; }
const node_results& acquisition::last_votes() const noexcept { return impl_->last_votes; }

std::vector<request> acquisition::take_requests() { return std::exchange(impl_->out, {}); }

std::optional<steady::duration> acquisition::take_sleep() {
  return std::exchange(impl_->sleep, std::nullopt);
}

std::vector<acquisition::foreign_holder> acquisition::take_foreign_holders() {
  std::vector<foreign_holder> out;
  for (auto node : std::exchange(impl_->foreign_holders, {})) {
    out.push_back({node, impl_->lock ? std::string_view(impl_->lock->keys_on(node).key)
                                     : std::string_view(impl_->sem->keys.name)});
  }
  return out;
}

std::optional<acquisition::outcome> acquisition::take_outcome() {
  return std::exchange(impl_->result, std::nullopt);
}

bool acquisition::done() const noexcept { return impl_->finished; }
bool acquisition::queued() const noexcept { return impl_->queued; }
int acquisition::attempts_made() const noexcept { return impl_->made; }
const std::string& acquisition::id() const noexcept { return impl_->id; }

std::uint16_t acquisition::slot(std::size_t node) const noexcept {
  return hash_slot(impl_->lock ? impl_->lock->keys_on(node).key : impl_->sem->keys.expiries);
}

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

}  // namespace dlock::detail
