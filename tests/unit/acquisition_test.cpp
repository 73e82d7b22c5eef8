// SPDX-License-Identifier: Apache-2.0
// algo/acquisition: the engine's decisions, with no server and no clock (time points are made
// up, replies are written by hand). The simulator (tests/sim) drives the same engine against
// simulated nodes; these tests pin the single decisions down.
#include "algo/acquisition.hpp"

#include <gtest/gtest.h>

#include <climits>

#include "algo/semaphore_protocol.hpp"

namespace dlock::detail {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

reply ints(std::initializer_list<std::int64_t> values) {
  std::vector<reply> e;
  for (auto v : values) e.push_back(reply::make_integer(v));
  return reply::make_array(std::move(e));
}

semaphore_reply parse(const reply& r, bool fair) {
  std::error_code ec;
  auto out = parse_semaphore_reply(r, fair, ec);
  EXPECT_FALSE(ec) << r.to_string();
  return out;
}

const steady::time_point t0 = steady::time_point(1h);
const auto no_deadline = steady::time_point::max();

semaphore_target base_semaphore() {
  semaphore_options o;
  o.ttl = 1000ms;
  o.drift_factor = 0.01;
  o.retry_delay = 40ms;
  o.node_timeout = 100ms;
  return make_semaphore_target("s", 2, o, 1000ms);
}

semaphore_target fair_semaphore() {
  semaphore_options o;
  o.ttl = 1000ms;
  o.retry_delay = 40ms;
  o.node_timeout = 100ms;
  o.fair = true;
  auto t = make_semaphore_target("s", 2, o, 1000ms);
  t.queue_ttl = 150ms;
  return t;
}

// Begins an attempt and returns its one request (the acquire script).
request attempt(acquisition& a, steady::time_point now, std::string channel = "") {
  a.begin_attempt(now, {channel});
  auto out = a.take_requests();
  EXPECT_EQ(out.size(), 1u);
  return out.empty() ? request{} : out.front();
}

void answer(acquisition& a, const request& r, steady::time_point now, const reply& rep,
            std::error_code ec = {}) {
  a.on_reply(r.id, now, ec, rep);
}

TEST(SemaphoreReplyTest, DecodesUnfairReplies) {
  auto granted = parse(ints({1, 17}), false);
  EXPECT_TRUE(granted.granted);
  EXPECT_EQ(granted.ticket, 17);
  auto full = parse(ints({0, 250}), false);
  EXPECT_FALSE(full.granted);
  EXPECT_FALSE(full.queued);
  EXPECT_EQ(full.next_expiry_ms, 250);
}

TEST(SemaphoreReplyTest, DecodesFairReplies) {
  auto granted = parse(ints({1, 5, 0}), true);
  EXPECT_TRUE(granted.granted);
  EXPECT_EQ(granted.ticket, 5);
  auto queued = parse(ints({0, 9, 3}), true);
  EXPECT_FALSE(queued.granted);
  EXPECT_TRUE(queued.queued);
  EXPECT_EQ(queued.ticket, 9);
  auto left = parse(ints({0, 0, 3}), true);
  EXPECT_FALSE(left.queued);
}

TEST(SemaphoreReplyTest, RejectsOtherShapes) {
  for (const reply& r : {reply::make_integer(1), ints({1}), ints({1, 2, 3}), ints({2, 5}),
                         reply::make_array({reply::make_string(reply::kind::string, "1"),
                                            reply::make_integer(1)}),
                         reply::make_nil()}) {
    std::error_code ec;
    parse_semaphore_reply(r, false, ec);
    EXPECT_EQ(ec, errc::protocol_error) << r.to_string();
  }
  std::error_code ec;
  parse_semaphore_reply(ints({1, 5}), true, ec);
  EXPECT_EQ(ec, errc::protocol_error);
}

TEST(SemaphoreAcquisitionTest, GrantIsValidForTtlMinusDriftFromTheAttemptsStart) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, no_deadline, 3, 0);
  auto r = attempt(a, t0);
  EXPECT_EQ(r.code, &sem_acquire_script);
  EXPECT_EQ(r.args[0], "tok");
  answer(a, r, t0 + 5ms, ints({1, 7}));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->ec);
  EXPECT_EQ(o->fence, 7u);
  EXPECT_EQ(o->token, "tok");
  EXPECT_EQ(o->valid_until, t0 + 1000ms - 12ms);  // drift = 1000 * 0.01 + 2 ms
  EXPECT_TRUE(a.take_requests().empty());  // the grant dequeued us: nothing to clean
}

TEST(SemaphoreAcquisitionTest, GrantArrivingAfterItsValidityIsRetriedThenDropped) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, no_deadline, 2, 0);
  answer(a, attempt(a, t0), t0 + 2s, ints({1, 7}));
  EXPECT_TRUE(a.take_sleep());
  answer(a, attempt(a, t0 + 3s), t0 + 5s, ints({1, 8}));
  EXPECT_FALSE(a.take_outcome());  // not before the entry is gone
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);
  EXPECT_EQ(cleanup[0].code, &sem_release_script);  // the entry is ours and must go
  EXPECT_EQ(cleanup[0].args[0], "tok");
  a.on_reply(cleanup[0].id, t0 + 5s, {}, reply::make_integer(1));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::lease_expired);
}

