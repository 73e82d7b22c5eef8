// SPDX-License-Identifier: Apache-2.0
// fault_worker: one client process of a fault scenario; one thread per lock it contends for.
//   fault_worker --out FILE --resource URL --prefix P --seconds S
//                --lock KIND:NAME:LIMIT:URL[,URL...]   (repeat; KIND = mutex | semaphore |
//                                                       fair_semaphore |
//                                                       election, over every URL |
//                                                       cli_run: `dlock run` over every
//                                                       URL (needs --cli) |
//                                                       rwlock, whose LIMIT is ignored |
//                                                       lockset: the set {NAME, NAME-pair}
//                                                       on the first URL, recorded as NAME |
//                                                       mixed_kinds: NAME as every kind
//                                                       that shares it, on the first URL)
//                [--ttl MS] [--retry-delay MS] [--node-timeout MS] [--hold MIN-MAX]
//                [--write-every MS] [--stale-check] [--no-keep-alive] [--mixed] [--seed N]
//                [--quarantine MS]    (client_options::restart_quarantine)
//                [--guard MS]         (client_options::replication_guard, with this timeout)
//                [--cli PATH]         (the dlock command, for a cli_run lock)
// A --lock's URLs are separated by commas, except that one redis-sentinel:// URL (which has
// commas of its own) stands alone.
// Each thread loops until S seconds have passed: acquire, hold for a random time (in --hold's
// range, or one time in four for 1-2 TTLs) while writing to the fenced resource every
// --write-every ms (mutexes and a read-write lock's writers: dlock::fenced_set on P:NAME:data),
// release; a read-write lock's thread takes it shared three times in four. A lock set's holding
// is recorded (and writes through the fence) as one of NAME; so is an election's leadership,
// which ends by resign() five times in six. A mixed_kinds thread takes NAME,
// per holding at random, as a dlock::mutex, a shared_mutex writer or reader, or the lock set
// {NAME, NAME-pair}: one name is one lock (src/lua/include/name_mark.lua), so all are recorded
// as holdings of NAME, counted per kind (acquired.NAME.KIND); its holdings are shorter (the
// first quarter of --hold's range, one in eight 1-2 TTLs). Each thread records each holding
// as [acquired, last moment it believed it held] and each write with its verdict, and saves a
// report (history.hpp) to FILE at the end, stamped in real time even where libfaketime moves
// the clock that dlock reads (scenario_options::faked_client_clocks).
//   default        "careful": work, then check lost() and valid_until() right before each
//                  write; the holding is believed up to that check (assumption 5)
//   --stale-check  check, then work, then write: a pause during the work goes unnoticed, which
//                  is the paused-client case (the holding is believed up to the write)
//   --mixed        vary the API per holding (acquire_until + keep_alive, the Lockable facade
//                  with manual extend(), one-round try_acquire, async_acquire) and the ending
//                  (release, drop to the destructor, detach as a vanished holder would)
// It also sets P:NAME:holder = its pid on the resource, expiring when it means to let go, so a
// test can find the current holder to pause it.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "dlock/dlock.hpp"
#include "dlock/election.hpp"
#include "dlock/semaphore.hpp"
#include "fault/history.hpp"
#include "support/checks.hpp"

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct lock_spec {
  std::string kind, name;
  int limit = 1;
  std::vector<std::string> urls;
};

