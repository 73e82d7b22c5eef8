// SPDX-License-Identifier: Apache-2.0
// dlock/detail/deadline.hpp: a caller's wait or deadline, of any clock and duration type, as
// the steady_clock deadline that dlock's waits run on. It saturates: too far is no deadline
// (time_point::max()), zero or past is now (one attempt), and nothing overflows on the way (the
// sanitized build aborts on a signed overflow).
#include "dlock/detail/deadline.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <ratio>

namespace dlock::detail {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using wall = std::chrono::system_clock;
template <class Clock>
using seconds_of = std::chrono::time_point<Clock, std::chrono::seconds>;

const auto never = steady::time_point::max();
const auto now = steady::time_point(1h);  // a made-up reading

TEST(DeadlineTest, AWaitIsAddedToNowAndNeverEndsSooner) {
  EXPECT_EQ(deadline_after(100ms, now), now + 100ms);
  EXPECT_EQ(deadline_after(std::chrono::duration<double, std::milli>(1.5), now), now + 1500us);
  EXPECT_EQ(deadline_after(std::chrono::duration<double, std::nano>(0.25), now), now + 1ns);
  EXPECT_EQ(deadline_after(99 * 24h * 365, now), now + 99 * 24h * 365);
  EXPECT_EQ(deadline_after(no_deadline_beyond - 1h, now), now + no_deadline_beyond - 1h);
}

TEST(DeadlineTest, AWaitTooLongToCountIsNoDeadline) {
  EXPECT_EQ(deadline_after(std::chrono::nanoseconds::max(), now), never);
  EXPECT_EQ(deadline_after(std::chrono::hours::max(), now), never);
  EXPECT_EQ(deadline_after(std::chrono::duration<double>::max(), now), never);
  EXPECT_EQ(deadline_after(std::chrono::duration<double>(std::numeric_limits<double>::infinity()),
                           now),
            never);
  // 101 years counted in an int of years.
  EXPECT_EQ(deadline_after(std::chrono::duration<int, std::ratio<365 * 86400>>(101), now), never);
  EXPECT_EQ(deadline_after(no_deadline_beyond, now), never);
  // From a reading near the end of what steady_clock can count.
  EXPECT_EQ(deadline_after(1h, never - 30min), never);
}

TEST(DeadlineTest, AZeroNegativeOrNanWaitIsOneAttempt) {
  EXPECT_EQ(deadline_after(0ms, now), now);
  EXPECT_EQ(deadline_after(-5s, now), now);
  EXPECT_EQ(deadline_after(std::chrono::nanoseconds::min(), now), now);
  EXPECT_EQ(deadline_after(std::chrono::hours::min(), now), now);
  EXPECT_EQ(deadline_after(std::chrono::duration<double>(std::nan("")), now), now);
}

TEST(DeadlineTest, ATimePointTooFarIsNoDeadlineOfAnyClock) {
  EXPECT_EQ(deadline_at(steady::time_point::max()), never);
  EXPECT_EQ(deadline_at(wall::time_point::max()), never);
  EXPECT_EQ(deadline_at(seconds_of<wall>::max()), never);
  EXPECT_EQ(deadline_at(seconds_of<steady>::max()), never);
  EXPECT_EQ(deadline_at(wall::now() + 24h * 365 * 150), never);
}

TEST(DeadlineTest, APastTimePointIsNowOneAttempt) {
  for (auto convert : {+[] { return deadline_at(wall::now() - 1h); },
                       +[] { return deadline_at(wall::time_point::min()); },
                       +[] { return deadline_at(seconds_of<wall>::min()); },
                       +[] { return deadline_at(steady::time_point::min()); },
                       +[] { return deadline_at(steady::now() - 1ms); }}) {
    auto before = steady::now();
    auto got = convert();
    EXPECT_GE(got, before);
    EXPECT_LE(got, steady::now());
  }
}

TEST(DeadlineTest, ADeadlineOfAnotherClockIsAsFarAwayOnSteadyClock) {
  auto before = steady::now();
  auto got = deadline_at(wall::now() + 10s);
  auto after = steady::now();
  // What passed between the two clocks' readings comes off; the system clock may also tick in
  // steps of a microsecond.
  EXPECT_GE(got, before + 10s - (after - before) - 1ms);
  EXPECT_LE(got, after + 10s);
  // A steady_clock deadline is itself, read once.
  auto in_5s = steady::now() + 5s;
  EXPECT_EQ(deadline_at(in_5s), in_5s);
  auto in_2s = std::chrono::time_point_cast<std::chrono::seconds>(steady::now()) + 2s;
  EXPECT_EQ(deadline_at(in_2s), steady::time_point(in_2s));
}

}  // namespace
}  // namespace dlock::detail