TEST(SemaphoreAcquisitionTest, RetriesWithJitterUntilAttemptsRunOut) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, no_deadline, 3, 7919);
  for (int i = 0; i < 2; ++i) {
    answer(a, attempt(a, t0), t0, ints({0, 100'000}));
    auto delay = a.take_sleep();
    ASSERT_TRUE(delay);
    EXPECT_GE(*delay, 20ms);
    EXPECT_LE(*delay, 40ms);
  }
  answer(a, attempt(a, t0), t0, ints({0, 100'000}));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::not_acquired);
  EXPECT_TRUE(a.take_requests().empty());  // an unqueued unfair "no" leaves nothing behind
  EXPECT_EQ(a.attempts_made(), 3);
}

TEST(SemaphoreAcquisitionTest, UnfairSleepsNoLongerThanUntilTheEarliestHolderExpires) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, no_deadline, 3, 0);
  answer(a, attempt(a, t0), t0, ints({0, 3}));
  EXPECT_EQ(a.take_sleep(), steady::duration(4ms));
}

TEST(SemaphoreAcquisitionTest, DeadlineEndsTheWait) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, t0 + 100ms, INT_MAX, 0);
  answer(a, attempt(a, t0, "ch"), t0 + 10ms, ints({0, 100'000}));
  EXPECT_TRUE(a.take_sleep());
  answer(a, attempt(a, t0 + 80ms, "ch"), t0 + 90ms, ints({0, 100'000}));  // 90 + >= 20 > 100
  EXPECT_EQ(a.take_sleep(), steady::duration(9ms));  // the last attempt: 1 ms before the end
  EXPECT_FALSE(a.queues_next(t0 + 99ms));
  answer(a, attempt(a, t0 + 99ms, "ch"), t0 + 100ms, ints({0, 100'000}));
  EXPECT_FALSE(a.take_sleep());
  auto cleanup = a.take_requests();  // it queued before: the entry must go
  ASSERT_EQ(cleanup.size(), 1u);
  a.on_reply(cleanup[0].id, t0 + 101ms, {}, reply::make_integer(0));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::not_acquired);
}

TEST(SemaphoreAcquisitionTest, AnAttemptThatCouldNotQueueIsFollowedByOneThatCan) {
  // The first attempt went out without a channel (the inbox was not subscribed yet). The
  // backstop would end after the deadline, yet the wait goes on until 1 ms before it: the
  // driver cuts the sleep short once it can queue. A timer that fires late, at the deadline,
  // starts no attempt.
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, t0 + 30ms, INT_MAX, 0);
  answer(a, attempt(a, t0), t0 + 1ms, ints({0, 100'000}));
  auto sleep = a.take_sleep();
  ASSERT_TRUE(sleep);
  EXPECT_EQ(*sleep, steady::duration(28ms));  // up to the last attempt's start
  a.begin_attempt(t0 + 30ms, {"ch"});
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);
  EXPECT_EQ(cleanup[0].code, &sem_release_script);
  a.on_reply(cleanup[0].id, t0 + 31ms, {}, reply::make_integer(0));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::not_acquired);
  EXPECT_EQ(a.attempts_made(), 1);
}

TEST(SemaphoreAcquisitionTest, FairWaiterQueuesUntilItsLastAttempt) {
  auto t = fair_semaphore();
  acquisition a(t, "tok", 1, no_deadline, 2, 0);
  auto first = attempt(a, t0);
  EXPECT_EQ(first.code, &sem_fair_acquire_script);
  EXPECT_EQ(first.args[4], "150");
  answer(a, first, t0, ints({0, 4, 2}));
  EXPECT_TRUE(a.take_sleep());
  auto last = attempt(a, t0 + 40ms);
  EXPECT_EQ(last.args[4], "0");  // last attempt: the server must not keep us
  answer(a, last, t0 + 41ms, ints({0, 0, 1}));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::not_acquired);
  EXPECT_TRUE(a.take_requests().empty());
}

TEST(SemaphoreAcquisitionTest, FairWaiterThatGivesUpQueuedMustLeave) {
  auto t = fair_semaphore();
  acquisition a(t, "tok", 1, t0 + 50ms, INT_MAX, 0);
  auto r = attempt(a, t0, "ch");
  EXPECT_EQ(r.args[4], "150");  // could not know this is the last one
  answer(a, r, t0 + 49ms, ints({0, 4, 2}));  // no time left for another attempt
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);
  EXPECT_EQ(cleanup[0].code, &sem_release_script);
  // Near the deadline the waiter does not ask to be queued at all.
  acquisition near(t, "tok2", 1, t0 + 50ms, INT_MAX, 0);
  EXPECT_EQ(attempt(near, t0 + 49ms).args[4], "0");
}

TEST(SemaphoreAcquisitionTest, QueuesForWakeUpsOnlyWhenAnotherAttemptCanFollow) {
  for (bool fair : {false, true}) {
    auto t = fair ? fair_semaphore() : base_semaphore();
    acquisition a(t, "tok", 1, no_deadline, 2, 0);
    EXPECT_TRUE(a.queues_next(t0)) << fair;
    auto r = attempt(a, t0, "dlock:wake:c");
    // The entry also offers a handoff for attempt 0 (sem_release.lua).
    // The channel's argument (ARGV[6] fair, ARGV[5] unfair); the holders' mark comes last.
    EXPECT_EQ(r.args[fair ? 5 : 4], fair ? "dlock:wake:c 0" : "1000 dlock:wake:c 0") << fair;
    EXPECT_EQ(r.args.back(), fair ? "dlock:semaphore 2 fair" : "dlock:semaphore 2 unfair");
    answer(a, r, t0, fair ? ints({0, 4, 1}) : ints({0, 9}));
    ASSERT_TRUE(a.take_sleep()) << fair;
    EXPECT_FALSE(a.queues_next(t0 + 40ms)) << fair;  // out of attempts
    // Even when the driver offers a channel, the last attempt does not queue.
    EXPECT_EQ(attempt(a, t0 + 40ms, "dlock:wake:c").args[fair ? 5 : 4], "") << fair;
    acquisition near(t, "tok", 1, t0 + 50ms, INT_MAX, 0);
    // A sleep that would end later is cut to end 1 ms before the deadline, for a last
    // attempt: it queues while that one could follow.
    EXPECT_TRUE(near.queues_next(t0 + 31ms)) << fair;
    EXPECT_TRUE(near.queues_next(t0 + 48ms)) << fair;
    EXPECT_FALSE(near.queues_next(t0 + 49ms)) << fair;
    EXPECT_TRUE(near.queues_next(t0)) << fair;
  }
}

// A release made the waiter a holder (sem_release.lua: "<fence> <attempt>"). Asleep, it is
// granted at once, its validity counted from the start of the attempt that queued it.
TEST(SemaphoreAcquisitionTest, AHandoffWhileAsleepGrantsFromTheQueuingAttemptsStart) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, no_deadline, INT_MAX, 0);
  auto r = attempt(a, t0, "dlock:wake:c");
  answer(a, r, t0 + 1ms, ints({0, 500}));
  ASSERT_TRUE(a.take_sleep());
  EXPECT_FALSE(a.on_handoff(t0 + 5ms, "77 3"));  // names an attempt never made
  EXPECT_FALSE(a.on_handoff(t0 + 5ms, "x 0"));
  EXPECT_TRUE(a.on_handoff(t0 + 5ms, "77 0"));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->ec);
  EXPECT_EQ(o->token, "tok");
  EXPECT_EQ(o->fence, 77u);
  EXPECT_EQ(o->valid_until, t0 + 1000ms - 12ms);  // drift = 1000 * 0.01 + 2 ms
  EXPECT_TRUE(a.take_requests().empty());  // the release dequeued it: nothing to clean up
}

// With an attempt in flight the handoff waits for its answer: that attempt could otherwise
// run after our release and take a permit that nobody holds.
// Both variants: the fair one's answers carry the rank too.
TEST(SemaphoreAcquisitionTest, AHandoffDuringAnAttemptWaitsForItsAnswer) {
  for (bool fair : {false, true}) {
    SCOPED_TRACE(fair ? "fair" : "unfair");
    auto t = fair ? fair_semaphore() : base_semaphore();
    auto not_granted = fair ? ints({0, 4, 1}) : ints({0, 500});
    auto granted = fair ? ints({1, 78, 0}) : ints({1, 78});
    for (int answer_kind : {0, 1, 2}) {  // not granted, granted, transport error
      acquisition a(t, "tok", 1, no_deadline, INT_MAX, 0);
      answer(a, attempt(a, t0, "dlock:wake:c"), t0, not_granted);
      ASSERT_TRUE(a.take_sleep());
      auto second = attempt(a, t0 + 40ms, "dlock:wake:c");
      EXPECT_FALSE(a.on_handoff(t0 + 41ms, "77 0")) << answer_kind;
      EXPECT_FALSE(a.take_outcome()) << answer_kind;
      if (answer_kind == 0) {
        // It ran before the release (else it would have found itself holding): the handoff
        // stands.
        answer(a, second, t0 + 42ms, not_granted);
        auto o = a.take_outcome();
        ASSERT_TRUE(o);
        EXPECT_FALSE(o->ec);
        EXPECT_EQ(o->fence, 77u);
        EXPECT_EQ(o->valid_until, t0 + 988ms);  // from attempt 0's start
      } else if (answer_kind == 1) {
        answer(a, second, t0 + 42ms, granted);  // ran after it: its own grant
        auto o = a.take_outcome();
        ASSERT_TRUE(o);
        EXPECT_EQ(o->fence, 78u);
        EXPECT_EQ(o->valid_until, t0 + 40ms + 988ms);
      } else {
        answer(a, second, t0 + 42ms, reply{}, errc::timeout);  // may still run: a wake-up only
        EXPECT_FALSE(a.take_outcome());
        EXPECT_TRUE(a.take_sleep());
      }
    }
  }
}

// Born expired (queued for longer than the TTL): a wake-up only, and no release of its own (it
// could land after a later attempt of the same token won, and take that permit back); the
// next attempt finds itself holding and takes the permit over.
TEST(SemaphoreAcquisitionTest, AHandoffThatCameTooLateIsAWakeUp) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, no_deadline, INT_MAX, 0);
  answer(a, attempt(a, t0, "dlock:wake:c"), t0, ints({0, 500}));
  ASSERT_TRUE(a.take_sleep());
  EXPECT_FALSE(a.on_handoff(t0 + 2s, "77 0"));
  EXPECT_TRUE(a.take_requests().empty());
  EXPECT_FALSE(a.take_outcome());
  answer(a, attempt(a, t0 + 2s, "dlock:wake:c"), t0 + 2s, ints({1, 80}));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->fence, 80u);
}

// The fair variant takes a handoff between attempts as the unfair one does; on a cluster
// neither offers one (the wake-up count may miss the waiter), and a message is a wake-up.
TEST(SemaphoreAcquisitionTest, TheFairVariantTakesAHandoffButNotOnACluster) {
  auto t = fair_semaphore();
  acquisition a(t, "tok", 1, no_deadline, INT_MAX, 0);
  answer(a, attempt(a, t0, "dlock:wake:c"), t0, ints({0, 4, 1}));
  ASSERT_TRUE(a.take_sleep());
  EXPECT_TRUE(a.on_handoff(t0 + 5ms, "77 0"));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->ec);
  EXPECT_EQ(o->fence, 77u);
  EXPECT_TRUE(a.take_requests().empty());  // the release dequeued it: nothing to clean up

  t.cluster = true;
  acquisition on_cluster(t, "tok2", 1, no_deadline, INT_MAX, 0);
  auto r = attempt(on_cluster, t0, "dlock:wake:c");
  EXPECT_EQ(r.args[5], "dlock:wake:c");
  answer(on_cluster, r, t0, ints({0, 4, 1}));
  ASSERT_TRUE(on_cluster.take_sleep());
  EXPECT_FALSE(on_cluster.on_handoff(t0 + 5ms, "77 0"));
  EXPECT_FALSE(on_cluster.take_outcome());
}

