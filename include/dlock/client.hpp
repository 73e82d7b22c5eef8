// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/client.hpp: a connection to one Redis node, shared by many threads.
/// - tls_options:     CA, client certificate and server name for rediss:// endpoints
/// - client_options:  timeouts, reconnect backoff, credentials that override the URL's, TLS
/// - command:         a command formatted once, on the caller's thread
/// - client:          a cheap copyable handle to one pipelined connection
///
/// A client is thread-safe: any number of threads may send through one handle or its copies.
/// All I/O runs on one dlock I/O thread shared by every client of the process; completions are
/// delivered on the handler's associated executor (by default that I/O thread: do not block there).
#pragma once

#include <chrono>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dlock/detail/async.hpp"
#include "dlock/endpoint.hpp"
#include "dlock/export.hpp"
#include "dlock/reply.hpp"

namespace dlock {

namespace detail {
class connection;
class inbox;
struct node_link;
struct access;  // the library's way in to the private cores (src/access.hpp)
}

/// TLS settings, used only when the endpoint has tls set (rediss://). Verification is always on:
/// the server's certificate must chain to a trusted CA and name the host (a DNS name via its
/// subjectAltName, or an IP literal via an IP SAN); there is no switch to turn it off. The files
/// are PEM and are read once, when the client is created: a rotated certificate takes a new
/// client. The client constructor throws std::system_error(errc::tls_error) when one cannot be
/// loaded. A failed handshake completes requests with errc::tls_error, and the error reply's text
/// carries OpenSSL's reason ("hostname mismatch", "unable to get local issuer certificate" ...).
struct tls_options {
  /// CA certificates to trust. Empty: the system's default store (/etc/ssl/certs).
  std::string ca_file{};
  /// Client certificate (chain), for servers that require mutual TLS (`--tls-auth-clients yes`).
  std::string cert_file{};
  /// The client certificate's unencrypted private key. Empty: cert_file (one PEM with both).
  std::string key_file{};
  /// The name the server's certificate must carry, when it differs from the URL's host (as when
  /// connecting to 10.0.0.5 whose certificate says redis.internal). Also sent as SNI.
  std::string server_name{};
};

/// The replication guard (client_options::replication_guard): after each grant and extend on
/// a master, WAIT until enough of its replicas have it, on a connection of its own. WAIT is no
/// consensus: a replica that acknowledged may still lose the write, or lose the election.
struct replication_guard_options {
  /// Off by default.
  bool enabled = false;
  /// How many replicas must acknowledge; 0: a majority of the replicas connected when it is
  /// asked (ROLE). A master with none connected fails the guard.
  int replicas = 0;
  /// How long to wait for them; also bounded by the acquisition's deadline. At least 1 ms.
  std::chrono::milliseconds timeout{100};
};

/// How a client connects and how long it waits: timeouts, reconnect backoff, credentials, TLS.
struct client_options {
  /// Deadline for connect plus the AUTH/SELECT handshake.
  std::chrono::milliseconds connect_timeout{1000};
  /// Default deadline for one request, from submission to reply.
  std::chrono::milliseconds request_timeout{1000};
  /// After a failed connect, requests fail fast (node_unreachable) until this backoff has
  /// passed; it doubles per failure up to reconnect_backoff_max and resets on success.
  std::chrono::milliseconds reconnect_backoff_min{50};
  std::chrono::milliseconds reconnect_backoff_max{2000};  ///< the cap of that doubling
  /// The ACL user; when not empty it overrides the URL's.
  std::string user{};
  /// The password; when not empty it overrides the URL's, so a secret need not appear in a URL.
  std::string password{};
  /// For rediss:// endpoints.
  tls_options tls{};
  /// redis-sentinel:// only: the ACL user and password of the sentinels themselves (Sentinel's
  /// `requirepass` / `sentinel sentinel-user`), when they have one. The URL's credentials are
  /// the master's.
  std::string sentinel_user{};
  std::string sentinel_password{};  ///< see sentinel_user
  /// Keeps a node that may have forgotten locks out of every grant for this long: one that
  /// restarted without its data, or whose data came from another process (a restart from
  /// disk, which may miss the last writes, or a promoted replica, which may lag). On each
  /// connect, before anything else, the client reads the node's run_id and uptime (INFO) and
  /// compares them with the mark the last check left (key_layout.hpp: node_identity_key);
  /// when they differ it sets node_quarantine_key, which the acquire scripts of every client
  /// obey. Must be at least the longest TTL in use on the node. A node new to dlock that
  /// started less than this long ago waits out the rest once. 0 (the default): no check;
  /// negative: errc::invalid_argument. See docs/guarantees.md.
  std::chrono::milliseconds restart_quarantine{0};
  /// After each grant and extend, confirm that the node's replicas have it (see
  /// replication_guard_options); a miss fails the acquire (errc::replication_not_confirmed)
  /// and releases, or fails the extend and leaves the lease's validity as it was.
  replication_guard_options replication_guard{};
  /// Connections that dlock's blocking lock and semaphore calls (lock(), unlock(), acquire(),
  /// release() on threads) may open to the node beside the shared one: when the I/O thread's
  /// work occupies that one (blocking calls join each other there otherwise), the calling
  /// thread makes its round trip on an idle spare itself instead of queueing behind it and
  /// waiting for the I/O thread, where later blocking calls would queue too (docs/design.md).
  /// Opened one at a time, only when all are busy; commands sent with exec() and async calls
  /// always use the shared connection, in order, and a thread whose own async requests have
  /// not all completed keeps to it too, so that no blocking call overtakes them. Plain TCP and
  /// unix sockets only (not TLS, Sentinel or Cluster). 0 to 16; others:
  /// errc::invalid_argument.
  int blocking_connections = 4;
};

/// One Redis command (or several, pipelined as one request), formatted at construction.
/// Throws std::system_error(errc::invalid_argument) for an empty command, and for commands that
/// do not answer exactly once (SUBSCRIBE and friends, MONITOR, SYNC, CLIENT REPLY), which would
/// pair later replies with the wrong requests on the shared connection.
class DLOCK_EXPORT command {
 public:
  /// Formats `args`, the command's name and arguments: `command{"GET", key}`.
  command(std::initializer_list<std::string_view> args);
  /// The same, for arguments assembled at run time.
  explicit command(std::span<const std::string> args);
  explicit command(std::span<const std::string_view> args);  ///< the same, for string views

