// SPDX-License-Identifier: Apache-2.0
// Races between one client's own requests that only a slow network shows: each test puts the
// client behind tcp_proxy, delays its requests or replies so that the server runs them in an
// order the client did not send them in, and checks that no key of a live lease is lost and no
// lock is left with nobody.
//   - a failed round's cleanup release, delayed past the next round
//   - a giving-up or granted waiter whose leave would have to be re-sent after NOSCRIPT
//   - a timed-out acquire whose NOSCRIPT comes late
//   - a handoff message that arrives after a later round took the key over and gave it away
//   - a watchdog renewal that timed out, landing after release_after(ttl) (lock and permit)
//   - an extend that timed out, landing after a later, longer extend
#include <gtest/gtest.h>

#include <asio/use_future.hpp>

#include <algorithm>
#include <future>
#include <optional>
#include <string_view>
#include <thread>

#include "dlock/detail/scripts.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "fault/tcp_proxy.hpp"
#include "support/checks.hpp"
#include "support/rounds.hpp"
#include "support/monitor.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::fault {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using test::eventually;
using test::redis_server;
using test::scaled;
using test::test_key;

// One server; `direct` talks to it straight, `slow` through the proxy the test delays.
class RaceTest : public ::testing::Test {
 protected:
  // Caches the scripts, so that no NOSCRIPT detour reorders anything below.
  void warm_scripts() {
    mutex warm_up{direct, test_key("warm")};
    (void)warm_up.acquire();
  }
  // Delays the requests on the client's open connections by renewal_delay until the watchdog's
  // renewal (a request running `script`) has gone out and timed out: the client closed the
  // connection with it still on its way. Connections the client opens after it are fast.
  // Returns when that was seen: the renewal lands within renewal_delay after it. Waits for the
  // event, not a fixed span, as a busy machine may send the renewal late.
  std::optional<steady::time_point> renewal_times_out_in_a_slow_network(std::string_view script_sha1) {
    proxy.delay_open_connections(renewal_delay);
    bool abandoned = eventually([&] {
      return std::ranges::any_of(proxy.abandoned_requests(), [&](const std::string& bytes) {
        return bytes.find(script_sha1) != std::string::npos;
      });
    });
    if (!abandoned) return std::nullopt;
    return steady::now();
  }
  // On `monitor`: release_after's settle (a `script_sha1` call naming "<token>:settled") ran,
  // and then a call of the same script naming the old token, the late renewal: the race took
  // place.
  static void expect_the_renewal_landed_after_the_settle(test::raw_connection& monitor,
                                                         std::string_view script_sha1) {
    auto runs = [&](const std::vector<std::string>& args) {
      return args.size() > 1 && args[0] == "EVALSHA" && args[1] == script_sha1;
    };
    auto names_settled = [](const std::vector<std::string>& args) {
      return std::ranges::any_of(args, [](const std::string& a) { return a.ends_with(":settled"); });
    };
    ASSERT_TRUE(seen_on(monitor, [&](const auto& args) { return runs(args) && names_settled(args); }))
        << "release_after's settle never reached the server";
    ASSERT_TRUE(seen_on(monitor, [&](const auto& args) { return runs(args) && !names_settled(args); }))
        << "the timed-out renewal never landed after the settle: the test did not set up the race";
  }
  // A rival (mutex or semaphore on test_key()) must not get it within `span`.
  template <class Rival>
  static void expect_no_rival_within(Rival rival, std::chrono::milliseconds span) {
    auto start = steady::now();
    std::error_code ec;
    lease taken = rival.acquire_until(start + span, ec);
    EXPECT_FALSE(taken) << "a rival got it "
                        << std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - start).count()
                        << " ms after release_after(20s) succeeded";
  }
  static constexpr auto renewal_delay = 1500ms;  // how long the delayed renewal takes to arrive

  // The waiters queued on test_key(), as the server sees them.
  long long queued() { return direct.exec({"ZCARD", lock_keys_for(test_key()).waiters}).integer(); }
  // Reads `monitor` until a line whose arguments satisfy `match`; false if none comes in time.
  template <class Match>
  static bool seen_on(test::raw_connection& monitor, Match match) {
    auto until = steady::now() + scaled(5s);
    while (auto line = monitor.next_line(until)) {
      if (match(test::monitor_args(*line))) return true;
    }
    return false;
  }

  redis_server server;
  tcp_proxy proxy{server.port()};
  client direct{server.url()};
  client slow{proxy.url()};
};

