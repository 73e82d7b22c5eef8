// SPDX-License-Identifier: Apache-2.0
// Every embedded script's SHA1 matches what the server computes for the same bytes, and the
// single-key steps of a slot migration keep the rules of the scripts they stand in for.
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <span>
#include <string>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/key_layout.hpp"
#include "script.hpp"
#include "semaphore_core.hpp"
#include "support/redis_server.hpp"

namespace dlock {
namespace {

TEST(ScriptsTest, EmbeddedSha1MatchesScriptLoad) {
  test::redis_server server;
  client c{server.url()};
  for (const auto* s : {&detail::acquire_script, &detail::release_script, &detail::extend_script,
                        &detail::fence_raise_script, &detail::fenced_set_script, &detail::leave_script}) {
    EXPECT_EQ(c.exec({"SCRIPT", "LOAD", s->body}).str(), s->sha1);
  }
  for (const auto* s : {&detail::sem_acquire_script, &detail::sem_fair_acquire_script,
                        &detail::sem_release_script, &detail::sem_refresh_script}) {
    EXPECT_EQ(c.exec({"SCRIPT", "LOAD", s->body}).str(), s->sha1);
  }
  for (const auto* s : {&detail::migrating_lock_release_script,
                        &detail::migrating_member_refresh_script,
                        &detail::migrating_outlive_script, &detail::migrating_name_keep_script}) {
    EXPECT_EQ(c.exec({"SCRIPT", "LOAD", s->body}).str(), s->sha1);
  }
}

// fence_raise.lua raises a counter that exists to at least the value, and never lowers it; a
// counter that expired while the raise was on its way starts from the server's clock, as a new
// counter does, so that no token drawn before is handed out again.
TEST(ScriptsTest, AFenceRaiseNeverSetsACounterBelowTheClock) {
  test::redis_server server;
  client c{server.url()};
  auto raise = [&](const std::string& key, long long to) {
    return c.exec({"EVAL", std::string(detail::fence_raise_script.body), "1", key,
                   std::to_string(to), "10000"})
        .integer();
  };
  auto now_ms = [&] {
    auto t = c.exec({"TIME"});
    return std::stoll(t.elements()[0].str()) * 1000 + std::stoll(t.elements()[1].str()) / 1000;
  };
  // Tokens of the clock's range (a counter starts at the clock in ms x 1024).
  const long long base = 1'800'000'000'000LL * 1024;
  c.exec({"SET", "counter", std::to_string(base + 100)});
  EXPECT_EQ(raise("counter", base + 150), base + 150);
  EXPECT_EQ(raise("counter", base + 120), base + 150);  // never lowered
  EXPECT_EQ(c.exec({"GET", "counter"}).str(), std::to_string(base + 150));
  auto before = now_ms();
  auto started = raise("gone", base + 150);  // expired meanwhile: from the clock
  EXPECT_GE(started, before * 1024);
  EXPECT_EQ(c.exec({"GET", "gone"}).str(), std::to_string(started));
  EXPECT_GT(c.exec({"PTTL", "gone"}).integer(), 0);
  // A counter a plain INCR made again after it expired (acquire_unqueued) counts as gone.
  c.exec({"SET", "remade", "3"});
  before = now_ms();
  EXPECT_GE(raise("remade", base + 150), before * 1024);
}

// A transaction that found the key held may leave a counter its INCR made (1, 2 ...), which
// holds no token; acquire.lua's refusal deletes it, so that no client (of an earlier version,
// which took any count above 1 for a token) hands it out.
TEST(ScriptsTest, ARefusedAcquireDeletesACounterThatHoldsNoToken) {
  test::redis_server server;
  client c{server.url()};
  auto keys = lock_keys_for("k");
  c.exec({"SET", keys.key, "holder.0", "PX", "10000"});
  c.exec({"SET", keys.fence, "1"});
  auto r = c.exec({"EVAL", std::string(detail::acquire_script.body), "5", keys.key, keys.fence,
                   keys.waiters, keys.waiter_info, keys.tickets, "other.0", "10000", "", ""});
  EXPECT_EQ(r.elements()[0].integer(), 0);
  EXPECT_TRUE(c.exec({"GET", keys.fence}).is_nil());
  c.exec({"SET", keys.fence, "1843000000000000"});  // a token: kept
  c.exec({"EVAL", std::string(detail::acquire_script.body), "5", keys.key, keys.fence,
          keys.waiters, keys.waiter_info, keys.tickets, "other.1", "10000", "", ""});
  EXPECT_EQ(c.exec({"GET", keys.fence}).str(), "1843000000000000");
}

// The single-key steps that stand in for a lease's scripts while its cluster slot migrates
// (slot_migration.hpp) keep those scripts' rules: nothing is shortened, created or taken from
// another holder, and a lost entry stays lost.
class SlotMigrationStepsTest : public ::testing::Test {
 protected:
  long long run(const detail::script& s, const std::string& key,
                std::vector<std::string> args) {
    std::vector<std::string> words{"EVAL", std::string(s.body), "1", key};
    words.insert(words.end(), args.begin(), args.end());
    return c_.exec(command{std::span<const std::string>(words)}).integer();
  }
  long long now_ms() {
    auto t = c_.exec({"TIME"});
    return std::stoll(t.elements()[0].str()) * 1000 + std::stoll(t.elements()[1].str()) / 1000;
  }
  long long score(const std::string& key, const std::string& member) {
    return std::stoll(c_.exec({"ZSCORE", key, member}).str());
  }
  long long pttl(const std::string& key) { return c_.exec({"PTTL", key}).integer(); }

