// SPDX-License-Identifier: Apache-2.0
// dlock::lock_set: the acquisition engine with the lock set's protocol (algo/lock_set_protocol)
// takes every key or none, driven by acquire_run as a mutex's; the lease's owner releases and
// extends the keys one script each (set_release, set_extend, pipelined on the connection), so
// that each name's queued mutex waiter is handed its key as after a mutex's release.
#include "dlock/lock_set.hpp"

#include <algorithm>
#include <climits>
#include <functional>
#include <optional>
#include <stop_token>

#include "acquire_run.hpp"
#include "algo/acquisition.hpp"
#include "algo/lease_upkeep.hpp"
#include "algo/retry.hpp"
#include "dlock/key_layout.hpp"
#include "key_layout_internal.hpp"
#include "lease_state.hpp"
#include "option_checks.hpp"
#include "script.hpp"
#include "slot_migration.hpp"
#include "token.hpp"

namespace dlock {
namespace detail {
namespace {

// One group on a single node, where every key is the node's; one per slot on a cluster.
std::vector<std::vector<std::size_t>> groups_on(const client& node,
                                                const std::vector<std::string>& keys) {
  if (node.where().is_cluster()) return slot_groups(keys);
  std::vector<std::size_t> all(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) all[i] = i;
  return {std::move(all)};
}

// A stop of either token stops the wait: an async form's wait_control and its handler's
// cancellation slot. Lives as long as the handler that carries it.
struct joint_stop {
  std::stop_source source;
  std::optional<std::stop_callback<std::function<void()>>> first, second;
};

}  // namespace

class lock_set_core final : public lease_owner,
                            public std::enable_shared_from_this<lock_set_core> {
 public:
  using acquire_handler = unique_function<void(std::error_code, lease)>;

  lock_set_core(client node, std::vector<std::string> keys, lock_options options)
      : nodes_{std::move(node)},
        keys_(std::move(keys)),
        options_(std::move(options)),
        target_(keys_, groups_on(nodes_.front(), keys_), options_,
                nodes_.front().options().request_timeout) {
    target_.node_names.push_back(nodes_.front().where().to_string());
  }

  const std::vector<std::string>& keys() const noexcept { return keys_; }
  const std::string& key() const noexcept override { return target_.label; }
  primitive kind() const noexcept override { return primitive::lock; }
  std::chrono::milliseconds default_ttl() const noexcept override { return options_.ttl; }
  io_executor get_executor() const noexcept override { return nodes_.front().get_executor(); }

  // Up to `attempts` attempts until `deadline` (max(): attempts only), polling in between.
  // `cancel`, an async form's cancellation slot, stops it as control.stop does.
  void start_acquire(steady::time_point deadline, int attempts, wait_control control,
                     acquire_handler handler, std::stop_token cancel = {}) {
    if (cancel.stop_possible() && control.stop.stop_possible()) {
      auto joint = std::make_shared<joint_stop>();
      auto request = [joint = joint.get()] { joint->source.request_stop(); };
      joint->first.emplace(control.stop, request);
      joint->second.emplace(cancel, request);
      control.stop = joint->source.get_token();
      handler = [joint, h = std::move(handler)](std::error_code ec, lease l) mutable {
        h(ec, std::move(l));
      };
    } else if (cancel.stop_possible()) {
      control.stop = std::move(cancel);
    }
    make_run(deadline, attempts, control)->start(std::move(handler));
  }

  // The same, blocking the calling thread; the first attempt goes out from this thread when
  // the connection is idle.
  lease acquire_blocking(steady::time_point deadline, int attempts, const wait_control& control,
                         std::error_code& ec) {
    return make_run(deadline, attempts, control)->run_blocking(ec);
  }

  void start_release(const std::shared_ptr<lease_state>& state, done_handler handler) override {
    if (state->released.exchange(true)) return handler(errc::not_held);
    struct release_op {
      set_release tally;
      done_handler handler;
    };
    auto op = std::make_shared<release_op>(release_op{set_release(target_, state->token),
                                                      std::move(handler)});
    for (auto& r : op->tally.take_requests()) {
      auto on_answer = [op, id = r.id](std::error_code ec, const reply& answer) {
        op->tally.on_reply(id, ec, answer);
        if (auto verdict = op->tally.take_outcome()) op->handler(*verdict);
      };
      // While the slot migrates, by the lock's key alone (slot_migration.hpp). `self`: the
      // requests point into target_.
      std::string_view key = r.keys[0];
      run_request(nodes_[0], std::move(r), [self = shared_from_this(), state, key,
                                            on_answer](std::error_code ec, reply answer) {
        if (!refused_while_migrating(answer)) return on_answer(ec, answer);
        release_lock_key(self->nodes_[0], std::string(key), state->token,
                         self->target_.node_timeout,
                         [on_answer](std::error_code step_ec, reply r) { on_answer(step_ec, r); });
      });
    }
  }

  void start_extend(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override {
    extend_keys(state, ttl, {}, std::move(handler));
  }

  void start_settle(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override {
    extend_keys(state, ttl, settled_token(state->token), std::move(handler));
  }

 private:
  std::shared_ptr<acquire_run> make_run(steady::time_point deadline, int attempts,
                                        const wait_control& control) {
    acquisition engine(target_, random_token(), deadline, attempts, jitter_random());
    return std::make_shared<acquire_run>(shared_from_this(), nodes_, std::move(engine),
                                         /*wake_on_release=*/false, nullptr, control);
  }

  void extend_keys(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                   const std::string& successor, done_handler handler) {
    if (auto refused = extend_refused(*state, ttl)) return handler(refused);
    struct extend_op {
      set_extend round;
      std::shared_ptr<lease_state> state;
      done_handler handler;
    };
    auto op = std::make_shared<extend_op>(extend_op{
        set_extend(target_, state->token, ttl, successor, steady::now()), state,
        std::move(handler)});
    for (auto& r : op->round.take_requests()) {
      auto id = r.id;
      run_request(nodes_[0], std::move(r), [self = shared_from_this(), op,
                                            id](std::error_code ec, reply answer) {
        std::optional<steady::time_point> deadline;
        if (op->state->validity_known) deadline = op->state->deadline();
        op->round.on_reply(id, steady::now(), deadline, ec, answer);
        if (auto verdict = op->round.take_outcome()) {
          op->handler(apply_extend(*self, *op->state, verdict->ec, verdict->valid_until));
        }
      });
    }
  }

  std::vector<client> nodes_;  // one: acquire_run's form
  std::vector<std::string> keys_;
  lock_options options_;
  lock_set_target target_;
};

}  // namespace detail

namespace {

std::vector<std::string> checked_keys(const client& node, std::vector<std::string> names,
                                      const lock_options& o) {
  using detail::reject_argument;
  if (names.empty()) reject_argument("a lock set needs at least one name");
  if (names.size() > 1000) reject_argument("a lock set takes at most 1000 names");
  if (o.fair || o.copies > 1 || !o.reentrant.empty()) {
    reject_argument("a lock set takes neither fair, copies nor reentrant");
  }
  // Its grants and extends are not confirmed on replicas (as a mutex's are): refused rather
  // than silently unguarded.
  if (node.options().replication_guard.enabled) {
    reject_argument("a lock set does not take the replication guard yet");
  }
  std::vector<std::string> keys;
  for (const auto& name : names) {
    std::string key = o.key_prefix + name;
    detail::check_shared_options("lock", name, key, o);
    if (is_companion_key(key)) reject_argument("a lock key is one of dlock's companion keys");
    keys.push_back(std::move(key));
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace

lock_set::lock_set(client node, std::vector<std::string> names, lock_options options)
    : core_(std::make_shared<detail::lock_set_core>(
          node, checked_keys(node, std::move(names), options), options)) {}

lock_set::~lock_set() = default;

const std::vector<std::string>& lock_set::keys() const noexcept { return core_->keys(); }

lease lock_set::try_acquire(std::error_code& ec) {
  return core_->acquire_blocking(clock::time_point::max(), 1, {}, ec);
}

lease lock_set::acquire_until(clock::time_point deadline, std::error_code& ec) {
  return acquire_until(deadline, wait_control{}, ec);
}

lease lock_set::acquire_until(clock::time_point deadline, const wait_control& control,
                              std::error_code& ec) {
  return core_->acquire_blocking(deadline, INT_MAX, control, ec);
}

detail::io_executor lock_set::get_executor() const noexcept { return core_->get_executor(); }

void lock_set::start_try_acquire(const std::shared_ptr<detail::lock_set_core>& core,
                                 detail::unique_function<void(std::error_code, lease)> handler) {
  core->start_acquire(clock::time_point::max(), 1, {}, std::move(handler));
}

void lock_set::start_acquire(const std::shared_ptr<detail::lock_set_core>& core,
                             clock::time_point deadline, const wait_control& control,
                             detail::unique_function<void(std::error_code, lease)> handler,
                             std::stop_token cancel) {
  core->start_acquire(deadline, INT_MAX, control, std::move(handler), std::move(cancel));
}

lease lock_set::acquire() {
  std::error_code ec;
  lease l = acquire(ec);
  if (ec) throw std::system_error(ec, "dlock: cannot lock " + core_->key());
  return l;
}

lease lock_set::try_acquire() {
  std::error_code ec;
  lease l = try_acquire(ec);
  if (ec && !detail::is_retryable(ec)) {
    throw std::system_error(ec, "dlock: cannot lock " + core_->key());
  }
  return l;
}

lease lock_set::acquire_or_throw(clock::time_point deadline) {
  std::error_code ec;
  lease l = acquire_until(deadline, ec);
  if (detail::throws_from_wait(ec, deadline)) {
    throw std::system_error(ec, "dlock: cannot lock " + core_->key());
  }
  return l;
}

lease lock_all(client node, std::vector<std::string> names, lock_options options) {
  lock_set set{std::move(node), std::move(names), std::move(options)};
  std::error_code ec;
  lease l = set.acquire(ec);
  if (ec) throw std::system_error(ec, "dlock: cannot lock all of the set");
  return l;
}

}  // namespace dlock
