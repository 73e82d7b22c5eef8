// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/diagnostics.hpp: start-up checks of the nodes a lock will run on.
/// - warning:           one finding: what is wrong, on which node, and a short fix
/// - check_deployment:  asks every node (INFO, CONFIG GET appendfsync) and lists what weakens
///                      the lock's guarantees
/// - to_string:         one line per warning, for logs
///
/// check_deployment blocks; call it from any thread but dlock's I/O thread. Clients are
/// thread-safe, so it may run while locks are in use.
#pragma once

#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/export.hpp"
#include "dlock/options.hpp"

namespace dlock {

/// One finding of check_deployment(): what is wrong, on which node, and a short fix.
struct warning {
  /// What kind of weakness was found.
  enum class code {
    too_few_nodes = 1,   ///< N < 3: one failed node makes the lock unavailable (or N = 1 unsafe)
    even_node_count,     ///< N even: one more node than N - 1 but no more failures tolerated
    same_server,         ///< two endpoints, one redis-server (same run_id): one vote counts twice
    replica,             ///< the node is a replica: it refuses writes, or loses them on failover
    evicting_policy,     ///< maxmemory-policy may evict a held lock key under memory pressure
    forgets_on_restart,  ///< no AOF, or AOF not fsync'd always: a restarted node forgets locks
    unchecked,           ///< the node could not be inspected (down, timed out, INFO forbidden)
    unguarded_failover,  ///< a master with replicas, no guard or quarantine: a promoted one may lag
    no_min_replicas,     ///< a master with replicas and min-replicas-to-write 0: split brain
    sentinel_quorum,     ///< redis-sentinel://: too few sentinels, one down, or their count differs
    cluster_coverage,    ///< redis-cluster://: slots without a master, or require-full-coverage yes
    copies_collapse,     ///< lock_options::copies: two copies of some names on one master
  };
  code what{};          ///< the kind of finding
  std::string node{};   ///< the endpoint concerned (endpoint::to_string()); empty for all of them
  std::string message{};  ///< what was found
  std::string fix{};    ///< how to make the warning go away
};

/// Inspects every node at once, each within its client's request_timeout, and returns the
/// warnings in node order (deployment-wide ones first). Checks: N even or below 3; endpoints
/// sharing a run_id (INFO server); role:slave (INFO replication); maxmemory_policy other than
/// noeviction (INFO memory); aof_enabled:0, or appendfsync other than always (INFO persistence,
/// CONFIG GET; a node that refuses CONFIG is judged on INFO alone), unless the node's client has
/// client_options::restart_quarantine; a master with connected replicas whose client lacks the
/// replication guard or the quarantine, or whose min-replicas-to-write is 0 (CONFIG GET); for a
/// redis-sentinel:// node, fewer than 3 sentinels, a listed sentinel that cannot be asked
/// (SENTINEL MASTER), one that knows another number of sentinels than the URL lists, or one
/// whose SENTINEL CKQUORUM fails.
///
/// A redis-cluster:// client stands for every master of its slot map, each checked as above
/// (a lone cluster client is not counted as one node: its copies make the quorum), plus slots
/// no master serves, cluster-require-full-coverage yes, a master with replicas when the lock
/// keeps no copies (a failover may lose its grant), and with `lock.copies` K, names whose K
/// copies would not sit on K distinct masters. Only `lock.copies` is read from `lock`.
///
/// A node that cannot be inspected yields an `unchecked` warning and sets ec to the first such
/// error; the other nodes' warnings are still returned. With no nodes ec is invalid_argument.
DLOCK_EXPORT std::vector<warning> check_deployment(const std::vector<client>& nodes,
                                                const lock_options& lock, std::error_code& ec);
/// As above, for a lock without copies.
DLOCK_EXPORT std::vector<warning> check_deployment(const std::vector<client>& nodes,
                                                std::error_code& ec);
/// As above; throws std::system_error when a node could not be inspected.
DLOCK_EXPORT std::vector<warning> check_deployment(const std::vector<client>& nodes,
                                                const lock_options& lock);
/// As above, for a lock without copies.
DLOCK_EXPORT std::vector<warning> check_deployment(const std::vector<client>& nodes);

/// "too_few_nodes", "replica", ...
DLOCK_EXPORT std::string_view to_string(warning::code c) noexcept;
/// "<code> <node>: <message> (fix: <fix>)".
DLOCK_EXPORT std::string to_string(const warning& w);

}  // namespace dlock
