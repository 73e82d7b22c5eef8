// SPDX-License-Identifier: Apache-2.0
// dlock::mutex's core: the lock's state and the wiring of its operations to the engine
// (algo/acquisition.cpp decides; acquire_run and the helpers here carry it out).
#include "lock_core.hpp"

#include <algorithm>

#include <asio/post.hpp>

#include "access.hpp"
#include "acquire_run.hpp"
#include "algo/lease_upkeep.hpp"
#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "observe.hpp"
#include "reentry.hpp"
#include "replication_guard.hpp"
#include "script.hpp"
#include "slot_migration.hpp"
#include "token.hpp"

namespace dlock::detail {

lock_core::lock_core(std::vector<client> nodes, std::string key, lock_options options)
    : nodes_(std::move(nodes)), key_(std::move(key)), options_(std::move(options)) {
  target_ = make_lock_target(nodes_.size(), key_, options_,
                             nodes_.front().options().request_timeout,
                             nodes_.front().where().is_cluster());
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    auto name = nodes_[i].where().to_string();
    // lock_options::copies: one node per copy, all the same cluster client.
    if (!target_.copies.empty()) name += " copy " + std::to_string(i);
    target_.node_names.push_back(std::move(name));
  }
  if (!options_.reentrant.empty()) {
    // The lock is its key on these nodes (and databases), whichever mutex object names it.
    std::vector<std::string> where{key_};
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      where.push_back(target_.node_names[i] + " db " + std::to_string(nodes_[i].where().db));
    }
    reentry_slot_ = reentry_slot(where, options_.reentrant);
  }
}

std::shared_ptr<acquire_run> lock_core::make_run(steady::time_point deadline, int attempts,
                                                 node_results* out,
                                                 const wait_control& control) {
  acquisition engine(target_, random_token(), deadline, attempts, jitter_random(),
                     plain_first_.next());
  auto run = std::make_shared<acquire_run>(shared_from_this(), nodes_, std::move(engine),
                                           options_.wake_on_release, out, control);
  plain_first_.follow(*run);  // the run keeps this core alive until it ends
  return run;
}

// With lock_options::reentrant, an owner that holds the lock in this process re-enters at once,
// without a round (reentry.hpp), and a grant becomes the first of the owner's nested leases.
void lock_core::start_acquire(steady::time_point deadline, int attempts, acquire_handler handler,
                              node_results* out, wait_control control) {
  if (!reentry_slot_.empty()) {
    if (lease nested = reentry_enter(reentry_slot_)) {
      // Never inside the initiating call (Asio's rule for completions).
      return asio::post(get_executor(), [h = std::move(handler), l = std::move(nested)]() mutable {
        h({}, std::move(l));
      });
    }
    handler = [slot = reentry_slot_, h = std::move(handler)](std::error_code ec,
                                                             lease granted) mutable {
      h(ec, reentry_hold_first(slot, std::move(granted)));
    };
  }
  make_run(deadline, attempts, out, control)->start(std::move(handler));
}

lease lock_core::acquire_blocking(steady::time_point deadline, int attempts, std::error_code& ec,
                                  node_results* out, const wait_control& control) {
  if (reentry_slot_.empty()) return make_run(deadline, attempts, out, control)->run_blocking(ec);
  if (lease nested = reentry_enter(reentry_slot_)) {
    ec = {};
    return nested;
  }
  return reentry_hold_first(reentry_slot_, make_run(deadline, attempts, out, control)->run_blocking(ec));
}

bool lock_core::try_release_direct(const std::shared_ptr<lease_state>& state,
                                   std::error_code& ec) {
  if (nodes_.size() != 1) return false;
  // Marked first, so that a keep-alive renewal starting now does not send after the release.
  if (state->released.exchange(true)) return false;  // start_release reports not_held
  reply r;
  std::error_code run_ec;
  if (!run_script_direct(nodes_[0], release_script, lock_release_keys(target_.keys_on(0)),
                         {state->token}, target_.node_timeout, run_ec, r)) {
    state->released.store(false);  // nothing sent: start_release takes over
    return false;
  }
  if (refused_while_migrating(r)) {
    state->released.store(false);  // nothing ran: start_release takes over, by the key alone
    return false;
  }
  quorum_release::tally t;
  quorum_release::count(t, run_ec, r);
  ec = quorum_release::judge(t, 1);
  return true;
}

