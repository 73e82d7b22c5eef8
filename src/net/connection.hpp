// SPDX-License-Identifier: Apache-2.0
// net/connection.hpp: one pipelined connection to one Redis node. Private.
//   connection  queues requests from any thread, writes them in batches, matches replies in
//               order, enforces deadlines, reconnects on demand with backoff, speaks TLS with
//               host-name verification for rediss://, logs in
//   socket_link one connect's socket (and TLS session); defined in connection.cpp
// Thread-safety: submit(), close() and try_exchange_direct() may be called from any thread;
// everything else runs on the runtime's I/O thread, which owns the socket except while a
// caller's direct exchange holds it (see `driver_`).
#pragma once

#include <asio/generic/stream_protocol.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "dlock/client.hpp"
#include "dlock/observer.hpp"
#include "resp/reply_reader.hpp"

namespace asio::ssl {
class context;
}

namespace dlock::detail {

struct socket_link;
class sentinel_resolver;

using clock = std::chrono::steady_clock;
using reply_handler = unique_function<void(std::error_code, reply)>;

// How many requests the calling thread has submitted, to any connection, that have not
// completed yet. A blocking call may take a spare connection (node_link) only at 0, so that it
// never overtakes a request this thread sent before (a user's async write, an async release).
std::uint32_t unfinished_submissions_of_this_thread() noexcept;

// client_options::blocking_connections out of range: errc::invalid_argument (thrown).
void check_blocking_connections(const client_options& options);

// One request's place in its submitting thread's count (above): taken at construction, given
// back once, when released or destroyed.
class submission_mark {
 public:
  submission_mark() = default;
  explicit submission_mark(std::shared_ptr<std::atomic<std::uint32_t>> count)
      : count_(std::move(count)) {
    count_->fetch_add(1, std::memory_order_relaxed);
  }
  submission_mark(submission_mark&& other) noexcept = default;
  submission_mark& operator=(submission_mark&& other) noexcept {
    release();
    count_ = std::move(other.count_);
    return *this;
  }
  ~submission_mark() { release(); }
  void release() noexcept {
    if (count_) count_->fetch_sub(1, std::memory_order_release);
    count_.reset();
  }

 private:
  std::shared_ptr<std::atomic<std::uint32_t>> count_;
};

class connection : public std::enable_shared_from_this<connection> {
 public:
  // For a TLS endpoint, loads options.tls's files now; throws std::system_error
  // (errc::tls_error) when one cannot be loaded, errc::invalid_argument for TLS over a unix
  // socket without tls.server_name (there is no host name to verify).
  connection(endpoint where, client_options options);

  const endpoint& where() const noexcept { return where_; }
  // where().to_string(), made once: the label of this node's events (observe.hpp).
  const std::string& name() const noexcept { return name_; }
  const client_options& options() const noexcept { return options_; }
  io_executor get_executor() const noexcept { return executor_; }

  // Queues `payload` (holding `replies` commands). The handler runs exactly once, on the I/O
  // thread: with the reply (an array when replies > 1) or an error, by `deadline` at the latest.
  void submit(std::string payload, std::size_t replies, clock::time_point deadline,
              reply_handler handler);
  void close(std::error_code reason);

  // The blocking fast path, for a thread that is not the I/O thread. When the connection is
  // ready, plain (no TLS), not a subscriber and idle (nothing queued, in flight or being
  // written), the calling thread writes `payload` itself and reads the `replies` replies on the
  // socket until `deadline`, without waking the I/O thread; it then returns true with the
  // reply (an array when replies > 1) in `out` and the error, as submit()'s handler would get
  // them. While callers hold the socket, other callers join them: each writes its own request
  // and sleeps, and one of them at a time reads the replies for all (a session, see
  // connection_direct.cpp). Otherwise it returns false having written nothing, and the caller
  // uses submit().
  // A missed deadline, a reset or bytes that are not RESP fail the connection as on the async
  // path (timeout, connection_lost, protocol_error). A connection found closed by the server
  // while idle is failed too, and false is returned: submit() then goes out on a fresh one.
  bool try_exchange_direct(std::string_view payload, std::size_t replies,
                           clock::time_point deadline, std::error_code& ec, reply& out);

