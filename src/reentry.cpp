// SPDX-License-Identifier: Apache-2.0
// Reentrancy (reentry.hpp). A holding is the lock's own lease, taken apart into its owner (the
// lock_core) and state, plus a count of the nested leases on it. Each nested lease has a
// lease_state of its own, so that it can be let go on its own, and a reentry_hold as its
// lease_owner, which passes extends, settles and the last release on to the lock's lease and
// copies what they decide (validity) onto every nested state. A loss, however it is found (an
// extend, the watchdog's timer, the key's watch), fires on the lock's state and on every
// nested one (stop callbacks). One mutex guards the registry and every holding's count:
// re-entry is rare and short.
#include "reentry.hpp"

#include <algorithm>
#include <functional>
#include <mutex>
#include <stop_token>
#include <unordered_map>

#include "lease_state.hpp"

namespace dlock::detail {
namespace {

class reentry_hold;

std::mutex registry_mutex;
std::unordered_map<std::string, std::weak_ptr<reentry_hold>>& registry() {
  static std::unordered_map<std::string, std::weak_ptr<reentry_hold>> holds;
  return holds;
}

using loss_callback = std::stop_callback<std::function<void()>>;

class reentry_hold final : public lease_owner,
                           public std::enable_shared_from_this<reentry_hold> {
 public:
  reentry_hold(std::string slot, std::shared_ptr<lease_owner> lock,
               std::shared_ptr<lease_state> held)
      : slot_(std::move(slot)), lock_(std::move(lock)), held_(std::move(held)) {}

  // After construction (it needs shared_from_this), outside registry_mutex: a loss of the
  // lock's own state reaches every nested lease.
  void watch_lock_state() { on_loss(*held_); }

  // Under registry_mutex: a new nested lease's state, or null when the holding is over, being
  // let go, or no longer valid.
  std::shared_ptr<lease_state> enter_locked() {
    if (count_ == 0 || closing_ || held_->released.load() || held_->lost.stop_requested() ||
        held_->deadline() <= steady::now()) {
      return nullptr;
    }
    ++count_;
    return nested_state();
  }
  std::shared_ptr<lease_state> first_locked() {
    count_ = 1;
    return nested_state();
  }

  const std::string& key() const noexcept override { return lock_->key(); }
  primitive kind() const noexcept override { return lock_->kind(); }
  std::chrono::milliseconds default_ttl() const noexcept override { return lock_->default_ttl(); }
  io_executor get_executor() const noexcept override { return lock_->get_executor(); }

  void start_release(const std::shared_ptr<lease_state>& state, done_handler handler) override {
    switch (leave(*state)) {
      case left::already: return handler(errc::not_held);
      case left::others_hold: return handler(inner_verdict());  // the outer ones keep it
      case left::last: return lock_->start_release(held_, std::move(handler));
    }
  }
  // Only a nested release that leaves others holding is done here (it sends nothing); the last
  // one goes through start_release, which may block.
  bool try_release_direct(const std::shared_ptr<lease_state>& state,
                          std::error_code& ec) override {
    {
      std::lock_guard guard(registry_mutex);
      if (count_ <= 1 || state->released.load()) return false;
      state->released.store(true);
      --count_;
    }
    ec = inner_verdict();
    return true;
  }
  void start_extend(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override {
    if (auto refused = extend_refused(*state, ttl)) return handler(refused);
    lock_->start_extend(held_, ttl, copy_back(std::move(handler)));
  }
  // release_after: the last lease settles the lock, and counts out only once that succeeded
  // (a failed settle is followed by a release, which must still find it counted in); no one
  // re-enters meanwhile. An inner one only leaves: the lock stays held by the outer ones, and
  // its expiry is theirs to decide.
  void start_settle(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override {
    if (auto refused = extend_refused(*state, ttl)) return handler(refused);
    enum class step { already, others_hold, settle } what;
    {
      std::lock_guard guard(registry_mutex);  // one decision: nobody leaves in between
      if (state->released.load()) {
        what = step::already;
      } else if (count_ <= 1) {
        closing_ = true;
        what = step::settle;
      } else {
        state->released.store(true);
        --count_;
        what = step::others_hold;
      }
    }
    if (what == step::already) return handler(errc::not_held);
    if (what == step::others_hold) return handler(inner_verdict());
    lock_->start_settle(held_, ttl,
                        [self = shared_from_this(), state,
                         handler = std::move(handler)](std::error_code ec) mutable {
                          if (!ec) (void)self->leave(*state);
                          handler(ec);
                        });
  }
  void watch_changes(const std::shared_ptr<lease_state>&, std::function<void()> on_change) override {
    lock_->watch_changes(held_, std::move(on_change));
  }
  // The watch is the holding's (one token, one watch, whichever nested keeper set it last): it
  // is forgotten only once the holding is over. Until then a stopping keeper leaves it be; the
  // key's deletion at the release ends it anyway.
  void forget_changes(const std::string& token) override {
    {
      std::lock_guard guard(registry_mutex);
      if (count_ > 0) return;
    }
    lock_->forget_changes(token);
  }
  // A detached nested lease leaves; the last one leaves the lock to expire (detach's promise).
  void on_detach(const std::shared_ptr<lease_state>& state) override {
    if (leave(*state) == left::last) held_->released.store(true);
  }

 private:
  enum class left { already, others_hold, last };

  // Counts `state` out, once. The last one out takes the holding out of the registry, so that
  // the owner's next acquisition goes to Redis.
  left leave(lease_state& state) {
    std::lock_guard guard(registry_mutex);
    if (state.released.exchange(true)) return left::already;
    if (--count_ > 0) return left::others_hold;
    auto it = registry().find(slot_);
    if (it != registry().end() && it->second.lock().get() == this) registry().erase(it);
    return left::last;
  }

  // What an inner lease's release reports: it deleted nothing, and the holding it was part of
  // may have been lost meanwhile, which its critical section must hear of.
  std::error_code inner_verdict() const {
    if (held_->lost.stop_requested()) return errc::lease_lost;
    if (held_->validity_known && held_->deadline() <= steady::now()) return errc::lease_expired;
    return {};
  }

  // Under registry_mutex.
  std::shared_ptr<lease_state> nested_state() {
    auto s = std::make_shared<lease_state>();
    s->token = held_->token;
    s->fence = held_->fence;
    s->validity_known = held_->validity_known;
    s->set_deadline(held_->deadline());
    nested_.erase(std::remove_if(nested_.begin(), nested_.end(),
                                 [](const auto& n) { return n.state.expired(); }),
                  nested_.end());
    nested_.push_back({s, nullptr});
    nested_.back().on_loss = make_loss_callback(*s);  // a fresh state: it cannot fire here
    return s;
  }

  std::unique_ptr<loss_callback> make_loss_callback(lease_state& state) {
    std::weak_ptr<reentry_hold> weak = weak_from_this();
    auto* source = &state;
    return std::make_unique<loss_callback>(state.lost.get_token(),
                                           std::function<void()>([weak, source] {
                                             if (auto self = weak.lock()) {
                                               self->spread_loss(*source);
                                             }
                                           }));
  }
  void on_loss(lease_state& state) {
    auto callback = make_loss_callback(state);
    std::lock_guard guard(registry_mutex);
    lock_loss_ = std::move(callback);
  }

  // A loss of any state of the holding is the holding's: it fires on all of them, with the
  // first one's reason (lose() fires each only once, which ends the recursion).
  void spread_loss(const lease_state& from) {
    auto reason = static_cast<errc>(from.lost_reason.load());
    std::vector<std::shared_ptr<lease_state>> states;
    {
      std::lock_guard guard(registry_mutex);
      for (const auto& n : nested_) {
        if (auto s = n.state.lock()) states.push_back(std::move(s));
      }
    }
    lose(*lock_, *held_, reason);
    for (const auto& s : states) lose(*this, *s, reason);
  }

  // An extend's new validity, onto every nested lease (a loss reaches them through
  // spread_loss); their renewals are planned anew from it.
  done_handler copy_back(done_handler handler) {
    return [self = shared_from_this(), handler = std::move(handler)](std::error_code ec) mutable {
      if (!ec) {
        std::vector<std::shared_ptr<lease_state>> states;
        {
          std::lock_guard guard(registry_mutex);
          for (const auto& n : self->nested_) {
            if (auto s = n.state.lock()) states.push_back(std::move(s));
          }
        }
        for (const auto& s : states) {
          s->set_deadline(self->held_->deadline());
          if (s->keep_alive_asked.load()) replan_keep_alive(self, s);
        }
      }
      handler(ec);
    };
  }

  struct nested_lease {
    std::weak_ptr<lease_state> state;
    std::unique_ptr<loss_callback> on_loss;
  };

  std::string slot_;
  std::shared_ptr<lease_owner> lock_;
  std::shared_ptr<lease_state> held_;
  int count_ = 0;                          // under registry_mutex
  bool closing_ = false;                   // under registry_mutex: the last lease settles
  std::vector<nested_lease> nested_;       // under registry_mutex
  std::unique_ptr<loss_callback> lock_loss_;  // under registry_mutex
};

void append_part(std::string& out, const std::string& part) {
  out += std::to_string(part.size());
  out += ':';
  out += part;
}

}  // namespace

std::string reentry_slot(const std::vector<std::string>& lock, const std::string& owner) {
  std::string slot;
  append_part(slot, owner);
  for (const auto& part : lock) append_part(slot, part);
  return slot;
}

lease reentry_enter(const std::string& slot) {
  std::shared_ptr<reentry_hold> hold;
  std::shared_ptr<lease_state> state;
  {
    std::lock_guard guard(registry_mutex);
    auto it = registry().find(slot);
    if (it == registry().end()) return {};
    hold = it->second.lock();
    if (hold) state = hold->enter_locked();
  }
  if (!state) return {};
  return make_lease(std::move(hold), std::move(state));
}

lease reentry_hold_first(const std::string& slot, lease granted) {
  if (!granted) return granted;
  std::shared_ptr<lease_owner> lock;
  std::shared_ptr<lease_state> held;
  split_lease(granted, lock, held);
  auto hold = std::make_shared<reentry_hold>(slot, std::move(lock), std::move(held));
  std::shared_ptr<lease_state> first;
  {
    std::lock_guard guard(registry_mutex);
    registry()[slot] = hold;  // an earlier holding there is over (its lease ran out)
    first = hold->first_locked();
  }
  hold->watch_lock_state();  // outside the mutex: a loss already fired runs it at once
  return make_lease(std::move(hold), std::move(first));
}

}  // namespace dlock::detail
