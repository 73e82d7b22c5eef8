// SPDX-License-Identifier: Apache-2.0
// redis-cluster:// against real Redis Clusters on loopback (tests/support/redis_cluster.hpp):
// each request reaches the master of its slot, MOVED and ASK are followed through a slot
// migration, locks and semaphores keep their promises on a cluster, and bad setups fail with
// a clear cluster_error. Server state is checked over plain sockets, not through dlock.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "access.hpp"
#include "dlock/diagnostics.hpp"
#include "dlock/dlock.hpp"
#include "support/checks.hpp"
#include "support/fake_peer.hpp"
#include "support/overlapping_sets.hpp"
#include "support/redis_cluster.hpp"
#include "support/seen_events.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

// The number after `field` in the node's INFO `section`, 0 when absent.
long long info_count(redis_cluster& c, int node, const std::string& section,
                     const std::string& field) {
  auto info = raw_command_complete(c.node(node).port(), "INFO " + section);
  auto at = info.find(field);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + field.size()));
}

// How many calls of `command` (evalsha ...) the node served.
long long calls_of(redis_cluster& c, int node, const std::string& command) {
  return info_count(c, node, "commandstats", "cmdstat_" + command + ":calls=");
}

// How many MOVED / ASK errors the node answered.
long long errors_of(redis_cluster& c, int node, const std::string& prefix) {
  return info_count(c, node, "errorstats", "errorstat_" + prefix + ":count=");
}

detail::cluster_router::counters routed(const client& c) {
  return detail::access::cluster(c)->stats();
}

// Waits until one waiter has queued and subscribed: its entry in `info` names its wake channel.
bool one_waiter_with_wake_channel(client& c, const std::string& info) {
  return test::eventually([&] {
    reply entries = c.exec({"HVALS", info});
    return entries.elements().size() == 1 &&
           entries.elements()[0].str().find(' ') != std::string::npos;
  });
}

// `holder_client` holds `name`, a waiter on `waiter_client` queues behind it with a backstop of
// 5-10 s, and the release must bring the waiter in within 1 s: only a wake-up can. All three
// scale with the build, so the bound stays far below the backstop on a slow one too (and the
// holder's TTL above it: a sleep ends early at the holder's expiry).
void expect_woken_by_release(client& holder_client, client& waiter_client,
                             const std::string& name) {
  const auto backstop = test::scaled(10s);
  mutex holder{holder_client, name, {.ttl = 3 * backstop}};
  mutex waiter{waiter_client, name, {.ttl = 10s, .retry_delay = backstop}};
  auto l = holder.acquire();
  std::error_code ec;
  lease got;
  std::thread waiting([&] {
    got = waiter.acquire_until(std::chrono::steady_clock::now() + 2 * backstop, ec);
  });
  EXPECT_TRUE(one_waiter_with_wake_channel(holder_client, lock_keys_for(name).waiter_info))
      << "the waiter never queued";
  auto released_at = std::chrono::steady_clock::now();
  EXPECT_FALSE(l.release());
  waiting.join();
  ASSERT_TRUE(got) << ec.message();
  EXPECT_LT(std::chrono::steady_clock::now() - released_at, test::scaled(1s))
      << "woken by the backstop";
}

class ClusterTest : public ::testing::Test {
 protected:
  redis_cluster cluster_;
  client client_{cluster_.seed_url()};
};

