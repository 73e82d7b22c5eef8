// SPDX-License-Identifier: Apache-2.0
// tests/support/fake_peer.hpp: a loopback TCP peer that is not Redis, for the error paths.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "support/loopback.hpp"
#include "support/redis_server.hpp"

namespace dlock::test {

// A loopback TCP listener that is not Redis. `garbage` answers every read with an HTTP error
// line; `pong_then_garbage` answers the first read with +PONG and every later one like
// `garbage`; `silent` accepts and never writes; `moved_loop` plays a cluster node that is ok
// (CLUSTER INFO), serves every slot by its CLUSTER SHARDS, and yet answers every other command
// MOVED to itself. It
// counts connections accepted and those the client closed, so tests can see whether dlock
// dropped or retried a connection.
class fake_peer {
 public:
  enum class mode { garbage, pong_then_garbage, silent, moved_loop };

  // Port 0: one of free_port()'s, so that it never takes the port of a server another test
  // killed, whose clients would then talk to it.
  explicit fake_peer(mode m, unsigned short port = 0) : mode_(m) {
    sockaddr_in addr{};
    for (int attempt = 0;; ++attempt) {
      listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
      int one = 1;
      ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      addr = loopback_address(port != 0 ? port : free_port());
      if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
          ::listen(listen_fd_, 16) == 0) {
        break;
      }
      ::close(listen_fd_);
      if (port != 0 || attempt >= 5) {
        throw std::runtime_error("fake_peer: cannot listen on port " + std::to_string(port));
      }
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~fake_peer() {
    stop_ = true;
    thread_.join();
    for (int fd : clients_) ::close(fd);
    ::close(listen_fd_);
  }
  fake_peer(const fake_peer&) = delete;
  fake_peer& operator=(const fake_peer&) = delete;

  unsigned short port() const { return port_; }
  std::string url(std::string_view userinfo = {}) const {
    std::string auth = userinfo.empty() ? "" : std::string(userinfo) + "@";
    return "redis://" + auth + "127.0.0.1:" + std::to_string(port_);
  }
  int accepted() const { return accepted_; }
  int closed() const { return closed_; }

 private:
  void run() {
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (int fd : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 10) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd >= 0) {
          clients_.push_back(fd);
          ++accepted_;
        }
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[4096];
        auto n = ::read(fds[i].fd, buf, sizeof buf);
        if (n <= 0) {
          ++closed_;
          ::close(fds[i].fd);
          std::erase(clients_, fds[i].fd);
        } else if (mode_ == mode::moved_loop) {
          answer_as_looping_node(fds[i].fd, std::string_view(buf, static_cast<std::size_t>(n)));
        } else if (mode_ != mode::silent) {
          bool pong = mode_ == mode::pong_then_garbage && reads_++ == 0;
          std::string_view answer = pong ? "+PONG\r\n" : "HTTP/1.1 400 Bad Request\r\n\r\n";
          (void)!::write(fds[i].fd, answer.data(), answer.size());
        }
      }
    }
  }

  // One answer per command in `request` (each starts a line with '*'; the tests' commands
  // carry no '*' of their own).
  void answer_as_looping_node(int fd, std::string_view request) {
    std::string port = std::to_string(port_);
    std::string answers;
    for (std::size_t at = request.find('*'); at != std::string_view::npos;
         at = request.find("\r\n*", at + 1)) {
      auto next = request.find("\r\n*", at + 1);
      auto one = request.substr(at, next == std::string_view::npos ? next : next - at);
      if (one.find("INFO") != std::string_view::npos) {
        answers += "$18\r\ncluster_state:ok\r\n\r\n";
      } else if (one.find("SHARDS") != std::string_view::npos) {
        answers += "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
                   "*6\r\n$4\r\nport\r\n:" + port + "\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
                   "$4\r\nrole\r\n$6\r\nmaster\r\n";
      } else {
        answers += "-MOVED 1 127.0.0.1:" + port + "\r\n";
      }
      if (next == std::string_view::npos) break;
    }
    (void)!::write(fd, answers.data(), answers.size());
  }

  mode mode_;
  int listen_fd_ = -1;
  unsigned short port_ = 0;
  std::vector<int> clients_;  // touched by the peer's thread only
  int reads_ = 0;             // likewise
  std::atomic<int> accepted_{0};
  std::atomic<int> closed_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dlock::test
