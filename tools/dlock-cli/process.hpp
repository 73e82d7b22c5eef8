// SPDX-License-Identifier: Apache-2.0
// tools/dlock-cli/process.hpp: running CMD under `dlock run`.
//   remember_inherited_fds  notes the descriptors dlock was started with (CMD gets exactly
//                           these; dlock's own sockets to Redis are closed in the child)
//   find_program            PATH lookup, done before the lock is taken
//   signal_role / role_of   what dlock does with each signal it can catch
//   signal_inbox            those signals blocked and read from a signalfd
//   command_guard           CMD started under a guard process that ends everything CMD
//                           started when dlock asks or dies, and reports CMD's exit
//   exit_status_of          a wait status as the shell shows it (code, or 128 + signal)
// Not thread-safe: the main thread owns all of it. signal_inbox must be created before dlock's
// I/O thread starts (before the first dlock::client), so every thread inherits the mask.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/types.h>

#include <chrono>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dlock::cli {

void remember_inherited_fds();

std::optional<std::string> find_program(const std::string& name);

// What `dlock run` does with a signal. Every signal that can be caught has one, but for
// SIGSEGV, SIGBUS, SIGFPE and SIGILL (faults of dlock itself), and 32 and 33, which glibc keeps
// for itself (no program may block them): they keep their default, end dlock without a
// release (the key expires by its TTL) and the guard ends CMD's tree. SIGABRT, SIGTRAP and
// SIGSYS sent with kill() are handled as terminate; raised by a real fault, they end dlock.
enum class signal_role {
  terminate,  // its default ends a process (HUP INT QUIT USR1 USR2 ALRM TERM ABRT, real-time ...):
              // forwarded to CMD; while waiting for the lock, it ends the wait (128 + N)
  inform,     // SIGWINCH: forwarded to CMD; ignored while waiting
  stop,       // SIGTSTP/SIGTTIN/SIGTTOU: CMD and dlock stop together (dlock cannot renew
              // while stopped, so CMD must not run meanwhile)
  resume,     // SIGCONT: after such a stop, CMD resumes only if the lease still holds
  ignore,     // SIGPIPE, SIGURG, SIGXCPU, SIGXFSZ: about dlock's own pipes, sockets, limits
  child,      // SIGCHLD: the guard process changed state
};
// The role of `sig`; nullopt for the faults above, which keep their default.
std::optional<signal_role> role_of(int sig);

// Blocks every signal that has a role, for the rest of the process's life (no handler runs,
// and CMD's side of the fork unblocks them), and reads them from a signalfd.
class signal_inbox {
 public:
  signal_inbox();
  ~signal_inbox();
  signal_inbox(const signal_inbox&) = delete;
  signal_inbox& operator=(const signal_inbox&) = delete;

  struct event {
    std::vector<signalfd_siginfo> signals;  // in arrival order
    std::vector<int> ready;                 // which of the other fds became readable
  };
  // Waits up to `timeout` for a signal or for one of `others` (fds; negative ones are
  // skipped) to become readable.
  event wait(std::chrono::milliseconds timeout, std::initializer_list<int> others = {});

 private:
  sigset_t mask_{};
  int fd_ = -1;
};