struct args {
  std::string out, resource, prefix = "fault";
  std::string cli;  // the dlock command, for a cli_run lock
  std::vector<lock_spec> locks;
  double seconds = 5;
  milliseconds ttl{800}, retry_delay{30}, node_timeout{0}, write_every{20}, quarantine{0};
  milliseconds guard{0};
  milliseconds hold_min{20}, hold_max{400};
  bool stale_check = false, keep_alive = true, mixed = false;
  unsigned seed = 0;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "fault_worker: %s\n", why.c_str());
  std::exit(64);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value for " + flag);
      return argv[++i];
    };
    if (flag == "--out")
      a.out = value();
    else if (flag == "--resource")
      a.resource = value();
    else if (flag == "--prefix")
      a.prefix = value();
    else if (flag == "--seconds")
      a.seconds = std::stod(value());
    else if (flag == "--ttl")
      a.ttl = milliseconds(std::stol(value()));
    else if (flag == "--retry-delay")
      a.retry_delay = milliseconds(std::stol(value()));
    else if (flag == "--node-timeout")
      a.node_timeout = milliseconds(std::stol(value()));
    else if (flag == "--quarantine")
      a.quarantine = milliseconds(std::stol(value()));
    else if (flag == "--guard")
      a.guard = milliseconds(std::stol(value()));
    else if (flag == "--write-every")
      a.write_every = milliseconds(std::stol(value()));
    else if (flag == "--stale-check")
      a.stale_check = true;
    else if (flag == "--no-keep-alive")
      a.keep_alive = false;
    else if (flag == "--mixed")
      a.mixed = true;
    else if (flag == "--cli")
      a.cli = value();
    else if (flag == "--seed")
      a.seed = static_cast<unsigned>(std::stoul(value()));
    else if (flag == "--hold") {
      auto range = split(value(), '-');
      if (range.size() != 2) usage("--hold MIN-MAX");
      a.hold_min = milliseconds(std::stol(range[0]));
      a.hold_max = milliseconds(std::stol(range[1]));
    } else if (flag == "--lock") {
      auto parts = split(value(), ':');
      // URLs contain ':' themselves: KIND:NAME:LIMIT: then the rest.
      if (parts.size() < 4) usage("--lock KIND:NAME:LIMIT:URL[,URL...]");
      lock_spec s{parts[0], parts[1], std::stoi(parts[2]), {}};
      std::string rest;
      for (std::size_t k = 3; k < parts.size(); ++k) rest += (k > 3 ? ":" : "") + parts[k];
      s.urls = rest.rfind("redis-sentinel://", 0) == 0 ? std::vector{rest} : split(rest, ',');
      a.locks.push_back(std::move(s));
    } else {
      usage("unknown flag " + flag);
    }
  }
  if (a.out.empty() || a.resource.empty() || a.locks.empty())
    usage("need --out, --resource, --lock");
  return a;
}

std::string self_path() {
  char path[4096];
  auto n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) usage("cannot read /proc/self/exe");
  return std::string(path, static_cast<std::size_t>(n));
}

// Runs `argv` and returns its exit status (128 + signal when killed, -1 when it cannot start).
// The child dies with the thread that started it (PR_SET_PDEATHSIG): a worker killed by its
// scenario leaves no `dlock run` behind (whose guard then ends CMD).
int spawn_and_wait(const std::vector<std::string>& argv) {
  std::vector<char*> raw;
  for (const auto& arg : argv) raw.push_back(const_cast<char*>(arg.c_str()));
  raw.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before the line above
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      ::kill(pid, SIGKILL);
      return -1;
    }
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string error_name(std::error_code ec) {
  if (ec.category() == dlock::category()) {
    return std::string(dlock::to_string(static_cast<dlock::errc>(ec.value())));
  }
  return ec.category().name() + std::string(":") + std::to_string(ec.value());
}

// Shared by the threads of this process.
class recorder {
 public:
  void add(dlock::fault::interval i) {
    std::lock_guard lock{m_};
    r_.intervals.push_back(std::move(i));
  }
  void add(dlock::fault::write_record w) {
    std::lock_guard lock{m_};
    r_.writes.push_back(std::move(w));
  }
  void count(const std::string& name, long long n = 1) {
    std::lock_guard lock{m_};
    r_.counters[name] += n;
  }
  bool save(const std::string& path) {
    std::lock_guard lock{m_};
    return r_.save(path);
  }

 private:
  std::mutex m_;
  dlock::fault::report r_;
};

// How a holding is recorded: the lock's limit and the holding's weight (history.hpp), and the
// kind that held it, for a name held as several kinds.
struct share {
  int limit = 0;  // 0: the lock spec's
  int weight = 1;
  const char* kind = nullptr;  // counted as acquired.NAME.KIND instead of acquired.NAME
};

