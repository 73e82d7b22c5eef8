// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/endpoint.hpp: where a Redis node is and how to log in.
/// - endpoint:        host/port or unix socket path, credentials, database
/// - parse_endpoint:  reads `redis[s]://[user:pass@]host:port[/db]`, `unix:///path.sock[?db=N]`
///                    `redis-sentinel://[user:pass@]s1:26379,s2:26379/mymaster[/db]` and
///                    `redis[s]-cluster://[user:pass@]n1:6379,n2:6379` (Redis Cluster)
///
/// Plain values; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dlock/export.hpp"

namespace dlock {

/// Where a Redis node is and how to log in: host/port or unix socket path, credentials, database.
/// A host name or address and a TCP port: one sentinel of a redis-sentinel:// endpoint.
struct DLOCK_EXPORT host_port {
  std::string host{};          ///< name or address
  unsigned short port = 26379; ///< TCP port
  /// "host:port", or "[v6]:port" for an IPv6 address.
  std::string to_string() const;
  friend bool operator==(const host_port&, const host_port&) = default;
};

/// Where a Redis node is and how to log in: host/port or unix socket path, credentials, database;
/// or, for a master that Redis Sentinel watches, the sentinels to ask and the master's name.
struct DLOCK_EXPORT endpoint {
  std::string host{};          ///< name or address; empty for a unix socket
  unsigned short port = 6379;  ///< TCP port; unused for a unix socket
  std::string socket_path{};   ///< set for unix:// endpoints
  std::string user{};          ///< ACL user; empty means AUTH with the password only
  std::string password{};      ///< empty means no AUTH
  int db = 0;                  ///< SELECTed after connecting when not 0
  /// TLS (rediss://): the server's certificate is verified against the CA and the host name
  /// (or client_options::tls.server_name); see client_options::tls.
  bool tls = false;
  /// redis-sentinel:// only: the sentinels that watch the master, asked on every connect (host
  /// and port above stay empty); the credentials and db above are the master's.
  std::vector<host_port> sentinels{};
  /// redis-sentinel:// only: the name the sentinels know the master by (`sentinel monitor NAME`).
  std::string master_name{};
  /// redis[s]-cluster:// (Redis Cluster): each request goes to the master of its key's slot.
  bool cluster = false;
  /// redis[s]-cluster:// only: the nodes to read the slot map from first (host and port above
  /// stay empty); the credentials and TLS above are every node's.
  std::vector<host_port> seeds{};

  /// True for a unix socket endpoint (socket_path set).
  bool is_unix() const noexcept { return !socket_path.empty(); }
  /// True for a redis-sentinel:// endpoint (master_name set).
  bool is_sentinel() const noexcept { return !master_name.empty(); }
  /// True for a redis-cluster:// or rediss-cluster:// endpoint.
  bool is_cluster() const noexcept { return cluster; }
  /// "host:port", "unix:///path", "redis-sentinel://s1:26379,s2:26379/NAME" or
  /// "redis-cluster://n1:6379,n2:6379"; never contains the password.
  std::string to_string() const;
};

/// Parses a URL. Accepts redis:// (user and password percent-decoded, default port 6379, db 0),
/// rediss:// (the same over TLS: sets `tls`), unix://, and redis-sentinel:// (one or more
/// sentinels separated by commas, default port 26379, then the master's name, letters, digits,
/// '.', '-' and '_'; the user, password and db are the master's; no TLS), and
/// redis-cluster:// / rediss-cluster:// (one or more seed nodes separated by commas, default
/// port 6379, no db). Fails with errc::invalid_argument for an unknown scheme, an empty host, a
/// port outside 1-65535, a db that is not a number in 0-65535 (or any db for a cluster), a
/// missing master name, or trailing junk.
DLOCK_EXPORT endpoint parse_endpoint(std::string_view url, std::error_code& ec);
/// As above; throws std::system_error on failure.
DLOCK_EXPORT endpoint parse_endpoint(std::string_view url);

}  // namespace dlock
