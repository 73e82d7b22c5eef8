// SPDX-License-Identifier: Apache-2.0
// Leader election against real redis-server processes: one leader at a time, terms that grow,
// observers that see each change in order, and leadership that ends when its lease does.
#include "dlock/election.hpp"

#include <gtest/gtest.h>

#include <asio/use_future.hpp>

#include <future>
#include <thread>
#include <vector>

#include "dlock/key_layout.hpp"
#include "support/checks.hpp"
#include "support/commandstats.hpp"
#include "support/redis_server.hpp"
#include "support/seen_events.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using change = election_event::change;

std::string describe(const std::vector<election_event>& events) {
  std::string out;
  for (const auto& e : events) {
    out += std::string(e.what == change::elected ? " elected("
                       : e.what == change::ended ? " ended("
                                                 : " missed(") +
           std::to_string(e.term) + "," + e.value + ")";
  }
  return out;
}

class ElectionTest : public ::testing::Test {
 protected:
  election_options fast() {
    return election_options{.lock = {.ttl = 400ms, .retry_delay = 50ms}};
  }
  redis_server server_;
  client client_{server_.url()};
};

TEST_F(ElectionTest, ACandidateLeadsAndOthersReadItsValueAndTerm) {
  election a{client_, test_key(), "host-a:8080", fast()};
  election reader{client_, test_key(), "", fast()};
  EXPECT_FALSE(reader.leader());  // nobody campaigned yet
  auto held = a.campaign();
  ASSERT_TRUE(held);
  auto now = reader.leader();
  EXPECT_EQ(now.term, held.fencing_token());
  EXPECT_EQ(now.value, "host-a:8080");
  EXPECT_EQ(now.owner, held.value());
  // The record expires with the lease.
  auto record_ttl = client_.exec({"PTTL", election_record_key(a.key())}).integer();
  EXPECT_GT(record_ttl, 0);
  EXPECT_LE(record_ttl, 400);
}

TEST_F(ElectionTest, OneLeaderAtATimeAndTheNextTermIsLater) {
  election a{client_, test_key(), "a", fast()};
  election b{client_, test_key(), "b", fast()};
  auto first = a.campaign();
  auto second = std::async(std::launch::async, [&] { return b.campaign(); });
  EXPECT_EQ(second.wait_for(300ms), std::future_status::timeout);  // a leads, kept alive
  EXPECT_EQ(a.leader().value, "a");
  auto term = first.fencing_token();
  EXPECT_FALSE(a.resign(first));
  EXPECT_FALSE(first);
  ASSERT_EQ(second.wait_for(test::scaled(5s)), std::future_status::ready);
  auto next = second.get();
  EXPECT_GT(next.fencing_token(), term);
  EXPECT_EQ(a.leader().value, "b");
  EXPECT_EQ(a.leader().term, next.fencing_token());
}

TEST_F(ElectionTest, LeadershipOutlivesItsTtlThroughTheWatchdog) {
  election a{client_, test_key(), "a", fast()};
  auto held = a.campaign();
  std::this_thread::sleep_for(1200ms);  // three TTLs
  EXPECT_FALSE(held.lost().stop_requested());
  EXPECT_EQ(a.leader().term, held.fencing_token());
  // The record was renewed with the lease.
  EXPECT_GT(client_.exec({"PTTL", election_record_key(a.key())}).integer(), 0);
}

TEST_F(ElectionTest, ObserversSeeEveryChangeInOrderWithoutPolling) {
  election watcher{client_, test_key(), "", fast()};
  seen_events seen;
  auto watching = watcher.observe(seen.sink());
  election a{client_, test_key(), "a", fast()};
  election b{client_, test_key(), "b", fast()};
  election c{client_, test_key(), "c", fast()};

  auto la = a.campaign();
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }));
  a.resign(la);
  ASSERT_TRUE(eventually([&] { return seen.size() == 2; }));
  auto lb = b.campaign();
  auto b_term = lb.fencing_token();
  ASSERT_TRUE(eventually([&] { return seen.size() == 3; }));
  lb.detach();  // b "crashes": its key expires after the TTL, and nobody resigns
  ASSERT_TRUE(eventually([&] { return seen.size() == 4; }));
  auto lc = c.campaign();
  ASSERT_TRUE(eventually([&] { return seen.size() == 5; }));

  auto events = seen.copy();
  ASSERT_EQ(events.size(), 5u) << describe(events);
  std::vector<change> kinds;
  for (const auto& e : events) kinds.push_back(e.what);
  EXPECT_EQ(kinds, (std::vector<change>{change::elected, change::ended, change::elected,
                                        change::ended, change::elected}))
      << describe(events);
  EXPECT_EQ(events[0].value, "a");
  EXPECT_EQ(events[1].term, events[0].term);
  EXPECT_EQ(events[2].value, "b");
  EXPECT_EQ(events[2].term, b_term);
  EXPECT_EQ(events[3].term, b_term);
  EXPECT_EQ(events[4].value, "c");
  EXPECT_EQ(events[4].term, lc.fencing_token());
  EXPECT_LT(events[0].term, events[2].term);
  EXPECT_LT(events[2].term, events[4].term);
}

