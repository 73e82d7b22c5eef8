// semaphore_wait: decoding the acquire scripts' replies and pacing the attempts, with no server
// and no clock (time points are made up).
#include "algo/semaphore_wait.hpp"

#include <gtest/gtest.h>

#include <climits>

namespace dlock::detail {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using kind = semaphore_wait::action::kind;

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

semaphore_wait::config base_config() {
  semaphore_wait::config c;
  c.attempts = 3;
  c.ttl = 1000ms;
  c.drift_factor = 0.01;
  c.retry_delay = 40ms;
  return c;
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

TEST(SemaphoreWaitTest, GrantIsValidForTtlMinusDriftFromTheAttemptsStart) {
  semaphore_wait w(base_config());
  w.begin_attempt(t0);
  auto a = w.on_reply(t0 + 5ms, {}, parse(ints({1, 7}), false), 0);
  ASSERT_EQ(a.what, kind::granted);
  EXPECT_EQ(a.fence, 7);
  EXPECT_EQ(a.valid_until, t0 + 1000ms - 12ms);  // drift = 1000 * 0.01 + 2 ms
}

TEST(SemaphoreWaitTest, GrantArrivingAfterItsValidityIsRetriedThenDropped) {
  auto c = base_config();
  c.attempts = 2;
  semaphore_wait w(c);
  w.begin_attempt(t0);
  auto late = w.on_reply(t0 + 2s, {}, parse(ints({1, 7}), false), 0);
  EXPECT_EQ(late.what, kind::retry);
  w.begin_attempt(t0 + 3s);
  auto again = w.on_reply(t0 + 5s, {}, parse(ints({1, 8}), false), 0);
  ASSERT_EQ(again.what, kind::give_up);
  EXPECT_EQ(again.ec, errc::lease_expired);
  EXPECT_TRUE(again.cleanup);  // the entry is ours and must go
}

TEST(SemaphoreWaitTest, RetriesWithJitterUntilAttemptsRunOut) {
  semaphore_wait w(base_config());
  for (int i = 0; i < 2; ++i) {
    w.begin_attempt(t0);
    auto random = static_cast<std::uint64_t>(i) * 7919;
    auto a = w.on_reply(t0, {}, parse(ints({0, 100'000}), false), random);
    ASSERT_EQ(a.what, kind::retry);
    EXPECT_GE(a.delay, 20ms);
    EXPECT_LE(a.delay, 40ms);
  }
  w.begin_attempt(t0);
  auto last = w.on_reply(t0, {}, parse(ints({0, 100'000}), false), 0);
  ASSERT_EQ(last.what, kind::give_up);
  EXPECT_EQ(last.ec, errc::not_acquired);
  EXPECT_FALSE(last.cleanup);  // an unfair "no" leaves nothing behind
  EXPECT_EQ(w.attempts_made(), 3);
}

TEST(SemaphoreWaitTest, UnfairSleepsNoLongerThanUntilTheEarliestHolderExpires) {
  semaphore_wait w(base_config());
  w.begin_attempt(t0);
  auto a = w.on_reply(t0, {}, parse(ints({0, 3}), false), 0);
  ASSERT_EQ(a.what, kind::retry);
  EXPECT_EQ(a.delay, 4ms);
}

TEST(SemaphoreWaitTest, DeadlineEndsTheWait) {
  auto c = base_config();
  c.attempts = INT_MAX;
  c.deadline = t0 + 100ms;
  semaphore_wait w(c);
  w.begin_attempt(t0);
  EXPECT_EQ(w.on_reply(t0 + 10ms, {}, parse(ints({0, 100'000}), false), 0).what, kind::retry);
  w.begin_attempt(t0 + 80ms);
  auto a = w.on_reply(t0 + 90ms, {}, parse(ints({0, 100'000}), false), 0);  // 90 + >= 20 > 100
  EXPECT_EQ(a.what, kind::give_up);
  EXPECT_EQ(a.ec, errc::not_acquired);
}

TEST(SemaphoreWaitTest, FairWaiterQueuesUntilItsLastAttempt) {
  auto c = base_config();
  c.fair = true;
  c.queue_ttl = 150ms;
  c.attempts = 2;
  semaphore_wait w(c);
  EXPECT_EQ(w.begin_attempt(t0), 150ms);
  auto queued = w.on_reply(t0, {}, parse(ints({0, 4, 2}), true), 0);
  EXPECT_EQ(queued.what, kind::retry);
  EXPECT_EQ(w.begin_attempt(t0 + 40ms), 0ms);  // last attempt: the server must not keep us
  auto a = w.on_reply(t0 + 41ms, {}, parse(ints({0, 0, 1}), true), 0);
  EXPECT_EQ(a.what, kind::give_up);
  EXPECT_FALSE(a.cleanup);
}

TEST(SemaphoreWaitTest, FairWaiterThatGivesUpQueuedMustLeave) {
  auto c = base_config();
  c.fair = true;
  c.queue_ttl = 150ms;
  c.attempts = INT_MAX;
  c.deadline = t0 + 50ms;
  semaphore_wait w(c);
  EXPECT_EQ(w.begin_attempt(t0), 150ms);  // could not know this is the last one
  auto a = w.on_reply(t0 + 45ms, {}, parse(ints({0, 4, 2}), true), 0);
  ASSERT_EQ(a.what, kind::give_up);
  EXPECT_TRUE(a.cleanup);
  // Near the deadline the waiter does not ask to be queued at all.
  semaphore_wait w2(c);
  EXPECT_EQ(w2.begin_attempt(t0 + 31ms), 0ms);
}

TEST(SemaphoreWaitTest, LastAttemptIsKnownInBothVariants) {
  // Either variant queues a waiter for wake-ups only when another attempt can follow.
  for (bool fair : {false, true}) {
    auto c = base_config();
    c.fair = fair;
    c.attempts = 2;
    semaphore_wait w(c);
    w.begin_attempt(t0);
    EXPECT_FALSE(w.last_attempt()) << fair;
    EXPECT_EQ(w.on_reply(t0, {}, parse(fair ? ints({0, 4, 1}) : ints({0, 9}), fair), 0).what,
              kind::retry);
    w.begin_attempt(t0 + 40ms);
    EXPECT_TRUE(w.last_attempt()) << fair;  // out of attempts
    c.attempts = INT_MAX;
    c.deadline = t0 + 50ms;
    semaphore_wait near(c);
    near.begin_attempt(t0 + 31ms);
    EXPECT_TRUE(near.last_attempt()) << fair;  // no sleep of >= 20 ms ends before the deadline
    semaphore_wait early(c);
    early.begin_attempt(t0);
    EXPECT_FALSE(early.last_attempt()) << fair;
  }
}

TEST(SemaphoreWaitTest, TransportErrorsRetryButLeaveCleanupWhenGivingUp) {
  auto c = base_config();
  c.attempts = 2;
  semaphore_wait w(c);
  w.begin_attempt(t0);
  EXPECT_EQ(w.on_reply(t0, errc::timeout, {}, 0).what, kind::retry);
  w.begin_attempt(t0);
  auto a = w.on_reply(t0, errc::connection_lost, {}, 0);
  ASSERT_EQ(a.what, kind::give_up);
  EXPECT_EQ(a.ec, errc::connection_lost);
  EXPECT_TRUE(a.cleanup);  // the script may have run
}

TEST(SemaphoreWaitTest, IncurableErrorsEndAtOnce) {
  semaphore_wait w(base_config());
  w.begin_attempt(t0);
  auto a = w.on_reply(t0, errc::wrong_type, {}, 0);
  EXPECT_EQ(a.what, kind::give_up);
  EXPECT_EQ(a.ec, errc::wrong_type);
}

}  // namespace
}  // namespace dlock::detail
