// The Redlock round, as the engine of every dlock::mutex (a single node is N = 1).
//
// A round sends the acquire script to all N nodes at once, each under node_timeout, so its
// duration follows the slowest answering node rather than the sum of all; it is decided as
// soon as a quorum granted or became impossible (quorum_round), without waiting for
// stragglers. With N > 1 the fencing token needs one more step before success (plan_fence).
// Validity is start + ttl - drift on steady_clock, judged at the moment of decision.
//
// A failed round releases on every node, including those that timed out or errored, because
// their SET may have run (or may still run) after the answer was lost; the round reports only
// after those releases returned, so that a retry never meets our own leftovers.
//
// Ownership is per round: round n of an acquisition writes the value "<id>.<n>", a handoff
// "<id>.h<n>", and every release compares the exact value. A release whose outcome we never
// learned (timed out, delayed in the network, re-sent after NOSCRIPT) can therefore only ever
// delete the key of the round it was sent for, never that of a later round; a later round
// takes over a key that holds any value of its acquisition (acquire.lua), so a late SET of an
// earlier round still counts as ours.
#include "lock_core.hpp"

#include <asio/dispatch.hpp>

#include <algorithm>
#include <charconv>
#include <climits>

#include "algo/retry.hpp"
#include "dlock/key_layout.hpp"
#include "net/inbox.hpp"
#include "token.hpp"

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

struct lock_core::round_op {
  round_op(std::size_t n, steady::time_point start, const lock_options& o, std::string t,
           round_handler h, std::shared_ptr<acquire_op> a)
      : token(std::move(t)),
        round(n, start, o.ttl, o.drift_factor),
        handler(std::move(h)),
        acquisition(std::move(a)) {}
  std::string token;  // this round's owner value, "<id>.<round>"
  quorum_round round;
  round_handler handler;
  std::shared_ptr<acquire_op> acquisition;  // the acquisition this round belongs to, if any
  bool decided = false;
  std::int64_t fence = 0;
  std::size_t fence_confirmed = 0, fence_outstanding = 0;
};

struct lock_core::acquire_op {
  std::string id = random_token();  // names the acquisition in the waiter queue and inboxes
  steady::time_point deadline;
  int attempts_left = 0;
  acquire_handler handler;
  node_results* out = nullptr;
  std::shared_ptr<wake_waiter> waiter;  // the sleep between rounds, and the wake-ups that end it
  bool done = false;                    // the handler ran (a round's grant, or a handoff)
  bool round_in_flight = false;
  // A handoff naming an earlier round that came while a later round was in flight: that round
  // may have taken the handed-over key over (acquire.lua), so its answer decides (take_handoff).
  std::optional<std::pair<std::uint64_t, std::size_t>> deferred_handoff;  // fence, round
  std::vector<steady::time_point> round_started;  // per round: when it began

  std::string round_value(std::size_t round) const { return id + "." + std::to_string(round); }
  std::string handoff_value(std::size_t round) const {
    return id + ".h" + std::to_string(round);
  }
};

lock_core::lock_core(std::vector<client> nodes, std::string key, lock_options options)
    : nodes_(std::move(nodes)), key_(std::move(key)), options_(std::move(options)) {
  auto keys = lock_keys_for(key_);
  fence_key_ = std::move(keys.fence);
  queue_key_ = std::move(keys.waiters);
  waiter_info_key_ = std::move(keys.waiter_info);
  tickets_key_ = std::move(keys.tickets);
  for (const auto& node : nodes_) node_names_.push_back(node.where().to_string());
  node_timeout_ = options_.node_timeout;
  if (node_timeout_.count() == 0) {
    node_timeout_ = std::min(std::max(options_.ttl / 10, std::chrono::milliseconds(1)),
                             nodes_.front().options().request_timeout);
  }
}