// An attempt whose answer was lost may have left a permit: a give-up after it cleans up even
// when the last attempt neither was granted nor queued (in quarantine it leaves a held permit).
// So does one after a grant that came too late to be of use.
TEST(SemaphoreAcquisitionTest, AGiveUpAfterALostOrLateAnswerCleansUp) {
  auto t = fair_semaphore();
  for (bool lost : {true, false}) {
    SCOPED_TRACE(lost ? "lost" : "too late");
    acquisition a(t, "tok", 1, no_deadline, 2, 0);
    auto first = attempt(a, t0, "");
    if (lost) {
      answer(a, first, t0, reply{}, errc::timeout);
    } else {
      answer(a, first, t0 + 2s, ints({1, 80, 0}));  // past the TTL (1 s)
    }
    ASSERT_TRUE(a.take_sleep());
    auto next = a.take_requests();
    ASSERT_TRUE(next.empty());
    answer(a, attempt(a, t0 + 2s, ""), t0 + 2s, ints({0, 0, 1}));
    auto cleanup = a.take_requests();
    ASSERT_EQ(cleanup.size(), 1u);
    EXPECT_EQ(cleanup[0].code, &sem_release_script);
    EXPECT_EQ(cleanup[0].args, (std::vector<std::string>{"tok", "2", "fair", "dlock:semaphore 2 fair"}));
  }
}

TEST(SemaphoreAcquisitionTest, TransportErrorsRetryButCleanUpWhenGivingUp) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, no_deadline, 2, 0);
  answer(a, attempt(a, t0), t0, reply{}, errc::timeout);
  EXPECT_TRUE(a.take_sleep());
  answer(a, attempt(a, t0), t0, reply{}, errc::connection_lost);
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);  // the script may have run
  a.on_reply(cleanup[0].id, t0, {}, reply::make_integer(0));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::connection_lost);
}

TEST(SemaphoreAcquisitionTest, IncurableErrorsEndAtOnce) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, no_deadline, 3, 0);
  answer(a, attempt(a, t0), t0, reply{}, errc::wrong_type);
  EXPECT_FALSE(a.take_sleep());
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);
  a.on_reply(cleanup[0].id, t0, {}, reply::make_integer(0));
  EXPECT_EQ(a.take_outcome()->ec, errc::wrong_type);
}

// A wait without a deadline gives up on what no wait cures (algo/retry.hpp, endless_wait_rule):
// a full node, once it refused in_a_row attempts in a row for lasting_for, leaving nothing
// behind; fewer, or for less long, are a stall that passes. A wait with a deadline rides it out.
TEST(SemaphoreAcquisitionTest, AWaitWithoutADeadlineEndsOnANodeThatStaysFull) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, no_deadline, INT_MAX, 0);
  auto now = t0;
  for (int i = 1; i < 2 * endless_wait_rule::in_a_row; ++i, now += 100ms) {
    answer(a, attempt(a, now), now, reply{}, errc::out_of_memory);
    ASSERT_TRUE(a.take_sleep()) << "gave up after " << i << " in " << (now - t0) / 1ms << " ms";
  }
  now = t0 + endless_wait_rule::lasting_for;
  answer(a, attempt(a, now), now, reply{}, errc::out_of_memory);
  EXPECT_FALSE(a.take_sleep());
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);
  EXPECT_EQ(cleanup[0].code, &sem_release_script);
  a.on_reply(cleanup[0].id, now, {}, reply::make_integer(0));
  EXPECT_EQ(a.take_outcome()->ec, errc::out_of_memory);

  acquisition bounded(t, "tok", 1, t0 + 1h, INT_MAX, 0);
  for (int i = 0; i < 2 * endless_wait_rule::in_a_row; ++i) {
    auto at = t0 + i * 1s;
    answer(bounded, attempt(bounded, at), at, reply{}, errc::out_of_memory);
    ASSERT_TRUE(bounded.take_sleep()) << "a bounded wait gave up after " << i + 1;
  }
}

// Every grant answered after its validity: the TTL is shorter than the round trip. One or two
// are a stall, which passes; endless_wait_rule::in_a_row end a wait without a deadline.
TEST(SemaphoreAcquisitionTest, AWaitWithoutADeadlineEndsWhenEveryGrantComesTooLate) {
  auto t = base_semaphore();
  acquisition a(t, "tok", 1, no_deadline, INT_MAX, 0);
  auto now = t0;
  for (int i = 1; i < endless_wait_rule::in_a_row; ++i, now += 3s) {
    answer(a, attempt(a, now), now + 2s, ints({1, i}));
    ASSERT_TRUE(a.take_sleep()) << "gave up after " << i;
  }
  answer(a, attempt(a, now), now + 2s, ints({1, 9}));
  EXPECT_FALSE(a.take_sleep());
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);  // the late grant's permit is ours and must go
  a.on_reply(cleanup[0].id, now + 2s, {}, reply::make_integer(1));
  EXPECT_EQ(a.take_outcome()->ec, errc::lease_expired);
}

// ---- locks ----

lock_target lock_on(std::size_t nodes) {
  lock_options o;
  o.ttl = 1000ms;
  o.retry_delay = 40ms;
  return make_lock_target(nodes, "orders:42", o, 1000ms);
}

// Begins a round and returns its acquire requests, one per node.
std::vector<request> round(acquisition& a, steady::time_point now,
                           std::vector<std::string> channels = {}) {
  a.begin_attempt(now, channels);
  return a.take_requests();
}

TEST(LockAcquisitionTest, ARoundWritesItsOwnValueAndIsGrantedByAQuorum) {
  auto t = lock_on(3);
  acquisition a(t, "id", no_deadline, 3, 0);
  auto rs = round(a, t0);
  ASSERT_EQ(rs.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rs[i].node, i);
    EXPECT_EQ(rs[i].code, &acquire_script);
    EXPECT_EQ(rs[i].args[0], "id.0");
    EXPECT_EQ(rs[i].keys[0], "orders:42");
  }
  answer(a, rs[0], t0 + 1ms, ints({1, 5}));
  EXPECT_FALSE(a.take_outcome());
  answer(a, rs[2], t0 + 2ms, ints({1, 5}));
  auto o = a.take_outcome();  // decided without the straggler
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->ec);
  EXPECT_EQ(o->token, "id.0");
  EXPECT_EQ(o->fence, 5u);
}

