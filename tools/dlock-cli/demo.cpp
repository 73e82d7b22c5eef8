// SPDX-License-Identifier: Apache-2.0
// dlock demo: what `make demo` runs, on throwaway servers only.
//
// Three redis-server processes carry one Redlock, a fourth holds a fenced record (a counter).
// Several worker processes (this binary again, `dlock demo-worker`) increment the record with
// a read-modify-write under the lock. Mid-run one lock node is killed (kill -9) and brought
// back empty after more than a TTL (Redlock's delayed restart); the lock carries on with 2 of
// 3. Each worker once pauses while holding the lock, past its lease, like a long GC pause, and
// its late write must be refused by the record. The report checks the count is exact and the
// fencing tokens strictly increase, and gives the handoff latency from one worker's release
// to the next one's acquisition.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli.hpp"
#include "demo_keys.hpp"
#include "dlock/client.hpp"
#include "local_redis/local_redis.hpp"

namespace dlock::cli {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

struct demo_options {
  int workers = 4;
  int increments = 200;
};

volatile sig_atomic_t stop_signal = 0;
extern "C" void on_stop_signal(int sig) { stop_signal = sig; }

constexpr milliseconds ttl{500};

struct progress {
  long long count = 0, acquisitions = 0, stale = 0;
};

progress read_progress(client& resource, const demo_keys& k) {
  progress p;
  std::error_code ec;
  command cmd{"GET", k.count};
  cmd.then({"LLEN", k.fences}).then({"GET", k.stale});
  reply r = resource.exec(cmd, ec);
  if (ec || r.elements().size() != 3) return p;
  const auto& e = r.elements();
  if (e[0].is_string()) p.count = std::stoll(e[0].str());
  p.acquisitions = e[1].integer();
  if (e[2].is_string()) p.stale = std::stoll(e[2].str());
  return p;
}

std::vector<long long> read_list(client& resource, const std::string& key) {
  std::vector<long long> out;
  reply list = resource.exec({"LRANGE", key, "0", "-1"});
  for (const auto& e : list.elements()) {
    out.push_back(std::stoll(e.str()));
  }
  return out;
}

double percentile_ms(std::vector<long long> us, double q) {
  if (us.empty()) return 0;
  std::sort(us.begin(), us.end());
  auto idx = static_cast<std::size_t>(q * static_cast<double>(us.size() - 1) + 0.5);
  return static_cast<double>(us[std::min(idx, us.size() - 1)]) / 1000.0;
}

class console {
 public:
  console() : tty_(::isatty(STDOUT_FILENO) == 1) {}
  // A progress line: redrawn in place on a terminal, once a second otherwise.
  void status(const std::string& line) {
    auto now = steady::now();
    if (tty_) {
      std::printf("\r\x1b[K%s", line.c_str());
    } else if (now >= next_plain_) {
      std::printf("%s\n", line.c_str());
      next_plain_ = now + 1s;
    } else {
      return;
    }
    std::fflush(stdout);
  }
  void event(const std::string& line) {
    std::printf(tty_ ? "\r\x1b[K%s\n" : "%s\n", line.c_str());
    std::fflush(stdout);
  }
  void done() {
    if (tty_) std::printf("\r\x1b[K");
    std::fflush(stdout);
  }

 private:
  bool tty_;
  steady::time_point next_plain_{};
};

int run_demo(const demo_options& o) {
  if (o.workers < 2 || o.workers > 32) throw usage_error("--workers must be 2 to 32");
  if (o.increments < 10 || o.increments > 100000) throw usage_error("--increments must be 10 to 100000");
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;  // no SA_RESTART: sleeps end early
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);

  const long long expected = static_cast<long long>(o.workers) * o.increments;
  std::printf("dlock demo: %d worker processes, one Redlock over 3 redis-servers, %d increments\n"
              "each of a fenced record (a read-modify-write) on a 4th server. Lock TTL %lld ms.\n",
              o.workers, o.increments, static_cast<long long>(ttl.count()));
  std::vector<std::unique_ptr<local::redis_server>> nodes;
  std::unique_ptr<local::redis_server> resource_server;
  try {
    for (int i = 0; i < 3; ++i) nodes.push_back(std::make_unique<local::redis_server>());
    resource_server = std::make_unique<local::redis_server>();
  } catch (const std::exception& e) {
    say("cannot start redis-server: %s", e.what());
    return exit_unavailable;
  }
  for (int i = 0; i < 3; ++i) {
    std::printf("  lock node %d   %s (pid %d)\n", i + 1, nodes[i]->url().c_str(),
                static_cast<int>(nodes[i]->pid()));
  }
  std::printf("  resource      %s (pid %d)\n\n", resource_server->url().c_str(),
              static_cast<int>(resource_server->pid()));
  std::fflush(stdout);

  demo_keys k{"demo"};
  client resource{resource_server->url()};
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<local::child_process> workers;
  for (int w = 0; w < o.workers; ++w) {
    std::vector<std::string> argv{self, "demo-worker", "--resource", resource_server->url(),
                                  "--name", "demo", "--increments", std::to_string(o.increments),
                                  "--ttl-ms", std::to_string(ttl.count()),
                                  // spread the pauses over the run: at 1/5, 2/5 ... of the work
                                  "--pause-at", std::to_string(o.increments * (w + 1) / (o.workers + 1))};
    for (const auto& n : nodes) argv.insert(argv.end(), {"--lock", n->url()});
    workers.emplace_back(argv);
  }