void lock_core::start_acquire(steady::time_point deadline, int attempts, acquire_handler handler,
                              node_results* out, std::string id) {
  auto op = std::make_shared<acquire_op>();
  if (!id.empty()) {
    // Round 0 went out from the caller's thread (acquire_direct); it never queues, so no
    // handoff names it, and the rounds here go on from 1.
    op->id = std::move(id);
    op->round_started.push_back(steady::now());
  }
  std::vector<inbox*> boxes;
  for (auto& node : nodes_) boxes.push_back(&node.wake_inbox());
  op->waiter = std::make_shared<wake_waiter>(executor(), std::move(boxes), op->id,
                                             options_.wake_on_release);
  op->deadline = deadline;
  op->attempts_left = std::max(attempts, 1);
  op->handler = std::move(handler);
  op->out = out;
  if (accepts_handoff()) {
    // Weak: the waiter belongs to the op, and must not keep it (or the core) alive.
    std::weak_ptr<lock_core> weak_self = shared_from_this();
    std::weak_ptr<acquire_op> weak_op = op;
    op->waiter->on_handoff([weak_self, weak_op](std::string_view grant) {
      auto self = weak_self.lock();
      auto acquisition = weak_op.lock();
      return self && acquisition && self->take_handoff(acquisition, grant);
    });
  }
  // All of an acquisition runs on the I/O thread, where the inboxes and timers live; the
  // commands would be handed to it anyway.
  asio::dispatch(executor(), [self = shared_from_this(), op] { self->attempt(op); });
}

bool lock_core::acquire_direct(int attempts, lease& result, std::error_code& ec,
                               node_results* out, std::string& id) {
  if (nodes_.size() != 1 || on_io_thread()) return false;
  std::string candidate = random_token();
  std::string value = candidate + ".0";
  auto start = steady::now();
  std::string ttl = std::to_string(options_.ttl.count());
  reply r;
  std::error_code run_ec;
  if (!run_script_direct(nodes_[0], acquire_script,
                         {key_, fence_key_, queue_key_, waiter_info_key_, tickets_key_},
                         {value, ttl, "", options_.fair ? "fair" : ""}, node_timeout_, run_ec, r)) {
    return false;  // nothing sent: the async path starts from scratch
  }
  id = std::move(candidate);
  const auto& e = r.elements();
  bool answered = !run_ec && r.is_array() && e.size() == 2 && e[0].is_integer() &&
                  e[1].is_integer();
  if (!answered) return false;  // errors and odd replies: the async path reports them
  quorum_round round(1, start, options_.ttl, options_.drift_factor);
  round.votes()[0].node = node_names_[0];
  if (e[0].integer() == 1) {
    round.granted(0, e[1].integer());
    if (steady::now() >= round.valid_until()) return false;  // born expired: try again
    auto state = std::make_shared<lease_state>();
    state->token = std::move(value);
    state->fence = static_cast<std::uint64_t>(e[1].integer());
    state->set_deadline(round.valid_until());
    result = make_lease(shared_from_this(), std::move(state));
    ec.clear();
    if (out) *out = round.votes();
    return true;
  }
  if (attempts > 1) return false;  // taken: the async path waits (and queues) from here
  round.taken(0, e[1].integer());
  ec = errc::not_acquired;
  if (out) *out = round.votes();
  return true;
}

bool lock_core::try_release_direct(const std::shared_ptr<lease_state>& state,
                                   std::error_code& ec) {
  if (nodes_.size() != 1) return false;
  // Marked first, so that a keep-alive renewal starting now does not send after the release.
  if (state->released.exchange(true)) return false;  // start_release reports not_held
  reply r;
  std::error_code run_ec;
  if (!run_script_direct(nodes_[0], release_script,
                         {key_, queue_key_, waiter_info_key_, fence_key_}, {state->token},
                         node_timeout_, run_ec, r)) {
    state->released.store(false);  // nothing sent: start_release takes over
    return false;
  }
  if (run_ec) {
    ec = run_ec;
  } else if (r.is_integer() && r.integer() == 1) {
    ec.clear();
  } else {
    ec = errc::not_held;
  }
  return true;
}