// {0, ttl, 1}: the holder there is another library's, whose release wakes nobody; the driver
// watches those keys (acquire_run), once per failed round, and never for dlock's own holders.
TEST(LockAcquisitionTest, ForeignHoldersAreNamedForTheDriverToWatch) {
  auto t = lock_on(3);
  acquisition a(t, "id", no_deadline, 3, 0);
  auto rs = round(a, t0);
  answer(a, rs[0], t0, ints({0, 5000, 1}));
  answer(a, rs[1], t0, ints({0, 5000}));
  answer(a, rs[2], t0, ints({0, 5000, 1}));
  for (const auto& r : a.take_requests()) answer(a, r, t0, reply::make_integer(0));
  ASSERT_TRUE(a.take_sleep());
  auto foreign = a.take_foreign_holders();
  ASSERT_EQ(foreign.size(), 2u);
  EXPECT_EQ(foreign[0].node, 0u);
  EXPECT_EQ(foreign[1].node, 2u);
  EXPECT_EQ(foreign[0].key, "orders:42");
  EXPECT_TRUE(a.take_foreign_holders().empty()) << "named twice";
  rs = round(a, t0 + 50ms);
  for (const auto& r : rs) answer(a, r, t0 + 50ms, ints({0, 5000}));
  for (const auto& r : a.take_requests()) answer(a, r, t0 + 50ms, reply::make_integer(0));
  ASSERT_TRUE(a.take_sleep());
  EXPECT_TRUE(a.take_foreign_holders().empty());
}

TEST(LockAcquisitionTest, AFenceIsReportedOnlyOnceAQuorumHoldsIt) {
  auto t = lock_on(3);
  acquisition a(t, "id", no_deadline, 3, 0);
  auto rs = round(a, t0);
  answer(a, rs[0], t0, ints({1, 9}));
  answer(a, rs[1], t0, ints({1, 4}));  // missed acquisitions while it was down
  EXPECT_FALSE(a.take_outcome());
  auto raise = a.take_requests();
  ASSERT_EQ(raise.size(), 1u);
  EXPECT_EQ(raise[0].code, &fence_raise_script);
  EXPECT_EQ(raise[0].node, 1u);
  EXPECT_EQ(raise[0].args[0], "9");
  a.on_reply(raise[0].id, t0 + 1ms, {}, reply::make_integer(9));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->fence, 9u);
}

// A node that grants after the round was decided is raised to the fence too, so that lagging
// counters converge on every granting node (RedlockTest.FencingTokensStrictlyIncrease...
// depended on the lagging nodes answering among the first under a slow build).
TEST(LockAcquisitionTest, AStragglerThatGrantsBehindTheFenceIsRaised) {
  auto t = lock_on(3);
  acquisition a(t, "id", no_deadline, 3, 0);
  auto rs = round(a, t0);
  answer(a, rs[0], t0, ints({1, 9}));
  answer(a, rs[1], t0, ints({1, 9}));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->fence, 9u);
  answer(a, rs[2], t0 + 1ms, ints({1, 2}));  // restarted empty, say
  auto raise = a.take_requests();
  ASSERT_EQ(raise.size(), 1u);
  EXPECT_EQ(raise[0].code, &fence_raise_script);
  EXPECT_EQ(raise[0].node, 2u);
  EXPECT_EQ(raise[0].args[0], "9");
}

TEST(LockAcquisitionTest, AFailedRoundCleansUpWhereItMayHaveSetBeforeRetrying) {
  auto t = lock_on(3);
  acquisition a(t, "id", no_deadline, 3, 0);
  auto rs = round(a, t0);
  answer(a, rs[0], t0, ints({0, 500}));             // taken: set nothing there
  answer(a, rs[1], t0, reply{}, errc::timeout);     // may still run
  answer(a, rs[2], t0, ints({1, 3}));               // granted, but no quorum can form
  EXPECT_FALSE(a.take_sleep());  // not before our leftovers are gone
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 2u);
  for (const auto& c : cleanup) {
    EXPECT_EQ(c.code, &release_script);
    EXPECT_EQ(c.args[0], "id.0");
    EXPECT_NE(c.node, 0u);
  }
  a.on_reply(cleanup[0].id, t0, {}, reply::make_integer(0));
  EXPECT_FALSE(a.take_sleep());
  a.on_reply(cleanup[1].id, t0, {}, reply::make_integer(1));
  EXPECT_TRUE(a.take_sleep());
  EXPECT_EQ(round(a, t0 + 40ms)[0].args[0], "id.1");  // the next round's own value
}

// ---- the unqueued first try (acquire_unqueued: plain commands, no Lua) ----

const std::int64_t clock_fence = 1'843'000'000'000'000;  // a token of the clock's range

reply status_ok() { return reply::make_string(reply::kind::status, "OK"); }
reply text(std::string_view s) { return reply::make_string(reply::kind::string, s); }

// The commands' answers: {key SET NX, INCR, {quarantine, floor}}.
reply unqueued(bool set, std::int64_t fence, reply quarantine = {}, reply floor = {}) {
  return reply::make_array({set ? status_ok() : reply{}, reply::make_integer(fence),
                            reply::make_array({std::move(quarantine), std::move(floor)})});
}

TEST(UnqueuedAcquisitionTest, AFreeLockIsGrantedByThePlainCommandsAlone) {
  auto t = lock_on(1);
  acquisition a(t, "id", no_deadline, 3, 0, true);
  auto rs = round(a, t0, {"chan"});
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].code, &acquire_unqueued_commands);
  EXPECT_EQ(rs[0].args[0], "id.0");
  ASSERT_EQ(rs[0].keys.size(), 2u);
  EXPECT_EQ(rs[0].keys[1], t.keys.fence);
  answer(a, rs[0], t0 + 1ms, unqueued(true, clock_fence));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->ec);
  EXPECT_EQ(o->token, "id.0");
  EXPECT_EQ(o->fence, static_cast<std::uint64_t>(clock_fence));
  EXPECT_FALSE(a.queued());
}

// Taken: acquire.lua follows at once for the same round, queueing as the round would have.
TEST(UnqueuedAcquisitionTest, ATakenLockIsTriedAgainByTheScriptWhichQueues) {
  auto t = lock_on(1);
  acquisition a(t, "id", no_deadline, 3, 0, true);
  auto rs = round(a, t0, {"chan"});
  answer(a, rs[0], t0 + 1ms, unqueued(false, clock_fence));
  EXPECT_FALSE(a.take_outcome());
  EXPECT_FALSE(a.take_sleep());
  auto next = a.take_requests();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].code, &acquire_script);
  EXPECT_EQ(next[0].args[0], "id.0");
  EXPECT_NE(next[0].args[2].find("chan"), std::string::npos) << "queues";
  EXPECT_TRUE(a.queued());
  answer(a, next[0], t0 + 2ms, ints({0, 500}));
  EXPECT_TRUE(a.take_sleep());
  EXPECT_TRUE(a.take_requests().empty()) << "taken: nothing of ours to clean up";
}

// A counter the INCR made (below the clock's range), one at or below the floor, a quarantine:
// the commands set the key but cannot claim it; acquire.lua settles it with the same value.
TEST(UnqueuedAcquisitionTest, ASetKeyThatCannotBeClaimedIsSettledByTheScript) {
  for (auto answer_of : {unqueued(true, 1),
                         unqueued(true, clock_fence, {}, text(std::to_string(clock_fence))),
                         unqueued(true, clock_fence, text("1"))}) {
    auto t = lock_on(1);
    acquisition a(t, "id", no_deadline, 3, 0, true);
    auto rs = round(a, t0);
    answer(a, rs[0], t0 + 1ms, answer_of);
    auto next = a.take_requests();
    ASSERT_EQ(next.size(), 1u) << answer_of.to_string();
    EXPECT_EQ(next[0].code, &acquire_script);
    EXPECT_EQ(next[0].args[0], "id.0");
    answer(a, next[0], t0 + 2ms, ints({1, clock_fence + 7}));
    auto o = a.take_outcome();
    ASSERT_TRUE(o);
    EXPECT_EQ(o->fence, static_cast<std::uint64_t>(clock_fence + 7)) << "the script's token";
  }
}

