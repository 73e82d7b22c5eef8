// SPDX-License-Identifier: Apache-2.0
// client_options::restart_quarantine: a node that may have forgotten locks (restarted without
// its data, restored from disk, or promoted from a replica) grants nothing, to any client, for
// one quarantine after the client that connects first sees it; the fencing counters it lost
// start again above every token they gave.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "dlock/detail/scripts.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "dlock/shared_mutex.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// Long enough for a handful of refused tries to fit in it on a slow build.
const auto quarantine = test::scaled(1500ms);

long long quarantine_left(client& c) {
  return c.exec({"PTTL", std::string(node_quarantine_key)}).integer();
}

// The uptime a node check counts for the node: INFO's whole seconds, less one.
std::chrono::milliseconds counted_uptime(client& c) {
  auto info = c.exec({"INFO", "server"}).str();
  static const std::string field = "uptime_in_seconds:";
  auto at = info.find(field);
  if (at == std::string::npos) return std::chrono::milliseconds(-1);
  return std::chrono::seconds(std::stoll(info.substr(at + field.size())) - 1);
}

// Waits until `m` is granted, and returns how long that took.
steady::duration time_to_grant(mutex& m) {
  auto start = steady::now();
  EXPECT_TRUE(m.try_lock_for(quarantine + test::scaled(3s)));
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
  mutex fair_lock{plain, key, {.ttl = 1s, .fair = true}};

  EXPECT_FALSE(m.try_lock()) << "a node that just started granted at once";
  EXPECT_GT(quarantine_left(plain), 0);
  EXPECT_LE(quarantine_left(plain), quarantine.count());
  EXPECT_LT(time_to_grant(m), quarantine + test::scaled(500ms));
  m.unlock();
  EXPECT_EQ(quarantine_left(plain), -2) << "the quarantine outlived itself";

  // Up for longer than a quarantine (it began after the start, and is over), the node would
  // grant at once; now it restarts empty.
  std::this_thread::sleep_for(600ms);
  server.restart();
  auto restarted = steady::now();  // its quarantine begins at the first check after this
  EXPECT_FALSE(m.try_lock()) << "the restarted node granted at once";
  EXPECT_FALSE(other.try_lock()) << "a client without the check ignored the quarantine";
  EXPECT_FALSE(fair_lock.try_lock()) << "a fair lock ignored the quarantine";
  semaphore permits{plain, key, 2};
  EXPECT_FALSE(permits.try_acquire()) << "a semaphore ignored the quarantine";
  semaphore fair{plain, key, 2, {.fair = true}};
  EXPECT_FALSE(fair.try_acquire()) << "a fair semaphore ignored the quarantine";
  time_to_grant(m);
  EXPECT_GT(steady::now() - restarted, quarantine - 300ms);
  m.unlock();
  EXPECT_TRUE(other.try_lock());
  other.unlock();
  EXPECT_TRUE(permits.try_acquire());
}

// A node up for longer than a quarantine, never checked before: nothing it could have forgotten
// is still held, so it grants at once; later connects of the same process change nothing.
TEST(QuarantineTest, ANodeUpForLongerThanTheQuarantineGrantsAtOnce) {
  redis_server server;
  {
    client plain{server.url()};  // no check: leaves the node unmarked
    ASSERT_TRUE(eventually([&] { return counted_uptime(plain) >= 1s; }));
  }
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
  {
    client plain{master.url()};  // up for longer than the quarantine, as a check counts it
    ASSERT_TRUE(eventually([&] { return counted_uptime(plain) >= 1s; }));
  }
  redis_server replica{{.extra = {"--replicaof", "127.0.0.1", std::to_string(master.port())}}};
  client to_master{master.url(), {.restart_quarantine = 1s}};
  const std::string key = test_key();
  mutex on_master{to_master, key, {.ttl = 1s}};
  ASSERT_TRUE(on_master.try_lock());  // marks the master's identity, which replicates
  client admin{replica.url()};
  ASSERT_TRUE(
      eventually([&] { return !admin.exec({"GET", std::string(node_identity_key)}).is_nil(); }))
      << "no replication";
  master.kill();
  admin.exec({"REPLICAOF", "NO", "ONE"});
  admin.exec({"DEL", key});  // the lock's key had not replicated yet, say

  // A quarantine long enough that most of it is left when read back on a slow build.
  client to_replica{replica.url(), {.restart_quarantine = test::scaled(1s)}};
  mutex on_replica{to_replica, key, {.ttl = 1s, .retry_delay = 50ms}};
  EXPECT_FALSE(on_replica.try_lock()) << "the promoted replica granted at once";
  EXPECT_GT(quarantine_left(admin), test::scaled(1s).count() / 2);
  EXPECT_TRUE(on_replica.try_lock_for(test::scaled(4s)));
}

