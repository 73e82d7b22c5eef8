// SPDX-License-Identifier: Apache-2.0
// The soak run: mixed operations (acquire_until + keep_alive, the Lockable facade with manual
// extend, one-round tries, async_acquire; release, drop or detach) on the single lock, the
// Redlock and the semaphore, under a random sequence of the faults that docs/guarantees.md
// calls safe without fencing: a hung or slow minority node, a crash and restart with fsync'd
// AOF, latency, a node partitioned away, one client's replies or requests dropped.
// Duration: $DLOCK_SOAK_SECONDS (e.g. 1800 for a real soak), else 20 s, the short form that
// `make test` and CI run.
// Asserts no overlap, no stale write accepted, and that every worker finished.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "fault/scenario.hpp"

namespace dlock::fault {
namespace {

using namespace std::chrono_literals;
using proxy_mode = tcp_proxy::mode;

std::chrono::milliseconds soak_duration() {
  if (const char* s = std::getenv("DLOCK_SOAK_SECONDS"); s && *s) {
    return std::chrono::milliseconds(static_cast<long long>(std::atof(s) * 1000));
  }
  return 20s;  // the short form that `make test` (and so CI) runs
}

TEST(soak, mixed_operations_under_safe_faults) {
  scenario s{"soak",
             {.persistence = true,
              .proxied = true,
              .duration = soak_duration(),
              .worker_flags = {"--mixed"}}};
  std::map<std::string, int> injected;
  auto o = s.run([&](scenario& s) {
    std::mt19937 rng{std::random_device{}()};
    auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
    const int procs = s.options().processes, nodes = s.options().nodes;
    while (s.running()) {
      int n = pick(nodes), p = pick(procs);
      auto span = std::chrono::milliseconds(300 + pick(900));
      switch (pick(7)) {
        case 0:
          ++injected["hang"];
          s.node(n).pause();
          s.sleep(span);
          s.node(n).resume();
          break;
        case 1:
          ++injected["crash"];
          s.node(n).kill();
          s.sleep(span);
          s.node(n).restart();
          break;
        case 2:
          ++injected["debug_sleep"];
          test::raw_command(s.node(n).port(), "DEBUG SLEEP 0." + std::to_string(3 + pick(5)));
          break;
        case 3:
          ++injected["client_pause"];
          test::raw_command(s.node(n).port(), "CLIENT PAUSE " + std::to_string(span.count()) +
                                                  (pick(2) ? " WRITE" : " ALL"));
          s.sleep(span);
          break;
        case 4:
          ++injected["latency"];
          for (int q = 0; q < procs; ++q) {
            s.proxy(q, n).set_latency(std::chrono::milliseconds(pick(120)),
                                      std::chrono::milliseconds(pick(120)));
          }
          s.sleep(span);
          for (int q = 0; q < procs; ++q) s.proxy(q, n).set_latency(0ms, 0ms);
          break;
        case 5:
          ++injected["partition"];
          for (int q = 0; q < procs; ++q) s.proxy(q, n).set_mode(proxy_mode::stall);
          s.sleep(span);
          for (int q = 0; q < procs; ++q) s.proxy(q, n).set_mode(proxy_mode::pass);
          break;
        case 6: {
          ++injected["one_way"];
          auto m = pick(2) ? proxy_mode::drop_replies : proxy_mode::drop_requests;
          for (int k = 0; k < nodes; ++k) s.proxy(p, k).set_mode(m);
          s.sleep(span);
          for (int k = 0; k < nodes; ++k) s.proxy(p, k).set_mode(proxy_mode::pass);
          break;
        }
      }
      s.sleep(std::chrono::milliseconds(100 + pick(400)));
    }
  });
  std::string faults;
  for (const auto& [kind, count] : injected) faults += " " + kind + "=" + std::to_string(count);
  std::printf("soak faults:%s\n", faults.c_str());
  log_result("soak faults:" + faults);
  EXPECT_EQ(o.failed_workers, 0) << o.line;
  EXPECT_GT(o.acquisitions, 30) << o.line;
  EXPECT_EQ(o.fence.wrongly_accepted, 0u) << o.line;
  EXPECT_EQ(o.lost_updates, 0u) << o.line;
  EXPECT_EQ(o.overlaps, 0u) << o.line;
}

}  // namespace
}  // namespace dlock::fault