  console out;
  const auto start = steady::now();
  auto since_start = [&] { return std::chrono::duration<double>(steady::now() - start).count(); };
  std::vector<int> status(workers.size(), -2);
  std::optional<steady::time_point> killed_at;
  double killed_s = 0, restarted_s = 0;
  bool restarted = false;
  progress p;
  char line[256];
  for (;;) {
    if (stop_signal) {
      out.done();
      say("interrupted; stopping the workers and servers");
      return 128 + stop_signal;
    }
    p = read_progress(resource, k);
    // Kill node 2 a third of the way in; bring it back, empty, more than a TTL later.
    if (!killed_at && p.count >= expected / 3) {
      nodes[1]->kill();
      killed_at = steady::now();
      killed_s = since_start();
      std::snprintf(line, sizeof line, "  %5.1f s  lock node 2 killed (kill -9); the lock goes on with 2 of 3",
                    killed_s);
      out.event(line);
    }
    if (killed_at && !restarted && steady::now() - *killed_at >= 3 * ttl) {
      nodes[1]->restart();
      restarted = true;
      restarted_s = since_start();
      std::snprintf(line, sizeof line,
                    "  %5.1f s  lock node 2 restarted, empty, after %.1f s (> TTL: delayed restart)",
                    restarted_s, restarted_s - killed_s);
      out.event(line);
    }
    std::size_t running = 0;
    for (std::size_t i = 0; i < workers.size(); ++i) {
      if (status[i] == -2) {
        int s = workers[i].wait(0ms);
        if (s == -1) {
          ++running;
        } else {
          status[i] = s;
        }
      }
    }
    std::snprintf(line, sizeof line,
                  "  %5.1f s  count %lld/%lld  acquisitions %lld  stale writes refused %lld  "
                  "nodes up %d/3  workers running %zu",
                  since_start(), p.count, expected, p.acquisitions, p.stale,
                  killed_at && !restarted ? 2 : 3, running);
    out.status(line);
    if (running == 0) break;
    if (since_start() > 90) {
      out.done();
      say("the demo did not finish within 90 s");
      return 1;
    }
    std::this_thread::sleep_for(100ms);
  }
  out.done();
  if (!restarted) nodes[1]->restart();
  std::printf("  %5.1f s  all workers done\n\n", since_start());

  p = read_progress(resource, k);
  auto fences = read_list(resource, k.fences);
  auto handoff = read_list(resource, k.handoff);
  bool increasing = std::adjacent_find(fences.begin(), fences.end(),
                                       [](long long a, long long b) { return b <= a; }) == fences.end();
  bool workers_ok = std::all_of(status.begin(), status.end(), [](int s) { return s == 0; });
  bool exact = p.count == expected;

  std::printf("Report\n");
  std::printf("  acquisitions           %lld by %d processes (%lld increments + %lld refused late writes)\n",
              p.acquisitions, o.workers, p.count, p.stale);
  std::printf("  final count            %lld of %lld: %s\n", p.count, expected,
              exact ? "exact, no update lost" : "WRONG");
  std::printf("  fencing tokens         %zu, strictly increasing: %s (%lld .. %lld)\n", fences.size(),
              increasing ? "yes" : "NO", fences.empty() ? 0 : fences.front(),
              fences.empty() ? 0 : fences.back());
  std::printf("  stale writes refused   %lld of %d paused holders (a pause is harmless when no one\n"
              "                         took over meanwhile)\n",
              p.stale, o.workers);
  std::printf("  handoff latency        p50 %.2f ms, p99 %.2f ms (release -> next acquire, %zu handoffs)\n",
              percentile_ms(handoff, 0.50), percentile_ms(handoff, 0.99), handoff.size());
  std::printf("  node failure           node 2 down from %.1f s to %.1f s; the lock went on with 2 of 3\n",
              killed_s, restarted_s);
  std::printf("  elapsed                %.1f s\n", since_start());
  if (!workers_ok) std::printf("  a worker FAILED (exit statuses:%s)\n", [&] {
    std::string s;
    for (int x : status) s += " " + std::to_string(x);
    return s;
  }().c_str());
  std::printf("\nThe servers are stopped and their temp dirs removed now.\n");
  std::fflush(stdout);
  return exact && increasing && workers_ok ? exit_ok : 1;
}

}  // namespace

subcommand add_demo_command(CLI::App& parent, const global_options&) {
  auto o = std::make_shared<demo_options>();
  auto* app = parent.add_subcommand(
      "demo", "Show the lock at work on throwaway local redis-servers (what `make demo` runs)");
  app->add_option("--workers", o->workers, "Worker processes (default 4)");
  app->add_option("--increments", o->increments, "Increments per worker (default 200)");
  return {app, [o] { return run_demo(*o); }};
}

}  // namespace dlock::cli