// Waiting without polling: a waiter that will try again queues itself on the nodes whose wake
// inbox is subscribed (acquire.lua), and a release publishes the first live waiter's id to
// that waiter's inbox (release.lua), which cuts the sleep short (wake_waiter, net/inbox.hpp,
// shared with the semaphore). The sleep between attempts stays as the backstop for anything lost
// on the way (a dropped subscription, a release by a client that does not notify, a holder that
// expired instead of releasing).
void lock_core::attempt(const std::shared_ptr<acquire_op>& op) {
  --op->attempts_left;
  std::size_t round = op->round_started.size();
  // Listens before queueing (inside begin_attempt): the release may publish before this
  // round's reply comes back.
  auto channels = op->waiter->begin_attempt(op->attempts_left > 0);
  std::vector<std::string> waiter_entries(nodes_.size());
  std::string ttl = std::to_string(waiter_entry_ttl(options_.retry_delay).count()) + " ";
  // "<lock ttl> <round>": release.lua may hand the lock to this entry (see take_handoff).
  std::string handoff;
  if (accepts_handoff()) {
    // Appended piecewise: GCC 12's -Wrestrict misfires on `" " + std::to_string(...)` at -O2.
    handoff.append(" ").append(std::to_string(options_.ttl.count()));
    handoff.append(" ").append(std::to_string(round));
  }
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (channels[i].empty()) continue;
    waiter_entries[i] = ttl + channels[i] + handoff;
  }
  op->round_started.push_back(steady::now());
  op->round_in_flight = true;
  start_round(op->round_value(round), std::move(waiter_entries),
              [self = shared_from_this(), op, round_index = round](std::error_code ec,
                                                                   std::shared_ptr<round_op> round) {
                op->round_in_flight = false;
                auto deferred = std::exchange(op->deferred_handoff, std::nullopt);
                if (op->done) return;  // a handoff came first; this round found the key taken
                if (!ec) {
                  auto state = std::make_shared<lease_state>();
                  state->token = round->token;
                  state->fence = static_cast<std::uint64_t>(round->fence);
                  state->set_deadline(round->round.valid_until());
                  return self->finish(op, {}, make_lease(self, std::move(state)),
                                      round->round.votes());
                }
                // The round found the key another's, so it ran before the handoff did and
                // cannot have taken the handed-over key over: the handoff stands.
                if (deferred && deferred->second + 1 == round_index &&
                    round->round.votes()[0].outcome == node_result::vote::taken &&
                    self->accept_handoff(op, deferred->first, deferred->second)) {
                  return;
                }
                auto delay = self->retry_delay(round->round.votes());
                bool time_left = op->deadline == steady::time_point::max() ||
                                 steady::now() + delay < op->deadline;
                if (!is_retryable(ec) || op->attempts_left <= 0 || !time_left) {
                  return self->finish(op, ec, lease{}, round->round.votes());
                }
                // The sleep between two rounds, which a wake-up (or completed inbox
                // subscriptions) cuts short.
                op->waiter->sleep(delay, [self, op] { self->attempt(op); });
              },
              op);
}

// A release handed us the lock (release.lua): the key holds "<id>.h<round>" since the moment the
// release ran, for ttl. When was that, on our clock? After round <round> began: that round
// wrote the entry the release used, so it ran on the server before the release did. Counting
// the lease from that round's start is therefore safe, whatever delayed the message, like a
// round's own validity; it only gives away the time the waiter spent queued since.
//
// A later round than the one named may have run after the release and taken the key over
// (acquire.lua rewrites it to its own value, which that round's cleanup may then delete and
// hand to another waiter). Round <round> + 1 answering "taken" proves it ran before the
// release, and then so did every earlier round: the handoff is trusted once that round, in
// flight when the message came, has answered so. In every other case (that round failed or
// was granted, or a later one has begun) the message is a mere wake-up, and the next round
// settles what the key holds (it takes a handoff still standing over).
bool lock_core::take_handoff(const std::shared_ptr<acquire_op>& op, std::string_view grant) {
  if (op->done) return true;
  std::uint64_t fence = 0;
  std::size_t round = 0;
  auto space = grant.find(' ');
  if (space == std::string_view::npos) return false;
  auto parse = [](std::string_view text, auto& out) {
    auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), out);
    return err == std::errc() && end == text.data() + text.size();
  };
  if (!parse(grant.substr(0, space), fence) || !parse(grant.substr(space + 1), round) ||
      round >= op->round_started.size()) {
    return false;
  }
  if (round + 1 < op->round_started.size()) {
    // Only round <round> + 1, while in flight, can still tell: once it failed, or a later round
    // began, the key may have been taken over and given back since (see above).
    if (op->round_in_flight && round + 2 == op->round_started.size()) {
      op->deferred_handoff.emplace(fence, round);
    }
    return false;
  }
  return accept_handoff(op, fence, round);
}

