// SPDX-License-Identifier: Apache-2.0
// The wait of `dlock run` and `dlock acquire`: the library waits (and queues, and takes the
// handoff); this adds signals, the wait's status line, the outage grace and the exit classes.
//
// The status says who holds the lock and for how long, because a wait that says nothing looks
// like a hang. On a terminal it is one line, rewritten in place each second. Elsewhere (cron's
// mail, a log file) every write stays, so a line comes only when there is news: a new holder, or
// the state turning between held and no quorum.
//
// A failure is either contention (another owner holds the key on enough nodes: wait for the
// release, up to -w) or an outage (too few nodes answered to make a quorum at all: a restart or
// a network blip heals within seconds, so keep trying for the grace period; a node that stays
// down must not make cron jobs queue up for ever, so then give up with 69).
#include "lock_wait.hpp"

#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stop_token>
#include <thread>

#include "cli.hpp"
#include "dlock/key_layout.hpp"
#include "duration.hpp"
#include "key_names.hpp"
#include "lock_view.hpp"

namespace dlock::cli {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Why the nodes failed, for the one-line message: "127.0.0.1:6380: connection refused; ...".
std::string node_failures(const node_results& votes) {
  std::string out;
  for (const auto& v : votes) {
    if (v.outcome != node_result::vote::failed) continue;
    if (!out.empty()) out += "; ";
    out += v.node + ": " + with_remedy(v.error, v.message);
  }
  return out;
}

// "'KEY' is held as a semaphore of 3 permits (fair), not as a lock" when a node refused the
// name as held by another kind (name_kinds.lua's WRONGTYPE), else nothing.
std::optional<std::string> held_as_another_kind(const std::string& key,
                                                const node_results& votes) {
  static constexpr std::string_view said = "WRONGTYPE dlock: the name is ";
  for (const auto& v : votes) {
    if (v.error != errc::wrong_type || !v.message.starts_with(said)) continue;
    return "'" + key + "' is " + v.message.substr(said.size());
  }
  return std::nullopt;
}

wait_result judge(const wait_options& o, std::error_code ec, const node_results& votes,
                  steady::duration waited) {
  wait_result result;
  result.ec = ec;
  switch (classify_failure(ec, votes)) {
    case failure_kind::contention:
      result.outcome = wait_outcome::conflict;
      result.message = "'" + o.key + "' is held by another owner" +
                       (o.nonblock ? "" : "; gave up after " + seconds_text(waited));
      return result;
    case failure_kind::unavailable: {
      result.outcome = wait_outcome::unavailable;
      std::string why = node_failures(votes);
      result.message = "no quorum of Redis nodes for '" + o.key + "' (" +
                       std::to_string(o.node_count / 2 + 1) + " of " +
                       std::to_string(o.node_count) + " needed): " +
                       (why.empty() ? ec.message() : why);
      return result;
    }
    case failure_kind::fatal: {
      auto kind = held_as_another_kind(o.key, votes);
      if (!kind && ec == errc::wrong_type && o.kind_found) kind = o.kind_found();
      if (kind) {
        // One name is one lock: a semaphore where a lock was asked for, or a semaphore of
        // another limit. Waiting cannot cure it; the user must pick one.
        result.outcome = wait_outcome::failed;
        result.message = *kind + " (see `dlock status`); one name is one lock: use the same " +
                         "kind and limit, or another name";
        return result;
      }
      result.outcome =
          ec == errc::invalid_argument ? wait_outcome::failed : wait_outcome::unavailable;
      std::string why = node_failures(votes);
      // The remedy once: with the nodes' errors when there are any, else with ours.
      result.message = "cannot lock '" + o.key + "': " +
                       (why.empty() ? with_remedy(ec, ec.message()) : ec.message() + " (" + why + ")");
      return result;
    }
  }
  return result;
}

// What the I/O thread last reported, for the watcher's status line.
struct progress_note {
  std::mutex guard;
  bool any = false;
  failure_kind kind = failure_kind::contention;
  std::string why;
  std::string waiter_id;  // what the wait queues under (wait_progress::waiter_id)
};

// A terminal that understands "\r" and clear-to-end-of-line ("\x1b[K"); TERM=dumb does not.
bool stderr_is_terminal() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) == 1 && !(term && std::string_view(term) == "dumb");
}

// `line` cut to the terminal's width: a line that wraps cannot be rewritten with "\r". Cuts
// before a UTF-8 continuation byte, never inside a character.
std::string fit_terminal(std::string line) {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) != 0 || size.ws_col < 2) return line;
  std::size_t width = size.ws_col - 1u;
  if (line.size() <= width) return line;
  while (width > 0 && (static_cast<unsigned char>(line[width]) & 0xC0) == 0x80) --width;
  line.resize(width);
  return line;
}

