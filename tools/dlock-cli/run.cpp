// SPDX-License-Identifier: Apache-2.0
// dlock run [--ttl D] [-w D | -n] [-E N] [--lost-grace D] [--min-hold D] [--orphans wait|kill]
//           [--foreground] [--semaphore LIMIT | --read | --write] KEY -- CMD [ARGS...]
//
// With --semaphore LIMIT, KEY is a counting semaphore (dlock::semaphore, one node only) and
// up to LIMIT CMDs run at once; everything else is the same, the permit being a lease too.
// With --read or --write, KEY is a read-write lock (dlock::shared_mutex, one node only): CMDs
// run with --read run together, one run with --write runs alone.
//
// The rule: no process CMD started runs without the lease. CMD runs below a guard process
// (process.hpp) that SIGKILLs everything CMD started, whatever left CMD's process group
// included, when dlock dies in any way (SIGKILL too) or asks it to; the lock is released only
// once nothing CMD started is left. The lifecycle, with what each signal does at each step:
//   waiting   a signal whose default ends a process (INT TERM HUP QUIT USR1 USR2 ALRM ...) ends
//             the wait: exit 128 + signal, nothing held; SIGTSTP stops dlock; others do nothing
//   running   CMD runs with the lease renewed by the watchdog (every TTL/3). Those signals, and
//             SIGWINCH, are forwarded to CMD's process group and the rest of its tree. SIGTSTP
//             (SIGTTIN, SIGTTOU) stops CMD's tree, then dlock; on SIGCONT dlock renews the
//             lease before it resumes CMD, and kills it where it stopped if the lease ran out.
//             SIGPIPE, SIGURG, SIGXCPU, SIGXFSZ are dlock's own business and ignored.
//   left      CMD exited but processes it started still run: with --orphans wait (the
//             default) the lease is kept as while CMD ran, until the last of them ends, as
//             flock's lock stays with whoever inherited the descriptor; --orphans kill ends
//             them (SIGTERM, SIGKILL after --lost-grace) before the release
//   ending    the lease is lost (a renewal found the key gone or taken), or no renewal has
//             succeeded and only grace + margin of validity is left, grace being
//             min(--lost-grace, TTL/3) so that renewals keep from TTL/3 to 2/3 TTL to heal and
//             the margin m = min(TTL/20, 250 ms), at least 20 ms, covering the wake-up of
//             dlock or the guard and the kill itself:
//             SIGTERM to CMD's tree, SIGKILL after --lost-grace and at the latest `margin`
//             before the validity ends; exit 71 whatever CMD returns
//   done      nothing CMD started is left: release at once, exit with CMD's status (128 +
//             signal if killed); with --min-hold D, a CMD that ended sooner than D after the
//             acquisition leaves the lock to expire D after it instead (a cron job on several
//             hosts runs once)
// dlock hands the guard each new last safe moment (after every renewal it sees; the loop looks
// every TTL/6, at most 250 ms), and the guard SIGKILLs CMD's tree by its own clock when that
// moment passes without a newer one: a dlock that is stopped (SIGSTOP, Ctrl-Z with
// --foreground) or blocked cannot renew, nor act, so it must not be what ends CMD (exit 71).
// Diagnostics never block (write_diagnostic), and signals go before the lines telling of them.
// With the defaults (TTL 10 s, --lost-grace 5 s) an outage that starts right after a renewal
// gives CMD SIGTERM 6.3 s and SIGKILL 9.6 s after that renewal began; its validity ends at
// 9.9 s (TTL less the drift allowance, 1 % + 2 ms) and the key on the servers at 10 s.
#include <CLI/CLI.hpp>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "cli.hpp"
#include "dlock/election.hpp"
#include "dlock/lock_set.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "dlock/shared_mutex.hpp"
#include "duration.hpp"
#include "lock_view.hpp"
#include "lock_wait.hpp"
#include "process.hpp"
#include "run_metrics.hpp"

extern char** environ;