bool lock_core::accept_handoff(const std::shared_ptr<acquire_op>& op, std::uint64_t fence,
                               std::size_t round) {
  auto valid_until = op->round_started[round] + options_.ttl -
                     drift_allowance(options_.ttl, options_.drift_factor);
  if (steady::now() >= valid_until) {
    // Born expired (queued longer than the TTL before the release): give it back, wait on.
    // Only this handoff's own value can be deleted by it, whenever it runs.
    release_everywhere(op->handoff_value(round), {}, [](release_tally) {});
    return false;
  }
  auto state = std::make_shared<lease_state>();
  state->token = op->handoff_value(round);
  state->fence = fence;
  state->set_deadline(valid_until);
  node_results votes(1);
  votes[0].node = node_names_[0];
  votes[0].outcome = node_result::vote::granted;
  finish(op, {}, make_lease(shared_from_this(), std::move(state)), votes);
  return true;
}

void lock_core::finish(const std::shared_ptr<acquire_op>& op, std::error_code ec, lease l,
                       const node_results& votes) {
  op->done = true;
  op->waiter->finish();
  // A grant (acquire.lua) or a handoff (release.lua) takes the id out of the granting node's
  // queue in the same script. Every other entry must go, or the next release would wake, or
  // hand the lock to, a waiter that no longer waits. On a single node that is never a script
  // of its own: after a SCRIPT FLUSH it could fail NOSCRIPT and run only after our release.
  bool dequeued_by_grant = !ec && nodes_.size() == 1;
  if (op->waiter->queued() && !dequeued_by_grant) {
    // Giving up: a release may have handed us the lock after we stopped listening. The same
    // script that takes us out of the queue gives such a key back (to the next waiter).
    bool give_up = ec && accepts_handoff();
    for (auto& node : nodes_) {
      if (give_up) {
        run_script(node, release_script, {key_, queue_key_, waiter_info_key_, fence_key_},
                   {op->id, "give-up"}, node_timeout_, [](std::error_code, reply) {});
      } else {
        run_script(node, leave_script, {queue_key_, waiter_info_key_}, {op->id}, node_timeout_,
                   [](std::error_code, reply) {});
      }
    }
  }
  if (op->out) *op->out = votes;
  op->handler(ec, std::move(l));
}

steady::duration lock_core::retry_delay(const node_results& votes) const {
  steady::duration delay = jittered_delay(options_.retry_delay, jitter_random());
  // While another owner holds it with less time left than our delay, wake up at its expiry.
  for (const auto& v : votes) {
    if (v.outcome == node_result::vote::taken && v.holder_ttl_ms > 0) {
      delay = std::min<steady::duration>(delay, std::chrono::milliseconds(v.holder_ttl_ms + 1));
    }
  }
  return delay;
}

void lock_core::start_round(std::string token, std::vector<std::string> waiter_entries,
                            round_handler handler, std::shared_ptr<acquire_op> acquisition) {
  auto op = std::make_shared<round_op>(nodes_.size(), steady::now(), options_, std::move(token),
                                       std::move(handler), std::move(acquisition));
  for (std::size_t i = 0; i < nodes_.size(); ++i) op->round.votes()[i].node = node_names_[i];
  std::string ttl = std::to_string(options_.ttl.count());
  std::string_view mode = options_.fair ? "fair" : "";
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    run_script(nodes_[i], acquire_script,
               {key_, fence_key_, queue_key_, waiter_info_key_, tickets_key_},
               {op->token, ttl, waiter_entries[i], mode}, node_timeout_,
               [self = shared_from_this(), op, i](std::error_code ec, reply r) {
                 auto& round = op->round;
                 const auto& e = r.elements();
                 if (ec) {
                   round.failed(i, ec, r.is_error() ? r.str() : std::string());
                 } else if (r.is_array() && e.size() == 2 && e[0].is_integer() && e[1].is_integer()) {
                   if (e[0].integer() == 1) {
                     round.granted(i, e[1].integer());
                   } else {
                     round.taken(i, e[1].integer());
                   }
                 } else {
                   round.failed(i, errc::protocol_error, "unexpected reply " + r.to_string());
                 }
                 if (!op->decided) self->decide(op);
               });
  }
}

