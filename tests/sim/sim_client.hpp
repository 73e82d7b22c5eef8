// SPDX-License-Identifier: Apache-2.0
// tests/sim/sim_client.hpp: one simulated client process running the library's own engine.
//   client_bug     deliberate mistakes, to prove the checker catches them
//   liveness_rule  when faults are over, and how long an unbounded waiter may then wait
//   client_stats   what the client did, for the report
//   sim_client     a loop of cycles on a lock, on a semaphore's permits (1..max_permits a
//                  cycle), or on a lock set (a random subset of a pool of names a cycle):
//                  acquire (try once, a few attempts, until a deadline, or without bound;
//                  sometimes stopped from outside, as a cancelled wait) with
//                  detail::acquisition, hold (sometimes past the TTL, sometimes kept alive:
//                  renewals planned by detail::keep_alive_schedule as the watchdog does, a
//                  lock's with detail::quorum_extend, a set's with detail::set_extend, a
//                  permit's with sem_refresh.lua as semaphore_core does), release
//                  (detail::quorum_release, detail::set_release; a permit: sem_release.lua as
//                  semaphore_core does) or abandon the lease, idle, again
// The client drives the engine as acquire_run does (the loop in algo/acquisition.hpp), with the
// sleeps and wake-ups of net/inbox.cpp's wake_waiter, and the engine sees only this client's
// clock. It
// reports grants, extends and the ends of its claims to the checker, and checks the pacing of
// its attempts and the liveness of its unbounded waits itself.
// Not thread-safe: part of one world.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algo/keep_alive_schedule.hpp"
#include "algo/lease_upkeep.hpp"
#include "sim_checker.hpp"
#include "sim_world.hpp"

namespace dlock::sim {

enum class client_bug {
  none,
  taken_as_granted,  // feeds the engine a grant where the node said "taken" (or "queued")
  double_validity,   // claims the lock (or permit) until valid_until + ttl
};

// The longest TTL a client's extend asks for (it picks half, once or twice the lock's TTL): a
// key may live that long, which the faults' assumptions and the liveness bound account for.
inline std::chrono::milliseconds longest_extend(std::chrono::milliseconds ttl) { return 2 * ttl; }

// How a client holds what it was granted: for how long (most holds end within the TTL, some
// outlast it, and those that outlast it most extend), whether it extends, and whether it
// abandons the holding instead of releasing it. Drawn in this order from the world's random.
struct hold_plan {
  sim_time hold = 0;
  bool extending = false;
  bool abandon = false;
};
hold_plan plan_hold(rng& random, std::chrono::milliseconds ttl);
// An extend's TTL: half, once or twice the lock's (lease::extend(ttl) allows any), so that an
// extend delayed in the network may land after a later one that asked for more.
std::chrono::milliseconds pick_extend(rng& random, std::chrono::milliseconds ttl);

struct liveness_rule {
  sim_time quiet_from = 0;     // no fault after this (true time)
  sim_time max_free_wait = 0;  // unclaimed time an unbounded waiter may see after quiet_from
  // After quiet_from a renewal's answer (two round trips at most: a NOSCRIPT reload) always
  // comes before the lease it renews runs out: the watchdog must then keep every lease.
  bool renewals_fit = false;
};

struct client_stats {
  std::uint64_t acquisitions = 0, grants = 0, handoffs = 0, failures = 0, stops = 0, attempts = 0,
                woken_attempts = 0, subscribed_attempts = 0, wakes = 0, extends = 0,
                lost_leases = 0, releases = 0, abandoned = 0;
  sim_time longest_free_wait = 0;  // the largest unclaimed wait of an unbounded acquisition
};

class sim_client {
 public:
  sim_client(world& w, checker& k, const detail::lock_target& target, std::size_t index, int cycles,
             liveness_rule liveness, client_bug bug = client_bug::none);
  // A semaphore's client (one node).
  sim_client(world& w, checker& k, const detail::semaphore_target& target, std::size_t index,
             int cycles, liveness_rule liveness, client_bug bug = client_bug::none);
  // A lock set's client: each cycle locks a random non-empty subset of `pool` (names' keys, at
  // least one), named in random order and sometimes twice, as lock_set normalizes them.
  sim_client(world& w, checker& k, std::vector<std::string> pool, const lock_options& options,
             std::chrono::milliseconds request_timeout, std::size_t index, int cycles,
             liveness_rule liveness, client_bug bug = client_bug::none);
  sim_client(const sim_client&) = delete;
  sim_client& operator=(const sim_client&) = delete;

  // Every acquisition waits without bound (lock()), for liveness repros.
  void set_unbounded_only(bool on) { unbounded_only_ = on; }
  // Semaphore: each acquisition asks for 1..n permits; or, `all_or_one`, for 1 (a reader) or
  // n (a writer) of a read-write lock.
  void set_max_permits(std::ptrdiff_t n, bool all_or_one = false) {
    max_permits_ = n;
    all_or_one_ = all_or_one;
  }
  // The lock keys a grant claims, for the checker (which may watch others): the lock's by
  // default, none for a semaphore's permits; a read-write lock's name, which a mutex of the
  // name locks too.
  void set_claimed_keys(std::vector<std::string> keys) { claimed_keys_ = std::move(keys); }
  void start(sim_time at);
  // From the world: a message on the client's wake channel, a lost subscription.
  void on_message(std::size_t node, std::string_view payload);
  void on_subscribed(std::size_t node);
  void on_subscription_lost(std::size_t node);

  bool done() const noexcept { return phase_ == phase::done; }
  // At the end of the run: a client that has not finished its cycles is stuck.
  void check_finished();
  const client_stats& stats() const noexcept { return stats_; }

