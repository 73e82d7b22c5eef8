// The semaphore's engine: one node, one atomic script per attempt, server time throughout.
//
// Waiting without polling, as the lock does: an attempt that fails and will be followed by
// another queues the waiter under the client's inbox channel (the unfair variant in a waiter
// queue of its own, the fair one in its ticket queue), and sem_release.lua PUBLISHes the tokens
// of as many queued waiters as permits it freed, which cuts their sleep short (wake_waiter). The
// retry delay stays as the bounded backstop: for a lost message, a holder that expired instead
// of releasing (its permits come back silently), or a waiter that cannot use what it was woken
// for (another one took the permit first, or it wants more permits than came free).
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

#include <asio/dispatch.hpp>

#include <algorithm>

#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "net/inbox.hpp"
#include "token.hpp"

namespace dlock::detail {

struct semaphore_core::acquire_op {
  explicit acquire_op(semaphore_wait::config c) : wait(c) {}
  std::string token = random_token();
  std::string permits;
  acquire_handler handler;
  semaphore_wait wait;
  std::shared_ptr<wake_waiter> waiter;  // the sleep between attempts, and the wake-ups that end it
};

semaphore_core::semaphore_core(client node, std::string key, std::ptrdiff_t limit,
                               semaphore_options options)
    : node_(std::move(node)),
      key_(std::move(key)),
      limit_(limit),
      options_(std::move(options)),
      keys_(semaphore_keys_for(key_, options_.fair)) {
  node_timeout_ = options_.node_timeout;
  if (node_timeout_.count() == 0) {
    node_timeout_ = std::min(std::max(options_.ttl / 10, std::chrono::milliseconds(1)),
                             node_.options().request_timeout);
  }
  // A fair waiter's place must outlive the gap between two polls: at most one jittered delay
  // plus one request. Twice that, so one slow poll does not cost the place; a waiter that
  // crashed blocks the queue no longer than this.
  queue_ttl_ = 2 * (options_.retry_delay + node_timeout_) + std::chrono::milliseconds(20);
  waiter_entry_ = std::to_string(waiter_entry_ttl(options_.retry_delay).count()) + " ";
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
  auto op = std::make_shared<acquire_op>(c);
  op->permits = std::to_string(permits);
  op->handler = std::move(handler);
  op->waiter = std::make_shared<wake_waiter>(executor(), std::vector<inbox*>{&node_.wake_inbox()},
                                             op->token, options_.wake_on_release);
  // All of an acquisition runs on the I/O thread, where the inbox and the timer live.
  asio::dispatch(executor(), [self = shared_from_this(), op] { self->attempt(op); });
}

void semaphore_core::attempt(const std::shared_ptr<acquire_op>& op) {
  auto queue_ms = op->wait.begin_attempt(steady::now());
  // Listens before queueing: the release may publish before this attempt's reply comes back.
  // "" while the inbox is not subscribed yet (the first sleep subscribes it).
  std::string channel = op->waiter->begin_attempt(!op->wait.last_attempt()).front();
  std::string limit = std::to_string(limit_);
  std::string ttl = std::to_string(options_.ttl.count());
  auto on_reply = [self = shared_from_this(), op](std::error_code ec, reply r) {
    self->on_attempt(op, ec, r);
  };
  if (options_.fair) {
    // Queued (queue_ms > 0) even without a channel: its ticket keeps its place in the queue.
    run_script(node_, sem_fair_acquire_script,
               {keys_.owners, keys_.expiries, keys_.weights, keys_.tickets, keys_.waiter_info,
                keys_.fence},
               {op->token, limit, op->permits, ttl, std::to_string(queue_ms.count()), channel},
               node_timeout_, std::move(on_reply));
  } else {
    std::string waiter = channel.empty() ? std::string() : waiter_entry_ + channel;
    run_script(node_, sem_acquire_script,
               {keys_.expiries, keys_.weights, keys_.fence, keys_.waiters, keys_.waiter_info,
                keys_.tickets},
               {op->token, limit, op->permits, ttl, waiter}, node_timeout_, std::move(on_reply));
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
    // The granting script dequeued us: no entry is left to remove.
    op->waiter->finish();
    return std::exchange(op->handler, {})({}, make_lease(shared_from_this(), std::move(state)));
  }
  if (next.what == kind::retry) {
    // The backstop; a wake-up, or a completed inbox subscription, cuts it short.
    op->waiter->sleep(next.delay, [self = shared_from_this(), op] { self->attempt(op); });
    return;
  }
  op->waiter->finish();
  // An earlier attempt may have queued us although the last one did not.
  bool cleanup = next.cleanup || op->waiter->queued();
  if (!cleanup) return std::exchange(op->handler, {})(next.ec, lease{});
  // Leave no permit or queue place behind; report only after the removal answered, so that a
  // caller who retries at once does not meet our own leftover. A wake-up we got and will not
  // use is handed on to the next waiter by the same script.
  release_entry(op->token, [op, ec = next.ec](std::error_code, reply) {
    std::exchange(op->handler, {})(ec, lease{});
  });
}

void semaphore_core::release_entry(const std::string& token,
                                   unique_function<void(std::error_code, reply)> handler) {
  run_script(node_, sem_release_script,
             {keys_.expiries, keys_.weights, keys_.waiters, keys_.waiter_info}, {token},
             node_timeout_, std::move(handler));
}


void semaphore_core::start_release(const std::shared_ptr<lease_state>& state,
                                   done_handler handler) {
  if (state->released.exchange(true)) return handler(errc::not_held);
  release_entry(state->token, [handler = std::move(handler)](std::error_code ec, reply r) mutable {
    if (ec) return handler(ec);
    if (!r.is_integer()) return handler(errc::protocol_error);
    handler(r.integer() == 1 ? std::error_code() : errc::not_held);
  });
}

bool semaphore_core::try_release_direct(const std::shared_ptr<lease_state>& state,
                                        std::error_code& ec) {
  // Marked first, so that a keep-alive refresh starting now does not send after the release.
  if (state->released.exchange(true)) return false;  // start_release reports not_held
  reply r;
  std::error_code run_ec;
  if (!run_script_direct(node_, sem_release_script,
                         {keys_.expiries, keys_.weights, keys_.waiters, keys_.waiter_info},
                         {state->token}, node_timeout_, run_ec, r)) {
    state->released.store(false);  // nothing sent: start_release takes over
    return false;
  }
  if (run_ec) {
    ec = run_ec;
  } else if (!r.is_integer()) {
    ec = errc::protocol_error;
  } else {
    ec = r.integer() == 1 ? std::error_code() : std::error_code(errc::not_held);
  }
  return true;
}

void semaphore_core::start_extend(const std::shared_ptr<lease_state>& state,
                                  std::chrono::milliseconds ttl, done_handler handler) {
  refresh_entry(state, ttl, {}, std::move(handler));
}

void semaphore_core::start_settle(const std::shared_ptr<lease_state>& state,
                                  std::chrono::milliseconds ttl, done_handler handler) {
  refresh_entry(state, ttl, settled_token(state->token), std::move(handler));
}

void semaphore_core::refresh_entry(const std::shared_ptr<lease_state>& state,
                                   std::chrono::milliseconds ttl, const std::string& successor,
                                   done_handler handler) {
  if (state->released.load()) return handler(errc::not_held);
  if (state->lost.stop_requested()) return handler(errc::lease_lost);
  if (ttl <= std::chrono::milliseconds::zero() || ttl > max_ttl) {
    return handler(errc::invalid_argument);
  }
  auto start = steady::now();
  double drift_factor = options_.drift_factor;
  auto on_reply = [state, start, ttl, drift_factor, handler = std::move(handler)](
                      std::error_code ec, reply r) mutable {
    if (ec) return handler(ec);
    if (!r.is_integer()) return handler(errc::protocol_error);
    // Released meanwhile: the entry is gone by the release's doing, not lost.
    if (r.integer() != 1 && state->released.load()) return handler(errc::not_held);
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
  };
  std::string ttl_ms = std::to_string(ttl.count());
  if (options_.fair) {
    run_script(node_, sem_refresh_script, {keys_.expiries, keys_.weights, keys_.owners},
               {state->token, ttl_ms, successor}, node_timeout_, std::move(on_reply));
  } else {
    run_script(node_, sem_refresh_script, {keys_.expiries, keys_.weights},
               {state->token, ttl_ms, successor}, node_timeout_, std::move(on_reply));
  }
}

}  // namespace dlock::detail
