// SPDX-License-Identifier: Apache-2.0
// Second review of the solo grant (issue 39, commit 1b90abb), against a real redis-server:
// interleavings and inputs that try to break what docs/guarantees.md ("Semaphores") claims for
// a holder granted by plain commands and kept in the name's key alone ("<mark> <token>
// <permits>"). Each test says which interleaving it drives; most pin a case that holds. These
// failed on 1b90abb and pass since the fixes (marked FINDING below: sem_release.lua compares
// the token with the space after it; connection::leaves_a_transaction_open ends a socket left
// in MULTI; read_solo_answer takes an EXECABORT for NOPERM as a refusal for good):
//   SoloReview2Test.ASettledSoloHoldOutlivesAReleaseByTheOldToken (Fair and Unfair)
//   SoloReview2SettleTest.ASettleAnsweredAfterTheValidityKeepsItsHold/Solo (its /Adopted twin,
//     the control, passes)
//   SoloReview2RenamedTest.ARenamedExecLeavesTheSharedConnectionUsable
//   SoloReview2RenamedTest.AUserWithoutExecIsRefusedOncePerSemaphoreObject (minor: docs claim)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "algo/request.hpp"
#include "algo/targets.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "dlock/shared_mutex.hpp"
#include "support/checks.hpp"
#include "support/dlock_cli.hpp"
#include "support/redis_server.hpp"
#include "support/semaphore_name.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t clock_range = std::uint64_t{1} << 40;  // fence_clock_range

class SoloReview2Test : public semaphore_name_test {
 protected:
  // sem_release.lua as semaphore_core sends it (try_release_direct, give_up), for `token`.
  reply release_script(const std::string& token, std::ptrdiff_t limit) {
    std::vector<std::string> words{"EVAL", std::string(detail::sem_release_script.body)};
    const semaphore_keys all = keys();  // script_keys views these
    auto k = detail::semaphore_release_keys(all);
    words.push_back(std::to_string(k.size()));
    for (const auto& key : k) words.emplace_back(key);
    words.push_back(token);
    words.push_back(std::to_string(limit));
    words.push_back(fair() ? "fair" : "");
    words.push_back(mark(limit));
    return admin_.exec(command(std::span<const std::string>(words)));
  }
  // sem_refresh.lua as semaphore_core sends it (refresh_entry): extend when successor is "".
  reply refresh_script(const std::string& token, std::ptrdiff_t limit, const std::string& ttl_ms,
                       const std::string& successor) {
    std::vector<std::string> words{"EVAL", std::string(detail::sem_refresh_script.body)};
    const semaphore_keys all = keys();  // script_keys views these
    auto k = detail::semaphore_refresh_keys(all, fair());
    words.push_back(std::to_string(k.size()));
    for (const auto& key : k) words.emplace_back(key);
    words.push_back(token);
    words.push_back(ttl_ms);
    words.push_back(successor);
    words.push_back(mark(limit));
    return admin_.exec(command(std::span<const std::string>(words)));
  }
};