  // Whether requests are queued or in flight here, or a caller's direct exchange holds the
  // socket: true when another thread's work occupies the connection, false in the moment the
  // I/O thread takes to give the socket up after the last reply (node_link opens a spare
  // connection for the former only). Counts every request until just before its handler runs.
  bool occupied() const noexcept {
    auto d = driver_.load(std::memory_order_relaxed);
    return outstanding_.load(std::memory_order_relaxed) != 0 || d == driver::direct ||
           d == driver::direct_wanted;
  }
  // Neither occupied nor waiting for a caller: connecting, dropped (nothing reconnects a
  // connection that no request was submitted to), or in the moment after the last reply.
  bool dormant() const noexcept {
    return !occupied() && driver_.load(std::memory_order_relaxed) != driver::idle;
  }

  // Makes this a subscriber connection: pub/sub "message" and "smessage" pushes (and Redis
  // Cluster's unasked "sunsubscribe") go to on_push instead of being
  // taken for replies, and on_drop runs whenever the socket ends (subscriptions die with it).
  // Both run on the I/O thread. Call once, before the first request.
  void set_push_handlers(std::function<void(const reply&)> on_push, std::function<void()> on_drop);

  // redis-sentinel:// only, I/O thread: the sentinels announced a switch to `master`. A socket
  // to another node is closed (requests in flight fail with connection_lost; queued ones go to
  // the new master), and requests waiting for a master are sent now.
  void master_moved(const host_port& master);

 private:
  struct direct_waiter;  // a caller in a session (connection_direct.cpp)
  struct request {
    std::string payload;
    std::size_t expected = 1;
    std::vector<reply> got;
    clock::time_point deadline;
    reply_handler handler;
    bool internal = false;  // a request of the connect phase (AUTH, SELECT, the node check)
    bool in_transit = false;  // counted in in_transit_ until written or completed
    bool outstanding = false;  // counted in outstanding_ until completed
    // Counts in the submitting thread's unfinished_submissions_of_this_thread until completed
    // (or destroyed unanswered).
    submission_mark submitter{};
  };
  enum class state { idle, connecting, ready };
  // Who may touch the socket and `reader_`. The I/O thread holds it (`io`) from the first
  // connect on, and gives it up (`idle`) only when the connection is ready, plain, not a
  // subscriber, with nothing queued, in flight, being written or being read; a caller then
  // takes it (idle -> `direct`) for a session: its exchange and those of the callers that join
  // it. The I/O thread never waits for a caller: when it needs the socket meanwhile, it marks
  // it `direct_wanted` (no one joins then), and the last caller hands it back as `io` and posts
  // after_direct(). A session that failed is handed back as `broken`: the I/O thread fails the
  // socket (it may still deliver a late reply) before anything else.
  enum class driver : std::uint8_t { io, idle, direct, direct_wanted, broken };
  enum class claim { io, caller, broken };