// Quarantined: acquire.lua answers "taken", but the key holds our value since our SET:
// the failed round releases it, or it would keep everyone out for a TTL.
TEST(UnqueuedAcquisitionTest, AKeySetDuringAQuarantineIsReleasedWhenTheRoundFails) {
  auto t = lock_on(1);
  acquisition a(t, "id", no_deadline, 3, 0, true);
  auto rs = round(a, t0);
  answer(a, rs[0], t0 + 1ms, unqueued(true, clock_fence, text("1")));
  auto next = a.take_requests();
  ASSERT_EQ(next.size(), 1u);
  answer(a, next[0], t0 + 2ms, ints({0, 3000}));
  EXPECT_FALSE(a.take_sleep()) << "not before our key is gone";
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);
  EXPECT_EQ(cleanup[0].code, &release_script);
  EXPECT_EQ(cleanup[0].args[0], "id.0");
  a.on_reply(cleanup[0].id, t0 + 3ms, {}, reply::make_integer(1));
  EXPECT_TRUE(a.take_sleep());
}

// A refusal (an ACL without SET, INCR or MGET: NOPERM) comes per command: the script takes
// over, and a refusal for good is reported so that the lock stops asking; a passing state (OOM,
// LOADING, a failover's READONLY) falls back the same, unreported. Our key is cleaned up after
// the script's "taken" exactly when the SET ran, or when no per-command answer says it did not.
TEST(UnqueuedAcquisitionTest, ARefusedCommandFallsBackAndOnlyAPermanentRefusalIsReported) {
  auto error = [](std::string_view text) { return reply::make_string(reply::kind::error, text); };
  auto refused = [&](std::string_view text) {
    return reply::make_array({error(text), error(text), error(text)});
  };
  struct refusal_case {
    std::string name;
    reply answer;
    bool permanent, set_ran;
  };
  const std::string noperm = "NOPERM this user has no permissions to run the 'set' command";
  std::vector<refusal_case> cases{
      {"every command refused", refused(noperm), true, false},
      {"MGET unknown", reply::make_array({status_ok(), reply::make_integer(clock_fence),
                                          error("ERR unknown command 'MGET'")}),
       true, true},
      {"loading", refused("LOADING Redis is loading the dataset in memory"), false, false},
      {"no answer per command", error("ERR something else"), false, true},
  };
  for (const auto& c : cases) {
    auto t = lock_on(1);
    acquisition a(t, "id", no_deadline, 3, 0, true);
    auto rs = round(a, t0);
    answer(a, rs[0], t0 + 1ms, c.answer);
    EXPECT_EQ(a.refused_plain_commands(), c.permanent) << c.name;
    auto next = a.take_requests();
    ASSERT_EQ(next.size(), 1u) << c.name;
    EXPECT_EQ(next[0].code, &acquire_script);
    answer(a, next[0], t0 + 2ms, ints({0, 3000}));
    auto cleanup = a.take_requests();
    if (!c.set_ran) {
      EXPECT_TRUE(cleanup.empty()) << c.name << ": the SET did not run";
      continue;
    }
    ASSERT_EQ(cleanup.size(), 1u) << c.name << ": our key is left";
    EXPECT_EQ(cleanup[0].code, &release_script);
  }
}

// The semaphore's solo grant: SET, the line's EXISTS and the token's INCR in one transaction,
// so that no grant beside ours draws its token between our grant and our draw.
TEST(SoloGrantTest, TheGrantTheLineCheckAndTheTokenAreOneTransaction) {
  auto words = [](std::vector<std::string_view> keys) {
    std::vector<std::string_view> args{"solo", "1000"};
    std::size_t size = 0;
    auto steps = solo_commands(keys, args, size);
    std::vector<std::string> out;
    for (std::size_t i = 0; i < size; ++i) {
      std::string line;
      for (auto w : steps[i].view()) line += (line.empty() ? "" : " ") + std::string(w);
      out.push_back(line);
    }
    return out;
  };
  EXPECT_EQ(words({"n", "f", "w", "i"}),
            (std::vector<std::string>{"MULTI", "SET n solo NX PX 1000", "EXISTS w i", "INCR f",
                                      "MGET dlock:node:quarantine dlock:node:fence-floor",
                                      "EXEC"}));
  EXPECT_EQ(words({"n", "f", "o"})[2], "EXISTS o");
}

TEST(SoloGrantTest, ItsAnswersAreReadAsTheyRan) {
  auto error = [](std::string_view text) { return reply::make_string(reply::kind::error, text); };
  auto queued = [] { return reply::make_string(reply::kind::status, "QUEUED"); };
  auto node = [] { return reply::make_array({reply{}, reply{}}); };
  auto ran = [&](reply set, std::int64_t line) {
    return reply::make_array({status_ok(), queued(), queued(), queued(), queued(),
                              reply::make_array({std::move(set), reply::make_integer(line),
                                                 reply::make_integer(clock_fence), node()})});
  };
  const std::string noperm = "NOPERM this user has no permissions to run the 'multi' command";
  struct answer_case {
    std::string name;
    reply answer;
    bool wrote, granted, unknown, never;
  };
  std::vector<answer_case> cases{
      {"granted", ran(status_ok(), 0), true, true, false, false},
      {"someone in line", ran(status_ok(), 1), true, false, false, false},
      {"taken", ran(reply{}, 0), false, false, false, false},
      {"MULTI refused, the SET ran on its own",
       reply::make_array({error(noperm), status_ok(), reply::make_integer(0),
                          reply::make_integer(clock_fence), node(), error(noperm)}),
       true, false, false, true},
      {"MULTI refused, the SET too",
       reply::make_array({error(noperm), error(noperm), error(noperm), error(noperm),
                          error(noperm), error(noperm)}),
       false, false, false, true},
      {"a command refused as queued: nothing ran",
       reply::make_array({status_ok(), queued(), error(noperm), queued(), queued(),
                          error("EXECABORT Transaction discarded because of previous errors.")}),
       false, false, false, true},
      {"EXEC refused after MULTI was not",
       reply::make_array({status_ok(), queued(), queued(), queued(), queued(),
                          error("ERR something else")}),
       false, false, true, false},
      {"no answer per command", error("ERR something else"), false, false, true, false},
  };
  for (const auto& c : cases) {
    auto a = read_solo_answer(c.answer);
    EXPECT_EQ(a.wrote, c.wrote) << c.name;
    EXPECT_EQ(a.granted, c.granted) << c.name;
    EXPECT_EQ(a.unknown, c.unknown) << c.name;
    EXPECT_EQ(a.never, c.never) << c.name;
    if (a.granted) {
      EXPECT_EQ(a.fence, clock_fence) << c.name;
    }
  }
}

// A solo grant whose SET ran but was not claimed (here: MULTI refused, and the script then
// refuses in quarantine) must be cleaned up by the give-up: the script adopted our value.
TEST(SoloGrantTest, AnUnclaimedSoloValueIsReleasedByTheGiveUp) {
  auto t = fair_semaphore();
  acquisition a(t, "tok", 1, no_deadline, 1, 0, true);
  auto solo = attempt(a, t0);
  ASSERT_EQ(solo.code, &sem_solo_commands);
  const std::string noperm = "NOPERM this user has no permissions to run the 'multi' command";
  auto refused = reply::make_string(reply::kind::error, noperm);
  answer(a, solo, t0 + 1ms,
         reply::make_array({refused, status_ok(), reply::make_integer(0),
                            reply::make_integer(clock_fence),
                            reply::make_array({reply::make_string(reply::kind::string, "1"),
                                               reply{}}),
                            refused}));
  EXPECT_TRUE(a.refused_plain_commands());
  auto script = a.take_requests();
  ASSERT_EQ(script.size(), 1u);
  EXPECT_EQ(script[0].code, &sem_fair_acquire_script);
  answer(a, script[0], t0 + 2ms, ints({0, 0, 1}));
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u) << "the name's key holds our value, adopted by the script";
  EXPECT_EQ(cleanup[0].code, &sem_release_script);
}

// No answer: the SET may have run, as for a script that timed out.
TEST(UnqueuedAcquisitionTest, SilentPlainCommandsFailTheRoundAndCleanUp) {
  auto t = lock_on(1);
  acquisition a(t, "id", no_deadline, 3, 0, true);
  auto rs = round(a, t0);
  answer(a, rs[0], t0 + 2ms, reply{}, errc::timeout);
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);
  EXPECT_EQ(cleanup[0].code, &release_script);
  a.on_reply(cleanup[0].id, t0 + 3ms, {}, reply::make_integer(0));
  EXPECT_TRUE(a.take_sleep());
  auto next = round(a, t0 + 60ms);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].code, &acquire_script) << "only round 0 tries the plain commands";
}

