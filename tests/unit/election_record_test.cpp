// SPDX-License-Identifier: Apache-2.0
// The election observer's sans-io core: reads of the nodes' records in, events out.
#include "election_record.hpp"

#include <gtest/gtest.h>

namespace dlock::detail {
namespace {

using change = election_event::change;
using std::chrono::milliseconds;

record_entry elected(std::uint64_t term, const std::string& who) { return {term, 0, who, who}; }
record_entry resigned(std::uint64_t term, const std::string& who) { return {term, 1, who, who}; }

record_view node(std::optional<std::string> holder, long long pttl,
                 std::vector<record_entry> entries) {
  return record_view{{}, std::move(holder), pttl, std::move(entries)};
}
record_view down() { return record_view{make_error_code(errc::timeout), {}, -2, {}}; }

// A follower whose subscriptions are all confirmed, as a running observer's are.
record_follower listening(std::size_t nodes) {
  record_follower f(nodes);
  for (std::size_t i = 0; i < nodes; ++i) f.on_subscribed(i);
  return f;
}

std::string text(const std::vector<election_event>& events) {
  std::string out;
  for (const auto& e : events) {
    out += (e.what == change::elected ? "+" : e.what == change::ended ? "-" : "?") +
           std::to_string(e.term) + e.value + " ";
  }
  return out;
}

TEST(RecordFollowerTest, TheFirstReadReportsOnlyTheCurrentLeader) {
  record_follower f = listening(1);
  EXPECT_EQ(f.next_from(), "-");
  auto events = f.on_read({node("b", 300, {elected(5, "a"), resigned(5, "a"), elected(7, "b")})});
  EXPECT_EQ(text(events), "+7b ");
  EXPECT_EQ(f.next_from(), "7-0");
  EXPECT_EQ(f.recheck_after(), milliseconds(302));  // when b's key would expire
}

TEST(RecordFollowerTest, ARecordedLeaderWhoseKeyIsGoneIsNoLeader) {
  record_follower f = listening(1);
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {elected(7, "b")})})), "");
  EXPECT_FALSE(f.recheck_after());
  // Its successor is reported, and b's end is not (it ended before the observer started).
  EXPECT_EQ(text(f.on_read({node("c", 400, {elected(7, "b"), elected(9, "c")})})), "+9c ");
}

TEST(RecordFollowerTest, ChangesComeInTermOrderEachEndBeforeTheNextBegins) {
  record_follower f = listening(1);
  f.on_read({node("a", 300, {elected(3, "a")})});
  // a resigned and b, then c, were elected between two reads (b crashed unrecorded).
  auto events = f.on_read(
      {node("c", 300, {elected(3, "a"), resigned(3, "a"), elected(4, "b"), elected(6, "c")})});
  EXPECT_EQ(text(events), "-3a +4b -4b +6c ");
  // c's key expires: its term ended, though nobody recorded it.
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {})})), "-6c ");
  EXPECT_FALSE(f.recheck_after());
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {})})), "");  // once
}

TEST(RecordFollowerTest, AKeyTakenByAnotherOwnerEndsTheTerm) {
  record_follower f = listening(1);
  f.on_read({node("a", 300, {elected(3, "a")})});
  EXPECT_EQ(text(f.on_read({node("intruder", 300, {})})), "-3a ");
}

TEST(RecordFollowerTest, NodesAreMergedAndAMajorityMustHoldTheLeadersKey) {
  record_follower f = listening(3);
  // The announcement reached one node only; the key is held on two: a leader.
  auto events = f.on_read({node("a", 250, {elected(3, "a")}), node("a", 200, {}),
                           node(std::nullopt, -2, {})});
  EXPECT_EQ(text(events), "+3a ");
  EXPECT_EQ(f.recheck_after(), milliseconds(202));
  // One node down, one holding: not enough answers to judge; nothing reported, read again soon.
  EXPECT_EQ(text(f.on_read({node("a", 100, {}), down(), down()})), "");
  EXPECT_EQ(f.recheck_after(), milliseconds(250));
  // Two answer, one holds: the node that did not answer may hold it too; still undecided (and
  // the silent node is read a little later each time).
  EXPECT_EQ(text(f.on_read({node("a", 100, {}), node(std::nullopt, -2, {}), down()})), "");
  EXPECT_EQ(f.recheck_after(), milliseconds(500));
  EXPECT_EQ(text(f.on_read({node("a", 100, {}), node(std::nullopt, -2, {}), down()})), "");
  EXPECT_EQ(f.recheck_after(), milliseconds(1000));
  // Two answer without it: no quorum can hold it any more; the term has ended.
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {}), node(std::nullopt, -2, {}), down()})),
            "-3a ");
}