// Reports as soon as the release quorum answered (quorum_release::judge); the remaining
// nodes' releases go on meanwhile.
void lock_core::start_release(const std::shared_ptr<lease_state>& state, done_handler handler) {
  if (state->released.exchange(true)) return handler(errc::not_held);
  struct release_op {
    quorum_release tally;
    done_handler handler;
    std::size_t nodes;
  };
  auto op = std::make_shared<release_op>(
      release_op{quorum_release(target_, state->token, {},
                                quorum_release::release_quorum(nodes_.size())),
                 std::move(handler), nodes_.size()});
  for (auto& r : op->tally.take_requests()) {
    auto id = r.id;
    // `self`: the requests point into target_, and the rest of the nodes' releases may still
    // be out after the lease (and with it the core) is gone.
    auto on_answer = [op, id](std::error_code ec, const reply& answer) {
      op->tally.on_reply(id, ec, answer);
      if (auto t = op->tally.take_outcome()) op->handler(quorum_release::judge(*t, op->nodes));
    };
    auto node = r.node;
    // Nothing copied for the fallback on the hot path: the key lives in target_, the token in
    // the lease's state.
    run_request(nodes_[node], std::move(r), [self = shared_from_this(), state, node,
                                             on_answer](std::error_code ec, reply answer) {
      if (!refused_while_migrating(answer)) return on_answer(ec, answer);
      release_lock_key(self->nodes_[node], self->target_.keys_on(node).key, state->token,
                       self->target_.node_timeout,
                       [on_answer](std::error_code step_ec, reply r) { on_answer(step_ec, r); });
    });
  }
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
                                  std::chrono::milliseconds ttl, std::string successor,
                                  done_handler handler) {
  if (auto refused = extend_refused(*state, ttl)) return handler(refused);
  struct extend_op {
    quorum_extend round;
    std::shared_ptr<lease_state> state;
    done_handler handler;
  };
  auto op = std::make_shared<extend_op>(extend_op{
      quorum_extend(target_, state->token, ttl, std::move(successor), steady::now()), state,
      std::move(handler)});
  for (auto& r : op->round.take_requests()) {
    auto id = r.id;
    auto on_answer = [self = shared_from_this(), op, id](std::error_code ec, const reply& answer) {
      std::optional<steady::time_point> deadline;
      if (op->state->validity_known) deadline = op->state->deadline();
      op->round.on_reply(id, steady::now(), deadline, ec, answer);
      auto verdict = op->round.take_outcome();
      if (!verdict) return;
      if (verdict->ec) return op->handler(apply_extend(*self, *op->state, verdict->ec, {}));
      if (self->nodes_.size() > 1) op->state->held_on = verdict->extended;
      // Copies moved onto one master since the grant (a reshard, a failover): the extend took,
      // but the lease cannot be vouched for beyond what it had; it fails and keeps its old
      // validity, and lapses unless a later extend finds the copies apart again.
      if (auto why = self->copies_moved_together(verdict->extended); !why.empty()) {
        if (logging()) log(log_level::warning, "lock '" + self->key_ + "': " + why);
        return op->handler(errc::cluster_error);
      }
      // The replication guard: the lease moves out only once the replicas of the nodes that
      // extended have it, on a quorum.
      guard_writes(self->nodes_, verdict->extended, quorum_of(self->nodes_.size()),
                   guard_deadline(*op->state),
                   [self, op, until = verdict->valid_until](std::error_code ec, std::string) {
                     op->handler(ec ? ec : apply_guarded_extend(*self, *op->state, until));
                   });
    };
    // An election's record expires with its lock (extend.lua's KEYS[2]). While their slot
    // migrates they may sit on two nodes, and the script is refused (TRYAGAIN): the lock is
    // then extended by its key alone, and the record kept alive beside it.
    std::optional<request> alone;
    if (r.keys.size() > 1) {
      alone = r;
      alone->keys = {r.keys[0]};
    }
    auto node = nodes_[r.node];
    run_request(node, std::move(r), [node, ttl, companion = target_.lives_with_lock,
                                     alone = std::move(alone), on_answer](std::error_code ec,
                                                                          reply answer) mutable {
      if (!alone || !refused_while_migrating(answer)) return on_answer(ec, answer);
      run_script(node, migrating_outlive_script, {companion}, {std::to_string(2 * ttl.count())},
                 alone->timeout, [](std::error_code, reply) {});
      run_request(node, std::move(*alone),
                  [on_answer](std::error_code step_ec, reply r) { on_answer(step_ec, r); });
    });
  }
}

