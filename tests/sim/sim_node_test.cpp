// SPDX-License-Identifier: Apache-2.0
// The simulated node alone: expiry by its clock, the script cache, restarts, pub/sub counts,
// and the Lua <-> reply conversions. sim_node_diff_test holds the same node to a real server.
#include "sim_node.hpp"

#include <gtest/gtest.h>

#include "dlock/detail/scripts.hpp"

namespace dlock::sim {
namespace {

namespace scripts = dlock::detail::scripts;

std::string render(const reply& r) { return r.to_string(); }

class SimNodeTest : public ::testing::Test {
 protected:
  SimNodeTest() { n.set_time(1'700'000'000'000); }
  reply eval(std::string_view body) { return n.exec({"EVAL", body, "0"}); }
  node n;
};

TEST_F(SimNodeTest, AKeyLivesUntilItsDeadlinePassesNotUntilItIsReached) {
  n.exec({"SET", "k", "v", "PX", "100"});
  n.set_time(n.time() + 100);
  EXPECT_EQ(n.exec({"PTTL", "k"}).integer(), 0);
  EXPECT_EQ(n.exec({"GET", "k"}).str(), "v");  // Redis: expired only when now > deadline
  n.set_time(n.time() + 1);
  EXPECT_TRUE(n.exec({"GET", "k"}).is_nil());
  EXPECT_EQ(n.exec({"PTTL", "k"}).integer(), -2);
}

TEST_F(SimNodeTest, PexpireAtOrBeforeNowDeletesAtOnce) {
  n.exec({"SET", "k", "v"});
  EXPECT_EQ(n.exec({"PTTL", "k"}).integer(), -1);
  EXPECT_EQ(n.exec({"PEXPIREAT", "k", std::to_string(n.time())}).integer(), 1);
  EXPECT_EQ(n.exec({"EXISTS", "k"}).integer(), 0);
  EXPECT_EQ(n.exec({"PEXPIRE", "k", "10"}).integer(), 0);
}

TEST_F(SimNodeTest, EvalshaAnswersNoscriptUntilTheScriptIsLoaded) {
  auto evalsha = [&] {
    return n.exec({"EVALSHA", scripts::extend_sha1, "1", "lock", "owner", "1000"});
  };
  EXPECT_EQ(evalsha().str(), "NOSCRIPT No matching script. Please use EVAL.");
  EXPECT_EQ(n.exec({"SCRIPT", "LOAD", scripts::extend_body}).str(), scripts::extend_sha1);
  EXPECT_EQ(render(evalsha()), "(integer) 0");
  n.exec({"SCRIPT", "FLUSH"});
  EXPECT_TRUE(evalsha().is_error());
  EXPECT_EQ(render(n.exec({"EVAL", scripts::extend_body, "1", "lock", "owner", "1000"})),
            "(integer) 0");
  EXPECT_EQ(render(evalsha()), "(integer) 0");  // EVAL cached it
  n.restart(true);
  EXPECT_TRUE(evalsha().is_error());
}

TEST_F(SimNodeTest, RestartKeepsTheLiveKeysOnlyWithPersistence) {
  n.exec({"SET", "forever", "1"});
  n.exec({"SET", "brief", "1", "PX", "10"});
  n.exec({"ZADD", "z", "1", "m"});
  n.set_time(n.time() + 50);
  n.restart(true);
  auto kept = n.dump();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept.at("z").type, "zset");
  EXPECT_EQ(render(kept.at("z").value), R"(["m", "1"])");
  n.restart(false);
  EXPECT_TRUE(n.dump().empty());
}

TEST_F(SimNodeTest, PublishCountsSubscribersAndRestartDropsThem) {
  n.subscribe(1, "c");
  n.subscribe(2, "c");
  n.subscribe(2, "other");
  EXPECT_EQ(n.exec({"PUBLISH", "c", "hello"}).integer(), 2);
  auto got = n.take_messages();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].to, 1u);
  EXPECT_EQ(got[1].payload, "hello");
  EXPECT_TRUE(n.take_messages().empty());
  n.unsubscribe(1, "c");
  EXPECT_EQ(n.exec({"PUBLISH", "c", "x"}).integer(), 1);
  n.disconnect(2);
  EXPECT_EQ(n.exec({"PUBLISH", "other", "x"}).integer(), 0);
  n.subscribe(3, "c");
  n.restart(true);
  EXPECT_EQ(n.exec({"PUBLISH", "c", "x"}).integer(), 0);
}