namespace dlock::cli {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

// The margin m before the lease's validity ends by which CMD's tree has had SIGKILL:
// min(TTL/20, 250 ms), but at least 20 ms, which covers the guard's reaction (a wake-up and a
// pass over /proc) on a loaded host.
constexpr milliseconds kill_margin(milliseconds ttl) {
  return std::clamp(ttl / 20, milliseconds(20), milliseconds(250));
}

// The shortest TTL `run` takes, above min_ttl: a renewal is due every TTL/3 (+10 % jitter),
// and SIGTERM comes min(--lost-grace, TTL/3) + m before the validity ends (TTL less 1 % and
// 2 ms). At 200 ms that leaves a renewal about 35 ms to come back before SIGTERM.
constexpr milliseconds min_run_ttl{200};

// What happens to processes CMD leaves running when it exits.
enum class orphan_policy { wait, kill };

struct run_options : wait_flags {
  std::string key;
  std::vector<std::string> cmd;
  milliseconds ttl{10'000};
  milliseconds lost_grace{5'000};
  std::optional<milliseconds> min_hold;
  orphan_policy orphans = orphan_policy::wait;
  bool foreground = false;
  std::optional<int> semaphore_limit;
  // --read / --write: KEY is a read-write lock, held shared or exclusively.
  bool read = false, write = false;
  bool exclusive = false;  // -x/--exclusive: flock's name for the plain lock (the default)
  // --also: more locks taken with KEY, all or none (dlock::lock_set).
  std::vector<std::string> also;
  // Whether the lease is the one holder of a mutex (or a leadership), which the advisory
  // holder note (holder_key) names; a permit, a read-write lock's hold or a set is not.
  bool notes_holder() const { return !semaphore_limit && !read && !write && also.empty(); }
  // `dlock elect`: KEY is an election and this candidate's value; CMD runs while it leads.
  std::optional<std::string> elect_value;
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

// dlock's own settings, which CMD does not get: its lease's names (set anew below) and the
// Redis credentials.
bool hidden_from_cmd(std::string_view entry) {
  for (std::string_view name : {"DLOCK_KEY=", "DLOCK_TOKEN=", "DLOCK_FENCE=", "DLOCK_TERM=",
                                "DLOCK_PASSWORD=",
                                "DLOCK_USER=", "DLOCK_SENTINEL_PASSWORD=", "DLOCK_SENTINEL_USER="}) {
    if (entry.starts_with(name)) return true;
  }
  return false;
}

std::vector<std::string> child_environment(const run_options& o, const lease& held) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (!hidden_from_cmd(*e)) env.emplace_back(*e);
  }
  env.push_back("DLOCK_KEY=" + o.key);
  env.push_back("DLOCK_TOKEN=" + held.value());
  env.push_back("DLOCK_FENCE=" + std::to_string(held.fencing_token()));
  if (o.elect_value) env.push_back("DLOCK_TERM=" + std::to_string(held.fencing_token()));
  return env;
}

std::string command_text(const std::vector<std::string>& cmd) {
  std::string out;
  for (const auto& a : cmd) out += (out.empty() ? "" : " ") + a;
  return out;
}

// Why dlock is ending CMD's tree.
enum class ending {
  none,
  lease_lost,        // the watchdog says the lease is gone
  renewals_failed,   // no renewal succeeded and the validity is running out
  stopped_too_long,  // dlock was stopped (SIGTSTP) past what it could renew
  guard_deadline,    // the guard's clock reached the last safe moment first (dlock was
                     // stopped or blocked and could neither renew nor act)
  ended_too_late,    // the tree's end was learned only past the last safe moment, with no
                     // renewal since (dlock, the guard and CMD frozen together, then thawed)
  released_gone,     // CMD ended in time, but the release found the lease gone
  orphans,           // --orphans kill, after CMD exited
};

class supervisor {
 public:
  supervisor(const run_options& o, signal_inbox& signals, lease& held,
             std::vector<client>& nodes, const holder_info& holder, election* elected)
      : o_(o), signals_(signals), held_(held), nodes_(nodes), holder_(holder),
        election_(elected),
        acquired_at_(steady::now()),
        grace_(std::min(o.lost_grace, o.ttl / 3)),
        kill_margin_(kill_margin(o.ttl)) {}