std::string lock_core::copies_moved_together(const std::vector<std::size_t>& holding) const {
  if (target_.copies.empty()) return {};
  std::vector<std::uint16_t> slots;
  for (const auto& copy : target_.copies) slots.push_back(hash_slot(copy.key));
  return copies_share_a_master(nodes_, slots, holding);
}

// Each node's inbox watches the key for a change that is not ours (inbox::watch_key); one
// that is not subscribed yet (this process never waited there) subscribes first, and then
// watches if the lease is still held. On a node the last grant or extend wrote our token on, a
// read that finds the key gone or another's reports at once: it changed since, unseen, for
// our own write ended the tracking there (NOLOOP). Elsewhere only a later change reports: a
// Redlock lease is held by a quorum, and a node that did not hold it would otherwise report
// at every watch, and every renewal would set off the next.
void lock_core::watch_changes(const std::shared_ptr<lease_state>& state,
                              std::function<void()> on_change) {
  if (!options_.wake_on_release) return;  // no pub/sub wanted: nothing to be told through
  std::function<bool(const reply&)> changed_since_held = [token = state->token](const reply& value) {
    return value.is_nil() || (value.is_string() && value.str() != token);
  };
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    auto* requests = access::request_connection(nodes_[i]);
    if (!requests) continue;  // a cluster
    auto& box = access::wake_inbox(nodes_[i], 0);
    if (!box.can_track()) continue;
    const std::string& key = target_.keys_on(i).key;
    const auto& held = state->held_on;
    std::function<bool(const reply&)> changed_already;
    if (nodes_.size() == 1 || std::find(held.begin(), held.end(), i) != held.end()) {
      changed_already = changed_since_held;
    }
    if (box.subscribed()) {
      box.watch_key(*requests, key, state->token, std::move(changed_already), on_change);
      continue;
    }
    std::weak_ptr<lease_state> weak = state;
    box.subscribe([self = shared_from_this(), i, weak, changed_already = std::move(changed_already),
                   on_change](std::error_code ec) {
      auto held = weak.lock();
      if (ec || !held || held->released.load() || held->lost.stop_requested()) return;
      if (auto* conn = access::request_connection(self->nodes_[i])) {
        access::wake_inbox(self->nodes_[i], 0)
            .watch_key(*conn, self->target_.keys_on(i).key, held->token, changed_already,
                       on_change);
      }
    });
  }
}

void lock_core::forget_changes(const std::string& token) {
  for (auto& node : nodes_) {
    if (access::request_connection(node)) access::wake_inbox(node, 0).forget(token);
  }
}

lease lock_core::adopt(std::string token, std::uint64_t fence) {
  auto state = std::make_shared<lease_state>();
  state->token = std::move(token);
  state->fence = fence;
  state->validity_known = false;
  state->set_deadline(steady::now());
  // Assumed held everywhere until an extend says where: an adopted token's first watch reads
  // every node, and a renewal sorts out those that do not hold it.
  for (std::size_t i = 0; i < nodes_.size(); ++i) state->held_on.push_back(i);
  return make_lease(shared_from_this(), std::move(state));
}

}  // namespace dlock::detail
