// The wait of `dlock run` and `dlock acquire`: the library waits (and queues, and takes the
// handoff); this adds signals, progress lines, the outage grace and the exit classes.
//
// A failure is either contention (another owner holds the key on enough nodes: wait for the
// release, up to -w) or an outage (too few nodes answered to make a quorum at all: a restart or
// a network blip heals within seconds, so keep trying for the grace period; a node that stays
// down must not make cron jobs queue up for ever, so then give up with 69).
#include "lock_wait.hpp"

#include <sys/eventfd.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <stop_token>
#include <thread>

#include "cli.hpp"
#include "duration.hpp"

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
    out += v.node + ": " + v.message;
  }
  return out;
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
      result.outcome =
          ec == errc::invalid_argument ? wait_outcome::failed : wait_outcome::unavailable;
      std::string why = node_failures(votes);
      result.message = "cannot lock '" + o.key + "': " + ec.message() +
                       (why.empty() ? "" : " (" + why + ")");
      return result;
    }
  }
  return result;
}

// What the I/O thread last reported, for the watcher's progress line.
struct progress_note {
  std::mutex guard;
  bool any = false;
  failure_kind kind = failure_kind::contention;
  std::string why;
  steady::duration waited{};
};

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
    note.waited = p.waited;
    note.why = p.kind == failure_kind::unavailable && p.votes ? node_failures(*p.votes) : "";
    if (note.why.empty()) note.why = p.last_error.message();
    return true;
  };

  wake_fd done;
  std::thread watcher([&] {
    auto next_progress = start + std::chrono::seconds(1);
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
        return;
      }
      pollfd p{done.get(), POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) return;
      if (!verbose() || steady::now() < next_progress) continue;
      next_progress = steady::now() + std::chrono::seconds(1);
      progress_note copy;
      {
        std::lock_guard lock(note.guard);
        if (!note.any) continue;
        copy.kind = note.kind;
        copy.why = note.why;
        copy.waited = note.waited;
      }
      if (copy.kind == failure_kind::contention) {
        std::string holder = o.describe_holder ? o.describe_holder() : "";
        say("waiting for '%s': held by %s; waited %s", o.key.c_str(),
            holder.empty() ? "another owner" : holder.c_str(), seconds_text(copy.waited).c_str());
      } else {
        say("waiting for '%s': no quorum of Redis nodes: %s; waited %s", o.key.c_str(),
            copy.why.c_str(), seconds_text(copy.waited).c_str());
      }
    }
  });
  auto deadline = o.wait ? start + *o.wait : steady::time_point::max();
  lease l = calls.wait_until(deadline, ec, &votes, control);
  done.wake();
  watcher.join();
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