class contender {
 public:
  contender(const args& a, const lock_spec& spec, recorder& rec, unsigned seed)
      : a_(a), spec_(spec), rec_(rec), rng_(seed), resource_(a.resource) {
    for (const auto& u : spec.urls) {
      nodes_.emplace_back(
          u, dlock::client_options{
                 .restart_quarantine = a_.quarantine,
                 .replication_guard = {.enabled = a_.guard.count() > 0, .timeout = a_.guard}});
    }
    data_key_ = a.prefix + ":" + spec.name + ":data";
    holder_key_ = a.prefix + ":" + spec.name + ":holder";
  }

  void run(steady::time_point end) {
    if (spec_.kind == "mixed_kinds") {
      run_mixed_kinds(end);
      return;
    }
    if (spec_.kind == "rwlock") {
      dlock::shared_mutex rw{nodes_.front(), spec_.name, options<dlock::shared_mutex_options>()};
      constexpr int all = static_cast<int>(dlock::shared_mutex::max_readers);
      while (steady::now() < end) {
        bool writer = pick(4) == 0;
        bool once = pick(4) == 0;
        std::error_code ec;
        dlock::lease held = writer ? (once ? rw.try_acquire(ec) : rw.acquire_until(deadline(end), ec))
                                   : (once ? rw.try_acquire_shared(ec)
                                           : rw.acquire_shared_until(deadline(end), ec));
        if (!held) {
          failed(ec);
          continue;
        }
        // Writers write through the fence; readers hold, each on its own lease.
        hold(held, end, writer, false, {all, writer ? all : 1});
        let_go(held);
      }
      return;
    }
    if (spec_.kind == "lockset") {
      dlock::lock_set set{nodes_.front(), {spec_.name, spec_.name + "-pair"},
                          options<dlock::lock_options>()};
      while (steady::now() < end) {
        int how = pick(4);
        std::error_code ec;
        dlock::lease held;
        if (how == 0) {
          held = set.try_acquire(ec);
        } else if (how == 1) {
          std::promise<std::pair<std::error_code, dlock::lease>> done;
          set.async_acquire_until(deadline(end), [&done](std::error_code e, dlock::lease got) {
            done.set_value({e, std::move(got)});
          });
          std::tie(ec, held) = done.get_future().get();
        } else {
          held = set.acquire_until(deadline(end), ec);
        }
        if (!held) {
          failed(ec);
          continue;
        }
        hold(held, end, true);
        let_go(held);
      }
      return;
    }
    if (spec_.kind == "cli_run") {
      run_cli(end);
      return;
    }
    if (spec_.kind == "election") {
      // Over every URL (a Redlock election when there are several); the term is the fence.
      dlock::election vote{nodes_, spec_.name, std::to_string(::getpid()),
                           {.lock = options<dlock::lock_options>()}};
      while (steady::now() < end) {
        std::error_code ec;
        dlock::lease led =
            pick(4) == 0 ? vote.try_campaign(ec) : vote.campaign_until(deadline(end), ec);
        if (!led) {
          failed(ec);
          continue;
        }
        hold(led, end, true);
        if (pick(6) == 0) {
          let_go(led);  // released as a lease, or dropped, or detached with --mixed
        } else if (auto e = vote.resign(led); e && e != dlock::errc::not_held) {
          rec_.count("error.resign." + error_name(e));
        }
      }
      return;
    }
    if (spec_.kind == "semaphore" || spec_.kind == "fair_semaphore") {
      auto o = options<dlock::semaphore_options>();
      o.fair = spec_.kind == "fair_semaphore";
      dlock::semaphore sem{nodes_.front(), spec_.name, spec_.limit, o};
      while (steady::now() < end) {
        std::error_code ec;
        dlock::lease permit =
            pick(4) == 0 ? sem.try_acquire(ec) : sem.acquire_until(deadline(end), ec);
        if (!permit) {
          failed(ec);
          continue;
        }
        hold(permit, end, false);
        let_go(permit);
      }
      return;
    }
    dlock::mutex lock{nodes_, spec_.name, options<dlock::lock_options>()};
    while (steady::now() < end) {
      int how = a_.mixed ? pick(4) : 0;
      std::error_code ec;
      if (how == 1) {  // the Lockable facade; renewals by hand
        bool locked = false;
        try {
          locked = lock.try_lock_until(deadline(end));
        } catch (const std::system_error& e) {  // errors that retrying cannot cure
          rec_.count("error.lock_threw." + error_name(e.code()));
        }
        if (!locked) {
          failed(lock.last_error(), lock.last_results());
          continue;
        }
        // current_lease() is const for readers; this thread is its only user, and extend() is safe
        // to call alongside reads.
        hold(const_cast<dlock::lease&>(*lock.current_lease()), end, true,
             /*manual=*/true);
        lock.unlock();
        if (lock.last_error()) rec_.count("error.release." + error_name(lock.last_error()));
        continue;
      }
      dlock::lease l;
      dlock::node_results votes;
      if (how == 2) {
        l = lock.try_acquire(&votes, ec);
      } else if (how == 3) {
        std::promise<std::pair<std::error_code, dlock::lease>> done;
        lock.async_acquire([&done](std::error_code e, dlock::lease got) {
          done.set_value({e, std::move(got)});
        });
        auto [e, got] = done.get_future().get();
        ec = e;
        l = std::move(got);
      } else {
        l = lock.acquire_until(deadline(end), &votes, ec);
      }
      if (!l) {
        failed(ec, votes);
        continue;
      }
      hold(l, end, true);
      let_go(l);
    }
  }

