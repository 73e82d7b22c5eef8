// SPDX-License-Identifier: Apache-2.0
#include "slot_migration.hpp"

#include <memory>
#include <utility>
#include <vector>

#include "dlock/error.hpp"
#include "script.hpp"

namespace dlock::detail {

namespace {

using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// How long the companion keys and the mark live from their step: they are renewed before the
// entry, which is renewed for one TTL only while half a TTL of this is left, so they outlive
// it. The expiry set, renewed last, gets as long, so it outlives them in turn (the scripts
// that clear an expired entry's companions find it there).
milliseconds companion_ttl(milliseconds ttl) { return 2 * ttl; }

// What one renewal carries from step to step.
struct refresh_steps {
  explicit refresh_steps(client c) : node(std::move(c)) {}
  client node;
  std::string expiries, name, mark, owner;
  std::vector<std::string> companions;
  milliseconds ttl{}, timeout{};
  steady::time_point started;
  step_handler done;
  std::size_t outstanding = 0;
  std::error_code first_error;
};

void refresh_entry(const std::shared_ptr<refresh_steps>& s) {
  // Every companion now lives at least companion_ttl from its step; the entry, renewed from
  // here for one TTL, must end before them, with half a TTL to spare for the request's way.
  if (steady::now() - s->started >= s->ttl / 2) {
    return std::exchange(s->done, {})(errc::timeout, {});
  }
  run_script(s->node, migrating_member_refresh_script, {s->expiries},
             {s->owner, std::to_string(s->ttl.count()),
              std::to_string(companion_ttl(s->ttl).count())},
             s->timeout,
             [s](std::error_code ec, reply r) { std::exchange(s->done, {})(ec, std::move(r)); });
}

void refresh_companions(const std::shared_ptr<refresh_steps>& s) {
  if (s->companions.empty()) return refresh_entry(s);
  s->outstanding = s->companions.size();
  auto ms = std::to_string(companion_ttl(s->ttl).count());
  for (const auto& key : s->companions) {
    run_script(s->node, migrating_outlive_script, {key}, {ms}, s->timeout,
               [s](std::error_code ec, reply r) {
                 if (!ec && r.is_error()) ec = error_from_reply(r);
                 if (ec && !s->first_error) s->first_error = ec;
                 if (--s->outstanding > 0) return;
                 if (s->first_error) return std::exchange(s->done, {})(s->first_error, {});
                 refresh_entry(s);
               });
  }
}

}  // namespace

bool refused_while_migrating(const reply& r) noexcept {
  return r.is_error() && r.str().rfind("TRYAGAIN", 0) == 0;
}

void release_lock_key(client node, std::string key, std::string owner, milliseconds timeout,
                      step_handler done) {
  run_script(node, migrating_lock_release_script, {key}, {owner}, timeout, std::move(done));
}

void refresh_permit_key_by_key(client node, const semaphore_target& target, std::string owner,
                               milliseconds ttl, step_handler done) {
  const auto& k = target.keys;
  auto s = std::make_shared<refresh_steps>(std::move(node));
  s->expiries = k.expiries;
  s->name = k.name;
  s->mark = target.name_mark;
  s->owner = std::move(owner);
  s->companions = {k.weights};
  s->ttl = ttl;
  s->timeout = target.node_timeout;
  s->started = steady::now();
  s->done = std::move(done);
  if (target.fair) s->companions.insert(s->companions.end(), {k.owners, k.waiter_info, k.tickets});
  if (s->name.empty() || s->mark.empty()) return refresh_companions(s);
  run_script(s->node, migrating_name_keep_script, {s->name},
             {s->mark, std::to_string(companion_ttl(ttl).count())}, s->timeout,
             [s](std::error_code ec, reply r) {
               // Taken by something else: the permit is lost, as sem_refresh.lua finds it.
               if (ec || !r.is_integer() || r.integer() != 1) {
                 return std::exchange(s->done, {})(ec, std::move(r));
               }
               refresh_companions(s);
             });
}

void end_permit(client node, const semaphore_target& target, std::string owner,
                step_handler done) {
  run_script(node, migrating_member_refresh_script, {target.keys.expiries}, {owner, "0"},
             target.node_timeout, std::move(done));
}

}  // namespace dlock::detail
