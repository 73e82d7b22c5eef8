// SPDX-License-Identifier: Apache-2.0
// dlock latch set|down|wait NAME: a count-down latch (dlock::latch) from the shell, for a batch
// fanned out to workers: the coordinator sets the count, each worker counts down once done, and
// whoever must wait for all of them waits for zero.
//   set NAME COUNT   creates the latch with COUNT: exit 0; 1 when it exists already (untouched)
//   down NAME [N]    subtracts N (default 1), prints what is left; exit 1 when there is no latch
//   wait NAME        until the count is zero (exit 0; Pub/Sub, not polling); -w DURATION gives
//                    up with 75 (or -E); exit 1 when the latch does not exist or vanishes
// --ttl: the latch disappears that long after its last change (default 1h), so an abandoned
// batch leaves nothing behind. One Redis node or one Redis Cluster. Errors of the nodes: 69.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <optional>

#include "cli.hpp"
#include "dlock/latch.hpp"

namespace dlock::cli {
namespace {

constexpr int exit_no_latch = 1;

struct latch_cli_options {
  std::string name;
  std::int64_t count = 0;
  std::int64_t by = 1;
  std::chrono::milliseconds ttl{std::chrono::hours(1)};
  std::optional<std::chrono::milliseconds> wait;
  int conflict_status = exit_conflict;
};

latch open_latch(const global_options& g, const latch_cli_options& o) {
  auto nodes = make_clients(g);
  if (nodes.size() != 1 || g.copies > 1) {
    throw usage_error("latch needs one Redis node or one Redis Cluster (no Redlock, no --copies)");
  }
  try {  // the latch checks its name and TTL
    return latch{nodes.front(), o.name, latch_options{.ttl = o.ttl}};
  } catch (const std::system_error& e) {
    throw usage_error(e.what());
  }
}

int no_latch(const std::string& name) {
  say("there is no latch '%s' (never set, or its TTL passed)", name.c_str());
  return exit_no_latch;
}

// The nodes' error, said once; not_found is the caller's to judge.
int failed(const char* what, const std::string& name, std::error_code ec) {
  if (ec == errc::wrong_type) {
    say("cannot %s the latch '%s': its key holds no latch count but a lock, a semaphore or "
        "other data (see `dlock status %s`); one name is one lock: use another name",
        what, name.c_str(), name.c_str());
    return exit_status_for(ec);
  }
  say("cannot %s the latch '%s': %s", what, name.c_str(), ec.message().c_str());
  return exit_status_for(ec);
}

}  // namespace

subcommand add_latch_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<latch_cli_options>();
  auto* app = parent.add_subcommand(
      "latch", "A count-down latch NAME: set its count, count it down, wait for zero");
  app->require_subcommand(1);
  app->fallthrough();  // --ttl after set/down/wait too
  duration_option(*app, "--ttl", o->ttl,
                  "The latch disappears this long after its last change (default 1h)");

  auto* set = app->add_subcommand("set", "Create the latch NAME with COUNT (exit 1: it exists)");
  set->add_option("NAME", o->name, "The latch's name (its Redis key)")->required();
  set->add_option("COUNT", o->count, "What it counts down from")
      ->required()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 53));

  auto* down = app->add_subcommand(
      "down", "Count the latch NAME down by N (default 1) and print what is left");
  down->add_option("NAME", o->name, "The latch's name (its Redis key)")->required();
  down->add_option("N", o->by, "How much to subtract")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 53));

  auto* wait = app->add_subcommand("wait", "Wait until the latch NAME is down to zero");
  wait->add_option("NAME", o->name, "The latch's name (its Redis key)")->required();
  duration_option(*wait, "-w,--wait", o->wait,
                  "Give up (exit 75) if it has not opened within this time (default: no limit)");
  wait->add_option("-E,--conflict-exit-code", o->conflict_status,
                   "Exit status when it did not open in time (default 75)")
      ->check(CLI::Range(0, 255));

  return {app, [&g, o, set, down]() -> int {
            auto gate = open_latch(g, *o);
            std::error_code ec;
            if (set->parsed()) {
              bool created = gate.try_set_count(o->count, ec);
              if (ec) return failed("set", o->name, ec);
              if (!created) say_verbose("the latch '%s' exists already", o->name.c_str());
              return created ? exit_ok : exit_no_latch;
            }
            if (down->parsed()) {
              auto left = gate.count_down(o->by, ec);
              if (ec == errc::not_found) return no_latch(o->name);
              if (ec) return failed("count down", o->name, ec);
              std::printf("%lld\n", static_cast<long long>(left));
              return exit_ok;
            }
            bool open = o->wait ? gate.wait_for(*o->wait, ec) : (gate.wait(ec), !ec);
            if (open) return exit_ok;
            if (ec == errc::timeout) return o->conflict_status;
            if (ec == errc::not_found) return no_latch(o->name);
            return failed("wait for", o->name, ec);
          }};
}

}  // namespace dlock::cli
