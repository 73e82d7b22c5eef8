// The semaphore's engine: one node, one atomic script per attempt, server time throughout.
//
// An acquisition draws one random owner token and keeps it across all its attempts, so that an
// attempt whose reply was lost (timeout, dropped connection) cannot leave a ghost permit that
// competes with us: the next attempt's script finds the token and treats it as ours, and giving
// up removes it. The pacing (attempts, deadline, jitter, validity) is algo/semaphore_wait's;
// this file only moves its decisions to and from the wire.
//
// Validity is start + ttl - drift on steady_clock, the start taken before the script is sent:
// the server stamps expiry = its TIME + ttl at some moment after that, so the client's view
// ends no later than the server's, whatever the two wall clocks say.
#include "semaphore_core.hpp"

#include <asio/steady_timer.hpp>

#include <algorithm>

#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "token.hpp"

namespace dlock::detail {

semaphore_keys make_semaphore_keys(const std::string& key, bool fair) {
  std::string base = "{" + key + "}";
  auto open = key.find('{');
  if (open != std::string::npos) {
    auto close = key.find('}', open + 1);
    if (close != std::string::npos && close > open + 1) base = key;  // keeps its own tag
  }
  if (fair) {
    return {base + ":fairsem:timeouts", base + ":fairsem:owners", base + ":fairsem:weights",
            base + ":fairsem:counter"};
  }
  return {base + ":sem:holders", {}, base + ":sem:weights", base + ":sem:fence"};
}

struct semaphore_core::acquire_op {
  acquire_op(io_executor ex, semaphore_wait::config c) : timer(ex), wait(c) {}
  std::string token = random_token();
  std::string permits;
  acquire_handler handler;
  asio::steady_timer timer;
  semaphore_wait wait;
};

semaphore_core::semaphore_core(client node, std::string key, std::ptrdiff_t limit,
                               semaphore_options options)
    : node_(std::move(node)),
      key_(std::move(key)),
      limit_(limit),
      options_(std::move(options)),
      keys_(make_semaphore_keys(key_, options_.fair)) {
  node_timeout_ = options_.node_timeout;
  if (node_timeout_.count() == 0) {
    node_timeout_ = std::min(std::max(options_.ttl / 10, std::chrono::milliseconds(1)),
                             node_.options().request_timeout);
  }
  // A fair waiter's place must outlive the gap between two polls: at most one jittered delay
  // plus one request. Twice that, so one slow poll does not cost the place; a waiter that
  // crashed blocks the queue no longer than this.
  queue_ttl_ = 2 * (options_.retry_delay + node_timeout_) + std::chrono::milliseconds(20);
}

void semaphore_core::start_acquire(steady::time_point deadline, int attempts,
                                   std::ptrdiff_t permits, acquire_handler handler) {
  semaphore_wait::config c;
  c.deadline = deadline;
  c.attempts = std::max(attempts, 1);
  c.ttl = options_.ttl;
  c.drift_factor = options_.drift_factor;
  c.retry_delay = options_.retry_delay;
  c.fair = options_.fair;
  c.queue_ttl = queue_ttl_;
  auto op = std::make_shared<acquire_op>(executor(), c);
  op->permits = std::to_string(permits);
  op->handler = std::move(handler);
  attempt(op);
}

void semaphore_core::attempt(const std::shared_ptr<acquire_op>& op) {
  auto queue_ms = op->wait.begin_attempt(steady::now());
  std::string limit = std::to_string(limit_);
  std::string ttl = std::to_string(options_.ttl.count());
  auto on_reply = [self = shared_from_this(), op](std::error_code ec, reply r) {
    self->on_attempt(op, ec, r);
  };
  if (options_.fair) {
    run_script(node_, sem_fair_acquire_script,
               {keys_.owners, keys_.expiries, keys_.weights, keys_.counter},
               {op->token, limit, op->permits, ttl, std::to_string(queue_ms.count())},
               node_timeout_, std::move(on_reply));
  } else {
    run_script(node_, sem_acquire_script, {keys_.expiries, keys_.weights, keys_.counter},
               {op->token, limit, op->permits, ttl}, node_timeout_, std::move(on_reply));
  }
}

void semaphore_core::on_attempt(const std::shared_ptr<acquire_op>& op, std::error_code ec,
                                const reply& r) {
  semaphore_reply parsed;
  if (!ec) parsed = parse_semaphore_reply(r, options_.fair, ec);
  auto next = op->wait.on_reply(steady::now(), ec, parsed, jitter_random());
  using kind = semaphore_wait::action::kind;
  if (next.what == kind::granted) {
    auto state = std::make_shared<lease_state>();
    state->token = op->token;
    state->fence = static_cast<std::uint64_t>(next.fence);
    state->set_deadline(next.valid_until);
    return std::exchange(op->handler, {})({}, make_lease(shared_from_this(), std::move(state)));
  }
  if (next.what == kind::retry) {
    op->timer.expires_after(next.delay);
    op->timer.async_wait([self = shared_from_this(), op](std::error_code) { self->attempt(op); });
    return;
  }
  if (!next.cleanup) return std::exchange(op->handler, {})(next.ec, lease{});
  // Leave no permit or queue place behind; report only after the removal answered, so that a
  // caller who retries at once does not meet our own leftover.
  run_entry_script(sem_release_script, op->token, {},
                   [op, ec = next.ec](std::error_code, reply) {
                     std::exchange(op->handler, {})(ec, lease{});
                   });
}

void semaphore_core::run_entry_script(const script& s, const std::string& token,
                                      std::string_view ttl_ms,
                                      unique_function<void(std::error_code, reply)> handler) {
  if (options_.fair) {
    run_script(node_, s, {keys_.expiries, keys_.weights, keys_.owners}, {token, ttl_ms},
               node_timeout_, std::move(handler));
  } else {
    run_script(node_, s, {keys_.expiries, keys_.weights}, {token, ttl_ms}, node_timeout_,
               std::move(handler));
  }
}

void semaphore_core::start_release(const std::shared_ptr<lease_state>& state,
                                   done_handler handler) {
  if (state->released.exchange(true)) return handler(errc::not_held);
  run_entry_script(sem_release_script, state->token, {},
                   [handler = std::move(handler)](std::error_code ec, reply r) mutable {
                     if (ec) return handler(ec);
                     if (!r.is_integer()) return handler(errc::protocol_error);
                     handler(r.integer() == 1 ? std::error_code() : errc::not_held);
                   });
}

void semaphore_core::start_extend(const std::shared_ptr<lease_state>& state,
                                  std::chrono::milliseconds ttl, done_handler handler) {
  if (state->released.load()) return handler(errc::not_held);
  if (state->lost.stop_requested()) return handler(errc::lease_lost);
  if (ttl <= std::chrono::milliseconds::zero() || ttl > max_ttl) {
    return handler(errc::invalid_argument);
  }
  auto start = steady::now();
  double drift_factor = options_.drift_factor;
  run_entry_script(
      sem_refresh_script, state->token, std::to_string(ttl.count()),
      [state, start, ttl, drift_factor, handler = std::move(handler)](std::error_code ec,
                                                                      reply r) mutable {
        if (ec) return handler(ec);
        if (!r.is_integer()) return handler(errc::protocol_error);
        if (r.integer() != 1) {
          // Gone or expired on the server: the script did not add it back, and neither do we.
          state->mark_lost(errc::lease_lost);
          return handler(errc::lease_lost);
        }
        // A refresh that lands after the old validity ended cannot vouch for the gap.
        if (state->validity_known && steady::now() >= state->deadline()) {
          state->mark_lost(errc::lease_expired);
          return handler(errc::lease_expired);
        }
        state->set_deadline(start + ttl - drift_allowance(ttl, drift_factor));
        handler({});
      });
}

}  // namespace dlock::detail