 private:
  // The arguments' TTL, pacing, node timeout and key prefix, as the options of any kind of lock
  // (each kind has an aggregate of its own, with these four members in this order).
  template <class Options>
  Options options() const {
    return {.ttl = a_.ttl,
            .retry_delay = a_.retry_delay,
            .node_timeout = a_.node_timeout,
            .key_prefix = a_.prefix + ":"};
  }

  // One name as every kind that shares it, on the first node. Recorded as one lock of
  // max_readers permits: a reader takes one, any other kind all of them, so an exclusive holding
  // beside any other holding, whatever the kinds, is an overlap. The exclusive kinds write
  // through the fence on P:NAME:data: the mutex and the shared_mutex draw from one counter
  // {NAME}:fence and a set raises it, so the fence audit spans the kinds too.
  void run_mixed_kinds(steady::time_point end) {
    dlock::mutex lock{nodes_.front(), spec_.name, options<dlock::lock_options>()};
    dlock::shared_mutex rw{nodes_.front(), spec_.name, options<dlock::shared_mutex_options>()};
    // A lock set refuses a client with the replication guard (lock_set.hpp).
    std::optional<dlock::lock_set> set;
    if (a_.guard.count() == 0)
      set.emplace(nodes_.front(), std::vector{spec_.name, spec_.name + "-pair"},
                  options<dlock::lock_options>());
    enum kind { mutex_kind, writer_kind, reader_kind, set_kind };
    static constexpr const char* kind_names[] = {"mutex", "writer", "reader", "set"};
    constexpr int all = static_cast<int>(dlock::shared_mutex::max_readers);
    // Shorter holdings, and fewer of them long: the name is exclusive most of the time, and
    // what is tried here is its changing hands between kinds, as often as a run allows.
    short_hold_max_ = a_.hold_min + (a_.hold_max - a_.hold_min) / 4;
    long_hold_one_in_ = 8;
    // The kinds come in shuffled rounds, each kind once per round: random, yet no kind goes
    // untried in the few holdings an exclusive lock gets in a run.
    std::vector<kind> round;
    while (steady::now() < end) {
      if (round.empty()) {
        round = {mutex_kind, writer_kind, reader_kind};
        if (set) round.push_back(set_kind);
        std::shuffle(round.begin(), round.end(), rng_);
      }
      kind k = round.back();
      round.pop_back();
      bool once = pick(4) == 0;  // a one-round try; else a wait of up to 2 s
      auto until = deadline(end);
      std::error_code ec;
      dlock::lease held;
      switch (k) {
        case mutex_kind:
          held = once ? lock.try_acquire(ec) : lock.acquire_until(until, ec);
          break;
        case writer_kind:
          held = once ? rw.try_acquire(ec) : rw.acquire_until(until, ec);
          break;
        case reader_kind:
          held = once ? rw.try_acquire_shared(ec) : rw.acquire_shared_until(until, ec);
          break;
        case set_kind:
          held = once ? set->try_acquire(ec) : set->acquire_until(until, ec);
          break;
      }
      if (!held) {
        failed(ec);
        continue;
      }
      bool reader = k == reader_kind;
      hold(held, end, /*fenced=*/!reader, false, {all, reader ? 1 : all, kind_names[k]});
      let_go(held);
    }
  }

