// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/observer.hpp: hooks for metrics, tracing and logs.
/// - observer:      what dlock reports as it works: acquisitions, releases, renewals, lost
///                  leases, each node request and connection; override what you need
/// - set_observer:  installs one observer for the whole process (none by default)
/// - log_sink:      where dlock's log lines go; set_log_sink installs one (none by default:
///                  the library never writes to stderr itself)
///
/// With neither installed, each hook costs one atomic load and a branch. The events are
/// plain values that borrow their strings for the duration of the call.
///
/// Thread safety: set_observer and set_log_sink may be called from any thread at any time.
/// An observer's functions and the sink are called from dlock's I/O thread and from threads
/// that call blocking dlock functions, concurrently: they must be thread-safe, quick, must not
/// block and must not call blocking dlock functions. An exception they throw ends the process
/// (they are called from noexcept paths).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>

#include "dlock/error.hpp"
#include "dlock/export.hpp"

namespace dlock {

/// Which kind of primitive an event is about.
enum class primitive {
  lock,       ///< a dlock::mutex (one node, or a Redlock over several)
  semaphore,  ///< a dlock::semaphore (its permits)
  shared_mutex,  ///< a dlock::shared_mutex (its readers' and writers' holds)
};

/// "lock", "semaphore" or "shared_mutex".
DLOCK_EXPORT std::string_view to_string(primitive p) noexcept;

/// One acquisition ended: acquire(), try_lock(), try_acquire_for() and friends, sync or
/// async. One event per call, however many attempts it made.
struct acquire_event {
  std::string_view key{};            ///< the lock's or semaphore's key (key_prefix + name)
  primitive what = primitive::lock;  ///< a lock's or a semaphore's
  std::error_code ec{};  ///< empty: acquired; else why not (not_acquired, cancelled, ...)
  failure_kind kind = failure_kind::contention;  ///< what a failure means; contention if acquired
  int attempts = 0;      ///< rounds made, the granting one included
  std::chrono::steady_clock::duration waited{};  ///< from the call to its outcome
  bool handoff = false;  ///< granted through a release's handoff to this queued waiter
};

/// A release ended (lease::release(), its destructor, unlock(), async release).
struct release_event {
  std::string_view key{};            ///< the lock's or semaphore's key
  primitive what = primitive::lock;  ///< a lock's or a semaphore's
  std::error_code ec{};  ///< empty: released; not_held: it was gone already; else the failure
  /// From the grant (the lease's creation) to the release's outcome: how long it was held;
  /// empty for an adopted token (mutex::adopt), whose grant this process did not see.
  std::optional<std::chrono::steady_clock::duration> held{};
};

/// A renewal by a lease's keep-alive (the watchdog) ended. Manual extends are not renewals.
struct renewal_event {
  std::string_view key{};            ///< the lock's or semaphore's key
  primitive what = primitive::lock;  ///< a lock's or a semaphore's
  std::error_code ec{};  ///< empty: renewed; lease_lost: it was gone; else a failure, retried
  /// How late the renewal went out after its planned time (an overloaded I/O thread, or a
  /// process that was paused, shows here first).
  std::chrono::steady_clock::duration lag{};
  std::chrono::steady_clock::duration took{};  ///< from sending to the verdict
};

/// A lease was lost: its lost() token fired. Once per lease.
struct lease_lost_event {
  std::string_view key{};            ///< the lock's or semaphore's key
  primitive what = primitive::lock;  ///< a lock's or a semaphore's
  /// lease_lost (the servers say it is another's or gone) or lease_expired (validity ran
  /// out before a renewal succeeded).
  std::error_code reason{};
};

/// One request to one node completed (a lock round's script, a release, a client::exec ...).
struct node_request_event {
  std::string_view node{};  ///< the endpoint, as endpoint::to_string() writes it
  std::error_code ec{};     ///< empty, or the transport's or the reply's error
  std::chrono::steady_clock::duration latency{};  ///< from submission to completion
};

/// A connection to a node changed state.
struct connection_event {
  /// What happened to the connection.
  enum class change {
    connected,       ///< connected and ready (after AUTH/SELECT/TLS)
    connect_failed,  ///< a connect failed; requests fail fast until the backoff passes
    dropped,         ///< a ready connection broke (reset, timeout, protocol error)
  };
  std::string_view node{};          ///< the endpoint, as endpoint::to_string() writes it
  change what = change::connected;  ///< what happened
  std::error_code ec{};             ///< why, for connect_failed and dropped
};

/// "connected", "connect_failed" or "dropped".
DLOCK_EXPORT std::string_view to_string(connection_event::change c) noexcept;

/// Receives dlock's events. Every function has an empty default: override what you need.
/// See the file comment for the threads they run on.
class DLOCK_EXPORT observer {
 public:
  virtual ~observer();
  /// An acquisition ended.
  virtual void on_acquire(const acquire_event&) {}
  /// A release ended.
  virtual void on_release(const release_event&) {}
  /// A keep-alive renewal ended.
  virtual void on_renewal(const renewal_event&) {}
  /// A lease was lost.
  virtual void on_lease_lost(const lease_lost_event&) {}
  /// A request to a node completed.
  virtual void on_node_request(const node_request_event&) {}
  /// A connection to a node changed state.
  virtual void on_connection(const connection_event&) {}
};

/// Installs `o` as the process's observer, replacing any earlier one; nullptr removes it.
/// Events already being delivered may still reach the one replaced, so dlock keeps every
/// observer it was given alive until the process exits (install one, not one per request).
DLOCK_EXPORT void set_observer(std::shared_ptr<observer> o);

/// How much a log line matters.
enum class log_level {
  debug,    ///< detail for debugging dlock itself
  info,     ///< a normal but notable event (a reconnect)
  warning,  ///< something failed and dlock copes (a node down, a renewal retried)
  error,    ///< something failed that the caller must know of (a lease was lost)
};

/// "debug", "info", "warning" or "error".
DLOCK_EXPORT std::string_view to_string(log_level l) noexcept;

/// Receives one log line, without a trailing newline.
using log_sink = std::function<void(log_level, std::string_view message)>;

/// Installs `sink` for the whole process, replacing any earlier one; an empty function
/// removes it. As with set_observer, a replaced sink is kept alive until the process exits.
DLOCK_EXPORT void set_log_sink(log_sink sink);

}  // namespace dlock
