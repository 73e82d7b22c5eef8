// SPDX-License-Identifier: Apache-2.0
// algo/cluster_routing: the slot map read from CLUSTER SHARDS and CLUSTER SLOTS (replies in the
// shapes Redis 7.0 sends, checked against a real cluster by tests/integration/cluster_test),
// MOVED/ASK parsing, and which key a command is routed by.
#include "algo/cluster_routing.hpp"

#include <gtest/gtest.h>

#include "dlock/client.hpp"
#include "dlock/key_layout.hpp"

namespace dlock::detail {
namespace {

reply str(std::string_view s) { return reply::make_string(reply::kind::string, s); }
reply num(std::int64_t v) { return reply::make_integer(v); }
reply arr(std::vector<reply> e) { return reply::make_array(std::move(e)); }
reply err(std::string_view s) { return reply::make_string(reply::kind::error, s); }

reply shard_node(std::string_view ip, std::int64_t port, std::string_view role,
                 std::string_view health = "online") {
  return arr({str("id"), str("abc"), str("port"), num(port), str("ip"), str(ip), str("endpoint"),
              str(ip), str("role"), str(role), str("replication-offset"), num(42),
              str("health"), str(health)});
}
reply shard(std::vector<std::int64_t> ranges, std::vector<reply> nodes) {
  std::vector<reply> slots;
  for (auto r : ranges) slots.push_back(num(r));
  return arr({str("slots"), arr(std::move(slots)), str("nodes"), arr(std::move(nodes))});
}

TEST(ClusterRoutingTest, ShardsGiveEachSlotItsMaster) {
  auto shards = arr({shard({0, 5460}, {shard_node("127.0.0.1", 7009, "master", "fail"),
                                       shard_node("127.0.0.1", 7001, "replica"),
                                       shard_node("127.0.0.1", 7000, "master")}),
                     shard({5461, 10922, 16000, 16383}, {shard_node("127.0.0.1", 7002, "master")}),
                     shard({10923, 15999}, {shard_node("::1", 7003, "master")})});
  std::string why;
  auto map = slot_map::from_shards(shards, false, why);
  ASSERT_TRUE(map) << why;
  // The master, not its replica, nor a failed master still listed.
  EXPECT_EQ(*map->owner(0), (host_port{"127.0.0.1", 7000}));
  EXPECT_EQ(*map->owner(5460), (host_port{"127.0.0.1", 7000}));
  EXPECT_EQ(*map->owner(5461), (host_port{"127.0.0.1", 7002}));
  EXPECT_EQ(*map->owner(16383), (host_port{"127.0.0.1", 7002}));
  EXPECT_EQ(*map->owner(12000), (host_port{"::1", 7003}));
  EXPECT_EQ(map->uncovered(), 0u);
  EXPECT_EQ(map->masters().size(), 3u);

  // MOVED patches one slot.
  map->set_owner(0, {"127.0.0.1", 7003});
  EXPECT_EQ(*map->owner(0), (host_port{"127.0.0.1", 7003}));
  EXPECT_EQ(*map->owner(1), (host_port{"127.0.0.1", 7000}));
}

TEST(ClusterRoutingTest, UncoveredSlotsHaveNoOwner) {
  // A shard whose master failed with no replica: its slots stay uncovered.
  auto shards = arr({shard({0, 99}, {shard_node("127.0.0.1", 7000, "master")}),
                     shard({100, 16383}, {shard_node("127.0.0.1", 7001, "replica", "failed")})});
  std::string why;
  auto map = slot_map::from_shards(shards, false, why);
  ASSERT_TRUE(map) << why;
  EXPECT_NE(map->owner(99), nullptr);
  EXPECT_EQ(map->owner(100), nullptr);
  EXPECT_EQ(map->uncovered(), 16384u - 100u);
}

TEST(ClusterRoutingTest, MalformedMapsAreRefusedWithAReason) {
  std::string why;
  EXPECT_FALSE(slot_map::from_shards(err("ERR unknown subcommand"), false, why));
  EXPECT_FALSE(why.empty());
  EXPECT_FALSE(slot_map::from_shards(arr({arr({str("slots"), arr({num(0)}), str("nodes"),
                                                arr({shard_node("h", 1, "master")})})}),
                                     false, why));  // an odd range list
  EXPECT_FALSE(slot_map::from_shards(
      arr({shard({0, 16384}, {shard_node("h", 1, "master")})}), false, why));  // out of range
  EXPECT_FALSE(slot_map::from_shards(
      arr({shard({10, 5}, {shard_node("h", 1, "master")})}), false, why));
  EXPECT_FALSE(slot_map::from_shards(
      arr({shard({0, 5}, {shard_node("h", 0, "master")})}), false, why));  // no port
  // TLS wants tls-port, which this node does not announce.
  EXPECT_FALSE(slot_map::from_shards(
      arr({shard({0, 5}, {shard_node("h", 7000, "master")})}), true, why));
  EXPECT_NE(why.find("tls-port"), std::string::npos) << why;
}

TEST(ClusterRoutingTest, SlotsReplyBeforeSeven) {
  auto slots = arr({arr({num(0), num(8191), arr({str("10.0.0.1"), num(7000), str("id1")}),
                         arr({str("10.0.0.4"), num(7003), str("id4")})}),
                    arr({num(8192), num(16383), arr({str("10.0.0.2"), num(7001), str("id2")})})});
  std::string why;
  auto map = slot_map::from_slots(slots, why);
  ASSERT_TRUE(map) << why;
  EXPECT_EQ(*map->owner(8191), (host_port{"10.0.0.1", 7000}));
  EXPECT_EQ(*map->owner(8192), (host_port{"10.0.0.2", 7001}));
  EXPECT_FALSE(slot_map::from_slots(arr({arr({num(0), num(5)})}), why));
}

TEST(ClusterRoutingTest, RedirectsAreParsed) {
  host_port from{"10.0.0.9", 7009};
  auto moved = parse_redirect(err("MOVED 3999 127.0.0.1:6381"), from);
  ASSERT_TRUE(moved);
  EXPECT_FALSE(moved->ask);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->to, (host_port{"127.0.0.1", 6381}));
  auto ask = parse_redirect(err("ASK 12 [::1]:7000"), from);
  ASSERT_TRUE(ask);
  EXPECT_TRUE(ask->ask);
  EXPECT_EQ(ask->to, (host_port{"::1", 7000}));
  // An empty host is the node that answered (cluster-announce-hostname-less setups).
  EXPECT_EQ(parse_redirect(err("MOVED 1 :7005"), from)->to, (host_port{"10.0.0.9", 7005}));
  for (auto text : {"MOVED", "MOVED x 1.2.3.4:5", "MOVED 16384 h:1", "MOVED 1 h", "MOVED 1 h:0",
                    "ASK 1 h:99999", "ERR MOVED 1 h:1", "MOVEDX 1 h:1"}) {
    EXPECT_FALSE(parse_redirect(err(text), from)) << text;
  }
  EXPECT_FALSE(parse_redirect(str("MOVED 1 h:1"), from));  // not an error reply
}

TEST(ClusterRoutingTest, RetryLaterReplies) {
  EXPECT_TRUE(is_retry_later(err("TRYAGAIN Multiple keys request during rehashing of slot")));
  EXPECT_TRUE(is_retry_later(err("CLUSTERDOWN The cluster is down")));
  EXPECT_TRUE(is_retry_later(err("LOADING Redis is loading the dataset in memory")));
  EXPECT_FALSE(is_retry_later(err("ERR something")));
  EXPECT_FALSE(is_retry_later(str("TRYAGAIN")));
}

TEST(ClusterRoutingTest, CommandsAreRoutedByTheirFirstKey) {
  auto slot_of = [](command c) { return command_slot(c.bytes()); };
  EXPECT_EQ(slot_of({"GET", "user:{42}:name"}), hash_slot("42"));
  EXPECT_EQ(slot_of({"set", "k", "v"}), hash_slot("k"));
  EXPECT_EQ(slot_of({"EVALSHA", "abc", "2", "lock", "{lock}:fence", "arg"}), hash_slot("lock"));
  EXPECT_EQ(slot_of({"evalsha", "abc", "0", "notakey"}), std::nullopt);
  EXPECT_EQ(slot_of({"FCALL", "f", "1", "k"}), hash_slot("k"));
  EXPECT_EQ(slot_of({"OBJECT", "ENCODING", "k"}), hash_slot("k"));
  EXPECT_EQ(slot_of({"SPUBLISH", "chan", "m"}), hash_slot("chan"));
  // The forms whose first key is not argument 1 (the review found them misrouted).
  EXPECT_EQ(slot_of({"ZINTER", "2", "za", "zb"}), hash_slot("za"));
  EXPECT_EQ(slot_of({"BLMPOP", "0", "1", "list", "LEFT"}), hash_slot("list"));
  EXPECT_EQ(slot_of({"XREAD", "COUNT", "2", "STREAMS", "s1", "0"}), hash_slot("s1"));
  EXPECT_EQ(slot_of({"XGROUP", "CREATE", "s1", "g", "$"}), hash_slot("s1"));
  for (command keyless : {command{"PING"}, command{"INFO", "replication"},
                          command{"SCRIPT", "LOAD", "return 1"}, command{"CLUSTER", "SHARDS"},
                          command{"TIME"}, command{"PUBLISH", "c", "m"}}) {
    EXPECT_EQ(command_slot(keyless.bytes()), std::nullopt) << keyless.bytes();
  }
  // A pipeline goes by its first command that has a key.
  command pipeline{"PING"};
  pipeline.then({"GET", "b"}).then({"GET", "c"});
  EXPECT_EQ(command_slot(pipeline.bytes()), hash_slot("b"));
  EXPECT_EQ(command_slot("not resp"), std::nullopt);
  EXPECT_EQ(command_slot("*2\r\n$3\r\nGET\r\n$10\r\nshort\r\n"), std::nullopt);  // truncated
}

}  // namespace
}  // namespace dlock::detail