void write_stderr(const std::string& text) { write_diagnostic(text); }

// The wait's status on stderr: live (one line rewritten in place) on a terminal, else a line
// per change of `state`.
class status_line {
 public:
  explicit status_line(const std::string& key)
      : prefix_("dlock: waiting for '" + key + "': "), live_(stderr_is_terminal()) {}

  // `state` names what the line reports (the holder, or "no quorum"); `text` says it.
  void show(const std::string& state, const std::string& text, steady::duration waited) {
    if (!live_ && state == state_) return;
    state_ = state;
    text_ = text;
    write(waited);
  }
  // The wait is over: the live line gets its last time waited and a newline, so that what
  // follows starts a line of its own.
  void finish(steady::duration waited) {
    if (!live_ || state_.empty()) return;
    write(waited);
    write_stderr("\n");
  }

 private:
  void write(steady::duration waited) {
    std::string line = prefix_ + text_ + "; waited " + seconds_text(waited);
    write_stderr(live_ ? "\r\x1b[K" + fit_terminal(std::move(line)) : line + "\n");
  }

  std::string prefix_;
  bool live_;
  std::string state_;  // empty until the first show()
  std::string text_;
};

// How long a wait pauses after a replication guard's miss before it asks again: the replicas
// are not back within a round trip, and each grant given back costs the master two scripts.
constexpr milliseconds replication_retry_pause{100};

// Sleeps `pause`, false at once when `stop` is requested or the pause would end past `deadline`.
bool pause_within(std::stop_token stop, milliseconds pause, steady::time_point deadline) {
  if (steady::now() + pause >= deadline) return false;
  std::mutex m;
  std::condition_variable_any woken;
  std::unique_lock lock(m);
  woken.wait_for(lock, stop, pause, [] { return false; });
  return !stop.stop_requested();
}

// Ends the watcher at once (it polls this fd besides the signals).
class wake_fd {
 public:
  wake_fd() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~wake_fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }
  void wake() const noexcept {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
  }

 private:
  int fd_;
};

}  // namespace

holder_status lock_holder_status(std::vector<client>& nodes, const std::string& key, int copies) {
  auto view = inspect_lock(nodes, key, read_queue::no, copies);
  if (!view.held()) return {};
  holder_status status;
  // The note arrives just after the lock (the holder writes it once it holds): its arrival is
  // news too.
  status.who = *view.token + (view.holder ? " noted" : "");
  const bool rw = mark_part(*view.token) == read_write_lock_mark;
  status.text = view.holder ? describe(*view.holder)
                : rw        ? "readers or a writer (--read/--write)"
                            : "another owner";
  if (view.pttl_ms >= 0) status.text += ", expires in " + seconds_text(milliseconds(view.pttl_ms));
  return status;
}

holder_status semaphore_holder_status(client& node, const std::string& key, long long limit) {
  // `dlock run --semaphore` has no fair variant, so neither has its wait.
  auto view = inspect_semaphore(node, key, /*fair=*/false);
  if (!view.answered() || view.holders.empty()) return {};
  holder_status status;
  std::vector<std::string> tokens;
  for (const auto& h : view.holders) tokens.push_back(h.token);
  std::sort(tokens.begin(), tokens.end());
  for (const auto& t : tokens) status.who += t + " ";
  status.text = std::to_string(view.holders.size()) +
                (view.holders.size() == 1 ? " holder" : " holders") + " (" +
                std::to_string(view.in_use) + " of " + std::to_string(limit) +
                " permits), the first expires in " +
                seconds_text(milliseconds(view.holders.front().expires_in_ms));
  return status;
}

