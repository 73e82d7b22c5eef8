// net/connection.hpp: one pipelined connection to one Redis node. Private.
//   connection  queues requests from any thread, writes them in batches, matches replies in
//               order, enforces deadlines, reconnects on demand with backoff, logs in
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

namespace dlock::detail {

using clock = std::chrono::steady_clock;
using reply_handler = unique_function<void(std::error_code, reply)>;

class connection : public std::enable_shared_from_this<connection> {
 public:
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
  void become_ready();
  void start_write();
  void start_read();
  void on_reply(reply r);
  void complete(request& req, std::error_code ec, reply r);
  // Ends the current socket. In-flight requests fail with `inflight_error`; if the failure was
  // a connect, queued ones fail too (with `queued_error`) and reconnects back off.
  void fail(std::error_code inflight_error, bool connect_failed, std::error_code queued_error = {});
  void arm_deadline_timer();
  void on_deadline();

  endpoint where_;
  client_options options_;
  io_executor executor_;
  asio::generic::stream_protocol::socket socket_;
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
  std::string write_buf_;
  std::unique_ptr<reply_reader> reader_;
  std::array<char, 16384> read_buf_{};

  std::function<void(const reply&)> on_push_;
  std::function<void()> on_drop_;

  std::chrono::milliseconds backoff_;
  clock::time_point backoff_until_{};
  std::error_code last_connect_error_;
};

}  // namespace dlock::detail