// Round 0's acquire times out in a slow network, and so does its cleanup release, sent on a
// fresh connection; the network heals and round 1 succeeds on a third one. Round 0's requests
// are still on their way and reach the server afterwards: the late acquire, then the late
// release. Neither may touch round 1's key (with one owner token for every round, the release
// deleted it and a rival acquired while the holder had seconds of validity left).
TEST_F(RaceTest, ALateCleanupReleaseNeverDeletesALaterRoundsKey) {
  warm_scripts();
  test::raw_connection monitor(server.port());
  monitor.send("MONITOR");
  ASSERT_EQ(monitor.next_line(steady::now() + scaled(2s)).value_or(""), "+OK");
  mutex m{slow, test_key(), {.ttl = 5s, .retry_delay = 40ms, .node_timeout = 100ms}};
  proxy.set_latency(400ms, 0ms);
  bool cleanup_out = false;
  steady::time_point healed_at;
  std::thread heal([&] {
    // Round 0 goes out on the first connection and its cleanup on a second; a third opens once
    // that one timed out too, so both are long on their way by then.
    cleanup_out = eventually([&] { return proxy.connections() >= 3; });
    healed_at = steady::now();
    proxy.set_latency(0ms, 0ms);
  });
  auto acquired = m.async_acquire(asio::use_future);
  heal.join();
  EXPECT_TRUE(cleanup_out) << "round 0 never went out twice";
  ASSERT_EQ(acquired.wait_for(scaled(5s)), std::future_status::ready);
  lease l = acquired.get();
  ASSERT_TRUE(l);
  // Round 0's acquire lands 400 ms after it was sent, then its cleanup release: whatever went
  // out before the heal is due 400 ms after it at the latest.
  std::this_thread::sleep_until(healed_at + 500ms);
  ASSERT_TRUE(seen_on(monitor, [](const std::vector<std::string>& args) {
    return args.size() > 1 && args[0] == "EVALSHA" && args[1] == detail::scripts::release_sha1;
  })) << "round 0's cleanup release never reached the server";
  ASSERT_GT(l.remaining(), 2s);
  EXPECT_EQ(direct.exec({"GET", test_key()}).str(), l.value())
      << "a late release of an earlier round deleted the key of a live lease";
  mutex rival{direct, test_key()};
  EXPECT_FALSE(rival.try_lock()) << "two holders";
}

// A waiter gives up after SCRIPT FLUSH, when another client's release has put release.lua back
// in the script cache but not the leave script. Sent as two scripts, the leave fails NOSCRIPT
// and goes again as EVAL one (slow) round trip later, while the release runs at once: a holder
// releasing in between hands the lock to the departing waiter, which is no longer listening,
// and the lock sits with nobody until its TTL.
TEST_F(RaceTest, AWaiterGivingUpAfterScriptFlushLeavesNoOrphanedLock) {
  mutex holder{direct, test_key(), {.ttl = 10s}};
  lease held = holder.acquire();
  mutex waiter{slow, test_key(), {.ttl = 10s, .retry_delay = 100ms}};
  auto gave_up = std::async(std::launch::async, [&] {
    std::error_code ec;
    // Gives up after the test below has set up the flush and the monitor.
    return waiter.acquire_until(steady::now() + scaled(1500ms), ec);
  });
  ASSERT_TRUE(eventually([&] { return queued() >= 1; })) << "the waiter never queued";
  ASSERT_EQ(queued(), 1);

  direct.exec({"SCRIPT", "FLUSH"});
  {
    mutex other{direct, test_key("other")};  // EVAL again: acquire and release are cached
    (void)other.acquire();
  }
  test::raw_connection monitor(server.port());
  monitor.send("MONITOR");
  ASSERT_EQ(monitor.next_line(steady::now() + scaled(2s)).value_or(""), "+OK");
  proxy.set_latency(0ms, 300ms);  // the waiter's replies, its NOSCRIPT among them, come late

  // The waiter's first release is its giving up: the holder releases right behind it.
  ASSERT_TRUE(seen_on(monitor, [](const std::vector<std::string>& args) {
    return args.size() > 1 && args[0] == "EVALSHA" && args[1] == detail::scripts::release_sha1;
  })) << "the waiter never gave up";
  EXPECT_FALSE(held.release());
  EXPECT_FALSE(gave_up.get());
  // A re-sent leave goes a (300 ms) round trip after the NOSCRIPT: landed by now. Nothing
  // to wait for when the library is right, so a fixed span.
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(direct.exec({"GET", test_key()}).is_nil())
      << "the lock was handed to a waiter that had given up: nobody holds it until its TTL";
}

