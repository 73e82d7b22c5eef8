// SPDX-License-Identifier: Apache-2.0
// algo/keep_alive_schedule.hpp: when the watchdog renews a lease, and when it gives it up.
//   keep_alive_schedule  the renewal plan of one kept-alive lease, fed the events that move it
// Sans-io: every input carries the time it happened and the lease's validity then; the caller
// owns the timer (wake_at) and sends the renewal (step::renew). The watchdog (src/watchdog.cpp)
// drives it with the steady clock and an Asio timer, the simulator with its virtual clock, so
// the same schedule is explored by both. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>

namespace dlock::detail {

class keep_alive_schedule {
 public:
  using steady = std::chrono::steady_clock;

  struct settings {
    std::chrono::milliseconds interval{};  // between renewals; 0: a third of default_ttl
    std::chrono::milliseconds max_hold{};  // no renewal this long after start (0: no cap)
    int max_renewals = 0;                  // no renewal after this many successful ones (0: none)
    std::chrono::milliseconds default_ttl{};  // what each renewal sets
  };

  // What the caller does now.
  //   wait     arm the timer for wake_at()
  //   renew    send a renewal for default_ttl, then arm the timer for wake_at()
  //   expired  the validity ran out without a successful renewal: the lease is lost
  enum class step { wait, renew, expired };

  // `seed`: the jitter's random sequence (the simulator replays seeds).
  keep_alive_schedule(settings s, std::uint64_t seed) noexcept;

  void start(steady::time_point now, steady::time_point valid_until) noexcept;
  // The timer fired.
  step on_timer(steady::time_point now, steady::time_point valid_until) noexcept;
  // Another client changed the key (client-side caching), or the watch was lost with its
  // connection: check it with a renewal at once, but at most two such renewals per quarter
  // interval, whatever reports changes (two: a lost watch's check must not put off the check
  // of a takeover right after it).
  step on_key_changed(steady::time_point now) noexcept;
  // The renewal in flight ended; `valid_until` is the validity after it.
  void on_renewed(steady::time_point now, steady::time_point valid_until, bool succeeded) noexcept;
  // A manual extend moved the validity: plan the next renewal from it.
  void replan(steady::time_point now, steady::time_point valid_until) noexcept;

  // When the timer must fire next: the next renewal, or the end of validity if sooner (or if
  // no renewal is planned: one in flight, or past a cap).
  steady::time_point wake_at(steady::time_point now, steady::time_point valid_until) const noexcept;
  bool renewing() const noexcept { return in_flight_; }
  // The renewal in flight: how late it was sent against its plan.
  steady::duration lag() const noexcept { return lag_; }
  const settings& plan_settings() const noexcept { return settings_; }

 private:
  steady::duration jittered(std::chrono::milliseconds interval) noexcept;
  bool may_renew(steady::time_point now) const noexcept;
  step renew(steady::time_point now) noexcept;

  settings settings_;
  std::uint64_t random_state_;
  steady::time_point started_{}, next_renewal_{};
  // The last two renewals reported changes set off, the earlier first.
  steady::time_point checks_[2]{};
  // Counts a check at `at`; the pace allows the next one from the earlier of the two on.
  void note_check(steady::time_point at) noexcept;
  steady::time_point next_check_allowed() const noexcept;
  steady::duration lag_{};
  int renewals_ = 0;
  bool recheck_ = false;  // a change was reported while a renewal was in flight
  bool in_flight_ = false;
};

}  // namespace dlock::detail
