// SPDX-License-Identifier: Apache-2.0
// semaphore_worker: a separate process that contends for a semaphore, for the multi-process tests.
//   semaphore_worker hammer --url URL --name N --limit L [--threads T] [--iterations I]
//                           [--hold-us U] [--fair]
//       T threads each take a permit I times (waiting up to 20 s each, times the build's
//       slowdown: tests/support/checks.hpp), and while holding it bump an occupancy counter
//       N:occupancy (INCR on entry, DECR on exit) whose highest value is kept in
//       N:max-occupancy by a script, independently of the semaphore's own keys.
//       Exits 0 when done, 2 when a permit could not be had in time.
//   semaphore_worker hold --url URL --name N --limit L [--ttl MS] [--fair]
//       takes a permit, prints "held <token>" and sleeps until killed.
//   semaphore_worker try --url URL --name N --limit L [--ttl MS] [--fair]
//                        [--detach | --refresh-after MS]
//       one try_acquire(): exits 1 when refused. Else exits 0 after releasing the permit, or
//       after leaving it held (--detach), or after sleeping MS and refreshing it: 0 when the
//       refresh reported lease_lost, 4 when it succeeded (--refresh-after).
//   semaphore_worker seed-try --url URL --name N --limit L [--ttl MS]
//       seed 001's unfair semaphore, which scores holders by the CLIENT's clock (the design
//       dlock rejects), in the sorted set N:seed: exits 0 when it got a slot (kept), 1 if not.
// Under tests/support/clock_shim (LD_PRELOAD, DLOCK_CLOCK_OFFSET_MS) its wall clock is skewed.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "checks.hpp"
#include "dlock/client.hpp"
#include "dlock/semaphore.hpp"

namespace {

struct args {
  std::string mode, url, name = "worker";
  long limit = 1, ttl_ms = 10'000, hold_us = 200;
  long refresh_after_ms = -1;
  int threads = 1, iterations = 20;
  bool fair = false, detach = false;
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
    if (flag == "--url") a.url = value();
    else if (flag == "--name") a.name = value();
    else if (flag == "--limit") a.limit = std::stol(value());
    else if (flag == "--ttl") a.ttl_ms = std::stol(value());
    else if (flag == "--hold-us") a.hold_us = std::stol(value());
    else if (flag == "--threads") a.threads = std::stoi(value());
    else if (flag == "--iterations") a.iterations = std::stoi(value());
    else if (flag == "--fair") a.fair = true;
    else if (flag == "--detach") a.detach = true;
    else if (flag == "--refresh-after") a.refresh_after_ms = std::stol(value());
    else std::exit(64);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  args a = parse(argc, argv);
  dlock::client node{a.url};
  dlock::semaphore_options options{.ttl = std::chrono::milliseconds(a.ttl_ms),
                                   .fair = a.fair,
                                   .retry_delay = std::chrono::milliseconds(5),
                                   .node_timeout = std::chrono::milliseconds(2000)};
  if (a.mode == "hold") {
    dlock::semaphore sem{node, a.name, a.limit, options};
    auto permit = sem.acquire();
    std::printf("held %s\n", permit.value().c_str());
    std::fflush(stdout);
    permit.detach();
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  if (a.mode == "try") {
    dlock::semaphore sem{node, a.name, a.limit, options};
    std::error_code ec;
    auto permit = sem.try_acquire(ec);
    int status = 1;
    if (permit && a.refresh_after_ms >= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(a.refresh_after_ms));
      status = permit.extend() == dlock::errc::lease_lost ? 0 : 4;
    } else if (permit) {
      if (a.detach) permit.detach();
      status = 0;
    } else if (ec != dlock::errc::not_acquired) {
      std::fprintf(stderr, "try_acquire: %s\n", ec.message().c_str());
      status = 3;
    }
    permit = {};
    std::fflush(nullptr);
    std::_Exit(status);
  }
  if (a.mode == "seed-try") {
    // Seed 001, verbatim but for MULTI being a pipeline here: the score is this host's time.
    auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch()).count();
    std::string key = a.name + ":seed", token = std::to_string(::getpid());
    dlock::command cmd{"ZREMRANGEBYSCORE", key, "-inf", std::to_string(now - a.ttl_ms)};
    cmd.then({"ZADD", key, std::to_string(now), token}).then({"ZRANK", key, token});
    auto r = node.exec(std::move(cmd));
    if (r.elements().at(2).integer() < a.limit) {
      std::fflush(nullptr);
      std::_Exit(0);
    }
    node.exec({"ZREM", key, token});
    std::fflush(nullptr);
    std::_Exit(1);
  }
  if (a.mode != "hammer") return 64;
  static constexpr std::string_view enter =
      "local v = redis.call('INCR', KEYS[1]) "
      "if v > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], v) end "
      "return v";
  std::string occupancy = a.name + ":occupancy", highest = a.name + ":max-occupancy";
  std::vector<std::thread> threads;
  std::vector<int> failed(static_cast<std::size_t>(a.threads), 0);
  for (int t = 0; t < a.threads; ++t) {
    threads.emplace_back([&, t] {
      dlock::semaphore sem{node, a.name, a.limit, options};
      for (int i = 0; i < a.iterations; ++i) {
        auto permit = sem.try_acquire_for(dlock::test::scaled(std::chrono::seconds(20)));
        if (!permit) {
          failed[static_cast<std::size_t>(t)] = 1;
          return;
        }
        node.exec({"EVAL", enter, "2", occupancy, highest});
        std::this_thread::sleep_for(std::chrono::microseconds(a.hold_us));
        node.exec({"DECR", occupancy});
        permit.release();
      }
    });
  }
  for (auto& th : threads) th.join();
  int status = 0;
  for (int f : failed) {
    if (f) status = 2;
  }
  // Leave without static destructors: dlock's I/O thread outlives main() by design, and a
  // handler still running there must not meet Asio's error categories already destroyed (a
  // shutdown race of the runtime, not of the semaphore; UBSan reports it as an invalid vptr).
  std::fflush(nullptr);
  std::_Exit(status);
}
