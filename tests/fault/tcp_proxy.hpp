// SPDX-License-Identifier: Apache-2.0
// tests/fault/tcp_proxy.hpp: a loopback TCP proxy between clients and one redis-server, for the
// network faults that netem would give elsewhere (this kernel has none; MACHINE-NOTES.md).
//   tcp_proxy  listens on a free 127.0.0.1 port and forwards to a target port, one thread;
//              adds latency per direction, stalls (partition), drops one direction, refuses
// Thread-safe: the setters may be called from any thread while traffic flows.
//
// | mode           | client -> server       | server -> client       | when it ends            |
// | pass           | delayed by `up`        | delayed by `down`      | -                       |
// | stall          | held (TCP retransmits) | held                   | held bytes delivered    |
// | drop_requests  | discarded              | delivered              | tainted conns closed    |
// | drop_replies   | delivered              | discarded              | tainted conns closed    |
// | refuse         | the port is closed: connections end, connect() is refused (a dead host) |
// A stall is what iptables DROP does to a live connection: nothing arrives until the partition
// heals, then TCP delivers everything, late (a SET NX sent during the partition can land after
// the client gave up). Likewise a connection the client closes still delivers, with its delay,
// what the client sent before closing, and only then ends. Dropping one direction loses bytes, which TCP never does on a live
// connection, so a connection that lost bytes is closed when the mode changes back.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <thread>

namespace dlock::fault {

class tcp_proxy {
 public:
  enum class mode { pass, stall, drop_requests, drop_replies, refuse };

  explicit tcp_proxy(unsigned short target_port);
  ~tcp_proxy();
  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;

  unsigned short port() const noexcept { return port_; }
  std::string url() const;  // redis://127.0.0.1:PORT

  // One-way delays: `up` for client -> server bytes, `down` for the replies. Order is kept.
  void set_latency(std::chrono::milliseconds up, std::chrono::milliseconds down);
  // Delays the requests of the connections open now by `up` (replacing set_latency's for them);
  // connections opened later get set_latency's. A slow path that a client's reconnection
  // leaves behind: its requests still land late, its new connection is fast.
  void delay_open_connections(std::chrono::milliseconds up);
  void set_mode(mode m);
  mode current_mode() const;

  // Connections accepted so far, and bytes forwarded (for the kit's own tests).
  std::uint64_t connections() const noexcept { return accepted_.load(); }
  std::uint64_t bytes_forwarded() const noexcept { return forwarded_.load(); }
  // For each connection the client closed while requests were still on their way to the
  // server (as a client does when a request times out), the bytes of those requests: they land
  // late, after the latency, all the same.
  std::vector<std::string> abandoned_requests() const;

 private:
  struct state;
  void run();
  void wake();

  unsigned short target_port_;
  unsigned short port_ = 0;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::unique_ptr<state> state_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> accepted_{0}, forwarded_{0};
  std::thread thread_;
};

}  // namespace dlock::fault
