// SPDX-License-Identifier: Apache-2.0
// lock_worker: a separate process that contends for a lock, for the multi-process tests.
//   lock_worker counter --lock URL [--lock URL ...] --resource URL --key K --iterations N
//                       [--ttl MS] [--threads T] [--nolock] [--fair] [--retry-delay MS]
//                       [--keys M]
//       T threads each do N read-modify-write increments of K:counter on the resource with
//       plain GET then SET (not atomic), under the lock unless --nolock. Each thread records its
//       longest wait for the lock (ms) with HSET K:maxwait. Exits 0 when done. With --keys M,
//       increment i goes to lock and counter K:<j>, j = (i + thread) mod M, each K:<j>:counter.
//   lock_worker queue --lock URL --key K [--fair]
//       waits for the lock (lock()), prints nothing; for tests that kill a queued waiter.
//   lock_worker hold --lock URL --key K [--ttl MS]
//       takes the lock, prints "held" and sleeps until killed.
//   lock_worker fenced --lock URL --resource URL --key K [--ttl MS]
//       takes the lock with keep_alive, records its fence in K:worker:fence, then keeps writing
//       K:data with fenced_set every 10 ms; counts K:worker:accepted / K:worker:rejected and
//       sets K:worker:lost when its loss signal fires. Exits 0 once it saw both the loss and a
//       rejected write, 1 after 20 s (times the build's slowdown, tests/support/checks.hpp).
//   lock_worker elect --lock URL [--lock URL ...] --resource URL --key K --value V --log PATH
//                     [--ttl MS] [--resign-after N]
//       a candidate of the election K (dlock::election) that, while leader, writes K:data with
//       fenced_set every 10 ms, its term as the token, until its lease's lost() fires; after N
//       writes (if given) it resigns. Then it campaigns again, forever. Appends to PATH, one
//       line per event, steady_clock (CLOCK_MONOTONIC) nanoseconds:
//         elected <term> <ns>, write <term> accepted|refused <start ns> <end ns>,
//         lost <term> <ns>, resigned <term> <ns>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <iostream>
#include <sstream>
#include <unistd.h>
#include <string>
#include <thread>
#include <vector>

#include "checks.hpp"
#include "dlock/dlock.hpp"

namespace {

struct args {
  std::string mode;
  std::vector<std::string> locks;
  std::string resource;
  std::string key = "worker";
  int iterations = 100;
  int threads = 1;
  long ttl_ms = 5000;
  bool nolock = false;
  bool fair = false;
  long retry_delay_ms = 5;
  int keys = 1;
  std::string value, log;
  int resign_after = 0;
};

args parse(int argc, char** argv) {
  args a;
  if (argc < 2) std::exit(64);
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(64);
      return argv[++i];
    };
    if (flag == "--lock") a.locks.push_back(value());
    else if (flag == "--resource") a.resource = value();
    else if (flag == "--key") a.key = value();
    else if (flag == "--iterations") a.iterations = std::stoi(value());
    else if (flag == "--threads") a.threads = std::stoi(value());
    else if (flag == "--ttl") a.ttl_ms = std::stol(value());
    else if (flag == "--nolock") a.nolock = true;
    else if (flag == "--fair") a.fair = true;
    else if (flag == "--retry-delay") a.retry_delay_ms = std::stol(value());
    else if (flag == "--keys") a.keys = std::stoi(value());
    else if (flag == "--value") a.value = value();
    else if (flag == "--log") a.log = value();
    else if (flag == "--resign-after") a.resign_after = std::stoi(value());
    else std::exit(64);
  }
  return a;
}

std::vector<dlock::client> clients(const std::vector<std::string>& urls) {
  std::vector<dlock::client> out;
  for (const auto& u : urls) out.emplace_back(u);
  return out;
}

void increment(dlock::client& resource, const std::string& counter) {
  auto current = resource.exec({"GET", counter});
  long long value = current.is_nil() ? 0 : std::stoll(current.str());
  std::this_thread::yield();  // widen the race window that the lock must close
  resource.exec({"SET", counter, std::to_string(value + 1)});
}

