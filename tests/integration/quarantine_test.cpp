// client_options::restart_quarantine: a node that may have forgotten locks (restarted without
// its data, restored from disk, or promoted from a replica) grants nothing, to any client, for
// one quarantine after the client that connects first sees it; the fencing counters it lost
// start again above every token they gave.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "dlock/key_layout.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using test::redis_server;
using test::test_key;

constexpr auto quarantine = 1500ms;

long long quarantine_left(client& c) {
  return c.exec({"PTTL", std::string(node_quarantine_key)}).integer();
}

// Waits until `m` is granted, and returns how long that took.
steady::duration time_to_grant(mutex& m) {
  auto start = steady::now();
  EXPECT_TRUE(m.try_lock_for(5s));
  return steady::now() - start;
}

// A node new to dlock that started less than a quarantine ago waits out the rest of it once;
// after a restart without persistence it waits a whole one again, and a client that never
// checks (no restart_quarantine) obeys it too.
TEST(QuarantineTest, ARestartWithoutPersistenceGrantsNothingForAQuarantine) {
  redis_server server;
  client checks{server.url(), {.restart_quarantine = quarantine}};
  client plain{server.url()};
  const std::string key = test_key();
  mutex m{checks, key, {.ttl = 1s, .retry_delay = 50ms}};
  mutex other{plain, key, {.ttl = 1s}};

  EXPECT_FALSE(m.try_lock()) << "a node that just started granted at once";
  EXPECT_GT(quarantine_left(plain), 0);
  EXPECT_LE(quarantine_left(plain), quarantine.count());
  EXPECT_LT(time_to_grant(m), quarantine + 500ms);
  m.unlock();
  EXPECT_EQ(quarantine_left(plain), -2) << "the quarantine outlived itself";

  // Up for longer than a quarantine, the node would grant at once; now it restarts empty.
  std::this_thread::sleep_for(quarantine - 1s + 100ms);
  server.restart();
  EXPECT_FALSE(m.try_lock()) << "the restarted node granted at once";
  EXPECT_FALSE(other.try_lock()) << "a client without the check ignored the quarantine";
  semaphore permits{plain, key, 2};
  EXPECT_FALSE(permits.try_acquire()) << "a semaphore ignored the quarantine";
  semaphore fair{plain, key, 2, {.fair = true}};
  EXPECT_FALSE(fair.try_acquire()) << "a fair semaphore ignored the quarantine";
  auto waited = time_to_grant(m);
  EXPECT_GT(waited, quarantine - 300ms);
  m.unlock();
  EXPECT_TRUE(other.try_lock());
  other.unlock();
  EXPECT_TRUE(permits.try_acquire());
}

// A node up for longer than a quarantine, never checked before: nothing it could have forgotten
// is still held, so it grants at once; later connects of the same process change nothing.
TEST(QuarantineTest, ANodeUpForLongerThanTheQuarantineGrantsAtOnce) {
  redis_server server;
  std::this_thread::sleep_for(1100ms);  // INFO counts uptime in whole seconds
  client checks{server.url(), {.restart_quarantine = 1s}};
  mutex m{checks, test_key(), {.ttl = 1s}};
  EXPECT_TRUE(m.try_lock());
  m.unlock();
  checks.exec({"CLIENT", "KILL", "TYPE", "normal"});  // every connection, ours too
  EXPECT_TRUE(m.try_lock()) << "the same process was taken for a new one";
}

// A replica promoted after its master died: its data came from another process, which may
// have granted locks that never reached it. One whole quarantine from the promotion.
TEST(QuarantineTest, APromotedReplicaGrantsNothingForAQuarantine) {
  redis_server master{{.extra = {"--repl-diskless-sync-delay", "0"}}};
  std::this_thread::sleep_for(1100ms);
  redis_server replica{{.extra = {"--replicaof", "127.0.0.1", std::to_string(master.port())}}};
  client to_master{master.url(), {.restart_quarantine = 1s}};
  const std::string key = test_key();
  mutex on_master{to_master, key, {.ttl = 1s}};
  ASSERT_TRUE(on_master.try_lock());  // marks the master's identity, which replicates
  client admin{replica.url()};
  auto until = steady::now() + 5s;
  while (admin.exec({"GET", std::string(node_identity_key)}).is_nil() && steady::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_FALSE(admin.exec({"GET", std::string(node_identity_key)}).is_nil()) << "no replication";
  master.kill();
  admin.exec({"REPLICAOF", "NO", "ONE"});
  admin.exec({"DEL", key});  // the lock's key had not replicated yet, say

  client to_replica{replica.url(), {.restart_quarantine = 1s}};
  mutex on_replica{to_replica, key, {.ttl = 1s, .retry_delay = 50ms}};
  EXPECT_FALSE(on_replica.try_lock()) << "the promoted replica granted at once";
  EXPECT_GT(quarantine_left(admin), 500);
  EXPECT_TRUE(on_replica.try_lock_for(3s));
}

TEST(QuarantineTest, ANegativeQuarantineIsRefused) {
  try {
    client c{"redis://127.0.0.1:1", {.restart_quarantine = -1ms}};
    FAIL() << "accepted";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("restart_quarantine"), std::string::npos) << e.what();
  }
}

// A node whose ACL keeps the user from the node's keys: with the check asked for, the user
// hears why at once, instead of locking without the protection it asked for.
TEST(QuarantineTest, AUserWhoMayNotWriteTheNodesKeysGetsAClearError) {
  redis_server server;
  client admin{server.url()};
  admin.exec({"ACL", "SETUSER", "app", "on", ">pw", "~app:*", "&*", "+@all"});
  client c{server.url(), {.user = "app", .password = "pw", .restart_quarantine = 1s}};
  std::error_code ec;
  c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::no_permission) << ec.message();
}

}  // namespace
}  // namespace dlock
