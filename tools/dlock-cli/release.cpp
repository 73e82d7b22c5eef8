// SPDX-License-Identifier: Apache-2.0
// dlock release KEY TOKEN: give back a lock taken by `dlock acquire` (compare-and-delete: a
// wrong or stale token never deletes another holder's key). Exit 0 when released, 71 when the
// token no longer held it (expired, released, or taken over), 69 when the nodes did not answer.
// dlock release --force KEY: evict whoever holds KEY now (a stuck job, a crashed host whose
// lock has a long TTL): says who held it, then releases with that holder's token, so the next
// waiter is handed the lock at once and gets a higher fencing token, above which fenced
// writes (dlock::fenced_set) refuse the evicted holder's late ones. The evicted `dlock run`
// learns it from its key watch (at its next renewal on a cluster) and ends its CMD: SIGTERM,
// SIGKILL after --lost-grace; until then the two overlap, which is what forcing means. Exit
// 0 when evicted or free already, 69 when the nodes cannot tell who holds it, 64 for a name
// held as a read-write lock or semaphore, or a key without a TTL (not a lock).
#include <CLI/CLI.hpp>

#include <memory>

#include "cli.hpp"
#include "dlock/mutex.hpp"
#include "lock_view.hpp"

namespace dlock::cli {
namespace {

struct release_options {
  std::string key, token;
  bool force = false;
};

// Releases with `token`: its own (release) or the holder's found by --force.
std::error_code release_with(std::vector<client>& nodes, const std::string& key,
                             const std::string& token, int copies) {
  mutex lock{nodes, key, {.copies = copies}};
  lease held = lock.adopt(token);
  clear_holder(nodes, key, token);
  return held.release();
}

int force_release(const global_options& g, const release_options& o) {
  auto nodes = make_clients(g);
  auto view = inspect_lock(nodes, o.key, read_queue::no, g.copies);
  if (!view.known()) {
    say("cannot tell who holds '%s': %s", o.key.c_str(), view.failures().c_str());
    return exit_unavailable;
  }
  if (!view.held()) {
    // A read-write lock or semaphore held by clients of an earlier version leaves no mark on
    // the name: --force cannot evict their holders.
    if (auto others = other_kinds_held(nodes, o.key); !others.empty()) {
      say("'%s' is held as a %s, not as a lock: --force evicts only a lock's holder",
          o.key.c_str(), others.front().kind);
      return exit_usage;
    }
    say("'%s' is free: nothing to release", o.key.c_str());
    return exit_ok;
  }
  if (auto kind = marked_kind(*view.token)) {  // its holders' mark, no lock's token
    say("'%s' is held as %s, not as a lock: --force evicts only a lock's holder", o.key.c_str(),
        kind->c_str());
    return exit_usage;
  }
  if (view.pttl_ms == -1) {  // dlock and the other Redlock clients always set a TTL
    say("'%s' has no TTL: not a lock (an application's key?), so --force leaves it; DEL it "
        "yourself if it is a stuck lock",
        o.key.c_str());
    return exit_usage;
  }
  std::string who = view.holder ? describe(*view.holder) : "an owner that left no note";
  std::error_code ec = release_with(nodes, o.key, *view.token, g.copies);
  if (ec == errc::not_held) {
    say("'%s' changed hands while it was being released: run again to evict the new holder",
        o.key.c_str());
    return exit_lease_lost;
  }
  if (ec) {
    say("releasing '%s' failed: %s", o.key.c_str(), with_remedy(ec, ec.message()).c_str());
    return exit_status_for(ec);
  }
  say("released '%s', held by %s (token %s)", o.key.c_str(), who.c_str(), view.token->c_str());
  return exit_ok;
}

int release_command(const global_options& g, const release_options& o) {
  if (o.force != o.token.empty()) {
    throw usage_error("release takes KEY TOKEN, or --force KEY to evict whoever holds KEY");
  }
  if (o.force) return force_release(g, o);
  auto nodes = make_clients(g);
  std::error_code ec = release_with(nodes, o.key, acquired_token(o.token), g.copies);
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
  auto* app = parent.add_subcommand(
      "release", "Release the lock KEY held with TOKEN, or with --force whoever holds it");
  app->fallthrough();
  app->add_flag("--force", o->force,
                "Evict whoever holds KEY (no TOKEN): says who held it; the next waiter is handed "
                "the lock, with a higher fence, at once. The evicted run ends its CMD (SIGTERM, "
                "SIGKILL after its --lost-grace; exit 71) once it learns of it: the two overlap "
                "until then");
  app->add_option("KEY", o->key, "The lock's name")->required();
  app->add_option("TOKEN", o->token,
                  "The token `dlock acquire` printed (its whole line \"TOKEN FENCE\" will do)");
  return {app, [&g, o] { return release_command(g, *o); }};
}

}  // namespace dlock::cli