  int run(const std::string& path) {
    auto alarm = std::make_shared<loss_alarm>();
    if (alarm->fd < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
    held_.keep_alive({.on_lost = [alarm](std::error_code ec) { alarm->ring(ec); }});
    // --metrics-file: a lock held past its expected time can be seen. After keep_alive, so that
    // a slow file system does not eat the lease's validity unrenewed.
    note_lock_held();

    // The wait, the holder note or a stop may have taken what the lease had to give.
    if (steady::now() >= last_safe_moment()) {
      say("the lease on '%s' was past its last safe moment before `%s` could start; not run",
          o_.key.c_str(), o_.cmd[0].c_str());
      finish(false, /*cmd_ran=*/false);
      return exit_lease_lost;
    }
    command_guard::start_failure failure;
    deadline_sent_ = last_safe_moment();
    guard_ = command_guard::start(path, o_.cmd, child_environment(o_, held_), !o_.foreground,
                                  deadline_sent_, alarm->fd, failure);
    if (!guard_) {
      say("%s", failure.message.c_str());
      if (failure.lease_ended) {
        finish(held_.lost().stop_requested(), /*cmd_ran=*/true);
        return exit_lease_lost;
      }
      finish(false, /*cmd_ran=*/false);
      if (failure.exec_errno == 0) return exit_software;
      return failure.exec_errno == ENOENT ? 127 : 126;  // as the shell reports them
    }
    say_verbose("running `%s` (pid %d) under '%s', fence %llu", command_text(o_.cmd).c_str(),
                static_cast<int>(guard_->cmd_pid()), o_.key.c_str(),
                static_cast<unsigned long long>(held_.fencing_token()));

    supervise(*alarm);
    if (guard_->guard_died() && guard_killed_) {
      // dlock killed a guard that did not act; the ending goes on as the guard would have.
      guard_->end_orphans();
    } else if (guard_->guard_died()) {
      // CMD itself died with the guard (PR_SET_PDEATHSIG); everything it started came to
      // dlock, a subreaper, and is ended before the release. No signal goes to CMD's process
      // group: CMD may have been reaped long ago, and its number may now name another group.
      guard_->end_orphans();
      say("CMD's guard process was killed; `%s` and everything it started were ended",
          o_.cmd[0].c_str());
      finish(lost_, true);
      return exit_software;
    }
    if (ending_ == ending::none || ending_ == ending::orphans) {
      // The tree's end may be learned late: a frozen holder thawed CMD first, and the guard
      // reaped it before its own deadline check. Work that may have gone on past the lease's
      // validity is never reported as done under the lock.
      if (guard_->deadline_passed()) {
        ending_ = ending::guard_deadline;
      } else if (held_.lost().stop_requested() || steady::now() >= last_safe_moment()) {
        ending_ = ending::ended_too_late;
      }
    }
    if (ending_ != ending::none && ending_ != ending::orphans) {
      say_ending(alarm->reason.load());
      finish(true, true);
      return exit_lease_lost;
    }
    int status = exit_status_of(guard_->cmd_status().value_or(0));
    if (!cmd_exit_noted_) {
      say_verbose("`%s` exited with status %d", o_.cmd[0].c_str(), status);
    }
    std::error_code released = finish(false, true);
    if (released == errc::lease_lost || released == errc::not_held) {
      ending_ = ending::released_gone;
      say_ending(0);
      return exit_lease_lost;
    }
    return status;
  }

 private:
  // Until nothing CMD started is left (or the guard is gone).
  void supervise(loss_alarm& alarm) {
    const auto refresh_every = std::max(o_.ttl / 3, 1ms);
    // How often renewals are looked for, to hand the guard its new deadline: a renewal comes
    // every TTL/3, and the guard's deadline is most of a TTL after the one before.
    const auto look_every = std::clamp(o_.ttl / 6, 1ms, milliseconds(250));
    auto refresh_at = steady::now() + refresh_every;
    for (;;) {
      if (guard_->tree_empty() || guard_->guard_died()) return;
      auto now = steady::now();
      auto wake = std::min({refresh_at, next_deadline(), now + look_every});
      auto ev = signals_.wait(
          std::chrono::ceil<milliseconds>(std::max(wake - now, steady::duration::zero())),
          {lost_ ? -1 : alarm.fd, guard_->news_fd()});
      for (const auto& s : ev.signals) on_signal(s);
      if (!lost_ && last_safe_moment() != deadline_sent_) {  // a renewal succeeded
        deadline_sent_ = last_safe_moment();
        guard_->set_deadline(deadline_sent_);
      }
      guard_->take_news();
      if (guard_->tree_empty() || guard_->guard_died()) return;
      if (guard_->cmd_status() && !cmd_exit_noted_) note_cmd_exit();
      bool alarm_rang = std::find(ev.ready.begin(), ev.ready.end(), alarm.fd) != ev.ready.end();
      if (!lost_ && (alarm_rang || held_.lost().stop_requested())) {
        lost_ = true;
        begin_ending(ending::lease_lost);
      }
      now = steady::now();
      if (ending_ == ending::none && now >= last_safe_moment() - grace_) {
        begin_ending(ending::renewals_failed);
      }
      if (ending_ != ending::none && !tree_killed_ && now >= kill_at()) kill_tree();
      if (tree_killed_ && !guard_killed_ && now >= guard_kill_at()) {
        say_verbose("CMD's guard did not end the tree in time (stopped?); killing it");
        guard_->kill_guard();
        guard_killed_ = true;
      }
      // refresh_at moves on even when nothing is published (--semaphore, a lost lease): it is
      // one of the loop's wake-ups, and one in the past would make it spin.
      if (now >= refresh_at) {
        if (!lost_ && o_.notes_holder()) {
          publish_holder(nodes_, o_.key, holder_, o_.ttl, /*wait=*/false);
        }
        refresh_at = now + refresh_every;
      }
    }
  }

  // The last moment anything CMD started may run: a margin before the lease's validity ends.
  steady::time_point last_safe_moment() const { return held_.valid_until() - kill_margin_; }

  // SIGKILL after --lost-grace, and at the latest at the last safe moment. Once SIGTERM went.
  steady::time_point kill_at() const {
    return std::min(*term_sent_ + o_.lost_grace, last_safe_moment());
  }

  // A guard that has not ended the tree this long after dlock asked does not act (it is
  // stopped): dlock kills it and ends the tree itself. Half the margin, so that this too
  // happens before the validity ends when the tree was killed at the last safe moment.
  steady::time_point guard_kill_at() const { return tree_killed_at_ + kill_margin_ / 2; }

  // When the loop must look again, besides signals and news.
  steady::time_point next_deadline() const {
    if (guard_killed_) return steady::time_point::max();  // the guard's end tells the rest
    if (tree_killed_) return guard_kill_at();
    return ending_ == ending::none ? last_safe_moment() - grace_ : kill_at();
  }

  void kill_tree() {
    guard_->end_tree();
    tree_killed_ = true;
    tree_killed_at_ = steady::now();
  }

  void begin_ending(ending why) {
    if (ending_ != ending::none && ending_ != ending::orphans) return;  // the first reason stands
    ending_ = why;
    if (term_sent_) return;
    term_sent_ = steady::now();
    guard_->signal_tree(SIGTERM);  // first: a blocked stderr must not hold it up
    say_verbose("SIGTERM to `%s` and what it started (%s of the lease's validity left); SIGKILL "
                "in at most %s",
                o_.cmd[0].c_str(), format_duration(held_.remaining()).c_str(),
                format_duration(std::chrono::ceil<milliseconds>(
                                    std::max(kill_at() - *term_sent_, steady::duration::zero())))
                    .c_str());
  }

  void note_cmd_exit() {
    cmd_exit_noted_ = true;
    int status = exit_status_of(*guard_->cmd_status());
    if (o_.orphans == orphan_policy::kill) {
      say_verbose("`%s` exited with status %d and left processes running; ending them "
                  "(--orphans kill)", o_.cmd[0].c_str(), status);
      begin_ending(ending::orphans);
    } else {
      say_verbose("`%s` exited with status %d; the lock stays held until the processes it left "
                  "running end (--orphans kill would end them)", o_.cmd[0].c_str(), status);
    }
  }

  void on_signal(const signalfd_siginfo& s) {
    int sig = static_cast<int>(s.ssi_signo);
    switch (role_of(sig).value_or(signal_role::ignore)) {
      case signal_role::terminate:
      case signal_role::inform:
        return forward(s);
      case signal_role::stop:
        return stop_together();
      case signal_role::resume:
        return resume_after_stop(s);
      case signal_role::ignore:
      case signal_role::child:
        return;
    }
  }

  void forward(const signalfd_siginfo& s) {
    int sig = static_cast<int>(s.ssi_signo);
    // With --foreground CMD shares our process group, so a signal from the terminal
    // (SI_KERNEL: Ctrl-C, hangup) has reached it already; forwarding would double it.
    if (o_.foreground && s.ssi_code == SI_KERNEL) return;
    say_verbose("forwarding signal %d (%s) to `%s`", sig, strsignal(sig), o_.cmd[0].c_str());
    guard_->signal_tree(sig);
  }

  // dlock cannot renew while stopped, so CMD's tree stops first (SIGSTOP: a CMD that ignores
  // SIGTSTP must stop too). Not while ending CMD: that has a deadline to keep.
  void stop_together() {
    if (ending_ != ending::none) return;
    say_verbose("stopping `%s` and dlock; the lease is not renewed while stopped",
                o_.cmd[0].c_str());
    guard_->signal_tree(SIGSTOP);
    stopped_ = true;
    ::kill(::getpid(), SIGSTOP);
  }

  // After our own stop, CMD resumes only under a lease that still holds: renewed now, or with
  // validity left when the nodes did not answer (the usual deadlines then apply). Otherwise it
  // is killed where it stopped, never running again. A SIGCONT of other origin is forwarded.
  void resume_after_stop(const signalfd_siginfo& s) {
    if (!stopped_) return forward(s);
    stopped_ = false;
    std::error_code ec = lost_ ? make_error_code(errc::lease_lost) : held_.extend();
    bool gone = ec == errc::lease_lost || ec == errc::lease_expired || ec == errc::not_held;
    if (!gone && steady::now() < last_safe_moment()) {
      say_verbose("resuming `%s`: the lease holds (%s left)", o_.cmd[0].c_str(),
                  format_duration(held_.remaining()).c_str());
      guard_->signal_tree(SIGCONT);
      return;
    }
    stop_error_ = ec ? ec : make_error_code(errc::lease_expired);
    lost_ = true;
    ending_ = ending::stopped_too_long;
    kill_tree();
  }

  void say_ending(int loss_reason) {
    const char* cmd = o_.cmd[0].c_str();
    switch (ending_) {
      case ending::lease_lost: {
        std::error_code why = loss_reason ? std::error_code(loss_reason, category())
                                          : make_error_code(errc::lease_lost);
        say("lost the lock on '%s' while `%s` ran (%s); it was stopped", o_.key.c_str(), cmd,
            why.message().c_str());
        return;
      }
      case ending::renewals_failed:
        say("could not renew the lock on '%s' in time; `%s` was stopped before the lease's "
            "validity ran out", o_.key.c_str(), cmd);
        return;
      case ending::stopped_too_long:
        say("the lock on '%s' was not kept while dlock was stopped (%s); `%s` was killed "
            "without running again", o_.key.c_str(), stop_error_.message().c_str(), cmd);
        return;
      case ending::guard_deadline:
        say("dlock could not renew the lock on '%s' in time (it was stopped or blocked); `%s` "
            "was killed at the lease's last safe moment", o_.key.c_str(), cmd);
        return;
      case ending::ended_too_late:
        say("`%s` ended, but dlock learned of it only after the lock on '%s' had passed its "
            "last safe moment without a renewal (dlock and CMD stopped or frozen together?): "
            "it may have run without the lock", cmd, o_.key.c_str());
        return;
      case ending::released_gone:
        say("`%s` ended, but the release found the lock on '%s' gone (expired, or deleted on "
            "the server): CMD may not have held it to the end", cmd, o_.key.c_str());
        return;
      case ending::none:
      case ending::orphans:
        return;
    }
  }

  // Releases (or keeps for --min-hold) and says what went wrong; returns the release's error
  // (lease_lost or not_held: the lease was gone).
  std::error_code finish(bool lost, bool cmd_ran) {
    if (!lost && cmd_ran && o_.min_hold) {
      if (auto kept = keep_for_min_hold()) return *kept;
    }
    if (!lost && o_.notes_holder()) clear_holder(nodes_, o_.key, held_.value());
    // A leader resigns, so that observers learn of it at once.
    std::error_code ec = election_ ? election_->resign(held_) : held_.release();
    if (ec == errc::lease_lost || ec == errc::not_held) return ec;  // the caller says it
    if (ec && !lost) {
      say("releasing '%s' failed (%s); it expires within %s", o_.key.c_str(), ec.message().c_str(),
          format_duration(o_.ttl).c_str());
    } else if (!lost) {
      say_verbose("released '%s'", o_.key.c_str());
    }
    return ec;
  }

  // --min-hold: while less than that has passed since the acquisition, the lock stays until
  // then (the holder annotation too, naming the run that finished). When kept, the outcome
  // of keeping it: lease_lost or not_held when the lease was found gone (the caller says so).
  std::optional<std::error_code> keep_for_min_hold() {
    auto left = std::chrono::ceil<milliseconds>(*o_.min_hold - (steady::now() - acquired_at_));
    if (left <= 0ms) return std::nullopt;
    std::error_code ec = held_.release_after(left);
    if (ec == errc::lease_lost || ec == errc::not_held) return ec;
    if (ec) {
      say("keeping '%s' for --min-hold failed (%s); released where it could be", o_.key.c_str(),
          ec.message().c_str());
      return std::error_code();
    }
    say_verbose("kept '%s' for --min-hold: it expires in %s", o_.key.c_str(),
                seconds_text(left).c_str());
    return std::error_code();
  }

  const run_options& o_;
  signal_inbox& signals_;
  lease& held_;
  std::vector<client>& nodes_;
  const holder_info& holder_;
  election* election_;  // `dlock elect`'s, else null
  steady::time_point acquired_at_;
  const milliseconds grace_;        // SIGTERM this long before the last safe moment
  const milliseconds kill_margin_;  // the last safe moment: this long before validity ends
  std::unique_ptr<command_guard> guard_;
  steady::time_point deadline_sent_;  // the last safe moment the guard knows
  bool lost_ = false;
  bool stopped_ = false;         // dlock stopped CMD and itself (SIGTSTP)
  bool cmd_exit_noted_ = false;  // CMD exited while processes it started ran on
  ending ending_ = ending::none;
  std::optional<steady::time_point> term_sent_;  // when CMD's tree got SIGTERM
  bool tree_killed_ = false;                     // the guard was told to SIGKILL it all
  steady::time_point tree_killed_at_;            // when
  bool guard_killed_ = false;                    // dlock SIGKILLed the guard (it did not act)
  std::error_code stop_error_;                   // why the lease did not survive a stop
};

int run_command(const global_options& g, const run_options& o) {
  if (o.ttl < min_run_ttl) {
    throw usage_error("--ttl must be at least " + std::to_string(min_run_ttl.count()) +
                      "ms for run: renewals come every TTL/3, and CMD gets SIGTERM "
                      "min(--lost-grace, TTL/3) + 20ms before the validity ends");
  }
  check_ttl(o.ttl);
  if (o.lost_grace < 0ms) throw usage_error("--lost-grace must not be negative");
  if (o.min_hold && *o.min_hold <= 0ms) throw usage_error("--min-hold must be positive");
  // The lock then lives on as a key with that TTL.
  if (o.min_hold && *o.min_hold > max_ttl) throw usage_error("--min-hold must be at most 30 days");
  auto path = find_program(o.cmd[0]);
  if (!path) {
    say("%s: command not found", o.cmd[0].c_str());
    return 127;
  }
  signal_inbox signals;  // before the first client: dlock's I/O thread inherits the mask
  auto nodes = make_clients(g);
  std::optional<mutex> lock;
  std::optional<semaphore> permits;
  std::optional<shared_mutex> read_write;
  std::optional<election> elected;
  std::optional<lock_set> set;
  lock_calls calls;
  if (!o.also.empty()) {
    if (nodes.size() != 1 || g.copies > 1) {
      throw usage_error("--also needs one Redis node or one Redis Cluster (no Redlock, no "
                        "--copies): a set is taken by one script per node or slot");
    }
    std::vector<std::string> names{o.key};
    names.insert(names.end(), o.also.begin(), o.also.end());
    set.emplace(nodes.front(), std::move(names), lock_options{.ttl = o.ttl, .retry_delay = 50ms});
    calls.try_once = [&](std::error_code& ec, node_results*) { return set->try_acquire(ec); };
    calls.wait_until = [&](steady::time_point deadline, std::error_code& ec, node_results*,
                           const wait_control& control) {
      return set->acquire_until(deadline, control, ec);
    };
  } else if (o.elect_value) {
    if (g.copies > 1) throw usage_error("elect does not take --copies");
    elected.emplace(nodes, o.key, *o.elect_value,
                    election_options{.lock = {.ttl = o.ttl, .retry_delay = 50ms}});
    calls.try_once = [&](std::error_code& ec, node_results*) {
      return elected->try_campaign(ec);
    };
    calls.wait_until = [&](steady::time_point deadline, std::error_code& ec, node_results*,
                           const wait_control& control) {
      return elected->campaign_until(deadline, control, ec);
    };
  } else if (o.semaphore_limit) {
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
  } else if (o.read || o.write) {
    if (nodes.size() != 1) {
      throw usage_error("--read and --write need exactly one Redis node: a quorum of "
                        "independent nodes cannot bound a read-write lock's holders");
    }
    read_write.emplace(nodes.front(), o.key,
                       shared_mutex_options{.ttl = o.ttl, .retry_delay = 50ms});
    calls.try_once = [&](std::error_code& ec, node_results*) {
      return o.read ? read_write->try_acquire_shared(ec) : read_write->try_acquire(ec);
    };
    calls.wait_until = [&](steady::time_point deadline, std::error_code& ec, node_results*,
                           const wait_control& control) {
      return o.read ? read_write->acquire_shared_until(deadline, control, ec)
                    : read_write->acquire_until(deadline, control, ec);
    };
  } else {
    lock.emplace(nodes, o.key,
                 lock_options{.ttl = o.ttl, .retry_delay = 50ms, .copies = g.copies});
    calls.try_once = [&](std::error_code& ec, node_results* votes) {
      return lock->try_acquire(votes, ec);
    };
    calls.wait_until = [&](steady::time_point deadline, std::error_code& ec, node_results* votes,
                           const wait_control& control) {
      return lock->acquire_until(deadline, control, votes, ec);
    };
  }

  wait_options w = wait_options_for(o, g, nodes.size(), o.key);
  // Nothing is held yet: a signal that would end dlock ends the wait, a stop stops it.
  w.watch = [&](milliseconds d, int wake_fd) {
    for (const auto& s : signals.wait(d, {wake_fd}).signals) {
      int sig = static_cast<int>(s.ssi_signo);
      auto role = role_of(sig);
      if (role == signal_role::terminate) return sig;
      if (role == signal_role::stop) ::kill(::getpid(), SIGSTOP);
    }
    return 0;
  };
  w.describe_holder = [&] {
    if (o.semaphore_limit) return semaphore_holder_status(nodes.front(), o.key, *o.semaphore_limit);
    if (o.read || o.write) return holder_status{};  // not shown yet
    return lock_holder_status(nodes, o.key, g.copies);
  };
  // A waiting run says who it is, as a holder does (status lists it beside its place in line).
  const auto waiting = make_holder_info("", static_cast<long>(::getpid()), command_text(o.cmd));
  w.note_waiter = [&](const std::string& id) {
    auto note = waiting;
    note.token = id;
    publish_waiter(nodes, o.key, note);
  };
  w.clear_waiter_note = [&](const std::string& id, bool awaited) {
    clear_waiter(nodes, o.key, id, awaited);
  };
  // KEY's (or an --also name's) kind, read from its key when the library's error did not say.
  w.kind_found = [&]() -> std::optional<std::string> {
    std::string wanted = o.semaphore_limit ? *marked_kind(semaphore_mark(*o.semaphore_limit, false))
                         : o.read || o.write ? "a read-write lock"
                                             : "a lock";
    std::vector<std::string> names{o.key};
    names.insert(names.end(), o.also.begin(), o.also.end());
    for (const auto& name : names) {
      std::error_code ec;
      auto value = nodes.front().exec({"GET", name}, ec);
      if (ec || !value.is_string()) continue;
      // A lock set is refused only by another kind's mark; a semaphore by any other value.
      if (!o.semaphore_limit && !marked_kind(value.str())) continue;
      return "'" + name + "' is held as " + held_as(value.str()) + ", not as " + wanted;
    }
    return std::nullopt;
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
  if (o.notes_holder()) publish_holder(nodes, o.key, holder, o.ttl, /*wait=*/false);
  supervisor s{o, signals, held, nodes, holder, elected ? &*elected : nullptr};
  return s.run(*path);
}

constexpr const char* supervision_rules =
    R"(Supervision: no process of CMD's tree runs without the lock.
  - CMD and everything it starts (even what leaves its process group) run below a guard
    process (lease-guard) that SIGKILLs all of it when dlock dies, SIGKILL included; if the
    guard alone is killed, dlock does. Both killed together: what CMD started runs on.
  - The tree must run as dlock's user; work handed to servers already running (tmux,
    systemd-run, docker, at, ssh) is not in it and not covered.
  - Signals that would end dlock (INT TERM HUP QUIT USR1 USR2 ALRM, ABRT TRAP SYS from kill
    ...) and WINCH are forwarded to CMD and what it started (SEGV BUS FPE ILL, 32 and 33 end
    dlock without a release); SIGTSTP stops them and dlock together, and SIGCONT
    resumes CMD only if the lease still holds (else it is killed, exit 71).
  - CMD's background children keep the lock held (--orphans wait) or are ended (kill).
  - Lease lost, or renewals failing until min(--lost-grace, TTL/3) of validity is left:
    SIGTERM, then SIGKILL before the validity ends; exit 71. The guard keeps that deadline
    on its own clock too, so a stopped or blocked dlock cannot let CMD run past it.
  - CMD does not see $DLOCK_PASSWORD, $DLOCK_USER or the $DLOCK_SENTINEL_ ones; it gets
    DLOCK_KEY/TOKEN/FENCE.)";

}  // namespace

namespace {

// The flags that `run` and `elect` share: how CMD is supervised.
void add_supervision_flags(CLI::App& app, run_options& o) {
  app.fallthrough();
  duration_option(app, "--ttl", o.ttl,
                  "Lease TTL, at least 200ms; renewed every TTL/3 while CMD runs (default 10s)");
  add_wait_flags(app, o);
  duration_option(app, "--lost-grace", o.lost_grace,
                  "When dlock ends CMD (lease lost or not renewed in time, --orphans kill): time "
                  "between SIGTERM and SIGKILL, never past the lease's validity (default 5s)");
  app.add_option("--orphans", o.orphans,
                 "Processes CMD leaves running when it exits: wait (default: the lease stays "
                 "held and renewed until the last one ends) or kill (SIGTERM, SIGKILL after "
                 "--lost-grace, before the release)")
      ->option_text("wait|kill")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, orphan_policy>{{"wait", orphan_policy::wait},
                                               {"kill", orphan_policy::kill}}));
  app.add_flag("--foreground", o.foreground,
               "Keep CMD in dlock's process group (for interactive CMDs reading the terminal); "
               "the terminal's signals then reach CMD directly");
  app.footer(supervision_rules);
}