// The review's item 7 also feared a timed-out acquire re-sent after NOSCRIPT, running late
// behind our own cleanup. The fallback EVAL goes only while the EVALSHA's own timeout has not
// passed, on the same connection, before the round has failed; a NOSCRIPT that comes after the
// timeout is dropped with the rest of the late reply.
TEST_F(RaceTest, AnAcquireThatTimedOutIsNeverResentAfterNoScript) {
  ASSERT_EQ(slow.exec({"PING"}).str(), "PONG");  // connected before the latency
  direct.exec({"SCRIPT", "FLUSH"});
  test::raw_connection monitor(server.port());
  monitor.send("MONITOR");
  ASSERT_EQ(monitor.next_line(steady::now() + 2s).value_or(""), "+OK");
  proxy.set_latency(0ms, 300ms);  // the NOSCRIPT comes back after the node timeout
  mutex m{slow, test_key(), {.ttl = 10s, .node_timeout = 100ms}};
  std::error_code ec;
  EXPECT_FALSE(test::acquire_rounds(m, 1, ec));
  EXPECT_TRUE(ec) << "acquired although every reply came too late";
  int evalshas = 0, evals = 0;
  while (auto line = monitor.next_line(steady::now() + 800ms)) {
    auto args = test::monitor_args(*line);
    if (args.size() > 1 && args[0] == "EVALSHA" && args[1] == detail::scripts::acquire_sha1) {
      ++evalshas;
    }
    if (!args.empty() && args[0] == "EVAL") ++evals;
  }
  EXPECT_GE(evalshas, 1) << "the acquire never reached the server";
  EXPECT_EQ(evals, 0) << "a script was re-sent after its timeout";
  EXPECT_TRUE(direct.exec({"GET", test_key()}).is_nil());
}

// A handoff naming round r that arrives while round r+2 (or later) is in flight. Round r+1 ran
// after the release and took the handed-over key over (acquire.lua rewrites X.h<r> to
// X.<r+1>), but its reply came too late: the round failed, and its cleanup release deleted
// X.<r+1> and handed the lock to the next waiter R. The handoff message, slow on the inbox
// connection, reaches X while round r+2 is in flight. take_handoff used to hold it back
// because *some* round was in flight, that round answered "taken" (R holds the key), and
// accept_handoff gave X a lease for X.h<r>, a key nobody holds any more: two holders. Only the
// round right after the named one may now confirm a handoff.
TEST_F(RaceTest, AHandoffDeferredPastASecondRoundIsNeverAccepted) {
  warm_scripts();
  std::string queue = lock_keys_for(test_key()).waiters;
  mutex holder{direct, test_key(), {.ttl = 20s}};
  lease held = holder.acquire();
  ASSERT_TRUE(held);

  mutex x{slow, test_key(), {.ttl = 20s, .retry_delay = 100ms, .node_timeout = 2000ms}};
  auto x_result = std::async(std::launch::async, [&] {
    std::error_code ec;
    return x.acquire_until(steady::now() + 10s, ec);
  });
  ASSERT_TRUE(eventually([&] { return queued() >= 1; })) << "X never queued";
  ASSERT_EQ(queued(), 1);
  std::string x_id = direct.exec({"ZRANGE", queue, "0", "0"}).elements().at(0).str();

  mutex r{direct, test_key(), {.ttl = 20s, .retry_delay = 100ms}};
  auto r_result = std::async(std::launch::async, [&] {
    std::error_code ec;
    return r.acquire_until(steady::now() + 15s, ec);
  });
  ASSERT_TRUE(eventually([&] { return queued() >= 2; })) << "R never queued";
  ASSERT_EQ(queued(), 2);

  test::raw_connection monitor(server.port());
  monitor.send("MONITOR");
  ASSERT_EQ(monitor.next_line(steady::now() + scaled(2s)).value_or(""), "+OK");
  auto next_x_acquire = [&] {
    for (;;) {
      auto line = monitor.next_line(steady::now() + scaled(5s));
      if (!line) return std::string();
      auto args = test::monitor_args(*line);
      if (args.size() > 8 && args[0] == "EVALSHA" && args[1] == detail::scripts::acquire_sha1 &&
          args[8].compare(0, x_id.size() + 1, x_id + ".") == 0) {
        return args[8];
      }
    }
  };
  // X's round r queued; its reply is back within a few ms (no latency yet).
  std::string round_r = next_x_acquire();
  ASSERT_FALSE(round_r.empty());
  // Time for the proxy to pass that reply on, well before round r+1 (50-100 ms later): a fault's
  // timing, with no signal to wait for (missed, the race is not staged, and the test passes).
  std::this_thread::sleep_for(20ms);
  // From now on every reply to X, the handoff message on its inbox among them, takes 6 s.
  proxy.set_latency(0ms, 6000ms);
  ASSERT_FALSE(held.release());  // hands the lock to X (the queue's head): key = X.h<r>
  std::string handed = direct.exec({"GET", test_key()}).str();
  // X's round r+1 runs now: it takes X.h<r> over as X.<r+1>; its reply will be late (timeout).
  std::string round_r1 = next_x_acquire();
  ASSERT_FALSE(round_r1.empty());
  // Its reply has reached the proxy (and the 6 s delay) long before this, and round r+1 times
  // out (2 s) long after: the middle of that window, as no signal marks it.
  std::this_thread::sleep_for(300ms);
  // Later replies (the cleanup release on a fresh connection, rounds r+2...) take 800 ms: each
  // round stays in flight most of the time, but answers within node_timeout.
  proxy.set_latency(0ms, 800ms);

  lease r_lease = r_result.get();
  lease x_lease = x_result.get();
  std::string now_in_key = direct.exec({"GET", test_key()}).str();
  EXPECT_FALSE(r_lease && x_lease && r_lease.remaining() > 0s && x_lease.remaining() > 0s)
      << "two holders: R " << r_lease.value() << " (fence " << r_lease.fencing_token() << ", "
      << r_lease.remaining().count() << " ms left) and X " << x_lease.value() << " (fence "
      << x_lease.fencing_token() << ", " << x_lease.remaining().count()
      << " ms left); the key holds " << now_in_key;
}