  // `dlock run` over every URL, with this program's --run-child as CMD (run_child below). CMD
  // logs each step as it goes, since a holding that SIGKILL ends cannot report itself; once
  // the command has ended, this thread records CMD's holding from the log: from CMD's start to
  // the last moment it logged, which is before each write it sent (answered or not) and at its
  // end.
  void run_cli(steady::time_point end) {
    if (a_.cli.empty()) usage("a cli_run lock needs --cli");
    const std::string log = a_.out + ".cli";
    while (steady::now() < end) {
      auto [low, high] = hold_range();
      auto span = std::uniform_int_distribution<long>(low, high)(rng_);
      ::unlink(log.c_str());
      std::vector<std::string> argv{a_.cli};
      for (const auto& u : spec_.urls) argv.insert(argv.end(), {"-r", u});
      auto wait = std::chrono::duration_cast<milliseconds>(deadline(end) - steady::now());
      argv.insert(argv.end(),
                  {"run", "-q", "--ttl", std::to_string(a_.ttl.count()) + "ms", "-w",
                   std::to_string(std::max(wait, 1ms).count()) + "ms",
                   a_.prefix + ":" + spec_.name, "--", self_path(), "--run-child", log,
                   a_.resource, data_key_, std::to_string(span),
                   std::to_string(a_.write_every.count())});
      int status = spawn_and_wait(argv);
      std::ifstream in(log);
      dlock::fault::interval held{spec_.name, 1, 0, 0, 0, 1};
      for (std::string text; std::getline(in, text);) {
        std::istringstream line(text);
        std::string what;
        dlock::fault::stamp at = 0;
        dlock::fault::write_record w{spec_.name, 0, 0, 0, false};
        if (!(line >> what >> at)) {
          rec_.count("error.cli_run.log");
        } else if (what == "start" && line >> held.token) {
          held.start = at;
        } else if (what == "write" && line >> w.token >> w.answered >> w.accepted) {
          w.sent = at;
          rec_.add(w);
        } else if (what != "alive" && what != "end") {
          rec_.count("error.cli_run.log");
        }
        held.end = std::max(held.end, at);
      }
      if (held.start != 0) {
        rec_.count("acquired." + spec_.name);
        rec_.add(held);
      }
      if (status == 71) {
        rec_.count("lost");
      } else if (status == 75) {
        rec_.count("error.acquire.not_acquired");
      } else if (status == 69) {  // no quorum reachable within the wait
        rec_.count("error.acquire.unavailable");
      } else if (status != 0 || held.start == 0) {
        rec_.count("error.cli_run.exit_" + std::to_string(status));
      }
      if (status != 0) std::this_thread::sleep_for(a_.retry_delay);
    }
  }

  // After a failed acquisition: count it, and pause as a caller would (a one-round try on a dead
  // node fails at once).
  void failed(std::error_code ec, const dlock::node_results& votes = {}) {
    if (ec) rec_.count("error.acquire." + error_name(ec));
    // Unexpected server errors are shown as the node said them, so the summary can be traced.
    if (ec == dlock::errc::server_error || ec == dlock::errc::script_error) {
      for (const auto& v : votes) {
        if (v.outcome == dlock::node_result::vote::failed) {
          std::fprintf(stderr, "fault_worker %s: %s %s\n", spec_.name.c_str(), v.node.c_str(),
                       dlock::to_string(v).c_str());
        }
      }
    }
    std::this_thread::sleep_for(a_.retry_delay);
  }

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  steady::time_point deadline(steady::time_point end) const {
    return std::min(end, steady::now() + 2s);
  }