// In quarantine the node may hold values restored from disk or a replica after they were
// released there, and the lock taken by someone else since: an earlier value of an acquisition
// (or a permit entry of its token) no longer proves it is ours, and a release hands nothing on.
// Found by review: these paths granted during the quarantine.
TEST(QuarantineTest, RestoredValuesOfOursAreNotGrantedInQuarantine) {
  redis_server server;
  client admin{server.url()};
  const std::string key = test_key();
  auto keys = lock_keys_for(key);
  admin.exec({"SET", std::string(node_quarantine_key), "x", "PX", "10000"});
  admin.exec({"SET", key, "A.1", "PX", "10000"});  // restored: A's round 1
  auto acquire = [&](const std::string& owner) {
    return admin.exec({"EVAL", detail::scripts::acquire_body, "5", key, keys.fence, keys.waiters,
                       keys.waiter_info, keys.tickets, owner, "10000", "", ""});
  };
  EXPECT_EQ(acquire("A.2").elements()[0].integer(), 0) << "A's round 2 took the restored A.1";
  EXPECT_EQ(admin.exec({"GET", key}).str(), "A.1");

  auto sem = semaphore_keys_for(key, false);
  admin.exec({"ZADD", sem.expiries, "99999999999999", "T"});  // restored: T's permit
  auto r = admin.exec({"EVAL", detail::scripts::sem_acquire_body, "6", sem.expiries, sem.weights,
                       sem.fence, sem.waiters, sem.waiter_info, sem.tickets, "T", "2", "1",
                       "10000", ""});
  EXPECT_EQ(r.elements()[0].integer(), 0) << "T's restored entry was granted again";
}

// A node whose counters came back from disk or a replica may have given higher tokens than
// they read: after the identity change, every token is above the server's clock in ms x 1024.
// Found by review: a promoted replica that lagged drew the same token twice.
TEST(QuarantineTest, TokensAfterAnIdentityChangeAreAboveEveryEarlierOne) {
  redis_server server;
  {
    client plain{server.url()};  // up for longer than the quarantine: no wait at first
    ASSERT_TRUE(eventually([&] { return counted_uptime(plain) >= 1s; }));
  }
  client checks{server.url(), {.restart_quarantine = 1s}};
  client admin{server.url()};
  const std::string key = test_key();
  mutex m{checks, key, {.ttl = 1s, .retry_delay = 50ms}};
  auto first = m.acquire().fencing_token();
  // What a lagging replica holds: the counter one token behind, and another's identity mark.
  admin.exec({"SET", lock_keys_for(key).fence, std::to_string(first - 1)});
  admin.exec({"SET", std::string(node_identity_key), "the-old-master"});
  admin.exec({"CLIENT", "KILL", "TYPE", "normal"});  // every client reconnects and checks
  ASSERT_TRUE(m.try_lock_for(test::scaled(3s)));  // after a whole quarantine: another's mark
  EXPECT_GT(m.current_lease()->fencing_token(), first);
  m.unlock();
}