  /// Appends another command; the request then completes with an array of all replies.
  command& then(std::initializer_list<std::string_view> args);
  command& then(std::span<const std::string> args);  ///< the same, for a run-time list

  /// The request as it goes on the wire: each command in RESP.
  const std::string& bytes() const noexcept { return bytes_; }
  /// How many commands it holds, and so how many replies it gets.
  std::size_t size() const noexcept { return count_; }
  /// Some command in it changes its connection's state (SELECT, AUTH, HELLO, RESET, QUIT,
  /// MULTI/EXEC/DISCARD, WATCH/UNWATCH, READONLY/READWRITE/ASKING, CLIENT
  /// TRACKING/CACHING/SETNAME/SETINFO/NO-EVICT/NO-TOUCH): a client refuses to run it (see
  /// client::exec).
  bool changes_session() const noexcept { return changes_session_; }

 private:
  friend struct detail::access;
  struct library_words {};
  // dlock's own request (access.hpp): the words of its scripts and plain commands, which are
  // never empty nor change or break the session, go out unchecked, sized and written at once.
  command(library_words, std::span<const std::span<const std::string_view>> commands);
  // A reusable one (a blocking call's, per thread): formatted again in place, so that its
  // buffer is allocated once rather than per request.
  explicit command(library_words) noexcept {}
  void reformat(library_words, std::span<const std::span<const std::string_view>> commands);