  // Holds `l` for a random time, writing through the fence every write_every; records the holding.
  // `manual`: renew with extend() instead of keep_alive().
  void hold(dlock::lease& l, steady::time_point end, bool fenced, bool manual = false,
            share recorded = {}) {
    auto acquired = steady::now();  // the clock dlock reads (under libfaketime, a moved one)
    auto acquired_at = dlock::fault::now_stamp();  // the history's: real time
    rec_.count("acquired." + spec_.name + (recorded.kind ? std::string(".") + recorded.kind : ""));
    bool kept = a_.keep_alive && !manual;
    if (kept) (void)l.keep_alive();
    auto [low, high] = hold_range();
    auto span = std::uniform_int_distribution<long>(low, high)(rng_);
    if (fenced) {  // "I hold it, for about this long"
      std::error_code ignored;
      resource_.exec({"SET", holder_key_, std::to_string(::getpid()), "PX", std::to_string(span)},
                     ignored);
    }
    auto until = std::min(acquired + milliseconds(span), end + a_.ttl);
    auto believed_at = acquired_at;
    auto still_held = [&](steady::time_point t) {
      return !l.lost().stop_requested() && t < l.valid_until();
    };
    for (;;) {
      if (a_.stale_check) {
        if (!still_held(steady::now())) break;
        std::this_thread::sleep_for(a_.write_every);  // a pause here goes unnoticed
        believed_at = dlock::fault::now_stamp();  // believed up to the write
      } else {
        std::this_thread::sleep_for(a_.write_every);
        if (manual && l.remaining() < a_.ttl / 2) {
          if (auto ec = l.extend()) rec_.count("error.extend." + error_name(ec));
        }
        // Stamped before the check: held at the check means held at this earlier moment.
        auto checked_at = dlock::fault::now_stamp();
        if (!still_held(steady::now())) break;
        believed_at = checked_at;
      }
      if (fenced) write(l.fencing_token());
      if (steady::now() >= until) break;
    }
    rec_.add(dlock::fault::interval{spec_.name, recorded.limit ? recorded.limit : spec_.limit,
                                    acquired_at, believed_at, l.fencing_token(),
                                    recorded.weight});
    // A kept-alive lease whose validity ran out must say so: lost() fires at the end of validity
    // (the watchdog's timer), give or take the I/O thread's scheduling (a slow build's, a busy
    // machine's: the bound scales).
    if (kept && !l.lost().stop_requested() && steady::now() >= l.valid_until()) {
      if (!dlock::test::eventually([&] { return l.lost().stop_requested(); }, 250ms)) {
        rec_.count("error.watchdog.lost_not_signalled");
      }
    }
    if (l.lost().stop_requested()) rec_.count("lost");
  }

  // How long a holding may last: one in long_hold_one_in_ outlasts the TTL, so that renewals
  // (and their failures) matter.
  std::pair<long, long> hold_range() {
    return pick(long_hold_one_in_) == 0
               ? std::pair<long, long>{a_.ttl.count(), 2 * a_.ttl.count()}
               : std::pair<long, long>{a_.hold_min.count(), short_hold_max_.count()};
  }

  // Releases `l`, or (mixed) drops it for the destructor to release, or detaches it as a holder
  // that vanished would: its key stays until the TTL.
  void let_go(dlock::lease& l) {
    int how = a_.mixed ? pick(6) : 0;
    if (how == 1) {
      dlock::lease dropped = std::move(l);
      return;
    }
    if (how == 2) {
      (void)l.detach();
      return;
    }
    if (auto ec = l.release(); ec && ec != dlock::errc::not_held) {
      rec_.count("error.release." + error_name(ec));
    }
  }

  void write(std::uint64_t token) {
    dlock::fault::write_record w{spec_.name, token, dlock::fault::now_stamp(), 0, false};
    std::error_code ec;
    w.accepted = dlock::fenced_set(resource_, data_key_, std::to_string(token), token, ec);
    w.answered = dlock::fault::now_stamp();
    if (ec) {
      rec_.count("error.write." + error_name(ec));  // outcome unknown: not audited
      return;
    }
    rec_.add(w);
  }