// What follows the lock's name is the command's, as for flock: `NAME cmd -n x` runs `cmd -n
// x`; a leading `--` is dropped; `NAME -c STRING` runs STRING with $SHELL -c (else /bin/sh).
// Another word with a dash where CMD should be is an option put after NAME: refused with
// where options go, rather than run as a command or taken for one of ours.
std::vector<std::string> command_after_name(std::vector<std::string> words, const char* form) {
  const std::string forms = std::string("dlock ") + form + " [OPTIONS] NAME CMD [ARGS...], or " +
                            "dlock " + form + " [OPTIONS] NAME -c 'SHELL COMMAND'";
  if (!words.empty() && words[0] == "--") {
    words.erase(words.begin());
  } else if (!words.empty() && (words[0] == "-c" || words[0] == "--command")) {
    if (words.size() != 2) {
      throw usage_error(words[0] + " takes exactly one command string, as in flock: " + forms);
    }
    const char* shell = std::getenv("SHELL");
    return {shell && *shell ? shell : "/bin/sh", "-c", words[1]};
  } else if (!words.empty() && words[0].size() > 1 && words[0][0] == '-') {
    throw usage_error("'" + words[0] + "' after the lock's name: options go before NAME, " +
                      "since everything after NAME is the command, as in flock (" + forms +
                      "); to run a command whose name starts with '-', put -- before it");
  }
  if (words.empty()) throw usage_error("no command to run: " + forms);
  return words;
}

