// SPDX-License-Identifier: Apache-2.0
// check_deployment against real redis-server processes configured to be wrong in one way each:
// node counts, one server listed twice, a replica, an evicting policy, weak persistence, a
// dead node and a user who may not run CONFIG.
#include "dlock/diagnostics.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "support/checks.hpp"
#include "support/redis_server.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using code = warning::code;

const server_options durable{.persistence = true};

std::vector<client> clients_of(const std::vector<std::unique_ptr<redis_server>>& servers) {
  std::vector<client> out;
  for (const auto& s : servers) out.emplace_back(s->url());
  return out;
}

std::vector<std::unique_ptr<redis_server>> start(std::size_t n, const server_options& o) {
  std::vector<std::unique_ptr<redis_server>> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(std::make_unique<redis_server>(o));
  return out;
}

std::size_t count(const std::vector<warning>& ws, code c) {
  return static_cast<std::size_t>(
      std::count_if(ws.begin(), ws.end(), [&](const warning& w) { return w.what == c; }));
}

const warning* find(const std::vector<warning>& ws, code c, const std::string& node) {
  for (const auto& w : ws) {
    if (w.what == c && w.node == node) return &w;
  }
  return nullptr;
}

std::string dump(const std::vector<warning>& ws) {
  std::string out;
  for (const auto& w : ws) out += to_string(w) + "\n";
  return out;
}

std::string name_of(const redis_server& s) { return "127.0.0.1:" + std::to_string(s.port()); }