  const args& a_;
  const lock_spec& spec_;
  recorder& rec_;
  std::mt19937 rng_;
  std::vector<dlock::client> nodes_;
  dlock::client resource_;
  std::string data_key_, holder_key_;
  milliseconds short_hold_max_{a_.hold_max};
  int long_hold_one_in_ = 4;
};

// `dlock run`'s CMD: holds for `span` ms, writing DLOCK_FENCE through the fence every
// `every` ms. It logs one line per step, appended at once, so that a SIGKILL loses none:
// "start AT FENCE", "alive AT" right before each write is sent, "write SENT TOKEN ANSWERED
// ACCEPTED" for each answered one, "end AT" before it exits.
//   fault_worker --run-child LOG RESOURCE_URL DATA_KEY SPAN_MS EVERY_MS
int run_child(char** argv) {
  const char* fence_text = std::getenv("DLOCK_FENCE");
  if (!fence_text) usage("--run-child runs under dlock run, which sets DLOCK_FENCE");
  std::uint64_t fence = std::stoull(fence_text);
  std::FILE* log = std::fopen(argv[2], "a");
  if (!log) usage(std::string("cannot open ") + argv[2]);
  std::setvbuf(log, nullptr, _IONBF, 0);  // each line one write()
  auto line = [log](const std::string& text) { std::fputs((text + "\n").c_str(), log); };
  auto started = steady::now();
  line("start " + std::to_string(dlock::fault::now_stamp()) + " " + std::to_string(fence));
  dlock::client resource{argv[3]};
  const std::string key = argv[4];
  auto span = milliseconds(std::stol(argv[5]));
  auto every = milliseconds(std::stol(argv[6]));
  while (steady::now() < started + span) {
    std::this_thread::sleep_for(every);
    auto sent = dlock::fault::now_stamp();
    line("alive " + std::to_string(sent));
    std::error_code ec;
    bool accepted = dlock::fenced_set(resource, key, std::to_string(fence), fence, ec);
    if (ec) continue;  // outcome unknown: not audited
    line("write " + std::to_string(sent) + " " + std::to_string(fence) + " " +
         std::to_string(dlock::fault::now_stamp()) + " " + (accepted ? "1" : "0"));
  }
  line("end " + std::to_string(dlock::fault::now_stamp()));
  return 0;
}

// Under libfaketime (scenario_options::faked_client_clocks): counts "clock.jumped" each time
// this process's clocks move against the real ones by over half a TTL, so that a row whose
// fault is a clock jump can show the jumps happened. Until `end`.
void watch_clock_jumps(recorder& rec, milliseconds ttl, steady::time_point end) {
  auto offsets = [&] {
    auto ns = [](auto t) {
      return static_cast<long long>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
    };
    using dlock::fault::real_clock;
    return std::pair{ns(steady::now()) - real_clock(CLOCK_MONOTONIC),
                     ns(std::chrono::system_clock::now()) - real_clock(CLOCK_REALTIME)};
  };
  const long long half_ttl = std::chrono::nanoseconds(ttl).count() / 2;
  auto before = offsets();
  while (steady::now() < end) {
    std::this_thread::sleep_for(20ms);
    auto now = offsets();
    if (std::llabs(now.first - before.first) > half_ttl ||
        std::llabs(now.second - before.second) > half_ttl) {
      rec.count("clock.jumped");
    }
    before = now;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--run-child") return run_child(argv);
  args a = parse(argc, argv);
  recorder rec;
  auto end = steady::now() +
             std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(a.seconds));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < a.locks.size(); ++i) {
    threads.emplace_back([&, i] {
      contender c{a, a.locks[i], rec,
                  a.seed * 7919u + static_cast<unsigned>(i) * 104729u + ::getpid()};
      c.run(end);
    });
  }
  if (std::getenv("FAKETIME_TIMESTAMP_FILE")) {
    threads.emplace_back([&] { watch_clock_jumps(rec, a.ttl, end); });
  }
  for (auto& t : threads) t.join();
  return rec.save(a.out) ? 0 : 1;
}