wait_result wait_for_lock(const lock_calls& calls, const wait_options& o) {
  const auto start = steady::now();
  node_results votes;
  std::error_code ec;
  if (o.nonblock) {
    lease l = calls.try_once(ec, &votes);
    if (l) return {wait_outcome::acquired, std::move(l), {}, {}, 0};
    return judge(o, ec, votes, steady::now() - start);
  }

  std::stop_source stopper;
  std::atomic<int> signal{0};
  progress_note note;
  wait_control control;
  control.stop = stopper.get_token();
  // On the I/O thread: must not block. The outage grace is counted here, so that the library
  // ends the wait with the outage's error.
  std::optional<steady::time_point> unavailable_since;
  control.on_retry = [&](const wait_progress& p) {
    auto now = steady::now();
    if (p.kind == failure_kind::unavailable) {
      if (!unavailable_since) unavailable_since = now;
      if (now - *unavailable_since >= o.unavailable_grace) return false;
    } else {
      unavailable_since.reset();
    }
    std::lock_guard lock(note.guard);
    note.any = true;
    note.kind = p.kind;
    note.why = p.kind == failure_kind::unavailable && p.votes ? node_failures(*p.votes) : "";
    if (note.why.empty()) note.why = p.last_error.message();
    if (note.waiter_id != p.waiter_id) note.waiter_id = p.waiter_id;
    return true;
  };

  wake_fd done;
  std::string noted;  // the waiter id the note was written under (watcher thread)
  std::thread watcher([&] {
    status_line line(o.key);
    auto next_look = start, next_note = start;
    for (;;) {
      int sig = 0;
      if (o.watch) {
        sig = o.watch(milliseconds(250), done.get());
      } else {
        pollfd p{done.get(), POLLIN, 0};
        ::poll(&p, 1, 250);
      }
      if (sig) {
        signal = sig;
        stopper.request_stop();
        break;
      }
      pollfd p{done.get(), POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) break;
      progress_note copy;
      {
        std::lock_guard lock(note.guard);
        if (!note.any) continue;
        copy.kind = note.kind;
        copy.why = note.why;
        copy.waiter_id = note.waiter_id;
      }
      // Who waits, as a holder says who holds: renewed about once a second.
      if (o.note_waiter && !copy.waiter_id.empty() && steady::now() >= next_note) {
        if (!noted.empty() && noted != copy.waiter_id && o.clear_waiter_note) {
          o.clear_waiter_note(noted, false);
        }
        o.note_waiter(copy.waiter_id);
        noted = copy.waiter_id;
        next_note = steady::now() + std::chrono::seconds(1);
      }
      if (!o.show_status || steady::now() < next_look) continue;
      // The holder is read about once a second: each look costs a round trip to every node.
      next_look = steady::now() + std::chrono::seconds(1);
      if (copy.kind == failure_kind::contention) {
        holder_status holder =
            o.describe_holder ? o.describe_holder() : holder_status{"?", "another owner"};
        if (holder.who.empty()) continue;  // released a moment ago: the next attempt tells
        line.show("held " + holder.who, "held by " + holder.text, steady::now() - start);
      } else {
        line.show("no quorum", "no quorum of Redis nodes: " + copy.why, steady::now() - start);
      }
    }
    line.finish(steady::now() - start);
  });
  auto deadline = o.wait ? start + *o.wait : steady::time_point::max();
  lease l = calls.wait_until(deadline, ec, &votes, control);
  // A replication guard's miss (--replication-guard) ends the library's wait, the grant given
  // back. To the command it is an outage like nodes that do not answer, which a replica's
  // return cures: the wait goes on, up to -w, or for the outage grace from the first miss
  // (its own clock: within the library's wait, another waiter's unconfirmed grant counts as
  // contention, and would restart the library's).
  std::optional<steady::time_point> first_miss;
  auto missed = [&] {
    return o.replication_guard && !l &&
           (ec == errc::replication_not_confirmed || ec == errc::lease_expired);
  };
  while (missed() && signal.load() == 0) {
    auto now = steady::now();
    if (!first_miss) first_miss = now;
    if (now - *first_miss >= o.unavailable_grace) break;
    {
      std::lock_guard lock(note.guard);
      note.any = true;
      note.kind = failure_kind::unavailable;
      note.why = ec.message();
    }
    if (!pause_within(control.stop, replication_retry_pause, deadline)) break;
    l = calls.wait_until(deadline, ec, &votes, control);
  }
  done.wake();
  watcher.join();
  // Awaited unless the lock is held: dlock may exit next, which would drop an unsent write.
  bool acquired = l && signal.load() == 0;
  if (!noted.empty() && o.clear_waiter_note) o.clear_waiter_note(noted, !acquired);
  if (l && signal.load() == 0) return {wait_outcome::acquired, std::move(l), {}, {}, 0};
  if (signal.load() != 0) {
    // The watcher took the signal from the queue, so nobody else will see it: a lock granted
    // as it came is given back, as one granted a moment later would never have been.
    if (l) l.release();
    wait_result result;
    result.outcome = wait_outcome::interrupted;
    result.ec = ec;
    result.signal = signal.load();
    result.message = "interrupted by signal " + std::to_string(result.signal) +
                     " while waiting for '" + o.key + "'";
    return result;
  }
  return judge(o, ec, votes, steady::now() - start);
}

}  // namespace dlock::cli
