// SPDX-License-Identifier: Apache-2.0
// redis-sentinel:// endpoints: the master is the one a majority of the sentinels names, checked
// with ROLE on every connect; a switch (+switch-master) moves every connection, and requests
// sent meanwhile wait for the new master within their deadlines. Real redis-server processes in
// sentinel mode; the master a test expects is read from the servers with raw_command.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "dlock/diagnostics.hpp"
#include "dlock/mutex.hpp"
#include "fault/tcp_proxy.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_group.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

std::string get_raw(unsigned short port, const std::string& key) {
  return raw_command(port, "GET " + key);
}

// ROLE's first field through `c`, or the error (a switch may cut a request off).
std::string role_of(client& c) {
  std::error_code ec;
  auto r = c.exec({"ROLE"}, ec);
  if (ec) return ec.message();
  return r.is_array() && !r.elements().empty() ? r.elements()[0].str() : r.to_string();
}

class SentinelTest : public ::testing::Test {
 protected:
  void SetUp() override { group_.wait_ready(); }
  sentinel_group group_;
};

TEST_F(SentinelTest, ALockGoesToTheMasterTheSentinelsName) {
  client c{group_.url()};
  EXPECT_TRUE(c.where().is_sentinel());
  mutex m{c, test_key()};
  auto l = m.acquire();
  std::string token = c.exec({"GET", test_key()}).str();
  EXPECT_NE(get_raw(group_.node(0).port(), test_key()).find(token), std::string::npos)
      << "the key is not on the master";
  EXPECT_EQ(c.exec({"ROLE"}).elements().at(0).str(), "master");
}

