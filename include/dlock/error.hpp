// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/error.hpp: the library's one error model.
/// - errc:             the conditions dlock reports, as std::error_code values
/// - category():       the std::error_category that names them
/// - make_error_code:  so that `std::error_code ec = errc::timeout;` works
///
/// All functions are thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dlock/export.hpp"

namespace dlock {

/// The conditions dlock reports, as std::error_code values: `ec == dlock::errc::timeout`.
enum class errc {
  not_acquired = 1,    ///< the lock or permit is held by another owner (votes against)
  quorum_not_reached,  ///< too few nodes answered for a quorum: nodes down, hung or failing
  lease_expired,       ///< the validity ran out before the operation completed (TTL too short)
  lease_lost,          ///< the lease is gone on the server: expired, released or taken by another
  not_held,            ///< release or extend of a lease this object does not hold
  node_unreachable,    ///< could not connect to the node (refused, resolve failure, backoff)
  timeout,             ///< no reply before the deadline; the command may or may not have run
  connection_lost,     ///< the connection dropped with the request in flight; outcome unknown
  protocol_error,      ///< the peer does not speak RESP (not a Redis server?) or sent junk
  auth_failed,         ///< NOAUTH / WRONGPASS: the credentials were missing or refused
  no_permission,       ///< NOPERM: the ACL user may not run a command or touch a key
  wrong_type,          ///< WRONGTYPE: the key holds a value of another type
  read_only,           ///< READONLY: the node is a replica
  out_of_memory,       ///< OOM: the node refuses writes at maxmemory
  script_error,        ///< a Lua script failed on the server
  server_error,        ///< any other error reply from the server
  invalid_argument,    ///< bad input, rejected before any I/O (key, TTL, URL, limit ...)
  would_block_io_thread,  ///< a blocking call was made from dlock's own I/O thread
  cancelled,           ///< a wait was stopped (a stop request, Asio), or the client shut down
  tls_error,           ///< TLS failed: certificate untrusted or for another host, handshake refused
  transaction_aborted, ///< every attempt of an optimistic transaction met a concurrent change
  forked_process,      ///< called in a child after fork(): dlock works in the parent only
  replication_not_confirmed,  ///< the replication guard: too few replicas acknowledged in time
  cluster_error,       ///< Redis Cluster: not a cluster node, a slot no node serves, a redirect loop
  not_found,           ///< the object is not on the server: a latch never set, or expired
};

/// The category of errc values; name() is "dlock".
DLOCK_EXPORT const std::error_category& category() noexcept;

/// `e` as a std::error_code of category(); found by argument-dependent lookup, so that an errc
/// converts to std::error_code implicitly.
DLOCK_EXPORT std::error_code make_error_code(errc e) noexcept;

/// The enumerator's name ("not_acquired", "timeout" ...): for metric labels and logs.
DLOCK_EXPORT std::string_view to_string(errc e) noexcept;

}  // namespace dlock

// Lets an errc convert to std::error_code. Hidden from Doxygen, as it is not a dlock name.
/// @cond
template <>
struct std::is_error_code_enum<dlock::errc> : std::true_type {};
/// @endcond

namespace dlock {

/// What one node said in a lock round, for callers who ask why an acquire failed (redsync's
/// ErrTaken{Nodes}): pass a node_results* to acquire() and friends.
struct node_result {
  /// The node's answer.
  enum class vote {
    pending,  ///< no answer before the round was decided
    granted,  ///< the node set our key
    taken,    ///< another owner holds the key there
    failed,   ///< error or timeout; `error` says which
  };
  std::string node{};            ///< the endpoint, as endpoint::to_string() writes it
  vote outcome = vote::pending;  ///< what the node answered
  std::error_code error{};       ///< set when outcome == failed
  std::string message{};         ///< the server's error text or the local error's message
  long long holder_ttl_ms = -1;  ///< the other owner's PTTL when outcome == taken
};
using node_results = std::vector<node_result>;  ///< one entry per node, in the nodes' order

/// What a failed acquisition means: whether waiting can help.
enum class failure_kind {
  contention,   ///< another owner holds it: waiting for the release helps
  unavailable,  ///< too few nodes answered to form a quorum (an outage): a restart may help
  fatal         ///< it will not heal by waiting (credentials, ACLs, wrong key type, bad arguments)
};
/// The failure_kind of an acquisition that failed with `ec`. For quorum_not_reached, `votes`
/// (the last round's) tell whether another owner's votes (contention) or node failures
/// (unavailable) kept the quorum away.
DLOCK_EXPORT failure_kind classify_failure(std::error_code ec, const node_results& votes);

/// "granted", "taken", "failed: <message>" or "pending": for logs.
DLOCK_EXPORT std::string to_string(const node_result& r);

}  // namespace dlock