  std::string bytes_;
  std::size_t count_ = 0;
  bool changes_session_ = false;
};

/// A cheap copyable handle to one pipelined connection to a Redis node (plus its wake-up
/// connection, and the spares of client_options::blocking_connections); copies share them.
/// When the last copy is destroyed the connections close, and requests still in
/// flight complete with errc::cancelled (the library's own operations hold copies while they
/// run). Thread-safe: see client.hpp for the threads that run I/O and completions.
class DLOCK_EXPORT client {
 public:
  /// Parses the URL (see parse_endpoint) and prepares the connection; connects lazily, on the
  /// first request. Throws std::system_error: errc::invalid_argument on a bad URL,
  /// errc::tls_error when a TLS file of options.tls cannot be loaded.
  explicit client(std::string_view url, client_options options = {});
  /// The same, for an endpoint already parsed.
  explicit client(endpoint where, client_options options = {});

  /// The node, with the credentials of options() applied.
  const endpoint& where() const noexcept;
  /// The options the client was created with.
  const client_options& options() const noexcept;
  /// dlock's I/O executor, where async completions run unless the handler names another.
  detail::io_executor get_executor() const noexcept;

  /// Sends a command and completes with its reply, or with an array of replies for a pipelined
  /// command. Signature void(std::error_code, reply). An error reply from the server completes
  /// with its errc (wrong_type, no_permission, ...) and the reply carries the server's text.
  /// timeout, connection_lost: the command may have run. node_unreachable: it was not sent.
  /// invalid_argument, nothing sent: a command that would change the shared connection's state
  /// (command::changes_session()), under every lock of this client; set the database and user
  /// in the URL or client_options, and use dlock::transaction for WATCH/MULTI/EXEC.
  template <class CompletionToken>
  auto async_exec(command cmd, CompletionToken&& token) {
    return detail::initiate<void(std::error_code, reply)>(
        std::forward<CompletionToken>(token), get_executor(),
        [this, cmd = std::move(cmd)](detail::unique_function<void(std::error_code, reply)> h) mutable {
          start_exec(std::move(cmd), options().request_timeout, std::move(h));
        });
  }

  /// Blocking form of async_exec(): returns the reply and sets ec.
  reply exec(command cmd, std::error_code& ec);
  /// Blocking form of async_exec(); throws std::system_error on failure.
  reply exec(command cmd);

  /// The node that serves `key`, as "host:port": where() for a single node; for a Redis
  /// Cluster (redis-cluster://), the master of the key's slot by the client's map, which is
  /// read from the cluster first if the client has none yet (blocking, up to the request
  /// timeout; "" and ec set when it cannot be read or no node serves the slot).
  std::string node_for(std::string_view key, std::error_code& ec) const;

  /// Closes the connection; requests in flight complete with errc::cancelled. A later request
  /// reconnects.
  void disconnect();

 private:
  friend struct detail::access;

  // The type-erased core of async_exec; `timeout` bounds the whole request.
  void start_exec(command cmd, std::chrono::milliseconds timeout,
                  detail::unique_function<void(std::error_code, reply)> handler);
  // The blocking fast path behind exec(). When the connection is idle (nothing queued or in
  // flight, plain TCP or unix socket) and this is not the I/O thread, the calling thread sends
  // `cmd` and reads its reply itself, within `timeout`, and returns true with the reply and ec
  // as exec() would; otherwise it returns false having sent nothing.
  bool try_exec_direct(const command& cmd, std::chrono::milliseconds timeout, reply& out,
                       std::error_code& ec);

  // Another handle on `link`'s connections (access::client_of).
  explicit client(std::shared_ptr<detail::node_link> link) : link_(std::move(link)) {}

  // The node's connections (requests, wake-ups, spares for blocking calls), shared by the
  // copies: the last copy's destruction closes them all at once, with requests still in flight
  // completing with errc::cancelled.
  std::shared_ptr<detail::node_link> link_;
  bool dedicated_ = false;  // not shared: commands that change the session are allowed
};

}  // namespace dlock
