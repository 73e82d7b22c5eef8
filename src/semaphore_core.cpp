// SPDX-License-Identifier: Apache-2.0
// dlock::semaphore's core: the semaphore's state and the wiring of its operations. Attempts,
// waiting, pacing and giving up are the engine's (algo/acquisition.cpp), carried out by
// acquire_run; this file adds release and refresh, one script each.
//
// Validity is start + ttl - drift on steady_clock, the start taken before the script is sent:
// the server stamps expiry = its TIME + ttl at some moment after that, so the client's view
// ends no later than the server's, whatever the two wall clocks say.
#include "semaphore_core.hpp"

#include "acquire_run.hpp"
#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "replication_guard.hpp"
#include "script.hpp"
#include "slot_migration.hpp"
#include "token.hpp"

namespace dlock::detail {

semaphore_core::semaphore_core(client node, std::string key, std::ptrdiff_t limit,
                               semaphore_options options)
    : nodes_{std::move(node)},
      key_(std::move(key)),
      limit_(limit),
      options_(std::move(options)),
      target_(make_semaphore_target(key_, limit_, options_,
                                    nodes_.front().options().request_timeout,
                                    nodes_.front().where().is_cluster())) {
  target_.node_names.push_back(nodes_.front().where().to_string());
}

semaphore_core::semaphore_core(client node, std::string key, std::ptrdiff_t limit,
                               semaphore_options options, semaphore_keys keys, primitive kind)
    : semaphore_core(std::move(node), std::move(key), limit, std::move(options)) {
  target_.keys = std::move(keys);
  if (kind == primitive::shared_mutex) target_.name_mark = read_write_lock_mark;
  kind_ = kind;
}

std::shared_ptr<acquire_run> semaphore_core::make_run(steady::time_point deadline, int attempts,
                                                      std::ptrdiff_t permits,
                                                      const wait_control& control) {
  acquisition engine(target_, random_token(), permits, deadline, attempts, jitter_random(),
                     plain_first_.next());
  auto run = std::make_shared<acquire_run>(shared_from_this(), nodes_, std::move(engine),
                                           options_.wake_on_release, nullptr, control);
  plain_first_.follow(*run);  // the run keeps this core alive until it ends
  return run;
}

void semaphore_core::start_acquire(steady::time_point deadline, int attempts,
                                   std::ptrdiff_t permits, acquire_handler handler,
                                   std::stop_token stop) {
  make_run(deadline, attempts, permits, wait_control{.stop = std::move(stop), .on_retry = {}})
      ->start(std::move(handler));
}

lease semaphore_core::acquire_blocking(steady::time_point deadline, int attempts,
                                       std::ptrdiff_t permits, std::error_code& ec,
                                       const wait_control& control) {
  return make_run(deadline, attempts, permits, control)->run_blocking(ec);
}
void semaphore_core::release_entry(const std::string& token,
                                   unique_function<void(std::error_code, reply)> handler) {
  request r{0, 0, &sem_release_script, semaphore_release_keys(target_.keys),
            {token, target_.limit_text, target_.variant_text, target_.name_mark},
            target_.node_timeout};
  run_request(nodes_.front(), std::move(r),
              [self = shared_from_this(), token, handler = std::move(handler)](
                  std::error_code ec, reply answer) mutable {
                if (!refused_while_migrating(answer)) return handler(ec, std::move(answer));
                end_permit(self->nodes_.front(), self->target_, token, std::move(handler));
              });
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
  if (!run_script_direct(nodes_.front(), sem_release_script, semaphore_release_keys(target_.keys),
                         {state->token, target_.limit_text, target_.variant_text,
                          target_.name_mark},
                         target_.node_timeout, run_ec, r)) {
    state->released.store(false);  // nothing sent: start_release takes over
    return false;
  }
  if (refused_while_migrating(r)) {
    state->released.store(false);  // nothing ran: start_release takes over, one key at a time
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
  if (auto refused = extend_refused(*state, ttl)) return handler(refused);
  auto start = steady::now();
  double drift_factor = options_.drift_factor;
  // `self`: the lease may be gone, and with it the core, when the reply comes.
  auto on_reply = [self = shared_from_this(), state, start, ttl, drift_factor,
                   handler = std::move(handler)](
                      std::error_code ec, reply r) mutable {
    auto verdict = [&]() -> std::error_code {
      if (ec) return ec;
      if (!r.is_integer()) return errc::protocol_error;
      // Gone or expired on the server: the script did not add it back, and neither do we.
      if (r.integer() != 1) return errc::lease_lost;
      // A refresh that lands after the old validity ended cannot vouch for the gap.
      if (state->validity_known && steady::now() >= state->deadline()) return errc::lease_expired;
      return {};
    };
    auto until = start + ttl - drift_allowance(ttl, drift_factor);
    auto ec_now = verdict();
    if (ec_now) return handler(apply_extend(*self, *state, ec_now, until));
    // The replication guard: the permit's validity moves out only once the replicas have it.
    guard_writes(self->nodes_, {0}, 1, guard_deadline(*state),
                 [self, state, until, handler = std::move(handler)](std::error_code guard_ec,
                                                                    std::string) mutable {
                   handler(guard_ec ? guard_ec : apply_guarded_extend(*self, *state, until));
                 });
  };
  auto keys = semaphore_refresh_keys(target_.keys, options_.fair);
  run_script(nodes_.front(), sem_refresh_script, std::vector<std::string>(keys.begin(), keys.end()),
             {state->token, std::to_string(ttl.count()), successor, target_.name_mark},
             target_.node_timeout,
             [self = shared_from_this(), state, ttl, settle = !successor.empty(),
              on_reply = std::move(on_reply)](std::error_code ec, reply r) mutable {
               // A settle needs the script's one step; it fails here and may be tried again.
               if (settle || !refused_while_migrating(r)) return on_reply(ec, std::move(r));
               refresh_permit_key_by_key(self->nodes_.front(), self->target_, state->token, ttl,
                                         std::move(on_reply));
             });
}

}  // namespace dlock::detail
