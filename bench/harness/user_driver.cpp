// SPDX-License-Identifier: Apache-2.0
// The user's driver: what a program that locks from threads and one that chains async calls
// get from one client, measured the plain way such programs measure themselves, so that the
// ratio of the two can be set beside lock_bench's uncontended rows (measure.cpp), which time
// each cycle inside a window after a warm-up.
#include "harness/user_driver.hpp"

#include <sys/resource.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "dlock/mutex.hpp"

namespace dlock::bench {
namespace {

double load_average() {
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  return load;
}

std::unique_ptr<mutex> make_mutex(client& c, const std::string& name, const user_driver_setup& s) {
  if (s.node_vector) return std::make_unique<mutex>(std::vector<client>{c}, name);
  return std::make_unique<mutex>(c, name);
}

// A window's cycles per second, and what each cycle cost this process (all its threads, the
// I/O thread's included): voluntary context switches and CPU time.
struct window {
  double rate = 0;
  double switches_per_cycle = 0;
  double cpu_us_per_cycle = 0;
};

rusage usage() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u;
}

double cpu_us(const rusage& u) {
  auto us = [](const timeval& t) { return t.tv_sec * 1e6 + static_cast<double>(t.tv_usec); };
  return us(u.ru_utime) + us(u.ru_stime);
}

// Counts `cycles` from `from` (or, with a barrier or warm-up, from where those end) for the
// setup's seconds.
window count_window(const std::atomic<long>& cycles, bench_clock::time_point from,
                    const user_driver_setup& s) {
  std::this_thread::sleep_until(from);
  long first = cycles.load();
  rusage u0 = usage();
  auto t0 = bench_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(s.seconds));
  long got = cycles.load() - first;
  rusage u1 = usage();
  window w;
  w.rate = static_cast<double>(got) / std::chrono::duration<double>(bench_clock::now() - t0).count();
  if (got > 0) {
    w.switches_per_cycle = static_cast<double>(u1.ru_nvcsw - u0.ru_nvcsw) / static_cast<double>(got);
    w.cpu_us_per_cycle = (cpu_us(u1) - cpu_us(u0)) / static_cast<double>(got);
  }
  return w;
}

window threads_phase(client& c, const user_driver_setup& s) {
  std::atomic<long> cycles{0};
  std::atomic<bool> stop{false};
  auto start = bench_clock::now() + milliseconds(s.barrier ? 20 : 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < s.lockers; ++i) {
    threads.emplace_back([&, i] {
      auto m = make_mutex(c, "ud:t:" + std::to_string(i), s);
      if (s.barrier) std::this_thread::sleep_until(start);
      while (!stop.load(std::memory_order_relaxed)) {
        m->lock();
        m->unlock();
        cycles.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  window rate = count_window(cycles, start + milliseconds(s.warm_ms), s);
  stop = true;
  for (auto& th : threads) th.join();
  return rate;
}

window async_phase(client& c, const user_driver_setup& s) {
  std::vector<std::unique_ptr<mutex>> locks;
  for (int i = 0; i < s.lockers; ++i) locks.push_back(make_mutex(c, "ud:a:" + std::to_string(i), s));
  std::atomic<long> cycles{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  int running = s.lockers;
  std::function<void(mutex&)> next = [&](mutex& m) {
    if (stop.load()) {
      std::lock_guard guard(mu);
      if (--running == 0) cv.notify_all();
      return;
    }
    m.async_acquire([&](std::error_code, lease l) {
      // An error leaves `l` empty: its release completes with not_held, and the chain goes on.
      l.async_release([&](std::error_code) {
        cycles.fetch_add(1, std::memory_order_relaxed);
        next(m);
      });
    });
  };
  auto start = bench_clock::now();
  for (auto& m : locks) next(*m);
  window rate = count_window(cycles, start + milliseconds(s.warm_ms), s);
  stop = true;
  std::unique_lock guard(mu);
  cv.wait(guard, [&] { return running == 0; });
  return rate;
}

}  // namespace

row run_user_driver(const user_driver_setup& s) {
  std::string variant = user_driver_variant;
  if (s.async_first) variant += ", async first";
  if (s.barrier) variant += ", start barrier";
  if (s.warm_ms > 0) variant += ", warm-up " + std::to_string(s.warm_ms) + " ms";
  if (s.node_vector) variant += ", mutex(vector<client>)";
  row r{"user driver", "dlock", variant, 1, s.lockers, {}, {}};
  r.figures["load_before"] = load_average();

  client c{s.url};
  double threads_total = 0, async_total = 0;
  window threads_cost, async_cost;  // summed over the rounds
  for (int round = 1; round <= s.rounds; ++round) {
    window threads, async;
    for (int half = 0; half < 2; ++half) {
      if ((half == 0) != s.async_first) threads = threads_phase(c, s);
      else async = async_phase(c, s);
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    std::string n = std::to_string(round);
    r.figures["threads_" + n] = threads.rate;
    r.figures["async_" + n] = async.rate;
    r.figures["ratio_" + n] = threads.rate / async.rate;
    threads_total += threads.rate;
    async_total += async.rate;
    threads_cost.switches_per_cycle += threads.switches_per_cycle / s.rounds;
    threads_cost.cpu_us_per_cycle += threads.cpu_us_per_cycle / s.rounds;
    async_cost.switches_per_cycle += async.switches_per_cycle / s.rounds;
    async_cost.cpu_us_per_cycle += async.cpu_us_per_cycle / s.rounds;
  }
  r.figures["threads_switches_per_cycle"] = threads_cost.switches_per_cycle;
  r.figures["threads_cpu_us_per_cycle"] = threads_cost.cpu_us_per_cycle;
  r.figures["async_switches_per_cycle"] = async_cost.switches_per_cycle;
  r.figures["async_cpu_us_per_cycle"] = async_cost.cpu_us_per_cycle;
  r.figures["threads_cycles_per_s"] = threads_total / s.rounds;
  r.figures["async_cycles_per_s"] = async_total / s.rounds;
  r.figures["ratio"] = threads_total / async_total;
  r.figures["load_after"] = load_average();
  return r;
}

}  // namespace dlock::bench
