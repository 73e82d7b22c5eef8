// net/socket_link.hpp: one connect's socket, TLS session and buffers. Private to the
// connection (net/connection.cpp, and its direct path in net/connection_direct.cpp).
#pragma once

#include <asio/generic/stream_protocol.hpp>
#include <asio/ssl.hpp>
#include <asio/write.hpp>

#include <array>
#include <optional>
#include <string>
#include <utility>

#include "dlock/detail/async.hpp"

namespace dlock::detail {

// One connect's socket, the TLS session over it if any, and its buffers. Each connect makes a
// fresh one and every operation started on it holds it: a socket closed by fail() still
// completes its pending operations (aborted) later, an ssl::stream must outlive its operations,
// and stale completions must never touch the next connection's socket or buffers.
struct socket_link {
  explicit socket_link(const io_executor& ex) : socket(ex) {}

  // One branch per operation, not per byte: the plain path stays a plain socket.
  template <class Handler>
  void async_read_some(Handler&& handler) {
    if (tls) return tls->async_read_some(asio::buffer(read_buf), std::forward<Handler>(handler));
    socket.async_read_some(asio::buffer(read_buf), std::forward<Handler>(handler));
  }
  template <class Handler>
  void async_write_all(Handler&& handler) {
    if (tls) {
      return asio::async_write(*tls, asio::buffer(write_buf), std::forward<Handler>(handler));
    }
    asio::async_write(socket, asio::buffer(write_buf), std::forward<Handler>(handler));
  }

  asio::generic::stream_protocol::socket socket;
  std::optional<asio::ssl::stream<asio::generic::stream_protocol::socket&>> tls;
  bool tls_established = false;
  bool heard_back = false;  // some bytes arrived on this socket
  std::string write_buf;
  std::array<char, 16384> read_buf{};
};

}  // namespace dlock::detail