INSTANTIATE_TEST_SUITE_P(Variants, SoloReview2Test, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Fair" : "Unfair"; });

// FINDING (fixed). release_after(ttl) on a solo holder rewrites the name's key as
// "<mark> <token>:settled 1" (sem_refresh.lua; settled_token). lease.hpp promises: "on failure
// (... a node did not answer) the key is released where it was not settled yet (where it was,
// it expires after `ttl`)". The interleaving: the settle runs on the server, its answer is lost
// (node timeout), and release_after's fallback release() sends sem_release.lua with the OLD
// token. The solo release's compare (sem_release.lua, first branch) only checks that the token
// *starts* at the value's token position (string.find(..., at, true) == at), and "<token>" is a
// prefix of "<token>:settled": the settled hold is deleted at once, so the work may run again
// elsewhere immediately (ShedLock's lockAtLeastFor, `dlock run --min-hold`). The control below
// shows the same interleaving on an adopted holder keeping the settled hold.
TEST_P(SoloReview2Test, ASettledSoloHoldOutlivesAReleaseByTheOldToken) {
  semaphore sem{client_, test_key(), 1, options()};
  warm(sem);
  std::error_code ec;
  lease held = sem.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  const std::string token = held.value();
  ASSERT_EQ(name_value(), mark(1) + " " + token + " 1");
  ASSERT_EQ(held.release_after(5s), std::error_code{});
  ASSERT_EQ(name_value(), mark(1) + " " + token + ":settled 1");
  // The fallback release of a settle whose answer was lost: the old token.
  reply r = release_script(token, 1);
  // Kept, solo or made one of the holders by the release's script (adopt_solo).
  bool kept = name_value() == mark(1) + " " + token + ":settled 1" ||
              (name_value() == mark(1) &&
               admin_.exec({"ZSCORE", keys().expiries, token + ":settled"}).is_string());
  EXPECT_TRUE(kept) << "a release by the old token deleted the settled hold (answered "
                    << r.to_string() << "); the name's key holds '" << name_value() << "'";
  EXPECT_FALSE(sem.try_acquire(ec)) << "granted inside another's release_after hold";
}

// Control for the above: the same interleaving once the holder was adopted (the scripts' path)
// keeps the settled hold for its ttl.
TEST_P(SoloReview2Test, ControlASettledAdoptedHoldOutlivesAReleaseByTheOldToken) {
  semaphore sem{client_, test_key(), 2, options()};
  warm(sem);
  std::error_code ec;
  lease held = sem.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  const std::string token = held.value();
  {
    lease other = sem.try_acquire(ec);  // adopts `held`
    ASSERT_TRUE(other) << ec.message();
    ASSERT_EQ(name_value(), mark(2));
    other.release();
  }
  ASSERT_EQ(held.release_after(5s), std::error_code{});
  release_script(token, 2);
  EXPECT_TRUE(admin_.exec({"ZSCORE", keys().expiries, token + ":settled"}).is_string());
  EXPECT_EQ(name_value(), mark(2));
}


// FINDING (fixed), through the library alone. A settle that lands while the permit still lives on the
// server but whose answer comes after the lease's validity (the drift allowance: ttl x
// drift_factor + 2 ms; here a server that stalls 500 ms) is reported lease_expired by
// refresh_entry, and release_after then calls release() with the OLD token, which the solo
// release's prefix compare takes for the settled token: the settled hold (5 s) is gone at once.
// With `adopt` (a second holder made the first one of the holders first) the same run keeps
// the settled hold, as lease.hpp says ("where it was [settled], it expires after `ttl`").
class SoloReview2SettleTest : public ::testing::TestWithParam<bool> {};  // adopt first?
INSTANTIATE_TEST_SUITE_P(Paths, SoloReview2SettleTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Adopted" : "Solo"; });

TEST_P(SoloReview2SettleTest, ASettleAnsweredAfterTheValidityKeepsItsHold) {
  redis_server server;
  client admin{server.url()};
  client c{server.url()};
  const std::string key = test_key();
  semaphore_options o{.ttl = 2s, .node_timeout = 1500ms, .drift_factor = 0.5};
  semaphore sem{c, key, 2, o};
  std::error_code ec;
  ASSERT_EQ(sem.try_acquire(ec).release(), std::error_code{}) << ec.message();  // warm
  lease held = sem.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  const std::string token = held.value();
  const std::string mark = semaphore_mark(2, false);
  ASSERT_EQ(admin.exec({"GET", key}).str(), mark + " " + token + " 1");
  if (GetParam()) {
    semaphore other{admin, key, 2, o};
    lease second = other.try_acquire(ec);  // adopts `held`
    ASSERT_TRUE(second) << ec.message();
    ASSERT_EQ(second.release(), std::error_code{});
    ASSERT_EQ(admin.exec({"GET", key}).str(), mark);
  }
  // The validity ends about 1 s after the grant (2 s - 50 %), the permit 2 s after it.
  std::this_thread::sleep_for(700ms);
  admin.exec({"CLIENT", "PAUSE", "500", "WRITE"});
  std::error_code settled = held.release_after(5s);
  // The settle ran at about 1.2 s, while the permit lived; its answer came after the validity.
  EXPECT_EQ(settled, errc::lease_expired) << settled.message();
  auto k = semaphore_keys_for(key, false);
  // Kept, solo or among the holders (the old token's release adopts a solo one: adopt_solo).
  bool hold_kept = admin.exec({"ZSCORE", k.expiries, token + ":settled"}).is_string() ||
                   (admin.exec({"GET", key}).is_string() &&
                    admin.exec({"GET", key}).str() == mark + " " + token + ":settled 1");
  EXPECT_TRUE(hold_kept) << "the settled hold went at once; the name's key holds '"
                         << admin.exec({"GET", key}).to_string() << "'";
  semaphore probe{admin, key, 2, o};
  EXPECT_FALSE(probe.try_acquire(2, ec)) << "both permits free inside a settled hold";
}

// Pin: a renewal still in the network for the old token (refresh_entry) must not renew the
// settled hold (lease.hpp: "under a new value that no renewal or extend still in the network
// matches"). The refresh's solo compare includes the space after the token, so it holds.
TEST_P(SoloReview2Test, ARefreshByTheOldTokenNeverRenewsASettledSoloHold) {
  semaphore sem{client_, test_key(), 1, options()};
  warm(sem);
  std::error_code ec;
  lease held = sem.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  const std::string token = held.value();
  ASSERT_EQ(held.release_after(2s), std::error_code{});
  ASSERT_LE(pttl(test_key()), 2'000);
  reply r = refresh_script(token, 1, "60000", "");
  EXPECT_EQ(r.integer(), 0) << "the old token's refresh was taken for the settled holder's";
  EXPECT_LE(pttl(test_key()), 2'000);
  EXPECT_EQ(name_value(), mark(1) + " " + token + ":settled 1");
}

// Pin: a counter that is gone (expired, or never made) when the solo grant runs: its INCR makes
// it 1, which is no token (below 2^40); the grant must still answer a token of the clock's range
// (the script that follows starts the counter from the clock), leave the counter expiring, and
// the next solo grant's token must be higher.
TEST_P(SoloReview2Test, AGoneCounterNeverYieldsATokenBelowTheClockRange) {
  semaphore sem{client_, test_key(), 2, options()};
  std::error_code ec;
  for (int round = 0; round < 3; ++round) {
    admin_.exec({"DEL", keys().fence});
    lease a = sem.try_acquire(ec);
    ASSERT_TRUE(a) << ec.message();
    EXPECT_GE(a.fencing_token(), clock_range);
    EXPECT_GT(pttl(keys().fence), 0) << "a counter without an expiry was left";
    lease b = sem.try_acquire(ec);
    ASSERT_TRUE(b) << ec.message();
    EXPECT_GT(b.fencing_token(), a.fencing_token());
    a.release();
    b.release();
  }
  // A counter a plain INCR left at a small number, without an expiry.
  admin_.exec({"SET", keys().fence, "7"});
  lease c = sem.try_acquire(ec);
  ASSERT_TRUE(c) << ec.message();
  EXPECT_GE(c.fencing_token(), clock_range);
  EXPECT_GT(pttl(keys().fence), 0);
}

// Pin: the node's fence floor (after a restart) above the counter: the solo grant draws a token
// at or below it, so it must go to the script, whose token is above the floor.
TEST_P(SoloReview2Test, AFenceFloorAboveTheCounterIsHonoured) {
  semaphore sem{client_, test_key(), 2, options()};
  warm(sem);
  auto counter = std::stoull(admin_.exec({"GET", keys().fence}).str());
  auto floor = counter + 5'000'000;
  admin_.exec({"SET", "dlock:node:fence-floor", std::to_string(floor)});
  std::error_code ec;
  lease a = sem.try_acquire(ec);
  ASSERT_TRUE(a) << ec.message();
  EXPECT_GT(a.fencing_token(), floor);
  a.release();
  admin_.exec({"DEL", "dlock:node:fence-floor"});
}

// Pin: in quarantine the solo grant's SET lands, the grant is refused, the script adopts the
// value (our token now holds a permit) and refuses; the try's give-up must remove it, so that
// once the quarantine ends every permit is free (the unfair twin of
// AclTest.WithTheDocumentedRuleAQuarantineLeavesNoPhantomHolder).
TEST_P(SoloReview2Test, QuarantineRefusesTheSoloTryAndLeavesNoPhantomHolder) {
  semaphore sem{client_, test_key(), 2, options(30s)};
  warm(sem);
  admin_.exec({"SET", "dlock:node:quarantine", "1", "PX", "5000"});
  std::error_code ec;
  EXPECT_FALSE(sem.try_acquire(ec));
  EXPECT_FALSE(sem.try_acquire(2, ec));
  admin_.exec({"DEL", "dlock:node:quarantine"});
  std::string line = admin_.exec({"ZRANGE", keys().expiries, "0", "-1"}).to_string();
  semaphore other{admin_, test_key(), 2, options(30s)};
  lease all = other.try_acquire(2, ec);
  EXPECT_TRUE(all) << "a phantom holder: " << ec.message() << "; expiries " << line
                   << ", name's key '" << name_value() << "'";
}

// Pin: a blocking acquire that starts in quarantine: its solo value is adopted, and it is only
// granted (as the holder it already is) once the quarantine ends; one holder, with its limit.
TEST_P(SoloReview2Test, ABlockingSoloTryInQuarantineIsGrantedAfterItAlone) {
  semaphore sem{client_, test_key(), 1, options(30s)};
  warm(sem);
  admin_.exec({"SET", "dlock:node:quarantine", "1", "PX", "700"});
  std::error_code ec;
  auto before = std::chrono::steady_clock::now();
  lease held = sem.try_acquire_for(5s);
  ASSERT_TRUE(held);
  EXPECT_GE(std::chrono::steady_clock::now() - before, 600ms);
  semaphore other{admin_, test_key(), 1, options(30s)};
  EXPECT_FALSE(other.try_acquire(ec)) << "two holders of 1";
  EXPECT_EQ(held.release(), std::error_code{});
  lease next = other.try_acquire(ec);
  EXPECT_TRUE(next) << ec.message();
}

// Pin: a name's key of another type (a hash): the solo SET NX does not write it, and the script
// that follows raises WRONGTYPE: the refusal is wrong_type, and the counter the transaction's
// INCR may have made is not left without an expiry.
TEST_P(SoloReview2Test, ANameOfAnotherTypeIsRefusedAsWrongTypeLeavingNoImmortalCounter) {
  admin_.exec({"HSET", test_key(), "f", "v"});
  semaphore sem{client_, test_key(), 2, options()};
  std::error_code ec;
  EXPECT_FALSE(sem.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  EXPECT_FALSE(sem.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type) << ec.message();
  EXPECT_NE(pttl(keys().fence), -1) << "a counter without an expiry was left";
}

// Pin: another token's release (a give-up whose solo answer was lost; a late release of an
// expired permit) while a solo holder of 2 permits holds: it adopts the holder with its weight,
// which still counts against the limit, and the holder's own release (now the script's) frees
// both permits.
TEST_P(SoloReview2Test, AnotherTokensReleaseAdoptsTheSoloHolderWithItsWeight) {
  semaphore sem{client_, test_key(), 3, options()};
  warm(sem);
  std::error_code ec;
  lease two = sem.try_acquire(2, ec);
  ASSERT_TRUE(two) << ec.message();
  ASSERT_EQ(name_value(), mark(3) + " " + two.value() + " 2");
  EXPECT_EQ(release_script("0123456789abcdef0123456789abcdef", 3).integer(), 0);
  EXPECT_EQ(name_value(), mark(3));
  EXPECT_EQ(admin_.exec({"HGET", keys().weights, two.value()}).str(), "2");
  EXPECT_FALSE(sem.try_acquire(2, ec)) << "4 permits of 3";
  EXPECT_EQ(two.extend(), std::error_code{});
  EXPECT_EQ(two.release(), std::error_code{});
  lease three = sem.try_acquire(3, ec);
  EXPECT_TRUE(three) << ec.message();
}

// Pin: a solo holder whose value expired (its process stalled) while a newcomer took the name
// solo: the stalled holder's late release and refresh must leave the newcomer's value alone.
TEST_P(SoloReview2Test, AnExpiredSoloHoldersLateReleaseLeavesTheNextSoloHolder) {
  semaphore sem{client_, test_key(), 1, options(300ms)};
  warm(sem);
  std::error_code ec;
  lease old = sem.try_acquire(ec);
  ASSERT_TRUE(old) << ec.message();
  ASSERT_TRUE(eventually([&] { return !exists(test_key()); }, 5s));
  // A live counter (the old one went with the 300 ms TTL), so that the newcomer is solo.
  admin_.exec({"SET", keys().fence, std::to_string(old.fencing_token() + 1000), "PX", "60000"});
  semaphore fresh{admin_, test_key(), 1, options()};
  lease next = fresh.try_acquire(ec);
  ASSERT_TRUE(next) << ec.message();
  const std::string value = name_value();
  ASSERT_EQ(value, mark(1) + " " + next.value() + " 1");
  EXPECT_NE(old.extend(), std::error_code{});
  old.release();
  // The late release, a script, adopts the newcomer (another token's solo value): the name then
  // holds the bare mark and the newcomer is one of the holders; either way it still holds.
  auto after = name_value();
  EXPECT_TRUE(after == value ||
              (after == mark(1) &&
               admin_.exec({"ZSCORE", keys().expiries, next.value()}).is_string()))
      << after;
  EXPECT_FALSE(sem.try_acquire(ec)) << "two holders of 1";
  EXPECT_EQ(next.extend(), std::error_code{});
  EXPECT_GT(next.fencing_token(), old.fencing_token());
  EXPECT_EQ(next.release(), std::error_code{});
  EXPECT_EQ(name_value(), "");
}

// Pin: a server that stalls (CLIENT PAUSE WRITE) past the node timeout while the solo grant's
// transaction is on its way: its answer is lost, and the try gives up. The transaction then
// runs (the SET lands), and the give-up's release, sent after it, must remove it: no permit
// nobody holds once the server moves again.
TEST_P(SoloReview2Test, AStalledServerLeavesNoPhantomAfterALostSoloAnswer) {
  semaphore_options o = options(30s);
  o.node_timeout = 150ms;
  semaphore sem{client_, test_key(), 1, o};
  warm(sem);
  admin_.exec({"CLIENT", "PAUSE", "800", "WRITE"});
  std::error_code ec;
  lease none = sem.try_acquire(ec);
  EXPECT_FALSE(none);
  std::this_thread::sleep_for(1200ms);
  ASSERT_TRUE(eventually(
      [&] {
        semaphore other{admin_, test_key(), 1, options()};
        std::error_code e;
        lease l = other.try_acquire(e);
        return static_cast<bool>(l);
      },
      3s))
      << "a phantom holder: name's key '" << name_value() << "'";
}

// Pin: the same stall with a blocking acquire: attempt 0's answer is lost, attempt 1 (the
// script, same token) runs after the transaction landed, adopts it and is granted; one holder,
// and its release leaves nothing behind.
TEST_P(SoloReview2Test, AStalledServerThenRetriedAttemptAdoptsItsOwnSoloValue) {
  semaphore_options o = options(30s);
  o.node_timeout = 150ms;
  semaphore sem{client_, test_key(), 1, o};
  warm(sem);
  admin_.exec({"CLIENT", "PAUSE", "600", "WRITE"});
  lease held = sem.try_acquire_for(5s);
  ASSERT_TRUE(held);
  semaphore other{admin_, test_key(), 1, options()};
  std::error_code ec;
  EXPECT_FALSE(other.try_acquire(ec)) << "two holders of 1";
  EXPECT_EQ(held.release(), std::error_code{});
  lease next = other.try_acquire(ec);
  EXPECT_TRUE(next) << "left behind: name's key '" << name_value() << "' " << ec.message();
}


// The same through the library alone, as far as a stalled server allows: the server pauses
// writes past the node timeout while release_after's settle is on its way. If the settle
// reaches the server (it runs once the pause ends), the fallback release() that follows it on
// the connection must not delete it (lease.hpp: "where it was [settled], it expires after
// `ttl`"). Whether the settle ran or was dropped with the connection, the two outcomes allowed
// are: the settled hold is still there, or nothing is (settle never ran, release deleted the
// unsettled value) -- never "settle ran, then deleted by the old token".
TEST_P(SoloReview2Test, AStalledSettleOfASoloHolderIsNeitherKeptNorLostHalfway) {
  semaphore_options o = options(30s);
  o.node_timeout = 150ms;
  semaphore sem{client_, test_key(), 1, o};
  warm(sem);
  std::error_code ec;
  lease held = sem.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  const std::string token = held.value();
  ASSERT_EQ(name_value(), mark(1) + " " + token + " 1");
  admin_.exec({"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  admin_.exec({"SLOWLOG", "RESET"});
  admin_.exec({"CLIENT", "PAUSE", "600", "WRITE"});
  std::error_code settle = held.release_after(20s);
  std::this_thread::sleep_for(900ms);
  // Which scripts ran, in order (SLOWLOG: every command, newest first).
  reply log = admin_.exec({"SLOWLOG", "GET", "50"});
  bool settle_ran = false;
  for (const auto& entry : log.elements()) {
    const auto& args = entry.elements()[3].elements();
    for (const auto& a : args) {
      if (a.is_string() && a.str() == token + ":settled") settle_ran = true;
    }
  }
  const std::string after = name_value();
  std::printf("settle ran: %d; release_after: %s; name's key: '%s'\n", settle_ran ? 1 : 0,
              settle.message().c_str(), after.c_str());
  if (settle_ran) {
    EXPECT_EQ(after, mark(1) + " " + token + ":settled 1")
        << "the settle ran (release_after answered " << settle.message()
        << "), then the fallback release by the old token deleted it";
  } else {
    EXPECT_TRUE(after.empty() || after == mark(1) + " " + token + " 1") << after;
  }
}

// --- the read-write lock ---------------------------------------------------------------------

// Pin: a writer queued in the line while a mutex of the name held it; the mutex lets go (the
// name's key is free, the line is not). A reader's solo try must not be granted ahead of the
// writer, must leave no value in the name's key, and the writer is granted next.
TEST(SoloReview2RwTest, AReaderNeverOvertakesAWriterQueuedBehindAMutex) {
  redis_server server;
  client admin{server.url()};
  client c{server.url()};
  shared_mutex rw{c, test_key()};
  std::error_code ec;
  ASSERT_EQ(rw.try_acquire_shared(ec).release(), std::error_code{}) << ec.message();  // warm
  mutex plain{admin, test_key()};
  lease m = plain.try_acquire(ec);
  ASSERT_TRUE(m) << ec.message();
  auto k = shared_mutex_keys_for(test_key());
  // The writer queues: its script finds the mutex holding and keeps its place (30 s).
  auto limit = std::to_string(shared_mutex::max_readers);
  reply w = admin.exec({"EVAL", detail::sem_fair_acquire_script.body, "7", k.owners, k.expiries,
                        k.weights, k.tickets, k.waiter_info, k.fence, test_key(), "ww01", limit,
                        limit, "10000", "30000", "", read_write_lock_mark});
  ASSERT_EQ(w.elements()[0].integer(), 0) << w.to_string();
  ASSERT_EQ(m.release(), std::error_code{});
  ASSERT_TRUE(admin.exec({"GET", test_key()}).is_nil());
  lease reader = rw.try_acquire_shared(ec);
  EXPECT_FALSE(reader) << "a reader overtook the queued writer";
  EXPECT_TRUE(admin.exec({"GET", test_key()}).is_nil()) << "a solo value was left behind";
  reply again = admin.exec({"EVAL", detail::sem_fair_acquire_script.body, "7", k.owners,
                            k.expiries, k.weights, k.tickets, k.waiter_info, k.fence, test_key(),
                            "ww01", limit, limit, "10000", "30000", "", read_write_lock_mark});
  EXPECT_EQ(again.elements()[0].integer(), 1) << again.to_string();
}

// Pin: a writer granted solo ("<rw mark> <token> 1048576") is adopted by a reader's script
// with its whole weight; the reader is refused, the writer's release (now a script's) frees the
// lock for readers, and the tokens rise.
TEST(SoloReview2RwTest, ASoloWriterIsAdoptedWithItsWholeWeight) {
  redis_server server;
  client admin{server.url()};
  client c{server.url()};
  shared_mutex rw{c, test_key()};
  std::error_code ec;
  ASSERT_EQ(rw.try_acquire(ec).release(), std::error_code{}) << ec.message();  // warm
  lease writer = rw.try_acquire(ec);
  ASSERT_TRUE(writer) << ec.message();
  auto k = shared_mutex_keys_for(test_key());
  ASSERT_EQ(admin.exec({"GET", test_key()}).str(),
            std::string(read_write_lock_mark) + " " + writer.value() + " 1048576");
  EXPECT_FALSE(rw.try_acquire_shared(ec)) << "a reader beside a writer";
  EXPECT_EQ(admin.exec({"GET", test_key()}).str(), read_write_lock_mark);
  EXPECT_EQ(admin.exec({"HGET", k.weights, writer.value()}).str(), "1048576");
  EXPECT_FALSE(rw.try_acquire(ec)) << "two writers";
  EXPECT_EQ(writer.extend(), std::error_code{});
  EXPECT_EQ(writer.release(), std::error_code{});
  lease r1 = rw.try_acquire_shared(ec);
  ASSERT_TRUE(r1) << ec.message();
  lease r2 = rw.try_acquire_shared(ec);
  ASSERT_TRUE(r2) << ec.message();
  EXPECT_GT(r1.fencing_token(), writer.fencing_token());
  EXPECT_GT(r2.fencing_token(), r1.fencing_token());
}

// Pin: a mutex waiting for a reader granted solo (it watches the name's key: a foreign holder)
// is woken by the reader's compare-and-delete release, well before its retry backstop.
TEST(SoloReview2RwTest, AMutexWaitingOnASoloReaderIsWokenByItsRelease) {
  redis_server server;
  client admin{server.url()};
  client c{server.url()};
  shared_mutex rw{c, test_key()};
  std::error_code ec;
  ASSERT_EQ(rw.try_acquire_shared(ec).release(), std::error_code{}) << ec.message();  // warm
  lease reader = rw.try_acquire_shared(ec);
  ASSERT_TRUE(reader) << ec.message();
  ASSERT_NE(admin.exec({"GET", test_key()}).str(), read_write_lock_mark);
  // Its backstop sleeps 10-20 s: a wait that ends well before that was woken.
  mutex plain{admin, test_key(), {.retry_delay = 20s}};
  auto waiting = std::async(std::launch::async, [&] {
    auto t0 = std::chrono::steady_clock::now();
    lease l = plain.try_acquire_for(30s);
    return std::make_pair(static_cast<bool>(l), std::chrono::steady_clock::now() - t0);
  });
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(reader.release(), std::error_code{});
  auto [got, took] = waiting.get();
  ASSERT_TRUE(got);
  EXPECT_LT(took, 8s) << "the mutex waited for its backstop";
}


// --- plain commands refused or renamed ----------------------------------------------------

// FINDING (fixed). A server whose EXEC is renamed (rename-command EXEC ..., MULTI kept): the solo
// grant's MULTI opens a transaction, the four commands are QUEUED, and EXEC is an unknown
// command, which Redis flags as a queue-time error *inside* the transaction: the connection is
// still in MULTI. read_solo_answer reads "ERR unknown command" as refused for good (never) and
// unknown, and goes on with the script on the same connection, which the server answers
// "QUEUED"; so does every later command of every thread that shares the client's pipelined
// connection (a give-up's release, other locks, the caller's own exec()). The comment on
// read_solo_answer names "a renamed command" as handled, but only a renamed MULTI is.
TEST(SoloReview2RenamedTest, ARenamedExecLeavesTheSharedConnectionUsable) {
  redis_server server{{.extra = {"--rename-command", "EXEC", "XEXEC-review2"}}};
  client c{server.url()};
  semaphore sem{c, test_key(), 2};
  std::error_code ec;
  lease first = sem.try_acquire(ec);  // the first acquisition tries the solo grant
  EXPECT_TRUE(first) << ec.message();
  std::error_code pec;
  reply pong = c.exec({"PING"}, pec);
  EXPECT_TRUE(!pec && pong.is_string() && pong.str() == "PONG")
      << "the client's connection answers PING with " << (pec ? pec.message() : pong.to_string());
  std::error_code ec2;
  lease second = sem.try_acquire(ec2);
  EXPECT_TRUE(second) << ec2.message();
  mutex other{c, test_key("other")};
  std::error_code ec3;
  lease l = other.try_acquire(ec3);
  EXPECT_TRUE(l) << "another lock on the same client: " << ec3.message();
}


// Pin (the control of the renamed EXEC above): MULTI renamed, EXEC kept. MULTI is an unknown
// command, so the four commands run on their own and EXEC answers "without MULTI": the SET's
// own answer says the name holds our value, the script adopts it, and the connection is left
// as it was. Acquisitions keep working, and the client answers its own commands.
TEST(SoloReview2RenamedTest, ARenamedMultiLeavesTheConnectionUsableAndNoPhantom) {
  redis_server server{{.extra = {"--rename-command", "MULTI", "XMULTI-review2"}}};
  client c{server.url()};
  client admin{server.url()};
  semaphore sem{c, test_key(), 1};
  for (int i = 0; i < 3; ++i) {
    std::error_code ec;
    lease l = sem.try_acquire(ec);
    ASSERT_TRUE(l) << i << ": " << ec.message();
    semaphore other{admin, test_key(), 1};
    EXPECT_FALSE(other.try_acquire(ec)) << "two holders of 1";
    ASSERT_EQ(l.release(), std::error_code{});
  }
  std::error_code pec;
  reply pong = c.exec({"PING"}, pec);
  EXPECT_TRUE(!pec && pong.is_string() && pong.str() == "PONG")
      << (pec ? pec.message() : pong.to_string());
  EXPECT_TRUE(admin.exec({"GET", test_key()}).is_nil());
}

// FINDING (minor, fixed). A user with +multi but without +exec (security.md: "A user without them is refused once per
// semaphore object (one ACL LOG entry), which uses the script from then on"). Redis answers
// EXECABORT (... NOPERM ...) to the refused EXEC, which read_solo_answer does not read as
// refused for good: every acquisition sends the solo grant again and is refused again. Pinned
// as measured: how many refusals five acquisitions of one semaphore object cost.
TEST(SoloReview2RenamedTest, AUserWithoutExecIsRefusedOncePerSemaphoreObject) {
  redis_server server;
  client admin{server.url()};
  admin.exec({"ACL", "SETUSER", "noexec", "reset", "on", ">pw-noexec", "~*", "&*", "+@all",
              "-exec"});
  admin.exec({"ACL", "LOG", "RESET"});
  client_options o;
  o.user = "noexec";
  o.password = "pw-noexec";
  client u{server.url(), o};
  semaphore sem{u, test_key(), 2};
  for (int i = 0; i < 5; ++i) {
    std::error_code ec;
    lease l = sem.try_acquire(ec);
    ASSERT_TRUE(l) << i << ": " << ec.message();
    ASSERT_EQ(l.release(), std::error_code{});
  }
  long long refusals = 0;
  reply log = admin.exec({"ACL", "LOG"});
  for (const auto& entry : log.elements()) {
    const auto& e = entry.elements();
    for (std::size_t i = 0; i + 1 < e.size(); i += 2) {
      if (e[i].str() == "count") refusals += e[i + 1].integer();
    }
  }
  EXPECT_EQ(refusals, 1) << "ACL LOG: " << log.to_string();
}


// --- the dlock command on a solo holder ----------------------------------------------------

struct cli_result {
  int status = -1;
  std::string out, err;
};

// `dlock args...` (as cli_list_test.cpp's run_dlock).
cli_result run_dlock(std::vector<std::string> args) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/dlock-solo-review2-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp");
  const fs::path dir = tmpl, out = dir / "out", err = dir / "err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = spawn_cli(std::move(args), {}, fa);
  posix_spawn_file_actions_destroy(&fa);
  if (pid < 0) throw std::runtime_error("cannot start " DLOCK_CLI_PATH);
  cli_result r;
  const auto until = std::chrono::steady_clock::now() + test::scaled(20s);
  for (int status = 0;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() >= until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  r.out = read_file(out);
  r.err = read_file(err);
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return r;
}

// Pin: `dlock list` and `dlock status` on a read-write lock whose writer is solo
// ("<rw mark> <token> 1048576"): a writer, not a reader; and on a fair semaphore's solo holder
// of 2 permits: counted with its permits (cli_test covers the unfair one of 1).
TEST(SoloReview2CliTest, ListAndStatusReadASoloWriterAndAFairSoloHoldersPermits) {
  redis_server server;
  client c{server.url()};
  const std::string key = test_key();
  shared_mutex rw{c, key};
  std::error_code ec;
  ASSERT_EQ(rw.try_acquire(ec).release(), std::error_code{}) << ec.message();  // warm
  lease writer = rw.try_acquire(ec);
  ASSERT_TRUE(writer) << ec.message();
  ASSERT_EQ(c.exec({"GET", key}).str(),
            std::string(read_write_lock_mark) + " " + writer.value() + " 1048576");
  auto listed = run_dlock({"-r", server.url(), "list", key});
  EXPECT_EQ(listed.status, 0) << listed.err;
  EXPECT_NE(listed.out.find("held by a writer"), std::string::npos) << listed.out;
  auto status = run_dlock({"-r", server.url(), "status", key});
  EXPECT_NE(status.out.find("held as a read-write lock"), std::string::npos) << status.out;
  writer.release();

  const std::string fair_key = test_key("fair");
  semaphore sem{c, fair_key, 3, {.fair = true}};
  ASSERT_EQ(sem.try_acquire(ec).release(), std::error_code{}) << ec.message();  // warm
  lease two = sem.try_acquire(2, ec);
  ASSERT_TRUE(two) << ec.message();
  ASSERT_EQ(c.exec({"GET", fair_key}).str(), semaphore_mark(3, true) + " " + two.value() + " 2");
  auto text = run_dlock({"-r", server.url(), "status", "--semaphore", "3", "--fair", fair_key});
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("2 of 3 permits in use"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(two.value()), std::string::npos) << text.out;
  auto fair_list = run_dlock({"-r", server.url(), "list", fair_key});
  EXPECT_NE(fair_list.out.find("2 of 3 permits held by 1 holder"), std::string::npos)
      << fair_list.out;
}

}  // namespace
}  // namespace dlock::test