// Where the protocol cannot use it: N nodes, fair mode.
TEST(UnqueuedAcquisitionTest, RedlockAndFairLocksNeverSendThePlainCommands) {
  auto redlock = lock_on(3);
  acquisition a(redlock, "id", no_deadline, 3, 0, true);
  for (const auto& r : round(a, t0)) EXPECT_EQ(r.code, &acquire_script);
  auto fair = lock_on(1);
  fair.fair = true;
  acquisition b(fair, "id", no_deadline, 3, 0, true);
  for (const auto& r : round(b, t0)) EXPECT_EQ(r.code, &acquire_script);
}

// try_lock_for(15ms) with a retry_delay of 40 ms: no backstop of 20..40 ms ends in time, yet
// the waiter queued and a release may wake it, and one more poll fits before the deadline. It
// used to give up after its first round (found by ObserverTest's handoff test, whose waiter
// gave up at once with a deadline of 8 s and a retry_delay of 10 s).
TEST(LockAcquisitionTest, AWaiterWaitsOutItsDeadlineWhenTheBackstopEndsLater) {
  auto t = lock_on(1);
  acquisition a(t, "id", t0 + 15ms, INT_MAX, 0);
  answer(a, round(a, t0, {"ch"})[0], t0 + 1ms, ints({0, 500}));
  auto sleep = a.take_sleep();
  ASSERT_TRUE(sleep) << "gave up with 14 ms left";
  EXPECT_EQ(*sleep, steady::duration(13ms));  // the last round starts 1 ms before the deadline
  EXPECT_FALSE(a.queues_next(t0 + 14ms));      // and does not queue
  auto last = round(a, t0 + 14ms, {"ch"});
  ASSERT_EQ(last.size(), 1u);
  answer(a, last[0], t0 + 15ms, ints({0, 500}));
  EXPECT_FALSE(a.take_sleep());
  for (auto& cleanup : a.take_requests()) a.on_reply(cleanup.id, t0 + 16ms, {}, reply::make_integer(1));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::not_acquired);
  EXPECT_EQ(a.attempts_made(), 2);
}

// A silent node: at the deadline the votes still awaited count as timed out, and the
// cleanups this sends are not awaited (their answers would come a node timeout later).
TEST(LockAcquisitionTest, TheDeadlineEndsARoundThatANodeNeverAnswers) {
  auto t = lock_on(3);
  acquisition a(t, "id", t0 + 100ms, INT_MAX, 0);
  auto rs = round(a, t0);
  ASSERT_EQ(rs.size(), 3u);
  answer(a, rs[0], t0 + 1ms, ints({0, 900}));  // taken
  answer(a, rs[1], t0 + 1ms, ints({0, 900}));  // taken: no quorum is possible any more
  // Node 2 never answers: its vote is awaited (cleanup behind it) until the deadline.
  EXPECT_FALSE(a.take_sleep());
  EXPECT_FALSE(a.take_outcome());
  EXPECT_EQ(a.gives_up_at(), t0 + 100ms + acquisition::answer_grace);
  a.on_deadline(t0 + 124ms);  // not yet: answers to an attempt begun in time may still come
  EXPECT_FALSE(a.take_outcome());
  a.on_deadline(a.gives_up_at());
  auto cleanups = a.take_requests();
  auto o = a.take_outcome();
  ASSERT_TRUE(o) << "still waiting for a silent node after the deadline";
  EXPECT_EQ(o->ec, errc::not_acquired);
  ASSERT_FALSE(cleanups.empty());
  for (const auto& c : cleanups) {
    EXPECT_EQ(c.node, 2u);  // where the round may have set
    EXPECT_TRUE(a.wants_fallback(c.id)) << "a cleanup must run, after NOSCRIPT too";
  }
  // The vote must not run after its cleanup: no EVAL when its EVALSHA comes back NOSCRIPT.
  EXPECT_FALSE(a.wants_fallback(rs[2].id));
  // The node's answer, when it comes at last, changes nothing.
  answer(a, rs[2], t0 + 900ms, ints({1, 1}));
  EXPECT_FALSE(a.take_outcome());
}

// One round, no deadline (try_lock): a node that timed out is not waited for a second time,
// for the cleanup that follows the failed round.
TEST(LockAcquisitionTest, ACleanupOnANodeThatTimedOutIsNotAwaited) {
  auto t = lock_on(1);
  acquisition a(t, "id", no_deadline, 1, 0);
  auto rs = round(a, t0);
  answer(a, rs[0], t0 + 100ms, reply{}, errc::timeout);
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);  // sent, as the vote may have landed
  EXPECT_EQ(cleanup[0].code, &release_script);
  auto o = a.take_outcome();
  ASSERT_TRUE(o) << "waits for the cleanup on a node that does not answer";
  EXPECT_EQ(o->ec, errc::timeout);
}

// try_lock_for(0), or a deadline already past: one whole attempt, as try_lock(), not one cut
// off at once by a deadline timer that has already fired.
TEST(LockAcquisitionTest, ADeadlineThatHasPassedAtTheStartIsOneAttemptWithoutIt) {
  auto t = lock_on(1);
  acquisition a(t, "id", t0, INT_MAX, 0);
  a.on_start(t0 + 1ms);
  EXPECT_EQ(a.deadline(), steady::time_point::max());
  EXPECT_EQ(a.gives_up_at(), steady::time_point::max());
  auto rs = round(a, t0 + 1ms);
  answer(a, rs[0], t0 + 900ms, ints({1, 7}));  // however slow, within the node timeout
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->ec);
  EXPECT_EQ(o->fence, 7u);
  // A deadline still ahead is kept.
  acquisition b(t, "id2", t0 + 10ms, INT_MAX, 0);
  b.on_start(t0);
  EXPECT_EQ(b.deadline(), t0 + 10ms);
}

TEST(LockAcquisitionTest, AHandoffIsTakenForTheRoundInFlightAndDatedFromItsStart) {
  auto t = lock_on(1);
  acquisition a(t, "id", no_deadline, 5, 0);
  auto rs = round(a, t0, {"dlock:wake:c"});
  EXPECT_EQ(rs[0].args[2], "1000 dlock:wake:c 1000 0");  // queued, accepting a handoff
  EXPECT_TRUE(a.queued());
  EXPECT_TRUE(a.on_handoff(t0 + 3ms, "12 0"));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->token, "id.h0");
  EXPECT_EQ(o->fence, 12u);
  EXPECT_EQ(o->valid_until, t0 + 1000ms - 12ms);
  EXPECT_TRUE(a.take_requests().empty());  // the handoff dequeued us
}

TEST(LockAcquisitionTest, AHandoffForAnEarlierRoundWaitsForTheNextRoundToAnswerTaken) {
  auto t = lock_on(1);
  acquisition a(t, "id", no_deadline, 5, 0);
  answer(a, round(a, t0, {"ch"})[0], t0, ints({0, 500}));
  ASSERT_TRUE(a.take_sleep());
  auto second = round(a, t0 + 40ms, {"ch"});
  EXPECT_FALSE(a.on_handoff(t0 + 41ms, "12 0"));  // round 1 may have taken the key over
  answer(a, second[0], t0 + 42ms, ints({0, 900}));  // ... it did not: it ran before the release
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->token, "id.h0");

  acquisition b(t, "id", no_deadline, 5, 0);
  answer(b, round(b, t0, {"ch"})[0], t0, ints({0, 500}));
  ASSERT_TRUE(b.take_sleep());
  auto second_b = round(b, t0 + 40ms, {"ch"});
  EXPECT_FALSE(b.on_handoff(t0 + 41ms, "12 0"));
  answer(b, second_b[0], t0 + 42ms, ints({1, 13}));  // it ran after and took the key over
  auto ob = b.take_outcome();
  ASSERT_TRUE(ob);
  EXPECT_EQ(ob->token, "id.1");
  EXPECT_EQ(ob->fence, 13u);
}