// The replication guard and the quarantine work through the sentinels' master as on a plain
// URL: a grant counts once the replica has it.
TEST_F(SentinelTest, TheGuardConfirmsGrantsOnTheSentinelsMaster) {
  client c{group_.url(), {.restart_quarantine = 1ms, .replication_guard = {.enabled = true,
                                                                            .timeout = 2s}}};
  mutex m{c, test_key()};
  std::error_code ec;
  auto l = m.try_acquire(ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(l);
  std::string on_master = get_raw(group_.node(0).port(), test_key());
  EXPECT_EQ(get_raw(group_.node(1).port(), test_key()), on_master)
      << "the replica does not have the grant";
  EXPECT_NE(on_master, "$-1\r\n");
}

// Why the guard and the quarantine exist: the replica lags (a proxy drops its replication
// stream), a grant reaches the master alone, the master dies and the replica is promoted
// without it; a second client then takes the same lock, with the same fencing token, while
// the first still holds it. With the guard, the first grant is refused instead (and
// released); a client with the quarantine raises the promoted node's fences above it.
TEST(SentinelFailoverTest, APromotedLaggingReplicaGivesASecondHolderUnlessGuarded) {
  std::unique_ptr<fault::tcp_proxy> link;
  sentinel_group group{{.replicate_via =
                            [&](unsigned short master) {
                              link = std::make_unique<fault::tcp_proxy>(master);
                              return link->port();
                            },
                        .failover_timeout = 60s}};
  group.wait_ready();
  const client_options quarantined{.restart_quarantine = 1ms};
  client{group.url(), quarantined}.exec({"PING"});  // marks the master's identity
  client a{group.url()},
      guarded_client{group.url(), {.replication_guard = {.enabled = true, .timeout = 300ms}}};
  mutex first{a, test_key("plain"), {.ttl = 60s}};
  mutex guarded{guarded_client, test_key("guarded"), {.ttl = 30s}};
  std::error_code ec;
  ASSERT_TRUE(guarded.try_acquire(ec)) << "the guard refused while the replica keeps up";
  {
    auto once = first.try_acquire(ec);  // so that the fence counter exists on both nodes
    ASSERT_TRUE(once) << ec.message();
    EXPECT_FALSE(once.release());
  }

  // The release must reach the replica before the lag, or the replica keeps that value.
  ASSERT_TRUE(eventually([&] {
    return get_raw(group.node(1).port(), test_key("plain")) == "$-1\r\n";
  })) << "the release never reached the replica";
  link->set_mode(fault::tcp_proxy::mode::drop_replies);  // the master's stream goes nowhere
  auto refused = mutex{guarded_client, test_key("guarded2"), {.ttl = 30s}}.try_acquire(ec);
  EXPECT_FALSE(refused);
  EXPECT_EQ(ec, errc::replication_not_confirmed) << ec.message();
  EXPECT_EQ(get_raw(group.node(0).port(), test_key("guarded2")), "$-1\r\n") << "not released";
  auto held = first.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();

  group.node(0).kill();
  ASSERT_TRUE(group.fail_over_to_replica()) << "no failover happened";

  client b{group.url(), {.request_timeout = 5s}};
  mutex second{b, test_key("plain"), {.ttl = 30s}};
  ASSERT_TRUE(second.try_lock_for(test::scaled(5s)))
      << "the promoted replica knew of the first grant? " << second.last_error().message()
      << "; the key there: " << get_raw(group.node(1).port(), test_key("plain"));
  EXPECT_GT(held.remaining(), 0ms) << "the first holder should still believe it holds";
  // A fenced resource cannot tell them apart: the new master's counter never saw the first
  // grant's increment, so it hands out the same token again.
  EXPECT_EQ(second.current_lease()->fencing_token(), held.fencing_token());
  second.unlock();

  // A client with the quarantine sees the node's new identity and raises its fence floor.
  client q{group.url(), quarantined};
  mutex third{q, test_key("plain"), {.ttl = 30s}};
  ASSERT_TRUE(third.try_lock_for(test::scaled(5s)));
  EXPECT_GT(third.current_lease()->fencing_token(), held.fencing_token())
      << "the resource would still take the first holder's writes";
}

// SENTINEL FAILOVER: the replica becomes the master, the old master its replica. Locks taken
// afterwards land on the new master, and a thread that locks in a loop meanwhile never fails.
TEST_F(SentinelTest, ASwitchMovesTheClientAndLocksKeepWorking) {
  client c{group_.url(), {.request_timeout = 5s}};
  mutex m{c, test_key(), {.ttl = 2s}};
  { auto l = m.acquire(); }
  std::atomic<bool> stop{false};
  std::atomic<int> cycles{0}, failures{0};
  std::thread locker([&] {
    while (!stop) {
      try {
        if (!m.try_lock_for(5s)) {
          ++failures;
          continue;
        }
        m.unlock();
        ++cycles;
      } catch (const std::system_error&) {
        ++failures;  // an unlock whose reply the switch cut off (connection_lost) may throw
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  // No ASSERT while the locker runs.
  EXPECT_TRUE(eventually([&] { return cycles.load() >= 5; })) << "the locker never got going";
  auto before = cycles.load();
  bool promoted = group_.fail_over_to_replica();
  // The client follows: it talks to node 1, a master now, and a lock now is there.
  const std::string on_new_master = "tcp_port:" + std::to_string(group_.node(1).port());
  EXPECT_TRUE(eventually([&] {
    std::error_code ec;
    return c.exec({"INFO", "server"}, ec).str().find(on_new_master) != std::string::npos &&
           role_of(c) == "master";
  })) << role_of(c);
  // The locker goes on there.
  auto switched = cycles.load();
  EXPECT_TRUE(eventually([&] { return cycles.load() > switched + 5; }))
      << "the locker stalled after the switch";
  stop = true;
  locker.join();
  ASSERT_TRUE(promoted) << "no failover happened";
  EXPECT_GT(cycles.load(), before + 5) << "the locker stalled across the switch";
  EXPECT_LE(failures.load(), 2) << "only a request cut off by the switch may fail";
  auto l = m.acquire();
  std::string token = c.exec({"GET", test_key()}).str();
  EXPECT_NE(get_raw(group_.node(1).port(), test_key()).find(token), std::string::npos)
      << "after the switch the lock is not on the new master";
}

// Only +switch-master can move a client that sends nothing but reads, from a deposed master
// that still says it is one: here Sentinel cannot demote the old master (its reconfiguration
// runs CLIENT KILL inside MULTI, and CLIENT is renamed away there, so it all aborts). Within a
// moment of the switch, the client is on the new master.
TEST(SentinelSwitchTest, AnIdleClientFollowsTheSwitchAnnouncement) {
  sentinel_group group{{.master_extra = {"--rename-command", "CLIENT", ""}}};
  group.wait_ready();
  client c{group.url()};
  ASSERT_EQ(role_of(c), "master");
  ASSERT_TRUE(group.fail_over_to_replica()) << "no failover happened";
  const std::string on_new_master = "tcp_port:" + std::to_string(group.node(1).port());
  std::string info;
  eventually([&] {
    std::error_code ec;
    info = c.exec({"INFO", "server"}, ec).str();
    return info.find(on_new_master) != std::string::npos;
  }, 5s);
  EXPECT_NE(info.find(on_new_master), std::string::npos) << "the client stayed on the old master";
  EXPECT_EQ(raw_command(group.node(0).port(), "ROLE").rfind("*3\r\n$6\r\nmaster", 0), 0u)
      << "the old master was demoted after all: the test no longer isolates the announcement";
}

// The master dies: a request sent now is not failed fast (node_unreachable) as on a plain
// URL; it waits until the sentinels promote the replica, and runs there, within its deadline.
TEST_F(SentinelTest, RequestsWaitForThePromotionWithinTheirDeadline) {
  client c{group_.url(), {.request_timeout = 15s}};
  c.exec({"PING"});
  group_.node(0).kill();
  auto start = steady::now();
  std::error_code ec;
  auto r = c.exec({"SET", test_key(), "after"}, ec);
  ASSERT_FALSE(ec) << ec.message() << ": " << r.str();
  EXPECT_GT(steady::now() - start, 300ms) << "it cannot have waited for a promotion";
  EXPECT_NE(get_raw(group_.node(1).port(), test_key()).find("after"), std::string::npos);

  // A request whose deadline ends first fails as not sent, and says why.
  client short_wait{group_.url(), {.request_timeout = 300ms}};
  group_.node(1).kill();
  auto r2 = short_wait.exec({"SET", test_key(), "x"}, ec);
  EXPECT_EQ(ec, errc::node_unreachable) << ec.message();
  EXPECT_NE(r2.str().find("no master within the request's deadline"), std::string::npos)
      << r2.str();
}

// dlock doctor (check_deployment) on a sentinel URL: quiet when the URL lists all three
// sentinels and they can fail over; warns when it lists fewer than they know, or one is down.
TEST_F(SentinelTest, DoctorChecksTheSentinels) {
  auto sentinel_warnings = [](const std::vector<warning>& ws) {
    std::string text;
    for (const auto& w : ws) {
      if (w.what == warning::code::sentinel_quorum) text += to_string(w) + "\n";
    }
    return text;
  };
  EXPECT_EQ(sentinel_warnings(check_deployment({client{group_.url()}})), "");

  std::string two = "redis-sentinel://127.0.0.1:" + std::to_string(group_.sentinel(0).port()) +
                    ",127.0.0.1:" + std::to_string(group_.sentinel(1).port()) + "/" +
                    group_.name();
  auto partial = sentinel_warnings(check_deployment({client{two}}));
  EXPECT_NE(partial.find("2 sentinel(s)"), std::string::npos) << partial;
  EXPECT_NE(partial.find("knows 3 sentinels, the URL lists 2"), std::string::npos) << partial;

  // A name the sentinels do not know: the node cannot be inspected, and the sentinels say why.
  std::error_code ec;
  auto unknown = check_deployment(
      {client{"redis-sentinel://127.0.0.1:" + std::to_string(group_.sentinel(0).port()) +
                  "/nosuch",
              {.request_timeout = 2s}}},
      ec);
  EXPECT_TRUE(ec);
  auto unknown_text = sentinel_warnings(unknown);
  EXPECT_NE(unknown_text.find("No such master"), std::string::npos) << unknown_text;

  auto port = group_.sentinel(2).port();
  group_.sentinel(2).kill();
  auto down = sentinel_warnings(check_deployment({client{group_.url()}}));
  EXPECT_NE(down.find("127.0.0.1:" + std::to_string(port) + " could not be asked"),
            std::string::npos)
      << down;
}

long long commands_processed(unsigned short port) {
  auto info = raw_command(port, "INFO stats");
  auto at = info.find("total_commands_processed:");
  return at == std::string::npos ? -1 : std::stoll(info.substr(at + 25));
}

// The master is dead and the sentinels, not yet failing over, still name it: requests of two
// clients wait for it, and the sentinel is asked at the 100 ms retry pace, not at the round
// trip rate (thousands of votes).
TEST(SentinelPaceTest, WaitingForADeadMasterAsksTheSentinelsAtAPace) {
  sentinel_group group{{.sentinels = 1, .down_after = 60s}};
  group.wait_ready();
  client a{group.url(), {.request_timeout = 2s}}, b{group.url(), {.request_timeout = 2s}};
  a.exec({"PING"});
  b.exec({"PING"});
  group.node(0).kill();
  auto before = commands_processed(group.sentinel(0).port());
  std::error_code ec_a, ec_b;
  std::thread other([&] { b.exec({"SET", test_key(), "b"}, ec_b); });
  a.exec({"SET", test_key(), "a"}, ec_a);
  other.join();
  EXPECT_EQ(ec_a, errc::node_unreachable);
  EXPECT_EQ(ec_b, errc::node_unreachable);
  auto asked = commands_processed(group.sentinel(0).port()) - before - 1;  // less our INFO
  std::printf("[ report   ] the sentinel was asked %lld times in 2 s\n", asked);
  EXPECT_GT(asked, 5) << "the clients stopped asking";
  EXPECT_LT(asked, 200) << "a storm of votes";
}

// The request timeouts of these two are far above their bounds (both scale with the build):
// waiting them out would show.
TEST(SentinelBadInputTest, NoReachableSentinelFailsFastAndSaysSo) {
  auto port = test::free_port();
  client c{"redis-sentinel://127.0.0.1:" + std::to_string(port) + "/mymaster",
           {.request_timeout = test::scaled(10s)}};
  auto start = steady::now();
  std::error_code ec;
  auto r = c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::node_unreachable);
  EXPECT_NE(r.str().find("no sentinel answered"), std::string::npos) << r.str();
  EXPECT_LT(steady::now() - start, test::scaled(2s)) << "it waited for nothing";
}

TEST(SentinelBadInputTest, AnUnknownMasterNameFailsAndSaysSo) {
  sentinel_group g{{.sentinels = 1}};
  client c{"redis-sentinel://127.0.0.1:" + std::to_string(g.sentinel(0).port()) + "/nosuch",
           {.request_timeout = test::scaled(10s)}};
  auto start = steady::now();
  std::error_code ec;
  auto r = c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::node_unreachable);
  EXPECT_NE(r.str().find("no master named 'nosuch'"), std::string::npos) << r.str();
  EXPECT_LT(steady::now() - start, test::scaled(2s));
}

// Two sentinels that watch different masters under one name: no majority names either, so no
// request goes anywhere; it fails at its deadline, naming what each sentinel said.
TEST(SentinelBadInputTest, SentinelsThatDisagreeSendNothing) {
  sentinel_group a{{.sentinels = 1}}, b{{.sentinels = 1}};
  client c{"redis-sentinel://127.0.0.1:" + std::to_string(a.sentinel(0).port()) +
               ",127.0.0.1:" + std::to_string(b.sentinel(0).port()) + "/mymaster",
           {.request_timeout = 800ms}};
  std::error_code ec;
  auto r = c.exec({"SET", test_key(), "x"}, ec);
  EXPECT_EQ(ec, errc::node_unreachable);
  EXPECT_NE(r.str().find("majority"), std::string::npos) << r.str();
  EXPECT_NE(r.str().find(std::to_string(a.node(0).port())), std::string::npos) << r.str();
  EXPECT_NE(r.str().find(std::to_string(b.node(0).port())), std::string::npos) << r.str();
  EXPECT_EQ(get_raw(a.node(0).port(), test_key()), "$-1\r\n");
  EXPECT_EQ(get_raw(b.node(0).port(), test_key()), "$-1\r\n");
}

// An endpoint built by hand that could not work is refused when the client is made, before
// any I/O: no sentinels, one listed twice (it would vote twice), TLS.
TEST(SentinelBadInputTest, HandBuiltEndpointsThatCannotWorkAreRefused) {
  endpoint none;
  none.master_name = "mymaster";
  endpoint twice = parse_endpoint("redis-sentinel://127.0.0.1:26379,127.0.0.1:26379/mymaster");
  endpoint tls = parse_endpoint("redis-sentinel://127.0.0.1:26379/mymaster");
  tls.tls = true;
  for (const endpoint& e : {none, twice, tls}) {
    try {
      client c{e};
      ADD_FAILURE() << "accepted " << e.to_string();
    } catch (const std::system_error& error) {
      EXPECT_EQ(error.code(), errc::invalid_argument) << error.what();
      EXPECT_NE(std::string(error.what()).find("redis-sentinel endpoint"), std::string::npos);
    }
  }
}

// Sentinels with a password of their own (requirepass in sentinel.conf): refused without it,
// with the server's NOAUTH in the text; client_options::sentinel_password logs in.
TEST(SentinelBadInputTest, SentinelsWithAPasswordNeedTheirOwnCredentials) {
  sentinel_group g{{.sentinels = 1, .sentinel_extra = {"requirepass s3cret-sentinel"}}};
  std::string url = "redis-sentinel://127.0.0.1:" + std::to_string(g.sentinel(0).port()) + "/" +
                    g.name();
  std::error_code ec;
  auto refused = client{url, {.request_timeout = 2s}}.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::node_unreachable);
  EXPECT_NE(refused.str().find("NOAUTH"), std::string::npos) << refused.str();
  client c{url, {.request_timeout = 2s, .sentinel_password = "s3cret-sentinel"}};
  auto r = c.exec({"PING"}, ec);
  EXPECT_FALSE(ec) << ec.message() << ": " << r.str();
}

TEST(SentinelBadInputTest, APlainRedisIsNoSentinel) {
  redis_server plain;
  client c{"redis-sentinel://127.0.0.1:" + std::to_string(plain.port()) + "/mymaster",
           {.request_timeout = 2s}};
  std::error_code ec;
  auto r = c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::node_unreachable);
  EXPECT_NE(r.str().find("not a sentinel"), std::string::npos) << r.str();
}

}  // namespace
}  // namespace dlock::test