void lock_core::decide(const std::shared_ptr<round_op>& op) {
  if (!op->round.decided()) return;
  op->decided = true;
  if (!op->round.quorum_granted()) return finish_round(op, op->round.failure());
  auto plan = plan_fence(op->round);
  op->fence = plan.fence;
  op->fence_confirmed = plan.already_at_fence;
  if (op->fence_confirmed >= op->round.quorum()) return finish_round(op, {});
  raise_fence(op, plan);
}

// Granting nodes disagree on the counter (one missed acquisitions while down, or a failed
// round bumped some). The fence may only be reported once a quorum of granting nodes holds at
// least it, so the next holder's quorum, which must intersect ours, reads a higher value.
void lock_core::raise_fence(const std::shared_ptr<round_op>& op, const fence_plan& plan) {
  op->fence_outstanding = plan.to_raise.size();
  std::string fence = std::to_string(plan.fence);
  for (std::size_t i : plan.to_raise) {
    run_script(nodes_[i], fence_raise_script, {fence_key_}, {fence}, node_timeout_,
               [self = shared_from_this(), op](std::error_code ec, reply r) {
                 --op->fence_outstanding;
                 if (!ec && r.is_integer() && r.integer() >= op->fence) ++op->fence_confirmed;
                 bool enough = op->fence_confirmed >= op->round.quorum();
                 if (!op->handler) return;
                 if (enough) return self->finish_round(op, {});
                 if (op->fence_outstanding == 0) self->finish_round(op, errc::quorum_not_reached);
               });
  }
}

void lock_core::finish_round(const std::shared_ptr<round_op>& op, std::error_code ec) {
  if (!ec && steady::now() >= op->round.valid_until()) ec = errc::lease_expired;
  if (!ec) return std::exchange(op->handler, {})({}, op);
  auto handler = std::exchange(op->handler, {});
  // Not where the node answered "taken": that answer proves this round set nothing there, and
  // under contention those releases were a quarter of all commands sent (bench/).
  std::vector<bool> skip(nodes_.size());
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    skip[i] = op->round.votes()[i].outcome == node_result::vote::taken;
  }
  if (op->acquisition && op->acquisition->done) return handler(ec, op);  // handed the lock
  release_everywhere(op->token, std::move(skip),
                     [op, ec, handler = std::move(handler)](release_tally) mutable {
                       // A round lost early to fast failures (dead nodes refuse at once) is
                       // judged again now: each node answers our release after the acquire sent
                       // before it on the same connection, so every node that answers at all
                       // has voted by now. Votes against may prove another owner
                       // (not_acquired), or every node may have failed alike (wrong_type,
                       // auth_failed).
                       if (!op->round.quorum_granted()) ec = op->round.failure();
                       handler(ec, op);
                     });
}

void lock_core::release_everywhere(const std::string& value, std::vector<bool> skip,
                                   unique_function<void(release_tally)> handler,
                                   std::size_t enough) {
  struct tally {
    std::size_t outstanding, enough;
    release_tally so_far;
    unique_function<void(release_tally)> handler;
  };
  skip.resize(nodes_.size(), false);
  std::size_t targets = static_cast<std::size_t>(std::count(skip.begin(), skip.end(), false));
  if (targets == 0) return handler({});
  auto t = std::make_shared<tally>(tally{targets, enough, {}, std::move(handler)});
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (skip[i]) continue;
    auto& node = nodes_[i];
    run_script(node, release_script, {key_, queue_key_, waiter_info_key_, fence_key_}, {value},
               node_timeout_,
               [t](std::error_code ec, reply r) {
                 auto& so_far = t->so_far;
                 if (ec && !so_far.first_error) so_far.first_error = ec;
                 if (!ec && r.is_integer()) {
                   ++so_far.answered;
                   if (r.integer() == 1) ++so_far.released;
                 }
                 --t->outstanding;
                 if (!t->handler) return;  // reported already
                 if (t->outstanding == 0 || so_far.answered >= t->enough) {
                   std::exchange(t->handler, {})(so_far);
                 }
               });
  }
}

