// SPDX-License-Identifier: Apache-2.0
#include "dlock/lease.hpp"

#include "lease_state.hpp"
#include "net/runtime.hpp"
#include "observe.hpp"

namespace dlock {
namespace {

// Granted, and not given up by release() or detach(): a let-go lease reads as empty.
bool held(const std::shared_ptr<detail::lease_state>& state) noexcept {
  return state && !state->let_go.load();
}

// Tells the observer how a release ended.
void report_release(const detail::lease_owner& owner, const detail::lease_state& state,
                    std::error_code ec) noexcept {
  if (auto* o = detail::current_observer()) {
    release_event e{owner.key(), owner.kind(), ec};
    if (state.validity_known) e.held = std::chrono::steady_clock::now() - state.granted_at;
    o->on_release(e);
  }
}

// Starts the owner's release without waiting. The completion keeps the owner and the state
// alive until the script answered, so the lease, the mutex and the client may all be gone by
// then.
void start_release_detached(std::shared_ptr<detail::lease_owner> owner,
                            std::shared_ptr<detail::lease_state> state,
                            detail::unique_function<void(std::error_code)> handler) {
  detail::stop_keep_alive(owner, state);
  auto& core = *owner;
  core.start_release(state, [owner = std::move(owner), state, h = std::move(handler)](
                                std::error_code ec) mutable {
    report_release(*owner, *state, ec);
    h(ec);
  });
}

}  // namespace

void detail::lose(const lease_owner& owner, lease_state& state, errc reason) noexcept {
  if (!state.mark_lost(reason)) return;
  if (logging()) {
    log(log_level::error, std::string(to_string(owner.kind())) + " '" + owner.key() +
                              "': lease lost (" + std::string(to_string(reason)) + ")");
  }
  if (auto* o = current_observer()) o->on_lease_lost({owner.key(), owner.kind(), reason});
}

lease::lease(std::shared_ptr<detail::lease_owner> owner,
             std::shared_ptr<detail::lease_state> state) noexcept
    : owner_(std::move(owner)), state_(std::move(state)) {}

lease detail::make_lease(std::shared_ptr<lease_owner> owner,
                         std::shared_ptr<lease_state> state) noexcept {
  return lease(std::move(owner), std::move(state));
}

void detail::split_lease(lease& l, std::shared_ptr<lease_owner>& owner,
                         std::shared_ptr<lease_state>& state) noexcept {
  owner = std::move(l.owner_);
  state = std::move(l.state_);
}

lease& lease::operator=(lease&& other) noexcept {
  if (this != &other) {
    (void)release();
    owner_ = std::move(other.owner_);
    state_ = std::move(other.state_);
  }
  return *this;
}

lease::~lease() { (void)release(); }

lease::operator bool() const noexcept { return held(state_); }

const std::string& lease::key() const noexcept {
  static const std::string none;
  return held(state_) ? owner_->key() : none;
}

const std::string& lease::value() const noexcept {
  static const std::string none;
  return held(state_) ? state_->token : none;
}

std::uint64_t lease::fencing_token() const noexcept { return held(state_) ? state_->fence : 0; }

std::chrono::steady_clock::time_point lease::valid_until() const noexcept {
  return held(state_) ? state_->deadline() : std::chrono::steady_clock::time_point{};
}

std::chrono::milliseconds lease::remaining() const noexcept {
  auto left = valid_until() - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return std::chrono::milliseconds::zero();
  return std::chrono::duration_cast<std::chrono::milliseconds>(left);
}

std::stop_token lease::lost() const noexcept {
  return held(state_) ? state_->lost.get_token() : std::stop_token{};
}

std::error_code lease::extend() noexcept {
  if (!held(state_)) return errc::not_held;
  return extend(owner_->default_ttl());
}

std::error_code lease::extend(std::chrono::milliseconds ttl) noexcept {
  if (!held(state_)) return errc::not_held;
  std::error_code ec;
  detail::wait<int>(ec, [&](auto handler) {
    start_extend(ttl, [h = std::move(handler)](std::error_code e) mutable { h(e, 0); });
  });
  return ec;
}

std::error_code lease::keep_alive(keep_alive_options options) noexcept {
  if (!held(state_)) return errc::not_held;
  detail::start_keep_alive(owner_, state_, std::move(options));
  return {};
}

// Marked let go first, and only once: a second release(), concurrent or later, finds it so and
// is the no-op an empty lease's is. The pointers stay, for readers on other threads.
std::error_code lease::release() noexcept {
  if (!state_ || state_->let_go.exchange(true)) return {};
  if (detail::on_io_thread()) {
    // Waiting here would deadlock the thread that must deliver the reply, and dropping the
    // lease unsent would leave the key for its whole TTL: send it, and let it finish alone.
    start_release_detached(owner_, state_, [](std::error_code) {});
    return errc::would_block_io_thread;
  }
  detail::stop_keep_alive(owner_, state_);
  std::error_code ec;
  if (!owner_->try_release_direct(state_, ec)) {
    detail::wait<int>(ec, [&](auto handler) {
      owner_->start_release(state_, [h = std::move(handler)](std::error_code e) mutable {
        h(e, 0);
      });
    });
  }
  report_release(*owner_, *state_, ec);
  return ec;
}

detail::io_executor lease::get_executor() const noexcept {
  return owner_ ? owner_->get_executor() : detail::runtime::shared().get_executor();
}

std::chrono::milliseconds lease::default_ttl() const noexcept {
  return owner_ ? owner_->default_ttl() : std::chrono::milliseconds::zero();
}

// What release() does, without the wait; the object also lets go of its pointers at once.
void lease::start_release(detail::unique_function<void(std::error_code)> handler) {
  if (!state_ || state_->let_go.exchange(true)) return handler(errc::not_held);
  start_release_detached(std::move(owner_), std::move(state_), std::move(handler));
}

void lease::start_extend(std::chrono::milliseconds ttl,
                         detail::unique_function<void(std::error_code)> handler) {
  if (!held(state_)) return handler(errc::not_held);
  owner_->start_extend(state_, ttl, [owner = owner_, state = state_, h = std::move(handler)](
                                        std::error_code ec) mutable {
    // The deadline moved, maybe earlier than the watchdog's next renewal: it plans anew. A
    // failed extend may still have landed on some nodes, which ended the watch there.
    if (!ec) {
      detail::replan_keep_alive(owner, state);
    } else if (!state->lost.stop_requested()) {
      detail::replan_keep_alive(owner, state, false);
    }
    h(ec);
  });
}

std::error_code lease::release_after(std::chrono::milliseconds ttl) noexcept {
  if (ttl <= std::chrono::milliseconds::zero()) return release();
  if (!held(state_)) return errc::not_held;
  if (detail::on_io_thread()) return errc::would_block_io_thread;
  // No renewal starts after this; one already on its way (even on a connection given up after
  // a timeout, so it may land after the settle) names the old token, which the settle replaces.
  detail::stop_keep_alive(owner_, state_);
  std::error_code ec;
  detail::wait<int>(ec, [&](auto handler) {
    owner_->start_settle(state_, ttl, [h = std::move(handler)](std::error_code e) mutable {
      h(e, 0);
    });
  });
  if (ec) {
    (void)release();
    return ec;
  }
  (void)detach();  // the key expires on its own now
  return {};
}

std::string lease::detach() noexcept {
  if (!state_ || state_->let_go.exchange(true)) return {};
  detail::stop_keep_alive(owner_, state_);
  owner_->on_detach(state_);
  state_->released.store(true);  // the owner neither renews nor releases it from now on
  return state_->token;
}

}  // namespace dlock
