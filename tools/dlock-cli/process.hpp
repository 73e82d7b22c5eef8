// tools/dlock-cli/process.hpp: running CMD under `dlock run`.
//   remember_inherited_fds  notes the descriptors dlock was started with (CMD gets exactly
//                           these; dlock's own sockets to Redis are closed in the child)
//   find_program            PATH lookup, done before the lock is taken
//   signal_inbox            SIGINT/SIGTERM/SIGHUP/SIGCHLD blocked and read from a signalfd
//   spawn_child             fork + exec with a clean signal mask, own process group and
//                           PR_SET_PDEATHSIG(SIGKILL), reporting exec failures
//   exit_status_of          a wait status as the shell shows it (code, or 128 + signal)
// Not thread-safe: the main thread owns all of it. signal_inbox must be created before dlock's
// I/O thread starts (before the first dlock::client), so every thread inherits the mask.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dlock::cli {

void remember_inherited_fds();

std::optional<std::string> find_program(const std::string& name);

class signal_inbox {
 public:
  signal_inbox();
  ~signal_inbox();
  signal_inbox(const signal_inbox&) = delete;
  signal_inbox& operator=(const signal_inbox&) = delete;

  struct event {
    std::vector<signalfd_siginfo> signals;  // in arrival order
    bool other_ready = false;               // `other_fd` became readable
  };
  // Waits up to `timeout` for a signal or for `other_fd` (if >= 0) to become readable.
  event wait(std::chrono::milliseconds timeout, int other_fd = -1);
  // The first of SIGINT/SIGTERM/SIGHUP that arrives within `timeout`, or 0.
  int wait_for_stop_signal(std::chrono::milliseconds timeout);

 private:
  sigset_t mask_{}, old_mask_{};
  int fd_ = -1;
};

struct spawned {
  pid_t pid = -1;
  std::string error;  // set when fork or exec failed; pid is then -1
  int exec_errno = 0;  // why exec failed (ENOENT, EACCES ...), 0 for other failures
};
// Starts `path` with `argv` and `env` (KEY=VALUE). own_group: setpgid(0, 0), so that signals
// can go to CMD and everything it started (kill(-pid)). The child dies with SIGKILL if dlock
// dies first (PR_SET_PDEATHSIG), so CMD never runs on without the lock being watched.
spawned spawn_child(const std::string& path, const std::vector<std::string>& argv,
                    const std::vector<std::string>& env, bool own_group);

int exit_status_of(int wait_status);

}  // namespace dlock::cli
