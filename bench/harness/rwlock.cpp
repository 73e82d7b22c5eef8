// SPDX-License-Identifier: Apache-2.0
#include "harness/rwlock.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>

#include "dlock/mutex.hpp"
#include "dlock/shared_mutex.hpp"

namespace dlock::bench {
namespace {

// What the workers share: who holds now, and what was seen.
struct tally {
  std::atomic<int> readers{0}, writers{0}, most_readers{0}, overlaps{0};
  std::mutex mu;
  std::vector<double> read_waits_ms, write_waits_ms;
  long long reads = 0, writes = 0, errors = 0;
};

void raise_to(std::atomic<int>& most, int value) {
  int seen = most.load();
  while (value > seen && !most.compare_exchange_weak(seen, value)) {
  }
}

}  // namespace

row run_rwlock_mix(client node, int workers, int read_percent, bool exclusive_only,
                   const timing& t) {
  const std::string name = exclusive_only ? "bench:rw:mutex" : "bench:rw";
  tally all;
  auto start = bench_clock::now();
  auto measure_from = start + t.warm, until = measure_from + t.measure;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      shared_mutex rw{node, name};
      mutex whole{node, name};
      std::mt19937 random(static_cast<unsigned>(w) * 7919u + 1);
      std::vector<double> read_waits, write_waits;
      long long reads = 0, writes = 0, errors = 0;
      while (bench_clock::now() < until) {
        bool read = static_cast<int>(random() % 100) < read_percent;
        auto asked = bench_clock::now();
        std::error_code ec;
        lease held = exclusive_only ? whole.acquire_until(until, ec)
                     : read         ? rw.acquire_shared_until(until, ec)
                                    : rw.acquire_until(until, ec);
        if (!held) {
          // The wait ends a millisecond before its deadline (the last attempt's lead).
          if (ec != errc::not_acquired) ++errors;
          continue;
        }
        double waited = std::chrono::duration<double, std::milli>(bench_clock::now() - asked).count();
        bool counted = asked >= measure_from;
        if (read && !exclusive_only) {
          raise_to(all.most_readers, ++all.readers);
          if (all.writers.load() != 0) ++all.overlaps;
          std::this_thread::sleep_for(t.hold);
          --all.readers;
        } else {
          if (++all.writers != 1 || all.readers.load() != 0) ++all.overlaps;
          std::this_thread::sleep_for(t.hold);
          --all.writers;
        }
        if (held.release()) ++errors;
        if (!counted) continue;
        (read ? read_waits : write_waits).push_back(waited);
        ++(read ? reads : writes);
      }
      std::lock_guard lock(all.mu);
      all.read_waits_ms.insert(all.read_waits_ms.end(), read_waits.begin(), read_waits.end());
      all.write_waits_ms.insert(all.write_waits_ms.end(), write_waits.begin(), write_waits.end());
      all.reads += reads;
      all.writes += writes;
      all.errors += errors;
    });
  }
  for (auto& th : threads) th.join();

  double seconds = std::chrono::duration<double>(t.measure).count();
  row out{"rwlock", "dlock",
          std::string(exclusive_only ? "mutex (every cycle exclusive)" : "shared_mutex") + ", " +
              std::to_string(read_percent) + " % reads, hold " + std::to_string(t.hold.count()) +
              " ms",
          1, workers, {}, {}};
  auto r = summarize(all.read_waits_ms), w = summarize(all.write_waits_ms);
  out.figures["cycles_per_s"] = static_cast<double>(all.reads + all.writes) / seconds;
  out.figures["reads_per_s"] = static_cast<double>(all.reads) / seconds;
  out.figures["writes_per_s"] = static_cast<double>(all.writes) / seconds;
  out.figures["most_readers"] = all.most_readers.load();
  out.figures["overlaps"] = all.overlaps.load();
  out.figures["errors"] = static_cast<double>(all.errors);
  out.figures["read_wait_p50_ms"] = r.p50_ms;
  out.figures["read_wait_p99_ms"] = r.p99_ms;
  out.figures["write_wait_p50_ms"] = w.p50_ms;
  out.figures["write_wait_p99_ms"] = w.p99_ms;
  out.figures["write_wait_max_ms"] =
      all.write_waits_ms.empty()
          ? std::nan("")
          : *std::max_element(all.write_waits_ms.begin(), all.write_waits_ms.end());
  return out;
}

}  // namespace dlock::bench
