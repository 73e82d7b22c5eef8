// dlock run [--ttl D] [-w D | -n] [-E N] [--lost-grace D] [--min-hold D] [--foreground]
//           [--semaphore LIMIT] KEY -- CMD [ARGS...]
//
// With --semaphore LIMIT, KEY is a counting semaphore (dlock::semaphore, one node only) and
// up to LIMIT CMDs run at once; everything else is the same, the permit being a lease too.
//
// The lifecycle, with what each signal does at each step:
//   waiting   SIGINT/SIGTERM/SIGHUP end the wait: exit 128 + signal, nothing held
//   running   CMD runs with the lease renewed by the watchdog (every TTL/3); the signals are
//             forwarded to CMD's process group; dlock stays until CMD exits
//   lost      the watchdog says the lease is gone: SIGTERM to CMD's group, SIGKILL after
//             --lost-grace, exit 71 whatever CMD returns (its work was no longer exclusive)
//   done      CMD exited: release at once, exit with CMD's status (128 + signal if killed);
//             with --min-hold D, a CMD that ended sooner than D after the acquisition leaves
//             the lock to expire D after it instead (a cron job on several hosts runs once)
// If dlock itself is killed (SIGKILL), CMD gets SIGKILL from the kernel (PR_SET_PDEATHSIG) and
// the key expires within the TTL.
#include <CLI/CLI.hpp>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <memory>
#include <thread>

#include "cli.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "duration.hpp"
#include "lock_view.hpp"
#include "lock_wait.hpp"
#include "process.hpp"

extern char** environ;

namespace dlock::cli {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

struct run_options : wait_flags {
  std::string key;
  std::vector<std::string> cmd;
  milliseconds ttl{10'000};
  milliseconds lost_grace{5'000};
  std::optional<milliseconds> min_hold;
  bool foreground = false;
  std::optional<int> semaphore_limit;
};

// Where the watchdog's loss callback (dlock's I/O thread) wakes the main thread. Owned jointly
// by run and the callback, so the descriptor cannot be closed under a late callback.
struct loss_alarm {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::atomic<int> reason{0};
  ~loss_alarm() {
    if (fd >= 0) ::close(fd);
  }
  void ring(std::error_code ec) {
    reason.store(ec.value());
    std::uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
  }
};

std::vector<std::string> child_environment(const run_options& o, const lease& held) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view v(*e);
    if (v.starts_with("DLOCK_KEY=") || v.starts_with("DLOCK_TOKEN=") || v.starts_with("DLOCK_FENCE=")) {
      continue;
    }
    env.emplace_back(v);
  }
  env.push_back("DLOCK_KEY=" + o.key);
  env.push_back("DLOCK_TOKEN=" + held.value());
  env.push_back("DLOCK_FENCE=" + std::to_string(held.fencing_token()));
  return env;
}

std::string command_text(const std::vector<std::string>& cmd) {
  std::string out;
  for (const auto& a : cmd) out += (out.empty() ? "" : " ") + a;
  return out;
}

// True while any process of group `pgid` exists.
bool group_alive(pid_t pgid) { return ::kill(-pgid, 0) == 0 || errno == EPERM; }

class supervisor {
 public:
  supervisor(const run_options& o, signal_inbox& signals, lease& held,
             std::vector<client>& nodes, const holder_info& holder)
      : o_(o), signals_(signals), held_(held), nodes_(nodes), holder_(holder),
        acquired_at_(steady::now()) {}