  void enqueue(request req);
  void kick();
  void start_connect();
  void connect_to(host_port target);  // resolves the name, then try_endpoint()
  void try_endpoint(std::size_t index);
  void on_connected();
  // Tells the observer and the log sink (observe.hpp) of a connect, a failed one, or a drop.
  void report(connection_event::change what, std::error_code ec);
  void start_tls();
  void start_session();  // AUTH/SELECT, or on TLS a PING that proves the session was accepted
  // A TLS handshake or session that failed while connecting: tls_error for OpenSSL's verdicts,
  // node_unreachable for the network's; the text names the reason.
  void fail_tls(std::error_code ec, const char* stage);
  std::string tls_peer_name() const;
  std::string stalled_handshake_text() const;  // why a TLS connect timed out, or ""
  // The handshake's replies: AUTH/SELECT errors fail the connect; with Sentinel, ROLE must say
  // master. Then check_node().
  void check_session(const std::vector<reply>& steps, bool role_asked);
  void check_node();  // client_options::restart_quarantine, then become_ready()
  void send_internal(std::string payload, std::size_t replies, reply_handler handler);
  void write_connect_phase(std::string payload);
  void become_ready();
  void start_write();
  void start_read();
  void ensure_reading();
  // Whether this connection may go without a read armed while nothing is in flight (and so be
  // handed to callers): plain sockets of request/reply connections. TLS may receive records
  // (session tickets, alerts) unasked, and a subscriber receives pushes at any time.
  bool idles_without_read() const noexcept { return !tls_context_ && !on_push_; }
  // A socket that nobody reads while idle: readable, hung up or in error means the server
  // closed it or sent bytes nobody asked for. Checked before the first write after idling.
  static bool spoke_while_idle(int fd) noexcept;
  claim claim_socket();
  bool take_socket();     // for a write: false when a caller holds it or it had to be failed
  void maybe_release();   // gives the socket to callers if nothing is under way
  void leave_reactor();   // socket_link::leave_reactor, once callers drive the socket
  bool rejoin_reactor();  // before an operation of the I/O thread's; false: it failed
  void after_direct();    // posted by a caller that handed the socket back as io or broken
  // Caller side. `exchanged`: a request and its reply went through (not a refusal to start).
  void hand_back(bool broken, bool exchanged = false);
  // Caller side, with session_mutex_ held: takes the idle socket (idle -> direct) and opens a
  // session, or refuses (false, nothing written) as try_exchange_direct() does.
  bool open_session(clock::time_point deadline);
  // With session_mutex_ held: writes session_outbox_ until it stays empty.
  void write_outbox(std::unique_lock<std::mutex>& lock, clock::time_point deadline);
  // Takes session_mutex_: whether a writer blocked in send() should give up (its write ends as
  // a timeout), because the session failed elsewhere or a request on its FIFO is past due.
  bool writer_should_stop();
  // The session's reader: reads and hands out replies in order until `me`'s are in, then hands
  // the reading on to the next waiter, or ends the session when none is left.
  void lead_session(direct_waiter& me);
  // With session_mutex_ held: every request written in the session fails with `code` (its
  // outcome is unknown), one still in the outbox goes to the I/O thread (unsent), and the
  // socket goes back to the I/O thread, which fails it.
  void fail_session(std::error_code code, std::vector<std::atomic<std::uint32_t>*>& woken);
  void on_reply(reply r);
  static bool is_push(const reply& r);
  // READONLY: with Sentinel, the node we took for the master was demoted.
  static bool is_demoted_reply(const reply& r);
  // The replies of a request of several commands that opened a transaction (a QUEUED among
  // them) which its last did not end: an EXEC the server does not know (renamed) is queued as
  // an error, and the connection stays in MULTI, where every later command would only be
  // queued. The socket then ends after this request, like a demoted master's.
  static bool leaves_a_transaction_open(const std::vector<reply>& steps);
  void complete(request& req, std::error_code ec, reply r);
  // Ends the current socket. In-flight requests fail with `inflight_error`; if the failure was
  // a connect, queued ones fail too (with `queued_error`) and reconnects back off.
  // `text`, when given, becomes the error reply the failed requests see (the reason in words).
  void fail(std::error_code inflight_error, bool connect_failed, std::error_code queued_error = {},
            std::string text = {});
  // With Sentinel: a connect that failed for want of a master (no majority yet, or a replica
  // where the sentinels named the master). As when the named master cannot be reached, queued
  // requests stay queued, and the connect is tried again soon, until their deadlines.
  void fail_awaiting_master(std::string text);
  void arm_deadline_timer();
  void on_deadline();

