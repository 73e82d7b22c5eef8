// SPDX-License-Identifier: Apache-2.0
// transaction_backoff: doubling, capped, jittered in [d/2, d].
#include "algo/transaction_backoff.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <random>

namespace dlock::detail {
namespace {

using namespace std::chrono_literals;

TEST(TransactionBackoffTest, DoublesPerAbortUpToTheCap) {
  std::mt19937_64 gen(7);
  for (int aborted = 1; aborted <= 12; ++aborted) {
    auto expected = std::min(2ms * (1 << (aborted - 1)), std::chrono::milliseconds(100));
    for (int i = 0; i < 1000; ++i) {
      auto d = transaction_backoff(2ms, 100ms, aborted, gen());
      ASSERT_GE(d, expected / 2) << aborted;
      ASSERT_LE(d, expected) << aborted;
    }
  }
}

TEST(TransactionBackoffTest, HugeAbortCountsDoNotOverflow) {
  auto d = transaction_backoff(std::chrono::milliseconds(LLONG_MAX / 4), 1h, INT_MAX, 0);
  EXPECT_GE(d, 30min);
  EXPECT_LE(d, 1h);
  EXPECT_LE(transaction_backoff(3ms, 1000ms, INT_MAX, ~0ull), 1000ms);
}

TEST(TransactionBackoffTest, ZeroMeansNoSleep) {
  EXPECT_EQ(transaction_backoff(0ms, 100ms, 3, 5), std::chrono::steady_clock::duration::zero());
  EXPECT_EQ(transaction_backoff(2ms, 100ms, 0, 5), std::chrono::steady_clock::duration::zero());
}

}  // namespace
}  // namespace dlock::detail
