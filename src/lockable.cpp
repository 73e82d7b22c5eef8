// SPDX-License-Identifier: Apache-2.0
// The per-thread bookkeeping of the Lockable facades (lockable.hpp). Leases leave the map under
// the mutex and are released after it is unlocked: a release is a round trip, and other threads'
// calls must not wait for it.
#include "lockable.hpp"

#include <chrono>
#include <utility>

namespace dlock::detail {
namespace {

// not_held for an empty lease; else the release's result, where "not ours" becomes lease_lost
// or lease_expired when the lease was lost or ran out before. Judged before the release: once
// it has run, "not ours" could not tell a lease that ran out (another owner may have held the
// lock meanwhile) from one released twice.
std::error_code release_for_unlock(lease& held) noexcept {
  if (!held) return errc::not_held;
  bool lost = held.lost().stop_requested();
  bool expired = held.remaining() == std::chrono::milliseconds::zero();
  std::error_code ec = held.release();
  if (ec == errc::not_held && lost) ec = errc::lease_lost;
  if (ec == errc::not_held && expired) ec = errc::lease_expired;
  return ec;
}

}  // namespace

void lockable_holdings::remember(lease l, std::error_code ec, node_results results,
                                 bool shared) noexcept {
  lease replaced;  // released outside the lock (it may block)
  std::vector<lease> replaced_nested;
  {
    std::lock_guard guard(mutex_);
    auto& mine = by_thread_[std::this_thread::get_id()];
    if (l && mine.held && l.value() == mine.held.value()) {
      mine.nested.push_back(std::move(l));
    } else if (l) {
      replaced = std::exchange(mine.held, std::move(l));
      replaced_nested = std::move(mine.nested);
      mine.nested.clear();
      mine.shared = shared;
    }
    mine.last_error = ec;
    mine.last_results = std::move(results);
  }
}

bool lockable_holdings::holds_nothing() {
  std::lock_guard guard(mutex_);
  auto& mine = by_thread_[std::this_thread::get_id()];
  if (!mine.held) return true;
  mine.last_error = errc::invalid_argument;
  return false;
}

void lockable_holdings::unlock(bool shared) noexcept {
  lease held;
  {
    std::lock_guard guard(mutex_);
    auto mine = by_thread_.find(std::this_thread::get_id());
    if (mine != by_thread_.end() && !mine->second.nested.empty()) {
      held = std::move(mine->second.nested.back());
      mine->second.nested.pop_back();
    } else if (mine != by_thread_.end() && mine->second.held && mine->second.shared == shared) {
      held = std::move(mine->second.held);
    }
  }
  std::error_code ec = release_for_unlock(held);
  std::lock_guard guard(mutex_);
  by_thread_[std::this_thread::get_id()].last_error = ec;
}

const lease* lockable_holdings::current() const noexcept {
  std::lock_guard guard(mutex_);
  auto mine = by_thread_.find(std::this_thread::get_id());
  return mine != by_thread_.end() && mine->second.held ? &mine->second.held : nullptr;
}

std::error_code lockable_holdings::last_error() const noexcept {
  std::lock_guard guard(mutex_);
  auto mine = by_thread_.find(std::this_thread::get_id());
  return mine != by_thread_.end() ? mine->second.last_error : std::error_code();
}

node_results lockable_holdings::last_results() const {
  std::lock_guard guard(mutex_);
  auto mine = by_thread_.find(std::this_thread::get_id());
  return mine != by_thread_.end() ? mine->second.last_results : node_results();
}

}  // namespace dlock::detail