// A lock free at its last acquisition tries the next one with plain commands, without Lua
// (acquire_unqueued), whose SET NX cannot see the quarantine: it reads the quarantine and the
// floor after its INCR, claims nothing, gives the key back, and draws its next token above the
// floor. Its counter gone too (a restart without persistence), the INCR made one without
// expiry, which the refusal that follows deletes (a review found it left for good).
TEST(QuarantineTest, ThePlainCommandsFirstTryClaimNothingInQuarantineAndLeaveNoKey) {
  redis_server server;
  client plain{server.url()};
  client admin{server.url()};
  const std::string key = test_key();
  mutex m{plain, key, {.ttl = 10s}};
  ASSERT_TRUE(m.try_lock());  // the script: the lock is free, so the next try is the commands
  m.unlock();
  const long long floor = (1'900'000'000'000LL) * 1024;  // above every token the clock gave yet
  admin.exec({"SET", std::string(node_quarantine_key), "x", "PX", "60000"});
  admin.exec({"SET", std::string(node_fence_floor_key), std::to_string(floor)});
  const std::string counter = lock_keys_for(key).fence;
  admin.exec({"DEL", counter});
  admin.exec({"CONFIG", "RESETSTAT"});
  EXPECT_FALSE(m.try_lock());
  EXPECT_NE(admin.exec({"INFO", "commandstats"}).str().find("cmdstat_mget:calls=1,"),
            std::string::npos)
      << "the plain commands were tried";
  EXPECT_TRUE(admin.exec({"GET", key}).is_nil()) << "the key the commands set was left";
  EXPECT_NE(admin.exec({"PTTL", counter}).integer(), -1) << "a counter left without expiry";
  admin.exec({"DEL", std::string(node_quarantine_key)});
  ASSERT_TRUE(m.try_lock()) << m.last_error().message();
  EXPECT_GT(m.current_lease()->fencing_token(), static_cast<std::uint64_t>(floor));
  m.unlock();
}

// The uncontended grant of a semaphore or a read-write lock, which comes before the script's
// full way, sees the quarantine and the fence floor as the full way does: a quarantine grants
// nothing, a quarantine key without an expiry quarantines nothing (quarantine_left), and every
// token drawn is above the floor.
TEST(QuarantineTest, TheUncontendedGrantOfASemaphoreOrReadWriteLockSeesTheQuarantineAndTheFloor) {
  redis_server server;
  client plain{server.url()};
  client admin{server.url()};
  const std::string key = test_key();
  semaphore unfair{plain, key + ":unfair", 2};
  semaphore fair{plain, key + ":fair", 2, {.fair = true}};
  shared_mutex rw{plain, key + ":rw"};
  admin.exec({"SET", std::string(node_quarantine_key), "x", "PX", "60000"});
  EXPECT_FALSE(unfair.try_acquire()) << "a semaphore ignored the quarantine";
  EXPECT_FALSE(fair.try_acquire()) << "a fair semaphore ignored the quarantine";
  EXPECT_FALSE(rw.try_acquire()) << "a writer ignored the quarantine";
  EXPECT_FALSE(rw.try_acquire_shared()) << "a reader ignored the quarantine";
  admin.exec({"PERSIST", std::string(node_quarantine_key)});
  const long long floor = (1'900'000'000'000LL) * 1024;  // above every token the clock gave yet
  admin.exec({"SET", std::string(node_fence_floor_key), std::to_string(floor)});
  for (auto* s : {&unfair, &fair}) {
    std::error_code ec;
    auto permit = s->try_acquire(1, ec);
    ASSERT_TRUE(permit) << s->key() << ": " << ec.message();
    EXPECT_GT(permit.fencing_token(), static_cast<std::uint64_t>(floor)) << s->key();
    EXPECT_FALSE(permit.release());
  }
  for (bool shared : {false, true}) {
    std::error_code ec;
    auto held = shared ? rw.try_acquire_shared(ec) : rw.try_acquire(ec);
    ASSERT_TRUE(held) << (shared ? "reader: " : "writer: ") << ec.message();
    EXPECT_GT(held.fencing_token(), static_cast<std::uint64_t>(floor));
    EXPECT_FALSE(held.release());
  }
}

// A user who may not run INFO hears what the check needs, not only "no permission".
TEST(QuarantineTest, ARefusedInfoFailsTheConnectAndSaysWhatTheCheckNeeds) {
  redis_server server;
  client admin{server.url()};
  admin.exec({"ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-info"});
  client c{server.url(), {.user = "app", .password = "pw", .restart_quarantine = 1s}};
  std::error_code ec;
  auto r = c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::no_permission) << ec.message();
  EXPECT_NE(r.str().find("+info"), std::string::npos) << r.str();
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
}  // namespace dlock::test
