// SPDX-License-Identifier: Apache-2.0
// lease_state.hpp: what every lease is made of, whatever granted it. Private.
//   lease_state  owner token, fence, validity, loss signal, released and let-go flags
//   lease_owner  what a lease asks of the thing that granted it (a lock, a semaphore):
//                release and extend, on the I/O thread
//   make_lease   builds the public dlock::lease
//   extend_refused / apply_extend  an extend's preconditions and the lease's update from its
//                verdict, shared by the lock and the semaphore
//   start_keep_alive / replan_keep_alive / stop_keep_alive  the watchdog's entry points
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "dlock/detail/async.hpp"
#include "dlock/error.hpp"
#include "dlock/lease.hpp"
#include "dlock/observer.hpp"
#include "dlock/options.hpp"

namespace dlock::detail {

using steady = std::chrono::steady_clock;
class keep_alive_task;

struct lease_state {
  // Made when the grant becomes a lease: the start of the hold (release_event::held).
  const steady::time_point granted_at = steady::now();
  std::string token;
  std::uint64_t fence = 0;
  std::atomic<steady::rep> valid_until{0};  // steady_clock ticks since its epoch
  std::stop_source lost;
  std::atomic<bool> released{false};  // the owner sent (or will send) the release: no renewals
  // The lease object gave this state up (release, detach) and reads as empty. The object keeps
  // its pointers until it is destroyed, so readers on other threads never see them change.
  std::atomic<bool> let_go{false};
  bool validity_known = true;  // false for adopted tokens: extend cannot judge a gap
  // The nodes the grant, then the last successful extend, wrote the token on (a lock's key
  // watch trusts a read there: lock_core::watch_changes); left empty for a single node's
  // grant, which held it or there would be no lease. Set before the lease is handed out, then
  // on the I/O thread only.
  std::vector<std::size_t> held_on;
  std::atomic<int> lost_reason{0};  // the errc that fired `lost`
  std::shared_ptr<keep_alive_task> keeper;  // touched on the I/O thread only
  // keep_alive() was called: only then has stop_keep_alive anything to stop (a release would
  // otherwise wake the I/O thread for nothing, a third of a blocking cycle's thread switches).
  std::atomic<bool> keep_alive_asked{false};

  // Records why and fires the loss signal (once; later calls change nothing). True for the
  // call that fired it. Use lose() below, which also reports it.
  bool mark_lost(errc reason) noexcept {
    int none = 0;
    lost_reason.compare_exchange_strong(none, static_cast<int>(reason));
    return lost.request_stop();
  }

  steady::time_point deadline() const noexcept {
    return steady::time_point(steady::duration(valid_until.load(std::memory_order_acquire)));
  }
  void set_deadline(steady::time_point t) noexcept {
    valid_until.store(t.time_since_epoch().count(), std::memory_order_release);
  }
};

class lease_owner {
 public:
  using done_handler = unique_function<void(std::error_code)>;
  virtual ~lease_owner() = default;

