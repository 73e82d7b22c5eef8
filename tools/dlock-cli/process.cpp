// Process control for `dlock run`. The child is made with fork + execve rather than
// posix_spawn because it needs prctl(PR_SET_PDEATHSIG) and close_range, and dlock is
// multithreaded (the I/O thread), so the child calls only async-signal-safe functions: every
// allocation (argv, envp, the list of descriptors to close) happens before fork.
#include "process.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace dlock::cli {
namespace {

std::vector<int> inherited_fds;  // sorted

struct fd_range {
  unsigned lo, hi;
};

// The ranges of descriptors >= 3 to close in the child: all but the inherited ones and `keep`.
std::vector<fd_range> ranges_to_close(int keep) {
  std::vector<int> kept = inherited_fds;
  kept.push_back(keep);
  std::sort(kept.begin(), kept.end());
  std::vector<fd_range> out;
  unsigned next = 3;
  for (int fd : kept) {
    if (fd < 3) continue;
    if (static_cast<unsigned>(fd) > next) out.push_back({next, static_cast<unsigned>(fd) - 1});
    next = std::max(next, static_cast<unsigned>(fd) + 1);
  }
  out.push_back({next, UINT_MAX});
  return out;
}

void close_ranges(const std::vector<fd_range>& ranges) {
  for (const auto& r : ranges) {
    if (::syscall(SYS_close_range, r.lo, r.hi, 0) == 0) continue;
    // Kernels before 5.9: close one by one up to the descriptor limit.
    long limit = ::sysconf(_SC_OPEN_MAX);
    unsigned hi = std::min<unsigned long>(r.hi, limit > 0 ? static_cast<unsigned long>(limit) : 65536);
    for (unsigned fd = r.lo; fd <= hi && fd >= r.lo; ++fd) ::close(static_cast<int>(fd));
  }
}

}  // namespace

void remember_inherited_fds() {
  inherited_fds.clear();
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  int own = ::dirfd(dir);
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    int fd = std::atoi(e->d_name);
    if (fd != own) inherited_fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(inherited_fds.begin(), inherited_fds.end());
}

std::optional<std::string> find_program(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return name;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (std::size_t start = 0; start <= p.size();) {
    auto end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st{};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return std::nullopt;
}

signal_inbox::signal_inbox() {
  sigemptyset(&mask_);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&mask_, s);
  if (::pthread_sigmask(SIG_BLOCK, &mask_, &old_mask_) != 0) {
    throw std::runtime_error("cannot block signals");
  }
  fd_ = ::signalfd(-1, &mask_, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
  // An inherited SIG_IGN for SIGCHLD would have the kernel reap CMD, losing its exit status.
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGCHLD, &dfl, nullptr);
}

signal_inbox::~signal_inbox() {
  ::close(fd_);
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

signal_inbox::event signal_inbox::wait(std::chrono::milliseconds timeout, int other_fd) {
  event ev;
  pollfd fds[2] = {{fd_, POLLIN, 0}, {other_fd, POLLIN, 0}};
  int n = ::poll(fds, other_fd >= 0 ? 2 : 1,
                 static_cast<int>(std::clamp<long long>(timeout.count(), 0, INT_MAX)));
  if (n <= 0) return ev;
  if (fds[0].revents & POLLIN) {
    signalfd_siginfo info{};
    while (::read(fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      ev.signals.push_back(info);
    }
  }
  ev.other_ready = other_fd >= 0 && (fds[1].revents & (POLLIN | POLLERR | POLLHUP)) != 0;
  return ev;
}

int signal_inbox::wait_for_stop_signal(std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    auto ev = wait(std::max(left, std::chrono::milliseconds(0)));
    for (const auto& s : ev.signals) {
      if (s.ssi_signo != SIGCHLD) return static_cast<int>(s.ssi_signo);
    }
    if (std::chrono::steady_clock::now() >= until) return 0;
  }
}

spawned spawn_child(const std::string& path, const std::vector<std::string>& argv,
                    const std::vector<std::string>& env, bool own_group) {
  spawned result;
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  // The child reports a failed exec through this pipe; a successful exec closes it (CLOEXEC).
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    result.error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  auto close_list = ranges_to_close(report[1]);
  pid_t parent = ::getpid();
  sigset_t none;
  sigemptyset(&none);

  pid_t pid = ::fork();
  if (pid < 0) {
    result.error = std::string("fork: ") + std::strerror(errno);
    ::close(report[0]);
    ::close(report[1]);
    return result;
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only from here on.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // dlock died before prctl took effect
    if (own_group) ::setpgid(0, 0);
    // dlock installs no handlers (it reads a signalfd), so CMD inherits the dispositions
    // dlock got, ignored ones included (nohup), and only the mask needs undoing.
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    close_ranges(close_list);
    ::execve(path.c_str(), args.data(), envp.data());
    int err = errno;
    (void)!::write(report[1], &err, sizeof err);
    ::_exit(err == ENOENT ? 127 : 126);
  }
  // Parent: also set the group here, so that kill(-pid) works before the child ran at all.
  if (own_group) ::setpgid(pid, pid);
  ::close(report[1]);
  int err = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof err)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    result.error = "cannot run " + path + ": " + std::strerror(err);
    result.exec_errno = err;
    return result;
  }
  result.pid = pid;
  return result;
}

int exit_status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 70;
}

}  // namespace dlock::cli
