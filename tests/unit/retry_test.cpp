// SPDX-License-Identifier: Apache-2.0
// jittered_delay: the sleep between two lock rounds is uniform in [d/2, d].
#include "algo/retry.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace dlock::detail {
namespace {

using namespace std::chrono_literals;
using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(RetryTest, StaysWithinHalfToFullDelay) {
  std::mt19937_64 gen(12345);
  std::uniform_int_distribution<int> delay_ms(1, 120'000);
  for (int i = 0; i < 200'000; ++i) {
    milliseconds d{delay_ms(gen)};
    std::uint64_t random = gen();
    auto got = jittered_delay(d, random);
    ASSERT_GE(got, d / 2) << "d=" << d.count() << "ms random=" << random;
    ASSERT_LE(got, d) << "d=" << d.count() << "ms random=" << random;
  }
}

TEST(RetryTest, ExtremeRandomValuesStayInRange) {
  for (milliseconds d :
       {1ms, 2ms, 3ms, 50ms, 999ms, 30'000ms, milliseconds(30LL * 24 * 3600 * 1000)}) {
    for (std::uint64_t random :
         {std::uint64_t{0}, std::uint64_t{1}, std::numeric_limits<std::uint64_t>::max(),
          std::numeric_limits<std::uint64_t>::max() / 2}) {
      auto got = jittered_delay(d, random);
      EXPECT_GE(got, d / 2) << d.count() << " " << random;
      EXPECT_LE(got, d) << d.count() << " " << random;
    }
  }
}

TEST(RetryTest, BothEndsAreReachable) {
  // The delay is half + random % span with span = full - half + 1 (in microseconds), so 0 gives
  // the minimum and span - 1 the maximum.
  milliseconds d = 50ms;
  EXPECT_EQ(jittered_delay(d, 0), microseconds(25'000));
  EXPECT_EQ(jittered_delay(d, 25'000), microseconds(50'000));
  EXPECT_EQ(jittered_delay(d, 25'001), microseconds(25'000));  // wraps
}

TEST(RetryTest, SpreadsOverTheWholeRange) {
  // With real random input the delays fill [d/2, d]: every tenth of the range is hit about
  // equally, and the extremes come within 1% of the bounds.
  const milliseconds d = 100ms;
  const auto lo = std::chrono::duration_cast<microseconds>(d / 2).count();
  const auto hi = std::chrono::duration_cast<microseconds>(d).count();
  std::vector<int> buckets(10, 0);
  long long min_seen = hi, max_seen = lo;
  const int n = 100'000;
  for (int i = 0; i < n; ++i) {
    auto us = std::chrono::duration_cast<microseconds>(jittered_delay(d, jitter_random())).count();
    ASSERT_GE(us, lo);
    ASSERT_LE(us, hi);
    min_seen = std::min(min_seen, static_cast<long long>(us));
    max_seen = std::max(max_seen, static_cast<long long>(us));
    auto bucket = std::min<long long>(9, (us - lo) * 10 / (hi - lo));
    ++buckets[static_cast<std::size_t>(bucket)];
  }
  EXPECT_LT(min_seen, lo + (hi - lo) / 100);
  EXPECT_GT(max_seen, hi - (hi - lo) / 100);
  for (int count : buckets) {
    EXPECT_GT(count, n / 10 * 8 / 10);  // within 20% of the expected 10000
    EXPECT_LT(count, n / 10 * 12 / 10);
  }
}

TEST(RetryTest, JitterRandomVaries) {
  std::vector<std::uint64_t> seen;
  for (int i = 0; i < 100; ++i) seen.push_back(jitter_random());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
}

TEST(RetryTest, ZeroOrNegativeDelayGivesZero) {
  EXPECT_EQ(jittered_delay(0ms, 0), std::chrono::steady_clock::duration::zero());
  EXPECT_EQ(jittered_delay(0ms, 123456789), std::chrono::steady_clock::duration::zero());
  EXPECT_EQ(jittered_delay(-5ms, 77), std::chrono::steady_clock::duration::zero());
}

TEST(RetryTest, OneMillisecondStillJitters) {
  // Sub-millisecond resolution: a 1 ms delay spreads over [500 us, 1000 us], not {0, 1 ms}.
  EXPECT_EQ(jittered_delay(1ms, 0), microseconds(500));
  EXPECT_EQ(jittered_delay(1ms, 250), microseconds(750));
  EXPECT_EQ(jittered_delay(1ms, 500), microseconds(1000));
}

}  // namespace
}  // namespace dlock::detail
