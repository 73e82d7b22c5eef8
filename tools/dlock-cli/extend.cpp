// SPDX-License-Identifier: Apache-2.0
// dlock extend KEY TOKEN [--ttl D]: reset the expiry of a lock taken by `dlock acquire` to D
// from now, on a quorum of nodes, if TOKEN still holds it (compare-and-pexpire). Exit 0 when
// extended, 71 when the token no longer holds it, 69 when too few nodes answered.
#include <CLI/CLI.hpp>

#include <memory>

#include "cli.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/mutex.hpp"
#include "duration.hpp"
#include "lock_view.hpp"

namespace dlock::cli {
namespace {

struct extend_options {
  std::string key, token;
  std::chrono::milliseconds ttl{30'000};
};

int extend_command(const global_options& g, const extend_options& o) {
  check_ttl(o.ttl);
  auto nodes = make_clients(g);
  mutex lock{nodes, o.key, {.ttl = o.ttl, .copies = g.copies}};
  lease held = lock.adopt(acquired_token(o.token));
  std::error_code ec = held.extend(o.ttl);
  held.detach();  // an adopted lease would otherwise release the lock when it goes
  if (ec == errc::lease_lost || ec == errc::not_held) {
    say("'%s' is not held with this token any more (expired, released, or taken by another)",
        o.key.c_str());
    return exit_lease_lost;
  }
  if (ec) {
    say("extending '%s' failed: %s", o.key.c_str(), ec.message().c_str());
    return exit_status_for(ec);
  }
  // Keep the holder annotation as long as the lock (advisory; a stale one is never shown).
  (void)exec_all(nodes, command{"PEXPIRE", holder_key(o.key), std::to_string(o.ttl.count())});
  say_verbose("extended '%s' to at least %s from now", o.key.c_str(), format_duration(o.ttl).c_str());
  return exit_ok;
}

}  // namespace

subcommand add_extend_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<extend_options>();
  auto* app = parent.add_subcommand("extend", "Extend the lock KEY held with TOKEN to at least --ttl from now");
  app->fallthrough();
  duration_option(*app, "--ttl", o->ttl, "The new TTL, from now; a longer one left is kept (default 30s)");
  app->add_option("KEY", o->key, "The lock's name")->required();
  app->add_option("TOKEN", o->token,
                  "The token `dlock acquire` printed (its whole line \"TOKEN FENCE\" will do)")
      ->required();
  return {app, [&g, o] { return extend_command(g, *o); }};
}

}  // namespace dlock::cli
