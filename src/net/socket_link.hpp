// SPDX-License-Identifier: Apache-2.0
// net/socket_link.hpp: one connect's socket, TLS session and buffers. Private to the
// connection (net/connection.cpp, and its direct path in net/connection_direct.cpp).
#pragma once

#include <unistd.h>

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
  socket_link(const socket_link&) = delete;
  socket_link& operator=(const socket_link&) = delete;
  ~socket_link() { close(); }

  // A plain socket that callers drive (net/connection_direct.cpp) leaves the I/O thread's
  // epoll set: every reply a caller reads would otherwise wake the I/O thread for nothing
  // (edge-triggered EPOLLIN with no operation armed), two wake-ups per blocking lock cycle.
  // It comes back before the I/O thread starts an operation on it again.
  void leave_reactor() {
    if (!in_reactor || tls || !socket.is_open()) return;
    std::error_code ec;
    int handle = socket.release(ec);
    if (ec) return;
    released_fd = handle;
    in_reactor = false;
  }
  void rejoin_reactor(std::error_code& ec) {
    if (in_reactor) return;
    socket.assign(protocol, released_fd, ec);
    if (ec) return;  // the caller fails the connection; close() still closes the fd
    released_fd = -1;
    in_reactor = true;
  }
  // The socket's descriptor, in the reactor or not (-1 when closed).
  int fd() { return in_reactor ? socket.native_handle() : released_fd; }
  void close() {
    std::error_code ignored;
    socket.close(ignored);
    if (released_fd >= 0) ::close(std::exchange(released_fd, -1));
    in_reactor = true;
  }

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
  bool in_reactor = true;   // see leave_reactor()
  int released_fd = -1;     // the descriptor while out of the reactor
  asio::generic::stream_protocol protocol{0, 0};  // set at connect: what rejoin_reactor assigns
  std::string write_buf;
  std::array<char, 16384> read_buf{};
};

}  // namespace dlock::detail
