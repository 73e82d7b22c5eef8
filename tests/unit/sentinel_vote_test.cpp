// SPDX-License-Identifier: Apache-2.0
// algo/sentinel_vote: a master counts only when a majority of all the sentinels in the URL name
// it; what each sentinel's reply means; and that the verdict's text says what each one said.
#include "algo/sentinel_vote.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "dlock/error.hpp"

namespace dlock::detail {
namespace {

using kind = sentinel_verdict::kind;

const std::vector<host_port> three{{"s1", 26379}, {"s2", 26379}, {"s3", 26379}};
const host_port a{"10.0.0.1", 6379}, b{"10.0.0.2", 6379};

sentinel_answer names(host_port m) { return {sentinel_answer::kind::address, std::move(m), {}}; }
sentinel_answer unknown() { return {sentinel_answer::kind::unknown_master, {}, {}}; }
sentinel_answer failed(std::string why = "Connection refused") {
  return {sentinel_answer::kind::failed, {}, std::move(why)};
}
sentinel_answer pending() { return {}; }

sentinel_verdict vote(std::vector<sentinel_answer> answers,
                      const std::vector<host_port>& sentinels = three) {
  return decide_master(sentinels, answers, "mymaster");
}

TEST(SentinelVoteTest, AMajorityOfAllSentinelsNamesTheMaster) {
  auto v = vote({names(a), names(a), names(a)});
  EXPECT_EQ(v.what, kind::agreed);
  EXPECT_EQ(v.master, a);
  EXPECT_EQ(vote({names(a), failed(), names(a)}).what, kind::agreed);
  EXPECT_EQ(vote({names(b), names(a), names(b)}).master, b);
  // Two answers in, a third pending: a majority already, so no wait for a hung sentinel.
  EXPECT_EQ(vote({names(a), pending(), names(a)}).what, kind::agreed);
  EXPECT_EQ(vote({names(a)}, {{"s1", 26379}}).what, kind::agreed);
}

TEST(SentinelVoteTest, OneSentinelOfThreeIsNoVote) {
  // The others down: the one that answers may be cut off and name a master since replaced.
  auto v = vote({names(a), failed(), failed()});
  EXPECT_EQ(v.what, kind::no_majority);
  EXPECT_TRUE(v.transient());
  // Two sentinels of four is not a majority either.
  std::vector<host_port> four = three;
  four.push_back({"s4", 26379});
  EXPECT_EQ(vote({names(a), names(a), names(b), failed()}, four).what, kind::no_majority);
}

TEST(SentinelVoteTest, DisagreementIsTransientAndNamesEveryAnswer) {
  auto v = vote({names(a), names(b), failed("timeout")});
  EXPECT_EQ(v.what, kind::no_majority);
  EXPECT_TRUE(v.transient());
  EXPECT_NE(v.text.find("sentinel s1:26379 names 10.0.0.1:6379"), std::string::npos) << v.text;
  EXPECT_NE(v.text.find("sentinel s2:26379 names 10.0.0.2:6379"), std::string::npos) << v.text;
  EXPECT_NE(v.text.find("sentinel s3:26379 failed: timeout"), std::string::npos) << v.text;
  EXPECT_NE(v.text.find("2 of 3"), std::string::npos) << v.text;
}

TEST(SentinelVoteTest, AnUnknownNameOrNoAnswerAtAllIsFinal) {
  auto v = vote({unknown(), unknown(), names(a)});
  EXPECT_EQ(v.what, kind::unknown_master);
  EXPECT_FALSE(v.transient());
  EXPECT_NE(v.text.find("no master named 'mymaster'"), std::string::npos) << v.text;
  auto none = vote({failed(), failed(), failed()});
  EXPECT_EQ(none.what, kind::unreachable);
  EXPECT_FALSE(none.transient());
  EXPECT_NE(none.text.find("no sentinel answered"), std::string::npos) << none.text;
  // Some silent, some not knowing the name, no majority of either: maybe a sentinel that is
  // being configured; it may pass.
  EXPECT_EQ(vote({unknown(), failed(), names(a)}).what, kind::no_majority);
}

TEST(SentinelVoteTest, ReadingReplies) {
  auto addr = read_sentinel_answer({}, reply::make_array({reply::make_string(reply::kind::string,
                                                                             "127.0.0.1"),
                                                          reply::make_string(reply::kind::string,
                                                                             "6380")}));
  EXPECT_EQ(addr.what, sentinel_answer::kind::address);
  EXPECT_EQ(addr.master, (host_port{"127.0.0.1", 6380}));
  EXPECT_EQ(read_sentinel_answer({}, reply::make_nil()).what, sentinel_answer::kind::unknown_master);

  auto refused = read_sentinel_answer(errc::node_unreachable, {});
  EXPECT_EQ(refused.what, sentinel_answer::kind::failed);
  EXPECT_FALSE(refused.text.empty());
  auto plain = read_sentinel_answer(
      errc::server_error,
      reply::make_string(reply::kind::error, "ERR unknown command 'SENTINEL', with args ..."));
  EXPECT_EQ(plain.what, sentinel_answer::kind::failed);
  EXPECT_NE(plain.text.find("not a sentinel?"), std::string::npos);
  auto noauth = read_sentinel_answer(
      errc::auth_failed, reply::make_string(reply::kind::error, "NOAUTH Authentication required."));
  EXPECT_NE(noauth.text.find("NOAUTH"), std::string::npos);
  // Junk: a port out of range, or a reply of another shape.
  for (const char* port : {"0", "70000", "x", ""}) {
    auto r = reply::make_array({reply::make_string(reply::kind::string, "h"),
                                reply::make_string(reply::kind::string, port)});
    EXPECT_EQ(read_sentinel_answer({}, r).what, sentinel_answer::kind::failed) << port;
  }
  EXPECT_EQ(read_sentinel_answer({}, reply::make_integer(1)).what, sentinel_answer::kind::failed);
}

}  // namespace
}  // namespace dlock::detail