// A waiter that queued in an earlier round and is granted by its last round, which carries no
// queue entry, used to leave the queue with a separate leave.lua. After a SCRIPT FLUSH (other
// clients have put acquire.lua and release.lua back, nobody leave.lua) that leave failed
// NOSCRIPT and went again as EVAL a round trip later, so the holder's own release (cached) ran
// first, found the holder's stale entry at the queue's head and handed the lock to it: its
// inbox still subscribed (PUBLISH counted 1), nobody listening for that id any more, the lock
// sat with nobody for its whole TTL. A grant now takes its id out of the queue itself.
TEST_F(RaceTest, AGrantedWaitersLeaveAfterScriptFlushLeavesNoOrphanedLock) {
  direct.exec({"SCRIPT", "FLUSH"});
  {
    mutex other{direct, test_key("other")};  // acquire.lua and release.lua cached, leave.lua not
    (void)other.acquire();
  }
  std::string queue = lock_keys_for(test_key()).waiters;
  mutex holder{direct, test_key(), {.ttl = 20s}};
  lease held = holder.acquire();
  ASSERT_TRUE(held);
  (void)held.detach();
  // Round 0 (caller's thread) never queues, round 1 queues, round 2 is the last: no entry.
  mutex x{slow, test_key(), {.ttl = 10s, .retry_delay = 1000ms}};
  auto acquired = std::async(std::launch::async, [&] {
    std::error_code ec;
    return test::acquire_rounds(x, 3, ec);
  });
  ASSERT_TRUE(eventually([&] { return queued() >= 1; })) << "the waiter never queued";
  ASSERT_EQ(queued(), 1);
  proxy.set_latency(0ms, 300ms);  // its replies, a NOSCRIPT among them, come late
  // The holder vanishes without a release (no handoff, no wake-up): round 2 is granted.
  direct.exec({"DEL", test_key()});
  lease l = acquired.get();
  ASSERT_TRUE(l) << "the last round was not granted";
  std::string value = l.value();
  EXPECT_FALSE(l.release());
  // A re-sent leave would go a (300 ms) round trip later: landed by now. Nothing to wait for
  // when the library is right, so a fixed span.
  std::this_thread::sleep_for(1s);
  auto key = direct.exec({"GET", test_key()});
  EXPECT_TRUE(key.is_nil()) << "released " << value << ", but the key holds " << key.str()
                            << " (PTTL " << direct.exec({"PTTL", test_key()}).integer()
                            << " ms): handed to its own departed acquisition";
  EXPECT_EQ(direct.exec({"ZCARD", queue}).integer(), 0);
}