TEST(DiagnosticsTest, FiveDurableIndependentMastersGiveNoWarning) {
  auto servers = start(5, durable);
  std::error_code ec;
  auto ws = check_deployment(clients_of(servers), ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(ws.empty()) << dump(ws);
  EXPECT_NO_THROW(check_deployment(clients_of(servers)));
}

TEST(DiagnosticsTest, NodeCountBelowThreeOrEvenIsReported) {
  auto servers = start(4, durable);
  auto all = clients_of(servers);
  auto first = [&](std::size_t n) { return std::vector<client>(all.begin(), all.begin() + n); };
  std::error_code ec;

  auto one = check_deployment(first(1), ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(count(one, code::too_few_nodes), 1u) << dump(one);
  EXPECT_EQ(count(one, code::even_node_count), 0u);

  auto two = check_deployment(first(2), ec);
  EXPECT_EQ(count(two, code::too_few_nodes), 1u) << dump(two);
  EXPECT_EQ(count(two, code::even_node_count), 1u);

  auto three = check_deployment(first(3), ec);
  EXPECT_TRUE(three.empty()) << dump(three);

  auto four = check_deployment(first(4), ec);
  ASSERT_EQ(four.size(), 1u) << dump(four);
  EXPECT_EQ(four[0].what, code::even_node_count);
  EXPECT_TRUE(four[0].node.empty());  // about the deployment, not one node
  EXPECT_NE(four[0].message.find("quorum is 3"), std::string::npos) << four[0].message;
  EXPECT_FALSE(four[0].fix.empty());

  std::vector<client> none;
  check_deployment(none, ec);
  EXPECT_EQ(ec, errc::invalid_argument);
}

TEST(DiagnosticsTest, SameServerListedTwiceIsFoundByRunId) {
  // The same server over TCP and over its unix socket: different endpoints, one run_id.
  auto servers = start(2, durable);
  redis_server both{{.persistence = true, .unix_socket = true}};
  std::vector<client> nodes{client(servers[0]->url()), client(both.url()),
                            client(servers[1]->url()), client(both.socket_url()),
                            client(both.url())};
  std::error_code ec;
  auto ws = check_deployment(nodes, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(count(ws, code::same_server), 2u) << dump(ws);
  const auto* via_socket = find(ws, code::same_server, nodes[3].where().to_string());
  ASSERT_NE(via_socket, nullptr) << dump(ws);
  EXPECT_NE(via_socket->message.find(name_of(both)), std::string::npos) << via_socket->message;
  EXPECT_NE(find(ws, code::same_server, name_of(both)), nullptr) << dump(ws);  // the third listing
  EXPECT_EQ(count(ws, code::replica) + count(ws, code::forgets_on_restart), 0u) << dump(ws);
}

TEST(DiagnosticsTest, ReplicaIsReported) {
  redis_server master{durable};
  redis_server replica{{.persistence = true,
                        .extra = {"--replicaof", "127.0.0.1", std::to_string(master.port())}}};
  redis_server other{durable};
  std::vector<client> nodes{client(master.url()), client(replica.url()), client(other.url())};
  std::error_code ec;
  auto ws = check_deployment(nodes, ec);
  EXPECT_FALSE(ec) << ec.message();
  // The master may already count its replica (unguarded_failover, tested below).
  std::erase_if(ws, [](const warning& w) {
    return w.what == code::unguarded_failover || w.what == code::no_min_replicas;
  });
  ASSERT_EQ(ws.size(), 1u) << dump(ws);
  EXPECT_EQ(ws[0].what, code::replica);
  EXPECT_EQ(ws[0].node, name_of(replica));
  EXPECT_NE(ws[0].message.find(std::to_string(master.port())), std::string::npos) << ws[0].message;
}

TEST(DiagnosticsTest, EvictingMaxmemoryPolicyIsReported) {
  redis_server lru{{.persistence = true, .extra = {"--maxmemory-policy", "allkeys-lru"}}};
  redis_server volatile_ttl{{.persistence = true,
                             .extra = {"--maxmemory-policy", "volatile-ttl", "--maxmemory", "64mb"}}};
  redis_server fine{durable};
  std::vector<client> nodes{client(lru.url()), client(volatile_ttl.url()), client(fine.url())};
  std::error_code ec;
  auto ws = check_deployment(nodes, ec);
  EXPECT_FALSE(ec) << ec.message();
  ASSERT_EQ(ws.size(), 2u) << dump(ws);
  const auto* a = find(ws, code::evicting_policy, name_of(lru));
  const auto* b = find(ws, code::evicting_policy, name_of(volatile_ttl));
  ASSERT_TRUE(a && b) << dump(ws);
  EXPECT_NE(a->message.find("allkeys-lru"), std::string::npos);
  EXPECT_NE(a->message.find("once maxmemory is set"), std::string::npos) << a->message;
  // Lock keys all carry a TTL, so volatile-* policies evict them too.
  EXPECT_NE(b->message.find("volatile-ttl"), std::string::npos);
  EXPECT_NE(b->fix.find("noeviction"), std::string::npos);
}

TEST(DiagnosticsTest, PersistenceThatForgetsLocksIsReported) {
  redis_server no_aof{};  // the fixture's default: --appendonly no
  redis_server everysec{{.extra = {"--appendonly", "yes", "--appendfsync", "everysec"}}};
  redis_server always{durable};
  std::vector<client> nodes{client(no_aof.url()), client(everysec.url()), client(always.url())};
  std::error_code ec;
  auto ws = check_deployment(nodes, ec);
  EXPECT_FALSE(ec) << ec.message();
  ASSERT_EQ(ws.size(), 2u) << dump(ws);
  const auto* a = find(ws, code::forgets_on_restart, name_of(no_aof));
  const auto* b = find(ws, code::forgets_on_restart, name_of(everysec));
  ASSERT_TRUE(a && b) << dump(ws);
  EXPECT_NE(a->message.find("appendonly is no"), std::string::npos) << a->message;
  EXPECT_NE(b->message.find("everysec"), std::string::npos) << b->message;
  EXPECT_NE(a->fix.find("appendfsync always"), std::string::npos) << a->fix;
}

// A master with a replica: a failover may promote a replica that missed the last lock writes,
// unless the client quarantines promoted nodes; the quarantine also covers a restart that
// forgets the locks.
TEST(DiagnosticsTest, AMasterWithReplicasWantsAQuarantineAndMinReplicasToWrite) {
  redis_server master{durable};
  redis_server replica{{.persistence = true,
                        .extra = {"--replicaof", "127.0.0.1", std::to_string(master.port())}}};
  redis_server no_aof{};
  client admin{master.url()};
  ASSERT_TRUE(test::eventually([&] {
    return admin.exec({"INFO", "replication"}).str().find("connected_slaves:1") != std::string::npos;
  })) << "the replica never connected";
  std::vector<client> plain{client(master.url()), client(no_aof.url())};
  auto ws = check_deployment(plain);
  const auto* failover = find(ws, code::unguarded_failover, name_of(master));
  ASSERT_NE(failover, nullptr) << dump(ws);
  EXPECT_NE(failover->message.find("1 replica"), std::string::npos) << failover->message;
  EXPECT_NE(failover->fix.find("restart_quarantine"), std::string::npos) << failover->fix;
  EXPECT_NE(find(ws, code::forgets_on_restart, name_of(no_aof)), nullptr) << dump(ws);
  const auto* split = find(ws, code::no_min_replicas, name_of(master));
  ASSERT_NE(split, nullptr) << dump(ws);
  EXPECT_NE(split->fix.find("min-replicas-to-write 1"), std::string::npos) << split->fix;

  client_options quarantine_only{.restart_quarantine = 10s};
  std::vector<client> quarantined{client(master.url(), quarantine_only),
                                  client(no_aof.url(), quarantine_only)};
  ws = check_deployment(quarantined);
  EXPECT_EQ(count(ws, code::forgets_on_restart), 0u) << dump(ws);
  failover = find(ws, code::unguarded_failover, name_of(master));
  ASSERT_NE(failover, nullptr) << "a grant can still stand on the master alone. " << dump(ws);
  EXPECT_NE(failover->message.find("no replication guard"), std::string::npos)
      << failover->message;
  client_options both{.restart_quarantine = 10s, .replication_guard = {.enabled = true}};
  ws = check_deployment({client(master.url(), both), client(no_aof.url(), both)});
  EXPECT_EQ(count(ws, code::unguarded_failover) + count(ws, code::forgets_on_restart), 0u)
      << dump(ws);

  admin.exec({"CONFIG", "SET", "min-replicas-to-write", "1"});
  EXPECT_EQ(count(check_deployment(plain), code::no_min_replicas), 0u);
}

TEST(DiagnosticsTest, UninspectableNodeSetsTheErrorButTheOthersAreStillChecked) {
  redis_server dead{durable};
  redis_server lru{{.persistence = true, .extra = {"--maxmemory-policy", "allkeys-lru"}}};
  redis_server fine{durable};
  std::string dead_name = name_of(dead);
  dead.kill();
  std::vector<client> nodes{client(dead.url()), client(lru.url()), client(fine.url())};
  std::error_code ec;
  auto ws = check_deployment(nodes, ec);
  EXPECT_TRUE(ec);
  const auto* u = find(ws, code::unchecked, dead_name);
  ASSERT_NE(u, nullptr) << dump(ws);
  EXPECT_NE(find(ws, code::evicting_policy, name_of(lru)), nullptr) << dump(ws);
  try {
    check_deployment(nodes);
    ADD_FAILURE() << "expected std::system_error";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find(dead_name), std::string::npos) << e.what();
  }
}

TEST(DiagnosticsTest, UserWithoutConfigIsJudgedOnInfoAlone) {
  redis_server s{{.extra = {"--appendonly", "yes", "--appendfsync", "everysec"}}};
  ASSERT_EQ(test::raw_command(s.port(), "ACL SETUSER locker on >pw ~* &* +@all -config"), "+OK\r\n");
  ASSERT_EQ(test::raw_command(s.port(), "ACL SETUSER noinfo on >pw ~* &* +@all -info"), "+OK\r\n");
  std::string where = "127.0.0.1:" + std::to_string(s.port());
  std::error_code ec;
  auto ws = check_deployment({client("redis://locker:pw@" + where)}, ec);
  EXPECT_FALSE(ec) << ec.message();
  // INFO still says the AOF is on; appendfsync stays unknown, so no persistence warning.
  EXPECT_EQ(count(ws, code::forgets_on_restart), 0u) << dump(ws);
  EXPECT_EQ(count(ws, code::too_few_nodes), 1u) << dump(ws);

  auto denied = check_deployment({client("redis://noinfo:pw@" + where)}, ec);
  EXPECT_EQ(ec, errc::no_permission) << ec.message();
  const auto* u = find(denied, code::unchecked, where);
  ASSERT_NE(u, nullptr) << dump(denied);
  EXPECT_NE(u->message.find("NOPERM"), std::string::npos) << u->message;
}

TEST(DiagnosticsTest, WarningsPrintAsOneLine) {
  warning w{code::replica, "127.0.0.1:7000", "the node is a replica", "list masters only"};
  EXPECT_EQ(to_string(w), "replica 127.0.0.1:7000: the node is a replica (fix: list masters only)");
  EXPECT_EQ(to_string(code::forgets_on_restart), "forgets_on_restart");
  EXPECT_EQ(to_string(code::unguarded_failover), "unguarded_failover");
  EXPECT_EQ(to_string(code::no_min_replicas), "no_min_replicas");
  EXPECT_EQ(to_string(code::sentinel_quorum), "sentinel_quorum");
  warning all{code::even_node_count, "", "4 nodes", "use 5"};
  EXPECT_EQ(to_string(all), "even_node_count: 4 nodes (fix: use 5)");
}

}  // namespace
}  // namespace dlock::test
