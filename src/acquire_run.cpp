// SPDX-License-Identifier: Apache-2.0
// The driver of algo/acquisition: it moves the engine's decisions to and from the wire and the
// I/O thread's timers, and decides nothing itself.
#include "acquire_run.hpp"

#include <asio/dispatch.hpp>
#include <asio/post.hpp>

#include <algorithm>

#include "access.hpp"
#include "algo/quorum_round.hpp"
#include "observe.hpp"
#include "replication_guard.hpp"
#include "script.hpp"
#include "slot_migration.hpp"

namespace dlock::detail {

lease lease_from(std::shared_ptr<lease_owner> owner, acquisition::outcome& granted) {
  auto state = std::make_shared<lease_state>();
  state->token = std::move(granted.token);
  state->fence = granted.fence;
  state->set_deadline(granted.valid_until);
  // One node: it granted, or there would be no lease (lock_core::watch_changes knows).
  for (std::size_t i = 0; granted.votes.size() > 1 && i < granted.votes.size(); ++i) {
    if (granted.votes[i].outcome == node_result::vote::granted) state->held_on.push_back(i);
  }
  return make_lease(std::move(owner), std::move(state));
}

acquire_run::acquire_run(std::shared_ptr<lease_owner> owner, std::vector<client>& nodes,
                         acquisition engine, bool wake_on_release, node_results* out,
                         wait_control control)
    : owner_(std::move(owner)),
      nodes_(nodes),
      engine_(std::move(engine)),
      wake_on_release_(wake_on_release),
      out_(out),
      control_(std::move(control)) {}

void acquire_run::start(handler_type handler, std::vector<request> first) {
  handler_ = std::move(handler);
  // All of an acquisition runs on the I/O thread, where the inboxes and timers live; the
  // commands would be handed to it anyway.
  asio::dispatch(owner_->get_executor(), [self = shared_from_this(),
                                          first = std::move(first)]() mutable {
    std::vector<inbox*> boxes;
    for (std::size_t i = 0; i < self->nodes_.size(); ++i) {
      boxes.push_back(&access::wake_inbox(self->nodes_[i], self->engine_.slot(i)));
    }
    self->waiter_ = std::make_shared<wake_waiter>(self->owner_->get_executor(), std::move(boxes),
                                                  self->engine_.id(), self->wake_on_release_);
    // Weak: the waiter belongs to this run, and must not keep it alive.
    std::weak_ptr<acquire_run> weak = self;
    self->waiter_->on_handoff([weak](std::string_view grant) {
      auto run = weak.lock();
      return run && run->on_handoff(grant);
    });
    if (self->control_.stop.stop_possible()) {
      // Posted, never run inline: the stop may come while this run is in the middle of a step.
      self->on_stop_.emplace(self->control_.stop, [weak] {
        if (auto run = weak.lock()) {
          asio::post(run->owner_->get_executor(), [run] { run->stop(errc::cancelled); });
        }
      });
    }
    self->engine_.on_start(steady::now());
    self->arm_deadline();
    if (self->engine_.attempts_made() == 0) {
      // Stopped before it began: it ends having sent nothing, posted so that the handler
      // never runs inside the initiating call.
      if (self->control_.stop.stop_requested()) {
        return asio::post(self->owner_->get_executor(), [self] { self->stop(errc::cancelled); });
      }
      return self->attempt();
    }
    // run_blocking made the first attempt: go on from where it stands.
    self->pumping_ = true;  // answers that come back inline wait for the whole batch
    for (auto& r : first) self->send(std::move(r));
    self->pumping_ = false;
    self->pump();
  });
}

lease acquire_run::run_blocking(std::error_code& ec) {
  auto now = steady::now();
  engine_.on_start(now);
  // The direct exchange blocks this thread for up to a node timeout, so only when the wait
  // ends no sooner; else the I/O thread runs the attempt and ends the wait on time.
  bool within_deadline = now + engine_.node_timeout() <= engine_.gives_up_at();
  if (nodes_.size() == 1 && !on_io_thread() && within_deadline && !access::guard(nodes_[0]) &&
      !control_.stop.stop_requested()) {
    // The first attempt from this thread when the connection is idle: no hand-over to the I/O
    // thread and back. It does not queue (the I/O thread owns the inbox); if it must wait,
    // the wake_waiter's first sleep subscribes and queues at once.
    engine_.begin_attempt(now, {});
    auto requests = engine_.take_requests();
    reply r;
    std::error_code run_ec;
    if (run_request_direct(nodes_[0], requests.front(), run_ec, r)) {
      engine_.on_reply(requests.front().id, steady::now(), run_ec, r);
      auto more = engine_.take_requests();
      if (more.empty()) {
        if (auto result = engine_.take_outcome()) {
          report(*result);
          ec = result->ec;
          lease l = result->ec ? lease{} : lease_from(owner_, *result);
          if (out_) *out_ = std::move(result->votes);
          return l;
        }
      }
      requests = std::move(more);
    }
    // Not sent (a busy connection), or more to do: the I/O thread goes on, sending these first.
    return wait<lease>(ec, [&](auto handler) { start(std::move(handler), std::move(requests)); });
  }
  return wait<lease>(ec, [&](auto handler) { start(std::move(handler)); });
}

void acquire_run::attempt() {
  auto now = steady::now();
  // Listens before queueing (inside begin_attempt): the release may publish before this
  // attempt's reply comes back.
  engine_.begin_attempt(now, waiter_->begin_attempt(engine_.queues_next(now)));
  pump();
}

void acquire_run::send(request r) {
  auto& node = nodes_[r.node];
  auto id = r.id;
  auto node_index = r.node;
  // The handler below keeps this run, and so its engine, alive until the request completes.
  r.gate = engine_.gate();
  // A cleanup's release of one value, refused while its slot migrates (slot_migration.hpp), is
  // done by the lock's key alone; the key lives in the owner's target, which this run keeps.
  std::optional<std::pair<std::string_view, std::string>> by_key_alone;
  if (r.code == &release_script && r.args.size() == 1) by_key_alone.emplace(r.keys[0], std::string(r.args[0]));
  run_request(node, std::move(r), [self = shared_from_this(), id, node_index,
                                   by_key_alone = std::move(by_key_alone)](std::error_code ec,
                                                                           reply answer) mutable {
    if (by_key_alone && refused_while_migrating(answer)) {
      return release_lock_key(self->nodes_[node_index], std::string(by_key_alone->first),
                              std::move(by_key_alone->second), self->engine_.node_timeout(),
                              [self, id](std::error_code step_ec, reply r) {
                                self->take_answer(id, step_ec, std::move(r));
                              });
    }
    self->take_answer(id, ec, std::move(answer));
  });
}

void acquire_run::take_answer(std::uint64_t id, std::error_code ec, reply answer) {
  if (pumping_) {
    inline_answers_.push_back({id, ec, std::move(answer)});
    return;
  }
  engine_.on_reply(id, steady::now(), ec, answer);
  pump();
}

void acquire_run::pump() {
  if (pumping_) return;  // the pump below this frame picks up what is new
  pumping_ = true;
  for (;;) {
    auto requests = engine_.take_requests();
    if (requests.empty() && inline_answers_.empty()) break;
    for (auto& r : requests) send(std::move(r));
    for (auto& a : std::exchange(inline_answers_, {})) {
      engine_.on_reply(a.id, steady::now(), a.ec, a.r);
    }
  }
  pumping_ = false;
  if (auto delay = engine_.take_sleep()) {
    if (control_.on_retry) {
      wait_progress progress;
      progress.waited = steady::now() - began_;
      progress.attempts = engine_.attempts_made();
      progress.last_error = engine_.last_error();
      progress.kind = classify_failure(progress.last_error, engine_.last_votes());
      progress.votes = &engine_.last_votes();
      progress.waiter_id = engine_.id();
      if (!control_.on_retry(progress)) return stop(engine_.last_error());
    }
    // A holder that is not dlock's wakes nobody when it lets go: watch its key instead.
    for (const auto& held : engine_.take_foreign_holders()) {
      if (auto* requests = access::request_connection(nodes_[held.node])) {
        waiter_->watch_key(held.node, *requests, std::string(held.key));
      }
    }
    // The backstop; a wake-up, a foreign holder's key changing, or completed inbox
    // subscriptions, cut it short.
    waiter_->sleep(*delay, [self = shared_from_this()] { self->attempt(); });
  }
  auto result = engine_.take_outcome();
  if (!result || !handler_) return;
  waiter_->finish();
  if (result->ec && waiter_->queued()) remember_gave_up();
  on_stop_.reset();
  if (deadline_timer_) deadline_timer_->cancel();
  if (!result->ec) {
    if (auto why = copies_collapsed(result->votes); !why.empty()) {
      return give_back(std::make_shared<acquisition::outcome>(std::move(*result)),
                       errc::cluster_error, std::move(why));
    }
  }
  bool guarded = std::any_of(nodes_.begin(), nodes_.end(),
                             [](const client& node) { return access::guard(node) != nullptr; });
  if (result->ec || !guarded) return deliver(std::move(*result));
  confirm_replicated(std::move(*result));
}

std::string copies_share_a_master(const std::vector<client>& nodes,
                                  const std::vector<std::uint16_t>& slots,
                                  const std::vector<std::size_t>& holding) {
  auto* router = nodes.size() > 1 ? access::cluster(nodes.front()) : nullptr;
  if (!router) return {};
  for (const auto& node : nodes) {
    if (access::cluster(node) != router) return {};  // a Redlock over clusters, not copies
  }
  std::vector<std::optional<host_port>> owners;
  // No forced read for a slot without a master: while one is down for good, every grant and
  // extend would read the map again.
  for (auto slot : slots) owners.push_back(router->known_owner(slot, false));
  // Fails closed: a copy that holds the lock on a master the map does not name cannot be
  // vouched for. One that does not hold it and has no master (down for good) holds nothing.
  for (auto i : holding) {
    if (i < owners.size() && !owners[i]) {
      return "the master of copy " + std::to_string(i) + " of the lock is unknown (the slot map "
             "changed): its copies cannot be shown to sit on distinct masters";
    }
  }
  for (std::size_t a = 0; a < owners.size(); ++a) {
    for (std::size_t b = a + 1; b < owners.size(); ++b) {
      if (owners[a] && owners[a] == owners[b]) {
        return "copies " + std::to_string(a) + " and " + std::to_string(b) +
               " of the lock sit on the same master, " + owners[a]->to_string() +
               ": a failover of it could lose a quorum of them (reshard, or use another number "
               "of copies)";
      }
    }
  }
  return {};
}

std::string acquire_run::copies_collapsed(const node_results& votes) const {
  if (nodes_.size() < 2 || !access::cluster(nodes_.front())) return {};  // no copies: no work
  std::vector<std::uint16_t> slots;
  std::vector<std::size_t> granted;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    slots.push_back(engine_.slot(i));
    if (i < votes.size() && votes[i].outcome == node_result::vote::granted) granted.push_back(i);
  }
  return copies_share_a_master(nodes_, slots, granted);
}

