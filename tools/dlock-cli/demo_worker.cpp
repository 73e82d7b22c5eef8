// SPDX-License-Identifier: Apache-2.0
// dlock demo-worker (hidden): one worker process of `dlock demo`.
//
// It makes `--increments` read-modify-write increments of a counter kept on the resource
// server, each under the Redlock over the `--lock` nodes, and leaves the evidence on the
// resource for the report: every acquisition's fencing token in acquisition order
// (NAME:fences), every handoff latency (NAME:handoff), every refused stale write (NAME:stale).
//
// The counter is a fenced record: its reads and writes both carry the holder's token. A read
// raises the record's fence to the reader's token (so a holder that has read can no longer be
// overtaken by an older one), and the write is dlock::fenced_set. Fencing only the write would
// not do for a read-modify-write: an expired holder's late write could land between the next
// holder's read and write, and both writes would pass.
//
// With `--pause-at I`, the worker stops for TTL + 300 ms after reading, on its I-th increment,
// like a process in a long GC pause: its lease expires, another worker takes the lock, and
// the late write must be refused. The worker then retries that increment.
#include <CLI/CLI.hpp>

#include <memory>
#include <thread>

#include "cli.hpp"
#include "demo_keys.hpp"
#include "dlock/fencing.hpp"
#include "dlock/mutex.hpp"

namespace dlock::cli {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

struct worker_options {
  std::vector<std::string> locks;
  std::string resource;
  std::string name = "demo";
  int increments = 100;
  int pause_at = -1;
  long long ttl_ms = 500;
};

// Raises the record's high fence to ARGV[1] (the same key fenced_set checks) and reads the
// record; -1 when a newer holder has already read or written it.
constexpr const char* fenced_read_script = R"lua(
local high = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < high then return -1 end
redis.call('SET', KEYS[2], ARGV[1])
return tonumber(redis.call('GET', KEYS[1]) or '0')
)lua";

// Microseconds of CLOCK_MONOTONIC: one clock for all processes of this host.
long long now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(steady::now().time_since_epoch())
      .count();
}

int worker(const worker_options& o) {
  client_options fast{.connect_timeout = 200ms, .request_timeout = 500ms,
                      .reconnect_backoff_max = 200ms};
  std::vector<client> nodes;
  for (const auto& url : o.locks) nodes.emplace_back(url, fast);
  client resource{o.resource};
  const milliseconds ttl{o.ttl_ms};
  mutex lock{nodes, o.name + ":lock", {.ttl = ttl, .retry_delay = 5ms}};
  demo_keys k{o.name};

  int done = 0;
  bool paused = false;
  while (done < o.increments) {
    std::error_code ec;
    lease held = lock.acquire_until(steady::now() + 20s, ec);
    if (!held) {
      say("demo worker: no lock within 20 s: %s", ec.message().c_str());
      return 1;
    }
    long long acquired_at = now_us();
    std::string fence = std::to_string(held.fencing_token());
    command read{"EVAL", fenced_read_script, "2", k.count, k.high_fence, fence};
    read.then({"RPUSH", k.fences, fence}).then({"GETDEL", k.released_at});
    reply r = resource.exec(read, ec);
    if (ec || !r.is_array() || r.elements().size() != 3) {
      say("demo worker: resource read failed: %s", ec ? ec.message().c_str() : r.to_string().c_str());
      return 1;
    }
    long long value = r.elements()[0].integer();
    command after{"PING"};
    if (r.elements()[2].is_string()) {
      long long latency = acquired_at - std::stoll(r.elements()[2].str());
      after.then({"RPUSH", k.handoff, std::to_string(latency)});
    }
    bool written = false;
    if (value >= 0) {
      if (!paused && done == o.pause_at) {
        paused = true;
        std::this_thread::sleep_for(ttl + 300ms);  // the "GC pause": the lease runs out
      }
      written = fenced_set(resource, k.count, std::to_string(value + 1), held.fencing_token(), ec);
      if (ec) {
        say("demo worker: fenced write failed: %s", ec.message().c_str());
        return 1;
      }
    }
    // Only a holder whose write went through still holds the lock and may time the handoff.
    if (written) {
      after.then({"SET", k.released_at, std::to_string(now_us())});
    } else {
      after.then({"INCR", k.stale});
    }
    (void)resource.exec(after, ec);
    (void)held.release();
    if (written) ++done;
  }
  return 0;
}

}  // namespace

subcommand add_demo_worker_command(CLI::App& parent, const global_options&) {
  auto o = std::make_shared<worker_options>();
  auto* app = parent.add_subcommand("demo-worker", "");
  app->group("");  // hidden: `dlock demo` starts it
  app->add_option("--lock", o->locks)->required();
  app->add_option("--resource", o->resource)->required();
  app->add_option("--name", o->name);
  app->add_option("--increments", o->increments);
  app->add_option("--pause-at", o->pause_at);
  app->add_option("--ttl-ms", o->ttl_ms);
  return {app, [o] { return worker(*o); }};
}

}  // namespace dlock::cli
