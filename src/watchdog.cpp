// SPDX-License-Identifier: Apache-2.0
// The watchdog: one timer per kept-alive lease on dlock's I/O thread, driving the lease's
// keep_alive_schedule (algo/keep_alive_schedule.hpp says when it renews and when it gives up).
//
// It wakes at the earlier of the next renewal and the end of validity; a manual extend replans
// it (replan_keep_alive). The end of validity without a successful renewal fires the loss
// signal (lease_expired); a renewal answered "not ours" fires it at once (lease_lost, from
// lock_core's extend). A released lease is never renewed again, and an answer that arrives
// after the release is ignored, so a release never races with a renewal into a false loss
// signal, and extend being compare-and-pexpire means no renewal can bring a released key back. A lock's key is also watched (client-side caching:
// lock_core::watch_changes), so that another client taking it is found at once.
#include <asio/dispatch.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <functional>
#include <optional>

#include "algo/keep_alive_schedule.hpp"
#include "algo/retry.hpp"
#include "lease_state.hpp"
#include "observe.hpp"

namespace dlock::detail {

class keep_alive_task : public std::enable_shared_from_this<keep_alive_task> {
 public:
  keep_alive_task(std::shared_ptr<lease_owner> owner, std::weak_ptr<lease_state> state,
                  keep_alive_options options)
      : owner_(std::move(owner)),
        state_(std::move(state)),
        on_lost_callback_(std::move(options.on_lost)),
        schedule_({options.interval, options.max_hold, options.max_renewals, owner_->default_ttl()},
                  jitter_random()),
        timer_(owner_->get_executor()) {}

  void start(const std::shared_ptr<lease_state>& state) {
    schedule_.start(steady::now(), state->deadline());
    if (on_lost_callback_) {
      on_lost_.emplace(state->lost.get_token(), [cb = on_lost_callback_, weak = state_] {
        auto s = weak.lock();
        int reason = s ? s->lost_reason.load() : 0;
        cb(reason ? make_error_code(static_cast<errc>(reason)) : make_error_code(errc::lease_lost));
      });
    }
    watcher_ = state->token;
    watch(state);
    arm_timer(*state);
  }

  void stop() {
    stopped_ = true;
    timer_.cancel();
    on_lost_.reset();
    if (!watcher_.empty()) owner_->forget_changes(watcher_);
  }

  // After a manual extend. When it moved the deadline: plan the next renewal from it, and
  // watch the new end of validity, which may be earlier than the one the timer waits for.
  // Either way the key is watched again: the extend ended the tracking where it landed.
  void replan(bool deadline_moved) {
    auto state = live_state();
    if (!state) return;
    watch(state);
    if (!deadline_moved) return;
    schedule_.replan(steady::now(), state->deadline());
    arm_timer(*state);
  }

 private:
  // The lease while the watchdog still has work: not stopped, released or lost.
  std::shared_ptr<lease_state> live_state() const {
    auto state = state_.lock();
    if (stopped_ || !state || state->released.load() || state->lost.stop_requested()) return {};
    return state;
  }

  // A change of the key by another client (deleted, overwritten) is checked at once with a
  // renewal, which finds the key not ours and fires the loss signal: the moment someone else
  // takes the key, not at the next renewal (lock_core::watch_changes). Our own renewals change
  // the key too, but send nothing (NOLOOP) and end the tracking, so every renewal watches again.
  void watch(const std::shared_ptr<lease_state>& state) {
    std::weak_ptr<keep_alive_task> weak = shared_from_this();
    owner_->watch_changes(state, [weak] {
      if (auto self = weak.lock()) self->on_key_changed();
    });
  }

  void on_key_changed() {
    if (auto state = live_state()) act(state, schedule_.on_key_changed(steady::now()));
  }

  void on_timer() {
    if (auto state = live_state()) act(state, schedule_.on_timer(steady::now(), state->deadline()));
  }

  void act(const std::shared_ptr<lease_state>& state, keep_alive_schedule::step step) {
    using step_t = keep_alive_schedule::step;
    if (step == step_t::expired) return lose(*owner_, *state, errc::lease_expired);
    if (step == step_t::renew) renew(state);
    arm_timer(*state);
  }

  void arm_timer(const lease_state& state) {
    timer_.expires_at(schedule_.wake_at(steady::now(), state.deadline()));
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (!ec) self->on_timer();
    });
  }

  void renew(const std::shared_ptr<lease_state>& state) {
    auto sent = steady::now();
    auto lag = schedule_.lag();
    owner_->start_extend(state, owner_->default_ttl(),
                         [self = shared_from_this(), sent, lag](std::error_code ec) {
      self->report(ec, lag, steady::now() - sent);
      auto state = self->state_.lock();
      if (!state) return;
      // lease_lost / lease_expired already fired the signal; anything else may heal.
      self->schedule_.on_renewed(steady::now(), state->deadline(), !ec);
      // A renewal that failed may still have landed on some nodes, and ended the watch there
      // as a successful one does: watch again unless the lease is gone.
      if (!self->stopped_ && !state->lost.stop_requested()) self->watch(state);
      if (self->live_state()) self->arm_timer(*state);
    });
  }

  // Tells the observer and the log sink (observe.hpp) how a renewal ended.
  void report(std::error_code ec, steady::duration lag, steady::duration took) const {
    if (ec && logging()) {
      log(ec == errc::lease_lost ? log_level::error : log_level::warning,
          std::string(to_string(owner_->kind())) + " '" + owner_->key() +
              "': renewal failed: " + ec.message());
    }
    if (auto* o = current_observer()) {
      o->on_renewal({owner_->key(), owner_->kind(), ec, lag, took});
    }
  }

  std::shared_ptr<lease_owner> owner_;
  std::weak_ptr<lease_state> state_;
  std::function<void(std::error_code)> on_lost_callback_;
  keep_alive_schedule schedule_;
  asio::steady_timer timer_;
  std::optional<std::stop_callback<std::function<void()>>> on_lost_;
  std::string watcher_;  // the token its watches go by (forget_changes)
  bool stopped_ = false;
};

void start_keep_alive(std::shared_ptr<lease_owner> owner, std::shared_ptr<lease_state> state,
                      keep_alive_options options) {
  auto ex = owner->get_executor();
  state->keep_alive_asked.store(true);  // before the post: a stop_keep_alive after it must post
  asio::post(ex, [owner = std::move(owner), state = std::move(state),
                  options = std::move(options)]() mutable {
    if (state->keeper) state->keeper->stop();
    if (state->let_go.load()) return;  // released or detached while this was queued
    state->keeper = std::make_shared<keep_alive_task>(owner, state, std::move(options));
    state->keeper->start(state);
  });
}

void replan_keep_alive(const std::shared_ptr<lease_owner>& owner,
                       const std::shared_ptr<lease_state>& state, bool deadline_moved) {
  // Inline on the I/O thread (where an extend completes), so the plan is new before the
  // extend's caller hears of it.
  asio::dispatch(owner->get_executor(), [state, deadline_moved] {
    if (state->keeper) state->keeper->replan(deadline_moved);
  });
}

void stop_keep_alive(const std::shared_ptr<lease_owner>& owner,
                     const std::shared_ptr<lease_state>& state) {
  if (!owner || !state || !state->keep_alive_asked.load()) return;
  asio::post(owner->get_executor(), [state] {
    if (state->keeper) std::exchange(state->keeper, {})->stop();
  });
}

}  // namespace dlock::detail
