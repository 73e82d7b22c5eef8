// SPDX-License-Identifier: Apache-2.0
// dlock::lock_set: acquire_all.lua takes every key or none; the lease's owner releases and
// extends the keys one script each (release.lua, extend.lua, pipelined on the connection), so
// that each name's queued mutex waiter is handed its key as after a mutex's release.
#include "dlock/lock_set.hpp"

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <stop_token>

#include "algo/acquisition.hpp"
#include "algo/quorum_round.hpp"
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

class lock_set_core final : public lease_owner,
                            public std::enable_shared_from_this<lock_set_core> {
 public:
  lock_set_core(client node, std::vector<std::string> keys, lock_options options)
      : node_(std::move(node)), keys_(std::move(keys)), options_(std::move(options)) {
    for (const auto& k : keys_) companions_.push_back(lock_keys_for(k));
    // On a single node every key is the node's: one group, one script.
    std::vector<std::vector<std::size_t>> members;
    if (node_.where().is_cluster()) {
      members = slot_groups(keys_);
    } else {
      members.emplace_back(keys_.size());
      for (std::size_t i = 0; i < keys_.size(); ++i) members.back()[i] = i;
    }
    for (auto& m : members) {
      key_group group;
      for (auto i : m) {
        group.script_keys.push_back(keys_[i]);
        group.script_keys.push_back(companions_[i].fence);
      }
      group.members = std::move(m);
      groups_.push_back(std::move(group));
    }
    for (const auto& k : keys_) label_ += (label_.empty() ? "" : ",") + k;
    node_timeout_ = effective_node_timeout(options_.node_timeout, options_.ttl,
                                           node_.options().request_timeout);
  }

  const std::vector<std::string>& keys() const noexcept { return keys_; }
  const std::string& key() const noexcept override { return label_; }
  primitive kind() const noexcept override { return primitive::lock; }
  std::chrono::milliseconds default_ttl() const noexcept override { return options_.ttl; }
  std::chrono::milliseconds retry_delay() const noexcept { return options_.retry_delay; }
  io_executor get_executor() const noexcept override { return node_.get_executor(); }

  using attempt_handler = unique_function<void(std::error_code, lease, long long wait_hint)>;

  // One attempt, under a token of its own: the cleanup of a failed attempt is not awaited and
  // may run late (behind an EVAL fallback after NOSCRIPT, or on a connection given up after a
  // timeout), so a token shared with the next attempt could delete the keys that one took.
  // The price: a failed attempt that lands after its cleanup leaves its keys held by nobody
  // until they expire. `wait_hint`: on not_acquired, the PTTL of the key in the way (-1: unknown).
  // The slots are taken one script each, in slot order (slot_groups); a refusal or an error in
  // one gives back those taken before, so the attempt never waits while holding part of the set.
  // Each script waits for its answer until `answer_by` at the latest (a bounded wait's deadline
  // and grace), else for the node timeout.
  void start_attempt(attempt_handler done,
                     steady::time_point answer_by = steady::time_point::max()) {
    auto run = std::make_shared<attempt_run>();
    run->state->token = random_token() + ".0";
    run->start = steady::now();
    run->answer_by = answer_by;
    run->fences.assign(groups_.size(), 0);
    run->done = std::move(done);
    take_group(shared_from_this(), std::move(run));
  }

  // Attempts until the set is held, an error that retrying cannot cure, `deadline`, or a stop
  // (control.stop, or `cancel`, an async form's cancellation slot: cancelled, nothing held).
  // Between two it asks control.on_retry, then sleeps retry_delay (jittered), or until the key
  // that was in the way expires, when sooner (the lock's retry policy, algo/retry.hpp).
  void start_acquire(steady::time_point deadline, const wait_control& control,
                     unique_function<void(std::error_code, lease)> done,
                     std::stop_token cancel = {}) {
    auto loop = std::make_shared<acquire_loop>(shared_from_this(), deadline, control.on_retry,
                                               std::move(done));
    std::weak_ptr<acquire_loop> weak = loop;
    // The strong reference goes to the I/O thread with the post, so that the loop is never
    // destroyed on the thread that requested the stop.
    auto stop = [weak] {
      auto self = weak.lock();
      if (!self) return;
      self->stopped = true;
      auto ex = self->timer.get_executor();
      asio::post(ex, [self = std::move(self)] { self->timer.cancel(); });
    };
    if (control.stop.stop_possible()) loop->on_stop.emplace(control.stop, stop);
    if (cancel.stop_possible()) loop->on_cancel.emplace(cancel, stop);
    if (loop->stopped) {
      // Stopped before it began: finished on the I/O thread, not inside the initiating call.
      asio::post(get_executor(), [loop] { acquire_loop::finish(*loop, errc::cancelled, {}); });
      return;
    }
    // The first attempt on the caller's thread, its token too: drawn on the I/O thread for
    // every acquisition, OpenSSL's per-thread state there was reported leaked at exit
    // (LeakSanitizer, ClusterTest.OverlappingLockSetsAcrossSlots..., every run).
    acquire_loop::attempt(std::move(loop));
  }

  void start_release(const std::shared_ptr<lease_state>& state, done_handler handler) override {
    if (state->released.exchange(true)) return handler(errc::not_held);
    release_keys(state->token, std::move(handler));
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
  struct attempt_run {
    std::shared_ptr<lease_state> state = std::make_shared<lease_state>();
    steady::time_point start;
    std::size_t next_group = 0;
    std::uint64_t top_fence = 0;
    std::vector<std::uint64_t> fences;  // each group's, as its script drew it
    steady::time_point answer_by = steady::time_point::max();
    attempt_handler done;
  };

  // What an attempt's next script may wait: the node timeout, or less where the wait's deadline
  // comes first. Zero when that has passed.
  std::chrono::milliseconds script_timeout(const attempt_run& run) const {
    if (run.answer_by == steady::time_point::max()) return node_timeout_;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(run.answer_by - steady::now());
    return std::clamp(left, std::chrono::milliseconds(0), node_timeout_);
  }

  struct acquire_loop {
    acquire_loop(std::shared_ptr<lock_set_core> c, steady::time_point d,
                 std::function<bool(const wait_progress&)> retry,
                 unique_function<void(std::error_code, lease)> h)
        : core(std::move(c)),
          deadline(d),
          on_retry(std::move(retry)),
          timer(core->get_executor()),
          done(std::move(h)) {}

    static void attempt(std::shared_ptr<acquire_loop> self) {
      if (self->stopped) return finish(*self, errc::cancelled, {});
      ++self->attempts;
      auto* core = self->core.get();
      // A bounded wait's attempt is answered by its deadline (and the engine's grace); one
      // whose deadline had passed when it began is one whole attempt, as try_acquire().
      auto answer_by = self->deadline > self->began && self->deadline != steady::time_point::max()
                           ? self->deadline + acquisition::answer_grace
                           : steady::time_point::max();
      core->start_attempt([self = std::move(self)](std::error_code ec, lease l,
                                                   long long hint) mutable {
        // A grant that lands after the stop is dropped: the lease's destructor releases it.
        if (self->stopped) return finish(*self, errc::cancelled, {});
        if (l || !is_retryable(ec)) return finish(*self, ec, std::move(l));
        // Without a deadline, what no wait cures ends it all the same (endless_wait_rule).
        auto now = steady::now();
        auto why = self->endless.gives_up_on(ec, {}, now);
        if (why && self->deadline == steady::time_point::max()) return finish(*self, why, {});
        if (now >= self->deadline) return finish(*self, ec, {});
        if (self->on_retry) {
          wait_progress progress;
          progress.waited = now - self->began;
          progress.attempts = self->attempts;
          progress.last_error = ec;
          progress.kind = classify_failure(ec, {});
          if (!self->on_retry(progress)) return finish(*self, ec, {});
        }
        auto sleep = jittered_delay(self->core->retry_delay(), jitter_random());
        using std::chrono::milliseconds;
        if (hint >= 0) sleep = std::min<steady::duration>(sleep, milliseconds(hint + 1));
        sleep = std::max<steady::duration>(sleep, milliseconds(1));  // retry_delay 0
        if (self->deadline != steady::time_point::max()) {
          sleep = std::min(sleep, self->deadline - now);
        }
        self->timer.expires_after(sleep);
        auto* timer = &self->timer;
        timer->async_wait([self = std::move(self)](std::error_code) mutable {
          attempt(std::move(self));  // also after a stop cancelled the timer
        });
      }, answer_by);
    }

    static void finish(acquire_loop& self, std::error_code ec, lease l) {
      self.on_stop.reset();
      self.on_cancel.reset();
      auto handler = std::move(self.done);
      handler(ec, std::move(l));
    }

    std::shared_ptr<lock_set_core> core;
    steady::time_point deadline;
    steady::time_point began = steady::now();
    int attempts = 0;
    endless_wait_rule endless;
    std::function<bool(const wait_progress&)> on_retry;
    std::atomic<bool> stopped{false};
    std::optional<std::stop_callback<std::function<void()>>> on_stop, on_cancel;
    asio::steady_timer timer;
    unique_function<void(std::error_code, lease)> done;
  };

  static void take_group(std::shared_ptr<lock_set_core> self, std::shared_ptr<attempt_run> run) {
    if (run->next_group == self->groups_.size()) {
      return raise_fences(std::move(self), std::move(run));
    }
    auto timeout = self->script_timeout(*run);
    if (timeout <= std::chrono::milliseconds(0)) {
      return give_up(*self, *run, errc::timeout, -1, run->next_group);
    }
    auto& group = self->groups_[run->next_group];
    std::vector<std::string> args{run->state->token, std::to_string(self->options_.ttl.count())};
    auto* core = self.get();
    run_script(core->node_, acquire_all_script, group.script_keys, std::move(args), timeout,
               [self = std::move(self), run = std::move(run)](std::error_code ec, reply r) mutable {
                 if (!ec && r.is_error()) ec = error_from_reply(r);
                 const auto& e = r.elements();
                 if (!ec && (!r.is_array() || e.size() < 2 || !e[0].is_integer() ||
                             !e[1].is_integer())) {
                   ec = errc::protocol_error;
                 }
                 // A timeout may have taken the group's keys, an error midway part of them (a
                 // script is not rolled back): they are given back with those taken before.
                 if (ec) return give_up(*self, *run, ec, -1, run->next_group + 1);
                 if (e[0].integer() != 1) {
                   long long hint = e.size() == 3 && e[2].is_integer() ? e[2].integer() : -1;
                   return give_up(*self, *run, errc::not_acquired, hint, run->next_group);
                 }
                 auto fence = static_cast<std::uint64_t>(e[1].integer());
                 run->fences[run->next_group++] = fence;
                 run->top_fence = std::max(run->top_fence, fence);
                 take_group(std::move(self), std::move(run));
               });
  }

  // One token for the set: each slot drew its own, so the counters of the slots that drew less
  // are raised to the highest (fence_raise.lua), which every name's next token will exceed.
  // Nobody draws on these names meanwhile: the set holds them.
  static void raise_fences(std::shared_ptr<lock_set_core> self, std::shared_ptr<attempt_run> run) {
    struct tally {
      std::size_t pending = 1;  // one for the loop below, so that no answer finishes early
      std::error_code first_error;
    };
    auto t = std::make_shared<tally>();
    auto finish = [self, run, t]() {
      if (--t->pending > 0) return;
      if (t->first_error) return give_up(*self, *run, t->first_error, -1, self->groups_.size());
      grant(*self, *run);
    };
    std::string top = std::to_string(run->top_fence);
    std::string ttl_ms = std::to_string(self->options_.ttl.count());
    for (std::size_t g = 0; g < self->groups_.size(); ++g) {
      if (run->fences[g] == run->top_fence) continue;
      for (auto i : self->groups_[g].members) {
        ++t->pending;
        auto timeout = std::max(self->script_timeout(*run), std::chrono::milliseconds(1));
        run_script(self->node_, fence_raise_script, {self->companions_[i].fence}, {top, ttl_ms},
                   timeout, [t, finish](std::error_code ec, reply r) mutable {
                     if (!ec && r.is_error()) ec = error_from_reply(r);
                     if (!ec && !r.is_integer()) ec = errc::protocol_error;
                     if (ec && !t->first_error) t->first_error = ec;
                     finish();
                   });
      }
    }
    finish();
  }

  static void grant(lock_set_core& self, attempt_run& run) {
    auto& o = self.options_;
    auto until = run.start + o.ttl - drift_allowance(o.ttl, o.drift_factor);
    if (steady::now() >= until) {
      return give_up(self, run, errc::lease_expired, -1, self.groups_.size());
    }
    run.state->fence = run.top_fence;
    run.state->set_deadline(until);
    auto done = std::move(run.done);
    done({}, make_lease(self.shared_from_this(), std::move(run.state)), -1);
  }

  // Gives back, not awaited, the first `taken` groups, which may hold the attempt's token: after
  // a refusal those granted before it; after an error or a timeout the group in flight too (its
  // script may have run); after the grant all (a release is harmless where nothing is held).
  static void give_up(lock_set_core& self, attempt_run& run, std::error_code ec, long long hint,
                      std::size_t taken) {
    self.release_groups(run.state->token, taken, {});
    auto done = std::move(run.done);
    done(ec, {}, hint);
  }

  // Each key's release.lua, together: success when every key was still ours, not_held when
  // some were not (gone, or taken after they expired), else the first error. `done` may be
  // empty.
  void release_keys(const std::string& token, done_handler done) {
    release_groups(token, groups_.size(), std::move(done));
  }

  // release_keys for the first `count` groups only (those an attempt took before a refusal).
  void release_groups(const std::string& token, std::size_t count, done_handler done) {
    struct tally {
      std::size_t pending, wanted;
      std::size_t ours = 0;
      std::error_code first_error;
      done_handler done;
    };
    std::size_t wanted = 0;
    for (std::size_t g = 0; g < count; ++g) wanted += groups_[g].members.size();
    if (wanted == 0) {
      if (done) done({});
      return;
    }
    auto t = std::make_shared<tally>(tally{wanted, wanted, 0, {}, std::move(done)});
    for (std::size_t g = 0; g < count; ++g) {
      for (auto i : groups_[g].members) {
        auto keys = lock_release_keys(companions_[i]);
        auto count_answer = [t](std::error_code ec, reply r) {
          if (!ec && r.is_error()) ec = error_from_reply(r);
          if (ec && !t->first_error) t->first_error = ec;
          if (!ec && r.is_integer() && r.integer() == 1) ++t->ours;
          if (--t->pending > 0 || !t->done) return;
          if (t->first_error) return t->done(t->first_error);
          t->done(t->ours == t->wanted ? std::error_code() : std::error_code(errc::not_held));
        };
        // While the slot migrates, by the lock's key alone (slot_migration.hpp).
        run_script(node_, release_script, std::vector<std::string>(keys.begin(), keys.end()),
                   {token}, node_timeout_,
                   [node = node_, key = std::string(keys[0]), token, timeout = node_timeout_,
                    count_answer](std::error_code ec, reply r) {
                     if (!refused_while_migrating(r)) return count_answer(ec, std::move(r));
                     release_lock_key(node, key, token, timeout, count_answer);
                   });
      }
    }
  }

  // extend.lua on each key: the lease holds only while every key is still its own. A key that
  // answered "not ours" proves the loss, whatever another key's transport error says.
  void extend_keys(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                   const std::string& successor, done_handler handler) {
    if (auto refused = extend_refused(*state, ttl)) return handler(refused);
    struct tally {
      std::size_t pending;
      std::size_t ours = 0, theirs = 0;
      std::error_code first_error;
      done_handler done;
    };
    auto t = std::make_shared<tally>(tally{keys_.size(), 0, 0, {}, std::move(handler)});
    auto start = steady::now();
    auto until = start + ttl - drift_allowance(ttl, options_.drift_factor);
    std::string ttl_ms = std::to_string(ttl.count());
    for (const auto& k : keys_) {
      run_script(node_, extend_script, {k}, {state->token, ttl_ms, successor}, node_timeout_,
                 [self = shared_from_this(), state, t, until](std::error_code ec, reply r) {
                   if (!ec && r.is_error()) ec = error_from_reply(r);
                   if (ec && !t->first_error) t->first_error = ec;
                   if (!ec && r.is_integer()) ++(r.integer() == 1 ? t->ours : t->theirs);
                   if (--t->pending > 0) return;
                   std::error_code verdict;
                   if (t->theirs > 0) {
                     verdict = errc::lease_lost;
                   } else if (t->ours < self->keys_.size()) {
                     verdict = t->first_error ? t->first_error : errc::protocol_error;
                   } else if (state->validity_known && steady::now() >= state->deadline()) {
                     verdict = errc::lease_expired;  // landed after the validity: a gap
                   }
                   t->done(apply_extend(*self, *state, verdict, until));
                 });
    }
  }

  client node_;
  std::vector<std::string> keys_;
  std::vector<lock_keys> companions_;
  struct key_group {
    std::vector<std::size_t> members;      // indices into keys_, all in one slot
    std::vector<std::string> script_keys;  // acquire_all.lua's: key, fence, key, fence ...
  };
  std::vector<key_group> groups_;  // in the order they are taken
  std::string label_;
  lock_options options_;
  std::chrono::milliseconds node_timeout_{};
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
  return detail::wait<lease>(ec, [this](auto handler) {
    start_try_acquire(core_, std::move(handler));
  });
}

lease lock_set::acquire_until(clock::time_point deadline, std::error_code& ec) {
  return acquire_until(deadline, wait_control{}, ec);
}

lease lock_set::acquire_until(clock::time_point deadline, const wait_control& control,
                              std::error_code& ec) {
  return detail::wait<lease>(ec, [&](auto handler) {
    start_acquire(core_, deadline, control, std::move(handler));
  });
}

detail::io_executor lock_set::get_executor() const noexcept { return core_->get_executor(); }

void lock_set::start_try_acquire(const std::shared_ptr<detail::lock_set_core>& core,
                                 detail::unique_function<void(std::error_code, lease)> handler) {
  core->start_attempt([h = std::move(handler)](std::error_code ec, lease l, long long) mutable {
    h(ec, std::move(l));
  });
}

void lock_set::start_acquire(const std::shared_ptr<detail::lock_set_core>& core,
                             clock::time_point deadline, const wait_control& control,
                             detail::unique_function<void(std::error_code, lease)> handler,
                             std::stop_token cancel) {
  core->start_acquire(deadline, control, std::move(handler), std::move(cancel));
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
