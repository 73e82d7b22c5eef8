// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/transaction.hpp: optimistic transactions with WATCH / MULTI / EXEC, retried on conflict.
/// - transaction_options:  attempt limit, backoff, idle connections kept
/// - transaction:          what the caller's body sees: read now, watch more keys, queue writes
/// - transaction_result:   whether EXEC ran, its replies, and how many attempts it took
/// - transaction_runner:   runs a body against one node until EXEC commits or attempts run out
///
/// Thread-safety: a transaction_runner may be shared by any number of threads; each run() uses a
/// connection of its own. A transaction object belongs to the one run() that passed it.
///
/// How it works: WATCH the keys, run the body (its reads see the current values; its writes are
/// queued), then MULTI + the queued writes + EXEC. EXEC answers nil when another client changed a
/// watched key after WATCH: nothing was written, and the body runs again (after a jittered,
/// doubling backoff) on fresh values.
///
/// Why a connection of its own: WATCH and MULTI are state of the connection, and a dlock::client
/// pipelines every thread's commands over one connection, so another thread's EXEC, UNWATCH or
/// MULTI would clear or hijack ours. run() therefore takes a dedicated connection to the same
/// endpoint (same credentials, timeouts and database) from a small pool of idle ones, and gives
/// it back only when it is clean. A dlock::client also reconnects silently after a drop, which
/// would lose WATCH unnoticed; run() names its connection with a random CLIENT SETNAME sent with
/// WATCH, queues the writes behind a CLIENT GETNAME that must still answer that name, and sends
/// EXEC alone last. If the connection was replaced before the writes were queued, the name
/// differs and the attempt is discarded; if it was replaced between queueing and EXEC, the new
/// connection answers "EXEC without MULTI" and nothing ran. Either way the body runs again. The
/// ACL user therefore needs CLIENT SETNAME and CLIENT GETNAME besides WATCH/MULTI/EXEC.
///
/// When to prefer it over a lock: the data lives in this one Redis node, the read-modify-write
/// is short, and conflicts are rare. Then it costs no lock keys, no TTL to guess, and no stalled
/// holder can block anyone. Prefer a dlock::mutex when the keys are hot
/// (under contention most attempts abort and the work is redone: the attempt counts show it),
/// when the critical section is long or touches systems other than this node, or when work must
/// not be repeated. A Lua script is better still when the whole update can run on the server.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/error.hpp"
#include "dlock/export.hpp"
#include "dlock/reply.hpp"

namespace dlock {

namespace detail {
struct transaction_pool;
}

/// The knobs of a transaction_runner: attempt limit, backoff, idle connections kept.
struct transaction_options {
  /// Bodies run at most this often (>= 1); then run() gives up with errc::transaction_aborted.
  int max_attempts = 10;
  /// The sleep after the n-th aborted attempt is random in [d/2, d] with
  /// d = min(backoff * 2^(n-1), max_backoff), so that conflicting writers spread out.
  std::chrono::milliseconds backoff{2};
  std::chrono::milliseconds max_backoff{100};  ///< the cap on d
  /// Idle dedicated connections kept for later runs; more are opened while many run at once.
  std::size_t idle_connections = 4;
};

/// Handed to the body of transaction_runner::run() for one attempt.
class DLOCK_EXPORT transaction {
 public:
  transaction(const transaction&) = delete;
  transaction& operator=(const transaction&) = delete;

  /// Sends a command now, on the transaction's connection, and returns its reply (for reads:
  /// GET, HGETALL ...; not MULTI, EXEC, DISCARD or UNWATCH). Blocks up to the client's
  /// request_timeout. Sets ec on failure.
  reply read(command cmd, std::error_code& ec);
  /// As above; throws std::system_error, which propagates out of run() (no retry; nothing
  /// queued is sent).
  reply read(command cmd);
  /// WATCHes more keys (such as keys named by what was just read). Blocks; throws like read().
  /// On a cluster (redis-cluster://), a key in another slot than run()'s keys throws
  /// std::system_error(invalid_argument).
  void watch(std::string_view key);
  /// Queues a write for MULTI ... EXEC; nothing is sent until the body returns.
  void queue(std::initializer_list<std::string_view> args);
  void queue(std::vector<std::string> args);  ///< the same, for arguments assembled at run time
  /// Ends this run without EXEC and without retry: run() returns committed = false, no error.
  void discard() noexcept { discarded_ = true; }

  /// 1 for the first run of the body, 2 after one conflict, ...
  int attempt() const noexcept { return attempt_; }

 private:
  friend class transaction_runner;
  transaction(client& conn, int attempt) noexcept : conn_(conn), attempt_(attempt) {}

  client& conn_;
  int attempt_;
  std::uint16_t slot_ = 0;  // on a cluster: the one slot of every key
  bool discarded_ = false;
  std::vector<std::vector<std::string>> queued_;
};

/// What run() did: whether EXEC ran, its replies, and how many attempts it took.
struct transaction_result {
  /// EXEC ran: every queued write was applied, atomically.
  bool committed = false;
  /// Bodies run, including the committed one; attempts - 1 conflicts were seen.
  int attempts = 0;
  /// EXEC's reply: an array with one reply per queued write (an element may be an error reply,
  /// such as WRONGTYPE: Redis runs the others regardless). Nil when not committed.
  reply replies{};
};

/// Runs a body against one node until EXEC commits or attempts run out. May be shared by any
/// number of threads. transaction.hpp says how it works and when to prefer a lock.
class DLOCK_EXPORT transaction_runner {
 public:
  /// Dedicated connections go to `node.where()` with `node.options()`; `node` itself is not used
  /// for transactions. Throws std::system_error(errc::invalid_argument) for max_attempts < 1 or
  /// a negative backoff.
  explicit transaction_runner(const client& node, transaction_options options = {});
  ~transaction_runner();
  transaction_runner(const transaction_runner&) = delete;
  transaction_runner& operator=(const transaction_runner&) = delete;

  /// What run() runs: reads, watches and queues writes through its transaction.
  using body_type = std::function<void(transaction&)>;

  /// WATCHes `keys` (at least one; else invalid_argument before any I/O), runs `body`, commits
  /// with MULTI/EXEC, and runs it all again on conflict, up to max_attempts. Blocks; must not be
  /// called on dlock's I/O thread (would_block_io_thread). A connection lost before EXEC costs
  /// an attempt, like a conflict: nothing was applied. On failure ec is:
  /// - transaction_aborted:  the last of max_attempts attempts conflicted (connection_lost or
  ///   timeout instead when the last one lost its connection before EXEC)
  /// - server_error and the like:  a queued write was malformed (unknown command, wrong arity);
  ///   nothing ran
  /// - timeout, connection_lost:  EXEC's answer was lost: the writes may or may not have been
  ///   applied, so run() does not repeat them
  /// - any error of WATCH itself (no_permission ...)
  /// - invalid_argument:  on a Redis Cluster (redis-cluster://), keys or queued writes in more
  ///   than one slot, found before any write is sent: a transaction runs on one master, so all
  ///   its keys must share a hash tag ("{order:42}:items", "{order:42}:total")
  ///
  /// `result.attempts` counts the bodies run either way. An exception from the body propagates;
  /// nothing it queued is sent, and its connection is closed rather than reused.
  transaction_result run(std::vector<std::string> keys, const body_type& body,
                         std::error_code& ec);
  /// As above; throws std::system_error on failure (not for a discard()).
  transaction_result run(std::vector<std::string> keys, const body_type& body);

 private:
  std::shared_ptr<detail::transaction_pool> pool_;
};

}  // namespace dlock