TEST_F(ClusterTest, EveryKeyGoesToTheMasterOfItsSlot) {
  std::map<std::string, std::string> written;
  for (int i = 0; i < 300; ++i) {
    auto key = test::test_key() + ":" + std::to_string(i);
    written[key] = "v" + std::to_string(i);
    client_.exec({"SET", key, written[key]});
  }
  std::vector<int> per_master(3, 0);
  for (const auto& [key, value] : written) {
    int owner = cluster_.owner_of(hash_slot(key));
    ASSERT_GE(owner, 0);
    ++per_master[static_cast<std::size_t>(owner)];
    EXPECT_NE(raw_command_complete(cluster_.node(owner).port(), "GET " + key).find(value),
              std::string::npos)
        << key;
  }
  for (int n : per_master) EXPECT_GT(n, 50);  // spread over every master
  // The map was read before the first request: no node had to redirect one.
  EXPECT_EQ(routed(client_).moved, 0u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(errors_of(cluster_, i, "MOVED"), 0) << i;
  EXPECT_EQ(client_.exec({"PING"}).str(), "PONG");  // a command without a key
  EXPECT_EQ(client_.where().to_string(), cluster_.seed_url());
}

TEST_F(ClusterTest, ASeedThatIsDownIsSkipped) {
  auto dead = test::free_port();
  client c{"redis-cluster://127.0.0.1:" + std::to_string(dead) + "," +
           cluster_.seed_url(1).substr(std::string("redis-cluster://").size())};
  c.exec({"SET", "a", "1"});
  EXPECT_EQ(c.exec({"GET", "a"}).str(), "1");
}

TEST_F(ClusterTest, MovedPatchesTheMapAndTheRequestIsResent) {
  auto key = test::key_in_slot(100, test::test_key());
  client_.exec({"SET", key, "before"});
  int from = cluster_.owner_of(100), to = (from + 1) % 3;
  cluster_.move_slot(100, from, to);
  EXPECT_EQ(client_.exec({"GET", key}).str(), "before");
  auto after_first = routed(client_).moved;
  EXPECT_GE(after_first, 1u);
  EXPECT_GE(errors_of(cluster_, from, "MOVED"), 1);
  // The map now names the new owner: no second redirect.
  client_.exec({"SET", key, "after"});
  EXPECT_EQ(routed(client_).moved, after_first);
  EXPECT_NE(raw_command_complete(cluster_.node(to).port(), "GET " + key).find("after"),
            std::string::npos);
}

TEST_F(ClusterTest, AskIsFollowedWhileTheSlotMigrates) {
  auto key = test::key_in_slot(200, test::test_key());
  client_.exec({"SET", key, "v"});
  int from = cluster_.owner_of(200), to = (from + 1) % 3;
  cluster_.begin_migration(200, from, to);
  EXPECT_EQ(cluster_.migrate_keys(200, from, to), 1);
  // The old owner still serves the slot, but no longer has the key: ASK.
  EXPECT_EQ(client_.exec({"GET", key}).str(), "v");
  EXPECT_GE(routed(client_).ask, 1u);
  EXPECT_EQ(routed(client_).moved, 0u);  // ASK is for this request only
  EXPECT_GE(errors_of(cluster_, from, "ASK"), 1);
  // A lock's script names several keys, and while the slot migrates the importing node runs
  // such a command only when it has them all (else TRYAGAIN): the lock waits for the end of
  // the migration, retrying, rather than failing.
  mutex m{client_, test::key_in_slot(200, "lock"), {.ttl = 5s, .retry_delay = 20ms}};
  std::error_code ec;
  lease l;
  auto retried = routed(client_).retried_later;
  std::thread locker([&] {
    l = m.acquire_until(std::chrono::steady_clock::now() + test::scaled(20s), ec);
  });
  // The lock's script met TRYAGAIN at least once before the migration ends.
  EXPECT_TRUE(test::eventually([&] { return routed(client_).retried_later > retried; }));
  cluster_.end_migration(200, from, to);
  locker.join();
  EXPECT_TRUE(l) << ec.message();
  EXPECT_FALSE(l.release());
  EXPECT_GE(routed(client_).retried_later, 1u);
  EXPECT_EQ(client_.exec({"GET", key}).str(), "v");
  EXPECT_GE(routed(client_).moved, 1u);
}

// A slot that migrates key by key, and stalls for longer than the TTLs with each lease's keys
// split over two nodes, while leases in it are kept alive, released and counted down. Redis
// refuses a script whose keys are not all on the node that runs it (TRYAGAIN), and a key that
// does not exist (a semaphore's weights, a lock's queue) is on neither: so such scripts are
// refused for the whole migration. Every lease lives through it (the election's too, whose
// record is a key of its own), the releases take their keys with them, and the latch opens.
TEST_F(ClusterTest, ASlotMigratedKeyByKeyLosesNoLeaseAndLeavesNoKeyBehind) {
  const std::uint16_t slot = 300;
  auto name = [&](const std::string& what) {
    return test::key_in_slot(slot, test::test_key() + what);
  };
  const auto ttl = std::chrono::duration_cast<std::chrono::milliseconds>(test::scaled(1s));
  const keep_alive_options renew{};
  mutex lock{client_, name("lock"), {.ttl = ttl}};
  mutex released_lock{client_, name("released-lock"), {.ttl = 1h}};
  semaphore weighted{client_, name("sem"), 3, {.ttl = ttl}};
  semaphore fair{client_, name("fair"), 2, {.ttl = ttl, .fair = true}};
  shared_mutex rw{client_, name("rw"), {.ttl = ttl}};
  latch gate{client_, name("latch")};
  election vote{client_, name("election"), "me", {.lock = {.ttl = ttl}}};
  lock_set pair{client_, {name("set-a"), name("set-b")}, {.ttl = 1h}};

  lease held = lock.acquire(), given_back = released_lock.acquire();
  lease two = weighted.acquire(2), one = weighted.acquire(1);
  lease fair_one = fair.acquire(1), reader = rw.acquire_shared();
  lease leading = vote.campaign();  // kept alive by the election
  lease both = pair.acquire();
  ASSERT_TRUE(held && given_back && two && one && fair_one && reader && leading && both);
  std::vector<lease*> kept{&held, &two, &fair_one, &reader};
  for (auto* l : kept) ASSERT_FALSE(l->keep_alive(renew));
  kept.push_back(&leading);
  ASSERT_FALSE(one.keep_alive(renew));
  std::error_code ec;
  ASSERT_TRUE(gate.try_set_count(2, ec)) << ec.message();
  for (const auto& key : {lock.key(), weighted.key(), fair.key(), rw.key(), gate.key(),
                          leading.key()}) {
    ASSERT_EQ(hash_slot(key), slot) << key;
  }

  int from = cluster_.owner_of(slot), to = (from + 1) % 3;
  cluster_.begin_migration(slot, from, to);
  // First each lease's own key alone, and the migration stalls for longer than the TTLs with
  // every lease split over the two nodes; then the rest, key by key.
  for (const auto& key : {lock_keys_for(lock.key()).key, lock_keys_for(leading.key()).key,
                          lock_keys_for(released_lock.key()).key,
                          lock_keys_for(name("set-a")).key,
                          semaphore_keys_for(weighted.key(), false).expiries,
                          semaphore_keys_for(fair.key(), true).expiries,
                          shared_mutex_keys_for(rw.key()).expiries}) {
    cluster_.migrate_key(from, to, key);
  }
  std::this_thread::sleep_for(ttl);
  EXPECT_FALSE(given_back.release());
  if (auto released = both.release()) ADD_FAILURE() << released.message();
  if (auto released = one.release()) ADD_FAILURE() << released.message();
  EXPECT_EQ(gate.count_down(ec), 1) << ec.message();
  EXPECT_EQ(gate.count_down(ec), 0) << ec.message();
  std::this_thread::sleep_for(ttl);
  int moved = cluster_.migrate_keys(slot, from, to, 1, ttl / 10);
  EXPECT_GE(moved, 10);
  cluster_.end_migration(slot, from, to);

  for (auto* l : kept) {
    EXPECT_FALSE(l->lost().stop_requested()) << l->key();
    EXPECT_FALSE(l->extend()) << l->key();
  }
  for (const auto& key : {released_lock.key(), name("set-a"), name("set-b")}) {
    EXPECT_EQ(client_.exec({"EXISTS", lock_keys_for(key).key}).integer(), 0) << key << " stayed";
  }
  // Two of three permits are held: the released one is free at once.
  EXPECT_TRUE(weighted.try_acquire(1, ec)) << ec.message();
  EXPECT_EQ(gate.count(ec), 0) << ec.message();
  EXPECT_EQ(vote.leader().term, leading.fencing_token()) << "the record went before the lease";
  for (auto* l : kept) EXPECT_FALSE(l->release()) << l->key();
}

// A weighted permit renewed and released one key at a time while its slot migrates: its
// weight goes with it. Its expiry set, renewed last, outlives the weights, so the script that
// drops the expired entry drops the weight too; were the set to expire first, the orphaned
// weight would count as held for as long as anyone holds the semaphore.
TEST_F(ClusterTest, APermitReleasedWhileItsSlotMigratesLeavesNoWeightBehind) {
  const std::uint16_t slot = 301;
  const auto ttl = std::chrono::duration_cast<std::chrono::milliseconds>(test::scaled(1s));
  semaphore sem{client_, test::key_in_slot(slot, test::test_key()), 3, {.ttl = ttl}};
  lease two = sem.acquire(2);
  ASSERT_TRUE(two);
  ASSERT_FALSE(two.keep_alive({}));
  int from = cluster_.owner_of(slot), to = (from + 1) % 3;
  cluster_.begin_migration(slot, from, to);
  cluster_.migrate_key(from, to, semaphore_keys_for(sem.key(), false).expiries);
  std::this_thread::sleep_for(ttl);  // renewed one key at a time, about three times
  auto released_at = std::chrono::steady_clock::now();
  ASSERT_FALSE(two.release());
  cluster_.move_slot_rest(slot, from, to);
  std::this_thread::sleep_until(released_at + ttl + ttl / 4);  // past the last renewal's TTL
  std::error_code ec;
  EXPECT_TRUE(sem.try_acquire(3, ec)) << ec.message();
}

TEST_F(ClusterTest, LockNamesOfEveryShapeKeepTheirKeysInOneSlot) {
  // CROSSSLOT would fail the scripts if a lock's companion keys left its slot.
  for (std::string name : {"plain", "a{b}c", "a}b", "{}", "x{", "{x}", "}{", "orders:{42}:x"}) {
    mutex m{client_, test::test_key() + name, {.ttl = 5s}};
    std::error_code ec;
    auto l = m.acquire(ec);
    ASSERT_TRUE(l) << name << ": " << ec.message();
    EXPECT_GT(l.fencing_token(), 0u);
    EXPECT_FALSE(l.extend()) << name;
    EXPECT_FALSE(l.release()) << name;
  }
  semaphore s{client_, test::test_key() + "a}b", 2, {.fair = true}};
  auto p = s.acquire(2);
  EXPECT_TRUE(p);
  std::error_code ec;
  EXPECT_FALSE(s.try_acquire(ec));
  EXPECT_EQ(ec, errc::not_acquired);
}

// The read-write lock on a cluster: its keys stay in the name's slot (CROSSSLOT would fail its
// scripts), readers share it, a writer excludes them, and a writer's release wakes a reader
// queued on another master's client through the slot's master (no handoff on a cluster: the
// reader's own attempt follows the wake-up, well before its 10-20 s backstop; both scale with
// the build, and the TTLs stay above the backstop, which a holder's expiry would cut short).
TEST_F(ClusterTest, AReadWriteLockKeepsItsKeysInOneSlotAndWakesItsReaders) {
  const auto backstop = test::scaled(20s);
  const shared_mutex_options slow{.ttl = 3 * backstop, .retry_delay = backstop};
  for (std::string name : {"plain", "a{b}c", "a}b"}) {
    SCOPED_TRACE(name);
    auto key = test::test_key() + name;
    shared_mutex rw{client_, key, slow};
    lease first = rw.acquire_shared();
    lease second = rw.acquire_shared();
    ASSERT_TRUE(first && second);
    std::error_code ec;
    EXPECT_FALSE(rw.try_acquire(ec));
    EXPECT_EQ(ec, errc::not_acquired) << ec.message();
    EXPECT_FALSE(first.release());
    EXPECT_FALSE(second.release());
    lease writer = rw.acquire();
    ASSERT_TRUE(writer);
    EXPECT_FALSE(rw.try_acquire_shared(ec));
    EXPECT_EQ(ec, errc::not_acquired) << ec.message();

    int master = cluster_.owner_of(hash_slot(key));
    client other{cluster_.seed_url((master + 1) % 3)};
    lease got;
    std::thread reader([&] {
      shared_mutex mine{other, key, slow};
      std::error_code wait_ec;
      got = mine.acquire_shared_until(std::chrono::steady_clock::now() + 2 * backstop, wait_ec);
    });
    EXPECT_TRUE(one_waiter_with_wake_channel(client_, shared_mutex_keys_for(key).waiter_info))
        << "the reader never queued";
    auto writer_fence = writer.fencing_token();
    auto released_at = std::chrono::steady_clock::now();
    EXPECT_FALSE(writer.release());
    reader.join();
    ASSERT_TRUE(got);
    EXPECT_LT(std::chrono::steady_clock::now() - released_at, test::scaled(4s))
        << "found by its own poll";
    EXPECT_GT(got.fencing_token(), writer_fence);
    EXPECT_FALSE(got.release());
  }
}

TEST_F(ClusterTest, AReleaseWakesItsWaiterThroughTheSlotsMasterOnly) {
  auto name = test::test_key();
  int master = cluster_.owner_of(hash_slot(name));
  client waiter_client{cluster_.seed_url((master + 1) % 3)};
  expect_woken_by_release(client_, waiter_client, name);
  for (int i = 0; i < 3; ++i) {
    // The release's SPUBLISH ran on the slot's master; nothing was broadcast.
    EXPECT_EQ(calls_of(cluster_, i, "spublish") > 0, i == master) << i;
    EXPECT_EQ(calls_of(cluster_, i, "publish"), 0) << i;
    EXPECT_EQ(calls_of(cluster_, i, "ssubscribe") > 0, i == master) << i;
  }
}

// A waiter's inbox is per slot, its connection per master: waiting in 30 slots over three
// masters opens one subscriber connection on each (CLIENT LIST: ssub=), not 30, and a release
// still wakes the right waiter through the shared connection.
TEST_F(ClusterTest, WaitsInManySlotsShareOneSubscriberConnectionPerMaster) {
  client waiter_client{cluster_.seeds_url()};
  std::vector<std::string> names;
  for (int m = 0; m < 3; ++m) {
    auto slots = cluster_.slots_of(m);
    for (int i = 0; i < 10; ++i) {
      names.push_back(test::key_in_slot(slots.at(static_cast<std::size_t>(i) * 97),
                                        test::test_key() + ":"));
    }
  }
  for (const auto& name : names) {
    mutex holder{client_, name, {.ttl = 10s}};
    mutex waiter{waiter_client, name, {.ttl = 10s, .retry_delay = 20ms}};
    auto l = holder.acquire();
    std::error_code ec;
    EXPECT_FALSE(waiter.acquire_until(std::chrono::steady_clock::now() + 150ms, ec));
    EXPECT_FALSE(l.release());
  }
  for (int m = 0; m < 3; ++m) {
    auto list = raw_command_complete(cluster_.node(m).port(), "CLIENT LIST");
    int subscribers = 0;
    for (std::size_t at = list.find("ssub="); at != std::string::npos;
         at = list.find("ssub=", at + 1)) {
      subscribers += list.compare(at, 7, "ssub=0 ") != 0;
    }
    EXPECT_EQ(subscribers, 1) << "master " << m << ":\n" << list;
  }
  // Woken through the shared connection.
  expect_woken_by_release(client_, waiter_client, names[17]);
}

TEST_F(ClusterTest, ProcessesContendingOnAHundredKeysOverEveryMasterCountExactly) {
  auto prefix = test::test_key();
  const int processes = 3, threads = 2, iterations = 60;
  long long evalsha_before[3];
  for (int i = 0; i < 3; ++i) evalsha_before[i] = calls_of(cluster_, i, "evalsha");
  std::vector<test::child_process> workers;
  for (int p = 0; p < processes; ++p) {
    workers.emplace_back(std::vector<std::string>{
        test::self_dir() + "/lock_worker", "counter", "--lock", cluster_.seed_url(), "--resource",
        cluster_.seed_url(p), "--key", prefix, "--keys", "100", "--threads",
        std::to_string(threads), "--iterations", std::to_string(iterations), "--retry-delay",
        "5"});
  }
  for (auto& w : workers) ASSERT_EQ(w.wait(test::scaled(60s)), 0);
  long long total = 0;
  for (int j = 0; j < 100; ++j) {
    auto r = client_.exec({"GET", prefix + ":" + std::to_string(j) + ":counter"});
    if (!r.is_nil()) total += std::stoll(r.str());
  }
  EXPECT_EQ(total, processes * threads * iterations);
  for (int i = 0; i < 3; ++i) {
    // Every master ran lock scripts, and none had to redirect one.
    EXPECT_GT(calls_of(cluster_, i, "evalsha") - evalsha_before[i], 20) << i;
    EXPECT_EQ(errors_of(cluster_, i, "MOVED"), 0) << i;
    EXPECT_EQ(errors_of(cluster_, i, "ASK"), 0) << i;
  }
}

TEST_F(ClusterTest, LocksHeldAndContendedThroughAReshardNeverOverlapOrGetLost) {
  const std::uint16_t slot = 300;
  auto name = test::key_in_slot(slot, test::test_key());
  int from = cluster_.owner_of(slot), to = (from + 1) % 3;
  std::atomic<bool> stop{false};
  std::atomic<int> inside{0}, overlaps{0}, grants{0}, lost{0};
  std::vector<std::string> failures;
  std::mutex failures_mutex;
  auto note = [&](std::string what) {
    std::lock_guard g(failures_mutex);
    if (failures.size() < 10) failures.push_back(std::move(what));
  };
  // A client that read the map before the migration and has no reason to read it again.
  client stale{cluster_.seed_url()};
  stale.exec({"GET", name});
  std::vector<std::thread> lockers;
  for (int t = 0; t < 3; ++t) {
    lockers.emplace_back([&] {
      mutex m{client_, name, {.ttl = 3s, .retry_delay = 5ms}};
      while (!stop) {
        std::error_code ec;
        auto l = m.acquire_until(std::chrono::steady_clock::now() + 2s, ec);
        if (!l) {
          if (ec != errc::not_acquired) note("acquire: " + ec.message());
          continue;
        }
        ++grants;
        if (inside.fetch_add(1) != 0) ++overlaps;
        std::this_thread::sleep_for(2ms);
        if (auto e = l.extend()) {
          ++lost;
          note("extend: " + e.message());
        }
        inside.fetch_sub(1);
        if (auto e = l.release()) {
          ++lost;
          note("release: " + e.message());
        }
      }
    });
  }
  // Each step of the reshard lasts until the lockers did some work in it: grants, or the
  // redirects and retries the migrating slot answered instead.
  auto work = [&] {
    auto r = routed(client_);
    return static_cast<std::uint64_t>(grants.load()) + r.ask + r.retried_later + r.moved;
  };
  auto lockers_go_on = [&](std::uint64_t n) {
    auto from_now = work();
    return test::eventually([&] { return work() >= from_now + n; });
  };
  EXPECT_TRUE(test::eventually([&] { return grants >= 10; })) << "the lockers never started";
  cluster_.begin_migration(slot, from, to);
  EXPECT_TRUE(lockers_go_on(10)) << "stalled while the slot migrates";
  cluster_.migrate_keys(slot, from, to);
  EXPECT_TRUE(lockers_go_on(10)) << "stalled once the keys moved";
  cluster_.end_migration(slot, from, to);
  auto after_reshard = grants.load();
  EXPECT_TRUE(test::eventually([&] { return grants >= std::max(after_reshard + 10, 21); }))
      << "no grants after the reshard";
  stop = true;
  for (auto& t : lockers) t.join();
  auto seen = routed(client_);
  EXPECT_EQ(overlaps, 0);
  EXPECT_EQ(lost, 0) << (failures.empty() ? "" : failures.front());
  EXPECT_GT(grants, 20);
  EXPECT_GE(seen.ask, 1u) << "the migration was never seen";
  EXPECT_EQ(cluster_.owner_of(slot), to);
  stale.exec({"GET", name});
  EXPECT_EQ(routed(stale).moved, 1u);
}

TEST(ClusterSetupTest, ASeedThatIsNotAClusterNodeIsAClusterError) {
  test::redis_server plain;
  client c{"redis-cluster://127.0.0.1:" + std::to_string(plain.port())};
  std::error_code ec;
  auto r = c.exec({"GET", "k"}, ec);
  EXPECT_EQ(ec, errc::cluster_error) << ec.message();
  EXPECT_NE(r.str().find("not a cluster node"), std::string::npos) << r.str();
  // A lock gives up at once: waiting cannot make the node a cluster. (Both bounds scale with
  // the build: the first stays far below the deadline.)
  mutex m{c, "k", {.ttl = 1s}};
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(m.acquire_until(start + test::scaled(10s), ec));
  EXPECT_EQ(ec, errc::cluster_error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, test::scaled(2s));
}

TEST(ClusterSetupTest, ASlotNoNodeServesIsAClusterErrorAndTheOthersStillWork) {
  redis_cluster cluster{redis_cluster_options{.require_full_coverage = false, .uncovered = {777}}};
  client c{cluster.seed_url()};
  std::error_code ec;
  auto r = c.exec({"GET", test::key_in_slot(777)}, ec);
  EXPECT_EQ(ec, errc::cluster_error);
  EXPECT_NE(r.str().find("slot 777"), std::string::npos) << r.str();
  c.exec({"SET", test::key_in_slot(778), "1"});
  EXPECT_EQ(c.exec({"GET", test::key_in_slot(778)}).str(), "1");
}

// ACL users on every node: the URL's credentials reach every master; a wrong password is
// auth_failed and a user without CLUSTER is no_permission, both said at once (no waiting).
TEST(ClusterSetupTest, CredentialsReachEveryMasterAndRefusalsAreTyped) {
  redis_cluster cluster;
  for (int i = 0; i < cluster.size(); ++i) {
    for (const char* user : {"ACL SETUSER locker on >pw ~* &* +@all",
                             "ACL SETUSER blind on >pw ~* &* +@all -cluster"}) {
      ASSERT_EQ(raw_command_complete(cluster.node(i).port(), user), "+OK\r\n");
    }
  }
  auto as = [&](const std::string& credentials) {
    return "redis-cluster://" + credentials + "@127.0.0.1:" + std::to_string(cluster.node(0).port());
  };
  client c{as("locker:pw")};
  for (int m = 0; m < 3; ++m) {
    auto key = test::key_in_slot(cluster.slots_of(m).at(7), test::test_key() + ":");
    mutex lock{c, key, {.ttl = 5s}};
    EXPECT_FALSE(lock.acquire().release());
  }
  for (auto [credentials, expected] : {std::pair{"locker:wrong", errc::auth_failed},
                                       std::pair{"blind:pw", errc::no_permission}}) {
    // A request timeout far above the bound: waiting for it would show.
    client refused{as(credentials), {.request_timeout = test::scaled(10s)}};
    std::error_code ec;
    auto start = std::chrono::steady_clock::now();
    auto r = refused.exec({"GET", "k"}, ec);
    EXPECT_EQ(ec, expected) << credentials << ": " << ec.message() << " " << r.to_string();
    EXPECT_LT(std::chrono::steady_clock::now() - start, test::scaled(1s));
  }
}

TEST(ClusterSetupTest, ANodeThatRedirectsInALoopIsBounded) {
  test::fake_peer looping{test::fake_peer::mode::moved_loop};
  // A request timeout far above the bound: only the redirect limit can end it in time.
  client c{"redis-cluster://127.0.0.1:" + std::to_string(looping.port()),
           {.request_timeout = test::scaled(10s)}};
  std::error_code ec;
  auto start = std::chrono::steady_clock::now();
  auto r = c.exec({"GET", "k"}, ec);
  EXPECT_EQ(ec, errc::cluster_error);
  EXPECT_NE(r.str().find("redirected"), std::string::npos) << r.str();
  EXPECT_LT(std::chrono::steady_clock::now() - start, test::scaled(1s));
}

TEST(ClusterSetupTest, OptionsACannotHonourAreRefused) {
  auto refused = [](std::string url, client_options o) {
    try {
      client c{url, std::move(o)};
    } catch (const std::system_error& e) {
      return e.code() == errc::invalid_argument;
    }
    return false;
  };
  EXPECT_TRUE(refused("redis-cluster://127.0.0.1:7000", {.restart_quarantine = 10s}));
  client_options guarded;
  guarded.replication_guard.enabled = true;
  EXPECT_TRUE(refused("redis-cluster://127.0.0.1:7000", guarded));
  EXPECT_TRUE(refused("redis-cluster://127.0.0.1:7000/2", {}));
  EXPECT_FALSE(refused("redis-cluster://127.0.0.1:7000", {}));
}

TEST_F(ClusterTest, TransactionsKeepTheirKeysInOneSlot) {
  transaction_runner tx{client_};
  auto a = test::test_key() + "{order}:items", b = test::test_key() + "{order}:total";
  auto done = tx.run({a}, [&](transaction& t) {
    t.watch(b);
    t.queue({"SET", a, "3"});
    t.queue({"SET", b, "30"});
  });
  EXPECT_TRUE(done.committed);
  EXPECT_EQ(client_.exec({"GET", b}).str(), "30");
  std::error_code ec;
  tx.run({a, "elsewhere"}, [&](transaction&) {}, ec);
  EXPECT_EQ(ec, errc::invalid_argument);
  auto other = test::key_in_slot(static_cast<std::uint16_t>((hash_slot(a) + 1) % 16384));
  tx.run({a}, [&](transaction& t) { t.queue({"SET", other, "x"}); }, ec);
  EXPECT_EQ(ec, errc::invalid_argument);
  EXPECT_TRUE(client_.exec({"GET", other}).is_nil());  // nothing was sent
  EXPECT_THROW(tx.run({a}, [&](transaction& t) { t.watch(other); }), std::system_error);
}

// Whether `master`'s replica is past its initial sync within 20 s (scaled): before that it
// acknowledges nothing, and a WAIT for it gives :0 on a loaded host. (ALockTheReplicaHad...
// failed twice under load, its message not kept; this is the likeliest cause found.)
bool replica_online(redis_cluster& cluster, int master) {
  return test::eventually([&] {
    return raw_command_complete(cluster.node(master).port(), "INFO replication")
               .find("state=online") != std::string::npos;
  }, std::chrono::seconds(20));
}

// Mode 1 through a failover: the master of the lock's slot dies and its replica takes over.
// Replication is asynchronous, so the promise is only as good as the replica's copy: here the
// replica had the lock (it was set well before the kill), and it keeps excluding others, the
// holder's extend finds it, and fencing tokens keep rising. docs/guarantees.md states the case
// where the replica lags.
TEST(ClusterFailoverTest, ALockTheReplicaHadSurvivesItsPromotion) {
  redis_cluster cluster{{.replicas_per_master = 1}};
  client holder_client{cluster.seeds_url()}, other_client{cluster.seeds_url()};
  auto name = test::test_key();
  int master = cluster.owner_of(hash_slot(name));
  int replica = cluster.replica_index(master);
  mutex holder{holder_client, name, {.ttl = 20s}};
  mutex other{other_client, name, {.ttl = 20s, .retry_delay = 20ms}};
  ASSERT_TRUE(replica_online(cluster, master)) << "the replica never synced";
  auto l = holder.acquire();
  auto first_fence = l.fencing_token();
  // WAIT: the replica has the lock before its master dies.
  ASSERT_EQ(raw_command_complete(cluster.node(master).port(), "WAIT 1 2000"), ":1\r\n");
  cluster.node(master).kill();
  cluster.wait_promoted(replica);
  // The holder's extend reaches the new master once the map is read again.
  std::error_code extended = errc::timeout;
  test::eventually([&] {
    extended = l.extend();
    return !extended || extended == errc::lease_lost;
  });
  EXPECT_FALSE(extended) << extended.message();
  // The other client may still route by a map read while the slot had no master: its one
  // attempt then finds the old master gone, which is no answer about the lock.
  std::error_code ec;
  test::eventually([&] {
    EXPECT_FALSE(other.try_acquire(ec));
    return ec != errc::node_unreachable && ec != errc::connection_lost && ec != errc::timeout;
  });
  EXPECT_EQ(ec, errc::not_acquired) << ec.message();
  EXPECT_FALSE(l.release());
  auto next = other.acquire_until(std::chrono::steady_clock::now() + test::scaled(5s), ec);
  ASSERT_TRUE(next) << ec.message();
  EXPECT_GT(next.fencing_token(), first_fence);
  EXPECT_EQ(cluster.owner_of(hash_slot(name)), replica);
}

// A latch waiter subscribed on its slot's master, which then dies: its replica is promoted,
// and the waiter, which sends nothing else, must find it by itself (a fresh slot map after the
// failed resubscription), then hear the opening. The TTL is long: no poll would see it.
TEST(ClusterFailoverTest, ALatchWaiterFollowsItsSlotToThePromotedReplica) {
  redis_cluster cluster{{.replicas_per_master = 1}};
  client waiter_client{cluster.seeds_url()}, worker_client{cluster.seeds_url()};
  auto name = test::test_key();
  int master = cluster.owner_of(hash_slot(name));
  int replica = cluster.replica_index(master);
  latch gate{waiter_client, name, {.ttl = 120s}};
  std::error_code ec;
  ASSERT_TRUE(replica_online(cluster, master)) << "the replica never synced";
  ASSERT_TRUE(gate.try_set_count(1, ec)) << ec.message();
  ASSERT_EQ(raw_command_complete(cluster.node(master).port(), "WAIT 1 2000"), ":1\r\n");
  auto waiting = std::async(std::launch::async, [&] {
    std::error_code wait_ec;
    bool open = gate.wait_for(test::scaled(60s), wait_ec);
    return std::make_pair(open, wait_ec);
  });
  // Subscribed: the master counts the waiter on the latch's channel (SUBSCRIBE, node-local).
  const std::string subscribers = "PUBSUB NUMSUB " + test::inline_arg(latch_channel(name));
  EXPECT_TRUE(test::eventually([&] {
    auto r = raw_command_complete(cluster.node(master).port(), subscribers);
    return r.size() >= 4 && r.compare(r.size() - 4, 4, ":1\r\n") == 0;
  })) << "the waiter never subscribed";
  cluster.node(master).kill();
  cluster.wait_promoted(replica);
  latch worker{worker_client, name, {.ttl = 120s}};
  long long left = -1;
  // Until the worker's client, too, follows the failover.
  test::eventually([&] {
    left = worker.count_down(ec);
    return !ec;
  });
  ASSERT_EQ(left, 0) << ec.message();
  ASSERT_EQ(waiting.wait_for(test::scaled(30s)), std::future_status::ready)
      << "the waiter never followed";
  auto [open, wait_ec] = waiting.get();
  EXPECT_TRUE(open) << wait_ec.message();
}

TEST(ClusterCopiesTest, CopiesSitOnDistinctMastersAndExcludeEachOther) {
  redis_cluster cluster;
  client a{cluster.seeds_url()}, b{cluster.seeds_url()};
  auto name = test::test_key();
  mutex first{a, name, {.ttl = 10s, .copies = 3}};
  mutex second{b, name, {.ttl = 10s, .retry_delay = 10ms, .copies = 3}};
  auto l = first.acquire();
  ASSERT_TRUE(l);
  std::vector<int> owners;
  for (int i = 0; i < 3; ++i) {
    auto copy = lock_copy_key(name, i, 3);
    int owner = cluster.owner_of(hash_slot(copy));
    owners.push_back(owner);
    EXPECT_NE(raw_command_complete(cluster.node(owner).port(), "EXISTS " + copy), ":0\r\n");
  }
  std::sort(owners.begin(), owners.end());
  EXPECT_EQ(owners, (std::vector<int>{0, 1, 2})) << "the copies share a master";
  EXPECT_EQ(raw_command_complete(cluster.node(0).port(), "EXISTS " + name), ":0\r\n");
  std::error_code ec;
  EXPECT_FALSE(second.try_acquire(ec));
  EXPECT_EQ(ec, errc::not_acquired);
  std::atomic<bool> waiting{false};
  wait_control control;
  control.on_retry = [&](const wait_progress&) {
    waiting = true;
    return true;
  };
  std::thread releaser([&] {  // once the second lost a round and waits
    EXPECT_TRUE(test::eventually([&] { return waiting.load(); }));
    EXPECT_FALSE(l.release());
  });
  auto next = second.acquire_until(std::chrono::steady_clock::now() + test::scaled(20s), control,
                                   nullptr, ec);
  releaser.join();
  ASSERT_TRUE(next) << ec.message();
  EXPECT_GT(next.fencing_token(), 0u);
  // Copies need one cluster client.
  test::redis_server plain;
  EXPECT_THROW((mutex{client{plain.url()}, name, {.copies = 3}}), std::system_error);
  EXPECT_THROW((mutex{a, name, {.copies = 2}}), std::system_error);
}

// The copies were apart at the grant; then a reshard puts two of them on one master. The next
// extend after the client learnt of it fails with cluster_error: the lease keeps the
// validity it had, and the watchdog's renewals fail the same way until it lapses.
TEST(ClusterCopiesTest, AnExtendAfterTwoCopiesMovedOntoOneMasterFails) {
  redis_cluster cluster;
  client c{cluster.seeds_url()};
  auto name = test::test_key();
  mutex m{c, name, {.ttl = 10s, .copies = 3}};
  auto l = m.acquire();
  ASSERT_TRUE(l);
  ASSERT_FALSE(l.extend());
  auto moved = hash_slot(lock_copy_key(name, 1, 3));
  int from = cluster.owner_of(moved), to = cluster.owner_of(hash_slot(lock_copy_key(name, 0, 3)));
  ASSERT_NE(from, to);
  auto before = l.valid_until();
  cluster.move_slot(moved, from, to);
  cluster.wait_ok();
  // The client learns of the move from a MOVED (here a read's; an extend's own may come after
  // the quorum of the other two decided it, and then counts at the next extend).
  std::error_code ignored;
  c.exec({"GET", lock_copy_key(name, 1, 3)}, ignored);
  EXPECT_EQ(l.extend(), errc::cluster_error);
  EXPECT_EQ(l.valid_until(), before) << "a refused extend must not lengthen the lease";
  EXPECT_FALSE(l.lost().stop_requested());
  // Moved back apart, the copies can be vouched for again.
  cluster.move_slot(moved, to, from);
  cluster.wait_ok();
  c.exec({"GET", lock_copy_key(name, 1, 3)}, ignored);
  EXPECT_FALSE(l.extend());
  EXPECT_GT(l.valid_until(), before);
  EXPECT_FALSE(l.release());
}

// The warnings of one kind, as to_string() lines (node, message, fix).
std::vector<std::string> of_kind(const std::vector<warning>& ws, warning::code what) {
  std::vector<std::string> out;
  for (const auto& w : ws) {
    if (w.what == what) out.push_back(to_string(w));
  }
  return out;
}

std::string all_of(const std::vector<warning>& ws) {
  std::string out;
  for (const auto& w : ws) out += to_string(w) + "\n";
  return out;
}

// dlock doctor on a cluster: every master of the map is inspected (three masters, not one
// node); without copies each master with a replica is a failover that may lose a grant, with
// copies it is not; cluster-require-full-coverage yes is named.
TEST(ClusterDoctorTest, EveryMasterIsCheckedAndCopiesAnswerTheFailoverWarning) {
  redis_cluster cluster{{.replicas_per_master = 1}};
  client c{cluster.seed_url()};
  std::error_code ec;
  auto mode_one = check_deployment({c}, {}, ec);
  ASSERT_FALSE(ec) << ec.message() << "\n" << all_of(mode_one);
  auto failovers = of_kind(mode_one, warning::code::unguarded_failover);
  ASSERT_EQ(failovers.size(), 3u) << all_of(mode_one);
  for (int m = 0; m < 3; ++m) {
    auto name = "127.0.0.1:" + std::to_string(cluster.node(m).port());
    EXPECT_EQ(std::count_if(failovers.begin(), failovers.end(),
                            [&](const std::string& w) { return w.find(name) != std::string::npos; }),
              1)
        << name << " not warned of once:\n" << all_of(mode_one);
  }
  EXPECT_NE(failovers[0].find("fix: lock with copies"), std::string::npos) << failovers[0];
  EXPECT_EQ(of_kind(mode_one, warning::code::too_few_nodes).size(), 0u) << all_of(mode_one);
  EXPECT_EQ(of_kind(mode_one, warning::code::replica).size(), 0u) << all_of(mode_one);
  auto coverage = of_kind(mode_one, warning::code::cluster_coverage);
  ASSERT_EQ(coverage.size(), 1u) << all_of(mode_one);
  EXPECT_NE(coverage[0].find("full-coverage is yes on 3 of 3"), std::string::npos) << coverage[0];

  auto copies = check_deployment({c}, {.copies = 3}, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(of_kind(copies, warning::code::unguarded_failover).size(), 0u) << all_of(copies);
  EXPECT_EQ(of_kind(copies, warning::code::copies_collapse).size(), 0u) << all_of(copies);
  EXPECT_EQ(of_kind(copies, warning::code::cluster_coverage).size(), 1u) << all_of(copies);
}

// Slots without a master, and copies that a reshard put on one master: both counted.
TEST(ClusterDoctorTest, UncoveredSlotsAndCopiesOnOneMasterAreCounted) {
  redis_cluster cluster{{.require_full_coverage = false, .uncovered = {777}}};
  client c{cluster.seeds_url()};
  std::error_code ec;
  auto before = check_deployment({c}, {.copies = 3}, ec);
  ASSERT_FALSE(ec) << ec.message();
  auto coverage = of_kind(before, warning::code::cluster_coverage);
  ASSERT_EQ(coverage.size(), 1u) << all_of(before);
  EXPECT_NE(coverage[0].find("1 of 16384 slots have no master"), std::string::npos) << coverage[0];
  EXPECT_EQ(of_kind(before, warning::code::copies_collapse).size(), 0u) << all_of(before);
  // Copy 1's slot of one name moves to the master of its copy 0: that one placement collapses.
  auto name = test::test_key();
  auto moved = hash_slot(lock_copy_key(name, 1, 3));
  int from = cluster.owner_of(moved), to = cluster.owner_of(hash_slot(lock_copy_key(name, 0, 3)));
  cluster.move_slot(moved, from, to);
  client fresh{cluster.seeds_url()};
  auto after = check_deployment({fresh}, {.copies = 3}, ec);
  ASSERT_FALSE(ec) << ec.message();
  auto collapsed = of_kind(after, warning::code::copies_collapse);
  ASSERT_EQ(collapsed.size(), 1u) << all_of(after);
  EXPECT_NE(collapsed[0].find("1 of the 2730 placements"), std::string::npos) << collapsed[0];
  EXPECT_NE(collapsed[0].find("127.0.0.1:" + std::to_string(cluster.node(to).port())),
            std::string::npos)
      << collapsed[0];
  // Without copies nothing collapses.
  EXPECT_EQ(of_kind(check_deployment({fresh}, {}, ec), warning::code::copies_collapse).size(), 0u);
}

// A cluster whose map cannot be read: one unchecked warning and the error, at once (the review
// found check_deployment waiting forever on an empty list of masters).
TEST(ClusterDoctorTest, AClusterThatCannotBeReadIsUncheckedNotAHang) {
  client c{"redis-cluster://127.0.0.1:1", client_options{.connect_timeout = 200ms,
                                                         .request_timeout = 300ms}};
  std::error_code ec;
  auto start = std::chrono::steady_clock::now();
  auto ws = check_deployment({c}, {.copies = 3}, ec);
  EXPECT_TRUE(ec);
  EXPECT_EQ(of_kind(ws, warning::code::unchecked).size(), 1u) << all_of(ws);
  EXPECT_LT(std::chrono::steady_clock::now() - start, test::scaled(3s));
}

// Fewer masters than copies: every name collapses, said once.
TEST(ClusterDoctorTest, FewerMastersThanCopiesIsOneWarning) {
  redis_cluster cluster{{.masters = 2}};
  client c{cluster.seed_url()};
  std::error_code ec;
  auto ws = check_deployment({c}, {.copies = 3}, ec);
  ASSERT_FALSE(ec) << ec.message();
  auto collapsed = of_kind(ws, warning::code::copies_collapse);
  ASSERT_EQ(collapsed.size(), 1u) << all_of(ws);
  EXPECT_NE(collapsed[0].find("2 master(s), fewer than the 3 copies"), std::string::npos)
      << collapsed[0];
}

// A master down for good (no replica to promote): its slots have no owner, and the copy there
// cannot grant. The other two copies are a quorum on distinct masters, and that is enough (the
// review found the placement check refusing it because of the copy that did not grant).
TEST(ClusterCopiesTest, AMasterDownForGoodLeavesAQuorumOfCopies) {
  redis_cluster cluster{{.require_full_coverage = false}};
  client c{cluster.seeds_url()};
  auto name = test::test_key();
  mutex m{c, name, {.ttl = 10s, .retry_delay = 50ms, .copies = 3}};
  ASSERT_TRUE(m.acquire().release() == std::error_code{});  // the map is read, all copies work
  auto slot = hash_slot(lock_copy_key(name, 2, 3));
  int down = cluster.owner_of(slot);
  cluster.node(down).kill();
  // The others mark it failed after node_timeout (1 s); its slots then have no owner. A
  // request there fails and has the client read the map again: until the map it read says so.
  EXPECT_TRUE(test::eventually([&] {
    std::error_code ignored;
    c.exec({"GET", lock_copy_key(name, 2, 3)}, ignored);
    return !detail::access::cluster(c)->known_owner(slot, false);
  })) << "the client's map still names the dead master";
  std::error_code ec;
  auto l = m.acquire_until(std::chrono::steady_clock::now() + test::scaled(8s), ec);
  EXPECT_TRUE(l) << ec.message();
  EXPECT_FALSE(l.release());
}

// A failover that loses a grant: the slot's replica never got the write (it was stopped, then
// killed, so what its master had sent was lost with it; it restarts empty), and it takes the
// slots over (CLUSTER FAILOVER TAKEOVER) after its master died. Mode 1 hands the lock to a
// second client while the first still holds it; the fence then refuses the first holder's
// stale write. With 3 copies, one master's loss leaves the copies on the other two, and the
// second client is refused.
TEST(ClusterCopiesTest, AFailoverThatLosesTheGrantGivesTwoHoldersInModeOneButNotWithCopies) {
  redis_cluster cluster{{.replicas_per_master = 1}};
  client holder_client{cluster.seeds_url()}, other_client{cluster.seeds_url()};
  auto one = test::test_key() + ":one", three = test::test_key() + ":three";
  int victim = cluster.owner_of(hash_slot(one));
  mutex one_holder{holder_client, one, {.ttl = 30s}};
  mutex one_other{other_client, one, {.ttl = 30s}};
  mutex three_holder{holder_client, three, {.ttl = 30s, .copies = 3}};
  mutex three_other{other_client, three, {.ttl = 30s, .copies = 3}};
  int replica = cluster.replica_index(victim);
  cluster.node(replica).pause();
  auto held_one = one_holder.acquire();
  auto held_three = three_holder.acquire();
  bool a_copy_on_victim = false;
  for (int i = 0; i < 3; ++i) {
    a_copy_on_victim |= cluster.owner_of(hash_slot(lock_copy_key(three, i, 3))) == victim;
  }
  ASSERT_TRUE(a_copy_on_victim);
  cluster.node(replica).kill();
  cluster.node(victim).kill();
  cluster.node(replica).restart();
  EXPECT_NE(raw_command_complete(cluster.node(replica).port(), "CLUSTER FAILOVER TAKEOVER")
                .find("OK"),
            std::string::npos);
  cluster.wait_promoted(replica);

  auto deadline = std::chrono::steady_clock::now() + test::scaled(5s);
  std::error_code ec;
  auto second_one = one_other.acquire_until(deadline, ec);
  EXPECT_TRUE(second_one) << "mode 1 was expected to lose the grant: " << ec.message();
  EXPECT_TRUE(held_one);  // the first holder still believes it holds
  if (second_one) {
    test::redis_server resource;
    client data{resource.url()};
    // The promoted replica lost the fencing counter too; a counter that starts again starts
    // from the server's clock (ms x 1024), so the second holder's token is still higher, and
    // the first holder's writes are refused.
    EXPECT_GT(second_one.fencing_token(), held_one.fencing_token());
    std::error_code fenced_ec;
    EXPECT_TRUE(fenced_set(data, "account", "second", second_one.fencing_token(), fenced_ec));
    EXPECT_FALSE(fenced_set(data, "account", "stale first", held_one.fencing_token(), fenced_ec));
    EXPECT_FALSE(fenced_ec);
  }
  auto second_three = three_other.acquire_until(std::chrono::steady_clock::now() + 2s, ec);
  EXPECT_FALSE(second_three) << "3 copies gave the lock to a second client";
  EXPECT_EQ(ec, errc::not_acquired) << ec.message();
  EXPECT_FALSE(held_three.extend()) << "the holder keeps a quorum of its copies";
}

// Names in three slots: one script per slot, in slot order. A name held in the last slot sends
// the attempt back with nothing kept; one fence serves the set, above every name's tokens
// before it, and every name's next token is above it (the slots that drew less are raised).
TEST_F(ClusterTest, ALockSetAcrossSlotsIsAllOrNothingWithOneFence) {
  auto base = test::test_key();
  std::vector<std::string> names{base + "a", base + "b", base + "c"};
  std::sort(names.begin(), names.end(),
            [](const auto& x, const auto& y) { return hash_slot(x) < hash_slot(y); });
  ASSERT_LT(hash_slot(names[0]), hash_slot(names[1]));
  ASSERT_LT(hash_slot(names[1]), hash_slot(names[2]));
  mutex first{client_, names[0]}, last{client_, names[2]};
  std::uint64_t before = 0;
  for (int i = 0; i < 5; ++i) before = std::max(before, first.acquire().fencing_token());
  auto held_last = last.acquire();
  before = std::max(before, held_last.fencing_token());

  lock_set set{client_, names, {.ttl = 30s}};  // outlives the wait below
  std::error_code ec;
  EXPECT_FALSE(set.try_acquire(ec));
  EXPECT_EQ(ec, errc::not_acquired);
  EXPECT_TRUE(test::eventually([&] {
    return client_.exec({"EXISTS", names[0]}).integer() == 0 &&
           client_.exec({"EXISTS", names[1]}).integer() == 0;
  })) << "the slots taken before the refusal were kept";

  held_last.release();
  auto held = set.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  for (const auto& n : names) EXPECT_EQ(client_.exec({"GET", n}).str(), held.value()) << n;
  auto fence = held.fencing_token();
  EXPECT_GT(fence, before);
  mutex middle{client_, names[1]};
  EXPECT_FALSE(middle.try_acquire(ec)) << "a name of a held set is excluded";
  held.keep_alive();
  EXPECT_FALSE(held.release());
  for (const auto& n : names) {
    EXPECT_GT(mutex(client_, n).acquire().fencing_token(), fence) << n;
  }
}

TEST_F(ClusterTest, OverlappingLockSetsAcrossSlotsNeverDeadlockAndCountersAreExact) {
  constexpr int names = 5;
  auto base = test::test_key();
  auto name = [&](int i) { return base + "n" + std::to_string(i); };
  auto raised = test::lock_overlapping_sets(cluster_.seed_url(), name, /*threads=*/4,
                                            /*rounds=*/25, names);
  std::set<std::uint16_t> slots;
  for (int i = 0; i < names; ++i) {
    slots.insert(hash_slot(name(i)));
    auto got = client_.exec({"GET", name(i) + ":count"});
    EXPECT_EQ(got.is_nil() ? 0 : std::stoll(got.str()), raised[static_cast<std::size_t>(i)])
        << name(i);
  }
  EXPECT_GT(slots.size(), 1u) << "the names should span slots";
}

// The election's lock key and record share the name's slot; observers subscribe on that slot's
// master. The TTL is long, so without the subscription no change would be seen in time.
TEST_F(ClusterTest, AnElectionRunsInTheNamesSlotAndObserversHearEveryChange) {
  for (std::string name : {"plain", "a{b}c"}) {
    SCOPED_TRACE(name);
    auto key = test::test_key() + name;
    election_options slow{.lock = {.ttl = 30s, .retry_delay = 50ms}};
    election watcher{client_, key, "", slow};
    test::seen_events events;
    auto watching = watcher.observe(events.sink());
    auto count = [&] { return events.size(); };
    client other{cluster_.seed_url()};
    election a{client_, key, "a", slow}, b{other, key, "b", slow};
    auto la = a.campaign();
    ASSERT_TRUE(test::eventually([&] { return count() == 1; }));
    EXPECT_EQ(b.leader().value, "a");
    std::error_code ec;
    EXPECT_FALSE(b.try_campaign(ec));
    EXPECT_EQ(ec, errc::not_acquired);
    a.resign(la);
    ASSERT_TRUE(test::eventually([&] { return count() == 2; }));
    auto lb = b.campaign();
    ASSERT_TRUE(test::eventually([&] { return count() == 3; }));
    auto seen = events.copy();
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0].what, election_event::change::elected);
    EXPECT_EQ(seen[0].value, "a");
    EXPECT_EQ(seen[1].what, election_event::change::ended);
    EXPECT_EQ(seen[2].what, election_event::change::elected);
    EXPECT_EQ(seen[2].value, "b");
    EXPECT_EQ(seen[2].term, lb.fencing_token());
    EXPECT_LT(seen[0].term, seen[2].term);
  }
}