TEST_F(ElectionTest, AnObserverThatStartsLateSeesTheCurrentLeaderFirst) {
  election a{client_, test_key(), "a", fast()};
  election old{client_, test_key(), "old", fast()};
  auto gone = old.campaign();
  old.resign(gone);
  auto held = a.campaign();
  seen_events seen;
  auto watching = a.observe(seen.sink());
  ASSERT_TRUE(eventually([&] { return seen.size() >= 1; }));
  std::this_thread::sleep_for(100ms);
  auto events = seen.copy();
  ASSERT_EQ(events.size(), 1u) << describe(events);  // the history before it is not replayed
  EXPECT_EQ(events[0].what, change::elected);
  EXPECT_EQ(events[0].term, held.fencing_token());
  EXPECT_EQ(events[0].value, "a");
}

TEST_F(ElectionTest, ALeaderWhoseKeyIsTakenLearnsItAndObserversSeeTheEnd) {
  election a{client_, test_key(), "a", fast()};
  seen_events seen;
  auto watching = a.observe(seen.sink());
  auto held = a.campaign();
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }));
  client_.exec({"DEL", a.key()});  // an operator, or a split brain elsewhere
  EXPECT_TRUE(eventually([&] { return held.lost().stop_requested(); }));
  ASSERT_TRUE(eventually([&] { return seen.size() == 2; }));
  EXPECT_EQ(seen.copy()[1].what, change::ended);
  EXPECT_FALSE(a.leader());
}

TEST_F(ElectionTest, AStoppedObservationCallsNoMore) {
  election a{client_, test_key(), "a", fast()};
  seen_events seen;
  auto watching = a.observe(seen.sink());
  auto first = a.campaign();
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }));
  watching.stop();
  a.resign(first);
  auto second = a.campaign();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(seen.size(), 1u);
}

