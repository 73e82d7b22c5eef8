// SPDX-License-Identifier: Apache-2.0
// The targets' timing rules and the scripts' key lists.
#include "algo/targets.hpp"

#include <algorithm>

namespace dlock::detail {

using std::chrono::milliseconds;

milliseconds effective_node_timeout(milliseconds configured, milliseconds ttl,
                                    milliseconds request_timeout) {
  if (configured.count() != 0) return configured;
  return std::min(std::max(ttl / 10, milliseconds(1)), request_timeout);
}

milliseconds waiter_entry_ttl(milliseconds retry_delay) {
  return std::max(4 * retry_delay, milliseconds(1000));
}

lock_target make_lock_target(std::size_t nodes, std::string_view key, const lock_options& o,
                             milliseconds request_timeout, bool cluster) {
  lock_target t;
  t.nodes = nodes;
  t.cluster = cluster;
  t.keys = lock_keys_for(key);
  for (int i = 0; o.copies > 1 && i < o.copies; ++i) {
    t.copies.push_back(lock_keys_for(lock_copy_key(key, i, o.copies)));
  }
  t.ttl = o.ttl;
  t.ttl_text = std::to_string(o.ttl.count());
  t.retry_delay = o.retry_delay;
  t.node_timeout = effective_node_timeout(o.node_timeout, o.ttl, request_timeout);
  t.drift_factor = o.drift_factor;
  t.fair = o.fair;
  t.wake_on_release = o.wake_on_release;
  return t;
}

semaphore_target make_semaphore_target(std::string_view key, std::ptrdiff_t limit,
                                       const semaphore_options& o,
                                       milliseconds request_timeout, bool cluster) {
  semaphore_target t;
  t.cluster = cluster;
  t.keys = semaphore_keys_for(key, o.fair);
  t.limit = limit;
  t.limit_text = std::to_string(limit);
  t.ttl_text = std::to_string(o.ttl.count());
  t.fair = o.fair;
  t.variant_text = o.fair ? "fair" : "";
  t.name_mark = semaphore_mark(limit, o.fair);
  t.wake_on_release = o.wake_on_release;
  t.ttl = o.ttl;
  t.retry_delay = o.retry_delay;
  t.node_timeout = effective_node_timeout(o.node_timeout, o.ttl, request_timeout);
  t.drift_factor = o.drift_factor;
  // A fair waiter's place must outlive the gap between two polls: at most one jittered delay
  // plus one request. Twice that, so one slow poll does not cost the place; a waiter that
  // crashed blocks the queue no longer than this.
  t.queue_ttl = 2 * (o.retry_delay + t.node_timeout) + milliseconds(20);
  return t;
}

lock_set_target::lock_set_target(std::vector<std::string> keys,
                                 std::vector<std::vector<std::size_t>> member_groups,
                                 const lock_options& o, milliseconds request_timeout)
    : ttl_text(std::to_string(o.ttl.count())),
      ttl(o.ttl),
      retry_delay(o.retry_delay),
      node_timeout(effective_node_timeout(o.node_timeout, o.ttl, request_timeout)),
      drift_factor(o.drift_factor) {
  names.reserve(keys.size());  // the views below point into these strings: no reallocation
  for (const auto& k : keys) {
    names.push_back(lock_keys_for(k));
    label += (label.empty() ? "" : ",") + k;
  }
  for (auto& members : member_groups) {
    group g;
    for (auto i : members) {
      g.script_keys.push_back(names[i].key);
      g.script_keys.push_back(names[i].fence);
    }
    g.members = std::move(members);
    groups.push_back(std::move(g));
  }
}

script_keys lock_release_keys(const lock_keys& k) {
  return {k.key, k.waiters, k.waiter_info, k.fence};
}

script_keys semaphore_refresh_keys(const semaphore_keys& k, bool fair) {
  script_keys keys{k.expiries, k.weights};
  if (fair) {
    keys.push_back(k.owners);
    keys.push_back(k.waiter_info);
    keys.push_back(k.tickets);
  }
  if (!k.name.empty()) keys.push_back(k.name);  // the holders' mark (name_mark.lua)
  return keys;
}

script_keys semaphore_release_keys(const semaphore_keys& k) {
  script_keys keys{k.expiries, k.weights, k.waiters, k.waiter_info, k.fence, k.tickets};
  if (!k.name.empty()) keys.push_back(k.name);  // the holders' mark (name_mark.lua)
  return keys;
}

}  // namespace dlock::detail
