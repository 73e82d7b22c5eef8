// tests/support/monitor.hpp: talking to a redis-server without dlock in between.
//   raw_connection  a plain loopback socket: for MONITOR and for DEBUG SLEEP, which must stay in
//                   flight while the test goes on
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

namespace dlock::test {

class raw_connection {
  using steady = std::chrono::steady_clock;

 public:
  explicit raw_connection(unsigned short port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ADD_FAILURE() << "cannot connect to port " << port;
    }
  }
  ~raw_connection() { ::close(fd_); }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  void send(const std::string& inline_command) {
    std::string line = inline_command + "\r\n";
    EXPECT_EQ(::write(fd_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  }
  // The next reply line, or nothing by the deadline.
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
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_;
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