// Releases what was granted, then reports `ec` (with `why` on the votes that granted).
void acquire_run::give_back(std::shared_ptr<acquisition::outcome> granted, std::error_code ec,
                            std::string why) {
  lease held = lease_from(owner_, *granted);
  held.async_release([self = shared_from_this(), granted, ec, why = std::move(why)](std::error_code) {
    acquisition::outcome missed{ec, {}, 0, {}, std::move(granted->votes)};
    if (!why.empty()) {
      for (auto& v : missed.votes) {
        if (v.outcome == node_result::vote::granted && v.message.empty()) v.message = why;
      }
    }
    self->deliver(std::move(missed));
  });
}

// The replication guard (client_options::replication_guard) on the nodes that granted (all
// nodes when the votes do not say: a semaphore, a handoff), within what is left of the wait
// and of the grant's validity. A miss releases what was granted and reports
// errc::replication_not_confirmed, or lease_expired when the validity ran out meanwhile.
void acquire_run::confirm_replicated(acquisition::outcome granted) {
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < granted.votes.size() && i < nodes_.size(); ++i) {
    if (granted.votes[i].outcome == node_result::vote::granted) which.push_back(i);
  }
  if (which.empty()) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) which.push_back(i);
  }
  auto deadline = std::min(engine_.gives_up_at(), granted.valid_until);
  auto outcome = std::make_shared<acquisition::outcome>(std::move(granted));
  guard_writes(nodes_, which, quorum_of(nodes_.size()), deadline,
               [self = shared_from_this(), outcome](std::error_code ec, std::string why) {
    if (!ec && steady::now() >= outcome->valid_until) {
      ec = errc::lease_expired;
      why = "the grant's validity ran out while its replicas were asked";
    }
    if (!ec) return self->deliver(std::move(*outcome));
    self->give_back(outcome, ec, std::move(why));
  });
}