TEST(LockAcquisitionTest, AHandoffThatCameTooLateIsGivenBack) {
  auto t = lock_on(1);
  acquisition a(t, "id", no_deadline, 5, 0);
  round(a, t0, {"ch"});
  EXPECT_FALSE(a.on_handoff(t0 + 2s, "12 0"));
  auto back = a.take_requests();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].code, &release_script);
  EXPECT_EQ(back[0].args[0], "id.h0");  // only its own value
}

TEST(LockAcquisitionTest, GivingUpLeavesTheQueueAndGivesBackALateHandoff) {
  auto t = lock_on(1);
  acquisition a(t, "id", no_deadline, 2, 0);
  answer(a, round(a, t0, {"ch"})[0], t0, ints({0, 500}));
  ASSERT_TRUE(a.take_sleep());
  answer(a, round(a, t0 + 40ms, {"ch"})[0], t0 + 41ms, ints({0, 500}));
  auto leave = a.take_requests();
  ASSERT_EQ(leave.size(), 1u);
  EXPECT_EQ(leave[0].code, &release_script);
  EXPECT_EQ(leave[0].args, (std::vector<std::string>{"id", "give-up"}));
  a.on_reply(leave[0].id, t0 + 42ms, {}, reply::make_integer(0));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::not_acquired);
}

// A straggler of an earlier round (its cleanup overtook it: a NOSCRIPT re-send, or a node
// that failed at once) never counts as a vote of the round in flight (found by review: round 1
// was reported granted with round 0's vote of node 2, validity counted from round 1's start).
TEST(LockAcquisitionTest, AnEarlierRoundsStragglerIsNoVoteOfTheCurrentRound) {
  auto t = lock_on(3);
  acquisition a(t, "id", no_deadline, 5, 0);
  auto r0 = round(a, t0);
  answer(a, r0[0], t0, ints({0, 500}));
  answer(a, r0[1], t0, ints({0, 500}));  // decided: not_acquired
  auto cleanup = a.take_requests();
  ASSERT_EQ(cleanup.size(), 1u);  // node 2, whose vote is still out
  a.on_reply(cleanup[0].id, t0 + 1ms, {}, reply::make_integer(0));
  ASSERT_TRUE(a.take_sleep());
  auto r1 = round(a, t0 + 30ms);
  answer(a, r0[2], t0 + 31ms, ints({1, 7}));  // round 0's late SET on node 2
  answer(a, r1[0], t0 + 32ms, ints({1, 7}));
  EXPECT_FALSE(a.take_outcome()) << "round 1 decided by round 0's vote";
  answer(a, r1[2], t0 + 33ms, ints({1, 7}));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->token, "id.1");
}

// A waiter that gives up reports only after its queue entries are gone (a caller that exits
// at once, as `dlock run` does on a signal, must not lose them in its socket buffers).
TEST(LockAcquisitionTest, GivingUpReportsOnlyOnceTheQueueIsLeft) {
  auto t = lock_on(3);
  acquisition a(t, "id", no_deadline, 2, 0);
  auto r0 = round(a, t0, {"ch", "ch", "ch"});
  for (auto& r : r0) answer(a, r, t0, ints({0, 500}));
  // Decided on two votes: the third node's release goes out before its "taken" is in.
  for (auto& c : a.take_requests()) a.on_reply(c.id, t0, {}, reply::make_integer(0));
  ASSERT_TRUE(a.take_sleep());
  auto r1 = round(a, t0 + 40ms, {"ch", "ch", "ch"});
  for (auto& r : r1) answer(a, r, t0 + 41ms, ints({0, 500}));
  for (auto& c : a.take_requests()) {
    if (c.code == &release_script) a.on_reply(c.id, t0 + 41ms, {}, reply::make_integer(0));
  }
  auto leave = a.take_requests();
  ASSERT_EQ(leave.size(), 3u);
  EXPECT_EQ(leave[0].code, &leave_script);
  EXPECT_FALSE(a.take_outcome());
  for (auto& r : leave) {
    EXPECT_FALSE(a.take_outcome());
    a.on_reply(r.id, t0 + 42ms, {}, reply::make_integer(1));
  }
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::not_acquired);
}

// A round granted after its validity (lease_expired): its key is released, then it is judged.
void expire_one_round(acquisition& a, steady::time_point now) {
  auto rs = round(a, now);
  ASSERT_EQ(rs.size(), 1u);
  answer(a, rs[0], now + 2s, ints({1, 5}));
  for (const auto& c : a.take_requests()) a.on_reply(c.id, now + 2s, {}, reply::make_integer(1));
}

// The TTL is shorter than the round trip: endless_wait_rule::in_a_row such rounds in a
// row (3 s apart: longer than lasting_for) end a wait without a deadline with lease_expired; another failure in between (the key
// taken) starts the count again. A wait with a deadline rides them out.
TEST(LockAcquisitionTest, AWaitWithoutADeadlineEndsWhenEveryGrantComesTooLate) {
  auto t = lock_on(1);
  acquisition a(t, "id", no_deadline, INT_MAX, 0);
  auto now = t0;
  for (int i = 1; i < endless_wait_rule::in_a_row; ++i, now += 3s) {
    expire_one_round(a, now);
    ASSERT_TRUE(a.take_sleep()) << "gave up after " << i;
  }
  answer(a, round(a, now)[0], now, ints({0, 500}));
  ASSERT_TRUE(a.take_sleep());
  for (int i = 1; i < endless_wait_rule::in_a_row; ++i) {
    now += 3s;
    expire_one_round(a, now);
    ASSERT_TRUE(a.take_sleep()) << "gave up after " << i << " since the key was taken";
  }
  expire_one_round(a, now + 3s);
  EXPECT_FALSE(a.take_sleep());
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::lease_expired);

  acquisition bounded(t, "id", t0 + 1h, INT_MAX, 0);
  for (int i = 0; i < 2 * endless_wait_rule::in_a_row; ++i) {
    expire_one_round(bounded, t0 + i * 3s);
    ASSERT_TRUE(bounded.take_sleep()) << "a bounded wait gave up after " << i + 1;
  }
}

// Full nodes (OOM) end a wait without a deadline once they alone deny every quorum, whatever
// the other nodes said, round after round (endless_wait_rule): 2 of 3. One of 3 leaves a quorum
// possible, and the wait goes on.
TEST(LockAcquisitionTest, AWaitWithoutADeadlineEndsWhenFullNodesDenyEveryQuorum) {
  auto t = lock_on(3);
  acquisition one_full(t, "id", no_deadline, INT_MAX, 0);
  for (int i = 0; i < 2 * endless_wait_rule::in_a_row; ++i) {
    auto at = t0 + i * 1s;
    auto rs = round(one_full, at);
    answer(one_full, rs[0], at, reply{}, errc::out_of_memory);
    answer(one_full, rs[1], at, ints({0, 500}));
    answer(one_full, rs[2], at, ints({0, 500}));
    for (const auto& c : one_full.take_requests()) {
      one_full.on_reply(c.id, at, {}, reply::make_integer(0));
    }
    ASSERT_TRUE(one_full.take_sleep()) << "one full node of 3 ended the wait after " << i + 1;
  }

  acquisition two_full(t, "id", no_deadline, INT_MAX, 0);
  auto full_round = [&](steady::time_point at) {
    auto votes = round(two_full, at);
    answer(two_full, votes[0], at, reply{}, errc::out_of_memory);
    answer(two_full, votes[1], at, reply{}, errc::out_of_memory);
    for (const auto& c : two_full.take_requests()) {
      two_full.on_reply(c.id, at, {}, reply::make_integer(0));
    }
  };
  for (int i = 1; i < endless_wait_rule::in_a_row; ++i) {
    full_round(t0 + i * 1s);
    ASSERT_TRUE(two_full.take_sleep()) << "gave up after " << i;
  }
  full_round(t0 + endless_wait_rule::in_a_row * 1s);
  EXPECT_FALSE(two_full.take_sleep());
  auto o = two_full.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::out_of_memory);
}

