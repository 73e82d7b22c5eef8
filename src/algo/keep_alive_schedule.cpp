// SPDX-License-Identifier: Apache-2.0
// The renewal plan of one kept-alive lease.
//
// The next renewal comes after the interval (+-10 %, so that leases taken together spread
// their renewals), or after half the validity left when that is sooner, so that a lease kept
// alive late, or shortened by a manual extend, still has time for a renewal and a retry before
// it runs out. A failed renewal is tried again after a quarter interval. Reaching the end of
// validity without a successful renewal means the lease can no longer be trusted, whatever the
// servers say later: step::expired. Past a cap (max_hold, max_renewals) nothing is renewed any
// more; the lease ends at its validity, as it would have.
#include "algo/keep_alive_schedule.hpp"

#include <algorithm>
#include <utility>

#include "algo/retry.hpp"

namespace dlock::detail {
namespace {

using steady = keep_alive_schedule::steady;

// `after` from now, or half the validity left if that is sooner.
steady::time_point plan(steady::time_point now, steady::duration after,
                        steady::time_point valid_until) {
  return now + std::min(after, (valid_until - now) / 2);
}

}  // namespace

keep_alive_schedule::keep_alive_schedule(settings s, std::uint64_t seed) noexcept
    : settings_(s), random_state_(seed) {
  if (settings_.interval.count() <= 0) settings_.interval = settings_.default_ttl / 3;
  if (settings_.interval.count() <= 0) settings_.interval = std::chrono::milliseconds(1);
}

void keep_alive_schedule::start(steady::time_point now, steady::time_point valid_until) noexcept {
  started_ = now;
  next_renewal_ = plan(now, jittered(settings_.interval), valid_until);
}

steady::duration keep_alive_schedule::jittered(std::chrono::milliseconds interval) noexcept {
  auto r = static_cast<double>(next_random(random_state_) % 2001) / 10000.0;  // 0 .. 0.2
  return std::chrono::duration_cast<steady::duration>(interval * (0.9 + r));
}

bool keep_alive_schedule::may_renew(steady::time_point now) const noexcept {
  if (settings_.max_hold.count() > 0 && now - started_ >= settings_.max_hold) return false;
  if (settings_.max_renewals > 0 && renewals_ >= settings_.max_renewals) return false;
  return true;
}

steady::time_point keep_alive_schedule::wake_at(steady::time_point now,
                                                steady::time_point valid_until) const noexcept {
  if (!in_flight_ && may_renew(now)) return std::min(valid_until, next_renewal_);
  return valid_until;
}

keep_alive_schedule::step keep_alive_schedule::renew(steady::time_point now) noexcept {
  in_flight_ = true;
  lag_ = now - next_renewal_;
  return step::renew;
}

keep_alive_schedule::step keep_alive_schedule::on_timer(steady::time_point now,
                                                        steady::time_point valid_until) noexcept {
  if (now >= valid_until) return step::expired;
  if (!in_flight_ && may_renew(now) && now >= next_renewal_) return renew(now);
  return step::wait;
}

keep_alive_schedule::step keep_alive_schedule::on_key_changed(steady::time_point now) noexcept {
  if (in_flight_) {
    recheck_ = true;  // the renewal on its way may have run before the change
    return step::wait;
  }
  if (!may_renew(now)) return step::wait;
  auto earliest = next_check_allowed();
  if (now < earliest) {
    next_renewal_ = std::min(next_renewal_, earliest);
    return step::wait;
  }
  note_check(now);
  next_renewal_ = now;  // a renewal due now: its lag is 0
  return renew(now);
}

void keep_alive_schedule::note_check(steady::time_point at) noexcept {
  checks_[0] = checks_[1];
  checks_[1] = at;
}

steady::time_point keep_alive_schedule::next_check_allowed() const noexcept {
  return checks_[0] + settings_.interval / 4;
}

void keep_alive_schedule::on_renewed(steady::time_point now, steady::time_point valid_until,
                                     bool succeeded) noexcept {
  in_flight_ = false;
  if (succeeded) ++renewals_;
  steady::duration after = succeeded ? jittered(settings_.interval)
                                     : steady::duration(settings_.interval / 4);
  // A change reported while this renewal was out is checked by another one, as soon as
  // on_key_changed's pace allows.
  if (std::exchange(recheck_, false) && succeeded) {
    after = std::max(steady::duration::zero(), next_check_allowed() - now);
    note_check(now + after);
  }
  next_renewal_ = plan(now, after, valid_until);
}

void keep_alive_schedule::replan(steady::time_point now, steady::time_point valid_until) noexcept {
  next_renewal_ = plan(now, jittered(settings_.interval), valid_until);
}

}  // namespace dlock::detail
