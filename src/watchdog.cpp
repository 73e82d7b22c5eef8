// SPDX-License-Identifier: Apache-2.0
// The watchdog: one timer per kept-alive lease on dlock's I/O thread.
//
// It wakes at the earlier of the next renewal and the end of validity. The next renewal comes
// after the interval, or after half the validity left when that is sooner, so that a lease
// kept alive late, or shortened by a manual extend, still has time for a renewal and a retry
// before it runs out; a manual extend replans it (replan_keep_alive). Reaching the end of
// validity without a successful renewal means the lease can no longer be trusted, whatever the
// servers say later, so the loss signal fires then (lease_expired); a renewal answered "not
// ours" fires it at once (lease_lost, from lock_core's extend). A released lease is never
// renewed again, and an answer that arrives after the release is ignored, so a release never
// races with a renewal into a false loss signal, and extend being compare-and-pexpire means no
// renewal can bring a released key back. A lock's key is also watched (client-side caching:
// lock_core::watch_changes), so that another client taking it is found at once.
#include <asio/dispatch.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <optional>
#include <random>

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
        options_(std::move(options)),
        timer_(owner_->get_executor()) {
    if (options_.interval.count() <= 0) options_.interval = owner_->default_ttl() / 3;
    if (options_.interval.count() <= 0) options_.interval = std::chrono::milliseconds(1);
  }

  void start(const std::shared_ptr<lease_state>& state) {
    started_ = steady::now();
    next_renewal_ = plan(started_, jittered(options_.interval), *state);
    if (options_.on_lost) {
      on_lost_.emplace(state->lost.get_token(), [cb = options_.on_lost, weak = state_] {
        auto s = weak.lock();
        int reason = s ? s->lost_reason.load() : 0;
        cb(reason ? make_error_code(static_cast<errc>(reason)) : make_error_code(errc::lease_lost));
      });
    }
    watcher_ = state->token;
    watch(state);
    schedule();
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
    auto state = state_.lock();
    if (stopped_ || !state || state->lost.stop_requested()) return;
    watch(state);
    if (!deadline_moved) return;
    next_renewal_ = plan(steady::now(), jittered(options_.interval), *state);
    timer_.cancel();
    schedule();
  }

 private:
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
    auto state = state_.lock();
    if (stopped_ || !state || state->released.load() || state->lost.stop_requested()) return;
    if (in_flight_) {
      recheck_ = true;  // the renewal on its way may have run before the change
      return;
    }
    // Past a cap (max_hold, max_renewals) nothing is renewed any more; the lease ends at its
    // validity, as it would have. At most one such check per quarter interval, whatever
    // reports changes: they must never turn into a stream of renewals.
    auto now = steady::now();
    if (!may_renew(now)) return;
    auto earliest = last_check_ + options_.interval / 4;
    if (now < earliest) {
      next_renewal_ = std::min(next_renewal_, earliest);
      timer_.cancel();
      return schedule();
    }
    last_check_ = now;
    next_renewal_ = now;  // a renewal due now: its lag is 0
    renew(state);
  }

  // +-10 %, so that leases taken together spread their renewals.
  static steady::duration jittered(std::chrono::milliseconds interval) {
    auto r = static_cast<double>(jitter_random() % 2001) / 10000.0;  // 0 .. 0.2
    return std::chrono::duration_cast<steady::duration>(interval * (0.9 + r));
  }

  // `after` from now, or half the validity left if that is sooner.
  static steady::time_point plan(steady::time_point now, steady::duration after,
                                 const lease_state& state) {
    return now + std::min(after, (state.deadline() - now) / 2);
  }

  bool may_renew(steady::time_point now) const {
    if (options_.max_hold.count() > 0 && now - started_ >= options_.max_hold) return false;
    if (options_.max_renewals > 0 && renewals_ >= options_.max_renewals) return false;
    return true;
  }

  void schedule() {
    auto state = state_.lock();
    if (stopped_ || !state || state->released.load() || state->lost.stop_requested()) return;
    auto wake = state->deadline();
    if (!in_flight_ && may_renew(steady::now())) wake = std::min(wake, next_renewal_);
    timer_.expires_at(wake);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (!ec) self->on_timer();
    });
  }

  void on_timer() {
    auto state = state_.lock();
    if (stopped_ || !state || state->released.load() || state->lost.stop_requested()) return;
    auto now = steady::now();
    if (now >= state->deadline()) return lose(*owner_, *state, errc::lease_expired);
    if (!in_flight_ && may_renew(now) && now >= next_renewal_) return renew(state);
    schedule();
  }

  void renew(const std::shared_ptr<lease_state>& state) {
    in_flight_ = true;
    auto sent = steady::now();
    auto lag = sent - next_renewal_;
    owner_->start_extend(state, owner_->default_ttl(),
                         [self = shared_from_this(), sent, lag](std::error_code ec) {
      self->in_flight_ = false;
      self->report(ec, lag, steady::now() - sent);
      auto state = self->state_.lock();
      if (!state) return;
      if (!ec) ++self->renewals_;
      // lease_lost / lease_expired already fired the signal; anything else may heal.
      auto after = ec ? steady::duration(self->options_.interval / 4)
                      : jittered(self->options_.interval);
      // A change reported while this renewal was out is checked by another one, as soon as
      // on_key_changed's pace allows.
      if (std::exchange(self->recheck_, false) && !ec) {
        auto now = steady::now();
        auto earliest = self->last_check_ + self->options_.interval / 4;
        after = std::max(steady::duration::zero(), earliest - now);
        self->last_check_ = now + after;
      }
      // A renewal that failed may still have landed on some nodes, and ended the watch there
      // as a successful one does: watch again unless the lease is gone.
      if (!self->stopped_ && !state->lost.stop_requested()) self->watch(state);
      self->next_renewal_ = plan(steady::now(), after, *state);
      self->timer_.cancel();
      self->schedule();
    });
    schedule();  // meanwhile, watch the end of validity
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
  keep_alive_options options_;
  asio::steady_timer timer_;
  std::optional<std::stop_callback<std::function<void()>>> on_lost_;
  steady::time_point started_, next_renewal_;
  int renewals_ = 0;
  std::string watcher_;  // the token its watches go by (forget_changes)
  steady::time_point last_check_{};  // the last renewal a reported change set off
  bool recheck_ = false;
  bool in_flight_ = false;
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