  virtual const std::string& key() const noexcept = 0;
  virtual primitive kind() const noexcept = 0;
  virtual std::chrono::milliseconds default_ttl() const noexcept = 0;
  virtual io_executor get_executor() const noexcept = 0;
  // Deletes the holder's entry where it is still this token's. not_held when none was.
  virtual void start_release(const std::shared_ptr<lease_state>& state, done_handler handler) = 0;
  // The same, blocking, on the calling thread, when the owner can do that without the I/O
  // thread (an idle connection); false when it sent nothing, and start_release must do it.
  virtual bool try_release_direct(const std::shared_ptr<lease_state>&, std::error_code&) {
    return false;
  }
  // Pushes the expiry out to at least `ttl` from now (never earlier: a late extend must not
  // cut back a later one); lease_lost (and lost() fired) when the entry is gone.
  virtual void start_extend(const std::shared_ptr<lease_state>& state,
                            std::chrono::milliseconds ttl, done_handler handler) = 0;
  // Sets the entry to expire exactly `ttl` from now under settled_token(state->token), so that
  // no extend or renewal still on its way for the old token can move that expiry
  // (lease::release_after). Same errors as start_extend.
  virtual void start_settle(const std::shared_ptr<lease_state>& state,
                            std::chrono::milliseconds ttl, done_handler handler) = 0;
  // On the I/O thread: calls `on_change` once, when the lease's key changes on a node by
  // another client's hand (deleted, overwritten), or at once when it no longer holds the
  // lease's token there (inbox::watch_key). One-shot: the watchdog watches again after each
  // renewal, since a renewal of ours ends the tracking. A lock's only; no-op elsewhere.
  virtual void watch_changes(const std::shared_ptr<lease_state>&, std::function<void()>) {}
  // Ends the watches of the lease whose token is `token`.
  virtual void forget_changes(const std::string& /*token*/) {}
  // The lease gave `state` up without a release (lease::detach), before it is marked released.
  virtual void on_detach(const std::shared_ptr<lease_state>&) {}
};

// Marks `state` lost (lease_state::mark_lost) and, the first time, tells the observer and the
// log sink (observe.hpp).
void lose(const lease_owner& owner, lease_state& state, errc reason) noexcept;

// Why an extend or settle of `state` to `ttl` must not start: not_held once released,
// lease_lost once lost, invalid_argument for a TTL outside 1 ms..max_ttl; else none.
inline std::error_code extend_refused(const lease_state& state, std::chrono::milliseconds ttl) {
  if (state.released.load()) return errc::not_held;
  if (state.lost.stop_requested()) return errc::lease_lost;
  if (ttl <= std::chrono::milliseconds::zero() || ttl > max_ttl) return errc::invalid_argument;
  return {};
}

// Applies what an extend came to (`verdict`: none, lease_lost, lease_expired or a transport
// error) to the lease: its new validity, or the loss it proves. Returns what the caller is
// told: a "not ours" after the lease was released is the release's doing (not_held), not a
// loss.
inline std::error_code apply_extend(const lease_owner& owner, lease_state& state,
                                    std::error_code verdict,
                                    std::chrono::steady_clock::time_point valid_until) {
  if (!verdict) {
    state.set_deadline(valid_until);
  } else if (verdict == errc::lease_lost && state.released.load()) {
    return errc::not_held;
  } else if (verdict == errc::lease_lost || verdict == errc::lease_expired) {
    lose(owner, state, static_cast<errc>(verdict.value()));
  }
  return verdict;
}

// After the replication guard confirmed an extend: a lease lost meanwhile stays lost, and one
// whose validity ran out meanwhile cannot be vouched for (the gap), as in quorum_extend.
inline std::error_code apply_guarded_extend(const lease_owner& owner, lease_state& state,
                                            std::chrono::steady_clock::time_point valid_until) {
  if (state.lost.stop_requested()) return errc::lease_lost;
  if (state.validity_known && std::chrono::steady_clock::now() >= state.deadline()) {
    return apply_extend(owner, state, errc::lease_expired, {});
  }
  return apply_extend(owner, state, {}, valid_until);
}

// How long the replication guard may take over an extend: no longer than the validity left.
inline std::chrono::steady_clock::time_point guard_deadline(const lease_state& state) {
  return state.validity_known ? state.deadline() : std::chrono::steady_clock::time_point::max();
}

// The token an entry takes when it is settled (start_settle): another value, so that requests
// for the old one find nothing. ':' is in no token or owner value.
inline std::string settled_token(const std::string& token) { return token + ":settled"; }

lease make_lease(std::shared_ptr<lease_owner> owner, std::shared_ptr<lease_state> state) noexcept;

// The watchdog (src/watchdog.cpp): starts or replaces the renewal of `state`, replans it after
// a manual extend (`deadline_moved`: it succeeded; either way the extend's writes ended the
// key's watch where they landed, so it watches again), and stops it. All may be called from
// any thread; the work happens on the I/O thread (replan_keep_alive's at once when called
// there).
void start_keep_alive(std::shared_ptr<lease_owner> owner, std::shared_ptr<lease_state> state,
                      keep_alive_options options);
void replan_keep_alive(const std::shared_ptr<lease_owner>& owner,
                       const std::shared_ptr<lease_state>& state, bool deadline_moved = true);
void stop_keep_alive(const std::shared_ptr<lease_owner>& owner,
                     const std::shared_ptr<lease_state>& state);

}  // namespace dlock::detail