// CMD under a guard: a small process forked by dlock that stays outside CMD's process group
// and dlock's, ignores every signal it can, and starts CMD as its child while being a
// subreaper (PR_SET_CHILD_SUBREAPER), so that everything CMD starts, even what leaves its
// process group (setsid) or is orphaned, stays below the guard. The guard reads a pipe from
// dlock: end of file, whether dlock asked (end_tree) or died in any way (SIGKILL included),
// makes it SIGKILL all of that, repeatedly, until nothing is left. So does the last safe
// moment of the lease passing, by the guard's own clock, without dlock sending a newer one
// (dlock stopped or blocked: it cannot renew, and cannot act either). It reports when CMD
// exits and when nothing CMD started is left, then exits itself. dlock is a subreaper as well,
// so that if the guard alone is killed, its orphans come to dlock (end_orphans). If dlock and
// the guard are killed together (SIGKILL to both), nothing is left to act: CMD dies with the
// guard (PR_SET_PDEATHSIG), what it started goes on; only a cgroup (systemd's KillMode, a
// container) covers that. The guard is named lease-guard, which `pkill dlock` does not match.
class command_guard {
 public:
  struct start_failure {
    std::string message;
    int exec_errno = 0;  // why exec failed (ENOENT, EACCES ...), 0 for other failures
    bool lease_ended = false;  // the guard did not report by `deadline` or before `stop_fd`
  };
  // Starts the guard and, under it, `path` with `argv` and `env` (KEY=VALUE), in a process
  // group of its own (own_group), else in dlock's (--foreground). CMD gets a clean signal mask
  // and only the descriptors dlock inherited. `deadline` is the first last safe moment (see
  // set_deadline). Blocks until CMD's exec succeeded or failed; on failure returns nullptr
  // with `failure` filled in. A guard that has not said by `deadline`, or by the time
  // `stop_fd` (-1: none) is readable, is killed with CMD (failure.lease_ended).
  static std::unique_ptr<command_guard> start(const std::string& path,
                                              const std::vector<std::string>& argv,
                                              const std::vector<std::string>& env,
                                              bool own_group,
                                              std::chrono::steady_clock::time_point deadline,
                                              int stop_fd, start_failure& failure);
  // Ends what is left of CMD's tree (SIGKILL) and waits for the guard to exit.
  ~command_guard();
  command_guard(const command_guard&) = delete;
  command_guard& operator=(const command_guard&) = delete;

  pid_t cmd_pid() const noexcept { return cmd_pid_; }
  // Readable when the guard has news; then call take_news().
  int news_fd() const noexcept { return news_fd_; }
  void take_news();
  // CMD's wait status, once it has exited.
  std::optional<int> cmd_status() const noexcept { return cmd_status_; }
  // Nothing CMD started is left (CMD has exited too).
  bool tree_empty() const noexcept { return tree_empty_; }
  // The guard ended the tree itself: the last safe moment passed without a newer one.
  bool deadline_passed() const noexcept { return deadline_passed_; }
  // The guard died before the tree was empty (someone killed it): CMD is gone (its
  // PR_SET_PDEATHSIG), what it started may not be until end_orphans().
  bool guard_died() const noexcept { return guard_died_; }
  // After guard_died(): dlock is a subreaper, so what was below the guard is now below dlock.
  // SIGKILLs and reaps all of it (the guard too), until dlock has no child left. Blocks.
  void end_orphans();

  // SIGKILL to the guard itself, for one that does not act on end_tree() (stopped, say: a
  // stopped process still dies of SIGKILL). CMD dies with it (PR_SET_PDEATHSIG); guard_died()
  // follows, then end_orphans() ends the rest. Only while the guard is dlock's unreaped child.
  void kill_guard();

  // Sends `sig` to CMD's process group and to every other process below the guard (with
  // --foreground: to each process below the guard). Asynchronous: the guard sends it.
  void signal_tree(int sig);
  // SIGKILL to everything below the guard, until nothing is left. Asynchronous; tree_empty()
  // says when it is done.
  void end_tree();
  // The new last safe moment (steady_clock, which is CLOCK_MONOTONIC): once it passes without
  // a newer one, the guard SIGKILLs everything below it on its own. Never blocks; dropped if
  // the pipe is full (thousands of orders behind), which errs on the early side.
  void set_deadline(std::chrono::steady_clock::time_point last_safe_moment);

 private:
  command_guard() = default;

  pid_t guard_pid_ = -1;
  pid_t cmd_pid_ = -1;
  int control_fd_ = -1;  // to the guard: signals and deadlines; closing it ends the tree
  int news_fd_ = -1;     // from the guard
  std::optional<int> cmd_status_;
  bool tree_empty_ = false;
  bool guard_died_ = false;
  bool deadline_passed_ = false;
  int failure_kind_ = 0;   // why CMD did not start (exec or fork failed), from the guard
  int failure_errno_ = 0;
};

int exit_status_of(int wait_status);

}  // namespace dlock::cli