// Released once the nodes that answered leave too few that may still hold the key to form a
// quorum: from then on no quorum can vouch for this lease, and the next holder may form its
// own; the remaining nodes' releases go on meanwhile. With fewer answers, a quorum may still
// hold the key until it expires, and the caller is told so (quorum_not_reached, or the error
// when no node answered at all) even if some node did delete it.
void lock_core::start_release(const std::shared_ptr<lease_state>& state, done_handler handler) {
  if (state->released.exchange(true)) return handler(errc::not_held);
  std::size_t settled = nodes_.size() - quorum_of(nodes_.size()) + 1;
  release_everywhere(
      state->token, {},
      [handler = std::move(handler), settled](release_tally t) mutable {
        if (t.answered >= settled) {
          return handler(t.released > 0 ? std::error_code() : errc::not_held);
        }
        if (t.answered == 0 && t.first_error) return handler(t.first_error);
        handler(errc::quorum_not_reached);
      },
      settled);
}

void lock_core::start_extend(const std::shared_ptr<lease_state>& state,
                             std::chrono::milliseconds ttl, done_handler handler) {
  extend_everywhere(state, ttl, {}, std::move(handler));
}

void lock_core::start_settle(const std::shared_ptr<lease_state>& state,
                             std::chrono::milliseconds ttl, done_handler handler) {
  extend_everywhere(state, ttl, settled_token(state->token), std::move(handler));
}

void lock_core::extend_everywhere(const std::shared_ptr<lease_state>& state,
                                  std::chrono::milliseconds ttl, const std::string& successor,
                                  done_handler handler) {
  if (state->released.load()) return handler(errc::not_held);
  if (state->lost.stop_requested()) return handler(errc::lease_lost);
  if (ttl <= std::chrono::milliseconds::zero() || ttl > max_ttl) return handler(errc::invalid_argument);
  struct extend_op {
    std::shared_ptr<lease_state> state;
    quorum_round round;
    done_handler handler;
  };
  auto op = std::make_shared<extend_op>(
      extend_op{state, quorum_round(nodes_.size(), steady::now(), ttl, options_.drift_factor),
                std::move(handler)});
  std::string ttl_text = std::to_string(ttl.count());
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    run_script(nodes_[i], extend_script, {key_}, {state->token, ttl_text, successor},
               node_timeout_,
               [op, i](std::error_code ec, reply r) {
                 if (ec) {
                   op->round.failed(i, ec, r.is_error() ? r.str() : std::string());
                 } else if (r.is_integer() && r.integer() == 1) {
                   op->round.granted(i, 0);
                 } else {
                   op->round.taken(i, -1);  // gone, or someone else's
                 }
                 if (!op->handler || !op->round.decided()) return;
                 // Without a quorum, wait for the stragglers (at most node_timeout) while their
                 // votes could still prove the lease lost rather than the nodes down.
                 if (!op->round.quorum_granted() && !op->round.failure_settled()) return;
                 auto handler = std::exchange(op->handler, {});
                 auto now = steady::now();
                 // An extend that lands after the old validity ended cannot vouch for the gap.
                 if (op->state->validity_known && now >= op->state->deadline()) {
                   op->state->mark_lost(errc::lease_expired);
                   return handler(errc::lease_expired);
                 }
                 if (op->round.quorum_granted()) {
                   op->state->set_deadline(op->round.valid_until());
                   return handler({});
                 }
                 std::error_code failure = op->round.failure();
                 // Released meanwhile: "not ours" is the release's doing, not a loss.
                 if (failure == errc::not_acquired && op->state->released.load()) {
                   return handler(errc::not_held);
                 }
                 if (failure == errc::not_acquired) {
                   op->state->mark_lost(errc::lease_lost);
                   return handler(errc::lease_lost);
                 }
                 handler(failure);
               });
  }
}

lease lock_core::adopt(std::string token, std::uint64_t fence) {
  auto state = std::make_shared<lease_state>();
  state->token = std::move(token);
  state->fence = fence;
  state->validity_known = false;
  state->set_deadline(steady::now());
  return make_lease(shared_from_this(), std::move(state));
}


}  // namespace dlock::detail
