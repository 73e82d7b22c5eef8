/// @file
/// dlock/endpoint.hpp: where a Redis node is and how to log in.
/// - endpoint:        host/port or unix socket path, credentials, database
/// - parse_endpoint:  reads `redis[s]://[user:pass@]host:port[/db]` and `unix:///path.sock[?db=N]`
///
/// Plain values; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <system_error>

#include "dlock/export.hpp"

namespace dlock {

/// Where a Redis node is and how to log in: host/port or unix socket path, credentials, database.
struct DLOCK_EXPORT endpoint {
  std::string host;            ///< name or address; empty for a unix socket
  unsigned short port = 6379;  ///< TCP port; unused for a unix socket
  std::string socket_path;     ///< set for unix:// endpoints
  std::string user;            ///< ACL user; empty means AUTH with the password only
  std::string password;        ///< empty means no AUTH
  int db = 0;                  ///< SELECTed after connecting when not 0
  /// TLS (rediss://): the server's certificate is verified against the CA and the host name
  /// (or client_options::tls.server_name); see client_options::tls.
  bool tls = false;

  /// True for a unix socket endpoint (socket_path set).
  bool is_unix() const noexcept { return !socket_path.empty(); }
  /// "host:port" or the socket path; never contains the password.
  std::string to_string() const;
};

/// Parses a URL. Accepts redis:// (user and password percent-decoded, default port 6379, db 0),
/// rediss:// (the same over TLS: sets `tls`) and unix://. Fails with errc::invalid_argument for
/// an unknown scheme, an empty host, a port outside 1-65535, a db that is not a number in 0-65535,
/// or trailing junk.
DLOCK_EXPORT endpoint parse_endpoint(std::string_view url, std::error_code& ec);
/// As above; throws std::system_error on failure.
DLOCK_EXPORT endpoint parse_endpoint(std::string_view url);

}  // namespace dlock
