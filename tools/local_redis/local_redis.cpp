// SPDX-License-Identifier: Apache-2.0
#include "local_redis/local_redis.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace dlock::local {
namespace {

using namespace std::chrono_literals;

std::string find_redis_server() {
  if (const char* env = std::getenv("DLOCK_REDIS_SERVER"); env && *env) return env;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  for (std::size_t start = 0; start <= p.size();) {
    auto end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    auto candidate = p.substr(start, end - start) + "/redis-server";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  throw std::runtime_error(
      "redis-server not found: install it (scripts/bootstrap) or set DLOCK_REDIS_SERVER. "
      "The integration tests need a real server and never skip.");
}

pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0) throw std::runtime_error("cannot spawn " + args[0] + ": " + std::strerror(rc));
  return pid;
}

int connect_to(const std::string& host, unsigned short port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return -1;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

namespace {

// Ports handed out are reserved for the rest of the process, so that a port whose server a test
// killed (or one it keeps as "nothing listens here") is not taken by a server another test
// process starts meanwhile: a client routing to the old address would then talk to a stranger
// (a test saw a latch count down on another test's cluster). The reservation is a one-byte
// record lock at offset `port` in one file shared by every process on the machine: the kernel
// drops it when the process ends, however it ends.
class port_reservations {
 public:
  static port_reservations& shared() {
    static port_reservations instance;
    return instance;
  }
  // False when another process holds `port`, or this one handed it out before.
  bool reserve(unsigned short port) {
    std::lock_guard lock(mu_);
    if (!mine_.insert(port).second) return false;
    if (fd_ < 0) return true;  // no shared file: reserved within this process only
    struct flock record{};
    record.l_type = F_WRLCK;
    record.l_whence = SEEK_SET;
    record.l_start = port;
    record.l_len = 1;
    return ::fcntl(fd_, F_SETLK, &record) == 0;  // the record stays in mine_ either way
  }

 private:
  port_reservations() {
    // Every user may take ports: the file is world-writable, whoever created it. Closing any
    // descriptor of the file would drop this process's records, so this one stays open.
    fd_ = ::open("/tmp/dlock-test-ports.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ >= 0) ::fchmod(fd_, 0666);
  }
  std::mutex mu_;
  std::set<unsigned short> mine_;
  int fd_ = -1;
};

unsigned short probe_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

unsigned short free_port() {
  for (int attempt = 0;; ++attempt) {
    auto port = probe_free_port();
    if (port_reservations::shared().reserve(port) || attempt >= 100) return port;
  }
}

std::string raw_command(unsigned short port, const std::string& inline_command) {
  return raw_command("127.0.0.1", port, inline_command);
}

std::string raw_command(const std::string& host, unsigned short port,
                        const std::string& inline_command) {
  int fd = connect_to(host, port);
  if (fd < 0) return {};
  std::string line = inline_command + "\r\n";
  (void)!::write(fd, line.data(), line.size());
  std::string out;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  // Read until the server is quiet for a moment: enough for the small replies tests use.
  while (::poll(&p, 1, out.empty() ? 2000 : 50) > 0) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

redis_server::redis_server(server_options options) : options_(std::move(options)) {
  if (!options_.sentinel_config.empty() &&
      (!options_.launcher.empty() || !options_.address.empty())) {
    throw std::invalid_argument("local_redis: a Sentinel takes no launcher or address");
  }
  if (!options_.address.empty()) {
    in_addr parsed{};
    if (::inet_pton(AF_INET, options_.address.c_str(), &parsed) != 1) {
      throw std::invalid_argument("local_redis: not an IPv4 address: " + options_.address);
    }
    host_ = options_.address;
  }
  char tmpl[] = "/tmp/dlock-redis-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  for (int attempt = 0;; ++attempt) {
    port_ = free_port();
    try {
      start();
      return;
    } catch (const std::exception&) {
      if (attempt >= 5) throw;  // the port was taken between probe and bind: try another
    }
  }
}

redis_server::~redis_server() {
  stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string redis_server::url() const { return "redis://" + host_ + ":" + std::to_string(port_); }
std::string redis_server::socket_url() const { return "unix://" + dir_ + "/redis.sock"; }

void redis_server::start() {
  if (!options_.sentinel_config.empty()) {
    std::string conf = dir_ + "/sentinel.conf";
    if (!std::filesystem::exists(conf)) {
      std::ofstream out(conf);
      out << "port " << port_ << "\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n"
          << "dir " << dir_ << "\nlogfile " << dir_ << "/redis.log\n";
      for (const auto& line : options_.sentinel_config) out << line << "\n";
    }
    pid_ = spawn({find_redis_server(), conf, "--sentinel"});
    paused_ = false;
    wait_ready();
    return;
  }
  std::vector<std::string> args{find_redis_server(), "--port", std::to_string(port_),
                                "--bind", "127.0.0.1", "--dir", dir_, "--save", "",
                                "--daemonize", "no", "--protected-mode", "no",
                                "--logfile", dir_ + "/redis.log",
                                "--enable-debug-command", "local"};
  if (options_.persistence) {
    args.insert(args.end(), {"--appendonly", "yes", "--appendfsync", "always"});
  } else {
    args.insert(args.end(), {"--appendonly", "no"});
  }
  if (options_.unix_socket) {
    args.insert(args.end(), {"--unixsocket", dir_ + "/redis.sock", "--unixsocketperm", "700"});
  }
  if (!options_.tls.empty()) {
    args[2] = "0";  // no plain port
    args.insert(args.end(), {"--tls-port", std::to_string(port_)});
    args.insert(args.end(), options_.tls.begin(), options_.tls.end());
  }
  if (!options_.address.empty()) args.insert(args.begin() + 5, options_.address);  // --bind
  args.insert(args.end(), options_.extra.begin(), options_.extra.end());
  args.insert(args.begin(), options_.launcher.begin(), options_.launcher.end());
  pid_ = spawn(args);
  paused_ = false;
  wait_ready();
}

void redis_server::wait_ready() {
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("redis-server exited at start-up; see " + dir_ + "/redis.log");
    }
    if (!options_.tls.empty()) {
      // Listening: the event loop serves the connection once start-up is done.
      if (int fd = connect_to(host_, port_); fd >= 0) {
        ::close(fd);
        return;
      }
      std::this_thread::sleep_for(10ms);
      continue;
    }
    // A password-protected server answers NOAUTH: alive all the same.
    std::string r = raw_command(host_, port_, "PING");
    if (r.rfind("+PONG", 0) == 0 || r.rfind("-NOAUTH", 0) == 0) return;
    std::this_thread::sleep_for(10ms);
  }
  stop();
  throw std::runtime_error("redis-server did not answer PING within 10 s");
}

void redis_server::pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
  paused_ = true;
}

void redis_server::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
  paused_ = false;
}

void redis_server::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void redis_server::restart() {
  kill();
  start();
}

void redis_server::stop() {
  if (pid_ <= 0) return;
  if (paused_) ::kill(pid_, SIGCONT);  // a stopped process cannot act on SIGTERM
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 300; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(10ms);
  }
  kill();
}

child_process::child_process(std::vector<std::string> argv) : pid_(spawn(argv)) {}

child_process::~child_process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

child_process::child_process(child_process&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}

int child_process::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pid_ > 0) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(5ms);
  }
  return -1;
}

void child_process::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

std::string self_dir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

}  // namespace dlock::local
