// SPDX-License-Identifier: Apache-2.0
// algo/deadline_rule.hpp: a deadline already due makes a wait one whole look; any other ends at
// its deadline, awaiting an answer asked for before it until deadline + answer_grace.
#include "algo/deadline_rule.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace dlock::detail {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
const steady::time_point t0 = steady::time_point{} + 1h;

TEST(DeadlineRuleTest, ADeadlineAlreadyDueMakesOneWholeLookWithoutADeadline) {
  deadline_rule rule{t0};
  EXPECT_TRUE(rule.begin(t0));
  EXPECT_TRUE(rule.whole_look());
  EXPECT_FALSE(rule.bounded());
  EXPECT_FALSE(rule.passed(t0 + 1h));
  EXPECT_EQ(rule.gives_up_at(), steady::time_point::max());
  EXPECT_FALSE(rule.another_look(t0));  // the one look is all
  EXPECT_TRUE(rule.begin(t0 + 1s));     // and stays one
}

TEST(DeadlineRuleTest, AFutureDeadlineEndsTheWaitThereAndAwaitsAnswersForTheGrace) {
  deadline_rule rule{t0 + 100ms};
  EXPECT_FALSE(rule.begin(t0));
  EXPECT_FALSE(rule.whole_look());
  EXPECT_TRUE(rule.another_look(t0 + 99ms));
  EXPECT_FALSE(rule.passed(t0 + 99ms));
  EXPECT_TRUE(rule.passed(t0 + 100ms));
  EXPECT_FALSE(rule.another_look(t0 + 100ms));
  EXPECT_EQ(rule.gives_up_at(), t0 + 100ms + deadline_rule::answer_grace);
}

TEST(DeadlineRuleTest, ABeginRepeatedOnceTheDeadlineIsDueMakesAWholeLook) {
  // A driver that begins twice (run_blocking, then start) judges by the later time.
  deadline_rule rule{t0 + 10ms};
  EXPECT_FALSE(rule.begin(t0));
  EXPECT_TRUE(rule.begin(t0 + 10ms));
  EXPECT_EQ(rule.deadline(), steady::time_point::max());
}

TEST(DeadlineRuleTest, NoDeadlineNeverPassesNorGivesUp) {
  deadline_rule rule{steady::time_point::max()};
  EXPECT_FALSE(rule.begin(t0));
  EXPECT_FALSE(rule.whole_look());
  EXPECT_TRUE(rule.another_look(t0 + 1000h));
  EXPECT_EQ(rule.gives_up_at(), steady::time_point::max());
  deadline_rule near_max{steady::time_point::max() - 1ms};  // the grace does not overflow
  EXPECT_EQ(near_max.gives_up_at(), steady::time_point::max());
}

}  // namespace
}  // namespace dlock::detail