TEST(RecordFollowerTest, AFirstReadThatCannotJudgeReportsTheLeaderOnceItCan) {
  record_follower f = listening(3);
  EXPECT_EQ(text(f.on_read({node("a", 250, {elected(3, "a")}), node(std::nullopt, -2, {}),
                            down()})),
            "");
  EXPECT_EQ(text(f.on_read({node("a", 250, {}), node(std::nullopt, -2, {}), node("a", 240, {})})),
            "+3a ");
}

TEST(RecordFollowerTest, AResignationWhoseElectionWasNeverSeenReportsBoth) {
  record_follower f = listening(1);
  f.on_read({node("a", 300, {elected(3, "a")})});
  // b's election entry was trimmed from the record (16 entries) before this read.
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {resigned(5, "b")})})), "-3a +5b -5b ");
}

TEST(RecordFollowerTest, AResignationOfATermAlreadySeenToEndIsNotReportedAgain) {
  record_follower f = listening(1);
  f.on_read({node("a", 300, {elected(3, "a")})});
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {})})), "-3a ");  // its key expired
  // The lost leader resigns anyway (its lease object still reads as held): old news.
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {resigned(3, "a")})})), "");
  EXPECT_EQ(text(f.on_read({node("b", 300, {resigned(3, "a"), elected(4, "b")})})), "+4b ");
}

TEST(RecordFollowerTest, AReadThatMissedANodeIsRepeatedSoon) {
  record_follower f = listening(3);
  f.on_read({node(std::nullopt, -2, {}), node(std::nullopt, -2, {}), down()});
  EXPECT_EQ(f.recheck_after(), milliseconds(250));  // no term open, but C may have news
}

// A read whose parallel views straddle a takeover: a crashed a's key (and record) expired, b
// took the key on one node and announced term 5 there, and the other two were read just
// before b's key reached them. Their "no key" is older than term 5 and cannot end it.
TEST(RecordFollowerTest, ViewsOlderThanATermNeverEndIt) {
  record_follower f = listening(3);
  f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}), node("a", 300, {})});
  auto events = f.on_read(
      {node("b", 400, {elected(5, "b")}), node(std::nullopt, -2, {}), node(std::nullopt, -2, {})});
  EXPECT_EQ(text(events), "-3a +5b ");
  EXPECT_EQ(f.recheck_after(), milliseconds(0));  // the straddle is settled by the next read
  // The next read was sent once term 5 was known: every view is newer than it.
  EXPECT_EQ(text(f.on_read({node("b", 350, {elected(5, "b")}), node("b", 360, {}),
                            node("b", 370, {})})),
            "");
  EXPECT_EQ(f.recheck_after(), milliseconds(352));
  // Its key gone from two nodes in a read sent after the term began: it has ended.
  EXPECT_EQ(text(f.on_read({node("b", 100, {elected(5, "b")}), node(std::nullopt, -2, {}),
                            node(std::nullopt, -2, {})})),
            "-5b ");
}

// The same straddle in an observer's first read: b is reported once the views can tell.
TEST(RecordFollowerTest, AFirstReadThatStraddlesATakeoverReportsTheNewLeaderNextRead) {
  record_follower f = listening(3);
  EXPECT_EQ(
      text(f.on_read({node("b", 400, {elected(3, "a"), elected(5, "b")}),
                      node(std::nullopt, -2, {elected(3, "a")}), node(std::nullopt, -2, {})})),
      "");
  EXPECT_EQ(f.recheck_after(), milliseconds(0));
  EXPECT_EQ(text(f.on_read({node("b", 350, {elected(5, "b")}), node("b", 360, {}),
                            node("b", 370, {})})),
            "+5b ");
}

// A view that holds the term's entry was read after the term began on that node: its "no key"
// counts, with the views read afterwards.
TEST(RecordFollowerTest, AViewThatShowsTheTermCanEndIt) {
  record_follower f = listening(3);
  f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}), node("a", 300, {})});
  // b's term began and its key is already gone from two nodes that recorded it (a lost lease).
  auto events =
      f.on_read({node("b", 400, {elected(5, "b")}), node(std::nullopt, -2, {elected(5, "b")}),
                 node(std::nullopt, -2, {elected(5, "b")})});
  EXPECT_EQ(text(events), "-3a +5b -5b ");
}

// A node that stays down is read less and less often, up to every 4 s; once all answer, the
// next silence starts again at 250 ms.
TEST(RecordFollowerTest, ASilentNodeIsReadLessAndLessOften) {
  record_follower f = listening(3);
  std::vector<long long> waits;
  for (int i = 0; i < 7; ++i) {
    f.on_read({node(std::nullopt, -2, {}), node(std::nullopt, -2, {}), down()});
    waits.push_back(f.recheck_after().value_or(milliseconds(-1)).count());
  }
  EXPECT_EQ(waits, (std::vector<long long>{250, 500, 1000, 2000, 4000, 4000, 4000}));
  // With a leader, its key's expiry still comes when due.
  f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}), down()});
  EXPECT_EQ(f.recheck_after(), milliseconds(302));
  f.on_read({node("a", 300, {}), node("a", 300, {}), node("a", 300, {})});
  EXPECT_EQ(f.recheck_after(), milliseconds(302));
  f.on_read({node("a", 9000, {}), node("a", 9000, {}), down()});
  EXPECT_EQ(f.recheck_after(), milliseconds(250));
}