// lease::release_after(ttl) stops the watchdog and extends the key to `ttl`, on the premise that
// "a renewal already sent reaches the server before it". Not when that renewal timed out: its
// connection was closed, but its bytes are still on their way (as over any slow link), and
// release_after's extend goes out on a fresh connection and lands first. The late renewal then
// sets the key's life back to the lock's TTL: with --min-hold longer than the TTL, the key is
// gone (and another host runs the job) long before the promised `ttl`.
TEST_F(RaceTest, ARenewalThatTimedOutNeverOverridesReleaseAfter) {
  warm_scripts();
  mutex m{slow, test_key(), {.ttl = 3s, .node_timeout = 100ms}};
  lease held = m.acquire();
  ASSERT_TRUE(held);
  test::raw_connection monitor(server.port());
  monitor.send("MONITOR");
  ASSERT_EQ(monitor.next_line(steady::now() + scaled(2s)).value_or(""), "+OK");
  // The first renewal goes out after about 1 s and times out; its retry (a quarter interval
  // later) finds the network healed.
  ASSERT_FALSE(held.keep_alive({.interval = 1000ms}));
  // The watchdog first watches the key (CLIENT TRACKING, lock_core::watch_changes): that
  // request must not be the one delayed, or its timeout moves the renewal to a fast connection.
  ASSERT_TRUE(seen_on(monitor, [](const std::vector<std::string>& args) {
    return args.size() == 3 && args[0] == "CLIENT" && args[1] == "CACHING";
  })) << "the watchdog never watched the key";
  auto renewal_abandoned_by = renewal_times_out_in_a_slow_network(detail::scripts::extend_sha1);
  ASSERT_TRUE(renewal_abandoned_by) << "the renewal never went out, or never timed out";
  std::string value = held.value();
  std::error_code settled = held.release_after(20s);
  ASSERT_FALSE(settled) << "release_after failed: " << settled.message();
  auto pttl_after = direct.exec({"PTTL", test_key()}).integer();
  EXPECT_GT(pttl_after, 19000);
  std::this_thread::sleep_until(*renewal_abandoned_by + renewal_delay + 100ms);  // it has landed
  auto holder = direct.exec({"GET", test_key()});
  auto pttl = direct.exec({"PTTL", test_key()}).integer();
  // Still ours (under the settled value release_after wrote), with the expiry it set.
  EXPECT_TRUE(holder.is_string() && holder.str().rfind(value, 0) == 0 && pttl > 15000)
      << "release_after(20s) succeeded (PTTL " << pttl_after << " ms then), but once the late "
      << "renewal landed the key has " << pttl << " ms left: a renewal sent before it landed after it";
  expect_the_renewal_landed_after_the_settle(monitor, detail::scripts::extend_sha1);
  // Another host takes the lock long before the 20 s release_after promised.
  expect_no_rival_within(mutex{direct, test_key(), {.ttl = 3s}}, 6s);
}

// The same for a semaphore permit: the late refresh sets the permit's expiry back to now + TTL,
// and a rival gets the only permit long before release_after's 20 s.
TEST_F(RaceTest, ARenewalThatTimedOutNeverOverridesReleaseAfterOnAPermit) {
  warm_scripts();
  {
    semaphore warm{direct, test_key("warm-sem"), 1};
    (void)warm.acquire();  // sem_acquire, sem_refresh via release_after, sem_release cached
  }
  semaphore sem{slow, test_key(), 1, {.ttl = 3s, .node_timeout = 100ms}};
  lease held = sem.acquire();
  ASSERT_TRUE(held);
  {
    lease warm_refresh = semaphore{direct, test_key("warm-sem"), 1}.acquire();
    ASSERT_FALSE(warm_refresh.extend());  // caches sem_refresh.lua
  }
  test::raw_connection monitor(server.port());
  monitor.send("MONITOR");
  ASSERT_EQ(monitor.next_line(steady::now() + scaled(2s)).value_or(""), "+OK");
  ASSERT_FALSE(held.keep_alive({.interval = 1000ms}));
  auto renewal_abandoned_by = renewal_times_out_in_a_slow_network(detail::scripts::sem_refresh_sha1);
  ASSERT_TRUE(renewal_abandoned_by) << "the renewal never went out, or never timed out";
  std::error_code settled = held.release_after(20s);
  ASSERT_FALSE(settled) << "release_after failed: " << settled.message();
  // The late refresh lands within renewal_delay; a permit it set back to 3 s would be free 4.5 s
  // after it.
  std::this_thread::sleep_until(*renewal_abandoned_by + renewal_delay + 100ms);
  expect_the_renewal_landed_after_the_settle(monitor, detail::scripts::sem_refresh_sha1);
  expect_no_rival_within(semaphore{direct, test_key(), 1, {.ttl = 3s}}, 6s);
}

