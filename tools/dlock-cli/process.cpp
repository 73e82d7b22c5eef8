// SPDX-License-Identifier: Apache-2.0
// Process control for `dlock run`: signals, and CMD under its guard.
//
// Why a guard process: dlock is CMD's supervisor, and whatever kills dlock (SIGKILL, the OOM
// killer, a fault) must not leave CMD's work running without the lock. PR_SET_PDEATHSIG reaches
// one process, not its descendants, and cgroups are not ours to create. So dlock forks a guard
// first, and the guard starts CMD. The guard is CMD's parent and a subreaper, so every process
// CMD starts stays below it (orphans are re-parented to it, not to init), even one that left
// CMD's process group. It holds the read end of a pipe whose only writer is dlock: end of file
// means dlock asked to end the tree or died, and either way the guard SIGKILLs everything below
// it until nothing is left. It sits in a process group of its own, so a signal to dlock's group
// (the shell's job) does not reach it, and it blocks every signal it can.
//
// Both the guard and CMD's child side are forked from multithreaded dlock (the I/O thread),
// so they call only async-signal-safe functions (system calls) and never malloc: argv, envp
// and the descriptor lists are made before the fork, and the guard's table of processes grows
// by mmap.
#include "process.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace dlock::cli {
namespace {

std::vector<int> inherited_fds;  // sorted

struct fd_range {
  unsigned lo, hi;
};

// The ranges of descriptors to close so that only `kept` stay open.
std::vector<fd_range> ranges_to_close(std::vector<int> kept) {
  std::sort(kept.begin(), kept.end());
  std::vector<fd_range> out;
  unsigned next = 0;
  for (int fd : kept) {
    if (fd < 0) continue;
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

// ---- The guard's side. Async-signal-safe only (see the top of the file).

// What the guard tells dlock, one fixed-size message per write (atomic on a pipe).
enum guard_news_kind : std::int32_t {
  news_started = 1,  // value: CMD's pid
  news_exec_failed,  // value: errno of execve
  news_fork_failed,  // value: errno of fork
  news_cmd_exited,   // value: CMD's wait status
  news_tree_empty,   // nothing below the guard is left; the guard exits
  news_deadline_passed,  // no newer last safe moment came in time: the guard ends the tree
};
struct guard_news {
  std::int32_t kind;
  std::int32_t value;
};

// What dlock tells the guard, one fixed-size message per write (atomic on a pipe, so a read of
// a multiple of its size never splits one).
enum guard_order_kind : std::int32_t {
  order_signal = 1,  // value: the signal to send below the guard
  order_deadline,    // at: the new last safe moment (CLOCK_MONOTONIC nanoseconds)
};
struct guard_order {
  std::int32_t kind;
  std::int32_t value;
  std::int64_t at;
};

std::int64_t monotonic_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// steady_clock is CLOCK_MONOTONIC (libstdc++ and libc++ on Linux), so its time points are the
// guard's clock readings.
std::int64_t to_monotonic_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Everything the guard needs, made before the fork.
struct guard_plan {
  const char* path;
  char* const* argv;
  char* const* envp;
  const std::vector<fd_range>* cmd_closes;    // all but the inherited fds and report_write
  const std::vector<fd_range>* guard_closes;  // all but control, news and child_signals
  int control;        // from dlock: signal numbers, one byte each; end of file ends the tree
  int news;           // to dlock: guard_news
  int child_signals;  // signalfd of SIGCHLD
  int report_read, report_write;  // CMD's child side reports a failed exec's errno here
  bool own_group;     // CMD leads a process group of its own; else joins dlock's
  pid_t dlock_group;
  std::int64_t deadline;  // the first last safe moment (CLOCK_MONOTONIC nanoseconds)
};

void send_news(int fd, guard_news_kind kind, int value) {
  guard_news n{kind, value};
  (void)!::write(fd, &n, sizeof n);
}

// CMD's end and the tree's, in one write: dlock reads them together, so it never sees CMD gone
// with the tree not yet known empty, and says CMD left processes running when it did not.
void send_cmd_exit_and_tree_empty(int fd, int status) {
  guard_news both[2] = {{news_cmd_exited, status}, {news_tree_empty, 0}};
  (void)!::write(fd, both, sizeof both);
}

// Processes below the guard, from one pass over /proc. The table grows (mmap, which is a
// system call and safe after fork) to hold every process on the machine: a fixed one skipped
// the newest PIDs, CMD's among them, on every pass on a busy host. Should growing fail, the
// pass keeps what it has; since the guard is a subreaper, killing its own children again and
// again still ends the whole tree.
struct process_entry {
  pid_t pid, parent, group;
};
struct process_table {
  int count = 0;
  int capacity = 0;
  process_entry* at = nullptr;

  bool grow() {
    std::size_t wanted = capacity == 0 ? 8192 : static_cast<std::size_t>(capacity) * 2;
    if (wanted > INT_MAX / 2) return false;
    std::size_t bytes = wanted * sizeof(process_entry);
    void* p = at == nullptr ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                            : ::mremap(at, capacity * sizeof(process_entry), bytes, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) return false;
    at = static_cast<process_entry*>(p);
    capacity = static_cast<int>(wanted);
    return true;
  }
};

// "/proc/<pid>/stat" parsed for the parent and the process group: "pid (comm) S ppid pgrp ...";
// comm may hold anything, so parsing starts after the last ')'.
bool read_parent_and_group(const char* pid_text, pid_t& parent, pid_t& group) {
  char path[48] = "/proc/";
  std::size_t at = 6;
  for (const char* c = pid_text; *c && at < 32; ++c) path[at++] = *c;
  for (const char* c = "/stat"; *c; ++c) path[at++] = *c;
  path[at] = '\0';
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[1024];
  ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  const char* p = nullptr;
  for (ssize_t i = 0; i < n; ++i) {
    if (text[i] == ')') p = text + i;
  }
  if (!p) return false;
  p += 2;  // ") " then the state letter
  if (*p == '\0') return false;
  ++p;
  long values[2] = {0, 0};
  for (long& v : values) {
    while (*p == ' ') ++p;
    bool negative = *p == '-';
    if (negative) ++p;
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
    if (negative) v = -v;
  }
  parent = static_cast<pid_t>(values[0]);
  group = static_cast<pid_t>(values[1]);
  return true;
}

// Fills `t` with the processes whose chain of parents leads to `self`.
void scan_below(pid_t self, process_table& t) {
  t.count = 0;
  int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  struct linux_dirent64 {
    std::uint64_t ino;
    std::int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[1];
  };
  alignas(8) char buf[4096];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      auto* entry = reinterpret_cast<linux_dirent64*>(buf + off);
      off += entry->reclen;
      const char* name = entry->name;
      long pid = 0;
      const char* c = name;
      while (*c >= '0' && *c <= '9' && pid < INT_MAX / 10) pid = pid * 10 + (*c++ - '0');
      if (*c != '\0' || pid <= 0 || pid == self) continue;
      if (t.count == t.capacity && !t.grow()) continue;
      pid_t parent = 0, group = 0;
      if (!read_parent_and_group(name, parent, group)) continue;
      t.at[t.count++] = {static_cast<pid_t>(pid), parent, group};
    }
  }
  ::close(dir);
  // Keep the descendants: first the guard's children, then theirs, until nothing is added.
  // They gather at the front of the table; `below` of them so far.
  int below = 0;
  for (bool added = true; added;) {
    added = false;
    for (int i = below; i < t.count; ++i) {
      bool mine = t.at[i].parent == self;
      for (int j = 0; j < below && !mine; ++j) mine = t.at[i].parent == t.at[j].pid;
      if (!mine) continue;
      std::swap(t.at[i], t.at[below]);
      ++below;
      added = true;
    }
  }
  t.count = below;
}

process_table below_guard;  // only the guard uses it

// Sends `sig` to everything below the guard: to CMD's process group at once while CMD leads
// it (cmd_group; 0 when it does not, or no longer: its number could be reused once CMD is
// reaped and the group empty), and one by one to every other process below.
void signal_below(pid_t self, pid_t cmd_group, int sig) {
  process_table& table = below_guard;
  if (cmd_group > 1) ::kill(-cmd_group, sig);
  scan_below(self, table);
  for (int i = 0; i < table.count; ++i) {
    if (cmd_group > 0 && table.at[i].group == cmd_group) continue;
    if (table.at[i].pid > 1) ::kill(table.at[i].pid, sig);
  }
}

// CMD's side of the fork: into its process group, clean mask, only the inherited fds, exec.
[[noreturn]] void exec_cmd(const guard_plan& p, pid_t guard) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != guard) ::_exit(127);  // the guard died before prctl took effect
  ::setpgid(0, p.own_group ? 0 : p.dlock_group);
  // dlock installs no handlers (it reads a signalfd), so CMD inherits the dispositions
  // dlock got, ignored ones included (nohup), and only the mask needs undoing.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  close_ranges(*p.cmd_closes);
  ::execve(p.path, p.argv, p.envp);
  int err = errno;
  (void)!::write(p.report_write, &err, sizeof err);
  ::_exit(err == ENOENT ? 127 : 126);
}

