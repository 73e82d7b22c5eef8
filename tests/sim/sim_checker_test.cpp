// SPDX-License-Identifier: Apache-2.0
// The checker checked: clients with a deliberate bug must be caught within a few hundred
// seeds, by the invariant the bug breaks. Without this, a sweep that passes could mean an
// invariant that cannot fail.
#include "sim_checker.hpp"

#include <gtest/gtest.h>

#include <functional>

#include "sim_run.hpp"

namespace dlock::sim {
namespace {

// The first seed (of `seeds`) whose run fails, with its failure. `claims_only`: the holders
// and fence checks are off (they often catch a bug first), so that the claims' comparison alone
// must fail. `adjust` changes each seed's configuration.
std::optional<std::pair<std::uint64_t, std::string>> first_caught(
    topology t, client_bug bug, std::uint64_t seeds, bool claims_only = true,
    const std::function<void(run_config&)>& adjust = {}) {
  for (std::uint64_t seed = 0; seed < seeds; ++seed) {
    auto config = make_config(seed, t);
    if (adjust) adjust(config);
    config.bug = bug;
    config.check_holders = config.check_fences = !claims_only;
    auto result = run_schedule(config);
    if (!result.failure.empty()) return std::pair{seed, result.failure};
  }
  return std::nullopt;
}

TEST(SimChecker, ATakenRoundTreatedAsGrantedBreaksMutualExclusion) {
  for (auto t : {topology::single, topology::redlock3}) {
    auto caught = first_caught(t, client_bug::taken_as_granted, 200);
    ASSERT_TRUE(caught) << "never caught";
    EXPECT_NE(caught->second.find("MUTUAL EXCLUSION"), std::string::npos) << caught->second;
    std::printf("taken as granted: caught at seed %llu: %s\n",
                static_cast<unsigned long long>(caught->first), caught->second.c_str());
  }
}

TEST(SimChecker, AValidityOfStartPlusTwoTtlsOutlivesTheKey) {
  for (auto t : {topology::single, topology::redlock5}) {
    auto caught = first_caught(t, client_bug::double_validity, 200);
    ASSERT_TRUE(caught) << "never caught";
    EXPECT_NE(caught->second.find("MUTUAL EXCLUSION"), std::string::npos) << caught->second;
    std::printf("double validity: caught at seed %llu: %s\n",
                static_cast<unsigned long long>(caught->first), caught->second.c_str());
  }
}

TEST(SimChecker, AClaimThatOutlivesItsKeyIsCaughtWithoutARival) {
  auto caught = first_caught(topology::single, client_bug::double_validity, 50, false);
  ASSERT_TRUE(caught) << "never caught";
  EXPECT_NE(caught->second.find("VALIDITY"), std::string::npos) << caught->second;
}

// A semaphore client that takes "not granted" (or "queued") for a grant, or claims its permit a
// TTL too long, holds more permits than the limit: the claims' sum alone must see it.
TEST(SimChecker, ATakenPermitTreatedAsGrantedBreaksTheLimit) {
  for (auto t : {topology::semaphore, topology::semaphore_fair}) {
    auto caught = first_caught(t, client_bug::taken_as_granted, 300);
    ASSERT_TRUE(caught) << "never caught";
    EXPECT_NE(caught->second.find("OVER LIMIT"), std::string::npos) << caught->second;
    std::printf("semaphore, taken as granted: caught at seed %llu: %s\n",
                static_cast<unsigned long long>(caught->first), caught->second.c_str());
  }
}

TEST(SimChecker, APermitClaimedATtlTooLongBreaksTheLimit) {
  for (auto t : {topology::semaphore, topology::semaphore_fair}) {
    auto caught = first_caught(t, client_bug::double_validity, 300);
    ASSERT_TRUE(caught) << "never caught";
    EXPECT_NE(caught->second.find("OVER LIMIT"), std::string::npos) << caught->second;
    std::printf("semaphore, double validity: caught at seed %llu: %s\n",
                static_cast<unsigned long long>(caught->first), caught->second.c_str());
  }
}

TEST(SimChecker, APermitClaimedPastItsEntryIsCaughtWithoutARival) {
  auto caught = first_caught(topology::semaphore, client_bug::double_validity, 50, false);
  ASSERT_TRUE(caught) << "never caught";
  EXPECT_NE(caught->second.find("VALIDITY"), std::string::npos) << caught->second;
}

// A lock set client that claims its set on a "held" answer (acquire_all.lua's {0, i, PTTL})
// claims names that another holds: a set's (every client a set) or a mutex's (one set, the
// other clients mutexes of the pool's names; in lockset only the set clients have the bug).
TEST(SimChecker, ASetTakingHeldAsGrantedBreaksMutualExclusion) {
  for (bool against_mutexes : {false, true}) {
    auto caught = first_caught(topology::lockset, client_bug::taken_as_granted, 300, true,
                               [&](run_config& c) {
                                 for (std::size_t k = 0; k < c.clients; ++k) {
                                   bool set = k == 0 || !against_mutexes;
                                   c.mutex_name[k] = set ? run_config::set_client
                                                         : (k - 1) % c.lock_names;
                                 }
                               });
    ASSERT_TRUE(caught) << "never caught";
    EXPECT_NE(caught->second.find("MUTUAL EXCLUSION"), std::string::npos) << caught->second;
    std::printf("lock set, taken as granted (against %s): caught at seed %llu: %s\n",
                against_mutexes ? "mutexes" : "sets",
                static_cast<unsigned long long>(caught->first), caught->second.c_str());
  }
}

// The holders check of a claim on several keys: the first of them to expire ends it.
TEST(SimChecker, ASetClaimThatOutlivesItsKeysIsCaughtWithoutARival) {
  auto caught = first_caught(topology::lockset, client_bug::double_validity, 50, false);
  ASSERT_TRUE(caught) << "never caught";
  EXPECT_NE(caught->second.find("VALIDITY"), std::string::npos) << caught->second;
}

TEST(SimChecker, ARunReplaysExactly) {
  auto config = make_config(12, topology::redlock3);
  auto a = run_schedule(config, true);
  auto b = run_schedule(config, true);
  EXPECT_EQ(a.trace, b.trace);
  EXPECT_GT(a.trace.size(), 50u);
}

}  // namespace
}  // namespace dlock::sim