TEST_F(ElectionTest, ACallbackMayStopItsOwnObservation) {
  election a{client_, test_key(), "a", fast()};
  observation watching;
  std::atomic<int> calls{0};
  std::promise<void> stopped;
  watching = a.observe([&](const election_event&) {
    ++calls;
    watching.stop();
    stopped.set_value();
  });
  auto held = a.campaign();
  ASSERT_EQ(stopped.get_future().wait_for(test::scaled(5s)), std::future_status::ready);
  a.resign(held);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(ElectionTest, AsyncCampaignCompletesWhenLeader) {
  election a{client_, test_key(), "a", fast()};
  election b{client_, test_key(), "b", fast()};
  auto first = a.campaign();
  auto pending = b.async_campaign(asio::use_future);
  EXPECT_EQ(pending.wait_for(200ms), std::future_status::timeout);
  a.resign(first);
  ASSERT_EQ(pending.wait_for(test::scaled(5s)), std::future_status::ready);
  auto held = pending.get();
  ASSERT_TRUE(held);
  EXPECT_EQ(a.leader().value, "b");
  EXPECT_EQ(a.leader().term, held.fencing_token());
}

TEST_F(ElectionTest, CampaignUntilGivesUpAtItsDeadline) {
  election a{client_, test_key(), "a", fast()};
  election b{client_, test_key(), "b", fast()};
  auto held = a.campaign();
  std::error_code ec;
  auto none = b.campaign_until(std::chrono::steady_clock::now() + 200ms, ec);
  EXPECT_FALSE(none);
  EXPECT_EQ(ec, errc::not_acquired);
  EXPECT_EQ(a.leader().value, "a");
}

// The sync campaign's wait_control reaches the lock's acquisition: on_retry hears of each
// failed round, and its false ends the campaign with that round's error.
TEST_F(ElectionTest, ACampaignsOnRetryHearsOfEachFailedRoundAndMayEndIt) {
  election a{client_, test_key(), "a", fast()};
  election b{client_, test_key(), "b", fast()};
  auto held = a.campaign();
  int rounds = 0;  // written on the I/O thread, read after the campaign returned
  wait_control control{.stop = {}, .on_retry = [&](const wait_progress& p) {
                         ++rounds;
                         return p.attempts < 3;
                       }};
  std::error_code ec;
  auto t0 = std::chrono::steady_clock::now();
  auto none = b.campaign_until(t0 + 20s, control, ec);
  EXPECT_FALSE(none);
  EXPECT_EQ(ec, errc::not_acquired);
  EXPECT_EQ(rounds, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, test::scaled(5s));
}

TEST_F(ElectionTest, BadArgumentsAreRefusedBeforeAnyIo) {
  auto refused = [](auto make) { return test::is_invalid_argument(make); };
  EXPECT_TRUE(refused([&] { election{client_, "", "v"}; }));
  EXPECT_TRUE(refused([&] { election{client_, "x", std::string(64 * 1024 + 1, 'v')}; }));
  EXPECT_TRUE(refused([&] { election{client_, "x", "v", {.lock = {.ttl = 0ms}}}; }));
  EXPECT_TRUE(refused([&] { election{client_, "x", "v", {.lock = {.copies = 3}}}; }));
}

TEST_F(ElectionTest, ARecordOfAnotherTypeIsAClearError) {
  election a{client_, test_key(), "a", fast()};
  client_.exec({"SET", election_record_key(a.key()), "not a stream"});
  std::error_code ec;
  auto held = a.campaign_until(std::chrono::steady_clock::now() + 1s, ec);
  EXPECT_FALSE(held);
  EXPECT_EQ(ec, errc::wrong_type);
}

// An observer cut off from the node (its user disabled, its connections killed) for longer
// than a TTL while leaders crash: their records expire with their keys, so the servers keep no
// trace of the term in between. The observer says that it may have missed terms, after the end
// of the term it saw and before the term it finds.
class ElectionCutOffTest : public ElectionTest {
 protected:
  void SetUp() override {
    client_.exec({"ACL", "SETUSER", "watcher", "reset", "on", ">pw", "+@all", "~*", "&*"});
  }
  client watcher_node() {
    client_options o;
    o.user = "watcher";
    o.password = "pw";
    return client{server_.url(), o};
  }
  void cut_off() {
    client_.exec({"ACL", "SETUSER", "watcher", "off"});
    client_.exec({"CLIENT", "KILL", "USER", "watcher"});
  }
  void reconnect() { client_.exec({"ACL", "SETUSER", "watcher", "on"}); }
};

TEST_F(ElectionCutOffTest, TermsThatLeftNoTraceAreReportedAsMissed) {
  election watcher{watcher_node(), test_key(), "", fast()};
  election a{client_, test_key(), "a", fast()};
  election b{client_, test_key(), "b", fast()};
  election c{client_, test_key(), "c", fast()};
  seen_events seen;
  auto watching = watcher.observe(seen.sink());
  auto la = a.campaign();
  auto a_term = la.fencing_token();
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }));
  cut_off();
  auto record_gone = [&] {
    return client_.exec({"EXISTS", election_record_key(a.key())}).integer() == 0;
  };
  la.detach();  // a crashes; its key and its record expire
  ASSERT_TRUE(eventually(record_gone));
  auto lb = b.campaign();
  lb.detach();  // so does b, whose term nobody else sees
  ASSERT_TRUE(eventually(record_gone));
  auto lc = c.campaign();
  reconnect();
  ASSERT_TRUE(eventually([&] {
    auto events = seen.copy();
    return events.size() >= 3 && events.back().what == change::elected;
  }));
  auto events = seen.copy();
  ASSERT_EQ(events.size(), 4u) << describe(events);
  EXPECT_EQ(events[0].what, change::elected);
  EXPECT_EQ(events[1].what, change::ended);
  EXPECT_EQ(events[1].term, a_term);
  EXPECT_EQ(events[2].what, change::missed) << describe(events);
  EXPECT_EQ(events[2].term, events[1].term);  // the terms missed came after it
  EXPECT_EQ(events[3].what, change::elected);
  EXPECT_EQ(events[3].term, lc.fencing_token());
  EXPECT_EQ(events[3].value, "c");
}

