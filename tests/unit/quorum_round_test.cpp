// SPDX-License-Identifier: Apache-2.0
// The Redlock round's arithmetic, driven vote by vote with time points we construct (no
// sockets, no clock reads): quorum sizes, early decision, first-vote-wins, failure
// classification, drift and validity, and the fencing plan.
#include "algo/quorum_round.hpp"

#include <gtest/gtest.h>

namespace dlock::detail {
namespace {

using namespace std::chrono_literals;
using vote = node_result::vote;

// An arbitrary fixed origin for the fake clock: the round never reads a clock itself.
const steady::time_point t0 = steady::time_point(1h);

quorum_round make_round(std::size_t n, milliseconds ttl = 1000ms) {
  return quorum_round(n, t0, ttl, 0.01);
}

// What lock_core does at the moment of decision: success iff a quorum granted and the
// validity has not run out by then.
bool usable_at(const quorum_round& r, steady::time_point decided_at) {
  return r.quorum_granted() && decided_at < r.valid_until();
}

TEST(QuorumRoundTest, QuorumIsHalfPlusOne) {
  const std::size_t expected[] = {0, 1, 2, 2, 3, 3, 4, 4};
  for (std::size_t n = 1; n <= 7; ++n) {
    auto r = make_round(n);
    EXPECT_EQ(r.size(), n);
    EXPECT_EQ(r.quorum(), expected[n]) << "N = " << n;
    EXPECT_EQ(r.quorum(), n / 2 + 1);
    // A quorum is a strict majority: two quorums always share a node.
    EXPECT_GT(2 * r.quorum(), n);
  }
}

TEST(QuorumRoundTest, FreshRoundIsUndecidedWithAllVotesPending) {
  for (std::size_t n = 1; n <= 7; ++n) {
    auto r = make_round(n);
    EXPECT_FALSE(r.decided());
    EXPECT_FALSE(r.quorum_granted());
    EXPECT_EQ(r.granted_count(), 0u);
    for (const auto& v : r.votes()) EXPECT_EQ(v.outcome, vote::pending);
  }
}

TEST(QuorumRoundTest, DecidedAsSoonAsAQuorumGrantedWithoutWaitingForStragglers) {
  for (std::size_t n = 1; n <= 7; ++n) {
    auto r = make_round(n);
    std::size_t q = r.quorum();
    for (std::size_t i = 0; i + 1 < q; ++i) {
      r.granted(i, 1);
      EXPECT_FALSE(r.decided()) << "N = " << n << " after " << i + 1 << " grants";
    }
    r.granted(q - 1, 1);
    EXPECT_TRUE(r.decided()) << "N = " << n;
    EXPECT_TRUE(r.quorum_granted());
    EXPECT_EQ(r.granted_count(), q);
    // The stragglers never voted, and did not have to.
    for (std::size_t i = q; i < n; ++i) EXPECT_EQ(r.votes()[i].outcome, vote::pending);
  }
}

TEST(QuorumRoundTest, DecidedAsSoonAsVotesAgainstMakeQuorumImpossible) {
  for (std::size_t n = 1; n <= 7; ++n) {
    auto r = make_round(n);
    // Quorum becomes impossible once more than n - quorum nodes voted against.
    std::size_t against_needed = n - r.quorum() + 1;
    for (std::size_t i = 0; i + 1 < against_needed; ++i) {
      r.taken(i, 500);
      EXPECT_FALSE(r.decided()) << "N = " << n;
    }
    r.taken(against_needed - 1, 500);
    EXPECT_TRUE(r.decided()) << "N = " << n;
    EXPECT_FALSE(r.quorum_granted());
    EXPECT_EQ(r.failure(), errc::not_acquired) << "N = " << n;
    EXPECT_EQ(r.votes()[0].holder_ttl_ms, 500);
  }
}

TEST(QuorumRoundTest, DecidedAsSoonAsFailuresMakeQuorumImpossible) {
  auto r = make_round(5);
  r.granted(0, 1);
  r.granted(1, 1);
  r.failed(2, errc::timeout, "");
  r.failed(3, errc::node_unreachable, "Connection refused");
  EXPECT_FALSE(r.decided());  // node 4 could still complete the quorum
  r.failed(4, errc::timeout, "");
  EXPECT_TRUE(r.decided());
  EXPECT_FALSE(r.quorum_granted());
  EXPECT_EQ(r.failure(), errc::quorum_not_reached);

  // Three of five dead before anyone granted: decided without waiting for the two live ones.
  auto dead = make_round(5);
  dead.failed(0, errc::node_unreachable, "");
  dead.failed(1, errc::node_unreachable, "");
  EXPECT_FALSE(dead.decided());
  dead.failed(2, errc::node_unreachable, "");
  EXPECT_TRUE(dead.decided());
  EXPECT_EQ(dead.failure(), errc::quorum_not_reached);
  EXPECT_EQ(dead.votes()[3].outcome, vote::pending);
  EXPECT_EQ(dead.votes()[4].outcome, vote::pending);
}

TEST(QuorumRoundTest, MixedTakenAndFailedDecideWhenTogetherTheyExcludeAQuorum) {
  auto r = make_round(5);
  r.taken(0, 100);
  r.failed(1, errc::timeout, "");
  EXPECT_FALSE(r.decided());
  r.failed(2, errc::timeout, "");
  EXPECT_TRUE(r.decided());
  // One vote against does not prove another owner holds a quorum: the nodes are the problem.
  EXPECT_EQ(r.failure(), errc::quorum_not_reached);

  auto two_taken = make_round(5);
  two_taken.taken(0, 100);
  two_taken.taken(1, 100);
  two_taken.failed(2, errc::timeout, "");
  EXPECT_TRUE(two_taken.decided());
  EXPECT_EQ(two_taken.failure(), errc::quorum_not_reached);
}

TEST(QuorumRoundTest, FirstVotePerNodeCounts) {
  auto r = make_round(3);
  r.granted(0, 7);
  r.taken(0, 100);                     // a duplicate answer must not flip the vote
  r.failed(0, errc::timeout, "late");
  r.granted(0, 99);                    // nor count twice
  EXPECT_EQ(r.votes()[0].outcome, vote::granted);
  EXPECT_EQ(r.fence_of(0), 7);
  EXPECT_EQ(r.granted_count(), 1u);
  EXPECT_FALSE(r.decided());

  r.taken(1, 300);
  r.granted(1, 5);
  EXPECT_EQ(r.votes()[1].outcome, vote::taken);
  EXPECT_EQ(r.votes()[1].holder_ttl_ms, 300);
  EXPECT_EQ(r.granted_count(), 1u);
  EXPECT_FALSE(r.decided());

  r.failed(2, errc::timeout, "");
  r.granted(2, 5);
  EXPECT_EQ(r.votes()[2].outcome, vote::failed);
  EXPECT_TRUE(r.decided());
  EXPECT_FALSE(r.quorum_granted());

  // A vote for a node that does not exist is ignored.
  auto small = make_round(1);
  small.granted(1, 1);
  small.taken(5, 1);
  EXPECT_FALSE(small.decided());
  EXPECT_EQ(small.granted_count(), 0u);
}

TEST(QuorumRoundTest, FailureIsNotAcquiredWhenTakenVotesAloneExcludeAQuorum) {
  auto r = make_round(5);
  r.taken(0, 10);
  r.taken(1, 10);
  r.taken(2, 10);
  EXPECT_EQ(r.failure(), errc::not_acquired);

  // Even with failures mixed in, three votes against out of five are decisive.
  auto mixed = make_round(5);
  mixed.failed(0, errc::timeout, "");
  mixed.taken(1, 10);
  mixed.taken(2, 10);
  mixed.taken(3, 10);
  EXPECT_EQ(mixed.failure(), errc::not_acquired);

  // N = 4: quorum 3, so two votes against already exclude it.
  auto even = make_round(4);
  even.taken(0, 10);
  EXPECT_FALSE(even.decided());
  even.taken(1, 10);
  EXPECT_TRUE(even.decided());
  EXPECT_EQ(even.failure(), errc::not_acquired);

  auto single = make_round(1);
  single.taken(0, 10);
  EXPECT_TRUE(single.decided());
  EXPECT_EQ(single.failure(), errc::not_acquired);
}

TEST(QuorumRoundTest, FailureIsTheSharedErrorWhenEveryNodeFailedAlike) {
  auto r = make_round(3);
  r.failed(0, errc::auth_failed, "WRONGPASS invalid username-password pair");
  r.failed(1, errc::auth_failed, "NOAUTH Authentication required.");
  r.failed(2, errc::auth_failed, "");
  EXPECT_EQ(r.failure(), errc::auth_failed);
  EXPECT_EQ(r.votes()[0].message, "WRONGPASS invalid username-password pair");
  // Without a server text the local error's message stands in.
  EXPECT_EQ(r.votes()[2].message, std::error_code(errc::auth_failed).message());
  EXPECT_EQ(r.votes()[2].error, errc::auth_failed);

  auto single = make_round(1);
  single.failed(0, errc::wrong_type, "WRONGTYPE");
  EXPECT_TRUE(single.decided());
  EXPECT_EQ(single.failure(), errc::wrong_type);

  // Different errors, none of them from more nodes than a quorum can spare: the nodes as a
  // group could not form a quorum.
  auto different = make_round(3);
  different.failed(0, errc::auth_failed, "");
  different.failed(1, errc::timeout, "");
  different.failed(2, errc::no_permission, "");
  EXPECT_EQ(different.failure(), errc::quorum_not_reached);

  auto partial = make_round(3);
  partial.failed(0, errc::wrong_type, "");
  partial.failed(1, errc::timeout, "");
  EXPECT_TRUE(partial.decided());
  EXPECT_EQ(partial.failure(), errc::quorum_not_reached);
}

TEST(QuorumRoundTest, FailureIsSettledOnlyWhenStragglersCannotChangeTheCause) {
  // Two dead nodes refuse at once and one says "taken": the round is lost, but the two
  // stragglers could still show that another owner holds a quorum.
  auto r = make_round(5);
  r.failed(0, errc::node_unreachable, "");
  r.failed(1, errc::node_unreachable, "");
  r.taken(2, 800);
  ASSERT_TRUE(r.decided());
  EXPECT_EQ(r.failure(), errc::quorum_not_reached);
  EXPECT_FALSE(r.failure_settled());
  r.taken(3, 800);
  EXPECT_FALSE(r.failure_settled());
  r.taken(4, 800);
  EXPECT_TRUE(r.failure_settled());
  EXPECT_EQ(r.failure(), errc::not_acquired);

  // The same start, but the stragglers grant: nodes down it is.
  auto down = make_round(5);
  down.failed(0, errc::node_unreachable, "");
  down.failed(1, errc::node_unreachable, "");
  down.taken(2, 800);
  down.granted(3, 1);
  EXPECT_TRUE(down.failure_settled());
  EXPECT_EQ(down.failure(), errc::quorum_not_reached);

  // The same retryable error everywhere so far: one more alike names it.
  auto alike = make_round(3);
  alike.failed(0, errc::timeout, "");
  alike.failed(1, errc::timeout, "");
  ASSERT_TRUE(alike.decided());
  EXPECT_FALSE(alike.failure_settled());
  alike.failed(2, errc::timeout, "");
  EXPECT_TRUE(alike.failure_settled());
  EXPECT_EQ(alike.failure(), errc::timeout);

  // An error that retrying cannot cure, from more nodes than a quorum can spare: the quorum is
  // out of reach for good, whatever the last node says.
  auto fatal = make_round(3);
  fatal.failed(0, errc::wrong_type, "WRONGTYPE");
  ASSERT_FALSE(fatal.decided());
  fatal.failed(1, errc::wrong_type, "WRONGTYPE");
  ASSERT_TRUE(fatal.decided());
  EXPECT_TRUE(fatal.failure_settled());
  EXPECT_EQ(fatal.failure(), errc::wrong_type);

  auto mixed = make_round(5);
  mixed.failed(0, errc::timeout, "");
  mixed.failed(1, errc::node_unreachable, "");
  mixed.failed(2, errc::timeout, "");
  EXPECT_TRUE(mixed.failure_settled());  // different errors, and two votes cannot prove a rival
  EXPECT_EQ(mixed.failure(), errc::quorum_not_reached);

  auto rival = make_round(5);
  rival.taken(0, 1);
  rival.taken(1, 1);
  rival.taken(2, 1);
  EXPECT_TRUE(rival.failure_settled());  // already not_acquired: more votes cannot undo it
}

TEST(QuorumRoundTest, AnIncurableErrorOnAllButAMinorityNamesTheFailure) {
  // Four nodes say WRONGTYPE and a loaded fifth times out (seen in CI under TSan): the key is
  // of another type, not the nodes down, so retrying is pointless.
  auto r = make_round(5);
  for (std::size_t i = 0; i < 4; ++i) r.failed(i, errc::wrong_type, "WRONGTYPE");
  r.failed(4, errc::timeout, "");
  EXPECT_EQ(r.failure(), errc::wrong_type);

  // Two of five cannot deny a quorum; the stragglers may still: not settled yet.
  auto two = make_round(5);
  two.failed(0, errc::no_permission, "NOPERM");
  two.failed(1, errc::no_permission, "NOPERM");
  two.failed(2, errc::timeout, "");
  ASSERT_TRUE(two.decided());
  EXPECT_FALSE(two.failure_settled());
  EXPECT_EQ(two.failure(), errc::quorum_not_reached);
  two.failed(3, errc::no_permission, "NOPERM");
  EXPECT_TRUE(two.failure_settled());
  EXPECT_EQ(two.failure(), errc::no_permission);

  // Retryable errors never count so: three of five down is quorum_not_reached.
  auto down = make_round(5);
  for (std::size_t i = 0; i < 3; ++i) down.failed(i, errc::node_unreachable, "");
  down.granted(3, 1);
  down.granted(4, 1);
  EXPECT_EQ(down.failure(), errc::quorum_not_reached);
}

TEST(QuorumRoundTest, DriftIsOnePercentOfTtlPlusTwoMilliseconds) {
  EXPECT_EQ(drift_allowance(1000ms, 0.01), 12ms);
  EXPECT_EQ(drift_allowance(10'000ms, 0.01), 102ms);
  EXPECT_EQ(drift_allowance(30'000ms, 0.01), 302ms);
  // For small TTLs the 2 ms floor dominates: 10 ms * 0.01 = 0.1 ms.
  EXPECT_EQ(drift_allowance(10ms, 0.01), 2100us);
  EXPECT_EQ(drift_allowance(1ms, 0.01), 2010us);
  EXPECT_EQ(drift_allowance(5000ms, 0.0), 2ms);
  EXPECT_EQ(drift_allowance(1000ms, 0.5), 502ms);
}

TEST(QuorumRoundTest, ValidUntilIsStartPlusTtlMinusDrift) {
  quorum_round r(5, t0, 1000ms, 0.01);
  EXPECT_EQ(r.valid_until(), t0 + 1000ms - 12ms);
  quorum_round custom(3, t0, 2000ms, 0.05);
  EXPECT_EQ(custom.valid_until(), t0 + 2000ms - 102ms);
  // Validity does not depend on the votes or on when they came in.
  r.granted(0, 1);
  r.granted(1, 1);
  r.granted(2, 1);
  EXPECT_EQ(r.valid_until(), t0 + 988ms);
}

TEST(QuorumRoundTest, ValidityMustStillBePositiveAtTheMomentOfDecision) {
  // validity = ttl - elapsed - drift; with ttl = 10 ms the drift is 2.1 ms.
  quorum_round r(3, t0, 10ms, 0.01);
  r.granted(0, 1);
  r.granted(2, 1);
  ASSERT_TRUE(r.decided());
  EXPECT_TRUE(usable_at(r, t0 + 5ms));      // 10 - 5 - 2.1 = 2.9 ms left
  EXPECT_TRUE(usable_at(r, t0 + 7800us));   // 0.1 ms left
  EXPECT_FALSE(usable_at(r, t0 + 7900us));  // exactly zero: not valid
  EXPECT_FALSE(usable_at(r, t0 + 9ms));     // slow nodes: the TTL ran out during the round
  EXPECT_FALSE(usable_at(r, t0 + 50ms));
  // Without a quorum no amount of time helps.
  quorum_round lost(3, t0, 10ms, 0.01);
  lost.granted(0, 1);
  lost.taken(1, 5);
  lost.taken(2, 5);
  EXPECT_FALSE(usable_at(lost, t0 + 1ms));
}

TEST(QuorumRoundTest, PlanFenceTakesTheMaximumAmongGrantingNodes) {
  auto r = make_round(5);
  r.granted(0, 7);
  r.granted(1, 7);
  r.granted(2, 3);   // missed acquisitions while it was down
  r.taken(3, 900);   // another owner's PTTL, not a fence: ignored
  r.failed(4, errc::timeout, "");
  auto plan = plan_fence(r);
  EXPECT_EQ(plan.fence, 7);
  EXPECT_EQ(plan.already_at_fence, 2u);
  EXPECT_EQ(plan.to_raise, std::vector<std::size_t>{2});
}

TEST(QuorumRoundTest, PlanFenceRaisesEveryLaggingGrantingNode) {
  auto r = make_round(5);
  r.granted(4, 1);   // restarted without persistence: its counter started over
  r.granted(0, 42);
  r.granted(2, 40);
  r.granted(3, 41);
  auto plan = plan_fence(r);
  EXPECT_EQ(plan.fence, 42);
  EXPECT_EQ(plan.already_at_fence, 1u);
  // Node order, not vote order.
  EXPECT_EQ(plan.to_raise, (std::vector<std::size_t>{2, 3, 4}));
  // 1 + 3 raised = 4 >= quorum 3: enough to report 42.
  EXPECT_GE(plan.already_at_fence + plan.to_raise.size(), r.quorum());
}

TEST(QuorumRoundTest, PlanFenceWithAgreeingNodesNeedsNoRaise) {
  auto r = make_round(3);
  r.granted(1, 12);
  r.granted(2, 12);
  auto plan = plan_fence(r);
  EXPECT_EQ(plan.fence, 12);
  EXPECT_EQ(plan.already_at_fence, 2u);
  EXPECT_TRUE(plan.to_raise.empty());

  auto single = make_round(1);
  single.granted(0, 5);
  auto p1 = plan_fence(single);
  EXPECT_EQ(p1.fence, 5);
  EXPECT_EQ(p1.already_at_fence, 1u);
  EXPECT_TRUE(p1.to_raise.empty());
}

}  // namespace
}  // namespace dlock::detail
