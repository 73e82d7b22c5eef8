// SPDX-License-Identifier: Apache-2.0
// counter_demo: several worker processes increment one counter in Redis with a plain GET then
// SET (a read-modify-write that is not atomic): first without a lock, then under a
// dlock::mutex. Prints both final counts. Takes the Redis URL from $DLOCK_REDIS, as
// unique_lock_basic does (run_with_redis starts a throwaway server), and uses nothing but
// dlock's installed API, so it builds against an installed dlock too (examples/CMakeLists.txt).
#include <dlock/dlock.hpp>

#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

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

// Starts `self --worker URL KEY locked|unlocked`; returns its pid.
pid_t spawn_worker(const std::string& self, const std::string& url, const std::string& key,
                   bool locked) {
  std::vector<std::string> args{self, "--worker", url, key, locked ? "locked" : "unlocked"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int err = posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ)) {
    throw std::runtime_error(std::string("cannot start a worker: ") + std::strerror(err));
  }
  return pid;
}

long long run_round(const std::string& self, const std::string& url, const std::string& key,
                    bool locked, double& seconds) {
  dlock::client redis{url};
  redis.exec({"DEL", key});  // a server of the user's may hold an earlier run's count
  auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> children;
  for (int w = 0; w < workers; ++w) children.push_back(spawn_worker(self, url, key, locked));
  bool failed = false;
  for (pid_t pid : children) {
    int status = 0;
    failed |= waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  if (failed) throw std::runtime_error("a worker failed");
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::stoll(redis.exec({"GET", key}).str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--worker") == 0) {
    return run_worker(argv[2], argv[3], std::strcmp(argv[4], "locked") == 0);
  }
  const char* env_url = std::getenv("DLOCK_REDIS");
  const std::string url = env_url ? env_url : "redis://127.0.0.1:6379";
  const std::string self = "/proc/self/exe";  // the workers are this program
  const long long expected = static_cast<long long>(workers) * threads_per_worker * increments;
  std::printf("dlock demo: %d processes x %d threads x %d increments of one Redis counter,\n"
              "each a plain GET then SET, on the redis-server at %s\n\n",
              workers, threads_per_worker, increments, url.c_str());

  double unlocked_s = 0, locked_s = 0;
  long long unlocked = run_round(self, url, "demo:unlocked", false, unlocked_s);
  std::printf("  without a lock: final count %lld of %lld -> %lld updates lost (%.2f s)\n",
              unlocked, expected, expected - unlocked, unlocked_s);
  long long locked = run_round(self, url, "demo:locked", true, locked_s);
  std::printf("  with dlock:     final count %lld of %lld -> %s (%.2f s, %.0f lock cycles/s)\n",
              locked, expected, locked == expected ? "exact" : "WRONG", locked_s,
              static_cast<double>(expected) / locked_s);
  return locked == expected ? 0 : 1;
}
