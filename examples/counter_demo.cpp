// SPDX-License-Identifier: Apache-2.0
// counter_demo: what `make demo` runs. Starts a throwaway redis-server, then has several worker
// processes increment one counter in Redis with a plain GET then SET (a read-modify-write that
// is not atomic): first without a lock, then under a dlock::mutex. Prints both final counts.
#include <dlock/dlock.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "local_redis/local_redis.hpp"

namespace {

using namespace std::chrono_literals;
constexpr int workers = 4, threads_per_worker = 2, increments = 250;

// One worker process: `counter_demo --worker URL KEY locked|unlocked`.
int run_worker(const std::string& url, const std::string& key, bool locked) {
  dlock::client redis{url};
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_per_worker; ++t) {
    threads.emplace_back([&] {
      dlock::mutex lock{redis, key + ":lock", {.ttl = 5s, .retry_delay = 2ms}};
      for (int i = 0; i < increments; ++i) {
        std::unique_lock guard{lock, std::defer_lock};
        if (locked) guard.lock();
        auto value = redis.exec({"GET", key});
        long long n = value.is_nil() ? 0 : std::stoll(value.str());
        std::this_thread::yield();
        redis.exec({"SET", key, std::to_string(n + 1)});
      }
    });
  }
  for (auto& t : threads) t.join();
  return 0;
}

long long run_round(const std::string& self, dlock::local::redis_server& server,
                    const std::string& key, bool locked, double& seconds) {
  auto start = std::chrono::steady_clock::now();
  std::vector<dlock::local::child_process> children;
  for (int w = 0; w < workers; ++w) {
    children.emplace_back(std::vector<std::string>{self, "--worker", server.url(), key,
                                                   locked ? "locked" : "unlocked"});
  }
  for (auto& c : children) {
    if (c.wait(std::chrono::minutes(2)) != 0) throw std::runtime_error("a worker failed");
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  dlock::client redis{server.url()};
  return std::stoll(redis.exec({"GET", key}).str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--worker") == 0) {
    return run_worker(argv[2], argv[3], std::strcmp(argv[4], "locked") == 0);
  }
  std::string self = dlock::local::self_dir() + "/counter_demo";
  dlock::local::redis_server server;
  const long long expected = static_cast<long long>(workers) * threads_per_worker * increments;
  std::printf("dlock demo: %d processes x %d threads x %d increments of one Redis counter,\n"
              "each a plain GET then SET, on a throwaway redis-server at %s (pid %d)\n\n",
              workers, threads_per_worker, increments, server.url().c_str(),
              static_cast<int>(server.pid()));

  double unlocked_s = 0, locked_s = 0;
  long long unlocked = run_round(self, server, "demo:unlocked", false, unlocked_s);
  std::printf("  without a lock: final count %lld of %lld -> %lld updates lost (%.2f s)\n",
              unlocked, expected, expected - unlocked, unlocked_s);
  long long locked = run_round(self, server, "demo:locked", true, locked_s);
  std::printf("  with dlock:     final count %lld of %lld -> %s (%.2f s, %.0f lock cycles/s)\n",
              locked, expected, locked == expected ? "exact" : "WRONG", locked_s,
              static_cast<double>(expected) / locked_s);
  std::printf("\nThe redis-server is stopped and its temp dir removed on exit.\n");
  return locked == expected ? 0 : 1;
}
