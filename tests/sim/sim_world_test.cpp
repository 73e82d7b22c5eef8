// SPDX-License-Identifier: Apache-2.0
// The simulated world without the engine: per-link FIFO and cross-link reordering, timeouts
// that fail the whole connection while the requests still run late, the NOSCRIPT -> EVAL
// fallback within one timeout, crashes and refused connections, pub/sub delivery and its loss,
// client pauses, clocks, and replay of a seed.
#include "sim_world.hpp"

#include <gtest/gtest.h>

#include "dlock/key_layout.hpp"

namespace dlock::sim {
namespace {

using std::chrono::milliseconds;

struct result {
  std::error_code ec;
  reply r;
  sim_time at = -1;
  int calls = 0;
};

detail::request extend_call(std::uint64_t id, std::size_t node, milliseconds timeout) {
  return {id, node, &detail::extend_script, {"k"}, {"owner", "1000", ""}, timeout};
}

detail::request lock_call(const std::string& script_name, std::size_t node,
                          std::vector<std::string> args) {
  // A request's keys are views (detail::request): into keys that outlive the run.
  static const lock_keys keys = lock_keys_for("l");
  detail::request r;
  r.node = node;
  r.timeout = milliseconds(100);
  if (script_name == "acquire") {
    r.code = &detail::acquire_script;
    r.keys = {keys.key, keys.fence, keys.waiters, keys.waiter_info, keys.tickets};
  } else {
    r.code = &detail::release_script;
    r.keys = {keys.key, keys.waiters, keys.waiter_info, keys.fence};
  }
  r.args = detail::script_args(args);
  return r;
}

// Spares the NOSCRIPT round trip, so that each call runs once on its node.
void load_scripts(world& w) {
  for (std::size_t i = 0; i < w.nodes(); ++i) {
    for (const auto* s :
         {&detail::acquire_script, &detail::release_script, &detail::extend_script}) {
      w.redis(i).exec({"SCRIPT", "LOAD", s->body});
    }
  }
}

network_profile fixed(sim_time one_way) { return {one_way, one_way, 0, 0}; }

void run_all(world& w) {
  while (w.step()) {
  }
}

world::reply_handler record(world& w, result& out) {
  return [&w, &out](std::error_code ec, const reply& r) {
    out.ec = ec;
    out.r = r;
    out.at = w.now();
    ++out.calls;
  };
}

TEST(SimWorld, OneLinkIsFifoButLinksOvertakeEachOther) {
  world w(7, 2, {10, 2000, 0, 0});
  w.add_client({});
  w.add_client({});
  load_scripts(w);
  std::vector<std::vector<std::uint64_t>> ran(2);
  w.before_script = [&](std::size_t i, const detail::request& r) { ran[i].push_back(r.id); };
  std::vector<result> results(200);
  // Client 0 sends ids 0..49 to node 0 and 100..149 to node 1; client 1 sends 50..99 to node 0.
  for (std::uint64_t k = 0; k < 50; ++k) {
    w.call(0, extend_call(k, 0, milliseconds(100)), record(w, results[k]));
    w.call(0, extend_call(100 + k, 1, milliseconds(100)), record(w, results[100 + k]));
    w.call(1, extend_call(50 + k, 0, milliseconds(100)), record(w, results[50 + k]));
  }
  run_all(w);
  ASSERT_EQ(ran[0].size(), 100u);
  ASSERT_EQ(ran[1].size(), 50u);
  std::vector<std::uint64_t> from0, from1;
  for (auto id : ran[0]) (id < 50 ? from0 : from1).push_back(id);
  EXPECT_TRUE(std::is_sorted(from0.begin(), from0.end()));
  EXPECT_TRUE(std::is_sorted(from1.begin(), from1.end()));
  EXPECT_TRUE(std::is_sorted(ran[1].begin(), ran[1].end()));
  // Interleaved in send order would be 0, 50, 1, 51, ...: the two links did not keep it.
  std::vector<std::uint64_t> send_order;
  for (std::uint64_t k = 0; k < 50; ++k) {
    send_order.push_back(k);
    send_order.push_back(50 + k);
  }
  EXPECT_NE(ran[0], send_order);
  for (auto& r : results) EXPECT_LE(r.calls, 1);
}

TEST(SimWorld, ATimeoutFailsTheWholeConnectionButItsRequestsStillRunLate) {
  world w(1, 1, fixed(100));
  w.add_client({});
  load_scripts(w);
  int executed = 0;
  w.before_script = [&](std::size_t, const detail::request&) { ++executed; };
  result first, second, third;
  w.pause_node(0, ms(20));
  w.call(0, extend_call(2, 0, milliseconds(2)), record(w, first));
  w.call(0, extend_call(3, 0, milliseconds(50)), record(w, second));
  sim_time sent = w.now();
  while (w.step(sent + ms(5))) {
  }
  EXPECT_EQ(first.ec, errc::timeout);
  EXPECT_EQ(second.ec, errc::timeout);  // its own deadline was far, but the connection failed
  EXPECT_EQ(second.at, sent + ms(2));
  EXPECT_EQ(executed, 0);
  run_all(w);
  EXPECT_EQ(executed, 2);  // both ran when the node resumed, and their replies were lost
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(second.calls, 1);
  EXPECT_EQ(w.stats().late_executions, 2u);
  w.call(0, extend_call(4, 0, milliseconds(10)), record(w, third));  // a new connection
  run_all(w);
  EXPECT_FALSE(third.ec);
  EXPECT_EQ(third.r.integer(), 0);
}

TEST(SimWorld, NoscriptFallsBackToEvalWithinWhatIsLeftOfTheTimeout) {
  world w(1, 1, fixed(600));
  w.add_client({});
  result a, b, c, d;
  w.call(0, extend_call(1, 0, milliseconds(4)), record(w, a));  // 1.2 ms + 1.2 ms < 4 ms
  run_all(w);
  EXPECT_FALSE(a.ec);
  EXPECT_EQ(w.stats().evals, 1u);
  w.call(0, extend_call(2, 0, milliseconds(4)), record(w, b));
  run_all(w);
  EXPECT_FALSE(b.ec);
  EXPECT_EQ(w.stats().evals, 1u);  // cached now
  w.crash_node(0, ms(1), true);
  run_all(w);
  // NOSCRIPT after 1.2 ms of 2: 0.8 ms left, rounded up to 1 ms as run_script does, so the
  // EVAL goes out; its round trip (1.2 ms) outlasts that, but it runs and loads the script.
  w.call(0, extend_call(3, 0, milliseconds(2)), record(w, c));
  run_all(w);
  EXPECT_EQ(c.ec, errc::timeout);
  EXPECT_EQ(w.stats().evals, 2u);
  w.call(0, extend_call(4, 0, milliseconds(4)), record(w, d));
  run_all(w);
  EXPECT_FALSE(d.ec);
  EXPECT_EQ(w.stats().evals, 2u);  // cached by the late EVAL
}

TEST(SimWorld, ACrashLosesWhatTravelsAndRefusesNewConnectionsUntilTheRestart) {
  world w(1, 1, fixed(500));
  w.add_client({});
  result a, b, c;
  w.call(0, extend_call(1, 0, milliseconds(100)), record(w, a));
  w.at(100, [&] { w.crash_node(0, ms(5), true); });
  w.at(1000, [&] { w.call(0, extend_call(2, 0, milliseconds(100)), record(w, b)); });
  w.at(ms(6), [&] { w.call(0, extend_call(3, 0, milliseconds(100)), record(w, c)); });
  run_all(w);
  EXPECT_EQ(a.ec, errc::connection_lost);
  EXPECT_EQ(a.at, 600);
  EXPECT_EQ(b.ec, errc::node_unreachable);
  EXPECT_EQ(b.at, 2000);
  EXPECT_FALSE(c.ec);
}

TEST(SimWorld, AReleaseWakesTheSubscribedWaiterAndADropLosesTheSubscription) {
  world w(3, 1, fixed(100));
  w.add_client({});
  w.add_client({});
  w.set_resubscribe_delay(ms(1));
  std::vector<std::string> got;
  int lost = 0;
  w.on_message = [&](std::size_t c, std::size_t, std::string_view payload) {
    EXPECT_EQ(c, 0u);
    got.emplace_back(payload);
  };
  w.on_subscription_lost = [&](std::size_t, std::size_t) { ++lost; };
  w.subscribe(0, 0);
  run_all(w);
  ASSERT_TRUE(w.subscribed(0, 0));
  result r;
  w.call(1, lock_call("acquire", 0, {"h.0", "1000", "", ""}), record(w, r));
  run_all(w);
  w.call(0, lock_call("acquire", 0, {"w.0", "1000", "1000 " + w.wake_channel(0), ""}),
         record(w, r));
  run_all(w);
  EXPECT_EQ(r.r.elements().at(0).integer(), 0);  // queued
  w.call(1, lock_call("release", 0, {"h.0"}), record(w, r));
  run_all(w);
  EXPECT_EQ(r.r.integer(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "w");
  auto links = w.open_links();
  for (auto& l : links) {
    if (l.subscriber) w.drop_link(l.id);
  }
  EXPECT_EQ(lost, 1);
  EXPECT_FALSE(w.subscribed(0, 0));
  run_all(w);
  EXPECT_TRUE(w.subscribed(0, 0));  // subscribed again after the delay
}

TEST(SimWorld, APausedClientHandlesWhatPiledUpInOrderOnResuming) {
  world w(1, 1, fixed(100));
  w.add_client({});
  w.add_client({});
  std::vector<std::pair<int, sim_time>> seen;
  w.at_client(0, 100, [&] { seen.emplace_back(1, w.now()); });
  w.at_client(0, 200, [&] { seen.emplace_back(2, w.now()); });
  w.at_client(1, 150, [&] { seen.emplace_back(3, w.now()); });
  // Due at the very end of the pause, and scheduled before it: still behind what piled up.
  w.at_client(0, 1050, [&] { seen.emplace_back(4, w.now()); });
  w.at(50, [&] { w.pause_client(0, 1000); });
  run_all(w);
  std::vector<std::pair<int, sim_time>> want{{3, 150}, {1, 1050}, {2, 1050}, {4, 1050}};
  EXPECT_EQ(seen, want);
}

TEST(SimWorld, AClientClockRunsAtItsOwnRateAndWhenInvertsIt) {
  world w(1, 1, fixed(100));
  w.add_client({123'456'789, 2000});
  w.add_client({5, -2000});
  for (std::size_t c = 0; c < 2; ++c) {
    // A slow clock reads the same for two microseconds now and then: `when` names the first.
    for (sim_time t : {0LL, 1LL, 999LL, 1'000'000LL, 123'456'789LL}) {
      sim_time back = w.when(c, w.clock_at(c, t));
      EXPECT_EQ(w.clock_at(c, back), w.clock_at(c, t));
      EXPECT_TRUE(back == 0 || w.clock_at(c, back - 1) < w.clock_at(c, t));
      EXPECT_LE(t - back, 1) << c << " " << t;
    }
  }
  EXPECT_EQ(w.clock_at(0, ms(1000)) - w.clock_at(0, 0), milliseconds(1002));
  EXPECT_EQ(w.clock_at(1, ms(1000)) - w.clock_at(1, 0), milliseconds(998));
}

TEST(SimWorld, ASeedReplaysTheSameSchedule) {
  auto run = [](std::uint64_t seed) {
    world w(seed, 3, {10, 1000, 0.1, ms(5)});
    w.set_tracing(true);
    w.add_client({});
    w.add_client({});
    w.set_resubscribe_delay(ms(2));
    for (std::size_t i = 0; i < 3; ++i) w.subscribe(0, i);
    for (std::uint64_t k = 0; k < 30; ++k) {
      w.at(static_cast<sim_time>(k) * 300, [&w, k] {
        w.call(k % 2, extend_call(k, k % 3, milliseconds(2)), [](std::error_code, const reply&) {});
        if (k == 10) w.crash_node(1, ms(3), true);
        if (k == 20) {
          auto links = w.open_links();
          w.drop_link(links[w.random().below(links.size())].id);
        }
      });
    }
    run_all(w);
    return w.trace();
  };
  auto a = run(42);
  EXPECT_GT(a.size(), 60u);
  EXPECT_EQ(a, run(42));
  EXPECT_NE(a, run(43));
}

}  // namespace
}  // namespace dlock::sim
