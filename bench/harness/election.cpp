// SPDX-License-Identifier: Apache-2.0
#include "harness/election.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "dlock/election.hpp"

namespace dlock::bench {

row run_election_failover(std::vector<client> nodes, int candidates, std::chrono::milliseconds ttl,
                          int rounds) {
  using clock = std::chrono::steady_clock;
  const std::string name = "bench:election";
  election_options o{.lock = {.ttl = ttl, .retry_delay = std::chrono::milliseconds(50)}};

  // The observer: the moment each term was seen elected.
  std::mutex mu;
  std::condition_variable changed;
  std::uint64_t last_term = 0;
  clock::time_point last_elected_at;
  election observer_side{nodes, name, "observer", o};
  auto watching = observer_side.observe([&](const election_event& e) {
    if (e.what != election_event::change::elected) return;
    std::lock_guard lock(mu);
    last_term = e.term;
    last_elected_at = clock::now();
    changed.notify_all();
  });

  // Candidates: each campaigns, and crashes when told to (the leader is the one that holds).
  std::atomic<bool> done{false};
  std::atomic<int> crash_requests{0};
  std::vector<std::thread> threads;
  std::vector<double> failover_ms, added_ms;
  std::vector<std::pair<clock::time_point, long long>> crashes;  // when, and the PTTL left
  for (int i = 0; i < candidates; ++i) {
    threads.emplace_back([&, i] {
      election me{nodes, name, std::to_string(i), o};
      while (!done) {
        std::error_code ec;
        auto held = me.campaign_until(clock::now() + std::chrono::milliseconds(200), ec);
        if (!held) continue;
        while (!done && crash_requests.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (done) break;
        crash_requests.fetch_sub(1);
        auto at = clock::now();
        held.detach();  // a crash: nothing renews or resigns any more
        std::error_code pttl_ec;
        auto left = nodes.front().exec({"PTTL", name}, pttl_ec);
        std::lock_guard lock(mu);
        crashes.push_back({at, left.is_integer() ? left.integer() : -1});
      }
    });
  }

  auto rtt = run_exec_rtt(nodes.front(), std::chrono::milliseconds(300)).get("p50_ms");
  for (int r = 0; r < rounds; ++r) {
    std::unique_lock lock(mu);
    changed.wait_for(lock, 10 * ttl, [&] { return last_term != 0; });
    auto term = last_term;
    lock.unlock();
    std::this_thread::sleep_for(ttl / 2);  // a few renewals: the crash lands anywhere in one
    crash_requests.fetch_add(1);
    lock.lock();
    if (!changed.wait_for(lock, 10 * ttl, [&] { return last_term > term && !crashes.empty(); })) {
      break;
    }
    auto [at, left] = crashes.back();
    double took = std::chrono::duration<double, std::milli>(last_elected_at - at).count();
    failover_ms.push_back(took);
    if (left >= 0) added_ms.push_back(took - static_cast<double>(left));
  }
  done = true;
  for (auto& t : threads) t.join();
  watching.stop();

  auto f = summarize(failover_ms);
  auto a = summarize(added_ms);
  double worst = failover_ms.empty() ? NAN : *std::max_element(failover_ms.begin(), failover_ms.end());
  row out{"election", "dlock",
          std::to_string(candidates) + " candidates, TTL " + std::to_string(ttl.count()) +
              " ms, leader crashes",
          static_cast<int>(nodes.size()), candidates, {}, {}};
  out.figures["samples"] = static_cast<double>(f.samples);
  out.figures["failover_p50_ms"] = f.p50_ms;
  out.figures["failover_max_ms"] = worst;
  out.figures["added_p50_ms"] = a.p50_ms;
  out.figures["added_p99_ms"] = a.p99_ms;
  out.figures["added_p50_rtts"] = a.p50_ms / rtt;
  out.figures["ttl_ms"] = static_cast<double>(ttl.count());
  out.figures["rtt_ms"] = rtt;
  return out;
}

}  // namespace dlock::bench
