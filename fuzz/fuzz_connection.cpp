// SPDX-License-Identifier: Apache-2.0
// fuzz_connection: arbitrary bytes from a fake Redis server into a real dlock::client and what
// is built on it. A server thread listens on a unix socket; the first connection of each input
// receives the input's bytes and then EOF, later ones EOF at once; requests are read and
// dropped. The first byte picks what the client does:
//   0 GET              1 three pipelined commands   2 mutex try_acquire + release
//   3 semaphore        4 fenced_set                 5 AUTH + SELECT handshake, then GET
//   6 Redlock over three connections to the server (only one gets the bytes)
// Checks: every call returns (replies, errors, timeouts), nothing crashes or leaks, and an
// unexpected reply never passes for success (a granted lock needs a well-formed grant).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dlock/dlock.hpp"
#include "dlock/semaphore.hpp"

namespace {

using namespace std::chrono_literals;

class fake_server {
 public:
  fake_server() : path_("/tmp/dlock-fuzz-" + std::to_string(::getpid()) + ".sock") {
    ::unlink(path_.c_str());
    // libFuzzer ends with exit(): remove the socket file then.
    static std::string at_exit_path;
    at_exit_path = path_;
    std::atexit([] { ::unlink(at_exit_path.c_str()); });
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path_.copy(addr.sun_path, sizeof addr.sun_path - 1);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 64) != 0) {
      std::abort();
    }
    thread_ = std::thread([this] { run(); });
    thread_.detach();  // lives as long as the fuzzing process
  }

  std::string url() const { return "unix://" + path_; }

  // The next connection accepted gets these bytes.
  void arm(std::string bytes) {
    std::lock_guard lock{mutex_};
    bytes_ = std::move(bytes);
    armed_ = true;
  }

 private:
  void run() {
    std::vector<pollfd> draining;  // connections served: read until the client closes
    for (;;) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      fds.insert(fds.end(), draining.begin(), draining.end());
      if (::poll(fds.data(), fds.size(), 100) < 0) continue;
      std::vector<pollfd> still;
      if (fds[0].revents & POLLIN) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          std::string bytes;
          {
            std::lock_guard lock{mutex_};
            if (armed_) bytes.swap(bytes_);
            armed_ = false;
          }
          for (std::size_t at = 0; at < bytes.size();) {
            auto n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
            if (n <= 0) break;
            at += static_cast<std::size_t>(n);
          }
          ::shutdown(fd, SHUT_WR);
          still.push_back({fd, POLLIN, 0});
        }
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        char buf[4096];
        if (fds[i].revents && ::recv(fds[i].fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) {
          ::close(fds[i].fd);
        } else {
          still.push_back({fds[i].fd, POLLIN, 0});
        }
      }
      draining.swap(still);
    }
  }

  std::string path_;
  int listen_fd_ = -1;
  std::thread thread_;
  std::mutex mutex_;
  std::string bytes_;
  bool armed_ = false;
};

fake_server& server() {
  static auto* s = new fake_server();  // never destroyed: its thread runs to the end
  return *s;
}

dlock::client_options quick(std::string password = {}) {
  dlock::client_options o;
  o.connect_timeout = 200ms;
  o.request_timeout = 200ms;
  o.reconnect_backoff_min = 1ms;
  o.reconnect_backoff_max = 1ms;
  o.password = std::move(password);
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  int what = data[0] % 7;
  auto& s = server();
  s.arm(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  std::error_code ec;
  dlock::lock_options lock_opts{.ttl = 1000ms, .node_timeout = 200ms};
  switch (what) {
    case 0: {
      dlock::client c{s.url(), quick()};
      (void)c.exec({"GET", "k"}, ec);
      break;
    }
    case 1: {
      dlock::client c{s.url(), quick()};
      dlock::command cmd{"SET", "k", "v"};
      cmd.then({"GET", "k"}).then({"PING"});
      auto r = c.exec(cmd, ec);
      if (!ec && (!r.is_array() || r.elements().size() != 3)) std::abort();
      break;
    }
    case 2: {
      dlock::client c{s.url(), quick()};
      dlock::mutex m{c, "k", lock_opts};
      auto l = m.try_acquire(ec);
      if (l && ec) std::abort();
      if (l) (void)l.release();
      break;
    }
    case 3: {
      dlock::client c{s.url(), quick()};
      dlock::semaphore sem{c, "k", 2, {.ttl = 1000ms, .node_timeout = 200ms}};
      auto l = sem.try_acquire(ec);
      if (l) (void)l.release();
      break;
    }
    case 4: {
      dlock::client c{s.url(), quick()};
      (void)dlock::fenced_set(c, "k", "v", 7, ec);
      break;
    }
    case 5: {
      dlock::client c{s.url() + "?db=3", quick("secret")};
      (void)c.exec({"GET", "k"}, ec);
      break;
    }
    case 6: {
      std::vector<dlock::client> nodes;
      for (int i = 0; i < 3; ++i) nodes.emplace_back(s.url(), quick());
      dlock::mutex m{nodes, "k", lock_opts};
      auto l = m.try_acquire(ec);
      // Two of the three connections get nothing but EOF: no quorum can be granted.
      if (l) std::abort();
      break;
    }
  }
  return 0;
}