  int run(const std::string& path) {
    auto alarm = std::make_shared<loss_alarm>();
    if (alarm->fd < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
    held_.keep_alive({.on_lost = [alarm](std::error_code ec) { alarm->ring(ec); }});

    auto child = spawn_child(path, o_.cmd, child_environment(o_, held_), !o_.foreground);
    if (child.pid < 0) {
      say("%s", child.error.c_str());
      finish(false, /*cmd_ran=*/false);
      if (child.exec_errno == 0) return exit_software;
      return child.exec_errno == ENOENT ? 127 : 126;  // as the shell reports them
    }
    pid_ = child.pid;
    say_verbose("running `%s` (pid %d) under '%s', fence %llu", command_text(o_.cmd).c_str(),
                static_cast<int>(pid_), o_.key.c_str(),
                static_cast<unsigned long long>(held_.fencing_token()));

    int status = supervise(alarm);
    if (lost_) {
      stop_group_after_loss();
      int reason = alarm->reason.load();
      std::error_code why = reason ? std::error_code(reason, category()) : errc::lease_lost;
      say("lost the lock on '%s' while `%s` ran (%s); it was stopped", o_.key.c_str(),
          o_.cmd[0].c_str(), why.message().c_str());
      finish(true, true);
      return exit_lease_lost;
    }
    say_verbose("`%s` exited with status %d", o_.cmd[0].c_str(), exit_status_of(status));
    finish(false, true);
    return exit_status_of(status);
  }

 private:
  // Signals go to CMD's whole group (it has its own unless --foreground).
  pid_t target() const { return o_.foreground ? pid_ : -pid_; }

  int supervise(const std::shared_ptr<loss_alarm>& alarm) {
    const auto refresh_every = std::max(o_.ttl / 3, 1ms);
    auto refresh_at = steady::now() + refresh_every;
    steady::time_point kill_at = steady::time_point::max();
    for (;;) {
      auto now = steady::now();
      auto wake = std::min({refresh_at, kill_at, now + 250ms});
      auto ev = signals_.wait(std::chrono::ceil<milliseconds>(std::max(wake - now, steady::duration::zero())),
                              lost_ ? -1 : alarm->fd);
      for (const auto& s : ev.signals) forward(s);
      if (!lost_ && (ev.other_ready || held_.lost().stop_requested())) {
        lost_ = true;
        ::kill(target(), SIGTERM);
        kill_at = lost_kill_at_ = steady::now() + o_.lost_grace;
      }
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) return status;
      if (r < 0 && errno == ECHILD) return 0;  // cannot happen: nobody else reaps it
      now = steady::now();
      if (lost_ && now >= kill_at) {
        ::kill(target(), SIGKILL);
        kill_at = steady::time_point::max();
      }
      if (!lost_ && !o_.semaphore_limit && now >= refresh_at) {
        publish_holder(nodes_, o_.key, holder_, o_.ttl, /*wait=*/false);
        refresh_at = now + refresh_every;
      }
    }
  }

  void forward(const signalfd_siginfo& s) {
    int sig = static_cast<int>(s.ssi_signo);
    if (sig == SIGCHLD) return;
    // With --foreground CMD shares our process group, so a signal from the terminal
    // (SI_KERNEL: Ctrl-C, hangup) has reached it already; forwarding would double it.
    if (o_.foreground && s.ssi_code == SI_KERNEL) return;
    say_verbose("forwarding signal %d (%s) to `%s`", sig, strsignal(sig), o_.cmd[0].c_str());
    ::kill(target(), sig);
  }

  // After a loss, nothing CMD started may keep running unprotected: wait out the rest of the
  // grace period for its process group to empty, then SIGKILL what is left.
  void stop_group_after_loss() {
    if (o_.foreground) return;
    while (group_alive(pid_) && steady::now() < lost_kill_at_) std::this_thread::sleep_for(10ms);
    if (group_alive(pid_)) ::kill(-pid_, SIGKILL);
  }

  void finish(bool lost, bool cmd_ran) {
    if (!lost && cmd_ran && o_.min_hold && keep_for_min_hold()) return;
    if (!lost && !o_.semaphore_limit) clear_holder(nodes_, o_.key, held_.value());
    std::error_code ec = held_.release();
    if (ec && !lost) {
      say("releasing '%s' failed (%s); it expires within %s", o_.key.c_str(), ec.message().c_str(),
          format_duration(o_.ttl).c_str());
    } else if (!lost) {
      say_verbose("released '%s'", o_.key.c_str());
    }
  }

  // --min-hold: while less than that has passed since the acquisition, the lock stays until
  // then (the holder annotation too, naming the run that finished). True when kept.
  bool keep_for_min_hold() {
    auto left = std::chrono::ceil<milliseconds>(*o_.min_hold - (steady::now() - acquired_at_));
    if (left <= 0ms) return false;
    if (auto ec = held_.release_after(left)) {
      say("keeping '%s' for --min-hold failed (%s); released where it could be", o_.key.c_str(),
          ec.message().c_str());
      return true;
    }
    say_verbose("kept '%s' for --min-hold: it expires in %s", o_.key.c_str(),
                seconds_text(left).c_str());
    return true;
  }

