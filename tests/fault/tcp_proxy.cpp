// SPDX-License-Identifier: Apache-2.0
// One poll() loop forwards every connection. Bytes read from either side are queued with the
// time they may leave (now + that direction's latency, never before the bytes queued ahead of
// them, so order is kept); the loop writes what is due and sleeps until the next byte is due.
#include "fault/tcp_proxy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/loopback.hpp"
#include "support/redis_server.hpp"

namespace dlock::fault {
namespace {

using steady = std::chrono::steady_clock;

struct chunk {
  steady::time_point due;
  std::string bytes;
  std::size_t sent = 0;
};

// One direction of one connection: bytes waiting to be written to `to`.
struct pipe_dir {
  std::deque<chunk> queue;
  bool tainted = false;  // bytes were dropped: the stream is broken
  bool want_write = false;
};

struct conn {
  int client = -1, server = -1;
  pipe_dir up, down;  // up: client -> server, down: server -> client
  bool dead = false;
  // The client closed with requests still on the way: they reach the server all the same, as
  // TCP delivers what was sent before a FIN (a timed-out command that runs late); then it ends.
  bool client_gone = false;
  // Set by delay_open_connections(): this connection's own client -> server delay.
  std::optional<std::chrono::milliseconds> up_delay;
};

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

int listen_on(unsigned short port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = test::loopback_address(port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 128) != 0) {
    ::close(fd);
    return -1;
  }
  set_nonblocking(fd);
  return fd;
}

int connect_to(unsigned short port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = test::loopback_address(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_nonblocking(fd);
  return fd;
}

}  // namespace

struct tcp_proxy::state {
  std::mutex mutex;
  std::chrono::milliseconds up{0}, down{0};
  mode m = mode::pass;
  std::optional<std::chrono::milliseconds> delay_for_open;  // for the proxy thread to apply
  std::vector<std::string> abandoned;
  std::vector<conn> conns;  // touched by the proxy thread only
};

tcp_proxy::tcp_proxy(unsigned short target_port)
    : target_port_(target_port), state_(std::make_unique<state>()) {
  // One of free_port()'s, so that it never takes the port of a server another test killed,
  // whose clients would then talk to the proxy's target.
  for (int attempt = 0; listen_fd_ < 0 && attempt < 6; ++attempt) {
    listen_fd_ = listen_on(test::free_port());
  }
  if (listen_fd_ < 0) throw std::runtime_error("tcp_proxy: cannot listen");
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("tcp_proxy: pipe");
  thread_ = std::thread([this] { run(); });
}

tcp_proxy::~tcp_proxy() {
  stop_ = true;
  wake();
  thread_.join();
  for (auto& c : state_->conns) {
    if (c.client >= 0) ::close(c.client);
    if (c.server >= 0) ::close(c.server);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

std::string tcp_proxy::url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

void tcp_proxy::set_latency(std::chrono::milliseconds up, std::chrono::milliseconds down) {
  {
    std::lock_guard lock{state_->mutex};
    state_->up = up;
    state_->down = down;
  }
  wake();
}

void tcp_proxy::delay_open_connections(std::chrono::milliseconds up) {
  {
    std::lock_guard lock{state_->mutex};
    state_->delay_for_open = up;
  }
  wake();
}

std::vector<std::string> tcp_proxy::abandoned_requests() const {
  std::lock_guard lock{state_->mutex};
  return state_->abandoned;
}

void tcp_proxy::set_mode(mode m) {
  {
    std::lock_guard lock{state_->mutex};
    state_->m = m;
  }
  wake();
}

tcp_proxy::mode tcp_proxy::current_mode() const {
  std::lock_guard lock{state_->mutex};
  return state_->m;
}

void tcp_proxy::wake() {
  char c = 1;
  (void)!::write(wake_pipe_[1], &c, 1);
}

void tcp_proxy::run() {
  auto& conns = state_->conns;
  while (!stop_) {
    std::chrono::milliseconds up, down;
    mode m;
    {
      std::lock_guard lock{state_->mutex};
      up = state_->up;
      down = state_->down;
      m = state_->m;
    }
    // A connection that lost bytes is broken: close it once bytes flow again.
    if (m != mode::drop_requests && m != mode::drop_replies) {
      for (auto& c : conns) c.dead |= c.up.tainted || c.down.tainted;
    }
    if (m == mode::refuse) {
      for (auto& c : conns) c.dead = true;
      if (listen_fd_ >= 0) {  // a closed port: connect() is refused, as by a dead host
        ::close(listen_fd_);
        listen_fd_ = -1;
      }
    } else if (listen_fd_ < 0) {
      listen_fd_ = listen_on(port_);
    }

    // Close what died, then write whatever is due.
    for (auto& c : conns) {
      if (c.client_gone && c.up.queue.empty()) c.dead = true;
      if (!c.dead) continue;
      ::close(c.client);
      ::close(c.server);
      c.client = c.server = -1;
    }
    std::erase_if(conns, [](const conn& c) { return c.dead; });

    auto now = steady::now();
    auto next_due = steady::time_point::max();
    auto flush = [&](conn& c, pipe_dir& d, int to) {
      d.want_write = false;
      if (m == mode::stall) return;
      while (!d.queue.empty() && d.queue.front().due <= now) {
        auto& front = d.queue.front();
        ssize_t n = ::send(to, front.bytes.data() + front.sent, front.bytes.size() - front.sent,
                           MSG_NOSIGNAL);
        if (n < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK) {
            d.want_write = true;
          } else {
            c.dead = true;
          }
          return;
        }
        forwarded_ += static_cast<std::uint64_t>(n);
        front.sent += static_cast<std::size_t>(n);
        if (front.sent == front.bytes.size()) d.queue.pop_front();
      }
      if (!d.queue.empty()) next_due = std::min(next_due, d.queue.front().due);
    };
    for (auto& c : conns) {
      flush(c, c.up, c.server);
      if (!c.client_gone) flush(c, c.down, c.client);
    }

    std::vector<pollfd> fds;
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    if (listen_fd_ >= 0) fds.push_back({listen_fd_, POLLIN, 0});
    std::size_t first_conn = fds.size();
    for (auto& c : conns) {
      // A negative fd is skipped by poll(): a gone client is not read from again.
      fds.push_back({c.client_gone ? -1 : c.client,
                     static_cast<short>(POLLIN | (c.down.want_write ? POLLOUT : 0)), 0});
      fds.push_back({c.server, static_cast<short>(POLLIN | (c.up.want_write ? POLLOUT : 0)), 0});
    }
    int timeout_ms = -1;
    if (next_due != steady::time_point::max()) {
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_due - steady::now());
      timeout_ms = static_cast<int>(std::max<long long>(wait.count(), 0));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;

    if (fds[0].revents & POLLIN) {
      char drain[64];
      while (::read(wake_pipe_[0], drain, sizeof drain) > 0) {
      }
    }
    if (listen_fd_ >= 0 && (fds[1].revents & POLLIN)) {
      for (;;) {
        int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (client < 0) break;
        int server = connect_to(target_port_);
        if (server < 0) {  // the node is down: so is the proxied connection
          ::close(client);
          continue;
        }
        int one = 1;
        ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        ++accepted_;
        conn c;
        c.client = client;
        c.server = server;
        conns.push_back(std::move(c));
      }
    }
    // Settings again: bytes that arrived after a set_mode() returned must obey it.
    {
      std::lock_guard lock{state_->mutex};
      up = state_->up;
      down = state_->down;
      if (state_->m != mode::refuse) m = state_->m;
      if (auto delay = std::exchange(state_->delay_for_open, std::nullopt)) {
        for (auto& c : conns) c.up_delay = delay;
      }
    }
    now = steady::now();
    auto pull = [&](conn& c, int from, short revents, pipe_dir& d, std::chrono::milliseconds delay,
                    bool drop) {
      if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
      char buf[65536];
      ssize_t n = ::recv(from, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        if (from == c.client && !c.up.queue.empty() && !c.up.tainted) {
          c.client_gone = true;
          std::string on_the_way;
          for (const auto& piece : c.up.queue) on_the_way += piece.bytes.substr(piece.sent);
          std::lock_guard lock{state_->mutex};
          state_->abandoned.push_back(std::move(on_the_way));
        } else {
          c.dead = true;
        }
        return;
      }
      if (n < 0) return;
      if (c.client_gone) return;  // replies for a client that is gone
      if (drop) {
        d.tainted = true;
        return;
      }
      auto due = now + delay;
      if (!d.queue.empty()) due = std::max(due, d.queue.back().due);
      d.queue.push_back({due, std::string(buf, static_cast<std::size_t>(n)), 0});
    };
    // fds were built from conns before accept appended to it: walk only those.
    std::size_t polled = (fds.size() - first_conn) / 2;
    for (std::size_t i = 0; i < polled; ++i) {
      auto& c = conns[i];
      pull(c, c.client, fds[first_conn + 2 * i].revents, c.up, c.up_delay.value_or(up),
           m == mode::drop_requests);
      pull(c, c.server, fds[first_conn + 2 * i + 1].revents, c.down, down, m == mode::drop_replies);
    }
  }
}

}  // namespace dlock::fault