// The observer's subscriptions on two of three nodes dropped: a term may have begun and ended
// unheard meanwhile, and its record expired with its key. The read once they are back finds the
// record no longer reaching back to term 3: what came between is reported as missed, after the
// end of term 3 and before term 9.
TEST(RecordFollowerTest, AnObserverThatCouldNotHearSaysWhereItMayHaveMissedChanges) {
  record_follower f = listening(3);
  f.start_read();
  f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}), node("a", 300, {})});
  f.on_unsubscribed(0);
  EXPECT_EQ(f.start_read(), "3-0");
  // Still two subscriptions of three: every term's announcement reaches one of them.
  EXPECT_EQ(text(f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}),
                            node("a", 300, {})})),
            "");
  f.on_unsubscribed(1);
  f.start_read();
  EXPECT_EQ(text(f.on_read({down(), down(), node("a", 10, {elected(3, "a")})})), "");
  f.on_subscribed(0);
  f.on_subscribed(1);
  f.start_read();
  EXPECT_EQ(text(f.on_read({node("c", 400, {elected(9, "c")}), node("c", 400, {elected(9, "c")}),
                            node("c", 400, {elected(9, "c")})})),
            "-3a ?3 +9c ");
  // Once: the reads that follow vouch for what they read.
  f.start_read();
  EXPECT_EQ(text(f.on_read({node("c", 300, {elected(9, "c")}), node("c", 300, {}),
                            node("c", 300, {})})),
            "");
}

// After the same break, a record that still holds the last id taken shows every change since.
TEST(RecordFollowerTest, ARecordThatReachesBackShowsThatNothingWasMissed) {
  record_follower f = listening(1);
  f.start_read();
  f.on_read({node("a", 300, {elected(3, "a")})});
  f.on_unsubscribed(0);
  f.start_read();
  EXPECT_EQ(text(f.on_read({down()})), "");  // too few answers: checked at the next read
  f.on_subscribed(0);
  f.start_read();
  EXPECT_EQ(
      text(f.on_read({node("b", 300, {elected(3, "a"), resigned(3, "a"), elected(5, "b")})})),
      "-3a +5b ");
}

// Without a break, a record that no longer reaches back is one that expired with a crashed
// leader's key just before the next took over: nothing was missed (the subscriptions would have
// heard it).
TEST(RecordFollowerTest, ATakeoverRightAfterAnExpiryIsNoGap) {
  record_follower f = listening(1);
  f.start_read();
  f.on_read({node("a", 300, {elected(3, "a")})});
  f.start_read();
  EXPECT_EQ(text(f.on_read({node("b", 400, {elected(5, "b")})})), "-3a +5b ");
}

// A message names the entry its node just recorded. Gone from that node's record by the read
// that followed (the observer's process was paused for longer than the record lived): missed.
TEST(RecordFollowerTest, AChangeHeardOfButGoneBeforeTheReadWasMissed) {
  record_follower f = listening(3);
  f.start_read();
  f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}), node("a", 300, {})});
  f.on_heard(1, "5-0");
  f.on_heard(1, "not an id");
  f.start_read();
  f.on_heard(2, "8-0");  // after the read went out: the next read checks it
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {}), node(std::nullopt, -2, {}),
                            node(std::nullopt, -2, {})})),
            "-3a ?3 ");
  f.start_read();
  EXPECT_EQ(text(f.on_read({node("h", 300, {elected(8, "h")}), node("h", 300, {}),
                            node("h", 300, {elected(8, "h")})})),
            "+8h ");
  // Heard and found: nothing missed.
  f.on_heard(0, "8-1");
  f.start_read();
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {elected(8, "h"), resigned(8, "h")}),
                            node(std::nullopt, -2, {}), node(std::nullopt, -2, {})})),
            "-8h ");
}

// A node that did not answer keeps what it was heard saying for a read that it answers.
TEST(RecordFollowerTest, AHeardChangeIsCheckedOnTheNodeThatAnnouncedIt) {
  record_follower f = listening(3);
  f.start_read();
  f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}), node("a", 300, {})});
  f.on_heard(2, "5-0");
  f.start_read();
  EXPECT_EQ(text(f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}), down()})), "");
  f.start_read();
  EXPECT_EQ(text(f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}),
                            node(std::nullopt, -2, {})})),
            "?3 ");
}

