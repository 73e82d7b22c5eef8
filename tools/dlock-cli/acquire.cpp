// SPDX-License-Identifier: Apache-2.0
// dlock acquire KEY [--ttl D] [-w D | -n] [-E N]: take the lock and leave it held, printing
// "TOKEN FENCE" on one line for a script, which later runs `dlock extend KEY TOKEN` and
// `dlock release KEY TOKEN`. Nothing renews the lock: it expires after the TTL unless extended.
//   read -r token fence < <(dlock acquire deploy --ttl 5m) || exit
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "cli.hpp"
#include "dlock/mutex.hpp"
#include "duration.hpp"
#include "lock_view.hpp"
#include "lock_wait.hpp"

namespace dlock::cli {
namespace {

using std::chrono::milliseconds;
using namespace std::chrono_literals;

struct acquire_options : wait_flags {
  std::string key;
  milliseconds ttl{30'000};
};

int acquire_command(const global_options& g, const acquire_options& o) {
  check_ttl(o.ttl);
  auto nodes = make_clients(g);
  mutex lock{nodes, o.key, {.ttl = o.ttl, .retry_delay = 50ms, .copies = g.copies}};
  wait_options w = wait_options_for(o, g, nodes.size(), o.key);
  w.describe_holder = [&] { return lock_holder_status(nodes, o.key, g.copies); };
  lock_calls calls;
  calls.try_once = [&](std::error_code& ec, node_results* votes) {
    return lock.try_acquire(votes, ec);
  };
  calls.wait_until = [&](std::chrono::steady_clock::time_point deadline, std::error_code& ec,
                         node_results* votes, const wait_control& control) {
    return lock.acquire_until(deadline, control, votes, ec);
  };
  auto result = wait_for_lock(calls, w);
  if (result.outcome == wait_outcome::conflict) {
    say_verbose("%s", result.message.c_str());
    return o.conflict_status;
  }
  if (result.outcome != wait_outcome::acquired) {
    say("%s", result.message.c_str());
    return exit_status_for(result.ec, o.conflict_status);
  }
  lease held = std::move(result.held);
  // The holder is the script that called us (our parent), not this short-lived process.
  publish_holder(nodes, o.key,
                 make_holder_info(held.value(), static_cast<long>(::getppid()), "dlock acquire"),
                 o.ttl);
  std::printf("%s %llu\n", held.value().c_str(),
              static_cast<unsigned long long>(held.fencing_token()));
  std::fflush(stdout);
  say_verbose("acquired '%s' (fence %llu) for %s; release with: dlock release %s %s",
              o.key.c_str(), static_cast<unsigned long long>(held.fencing_token()),
              format_duration(o.ttl).c_str(), o.key.c_str(), held.value().c_str());
  held.detach();  // stays held until released, or until the TTL runs out
  return exit_ok;
}

}  // namespace

subcommand add_acquire_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<acquire_options>();
  auto* app = parent.add_subcommand(
      "acquire", "Take the lock KEY and keep it after exiting; prints \"TOKEN FENCE\"");
  app->fallthrough();
  duration_option(*app, "--ttl", o->ttl, "Lock TTL: it expires after this unless extended (default 30s)");
  add_wait_flags(*app, *o);
  app->add_option("KEY", o->key, "The lock's name (its Redis key)")->required();
  return {app, [&g, o] { return acquire_command(g, *o); }};
}

}  // namespace dlock::cli
