// SPDX-License-Identifier: Apache-2.0
// local_redis.hpp: throwaway real redis-server processes, for `dlock demo`, the examples, the
// benchmarks and the tests (which see it as dlock::test, tests/support/redis_server.hpp).
//   redis_server   RAII process on a free loopback port (or a unix socket) in a temp dir;
//                  pause/resume (SIGSTOP/SIGCONT), kill -9, restart on the same port
//   child_process  a spawned helper process (worker binaries), killed on destruction
// The binary is $DLOCK_REDIS_SERVER or redis-server on PATH; if neither exists the
// constructor throws, so a test fails loudly instead of skipping.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace dlock::local {

struct server_options {
  bool persistence = false;       // --appendonly yes --appendfsync always
  bool unix_socket = false;       // also listen on <dir>/redis.sock
  std::vector<std::string> extra{};  // more redis-server arguments
  // TLS only: port() becomes a TLS port (--port 0 --tls-port P) and these --tls-* arguments
  // follow. The fixture speaks no TLS, so readiness is an accepted connection, not PING, and
  // raw_command() cannot reach such a server.
  std::vector<std::string> tls{};
  // Sentinel only: when not empty, the process is a Redis Sentinel (`redis-server CONF
  // --sentinel`) on port(), and these lines follow the port, dir and log lines of its config
  // file ("sentinel monitor mymaster 127.0.0.1 6379 2" ...). Sentinel rewrites the file; a
  // restart keeps what it learnt.
  std::vector<std::string> sentinel_config{};
  // Not Sentinel: the argv prefix that starts the server (the nemesis's `ip netns exec NS`, to
  // run it in a network namespace; it must exec the server, not fork it, so that pid(),
  // pause() and kill() reach the server), and the IPv4 address it listens on besides its own
  // loopback, which url() and the readiness check use ("": 127.0.0.1 alone).
  std::vector<std::string> launcher{};
  std::string address{};
};

class redis_server {
 public:
  explicit redis_server(server_options options = {});
  ~redis_server();
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  unsigned short port() const noexcept { return port_; }
  pid_t pid() const noexcept { return pid_; }
  const std::string& dir() const noexcept { return dir_; }
  std::string url() const;          // redis://127.0.0.1:PORT (or the options' address)
  const std::string& host() const noexcept { return host_; }  // 127.0.0.1 or that address
  std::string socket_url() const;   // unix://DIR/redis.sock (with unix_socket)

  void pause();    // SIGSTOP: a hung node; connections stay open
  void resume();   // SIGCONT
  void kill();     // SIGKILL and reap: a crash
  void restart();  // start again on the same port and dir (with persistence, data survives)
  bool running() const noexcept { return pid_ > 0; }

 private:
  void start();
  void wait_ready();
  void stop();

  server_options options_;
  std::string dir_;
  std::string host_ = "127.0.0.1";
  unsigned short port_ = 0;
  pid_t pid_ = -1;
  bool paused_ = false;
};

// A loopback TCP port that was free a moment ago, reserved for the rest of this process: no other
// process's free_port() hands it out while this one lives (a killed server's port stays its).
unsigned short free_port();

// Sends one inline command over a fresh TCP connection and returns the raw reply line(s);
// independent of dlock, so tests can check server state without trusting the library.
std::string raw_command(unsigned short port, const std::string& inline_command);
// The same, to `host` (an IPv4 address) instead of 127.0.0.1.
std::string raw_command(const std::string& host, unsigned short port,
                        const std::string& inline_command);

class child_process {
 public:
  explicit child_process(std::vector<std::string> argv);
  ~child_process();  // SIGKILL if still running
  child_process(child_process&& other) noexcept;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const noexcept { return pid_; }
  // Waits for exit; returns the exit status, or 128 + signal, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  void signal(int sig);

 private:
  pid_t pid_ = -1;
};

// The directory of the running binary (to find sibling helper binaries).
std::string self_dir();

}  // namespace dlock::local
