// SPDX-License-Identifier: Apache-2.0
// algo/targets.hpp: what every acquisition and every lease of one lock or semaphore share.
//   lock_target, semaphore_target, lock_set_target  node count, keys, pacing and the scripts'
//                  argument texts
//   effective_node_timeout, waiter_entry_ttl  the timing rules the targets are made with
//   lock_release_keys, semaphore_release_keys, semaphore_refresh_keys  the KEYS lists of the
//                  scripts that both a lease (release, extend) and an acquisition (give-up,
//                  settle) run
// Plain values: made once per lock or semaphore, then only read, from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/key_layout.hpp"
#include "dlock/options.hpp"
#include "algo/request.hpp"

namespace dlock::detail {

// The node's timeout when the options leave it 0: min(ttl / 10, the client's request timeout).
std::chrono::milliseconds effective_node_timeout(std::chrono::milliseconds configured,
                                                 std::chrono::milliseconds ttl,
                                                 std::chrono::milliseconds request_timeout);

// A queued waiter refreshes its entry at every attempt, at least once per retry_delay; an entry
// not refreshed for max(4 x retry_delay, 1 s) belongs to a waiter that crashed, and is dropped.
std::chrono::milliseconds waiter_entry_ttl(std::chrono::milliseconds retry_delay);

// A target is shared by all acquisitions of its lock or semaphore, and must outlive them and
// their requests (which point into its keys).
struct lock_target {
  std::size_t nodes = 1;
  lock_keys keys;
  // lock_options::copies: node i (the cluster client, once per copy) holds copy i's keys.
  std::vector<lock_keys> copies;
  const lock_keys& keys_on(std::size_t node) const noexcept {
    return copies.empty() ? keys : copies[node];
  }
  std::string ttl_text;                 // ttl in ms, as the scripts take it
  std::vector<std::string> node_names;  // label the votes (may be empty)
  // A key that each extend gives the lock's remaining life too (extend.lua's KEYS[2]): a
  // leader election's record. Empty: none.
  std::string lives_with_lock;
  std::chrono::milliseconds ttl{10'000};
  std::chrono::milliseconds retry_delay{50};
  std::chrono::milliseconds node_timeout{1'000};
  double drift_factor = 0.01;
  bool fair = false;
  bool wake_on_release = true;
  bool cluster = false;  // the node is a redis-cluster:// client
  // A single node hands the lock to its first waiter on release (release.lua); N nodes cannot
  // (one node's grant is no quorum), so Redlock waiters are only woken. Nor can a cluster: the
  // shard's replicas deliver SPUBLISH too, so a waiter subscribed on a master demoted meanwhile
  // would get the message while the count says nobody did, and the key would be freed under
  // it. On a cluster a release only wakes its waiter, which then tries again.
  bool accepts_handoff() const noexcept { return nodes == 1 && wake_on_release && !cluster; }
};
lock_target make_lock_target(std::size_t nodes, std::string_view key, const lock_options& o,
                             std::chrono::milliseconds request_timeout, bool cluster = false);

struct semaphore_target {
  semaphore_keys keys;
  std::string ttl_text, limit_text;     // as the scripts take them
  std::string variant_text;             // sem_release.lua's ARGV[3]: "fair" or ""
  // What the holders keep in the name's key (keys.name; name_mark.lua): semaphore_mark(limit,
  // fair), or a read-write lock's read_write_lock_mark.
  std::string name_mark;
  std::vector<std::string> node_names;  // label the votes (may be empty)
  std::ptrdiff_t limit = 1;
  bool fair = false;
  bool wake_on_release = true;
  bool cluster = false;
  std::chrono::milliseconds ttl{10'000};
  std::chrono::milliseconds retry_delay{50};
  std::chrono::milliseconds node_timeout{1'000};
  double drift_factor = 0.01;
  // Fair: how long the server keeps a waiter's place between two polls.
  std::chrono::milliseconds queue_ttl{0};
  // Whether a release may make a queued waiter a holder (sem_release.lua): not on a cluster
  // (whose wake-up count may miss the waiter: docs/guarantees.md).
  bool accepts_handoff() const noexcept { return wake_on_release && !cluster; }
};
semaphore_target make_semaphore_target(std::string_view key, std::ptrdiff_t limit,
                                       const semaphore_options& o,
                                       std::chrono::milliseconds request_timeout,
                                       bool cluster = false);

// A lock set's: its names' keys on one node or one cluster client, taken a slot group at a time
// (acquire_all.lua), released and extended a key at a time. Neither copied nor moved: each
// group's script keys are views into `names`.
struct lock_set_target {
  // `keys`: sorted and unique; `groups`: indices into them, in the order they are taken (one
  // group on a single node; one per slot, by ascending slot, on a cluster).
  lock_set_target(std::vector<std::string> keys, std::vector<std::vector<std::size_t>> groups,
                  const lock_options& o, std::chrono::milliseconds request_timeout);
  lock_set_target(const lock_set_target&) = delete;
  lock_set_target& operator=(const lock_set_target&) = delete;

  struct group {
    std::vector<std::size_t> members;              // indices into names
    std::vector<std::string_view> script_keys;     // acquire_all.lua's: key, fence, key, fence...
  };
  std::vector<lock_keys> names;
  std::vector<group> groups;
  std::string label;                    // the keys joined by ','
  std::string ttl_text;                 // ttl in ms, as the scripts take it
  std::vector<std::string> node_names;  // label the votes (may be empty)
  std::chrono::milliseconds ttl{10'000};
  std::chrono::milliseconds retry_delay{50};
  std::chrono::milliseconds node_timeout{1'000};
  double drift_factor = 0.01;
  // A set waits by polling, never in its names' queues: queued in several at once, it would
  // hold places in some while it waits in others.
  bool accepts_handoff() const noexcept { return false; }
};

// release.lua's keys, for a release and a give-up alike (ARGV: the value, or the id and
// "give-up").
script_keys lock_release_keys(const lock_keys& k);

// sem_release.lua's keys, for a release, a leave and a give-up alike (ARGV: the token, the
// target's limit_text, variant_text and name_mark).
script_keys semaphore_release_keys(const semaphore_keys& k);

// sem_refresh.lua's keys, for an extend and a settle alike (ARGV: the token, the TTL in ms, ""
// or the successor token, the target's name_mark).
script_keys semaphore_refresh_keys(const semaphore_keys& k, bool fair);

}  // namespace dlock::detail
