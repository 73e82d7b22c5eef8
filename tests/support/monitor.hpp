// SPDX-License-Identifier: Apache-2.0
// tests/support/monitor.hpp: talking to a redis-server without dlock in between.
//   raw_connection  a plain loopback socket: for MONITOR, for DEBUG SLEEP, which must stay in
//                   flight while the test goes on, and for checking the fault proxy itself
//   monitor_args    the quoted arguments of one MONITOR line
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "support/loopback.hpp"

namespace dlock::test {

// One connection, inline commands, reply lines with a deadline; never throws.
class raw_connection {
  using steady = std::chrono::steady_clock;

 public:
  explicit raw_connection(unsigned short port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr = loopback_address(port);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~raw_connection() { ::close(fd_); }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  bool connected() const { return connected_; }
  // True once the peer closed the connection (seen by a read).
  bool eof() const { return eof_; }

  // Sends an inline command; false when it could not be written.
  bool send(const std::string& inline_command) {
    std::string line = inline_command + "\r\n";
    return ::send(fd_, line.data(), line.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(line.size());
  }
  // Sends an inline command and returns the first reply line, or nothing within `wait`.
  std::optional<std::string> call(const std::string& inline_command,
                                  std::chrono::milliseconds wait) {
    if (!send(inline_command)) return std::nullopt;
    return next_line(wait);
  }
  std::optional<std::string> next_line(std::chrono::milliseconds wait) {
    return next_line(steady::now() + wait);
  }
  // The next reply line, or nothing by the deadline or at end of stream.
  std::optional<std::string> next_line(steady::time_point deadline) {
    for (;;) {
      if (auto end = buf_.find("\r\n"); end != std::string::npos) {
        std::string line = buf_.substr(0, end);
        buf_.erase(0, end + 2);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
      if (left <= std::chrono::milliseconds::zero()) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char chunk[4096];
      auto n = ::read(fd_, chunk, sizeof chunk);
      if (n <= 0) {
        eof_ = true;
        return std::nullopt;
      }
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_;
  bool connected_ = false, eof_ = false;
  std::string buf_;
};

// The quoted arguments of a MONITOR line: 123.456 [0 127.0.0.1:1234] "EVALSHA" "sha" ...
inline std::vector<std::string> monitor_args(const std::string& line) {
  std::vector<std::string> out;
  for (std::size_t i = line.find('"'); i != std::string::npos; i = line.find('"', i + 1)) {
    std::string arg;
    for (++i; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      arg += line[i];
    }
    out.push_back(arg);
  }
  return out;
}

}  // namespace dlock::test