  test::redis_server server_;
  client c_{server_.url()};
};

TEST_F(SlotMigrationStepsTest, AnEntryIsRenewedNeverShortenedAndEndedForGood) {
  const auto& refresh = detail::migrating_member_refresh_script;
  c_.exec({"ZADD", "holders", std::to_string(now_ms() + 500), "me"});
  c_.exec({"PEXPIRE", "holders", "500"});
  EXPECT_EQ(run(refresh, "holders", {"me", "10000", "20000"}), 1);
  auto renewed = score("holders", "me");
  EXPECT_GE(renewed, now_ms() + 9000);
  EXPECT_GE(pttl("holders"), 19000) << "the set must outlive the keys kept before it";
  EXPECT_EQ(run(refresh, "holders", {"me", "100", "200"}), 1);
  EXPECT_EQ(score("holders", "me"), renewed) << "a shorter TTL cut the entry back";
  EXPECT_GE(pttl("holders"), 19000) << "a shorter TTL cut the set back";
  EXPECT_EQ(run(refresh, "holders", {"other", "10000", "20000"}), 0);
  EXPECT_TRUE(c_.exec({"ZSCORE", "holders", "other"}).is_nil()) << "added a lost entry";
  EXPECT_EQ(run(refresh, "holders", {"me", "0"}), 1);
  EXPECT_EQ(score("holders", "me"), 0) << "expired for every node's clock";
  EXPECT_EQ(run(refresh, "holders", {"me", "10000", "20000"}), 0) << "an ended entry came back";
}

TEST_F(SlotMigrationStepsTest, ACompanionOutlivesItsEntryButNothingIsCreatedOrShortened) {
  const auto& outlive = detail::migrating_outlive_script;
  EXPECT_EQ(run(outlive, "absent", {"5000"}), 0);
  EXPECT_EQ(c_.exec({"EXISTS", "absent"}).integer(), 0);
  c_.exec({"SET", "short", "1", "PX", "100"});
  c_.exec({"SET", "long", "1", "PX", "60000"});
  c_.exec({"SET", "forever", "1"});
  for (const auto* key : {"short", "long", "forever"}) EXPECT_EQ(run(outlive, key, {"5000"}), 1);
  EXPECT_GT(pttl("short"), 4000);
  EXPECT_GT(pttl("long"), 50000);
  EXPECT_EQ(pttl("forever"), -1);
}

TEST_F(SlotMigrationStepsTest, AMarkIsKeptOnlyWhereNothingElseHoldsTheName) {
  const auto& keep = detail::migrating_name_keep_script;
  const std::string mark = "dlock:semaphore 3 unfair";
  EXPECT_EQ(run(keep, "free", {mark, "5000"}), 1);
  EXPECT_EQ(c_.exec({"GET", "free"}).str(), mark);
  EXPECT_GT(pttl("free"), 4000);
  c_.exec({"SET", "ours", mark, "PX", "100"});
  EXPECT_EQ(run(keep, "ours", {mark, "5000"}), 1);
  EXPECT_GT(pttl("ours"), 4000);
  c_.exec({"SET", "locked", "someone.1", "PX", "100"});
  EXPECT_EQ(run(keep, "locked", {mark, "5000"}), 0);
  EXPECT_EQ(c_.exec({"GET", "locked"}).str(), "someone.1");
  EXPECT_LE(pttl("locked"), 100);
}

TEST_F(SlotMigrationStepsTest, ALockIsReleasedByItsOwnerOnly) {
  const auto& release = detail::migrating_lock_release_script;
  c_.exec({"SET", "lock", "me.1", "PX", "10000"});
  EXPECT_EQ(run(release, "lock", {"other.1"}), 0);
  EXPECT_EQ(c_.exec({"GET", "lock"}).str(), "me.1");
  EXPECT_EQ(run(release, "lock", {"me.1"}), 1);
  EXPECT_EQ(c_.exec({"EXISTS", "lock"}).integer(), 0);
  c_.exec({"SET", "marked", "dlock:read-write-lock", "PX", "10000"});
  EXPECT_EQ(run(release, "marked", {"dlock:read-write-lock"}), 0) << "a mark is nobody's value";
  EXPECT_EQ(c_.exec({"EXISTS", "marked"}).integer(), 1);
}

}  // namespace
}  // namespace dlock