  endpoint where_;
  std::shared_ptr<sentinel_resolver> sentinel_;  // redis-sentinel:// only
  host_port target_;  // the node of this connect: where_'s, or the master the sentinels named
  bool watching_master_ = false;  // sentinel_ tells us of switches
  // The last connect failed for want of a master: requests queue instead of failing fast.
  bool awaiting_master_ = false;
  bool master_unknown_ = false;  // the sentinels know no such master, or none answered
  // A READONLY among the replies of the request being read, or a transaction they left open:
  // the socket ends after it.
  bool demoted_ = false;
  std::string master_wait_text_;  // why the last connect found no master; cleared when ready
  std::string name_;
  client_options options_;
  io_executor executor_;
  std::shared_ptr<asio::ssl::context> tls_context_;  // null for a plain connection
  std::shared_ptr<socket_link> link_;                // the current connect's socket
  asio::ip::tcp::resolver resolver_;
  std::vector<asio::generic::stream_protocol::endpoint> targets_;
  asio::steady_timer master_retry_timer_;  // the next connect while awaiting_master_
  asio::steady_timer connect_timer_;
  asio::steady_timer deadline_timer_;
  clock::time_point deadline_armed_ = clock::time_point::max();

  state state_ = state::idle;
  unsigned generation_ = 0;  // bumped per socket; stale completions compare and bail out
  std::deque<request> pending_;   // not yet written
  std::deque<request> inflight_;  // written, awaiting replies in order
  bool writing_ = false;
  std::string connect_backlog_;  // connect-phase requests waiting for the write before them
  bool reading_ = false;  // an async read is armed on the current socket
  std::unique_ptr<reply_reader> reader_;

  std::atomic<driver> driver_{driver::io};
  // Requests submitted and not yet written (or completed), and close()s not yet run. A caller's
  // exchange must not overtake them: a thread that submits A and then makes blocking call B
  // expects A to reach the server first, as when both were queued. (Counting until enqueue()
  // would not do: the caller may hold the socket already, and enqueue() leaves A queued.)
  std::atomic<std::uint32_t> in_transit_{0};
  std::atomic<std::uint32_t> outstanding_{0};  // submitted requests not yet completed
  // Published with driver_ = idle (release), read by the caller that took it (acquire).
  int direct_fd_ = -1;
  socket_link* direct_link_ = nullptr;
  // A caller's exchange ran since the socket last joined the I/O thread's reactor.
  std::atomic<bool> direct_used_{false};
  // A fail() that came while a caller held the socket: run when it is handed back.
  std::optional<std::error_code> deferred_fail_;

  // The callers' session on the socket (connection_direct.cpp): open from the caller that took
  // it (idle -> direct) until the last reply of the requests written meanwhile was read.
  std::mutex session_mutex_;
  bool session_open_ = false;                 // guarded by session_mutex_
  std::deque<direct_waiter*> session_wire_;   // written, awaiting replies in order; guarded
  std::error_code session_failed_;            // a write failed: the reader fails all; guarded
  // Requests of joiners not yet written, and whether one of them is writing (outside the lock):
  // who joins while another writes leaves its request here for that writer. Guarded.
  std::string session_outbox_;
  bool session_writing_ = false;
  bool session_hand_back_ = false;  // the session failed during a write: the writer hands back

  std::function<void(const reply&)> on_push_;
  std::function<void()> on_drop_;

  std::chrono::milliseconds backoff_;
  clock::time_point backoff_until_{};
  std::error_code last_connect_error_;
  std::string last_connect_text_;  // what requests failed fast during the backoff are told
};

// SUBSCRIBE (or, `sharded`, SSUBSCRIBE) `channel`, in RESP, for a subscriber connection
// (set_push_handlers). Formatted here: dlock::command refuses them, which is right for shared
// connections only.
std::string subscribe_payload(std::string_view channel, bool sharded = false);

// How many direct exchanges (try_exchange_direct() returning true) this process made: for tests
// and benchmarks.
std::uint64_t direct_exchange_count() noexcept;

}  // namespace dlock::detail
