// SPDX-License-Identifier: Apache-2.0
// The watchdog's renewal plan (algo/keep_alive_schedule), on a clock the tests move.
#include "algo/keep_alive_schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using detail::keep_alive_schedule;
using step = keep_alive_schedule::step;
using steady = keep_alive_schedule::steady;

const steady::time_point t0 = steady::time_point{} + 1h;

keep_alive_schedule make(std::chrono::milliseconds interval, std::chrono::milliseconds ttl,
                         std::uint64_t seed = 1, std::chrono::milliseconds max_hold = {},
                         int max_renewals = 0) {
  return keep_alive_schedule({interval, max_hold, max_renewals, ttl}, seed);
}

// Runs the timer until the schedule asks for something other than waiting.
step run_until_action(keep_alive_schedule& s, steady::time_point& now,
                      steady::time_point valid_until) {
  for (int i = 0; i < 100; ++i) {
    now = std::max(now, s.wake_at(now, valid_until));  // a time already past fires at once
    if (auto st = s.on_timer(now, valid_until); st != step::wait) return st;
  }
  ADD_FAILURE() << "the schedule never acted";
  return step::wait;
}

TEST(KeepAliveScheduleTest, RenewalsComeEveryIntervalWithinTenPercent) {
  auto s = make(100ms, 300ms);
  auto now = t0;
  auto valid_until = now + 300ms;
  s.start(now, valid_until);
  for (int i = 0; i < 20; ++i) {
    auto before = now;
    ASSERT_EQ(run_until_action(s, now, valid_until), step::renew);
    EXPECT_GE(now - before, 90ms);
    EXPECT_LE(now - before, 110ms);
    EXPECT_TRUE(s.renewing());
    now += 2ms;  // the renewal's round trip
    valid_until = now + 300ms;
    s.on_renewed(now, valid_until, true);
    EXPECT_FALSE(s.renewing());
  }
}

TEST(KeepAliveScheduleTest, AnIntervalOfZeroIsAThirdOfTheTtl) {
  auto s = make(0ms, 300ms);
  s.start(t0, t0 + 300ms);
  auto wake = s.wake_at(t0, t0 + 300ms);
  EXPECT_GE(wake - t0, 90ms);
  EXPECT_LE(wake - t0, 110ms);
}

// A lease kept alive late, or shortened, still gets a renewal and a retry before it runs out.
TEST(KeepAliveScheduleTest, ALeaseWithLittleLeftIsRenewedAtHalfOfIt) {
  auto s = make(1000ms, 3000ms);
  s.start(t0, t0 + 60ms);
  EXPECT_EQ(s.wake_at(t0, t0 + 60ms), t0 + 30ms);
  // A manual extend that shortened it replans from the new validity.
  auto s2 = make(1000ms, 3000ms);
  s2.start(t0, t0 + 3000ms);
  s2.replan(t0 + 10ms, t0 + 110ms);
  EXPECT_EQ(s2.wake_at(t0 + 10ms, t0 + 110ms), t0 + 60ms);
}

TEST(KeepAliveScheduleTest, FailedRenewalsAreRetriedUntilTheValidityEndsThenItExpires) {
  auto s = make(100ms, 300ms);
  auto now = t0;
  const auto valid_until = now + 300ms;  // no renewal succeeds: it never moves
  s.start(now, valid_until);
  int renewals = 0;
  for (;;) {
    auto st = run_until_action(s, now, valid_until);
    if (st == step::expired) break;
    ASSERT_EQ(st, step::renew);
    ++renewals;
    now += 1ms;
    s.on_renewed(now, valid_until, false);
  }
  // At the end of validity, or at the answer of the last renewal sent before it (1 ms).
  EXPECT_GE(now, valid_until);
  EXPECT_LE(now, valid_until + 1ms);
  // One after the interval, then every quarter interval (or half of what is left).
  EXPECT_GE(renewals, 4);
}

