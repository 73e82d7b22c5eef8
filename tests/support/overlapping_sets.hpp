// SPDX-License-Identifier: Apache-2.0
// tests/support/overlapping_sets.hpp: many clients lock random overlapping sets of names.
//   lock_overlapping_sets  `threads` clients, each `rounds` times: 1 to 3 of `names` names, in a
//                          random order, taken with a dlock::lock_set, then a non-atomic
//                          read-modify-write of each name's counter ("<name>:count") under it.
//                          Returns how often each counter was raised: the set must exclude,
//                          so the counters must come out exactly so.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/lock_set.hpp"

namespace dlock::test {

inline std::vector<long long> lock_overlapping_sets(const std::string& url,
                                                    const std::function<std::string(int)>& name,
                                                    int threads, int rounds, int names) {
  using namespace std::chrono_literals;
  std::vector<std::atomic<long long>> raised(static_cast<std::size_t>(names));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t));
      client mine{url};
      for (int r = 0; r < rounds; ++r) {
        std::vector<int> picked(static_cast<std::size_t>(names));
        for (int i = 0; i < names; ++i) picked[static_cast<std::size_t>(i)] = i;
        std::shuffle(picked.begin(), picked.end(), random);
        picked.resize(1 + random() % 3);
        std::vector<std::string> set;
        for (int i : picked) set.push_back(name(i));
        lock_set locks{mine, set, {.ttl = 5s, .retry_delay = 5ms}};
        std::error_code ec;
        auto held = locks.acquire_until(std::chrono::steady_clock::now() + 30s, ec);
        ASSERT_TRUE(held) << ec.message();
        for (int i : picked) {
          auto key = name(i) + ":count";
          auto now = mine.exec({"GET", key});
          long long v = now.is_nil() ? 0 : std::stoll(now.str());
          std::this_thread::yield();
          mine.exec({"SET", key, std::to_string(v + 1)});
          ++raised[static_cast<std::size_t>(i)];
        }
        EXPECT_FALSE(held.release());
      }
    });
  }
  for (auto& w : workers) w.join();
  return {raised.begin(), raised.end()};
}

}  // namespace dlock::test
