// SPDX-License-Identifier: Apache-2.0
// What the simulator found, each reduced to the smallest schedule that shows it, now fixed:
// each test failed before its fix and guards it since (findings 1 and 2, 2026-11-25; 3,
// 2026-11-30). The hunts that found finding 2 stay DISABLED_ (run them with
// --gtest_also_run_disabled_tests): after the fix they search all their seeds. Each prints the
// run's report when it fails.
#include <gtest/gtest.h>

#include "sim_run.hpp"

namespace dlock::sim {
namespace {

using std::chrono::milliseconds;

// Finding 1 (run_script, src/script.cpp, which the world reproduces): with a node_timeout of
// 1 ms, the default for every TTL under 20 ms, the EVAL fallback is never sent. EVALSHA's
// NOSCRIPT answer takes one round trip, the time left is truncated to whole milliseconds (0),
// and the call fails with errc::timeout. A node whose script cache is empty (new, restarted,
// SCRIPT FLUSH) therefore never learns the script, and no acquisition on it ever succeeds,
// although one round trip (0.2 ms here) fits in the timeout five times over. Fixed on main:
// what is left is rounded up (src/script.cpp time_left, and the world's copy of it).
TEST(SimFindings, AOneMillisecondNodeTimeoutStillSendsTheEval) {
  auto c = make_config(0, topology::single);
  c.clients = 1;
  c.cycles = 1;
  c.lock.ttl = milliseconds(100);
  c.lock.retry_delay = milliseconds(20);
  c.lock.node_timeout = milliseconds(1);
  c.lock.wake_on_release = false;
  c.net = c.calm_net = network_profile{100, 100, 0, 0};
  c.fault_end = 0;
  c.resubscribe_max = 0;
  c.unbounded_only = true;
  auto r = run_schedule(c, true);
  EXPECT_EQ(r.failure, "") << report(c, r, 60);
}

// Finding 2 (the engine, src/algo/acquisition.cpp, with run_script's NOSCRIPT fallback): an
// answer to an earlier round's acquire is counted as a vote of the round in flight. The
// pending entries (impl::awaited) carry no round, and a vote of round r can arrive after round
// r concluded: the node had release.lua cached but not acquire.lua (after a restart or SCRIPT
// FLUSH, whatever ran first got cached), so round r's acquire came back NOSCRIPT and its EVAL
// went out only then, behind round r's cleanup release on the same connection. The release ran
// first (nothing to delete), the acquire's EVAL after it set "<id>.r", and the round, concluded
// on the release's answer, had already slept and begun round r + 1 when that grant arrived. The
// grant then counts for round r + 1 on that node, whose key holds the earlier value, set
// earlier, and expiring before round r + 1's validity ends: the lease can outlive its quorum
// (and run_script breaks the per-node FIFO order that the engine's request contract states).
// The sweep saw it as a pacing violation (a sleep of 2 ms from a stale "taken" holder's TTL:
// redlock5 seed 239 before the SCRIPT FLUSH faults were added, trace in
// /work/notes/sim-findings-2.txt). Here the engine is driven by hand, in that order. Fixed on
// main (pending answers carry their round, e892952's merge of the engine).
TEST(SimFindings, AnEarlierRoundsLateGrantNeverCountsForTheRoundInFlight) {
  using namespace std::chrono_literals;
  auto target =
      detail::make_lock_target(3, "l", lock_options{.ttl = 1000ms, .retry_delay = 20ms}, 1000ms);
  detail::acquisition a(target, "b", steady::time_point::max(), 5, 1);
  auto ints = [](std::int64_t x, std::int64_t y) {
    return reply::make_array({reply::make_integer(x), reply::make_integer(y)});
  };
  auto t = steady::time_point(1h);
  a.begin_attempt(t, {"", "", ""});
  auto round0 = a.take_requests();
  ASSERT_EQ(round0.size(), 3u);
  // n0 and n1 are another owner's: the round is lost, and n2 (its acquire came back NOSCRIPT,
  // the EVAL is on its way) gets the cleanup release.
  a.on_reply(round0[0].id, t + 1ms, {}, ints(0, 900));
  a.on_reply(round0[1].id, t + 1ms, {}, ints(0, 900));
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);
  ASSERT_EQ(cleanup[0].node, 2u);
  a.on_reply(cleanup[0].id, t + 2ms, {}, reply::make_integer(0));  // ran before the EVAL
  auto sleep = a.take_sleep();
  ASSERT_TRUE(sleep);
  auto t1 = t + 2ms + *sleep;
  a.begin_attempt(t1, {"", "", ""});
  auto round1 = a.take_requests();
  ASSERT_EQ(round1.size(), 3u);
  // Round 0's EVAL set "b.0" on n2 at t + 3 ms; its answer arrives now, in round 1.
  a.on_reply(round0[2].id, t1 + 1ms, {}, ints(1, 7));
  a.on_reply(round1[0].id, t1 + 1ms, {}, ints(1, 8));  // the owner released n0
  for (auto& r : a.take_requests()) a.on_reply(r.id, t1 + 2ms, {}, reply::make_integer(8));
  // Correct: no verdict before n2 answers round 1 (n1 is still the other owner's).
  auto outcome = a.take_outcome();
  EXPECT_FALSE(outcome) << "granted " << outcome->token << " (fence " << outcome->fence
                        << ") on n0 and on round 0's late grant from n2, which holds b.0";
}

// Finding 3 (acquire.lua's takeover, with acquire_unqueued's plain commands, 2026-11-30): the
// first try's SET NX ran, and the node crashed before its INCR (restarted with its data: the
// key kept our value, the counter the previous holder's token). The next round's acquire.lua
// took our value over and granted "the counter as it stands", which was that holder's token:
// two holders of one fence. A takeover now draws a new token unless the value is a handoff
// (release.lua draws with it). The sweep's seed 13974 (single node; 30,000 schedules).
TEST(SimFindings, ATakeoverAfterAFirstTryCutBeforeItsIncrDrawsANewToken) {
  auto c = make_config(13974, topology::single);
  auto r = run_schedule(c, true);
  EXPECT_EQ(r.failure, "") << report(c, r, 80);
}

// Finding 2 in the simulator: Redlock schedules biased toward it (a far node, SCRIPT FLUSH and
// dropped connections often, short retry delays), until a seed breaks an invariant (with
// `claims_only`, until two clients' claims overlap).
void hunt_the_late_vote(bool claims_only) {
  for (std::uint64_t seed = 0; seed < 20000; ++seed) {
    auto c = make_config(seed, topology::redlock3);
    c.far_node = seed % 3;
    c.far_factor = 10 + static_cast<std::int64_t>(seed % 11);
    c.faults = fault_mix{.drop = 4, .script_flush = 4};
    c.fault_end = std::max<sim_time>(c.fault_end, ms(500));
    c.fault_gap_max = ms(20);
    c.lock.retry_delay = std::chrono::milliseconds(2);
    c.lock.node_timeout = std::max(c.lock.node_timeout, std::chrono::milliseconds(10));
    c.check_holders = c.check_fences = !claims_only;
    auto r = run_schedule(c);
    if (r.failure.empty()) continue;
    auto traced = run_schedule(c, true);
    ADD_FAILURE() << report(c, traced, 400);
    return;
  }
}

TEST(SimFindings, DISABLED_HuntTheLateVoteInSchedules) { hunt_the_late_vote(false); }
TEST(SimFindings, DISABLED_HuntTheLateVoteUntilTwoHolders) { hunt_the_late_vote(true); }

}  // namespace
}  // namespace dlock::sim