// The same cut-off while the leader lives on: its record still holds its term, so the observer
// knows that it missed nothing, and says nothing.
TEST_F(ElectionCutOffTest, AnObserverWhoseRecordReachesBackMissesNothing) {
  election watcher{watcher_node(), test_key(), "", fast()};
  election a{client_, test_key(), "a", fast()};
  seen_events seen;
  auto watching = watcher.observe(seen.sink());
  auto la = a.campaign();
  auto term = la.fencing_token();
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }));
  cut_off();
  std::this_thread::sleep_for(1s);  // over two TTLs, a renewing all the while
  reconnect();
  // The observer reads once its subscription is back (the reads in between fail): the first
  // read of the server since then is its catch-up.
  auto reads = [&] { return test::command_calls(client_)["xrange"]; };
  auto before = reads();
  ASSERT_TRUE(eventually([&] { return reads() > before; }));
  a.resign(la);
  ASSERT_TRUE(eventually([&] { return seen.size() >= 2; }));
  std::this_thread::sleep_for(100ms);
  auto events = seen.copy();
  ASSERT_EQ(events.size(), 2u) << describe(events);
  EXPECT_EQ(events[1].what, change::ended);
  EXPECT_EQ(events[1].term, term);
}

class ElectionRedlockTest : public ::testing::Test {
 protected:
  redis_server s1_, s2_, s3_;
  std::vector<client> nodes_{client{s1_.url()}, client{s2_.url()}, client{s3_.url()}};
};

// One node down: the observer reads the others less and less often (backing off to 4 s, not
// every 250 ms for as long as the node is down), and news from the nodes that answer still comes
// at once, through their subscriptions.
TEST_F(ElectionRedlockTest, AnObserverBacksOffWhileANodeIsDownAndStillHearsNews) {
  election_options o{.lock = {.ttl = 500ms, .retry_delay = 50ms}};
  s3_.kill();
  election watcher{nodes_, test_key(), "", o};
  seen_events seen;
  client live{s1_.url()};
  auto reads = [&] { return test::command_calls(live)["xrange"]; };
  auto watching = watcher.observe(seen.sink());
  std::this_thread::sleep_for(1s);  // its first reads, and one for each subscription
  auto before = reads();
  std::this_thread::sleep_for(5s);
  auto in_five_seconds = reads() - before;
  EXPECT_LE(in_five_seconds, 6) << "every 250 ms would be 20";
  EXPECT_GE(in_five_seconds, 1) << "it still looks for the node";
  election a{nodes_, test_key(), "a", o};
  auto la = a.campaign();
  // Through the subscriptions of s1 and s2, not at the next backoff read (about 1.7 s away).
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }, 1s));
  EXPECT_EQ(seen.copy()[0].term, la.fencing_token());
}

TEST_F(ElectionRedlockTest, AMajorityElectsAndObserversMergeTheNodes) {
  election_options o{.lock = {.ttl = 500ms, .retry_delay = 50ms}};
  election a{nodes_, test_key(), "a", o};
  election b{nodes_, test_key(), "b", o};
  seen_events seen;
  auto watching = a.observe(seen.sink());
  auto la = a.campaign();
  ASSERT_TRUE(eventually([&] { return seen.size() == 1; }));
  s3_.kill();  // a minority down: still a leader, still readable
  EXPECT_EQ(b.leader().value, "a");
  auto next = std::async(std::launch::async, [&] { return b.campaign(); });
  a.resign(la);
  ASSERT_EQ(next.wait_for(test::scaled(10s)), std::future_status::ready);
  auto lb = next.get();
  ASSERT_TRUE(eventually([&] { return seen.size() == 3; }));
  auto events = seen.copy();
  EXPECT_EQ(events[1].what, change::ended) << describe(events);
  EXPECT_EQ(events[2].value, "b");
  EXPECT_EQ(events[2].term, lb.fencing_token());
  EXPECT_GT(events[2].term, events[0].term);
}

}  // namespace
}  // namespace dlock::test