// The same race without release_after: an extend that timed out (the lease "may still be
// held") and a retry with a longer TTL that succeeds. The late first extend cuts the key back
// to its TTL while the lease believes the longer validity: two holders.
TEST_F(RaceTest, AnExtendThatTimedOutNeverShortensALaterLongerExtend) {
  warm_scripts();
  mutex m{slow, test_key(), {.ttl = 3s, .node_timeout = 100ms}};
  lease held = m.acquire();
  ASSERT_TRUE(held);
  auto start = steady::now();
  proxy.set_latency(1500ms, 0ms);
  EXPECT_TRUE(held.extend(3s)) << "the delayed extend should have timed out";
  proxy.set_latency(0ms, 0ms);
  ASSERT_FALSE(held.extend(20s)) << "the retry failed";
  mutex rival{direct, test_key(), {.ttl = 3s}};
  std::error_code ec;
  lease taken = rival.acquire_until(start + 8s, ec);
  EXPECT_FALSE(taken && held.remaining() > 0s && !held.lost().stop_requested())
      << "two holders: the rival (fence " << taken.fencing_token() << ") and the first holder ("
      << held.remaining().count() << " ms left, lost() not fired)";
}

// A semaphore acquisition's attempts share one token: an attempt that timed out and lands
// after a later attempt was granted and extended finds the token holding already, and must not
// move its expiry back (unfair and fair).
TEST_F(RaceTest, ASemaphoreAttemptThatTimedOutNeverShortensTheGrantedPermit) {
  warm_scripts();
  for (bool fair : {false, true}) {
    SCOPED_TRACE(fair ? "fair" : "unfair");
    std::string name = test_key(fair ? "fair" : "unfair");
    {
      semaphore warm{direct, name + "-warm", 1, {.fair = fair}};
      lease w = warm.acquire();  // caches the semaphore's scripts: no NOSCRIPT detour below
      ASSERT_FALSE(w.extend());
    }
    semaphore sem{slow, name, 1, {.ttl = 3s, .fair = fair, .retry_delay = 10ms,
                                  .node_timeout = 300ms}};
    // Attempt 1 reaches the server this late: it times out, and attempt 2 (at about +0.3 s) is
    // granted long before it lands, however busy the machine.
    constexpr auto late = 3000ms;
    auto start = steady::now();
    proxy.set_latency(late, 0ms);
    auto acquired = std::async(std::launch::async, [&] {
      std::error_code ec;
      return sem.acquire(ec);
    });
    std::this_thread::sleep_until(start + 100ms);  // the fault: attempt 1 alone is delayed
    proxy.set_latency(0ms, 0ms);
    lease held = acquired.get();
    ASSERT_TRUE(held);
    ASSERT_LT(steady::now() - start, late - 300ms) << "granted only by the late attempt";
    ASSERT_FALSE(held.extend(20s));
    std::this_thread::sleep_until(start + late + 1000ms);  // the late attempt has landed
    semaphore rival{direct, name, 1, {.ttl = 3s, .fair = fair}};
    std::error_code ec;
    // Past the 3 s TTL that a late attempt moving the expiry back would have left.
    lease taken = rival.acquire_until(start + late + 4500ms, ec);
    EXPECT_FALSE(taken) << "a rival got the only permit at +"
                        << std::chrono::duration_cast<std::chrono::milliseconds>(
                               steady::now() - start).count()
                        << " ms while the holder's lease says " << held.remaining().count()
                        << " ms left";
    EXPECT_FALSE(held.release());
  }
}

}  // namespace
}  // namespace dlock::fault