// The count and its channel share the name's slot: a count-down through another client opens
// the latch for a waiter that subscribed on the slot's master (the TTL is long: no poll would).
TEST_F(ClusterTest, ALatchOpensForItsWaitersInTheNamesSlot) {
  for (std::string name : {"plain", "a{b}c"}) {
    SCOPED_TRACE(name);
    auto key = test::test_key() + name;
    latch gate{client_, key, {.ttl = 60s}};
    std::error_code ec;
    ASSERT_TRUE(gate.try_set_count(2, ec)) << ec.message();
    auto waiting = std::async(std::launch::async, [&] {
      std::error_code wait_ec;
      bool open = gate.wait_for(test::scaled(20s), wait_ec);
      return std::make_pair(open, wait_ec);
    });
    client other{cluster_.seed_url()};
    latch worker{other, key, {.ttl = 60s}};
    EXPECT_EQ(worker.count_down(ec), 1);
    EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout) << "opened at 1";
    EXPECT_EQ(worker.count_down(ec), 0);
    ASSERT_EQ(waiting.wait_for(test::scaled(10s)), std::future_status::ready)
        << "the opening was not heard";
    auto [open, wait_ec] = waiting.get();
    EXPECT_TRUE(open) << wait_ec.message();
  }
}

}  // namespace
}  // namespace dlock::test