// The name (KEY of run, NAME of elect), then CMD: every word after the name, options of ours
// included (positionals_at_end).
void add_name_and_command(CLI::App& app, run_options& o, const std::string& name,
                          const std::string& name_help) {
  app.positionals_at_end();
  app.add_option(name, o.key, name_help)->required();
  app.add_option("CMD", o.cmd,
                 "The command and its arguments: every word after " + name +
                     " is CMD's, as for flock (-- before CMD is optional); -c STRING runs "
                     "STRING with $SHELL -c");
}

// This host's name and dlock's pid: who leads, for `dlock leader`.
std::string default_candidate_value() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  return std::string(host) + " pid " + std::to_string(::getpid());
}

}  // namespace

subcommand add_run_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<run_options>();
  auto* app = parent.add_subcommand(
      "run", "Run CMD while holding the lock KEY (waits for it, like flock), then release it");
  add_supervision_flags(*app, *o);
  duration_option(*app, "--min-hold", o->min_hold,
                  "Keep the lock at least this long after acquiring it, even when CMD ends "
                  "sooner: it then expires by itself (for a job scheduled on several hosts)");
  app->add_option("--semaphore", o->semaphore_limit,
                  "KEY is a semaphore: up to LIMIT CMDs at once (one Redis node only)")
      ->type_name("LIMIT")
      ->check(CLI::Range(1, 1'000'000));
  auto* read = app->add_flag("-s,--shared,--read", o->read,
                             "Hold KEY shared, as flock -s (one Redis node only): CMDs run with "
                             "--read run together, never beside a plain run, --write, --also or "
                             "another client's lock of KEY");
  auto* write = app->add_flag("--write", o->write,
                              "Hold KEY alone as a read-write lock's writer (one Redis node "
                              "only): readers that come after a waiting writer wait for it");
  auto* also = app->add_option("--also", o->also,
                               "Hold this lock too (repeatable): KEY and every --also are taken "
                               "together or not at all, so jobs that lock overlapping sets in "
                               "any order never deadlock (one Redis node or one cluster)")
                   ->type_name("KEY2")
                   ->allow_extra_args(false);
  auto* exclusive = app->add_flag("-x,-e,--exclusive", o->exclusive,
                                  "Hold KEY alone, as flock -x (the default)");
  read->excludes(write)->excludes("--semaphore")->excludes(also);
  write->excludes("--semaphore")->excludes(also);
  also->excludes("--semaphore");
  exclusive->excludes(read)->excludes(write)->excludes("--semaphore");
  add_name_and_command(*app, *o, "KEY", "The lock's name (its Redis key)");
  return {app, [&g, o] {
            o->cmd = command_after_name(std::move(o->cmd), "run");
            return run_command(g, *o);
          }};
}

subcommand add_elect_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<run_options>();
  auto value = std::make_shared<std::string>();
  auto* app = parent.add_subcommand(
      "elect", "Campaign in the election NAME and run CMD only while leader (DLOCK_TERM in its "
               "environment, SIGTERM when leadership is lost); resign when CMD ends");
  add_supervision_flags(*app, *o);
  app->add_option("--value", *value,
                  "What `dlock leader NAME` shows while this candidate leads (default: "
                  "\"HOST pid PID\")");
  add_name_and_command(*app, *o, "NAME", "The election's name (its lock's Redis key)");
  return {app, [&g, o, value] {
            o->cmd = command_after_name(std::move(o->cmd), "elect");
            o->elect_value = value->empty() ? default_candidate_value() : *value;
            return run_command(g, *o);
          }};
}

}  // namespace dlock::cli