 private:
  enum class phase { idle, acquiring, holding, releasing, done };
  enum class mode { try_once, bounded, deadline, unbounded };
  // Why an attempt begins: the first, the sleep ran out, a wake-up ended it, or an inbox
  // became subscribed while the last attempt could not queue everywhere (wake_waiter::sleep).
  enum class cause { first, backstop, woken, subscribed };

  steady::time_point now() const { return w_.clock(c_); }
  // The target's settings, whichever kind it is.
  std::size_t nodes() const { return lock_ ? lock_->nodes : 1; }
  std::chrono::milliseconds ttl() const {
    return lock_ ? lock_->ttl : sem_ ? sem_->ttl : set_options_.ttl;
  }
  std::chrono::milliseconds retry_delay() const {
    return lock_ ? lock_->retry_delay : sem_ ? sem_->retry_delay : set_options_.retry_delay;
  }
  // A lock set never queues: it polls.
  bool wake_on_release() const {
    return lock_ ? lock_->wake_on_release : sem_ && sem_->wake_on_release;
  }
  bool accepts_handoff() const {
    return lock_ ? lock_->accepts_handoff() : sem_ && sem_->accepts_handoff();
  }
  // A lock set's cycle: its names, and the target its engine and lease run on.
  const detail::lock_set_target& pick_set();
  void extend_set(std::chrono::milliseconds by);
  void extend_lock(std::chrono::milliseconds by);
  void refresh_permit(std::chrono::milliseconds by);
  // An extend's verdict, as lease_state's apply_extend takes it.
  void on_extend_verdict(std::error_code ec, steady::time_point valid_until);
  void next_cycle();
  void begin_attempt(cause why);
  void pump();
  void send_for_acquisition(detail::request r);
  void on_acquisition_reply(std::uint64_t cycle, std::uint64_t id, std::error_code ec, reply r);
  void go_to_sleep(steady::duration sleep);
  void wake();
  void stop_waiting();
  void finish_acquisition(const detail::acquisition::outcome& o);
  void hold(const std::string& token, std::uint64_t fence, steady::time_point valid_until);
  // Arms the watchdog's timer for its schedule's next wake-up (an earlier one is void).
  void arm_watchdog();
  void on_watchdog_timer();
  // The lease held is lost (its validity ran out, or a renewal found it not ours).
  void lose_lease(const std::string& why);
  void extend();
  void release();
  void release_permit();
  void release_set();
  void idle();
  std::string who() const { return "c" + std::to_string(c_); }

  world& w_;
  checker& check_;
  // One of the two: the requests point into its keys, so the client keeps its own copy.
  std::optional<detail::lock_target> lock_;
  std::optional<detail::semaphore_target> sem_;
  // A lock set's pool and options, and every cycle's target (an engine kept in engines_ may
  // still have requests out that point into its cycle's).
  std::vector<std::string> set_pool_;
  lock_options set_options_;
  std::chrono::milliseconds set_request_timeout_{};
  std::deque<detail::lock_set_target> set_targets_;
  const detail::lock_set_target* set_ = nullptr;
  std::ptrdiff_t max_permits_ = 1, permits_ = 1;  // a lock's: check_.key_permits()
  bool all_or_one_ = false;
  std::vector<std::string> claimed_keys_;
  std::size_t c_;
  int cycles_left_;
  liveness_rule liveness_;
  client_bug bug_;
  bool unbounded_only_ = false;
  client_stats stats_;
  phase phase_ = phase::idle;
  std::uint64_t cycle_ = 0;  // events and replies of an earlier cycle are ignored

  // The acquisition under way (kept after it is done: its leftovers still get answers).
  // The current cycle's engine. Every cycle's stays (engines_), as acquire_run keeps its own
  // while requests are out: their NOSCRIPT fallbacks ask it (acquisition::gate()).
  std::deque<detail::acquisition> engines_;
  detail::acquisition* acq_ = nullptr;
  mode mode_ = mode::try_once;
  sim_time acquire_began_ = 0;
  bool in_attempt_ = false, sleeping_ = false, wake_pending_ = false;
  bool queued_everywhere_ = false;  // the last attempt had a channel for every node
  bool stopped_ = false;            // stop() was called
  std::uint64_t sleep_id_ = 0;
  steady::time_point deadline_{};
  // After a sleep, no attempt that sends anything before this (client clock).
  steady::time_point next_attempt_floor_{};
  std::vector<std::uint64_t> attempt_requests_;         // the current attempt's acquire requests
  std::optional<std::int64_t> shortest_holder_ttl_ms_;  // among its "taken" answers
  std::uint64_t wakes_unused_ = 0;       // wake-ups received and not yet turned into an attempt
  std::int64_t fake_fence_ = 1'000'000;  // client_bug::taken_as_granted's fences

  // The lease held.
  std::string token_;
  steady::time_point valid_until_{};  // the engine's word
  sim_time granted_at_ = 0;           // true time
  steady::time_point hold_until_{};
  bool extending_ = false, abandon_ = false;
  std::optional<detail::quorum_extend> extend_;
  std::optional<detail::set_extend> set_extend_;
  std::uint64_t extend_serial_ = 0;  // which extend extend_ is
  std::optional<detail::keep_alive_schedule> watchdog_;
  std::uint64_t watchdog_timer_ = 0;  // which arm_watchdog the pending timer event is
  std::optional<detail::quorum_release> release_;
  std::optional<detail::set_release> set_release_;
  std::uint64_t release_serial_ = 0;  // semaphore: which release the answer is for
};

}  // namespace dlock::sim
