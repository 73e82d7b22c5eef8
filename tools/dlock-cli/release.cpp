// dlock release KEY TOKEN: give back a lock taken by `dlock acquire` (compare-and-delete: a
// wrong or stale token never deletes another holder's key). Exit 0 when released, 71 when the
// token no longer held it (expired, released, or taken over), 69 when the nodes did not answer.
#include <CLI/CLI.hpp>

#include <memory>

#include "cli.hpp"
#include "dlock/mutex.hpp"
#include "lock_view.hpp"

namespace dlock::cli {
namespace {

struct release_options {
  std::string key, token;
};

int release_command(const global_options& g, const release_options& o) {
  auto nodes = make_clients(g);
  mutex lock{nodes, o.key, {.copies = g.copies}};
  const std::string token = acquired_token(o.token);
  lease held = lock.adopt(token);
  clear_holder(nodes, o.key, token);
  std::error_code ec = held.release();
  if (ec == errc::not_held) {
    say("'%s' was not held with this token (expired, released, or taken by another)",
        o.key.c_str());
    return exit_lease_lost;
  }
  if (ec) {
    say("releasing '%s' failed: %s", o.key.c_str(), ec.message().c_str());
    return exit_status_for(ec);
  }
  say_verbose("released '%s'", o.key.c_str());
  return exit_ok;
}

}  // namespace

subcommand add_release_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<release_options>();
  auto* app = parent.add_subcommand("release", "Release the lock KEY held with TOKEN");
  app->fallthrough();
  app->add_option("KEY", o->key, "The lock's name")->required();
  app->add_option("TOKEN", o->token,
                  "The token `dlock acquire` printed (its whole line \"TOKEN FENCE\" will do)")
      ->required();
  return {app, [&g, o] { return release_command(g, *o); }};
}

}  // namespace dlock::cli
