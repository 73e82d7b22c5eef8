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

std::string text(const std::vector<election_event>& events) {
  std::string out;
  for (const auto& e : events) {
    out += (e.what == change::elected ? "+" : "-") + std::to_string(e.term) + e.value + " ";
  }
  return out;
}

TEST(RecordFollowerTest, TheFirstReadReportsOnlyTheCurrentLeader) {
  record_follower f(1);
  EXPECT_EQ(f.next_from(), "-");
  auto events = f.on_read({node("b", 300, {elected(5, "a"), resigned(5, "a"), elected(7, "b")})});
  EXPECT_EQ(text(events), "+7b ");
  EXPECT_EQ(f.next_from(), "7-0");
  EXPECT_EQ(f.recheck_after(), milliseconds(302));  // when b's key would expire
}

TEST(RecordFollowerTest, ARecordedLeaderWhoseKeyIsGoneIsNoLeader) {
  record_follower f(1);
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {elected(7, "b")})})), "");
  EXPECT_FALSE(f.recheck_after());
  // Its successor is reported, and b's end is not (it ended before the observer started).
  EXPECT_EQ(text(f.on_read({node("c", 400, {elected(7, "b"), elected(9, "c")})})), "+9c ");
}

TEST(RecordFollowerTest, ChangesComeInTermOrderEachEndBeforeTheNextBegins) {
  record_follower f(1);
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
  record_follower f(1);
  f.on_read({node("a", 300, {elected(3, "a")})});
  EXPECT_EQ(text(f.on_read({node("intruder", 300, {})})), "-3a ");
}

TEST(RecordFollowerTest, NodesAreMergedAndAMajorityMustHoldTheLeadersKey) {
  record_follower f(3);
  // The announcement reached one node only; the key is held on two: a leader.
  auto events = f.on_read({node("a", 250, {elected(3, "a")}), node("a", 200, {}),
                           node(std::nullopt, -2, {})});
  EXPECT_EQ(text(events), "+3a ");
  EXPECT_EQ(f.recheck_after(), milliseconds(202));
  // One node down, one holding: not enough answers to judge; nothing reported, read again soon.
  EXPECT_EQ(text(f.on_read({node("a", 100, {}), down(), down()})), "");
  EXPECT_EQ(f.recheck_after(), milliseconds(250));
  // Two answer, one holds: the node that did not answer may hold it too; still undecided.
  EXPECT_EQ(text(f.on_read({node("a", 100, {}), node(std::nullopt, -2, {}), down()})), "");
  EXPECT_EQ(f.recheck_after(), milliseconds(250));
  // Two answer without it: no quorum can hold it any more; the term has ended.
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {}), node(std::nullopt, -2, {}), down()})),
            "-3a ");
}

TEST(RecordFollowerTest, AFirstReadThatCannotJudgeReportsTheLeaderOnceItCan) {
  record_follower f(3);
  EXPECT_EQ(text(f.on_read({node("a", 250, {elected(3, "a")}), node(std::nullopt, -2, {}),
                            down()})),
            "");
  EXPECT_EQ(text(f.on_read({node("a", 250, {}), node(std::nullopt, -2, {}), node("a", 240, {})})),
            "+3a ");
}

TEST(RecordFollowerTest, AResignationWhoseElectionWasNeverSeenReportsBoth) {
  record_follower f(1);
  f.on_read({node("a", 300, {elected(3, "a")})});
  // b's election entry was trimmed from the record (16 entries) before this read.
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {resigned(5, "b")})})), "-3a +5b -5b ");
}

TEST(RecordFollowerTest, AResignationOfATermAlreadySeenToEndIsNotReportedAgain) {
  record_follower f(1);
  f.on_read({node("a", 300, {elected(3, "a")})});
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {})})), "-3a ");  // its key expired
  // The lost leader resigns anyway (its lease object still reads as held): old news.
  EXPECT_EQ(text(f.on_read({node(std::nullopt, -2, {resigned(3, "a")})})), "");
  EXPECT_EQ(text(f.on_read({node("b", 300, {resigned(3, "a"), elected(4, "b")})})), "+4b ");
}

TEST(RecordFollowerTest, AReadThatMissedANodeIsRepeatedSoon) {
  record_follower f(3);
  f.on_read({node(std::nullopt, -2, {}), node(std::nullopt, -2, {}), down()});
  EXPECT_EQ(f.recheck_after(), milliseconds(250));  // no term open, but C may have news
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

}  // namespace
}  // namespace dlock::detail
