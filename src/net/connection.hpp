// net/connection.hpp: one pipelined connection to one Redis node. Private.
//   connection  queues requests from any thread, writes them in batches, matches replies in
//               order, enforces deadlines, reconnects on demand with backoff, speaks TLS with
//               host-name verification for rediss://, logs in
//   socket_link one connect's socket (and TLS session); defined in connection.cpp
// Thread-safety: submit() and close() may be called from any thread; everything else runs on
// the runtime's I/O thread.
#pragma once

#include <asio/generic/stream_protocol.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "dlock/client.hpp"
#include "resp/reply_reader.hpp"

namespace asio::ssl {
class context;
}

namespace dlock::detail {

struct socket_link;

using clock = std::chrono::steady_clock;
using reply_handler = unique_function<void(std::error_code, reply)>;

class connection : public std::enable_shared_from_this<connection> {
 public:
  // For a TLS endpoint, loads options.tls's files now; throws std::system_error
  // (errc::tls_error) when one cannot be loaded, errc::invalid_argument for TLS over a unix
  // socket without tls.server_name (there is no host name to verify).
  connection(endpoint where, client_options options);

  const endpoint& where() const noexcept { return where_; }
  const client_options& options() const noexcept { return options_; }
  io_executor executor() const noexcept { return executor_; }

  // Queues `payload` (holding `replies` commands). The handler runs exactly once, on the I/O
  // thread: with the reply (an array when replies > 1) or an error, by `deadline` at the latest.
  void submit(std::string payload, std::size_t replies, clock::time_point deadline,
              reply_handler handler);
  void close(std::error_code reason);

  // Makes this a subscriber connection: pub/sub "message" pushes go to on_push instead of being
  // taken for replies, and on_drop runs whenever the socket ends (subscriptions die with it).
  // Both run on the I/O thread. Call once, before the first request.
  void set_push_handlers(std::function<void(const reply&)> on_push, std::function<void()> on_drop);

 private:
  struct request {
    std::string payload;
    std::size_t expected = 1;
    std::vector<reply> got;
    clock::time_point deadline;
    reply_handler handler;
    bool internal = false;  // AUTH/SELECT of the handshake
  };
  enum class state { idle, connecting, ready };

  void enqueue(request req);
  void kick();
  void start_connect();
  void try_endpoint(std::size_t index);
  void on_connected();
  void start_tls();
  void start_session();  // AUTH/SELECT, or on TLS a PING that proves the session was accepted
  // A TLS handshake or session that failed while connecting: tls_error for OpenSSL's verdicts,
  // node_unreachable for the network's; the text names the reason.
  void fail_tls(std::error_code ec, const char* stage);
  std::string tls_peer_name() const;
  std::string stalled_handshake_text() const;  // why a TLS connect timed out, or ""
  void become_ready();
  void start_write();
  void start_read();
  void on_reply(reply r);
  void complete(request& req, std::error_code ec, reply r);
  // Ends the current socket. In-flight requests fail with `inflight_error`; if the failure was
  // a connect, queued ones fail too (with `queued_error`) and reconnects back off.
  // `text`, when given, becomes the error reply the failed requests see (the reason in words).
  void fail(std::error_code inflight_error, bool connect_failed, std::error_code queued_error = {},
            std::string text = {});
  void arm_deadline_timer();
  void on_deadline();

  endpoint where_;
  client_options options_;
  io_executor executor_;
  std::shared_ptr<asio::ssl::context> tls_context_;  // null for a plain connection
  std::shared_ptr<socket_link> link_;                // the current connect's socket
  asio::ip::tcp::resolver resolver_;
  std::vector<asio::generic::stream_protocol::endpoint> targets_;
  asio::steady_timer connect_timer_;
  asio::steady_timer deadline_timer_;
  clock::time_point deadline_armed_ = clock::time_point::max();

  state state_ = state::idle;
  unsigned generation_ = 0;  // bumped per socket; stale completions compare and bail out
  std::deque<request> pending_;   // not yet written
  std::deque<request> inflight_;  // written, awaiting replies in order
  bool writing_ = false;
  std::unique_ptr<reply_reader> reader_;

  std::function<void(const reply&)> on_push_;
  std::function<void()> on_drop_;

  std::chrono::milliseconds backoff_;
  clock::time_point backoff_until_{};
  std::error_code last_connect_error_;
  std::string last_connect_text_;  // what requests failed fast during the backoff are told
};

}  // namespace dlock::detail