int run_fenced(const args& a, const dlock::lock_options& options) {
  dlock::client resource{a.resource};
  dlock::mutex lock{clients(a.locks), a.key, options};
  auto held = lock.acquire();
  held.keep_alive();
  std::string fence = std::to_string(held.fencing_token());
  resource.exec({"SET", a.key + ":worker:fence", fence});
  auto give_up = std::chrono::steady_clock::now() + dlock::test::scaled(std::chrono::seconds(20));
  bool rejected_seen = false;
  while (std::chrono::steady_clock::now() < give_up) {
    std::error_code ec;
    bool accepted = dlock::fenced_set(resource, a.key + ":data", "worker " + fence,
                                      held.fencing_token(), ec);
    if (!ec) resource.exec({"INCR", a.key + (accepted ? ":worker:accepted" : ":worker:rejected")});
    rejected_seen |= !ec && !accepted;
    if (held.lost().stop_requested()) resource.exec({"SET", a.key + ":worker:lost", "1"});
    if (held.lost().stop_requested() && rejected_seen) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 1;
}

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int run_elect(const args& a, const dlock::lock_options& options) {
  dlock::client resource{a.resource};
  dlock::election candidate{clients(a.locks), a.key, a.value, {.lock = options}};
  std::FILE* log = std::fopen(a.log.c_str(), "a");
  if (!log) return 66;
  auto note = [&](const std::string& line) {
    std::fprintf(log, "%s\n", line.c_str());
    std::fflush(log);
  };
  for (;;) {
    auto held = candidate.campaign();
    auto term = std::to_string(held.fencing_token());
    note("elected " + term + " " + std::to_string(now_ns()));
    // A careless leader on purpose: it trusts lost() alone, so that a paused or cut-off one
    // writes late, and the fence must refuse it.
    for (int writes = 0; !held.lost().stop_requested(); ++writes) {
      if (a.resign_after > 0 && writes == a.resign_after) {
        candidate.resign(held);
        note("resigned " + term + " " + std::to_string(now_ns()));
        break;
      }
      auto start = now_ns();
      std::error_code ec;
      bool accepted = dlock::fenced_set(resource, a.key + ":data", a.value + " " + term,
                                        std::stoull(term), ec);
      if (!ec) {
        note("write " + term + (accepted ? " accepted " : " refused ") + std::to_string(start) +
             " " + std::to_string(now_ns()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (held) note("lost " + term + " " + std::to_string(now_ns()));
  }
}

// One thread of `counter` mode: increments under the lock, then records its longest wait.
void count(const args& a, const dlock::lock_options& options, int thread) {
  dlock::client resource{a.resource};
  auto nodes = clients(a.locks);
  std::vector<std::string> names;
  std::vector<std::unique_ptr<dlock::mutex>> locks;
  for (int j = 0; j < a.keys; ++j) {
    names.push_back(a.keys == 1 ? a.key : a.key + ":" + std::to_string(j));
    locks.push_back(std::make_unique<dlock::mutex>(nodes, names.back(), options));
  }
  long long longest_wait_ms = 0;
  for (int i = 0; i < a.iterations; ++i) {
    auto j = static_cast<std::size_t>((i + thread) % a.keys);
    if (a.nolock) {
      increment(resource, names[j] + ":counter");
      continue;
    }
    auto asked = std::chrono::steady_clock::now();
    std::unique_lock guard{*locks[j]};
    auto waited = std::chrono::steady_clock::now() - asked;
    longest_wait_ms = std::max<long long>(
        longest_wait_ms, std::chrono::duration_cast<std::chrono::milliseconds>(waited).count());
    increment(resource, names[j] + ":counter");
  }
  std::ostringstream me;
  me << ::getpid() << "/" << std::this_thread::get_id();
  resource.exec({"HSET", a.key + ":maxwait", me.str(), std::to_string(longest_wait_ms)});
}

}  // namespace

int run(int argc, char** argv) {
  args a = parse(argc, argv);
  dlock::lock_options options{.ttl = std::chrono::milliseconds(a.ttl_ms),
                              .retry_delay = std::chrono::milliseconds(a.retry_delay_ms),
                              .fair = a.fair};
  if (a.mode == "hold") {
    dlock::mutex lock{clients(a.locks), a.key, options};
    auto held = lock.acquire();
    std::printf("held %llu\n", static_cast<unsigned long long>(held.fencing_token()));
    std::fflush(stdout);
    held.detach();
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  if (a.mode == "fenced") return run_fenced(a, options);
  if (a.mode == "elect") return run_elect(a, options);
  if (a.mode == "queue") {
    dlock::mutex lock{clients(a.locks), a.key, options};
    lock.lock();
    return 0;
  }
  if (a.mode != "counter") return 64;
  std::vector<std::thread> threads;
  for (int t = 0; t < a.threads; ++t) {
    threads.emplace_back([&, t] {
      try {
        count(a, options, t);
      } catch (const std::exception& e) {  // say what, rather than a bare abort
        std::fprintf(stderr, "lock_worker: %s\n", e.what());
        std::_Exit(70);
      }
    });
  }
  for (auto& t : threads) t.join();
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lock_worker: %s\n", e.what());
    return 70;
  }
}