void acquire_run::deliver(acquisition::outcome result) {
  report(result);
  lease l = result.ec ? lease{} : lease_from(owner_, result);
  if (out_) *out_ = std::move(result.votes);  // after lease_from, which reads them
  std::exchange(handler_, {})(result.ec, std::move(l));
}

void acquire_run::arm_deadline() {
  if (engine_.gives_up_at() == steady::time_point::max()) return;
  deadline_timer_.emplace(owner_->get_executor());
  deadline_timer_->expires_at(engine_.gives_up_at());
  std::weak_ptr<acquire_run> weak = shared_from_this();
  deadline_timer_->async_wait([weak](std::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || !self->handler_) return;
    self->engine_.on_deadline(steady::now());
    self->pump();
  });
}

void acquire_run::stop(std::error_code why) {
  engine_.stop(steady::now(), why);
  pump();
}

// A handoff that reaches this acquisition after it gave up is given back, and a wake-up
// passed on (inbox::remember_gave_up; acquisition::give_back_plan). Only on a single node,
// where handoffs exist. The callback holds the release's keys and only a weak handle on the
// node: it must work after the mutex or semaphore is gone (a waiter that gave up often
// destroys it at once), and must not keep the client alive, whose inbox holds the callback.
void acquire_run::remember_gave_up() {
  if (nodes_.size() != 1) return;
  auto plan = std::make_shared<const acquisition::late_handoff_give_back>(engine_.give_back_plan());
  access::wake_inbox(nodes_[0], engine_.slot(0))
      .remember_gave_up(engine_.id(), steady::now() + plan->window,
                        [link = access::link_of(nodes_[0]), plan] {
    auto alive = link.lock();
    if (!alive) return;
    auto node = access::client_of(std::move(alive));
    request give_back{0, 0, plan->code, {}, plan->args, plan->timeout};
    for (const auto& key : plan->keys) give_back.keys.push_back(key);
    // The request's keys point into `plan`, which the handler keeps until the answer.
    run_request(node, std::move(give_back), [plan](std::error_code, reply) {});
  });
}

bool acquire_run::on_handoff(std::string_view grant) {
  bool took = engine_.on_handoff(steady::now(), grant);
  pump();
  return took;
}

void acquire_run::report(const acquisition::outcome& result) const {
  if (on_end) {
    on_end(!result.ec && !result.handoff && engine_.attempts_made() == 1,
           engine_.refused_plain_commands());
  }
  auto* o = current_observer();
  if (!o) return;
  acquire_event e;
  e.key = owner_->key();
  e.what = owner_->kind();
  e.ec = result.ec;
  if (result.ec) e.kind = classify_failure(result.ec, result.votes);
  e.attempts = engine_.attempts_made();
  e.waited = steady::now() - began_;
  e.handoff = result.handoff && !result.ec;  // also one accepted after a deferral
  o->on_acquire(e);
}

}  // namespace dlock::detail