TEST_F(SimNodeTest, LuaValuesConvertToRepliesAsRedisConvertsThem) {
  EXPECT_EQ(render(eval("return 3.99")), "(integer) 3");
  EXPECT_EQ(render(eval("return -3.99")), "(integer) -3");
  EXPECT_EQ(render(eval("return {1, 2, nil, 3}")), "[(integer) 1, (integer) 2]");
  EXPECT_EQ(render(eval("return true")), "(integer) 1");
  EXPECT_EQ(render(eval("return false")), "(nil)");
  EXPECT_EQ(render(eval("return {ok='FINE'}")), "FINE");
  EXPECT_EQ(eval("return {ok='FINE'}").type(), reply::kind::status);
  EXPECT_EQ(render(eval("return {err='raw'}")), "(error) raw");
  EXPECT_EQ(render(eval("return redis.error_reply('boom')")), "(error) ERR boom");
  EXPECT_EQ(render(eval("return redis.error_reply('MY boom')")), "(error) MY boom");
  EXPECT_EQ(render(eval("return redis.status_reply('FINE')")), "FINE");
  EXPECT_EQ(render(eval("return {1, {'x', false}, {ok='s'}}")), R"([(integer) 1, ["x", (nil)], s])");
}

TEST_F(SimNodeTest, RedisValuesConvertToLuaAsRedisConvertsThem) {
  n.exec({"HSET", "h", "f", "v"});
  EXPECT_EQ(render(eval("return redis.call('GET', 'nokey') == false")), "(integer) 1");
  EXPECT_EQ(render(eval("return redis.call('SET', 'k', 0.1)['ok']")), "\"OK\"");
  EXPECT_EQ(n.exec({"GET", "k"}).str(), "0.10000000000000001");  // %.17g, as Redis 7.0
  EXPECT_EQ(render(eval("return redis.pcall('GET', 'h')['err']")),
            "\"WRONGTYPE Operation against a key holding the wrong kind of value\"");
  EXPECT_EQ(render(eval("return type(redis.call('INCR', 'n'))")), "\"number\"");
}

TEST_F(SimNodeTest, AFailedCallAbortsTheScriptWithItsLine) {
  n.exec({"HSET", "h", "f", "v"});
  std::string sha = n.exec({"SCRIPT", "LOAD", "redis.call('SET', 'a', 1)\nreturn redis.call('GET', 'h')"}).str();
  EXPECT_EQ(n.exec({"EVALSHA", sha, "0"}).str(),
            "WRONGTYPE Operation against a key holding the wrong kind of value script: " + sha +
                ", on @user_script:2.");
  EXPECT_EQ(n.exec({"GET", "a"}).str(), "1");  // no rollback: the first call stays done
  EXPECT_TRUE(eval("return nope").str().starts_with(
      "ERR user_script:1: Script attempted to access nonexistent global variable 'nope' script:"));
}

TEST_F(SimNodeTest, TimeIsTheInjectedClock) {
  n.set_time(1'700'000'000'123);
  EXPECT_EQ(render(eval("return redis.call('TIME')")), R"(["1700000000", "123000"])");
}

TEST_F(SimNodeTest, AcquireGrantsThenReportsTheHoldersTtlThenRefusesAWrongType) {
  auto acquire = [&](std::string_view key, std::string_view owner) {
    return n.exec({"EVAL", scripts::acquire_body, "5", key, "{l}:fence", "{l}:waiters",
                   "{l}:waiter-info", "{l}:tickets", owner, "1000", "", ""});
  };
  // A new fencing counter starts from the node's clock, in ms x 1024.
  EXPECT_EQ(render(acquire("l", "a.1")),
            "[(integer) 1, (integer) " + std::to_string(n.time() * 1024 + 1) + "]");
  n.set_time(n.time() + 300);
  EXPECT_EQ(render(acquire("l", "b.1")), "[(integer) 0, (integer) 700]");
  n.exec({"HSET", "h", "f", "v"});
  EXPECT_TRUE(acquire("h", "b.2").str().starts_with("WRONGTYPE Operation against a key"));
}

}  // namespace
}  // namespace dlock::sim