  const run_options& o_;
  signal_inbox& signals_;
  lease& held_;
  std::vector<client>& nodes_;
  const holder_info& holder_;
  steady::time_point acquired_at_;
  pid_t pid_ = -1;
  bool lost_ = false;
  steady::time_point lost_kill_at_{};  // when the loss's grace period ends
};

int run_command(const global_options& g, const run_options& o) {
  check_ttl(o.ttl);
  if (o.cmd.empty()) throw usage_error("missing CMD: dlock run KEY -- CMD [ARGS...]");
  if (o.lost_grace < 0ms) throw usage_error("--lost-grace must not be negative");
  if (o.min_hold && *o.min_hold <= 0ms) throw usage_error("--min-hold must be positive");
  auto path = find_program(o.cmd[0]);
  if (!path) {
    say("%s: command not found", o.cmd[0].c_str());
    return 127;
  }
  signal_inbox signals;  // before the first client: dlock's I/O thread inherits the mask
  auto nodes = make_clients(g);
  std::optional<mutex> lock;
  std::optional<semaphore> permits;
  lock_calls calls;
  if (o.semaphore_limit) {
    if (nodes.size() != 1) {
      throw usage_error("--semaphore needs exactly one Redis node: a quorum of independent "
                        "nodes cannot bound a semaphore's holders");
    }
    permits.emplace(nodes.front(), o.key, *o.semaphore_limit,
                    semaphore_options{.ttl = o.ttl, .retry_delay = 50ms});
    calls.try_once = [&](std::error_code& ec, node_results*) { return permits->try_acquire(ec); };
    calls.wait_until = [&](steady::time_point deadline, std::error_code& ec, node_results*,
                           const wait_control& control) {
      return permits->acquire_until(deadline, 1, control, ec);
    };
  } else {
    lock.emplace(nodes, o.key, lock_options{.ttl = o.ttl, .retry_delay = 50ms});
    calls.try_once = [&](std::error_code& ec, node_results* votes) {
      return lock->try_acquire(votes, ec);
    };
    calls.wait_until = [&](steady::time_point deadline, std::error_code& ec, node_results* votes,
                           const wait_control& control) {
      return lock->acquire_until(deadline, control, votes, ec);
    };
  }

  wait_options w;
  w.nonblock = o.nonblock;
  w.wait = o.wait;
  w.node_count = nodes.size();
  w.unavailable_grace = 2 * g.timeout;
  w.key = o.key;
  w.watch = [&](milliseconds d, int wake_fd) {
    for (const auto& s : signals.wait(d, wake_fd).signals) {
      if (s.ssi_signo != SIGCHLD) return static_cast<int>(s.ssi_signo);
    }
    return 0;
  };
  w.show_status = !o.quiet;
  w.describe_holder = [&] {
    if (o.semaphore_limit) return semaphore_holder_status(nodes.front(), o.key, *o.semaphore_limit);
    return lock_holder_status(nodes, o.key);
  };
  auto started = steady::now();
  auto result = wait_for_lock(calls, w);
  switch (result.outcome) {
    case wait_outcome::acquired:
      break;
    case wait_outcome::conflict:
      say_verbose("%s", result.message.c_str());
      return o.conflict_status;
    case wait_outcome::interrupted:
      say_verbose("%s", result.message.c_str());
      return 128 + result.signal;
    case wait_outcome::unavailable:
      say("%s", result.message.c_str());
      return exit_unavailable;
    case wait_outcome::failed:
      say("%s", result.message.c_str());
      return exit_status_for(result.ec, o.conflict_status);
  }
  lease held = std::move(result.held);
  say_verbose("acquired '%s' after %s (fence %llu, valid %s)", o.key.c_str(),
              seconds_text(steady::now() - started).c_str(),
              static_cast<unsigned long long>(held.fencing_token()),
              format_duration(held.remaining()).c_str());
  auto holder = make_holder_info(held.value(), static_cast<long>(::getpid()), command_text(o.cmd));
  // The holder annotation names one holder: it fits a lock, not a semaphore's LIMIT holders.
  if (!o.semaphore_limit) publish_holder(nodes, o.key, holder, o.ttl, /*wait=*/false);
  supervisor s{o, signals, held, nodes, holder};
  return s.run(*path);
}

}  // namespace

subcommand add_run_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<run_options>();
  auto* app = parent.add_subcommand(
      "run", "Run CMD while holding the lock KEY (waits for it, like flock), then release it");
  app->fallthrough();
  duration_option(*app, "--ttl", o->ttl,
                  "Lock TTL; renewed every TTL/3 while CMD runs (default 10s)");
  add_wait_flags(*app, *o);
  duration_option(*app, "--lost-grace", o->lost_grace,
                  "After the lease is lost: time between SIGTERM and SIGKILL to CMD (default 5s)");
  duration_option(*app, "--min-hold", o->min_hold,
                  "Keep the lock at least this long after acquiring it, even when CMD ends "
                  "sooner: it then expires by itself (for a job scheduled on several hosts)");
  app->add_flag("--foreground", o->foreground,
                "Keep CMD in dlock's process group (for interactive CMDs reading the terminal); "
                "signals then reach CMD only, not its children");
  app->add_option("--semaphore", o->semaphore_limit,
                  "KEY is a semaphore: up to LIMIT CMDs at once (one Redis node only)")
      ->type_name("LIMIT")
      ->check(CLI::Range(1, 1'000'000));
  app->add_option("KEY", o->key, "The lock's name (its Redis key)")->required();
  app->add_option("CMD", o->cmd, "The command and its arguments, after --")->required();
  return {app, [&g, o] { return run_command(g, *o); }};
}

}  // namespace dlock::cli