// Reaps, reports, forwards signals, and once the control pipe ends or the last safe moment
// passes without a newer one from dlock, kills until nothing is left. The deadline is the
// dead-man's switch for a dlock that lives but cannot act: stopped (SIGSTOP, or a Ctrl-Z it
// could not hand on), or blocked somewhere. The guard does not renew anything, so it keeps the
// lease's timeline by its own clock.
[[noreturn]] void watch_tree(const guard_plan& p, pid_t self, pid_t cmd) {
  bool ending = false, cmd_reaped = false;
  std::int64_t deadline = p.deadline;
  for (;;) {
    // CMD's end is told once this pass has reaped what it can: with the tree's end, if that
    // came too.
    std::optional<int> cmd_status;
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(-1, &status, WNOHANG);
      if (r > 0) {
        if (r == cmd) {
          cmd_reaped = true;
          cmd_status = status;
        }
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {  // ECHILD: nothing is left below the guard
        if (cmd_status) {
          send_cmd_exit_and_tree_empty(p.news, *cmd_status);
        } else {
          send_news(p.news, news_tree_empty, 0);
        }
        ::_exit(0);
      }
      break;
    }
    if (cmd_status) send_news(p.news, news_cmd_exited, *cmd_status);
    pid_t cmd_group = p.own_group && !cmd_reaped ? cmd : 0;
    std::int64_t now = monotonic_ns();
    if (!ending && now >= deadline) {
      ending = true;
      signal_below(self, cmd_group, SIGKILL);  // first, then tell
      send_news(p.news, news_deadline_passed, 0);
    }
    if (ending) signal_below(self, cmd_group, SIGKILL);
    // While ending, look again soon: a killed process's children come to the guard. Else wake
    // at the deadline (rounded up: never before it).
    long long wait_ms = (deadline - now + 999'999) / 1'000'000;
    int timeout = ending ? 10 : static_cast<int>(std::clamp<long long>(wait_ms, 0, INT_MAX));
    pollfd fds[2] = {{p.child_signals, POLLIN, 0}, {ending ? -1 : p.control, POLLIN, 0}};
    ::poll(fds, 2, timeout);
    signalfd_siginfo info;
    while (::read(p.child_signals, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    }
    if (fds[1].revents == 0) continue;
    guard_order orders[16];
    ssize_t got = ::read(p.control, orders, sizeof orders);
    if (got == 0) ending = true;
    for (ssize_t i = 0; i + static_cast<ssize_t>(sizeof(guard_order)) <= got;
         i += static_cast<ssize_t>(sizeof(guard_order))) {
      const guard_order& o = orders[i / static_cast<ssize_t>(sizeof(guard_order))];
      if (o.kind == order_signal) signal_below(self, cmd_group, o.value);
      if (o.kind == order_deadline) deadline = o.at;
    }
  }
}

[[noreturn]] void guard_main(const guard_plan& p) {
  // A name `pgrep dlock` and `pkill dlock` do not match: killing dlock and the guard together
  // cannot be covered by a process tree alone (see process.hpp).
  ::prctl(PR_SET_NAME, "lease-guard");
  ::setpgid(0, 0);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  const pid_t self = ::getpid();
  const pid_t cmd = ::fork();
  if (cmd == 0) exec_cmd(p, self);
  if (cmd < 0) {
    send_news(p.news, news_fork_failed, errno);
    ::_exit(0);
  }
  ::setpgid(cmd, p.own_group ? cmd : p.dlock_group);  // as the child does: either may run first
  ::close(p.report_write);
  int err = 0;
  ssize_t n;
  do {
    n = ::read(p.report_read, &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof err)) {
    ::waitpid(cmd, nullptr, 0);
    send_news(p.news, news_exec_failed, err);
    ::_exit(0);
  }
  close_ranges(*p.guard_closes);  // dlock's sockets and its ends of the pipes, stdio too
  send_news(p.news, news_started, cmd);
  watch_tree(p, self, cmd);
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

std::optional<signal_role> role_of(int sig) {
  switch (sig) {
    case SIGHUP: case SIGINT: case SIGQUIT: case SIGUSR1: case SIGUSR2: case SIGALRM:
    case SIGTERM: case SIGSTKFLT: case SIGVTALRM: case SIGPROF: case SIGIO: case SIGPWR:
    // Sent by kill(): blocked, read and forwarded. A real fault of dlock's still ends it: the
    // kernel unblocks a synchronous SIGTRAP/SIGSYS, and abort() unblocks SIGABRT.
    case SIGABRT: case SIGTRAP: case SIGSYS:
      return signal_role::terminate;
    case SIGWINCH:
      return signal_role::inform;
    case SIGTSTP: case SIGTTIN: case SIGTTOU:
      return signal_role::stop;
    case SIGCONT:
      return signal_role::resume;
    case SIGPIPE: case SIGURG: case SIGXCPU: case SIGXFSZ:
      return signal_role::ignore;
    case SIGCHLD:
      return signal_role::child;
    default:
      break;
  }
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) return signal_role::terminate;
  return std::nullopt;
}

signal_inbox::signal_inbox() {
  sigemptyset(&mask_);
  for (int s = 1; s < NSIG; ++s) {
    if (role_of(s)) sigaddset(&mask_, s);
  }
  if (::pthread_sigmask(SIG_BLOCK, &mask_, nullptr) != 0) {
    throw std::runtime_error("cannot block signals");
  }
  fd_ = ::signalfd(-1, &mask_, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
  // An inherited SIG_IGN for SIGCHLD would have the kernel reap the guard, losing its status.
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGCHLD, &dfl, nullptr);
}

// The mask stays: a signal that came late (a SIGPIPE from a last message on a closed stderr,
// a SIGTERM during the release) would otherwise end dlock now, with the wrong exit status.
signal_inbox::~signal_inbox() { ::close(fd_); }

signal_inbox::event signal_inbox::wait(std::chrono::milliseconds timeout,
                                       std::initializer_list<int> others) {
  event ev;
  std::vector<pollfd> fds{{fd_, POLLIN, 0}};
  for (int fd : others) fds.push_back({fd, POLLIN, 0});  // poll skips negative fds
  int n = ::poll(fds.data(), fds.size(),
                 static_cast<int>(std::clamp<long long>(timeout.count(), 0, INT_MAX)));
  if (n <= 0) return ev;
  if (fds[0].revents & POLLIN) {
    signalfd_siginfo info{};
    while (::read(fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      ev.signals.push_back(info);
    }
  }
  for (std::size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      ev.ready.push_back(fds[i].fd);
    }
  }
  return ev;
}

std::unique_ptr<command_guard> command_guard::start(const std::string& path,
                                                    const std::vector<std::string>& argv,
                                                    const std::vector<std::string>& env,
                                                    bool own_group,
                                                    std::chrono::steady_clock::time_point deadline,
                                                    int stop_fd, start_failure& failure) {
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int control[2] = {-1, -1}, news[2] = {-1, -1}, report[2] = {-1, -1};
  sigset_t child_mask;
  sigemptyset(&child_mask);
  sigaddset(&child_mask, SIGCHLD);
  int child_signals = -1;
  auto close_all = [&] {
    for (int fd : {control[0], control[1], news[0], news[1], report[0], report[1], child_signals}) {
      if (fd >= 0) ::close(fd);
    }
  };
  if (::pipe2(control, O_CLOEXEC | O_NONBLOCK) != 0 || ::pipe2(news, O_CLOEXEC | O_NONBLOCK) != 0 ||
      ::pipe2(report, O_CLOEXEC) != 0 ||
      (child_signals = ::signalfd(-1, &child_mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
    failure.message = std::string("cannot start CMD's guard: ") + std::strerror(errno);
    close_all();
    return nullptr;
  }
  std::vector<int> cmd_keeps = inherited_fds;
  cmd_keeps.push_back(report[1]);
  const auto cmd_closes = ranges_to_close(cmd_keeps);
  const auto guard_closes = ranges_to_close({control[0], news[1], child_signals});
  const guard_plan plan{path.c_str(), args.data(), envp.data(), &cmd_closes, &guard_closes,
                        control[0], news[1], child_signals, report[0], report[1], own_group,
                        ::getpgrp(), to_monotonic_ns(deadline)};

  // dlock becomes a subreaper too: if the guard is killed, what was below it comes to dlock
  // (not to init), and end_orphans() ends it before the release.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  pid_t pid = ::fork();
  if (pid == 0) guard_main(plan);
  int fork_errno = errno;
  for (int* fd : {&control[0], &news[1], &report[0], &report[1], &child_signals}) {
    ::close(*fd);
    *fd = -1;
  }
  if (pid < 0) {
    failure.message = std::string("fork: ") + std::strerror(fork_errno);
    close_all();
    return nullptr;
  }
  std::unique_ptr<command_guard> guard{new command_guard};
  guard->guard_pid_ = pid;
  guard->control_fd_ = control[1];
  guard->news_fd_ = news[0];
  // The first news: CMD runs, or why not. A guard that sends none by the deadline, or before
  // `stop_fd` turns readable (the lease was lost), is not acting (stopped, say): waiting on
  // could let CMD outlive the lease, so it is killed, and CMD with it (PR_SET_PDEATHSIG).
  bool gave_up = false;
  while (guard->cmd_pid_ < 0 && !guard->guard_died_ && guard->failure_errno_ == 0) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline -
                                                             std::chrono::steady_clock::now());
    pollfd p[2] = {{guard->news_fd_, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int ready = ::poll(p, stop_fd >= 0 ? 2 : 1,
                       static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000)));
    if (ready < 0 && errno != EINTR) break;
    guard->take_news();
    if (guard->cmd_pid_ >= 0 || guard->guard_died_ || guard->failure_errno_ != 0) break;
    if ((stop_fd >= 0 && (p[1].revents & POLLIN) != 0) ||
        std::chrono::steady_clock::now() >= deadline) {
      gave_up = true;
      break;
    }
  }
  if (guard->cmd_pid_ > 0) return guard;  // the supervisor deals with a lost lease
  if (gave_up) {
    guard->kill_guard();
    guard->end_orphans();
    failure.message = "CMD's guard did not report CMD's start before the lease ended (stopped?); "
                      "it was killed, and CMD with it";
    failure.lease_ended = true;
    return nullptr;
  }
  if (guard->failure_kind_ == news_exec_failed) {
    failure.message = "cannot run " + path + ": " + std::strerror(guard->failure_errno_);
    failure.exec_errno = guard->failure_errno_;
  } else if (guard->failure_kind_ == news_fork_failed) {
    failure.message = std::string("fork: ") + std::strerror(guard->failure_errno_);
  } else {
    // Killed after CMD's exec, perhaps: CMD died with it (PR_SET_PDEATHSIG), and what it
    // started in the meantime came to dlock, a subreaper.
    failure.message = "CMD's guard process died before CMD started";
    guard->end_orphans();
  }
  return nullptr;  // the destructor reaps the guard
}

void command_guard::end_orphans() {
  const pid_t self = ::getpid();
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(-1, &status, WNOHANG);
    if (r > 0) {
      if (r == guard_pid_) guard_pid_ = -1;  // reaped here: the destructor must not wait
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return;  // ECHILD: nothing is left below dlock
    // Once the guard is reaped, its orphans are ours; killing one hands us its children.
    signal_below(self, 0, SIGKILL);
    ::poll(nullptr, 0, 10);
  }
}

void command_guard::kill_guard() {
  // guard_pid_ is reset when the guard is reaped, and until then its PID stays ours.
  if (guard_pid_ > 1) ::kill(guard_pid_, SIGKILL);
}

command_guard::~command_guard() {
  end_tree();
  if (guard_pid_ > 0) {
    while (::waitpid(guard_pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (news_fd_ >= 0) ::close(news_fd_);
}

void command_guard::take_news() {
  guard_news n{};
  for (;;) {
    ssize_t got = ::read(news_fd_, &n, sizeof n);
    if (got == 0) {  // the guard has exited
      if (!tree_empty_) guard_died_ = true;
      return;
    }
    if (got != static_cast<ssize_t>(sizeof n)) return;  // nothing more for now
    switch (n.kind) {
      case news_started:
        cmd_pid_ = n.value;
        break;
      case news_exec_failed:
      case news_fork_failed:
        failure_kind_ = n.kind;
        failure_errno_ = n.value != 0 ? n.value : EIO;
        break;
      case news_cmd_exited:
        cmd_status_ = n.value;
        break;
      case news_tree_empty:
        tree_empty_ = true;
        break;
      case news_deadline_passed:
        deadline_passed_ = true;
        break;
      default:
        break;
    }
  }
}

void command_guard::signal_tree(int sig) {
  if (control_fd_ < 0 || sig <= 0 || sig >= NSIG) return;
  guard_order o{order_signal, sig, 0};
  (void)!::write(control_fd_, &o, sizeof o);
}

void command_guard::set_deadline(std::chrono::steady_clock::time_point last_safe_moment) {
  if (control_fd_ < 0) return;
  guard_order o{order_deadline, 0, to_monotonic_ns(last_safe_moment)};
  (void)!::write(control_fd_, &o, sizeof o);
}

void command_guard::end_tree() {
  if (control_fd_ < 0) return;
  ::close(control_fd_);
  control_fd_ = -1;
}

int exit_status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 70;
}

}  // namespace dlock::cli