TEST(KeepAliveScheduleTest, TheTimerWaitsForTheValidityWhileARenewalIsInFlight) {
  auto s = make(100ms, 300ms);
  auto now = t0;
  s.start(now, now + 300ms);
  ASSERT_EQ(run_until_action(s, now, t0 + 300ms), step::renew);
  EXPECT_EQ(s.wake_at(now, t0 + 300ms), t0 + 300ms);
  EXPECT_EQ(s.on_timer(now + 50ms, t0 + 300ms), step::wait);
  EXPECT_EQ(s.on_timer(t0 + 300ms, t0 + 300ms), step::expired);
}

TEST(KeepAliveScheduleTest, NoRenewalPastMaxRenewals) {
  auto s = make(100ms, 300ms, 1, {}, 2);
  auto now = t0;
  auto valid_until = now + 300ms;
  s.start(now, valid_until);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(run_until_action(s, now, valid_until), step::renew);
    valid_until = now + 300ms;
    s.on_renewed(now, valid_until, true);
  }
  EXPECT_EQ(s.wake_at(now, valid_until), valid_until);
  EXPECT_EQ(s.on_key_changed(now + 50ms), step::wait);
  EXPECT_EQ(run_until_action(s, now, valid_until), step::expired);
}

TEST(KeepAliveScheduleTest, NoRenewalPastMaxHold) {
  auto s = make(100ms, 300ms, 1, 150ms);
  auto now = t0;
  auto valid_until = now + 300ms;
  s.start(now, valid_until);
  ASSERT_EQ(run_until_action(s, now, valid_until), step::renew);  // about 100 ms in
  valid_until = now + 300ms;
  s.on_renewed(now, valid_until, true);
  EXPECT_EQ(run_until_action(s, now, valid_until), step::expired);
  EXPECT_EQ(now, valid_until);
}

// A change by another client is checked with a renewal at once, but reports never turn into
// a stream of renewals: at most two per quarter interval (a lost watch's check, then a
// takeover's right after it, both at once).
TEST(KeepAliveScheduleTest, AReportedChangeRenewsAtOnceAtMostTwicePerQuarterInterval) {
  auto s = make(100ms, 300ms);
  auto valid_until = t0 + 300ms;
  s.start(t0, valid_until);
  auto now = t0 + 40ms;
  ASSERT_EQ(s.on_key_changed(now), step::renew);
  EXPECT_EQ(s.lag(), 0ms);
  s.on_renewed(now + 1ms, valid_until = now + 301ms, true);
  now += 5ms;
  ASSERT_EQ(s.on_key_changed(now), step::renew) << "the second check in the window: at once";
  s.on_renewed(now + 1ms, valid_until = now + 301ms, true);
  now += 5ms;
  EXPECT_EQ(s.on_key_changed(now), step::wait) << "a third is paced";
  EXPECT_EQ(s.wake_at(now, valid_until), t0 + 40ms + 25ms) << "a quarter on from the first";
  EXPECT_EQ(s.on_timer(t0 + 65ms, valid_until), step::renew);
}

TEST(KeepAliveScheduleTest, AChangeReportedDuringARenewalIsCheckedByAnotherOne) {
  auto s = make(100ms, 300ms);
  auto valid_until = t0 + 300ms;
  s.start(t0, valid_until);
  auto now = t0;
  ASSERT_EQ(run_until_action(s, now, valid_until), step::renew);
  auto sent = now;
  EXPECT_EQ(s.on_key_changed(now + 1ms), step::wait);  // in flight: it may have run before
  s.on_renewed(now + 2ms, valid_until = now + 302ms, true);
  // The next renewal is the check, right away (no change checked before), not an interval on.
  EXPECT_EQ(s.wake_at(now + 2ms, valid_until), sent + 2ms);
}

TEST(KeepAliveScheduleTest, OneSeedOnePlan) {
  auto plan = [](std::uint64_t seed) {
    auto s = make(100ms, 300ms, seed);
    auto now = t0;
    auto valid_until = now + 300ms;
    s.start(now, valid_until);
    std::vector<steady::time_point> renewals;
    for (int i = 0; i < 10; ++i) {
      run_until_action(s, now, valid_until);
      renewals.push_back(now);
      s.on_renewed(now, valid_until = now + 300ms, true);
    }
    return renewals;
  };
  EXPECT_EQ(plan(7), plan(7));
  EXPECT_NE(plan(7), plan(8));
}

}  // namespace
}  // namespace dlock::test
