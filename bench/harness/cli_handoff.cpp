// SPDX-License-Identifier: Apache-2.0
#include "harness/cli_handoff.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>
#include <vector>

#include "dlock/key_layout.hpp"

extern char** environ;

namespace dlock::bench {
namespace {

using namespace std::chrono_literals;

// How long the holder's CMD runs: time enough for the waiter to start and queue.
constexpr int hold_ms = 300;

pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int err = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(err));
  return pid;
}

// A started process, ended by its owner: reaped, and killed first when it outlived
// `deadline`, or when the harness unwinds (an exception) before reaping it.
class child {
 public:
  explicit child(pid_t pid) : pid_(pid) {}
  ~child() {
    if (pid_ > 0) reap(bench_clock::now());
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  // Its exit status, or -1 when it had to be killed.
  int reap(bench_clock::time_point deadline) {
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (bench_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(1ms);
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_;
};

// Polls `ask` every millisecond until it is true or 5 s passed.
template <class Ask>
bool within_5s(Ask ask) {
  auto until = bench_clock::now() + 5s;
  while (bench_clock::now() < until) {
    if (ask()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// The stamps "LABEL ns" of one file, by label.
std::map<std::string, long long> stamps(const std::filesystem::path& file) {
  std::map<std::string, long long> out;
  std::ifstream in(file);
  std::string label;
  long long ns = 0;
  while (in >> label >> ns) out[label] = ns;
  return out;
}

double ms_between(long long later, long long earlier) {
  return static_cast<double>(later - earlier) / 1e6;
}

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             bench_clock::now().time_since_epoch())
      .count();
}

}  // namespace

row run_cli_handoff(client node, const cli_handoff_setup& s) {
  row r{"cli_handoff", "dlock (command)",
        s.busy_threads ? std::to_string(s.busy_threads) + " busy threads beside it" : "quiet",
        1, 2, {}, {}};
  std::vector<std::jthread> busy;  // stopped and joined however this returns
  for (int i = 0; i < s.busy_threads; ++i) {
    busy.emplace_back([](std::stop_token stop) {
      while (!stop.stop_requested()) {
      }
    });
  }
  auto dir = std::filesystem::temp_directory_path() /
             ("dlock-bench-handoff-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string key = "bench:cli-handoff";
  const auto queue = lock_keys_for(key).waiters;
  std::vector<double> handoffs, floors;
  int unqueued = 0, overlaps = 0;
  for (int i = 0; i < s.samples; ++i) {
    auto file = dir / ("stamps-" + std::to_string(i));
    std::filesystem::remove(file);
    // The floor: what starting the stamp program costs by itself.
    long long spawned = now_ns();
    child alone{spawn({s.stamp, "start", file.string()})};
    alone.reap(bench_clock::now() + 10s);
    if (auto st = stamps(file); st.count("start")) {
      floors.push_back(ms_between(st["start"], spawned));
    }
    std::filesystem::remove(file);

    child holder{spawn({s.dlock, "-r", s.url, "run", "-q", "--ttl", "5s", key, "--", s.stamp,
                        "end", file.string(), std::to_string(hold_ms)})};
    std::error_code ec;
    within_5s([&] { return node.exec({"EXISTS", key}, ec).integer() == 1; });
    child waiter{spawn({s.dlock, "-r", s.url, "run", "-q", "--ttl", "5s", "-w", "10", key, "--",
                        s.stamp, "start", file.string()})};
    bool queued = within_5s([&] { return node.exec({"ZCARD", queue}, ec).integer() >= 1; });
    long long queued_at = now_ns();  // seen in the queue by then
    auto deadline = bench_clock::now() + 20s;
    int held = holder.reap(deadline), next = waiter.reap(deadline);
    auto st = stamps(file);
    if (held != 0 || next != 0 || !st.count("end") || !st.count("start")) {
      ++unqueued;
      continue;
    }
    if (st["start"] < st["end"]) {  // the next CMD began before this one ended: never expected
      ++overlaps;
      continue;
    }
    // Seen in the queue before the holder's CMD ended: the waiter waited for this release.
    if (!queued || queued_at >= st["end"]) {
      ++unqueued;
      continue;
    }
    handoffs.push_back(ms_between(st["start"], st["end"]));
  }
  std::filesystem::remove_all(dir);
  busy.clear();
  auto h = summarize(handoffs);
  auto f = summarize(floors);
  double max = handoffs.empty() ? std::nan("") : *std::max_element(handoffs.begin(), handoffs.end());
  r.figures = {{"samples", static_cast<double>(h.samples)},
               {"unqueued", static_cast<double>(unqueued)},
               {"overlaps", static_cast<double>(overlaps)},
               {"handoff_p50_ms", h.p50_ms},
               {"handoff_p99_ms", h.p99_ms},
               {"handoff_max_ms", max},
               {"floor_p50_ms", f.p50_ms},
               {"handoff_p50_floors", h.p50_ms / f.p50_ms}};
  return r;
}

}  // namespace dlock::bench