TEST(LockAcquisitionTest, FailuresAreClassifiedForTheirCallers) {
  node_results mixed(3);
  mixed[0].outcome = node_result::vote::taken;
  mixed[1].outcome = node_result::vote::failed;
  mixed[2].outcome = node_result::vote::granted;
  EXPECT_EQ(classify_failure(errc::quorum_not_reached, mixed), failure_kind::contention);
  mixed[2].outcome = node_result::vote::failed;
  EXPECT_EQ(classify_failure(errc::quorum_not_reached, mixed), failure_kind::unavailable);
  EXPECT_EQ(classify_failure(errc::not_acquired, mixed), failure_kind::contention);
  EXPECT_EQ(classify_failure(errc::timeout, mixed), failure_kind::unavailable);
  EXPECT_EQ(classify_failure(errc::wrong_type, mixed), failure_kind::fatal);
  EXPECT_EQ(classify_failure(errc::auth_failed, mixed), failure_kind::fatal);
}

// A lock set of names a, b, c, d in two slot groups ({a, c} then {b, d}), as on a cluster.
struct two_group_set {
  lock_options o = [] {
    lock_options o;
    o.ttl = 1000ms;
    o.retry_delay = 40ms;
    return o;
  }();
  lock_set_target t{{"a", "b", "c", "d"}, {{0, 2}, {1, 3}}, o, 1000ms};
};

std::vector<std::string> keys_of(const request& r) {
  return {r.keys.begin(), r.keys.end()};
}

TEST(LockSetAcquisitionTest, GroupsAreTakenInOrderAndTheFencesRaisedToTheHighest) {
  two_group_set s;
  acquisition a(s.t, "id", no_deadline, 3, 0);
  a.begin_attempt(t0, {});
  auto first = a.take_requests();
  ASSERT_EQ(first.size(), 1u);  // one group at a time
  EXPECT_EQ(first[0].code, &acquire_all_script);
  EXPECT_EQ(keys_of(first[0]),
            (std::vector<std::string>{"a", lock_keys_for("a").fence, "c", lock_keys_for("c").fence}));
  EXPECT_EQ(first[0].args[0], "id.0");
  answer(a, first[0], t0 + 1ms, ints({1, 7}));
  auto second = a.take_requests();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(keys_of(second[0]).front(), "b");
  answer(a, second[0], t0 + 2ms, ints({1, 9}));
  // The first group drew 7, less than 9: its names' counters are raised before the grant.
  auto raises = a.take_requests();
  ASSERT_EQ(raises.size(), 2u);
  for (const auto& r : raises) {
    EXPECT_EQ(r.code, &fence_raise_script);
    EXPECT_EQ(r.args[0], "9");
  }
  EXPECT_EQ(keys_of(raises[0]).front(), lock_keys_for("a").fence);
  EXPECT_EQ(keys_of(raises[1]).front(), lock_keys_for("c").fence);
  answer(a, raises[0], t0 + 3ms, reply::make_integer(9));
  EXPECT_FALSE(a.take_outcome());
  answer(a, raises[1], t0 + 3ms, reply::make_integer(9));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->ec);
  EXPECT_EQ(o->token, "id.0");
  EXPECT_EQ(o->fence, 9u);
  EXPECT_EQ(o->valid_until, t0 + 1000ms - drift_allowance(1000ms, s.o.drift_factor));
}

TEST(LockSetAcquisitionTest, ARefusalGivesBackTheGroupsTakenBeforeAndSleepsUntilTheHolderExpires) {
  two_group_set s;
  acquisition a(s.t, "id", no_deadline, 3, 0);
  a.begin_attempt(t0, {});
  answer(a, a.take_requests().at(0), t0 + 1ms, ints({1, 7}));
  auto second = a.take_requests().at(0);
  answer(a, second, t0 + 2ms, ints({0, 1, 5}));  // "b" held for 5 ms more
  auto give_back = a.take_requests();
  ASSERT_EQ(give_back.size(), 2u);  // the first group's names, not the refused group's
  for (const auto& r : give_back) {
    EXPECT_EQ(r.code, &release_script);
    EXPECT_EQ(r.args, std::vector<std::string>{"id.0"});
  }
  EXPECT_EQ(keys_of(give_back[0]).front(), "a");
  EXPECT_EQ(keys_of(give_back[1]).front(), "c");
  auto sleep = a.take_sleep();
  ASSERT_TRUE(sleep);
  EXPECT_EQ(*sleep, steady::duration(6ms));
  // The next attempt writes its own value: a late give-back of the first deletes nothing of it.
  a.begin_attempt(t0 + 10ms, {});
  EXPECT_EQ(a.take_requests().at(0).args[0], "id.1");
}

TEST(LockSetAcquisitionTest, AnErrorGivesBackTheGroupInFlightTooAndAnIncurableOneEndsTheWait) {
  two_group_set s;
  acquisition a(s.t, "id", no_deadline, 3, 0);
  a.begin_attempt(t0, {});
  answer(a, a.take_requests().at(0), t0 + 1ms, ints({1, 7}));
  answer(a, a.take_requests().at(0), t0 + 2ms, reply{}, errc::wrong_type);
  // The group in flight may have been taken in part (a script is not rolled back).
  EXPECT_EQ(a.take_requests().size(), 4u);
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::wrong_type);
}

TEST(LockSetAcquisitionTest, AGrantLandingAfterItsValidityIsGivenBackAndRetried) {
  two_group_set s;
  acquisition a(s.t, "id", no_deadline, 3, 0);
  a.begin_attempt(t0, {});
  answer(a, a.take_requests().at(0), t0 + 1ms, ints({1, 7}));
  answer(a, a.take_requests().at(0), t0 + 1000ms, ints({1, 7}));  // equal fences: no raise
  EXPECT_EQ(a.take_requests().size(), 4u);  // all of it, given back
  EXPECT_FALSE(a.take_outcome());
  EXPECT_TRUE(a.take_sleep());
  EXPECT_EQ(a.last_error(), errc::lease_expired);
}

TEST(LockSetAcquisitionTest, AStopDuringTheFenceRaiseGivesBackTheWonSetBeforeTheOutcome) {
  two_group_set s;
  acquisition a(s.t, "id", no_deadline, 3, 0);
  a.begin_attempt(t0, {});
  answer(a, a.take_requests().at(0), t0 + 1ms, ints({1, 7}));
  answer(a, a.take_requests().at(0), t0 + 2ms, ints({1, 9}));
  auto raises = a.take_requests();
  ASSERT_EQ(raises.size(), 2u);
  a.stop(t0 + 3ms, errc::cancelled);
  EXPECT_FALSE(a.take_outcome());  // the attempt in flight concludes first
  answer(a, raises[0], t0 + 4ms, reply::make_integer(9));
  answer(a, raises[1], t0 + 4ms, reply::make_integer(9));
  auto give_back = a.take_requests();
  ASSERT_EQ(give_back.size(), 4u);
  EXPECT_FALSE(a.take_outcome());  // awaited: a caller who retries at once meets none of it
  for (const auto& r : give_back) a.on_reply(r.id, t0 + 5ms, {}, reply::make_integer(1));
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::cancelled);
}

TEST(LockSetAcquisitionTest, TheDeadlineEndsAGroupThatNeverAnswers) {
  two_group_set s;
  acquisition a(s.t, "id", t0 + 100ms, INT_MAX, 0);
  a.on_start(t0);
  a.begin_attempt(t0, {});
  answer(a, a.take_requests().at(0), t0 + 1ms, ints({1, 7}));
  auto hung = a.take_requests().at(0);
  a.on_deadline(a.gives_up_at());
  EXPECT_EQ(a.take_requests().size(), 4u);  // both groups given back, the hung one too
  auto o = a.take_outcome();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ec, errc::timeout);
  EXPECT_FALSE(a.wants_fallback(hung.id));
}

}  // namespace
}  // namespace dlock::detail
