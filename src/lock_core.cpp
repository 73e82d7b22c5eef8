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
#include "lock_core.hpp"

#include <asio/steady_timer.hpp>

#include <algorithm>
#include <climits>

#include "algo/retry.hpp"
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

std::string same_slot_key(const std::string& key, std::string_view suffix) {
  auto open = key.find('{');
  if (open != std::string::npos) {
    auto close = key.find('}', open + 1);
    if (close != std::string::npos && close > open + 1) return key + std::string(suffix);
  }
  return "{" + key + "}" + std::string(suffix);
}

struct lock_core::round_op {
  round_op(std::size_t n, steady::time_point start, const lock_options& o, std::string t,
           round_handler h)
      : token(std::move(t)), round(n, start, o.ttl, o.drift_factor), handler(std::move(h)) {}
  std::string token;
  quorum_round round;
  round_handler handler;
  bool decided = false;
  std::int64_t fence = 0;
  std::size_t fence_confirmed = 0, fence_outstanding = 0;
};

struct lock_core::acquire_op {
  acquire_op(io_executor ex) : timer(ex) {}
  std::string token = random_token();
  steady::time_point deadline;
  int attempts_left = 0;
  acquire_handler handler;
  node_results* out = nullptr;
  asio::steady_timer timer;
};

lock_core::lock_core(std::vector<client> nodes, std::string key, lock_options options)
    : nodes_(std::move(nodes)),
      key_(std::move(key)),
      fence_key_(fence_key_for(key_)),
      options_(std::move(options)) {
  node_timeout_ = options_.node_timeout;
  if (node_timeout_.count() == 0) {
    node_timeout_ = std::min(std::max(options_.ttl / 10, std::chrono::milliseconds(1)),
                             nodes_.front().options().request_timeout);
  }
}

void lock_core::start_acquire(steady::time_point deadline, int attempts, acquire_handler handler,
                              node_results* out) {
  auto op = std::make_shared<acquire_op>(executor());
  op->deadline = deadline;
  op->attempts_left = std::max(attempts, 1);
  op->handler = std::move(handler);
  op->out = out;
  attempt(op);
}

void lock_core::attempt(const std::shared_ptr<acquire_op>& op) {
  --op->attempts_left;
  start_round(op->token, [self = shared_from_this(), op](std::error_code ec,
                                                         std::shared_ptr<round_op> round) {
    if (op->out) *op->out = round->round.votes();
    if (!ec) {
      auto state = std::make_shared<lease_state>();
      state->token = op->token;
      state->fence = static_cast<std::uint64_t>(round->fence);
      state->set_deadline(round->round.valid_until());
      return op->handler({}, make_lease(self, std::move(state)));
    }
    auto delay = jittered_delay(self->options_.retry_delay, jitter_random());
    // While another owner holds it with less time left than our delay, wake up at its expiry.
    for (const auto& v : round->round.votes()) {
      if (v.outcome == node_result::vote::taken && v.holder_ttl_ms >= 0) {
        delay = std::min<steady::duration>(delay, std::chrono::milliseconds(v.holder_ttl_ms + 1));
      }
    }
    bool time_left = op->deadline == steady::time_point::max() ||
                     steady::now() + delay < op->deadline;
    if (!is_retryable(ec) || op->attempts_left <= 0 || !time_left) {
      return op->handler(ec, lease{});
    }
    op->timer.expires_after(delay);
    op->timer.async_wait([self, op](std::error_code) { self->attempt(op); });
  });
}

void lock_core::start_round(std::string token, round_handler handler) {
  auto op = std::make_shared<round_op>(nodes_.size(), steady::now(), options_, std::move(token),
                                       std::move(handler));
  for (std::size_t i = 0; i < nodes_.size(); ++i) op->round.votes()[i].node = nodes_[i].where().to_string();
  std::string ttl = std::to_string(options_.ttl.count());
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    run_script(nodes_[i], acquire_script, {key_, fence_key_}, {op->token, ttl}, node_timeout_,
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
  release_everywhere(op->token, [op, ec, handler = std::move(handler)](std::size_t,
                                                                       std::error_code) mutable {
    handler(ec, op);
  });
}

void lock_core::release_everywhere(
    const std::string& token, unique_function<void(std::size_t, std::error_code)> handler) {
  struct tally {
    std::size_t outstanding, released = 0;
    std::error_code first_error;
    unique_function<void(std::size_t, std::error_code)> handler;
  };
  auto t = std::make_shared<tally>(tally{nodes_.size(), 0, {}, std::move(handler)});
  for (auto& node : nodes_) {
    run_script(node, release_script, {key_}, {token}, node_timeout_,
               [t](std::error_code ec, reply r) {
                 if (ec && !t->first_error) t->first_error = ec;
                 if (!ec && r.is_integer() && r.integer() == 1) ++t->released;
                 if (--t->outstanding == 0) t->handler(t->released, t->first_error);
               });
  }
}

void lock_core::start_release(const std::shared_ptr<lease_state>& state, done_handler handler) {
  if (state->released.exchange(true)) return handler(errc::not_held);
  release_everywhere(state->token, [handler = std::move(handler)](std::size_t released,
                                                                  std::error_code first_error) mutable {
    if (released > 0) return handler({});
    handler(first_error ? first_error : std::error_code(errc::not_held));
  });
}

void lock_core::start_extend(const std::shared_ptr<lease_state>& state,
                             std::chrono::milliseconds ttl, done_handler handler) {
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
    run_script(nodes_[i], extend_script, {key_}, {state->token, ttl_text}, node_timeout_,
               [op, i](std::error_code ec, reply r) {
                 if (ec) {
                   op->round.failed(i, ec, r.is_error() ? r.str() : std::string());
                 } else if (r.is_integer() && r.integer() == 1) {
                   op->round.granted(i, 0);
                 } else {
                   op->round.taken(i, -1);  // gone, or someone else's
                 }
                 if (!op->handler || !op->round.decided()) return;
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