// More than 16 changes between two reads: the record, at its full length, starts after the last
// id taken.
TEST(RecordFollowerTest, ARecordTrimmedPastTheLastIdTakenIsAGap) {
  record_follower f = listening(1);
  f.start_read();
  f.on_read({node("a", 300, {elected(3, "a")})});
  std::vector<record_entry> record;
  for (std::uint64_t t = 4; t < 12; ++t) {
    record.push_back(elected(t, "x"));
    record.push_back(resigned(t, "x"));
  }
  f.start_read();
  auto events = text(f.on_read({node(std::nullopt, -2, record)}));
  EXPECT_EQ(events.substr(0, 17), "-3a ?3 +4x -4x +5") << events;
}

TEST(RecordFollowerTest, TheCurrentLeaderNeedsAQuorumOfAnswers) {
  auto verdict = current_leader({node("a", 100, {elected(3, "a")}), down(), down()});
  EXPECT_EQ(verdict.ec, errc::quorum_not_reached);
  verdict = current_leader({node("a", 100, {elected(3, "a")}), node("a", 90, {}), down()});
  EXPECT_FALSE(verdict.ec);
  EXPECT_EQ(verdict.leader.term, 3u);
  EXPECT_EQ(verdict.leader.value, "a");
  verdict = current_leader({node("a", 100, {elected(3, "a"), resigned(3, "a")})});
  EXPECT_FALSE(verdict.leader);  // resigned, though its key is still there
  // One holder answered, one node without the key, one silent: it may still lead.
  verdict = current_leader({node("a", 100, {elected(3, "a")}), node(std::nullopt, -2, {}), down()});
  EXPECT_EQ(verdict.ec, errc::quorum_not_reached);
}


// A subscription that never came up (its SUBSCRIBE failed) hears nothing either: with one node
// of three never subscribed and another's subscription lost, a term may begin and end unheard.
TEST(RecordFollowerTest, ANodeThatNeverSubscribedIsNotListening) {
  record_follower f(3);
  f.on_subscribed(0);
  f.on_subscribed(1);
  f.on_unsubscribed(2);  // its first SUBSCRIBE failed
  f.start_read();
  f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}), node("a", 300, {})});
  f.on_unsubscribed(1);
  f.start_read();
  f.on_subscribed(1);
  // Term 3's record expired on every node with its key: nothing reaches back.
  EXPECT_EQ(text(f.on_read({node("c", 300, {elected(9, "c")}), node("c", 300, {elected(9, "c")}),
                            node(std::nullopt, -2, {})})),
            "-3a ?3 +9c ");
}

// A node's record vouches for that node only: with 5 nodes, a term recorded on three of them
// (whose record then expired) is missed though two records still reach back; three that reach
// back meet every quorum, and show that nothing was.
TEST(RecordFollowerTest, RecordsReachingBackOnTooFewNodesDoNotVouchForTheRest) {
  for (int reaching : {2, 3}) {
    SCOPED_TRACE(reaching);
    record_follower f = listening(5);
    f.start_read();
    std::vector<record_view> first(5, node("a", 5000, {elected(3, "a")}));
    f.on_read(first);
    f.on_unsubscribed(0);
    f.on_unsubscribed(1);
    f.on_unsubscribed(2);
    f.start_read();
    for (std::size_t i = 0; i < 3; ++i) f.on_subscribed(i);
    std::vector<record_view> later;
    for (int i = 0; i < 5; ++i) {
      later.push_back(i < reaching ? node("a", 1000, {elected(3, "a")})
                                   : node(std::nullopt, -2, {}));
    }
    // Two: term 3's key is gone from a quorum (ended), and what followed may be missed.
    EXPECT_EQ(text(f.on_read(later)), reaching == 2 ? "-3a ?3 " : "");
  }
}

// Ids heard from a node that does not answer wait for its answer, but not without bound: the
// oldest are dropped, and then changes may have been missed.
TEST(RecordFollowerTest, HeardIdsThatCannotBeCheckedAreBoundedAndCountAsMissed) {
  record_follower f = listening(3);
  f.start_read();
  f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {}), node("a", 300, {})});
  std::string seen;
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 10; ++i) f.on_heard(2, std::to_string(10 + round * 10 + i) + "-0");
    f.start_read();
    seen += text(
        f.on_read({node("a", 300, {elected(3, "a")}), node("a", 300, {elected(3, "a")}), down()}));
  }
  EXPECT_EQ(seen, "?3 ");  // once, when the first ids were dropped unchecked
  f.start_read();
  EXPECT_EQ(text(f.on_read({node("z", 300, {elected(3, "a"), elected(2000, "z")}),
                            node("z", 300, {elected(2000, "z")}), down()})),
            "-3a +2000z ");
}

}  // namespace
}  // namespace dlock::detail
