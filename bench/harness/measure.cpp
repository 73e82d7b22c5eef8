// SPDX-License-Identifier: Apache-2.0
// The dlock side of lock_bench: threads that use the public API exactly as an application
// would (dlock::mutex's lock()/unlock()), and callback chains that use its async API
// (async_acquire, lease::async_release) on dlock's I/O thread, timed with steady_clock.
//
// Every scenario runs a warm-up that is not recorded, then a window that is. A sample counts
// only when it starts and ends inside the window, so that thread start-up and the drain at the
// end do not show. Server work is read from INFO commandstats before and after the whole run
// (warm-up included) and divided by every cycle or acquisition of the run, warm-up included.
#include "harness/measure.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

#include <asio/post.hpp>

#include "dlock/mutex.hpp"

namespace dlock::bench {
namespace {

// CPU time (user + system) of this whole process, every thread, in microseconds.
double process_cpu_us() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto us = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
  return us(u.ru_utime) + us(u.ru_stime);
}

double ms_between(bench_clock::time_point a, bench_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

const std::set<std::string>& admin_commands() {
  static const std::set<std::string> names{"info",  "ping",   "config", "client", "script",
                                           "flushall", "hello", "command", "select", "auth"};
  return names;
}

bool is_admin(const std::string& name) {
  return admin_commands().count(name.substr(0, name.find('|'))) != 0;
}

std::vector<double> merge(std::vector<std::vector<double>>& parts) {
  std::vector<double> all;
  for (auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

}  // namespace

percentiles summarize(std::vector<double> samples_ms) {
  percentiles out;
  out.samples = samples_ms.size();
  if (samples_ms.empty()) return out;
  std::sort(samples_ms.begin(), samples_ms.end());
  auto at = [&](double q) {
    auto i = static_cast<std::size_t>(q * static_cast<double>(samples_ms.size() - 1) + 0.5);
    return samples_ms[std::min(i, samples_ms.size() - 1)];
  };
  out.p50_ms = at(0.50);
  out.p99_ms = at(0.99);
  out.mean_ms = std::accumulate(samples_ms.begin(), samples_ms.end(), 0.0) /
                static_cast<double>(samples_ms.size());
  return out;
}

command_counts commandstats(std::vector<client>& nodes) {
  command_counts counts;
  for (auto& node : nodes) {
    std::istringstream text(node.exec({"INFO", "commandstats"}).str());
    std::string line;
    while (std::getline(text, line)) {
      // cmdstat_evalsha:calls=123,usec=456,usec_per_call=...
      if (line.rfind("cmdstat_", 0) != 0) continue;
      auto colon = line.find(':');
      auto calls = line.find("calls=", colon);
      auto usec = line.find("usec=", colon);
      if (colon == std::string::npos || calls == std::string::npos || usec == std::string::npos) continue;
      auto& stat = counts[line.substr(8, colon - 8)];
      stat.calls += std::stoull(line.substr(calls + 6));
      stat.usec += std::stoull(line.substr(usec + 5));
    }
  }
  return counts;
}

namespace {

command_stat delta(const command_counts& before, const std::string& name, const command_stat& after) {
  auto it = before.find(name);
  if (it == before.end()) return after;
  return {after.calls - it->second.calls, after.usec - it->second.usec};
}

}  // namespace

double calls_between(const command_counts& before, const command_counts& after,
                     const std::set<std::string>& only) {
  double total = 0;
  for (const auto& [name, stat] : after) {
    if (only.empty() ? is_admin(name) : only.count(name) == 0) continue;
    total += static_cast<double>(delta(before, name, stat).calls);
  }
  return total;
}

std::set<std::string> top_level_commands(const std::string& library) {
  if (library == "redis-semaphore") return {"set", "evalsha", "eval"};
  // dlock: also a free lock's (or semaphore's) first try, counted by its MGET, and the fair
  // semaphore's and read-write lock's MULTI ... EXEC (add_server_figures).
  if (library == "dlock") {
    return {"evalsha", "eval", "subscribe", "unsubscribe", "mget", "multi", "exec"};
  }
  return {"evalsha", "eval"};
}

void add_server_figures(row& r, const command_counts& before, const command_counts& after,
                        const std::string& library, double ops) {
  add_server_figures(r, before, after, top_level_commands(library), ops);
}

void add_server_figures(row& r, const command_counts& before, const command_counts& after,
                        const std::set<std::string>& sent, double ops) {
  if (ops <= 0) return;
  double usec = 0;
  for (const auto& [name, stat] : after) {
    if (is_admin(name)) continue;
    auto d = delta(before, name, stat);
    if (d.calls > 0) r.figures["calls_per_op." + name] = static_cast<double>(d.calls) / ops;
    if (sent.count(name)) usec += static_cast<double>(d.usec);
  }
  double sent_calls = calls_between(before, after, sent);
  // dlock's free-lock first try (lock_protocol.hpp's unqueued_commands) is SET, INCR and MGET
  // in one write; the semaphore's solo grant (semaphore_protocol.hpp) the same, or, fair, with
  // MULTI / SET / EXISTS / EXEC in place of the SET. The MGET is theirs alone; SET and INCR are
  // also called inside scripts, which commandstats counts under the same names (and within
  // EVALSHA's time), so the try's are charged at the average cost of a call of that name: 1
  // INCR per MGET, and 1 SET per MGET not in a transaction (EXEC's time holds its SET and
  // EXISTS, and EXEC is counted whole).
  if (sent.count("mget") && after.count("mget")) {
    auto count_of = [&](const std::string& name) {
      auto it = after.find(name);
      return it == after.end() ? 0.0 : static_cast<double>(delta(before, name, it->second).calls);
    };
    auto tries = count_of("mget");
    auto in_transaction = std::min(tries, count_of("exec"));
    auto average_usec = [&](const std::string& name) {
      auto it = after.find(name);
      if (it == after.end()) return 0.0;
      auto d = delta(before, name, it->second);
      return d.calls ? static_cast<double>(d.usec) / static_cast<double>(d.calls) : 0.0;
    };
    usec += tries * average_usec("incr") + (tries - in_transaction) * average_usec("set");
    sent_calls += 2 * tries + in_transaction;  // INCR and SET each, and EXISTS in a transaction
  }
  r.figures["cmds_sent_per_op"] = sent_calls / ops;
  r.figures["server_cmds_per_op"] = calls_between(before, after) / ops;
  r.figures["server_usec_per_op"] = usec / ops;
}

void add_cycle_figures(row& r, std::vector<double> samples_ms, const timing& t, double errors) {
  auto in_window = static_cast<double>(samples_ms.size());
  auto p = summarize(std::move(samples_ms));
  r.figures["cycles_per_s"] = in_window / std::chrono::duration<double>(t.measure).count();
  r.figures["p50_ms"] = p.p50_ms;
  r.figures["p99_ms"] = p.p99_ms;
  r.figures["samples"] = static_cast<double>(p.samples);
  r.figures["errors"] = errors;
}

void flush_all(std::vector<client>& nodes) {
  for (auto& node : nodes) node.exec({"FLUSHALL"});
}

namespace {

// The row both uncontended variants report: latencies are in-window cycles; counts, server
// figures and client CPU cover every cycle, warm-up included.
row uncontended_row(const std::string& variant, std::size_t nodes, int lockers,
                    std::vector<std::vector<double>>& latencies, double total_cycles,
                    double errors, const timing& t, const command_counts& before,
                    const command_counts& after, double cpu_used) {
  row r{"uncontended", "dlock", variant, static_cast<int>(nodes), lockers, {}, {}};
  add_cycle_figures(r, merge(latencies), t, errors);
  add_server_figures(r, before, after, "dlock", total_cycles);
  if (total_cycles > 0) r.figures["client_cpu_us_per_op"] = cpu_used / total_cycles;
  return r;
}

}  // namespace

row run_uncontended(std::vector<client> nodes, int lockers, const timing& t,
                    const std::string& key_prefix, lock_options options) {
  std::vector<std::vector<double>> latencies(static_cast<std::size_t>(lockers));
  std::vector<std::uint64_t> cycles(static_cast<std::size_t>(lockers), 0);
  std::atomic<std::uint64_t> errors{0};
  auto before = commandstats(nodes);
  double cpu_before = process_cpu_us();

  auto start = bench_clock::now() + milliseconds(20);  // all threads exist by then
  auto begin = start + t.warm, end = begin + t.measure;
  std::vector<std::thread> threads;
  for (int i = 0; i < lockers; ++i) {
    threads.emplace_back([&, i] {
      auto& mine = latencies[static_cast<std::size_t>(i)];
      mine.reserve(16384);
      mutex lock{nodes, key_prefix + std::to_string(i), options};
      std::this_thread::sleep_until(start);
      for (;;) {
        auto t0 = bench_clock::now();
        if (t0 >= end) break;
        try {
          lock.lock();
          lock.unlock();
          if (lock.last_error()) ++errors;
        } catch (const std::exception&) {
          ++errors;
          continue;
        }
        auto t1 = bench_clock::now();
        ++cycles[static_cast<std::size_t>(i)];
        if (t0 >= begin && t1 <= end) mine.push_back(ms_between(t0, t1));
      }
    });
  }
  for (auto& th : threads) th.join();
  double cpu_used = process_cpu_us() - cpu_before;
  auto after = commandstats(nodes);

  double total_cycles = std::accumulate(cycles.begin(), cycles.end(), 0.0);
  return uncontended_row("threads, lock()+unlock()", nodes.size(), lockers, latencies,
                         total_cycles, static_cast<double>(errors.load()), t, before, after,
                         cpu_used);
}

namespace {

// One async locker: a callback chain that never leaves dlock's I/O thread once started. Each
// cycle is async_acquire, then async_release of the granted lease from inside the acquire's
// completion, then the next cycle from inside the release's completion. A cycle's latency runs
// from just before async_acquire to the release's completion, as in the thread variant.
struct async_locker {
  std::unique_ptr<mutex> lock;
  std::vector<double> samples;
  std::uint64_t cycles = 0;
  std::uint64_t errors = 0;
  bench_clock::time_point t0;
};

struct async_run {
  explicit async_run(detail::io_executor e) : ex(std::move(e)) {}

  bench_clock::time_point begin, end;
  detail::io_executor ex;
  std::mutex done_mutex;
  std::condition_variable all_done;
  int running = 0;

  void next(async_locker& me) {
    me.t0 = bench_clock::now();
    if (me.t0 >= end) return finish();
    me.lock->async_acquire([this, &me](std::error_code ec, lease l) {
      if (ec) return failed(me);
      l.async_release([this, &me](std::error_code rec) {
        auto t1 = bench_clock::now();
        ++me.cycles;
        if (rec) ++me.errors;  // counted and still timed, as unlock()'s last_error() is
        if (me.t0 >= begin && t1 <= end) me.samples.push_back(ms_between(me.t0, t1));
        next(me);
      });
    });
  }
  // Posted, not called: an error may complete at once, and the chain must not recurse on it.
  void failed(async_locker& me) {
    ++me.errors;
    asio::post(ex, [this, &me] { next(me); });
  }
  void finish() {
    std::lock_guard guard(done_mutex);
    if (--running == 0) all_done.notify_all();
  }
};

}  // namespace

row run_uncontended_async(std::vector<client> nodes, int lockers, const timing& t,
                          const std::string& key_prefix) {
  std::vector<async_locker> chains(static_cast<std::size_t>(lockers));
  for (int i = 0; i < lockers; ++i) {
    auto& c = chains[static_cast<std::size_t>(i)];
    c.lock = std::make_unique<mutex>(nodes, key_prefix + std::to_string(i), lock_options{});
    c.samples.reserve(65536);
  }
  async_run run(nodes.front().get_executor());
  run.running = lockers;
  auto before = commandstats(nodes);
  double cpu_before = process_cpu_us();

  auto start = bench_clock::now() + milliseconds(20);  // as the thread variant
  run.begin = start + t.warm;
  run.end = run.begin + t.measure;
  std::this_thread::sleep_until(start);
  // Every chain starts on the I/O thread; the main thread only waits.
  for (auto& c : chains) asio::post(run.ex, [&run, &c] { run.next(c); });
  {
    std::unique_lock guard(run.done_mutex);
    run.all_done.wait(guard, [&] { return run.running == 0; });
  }
  double cpu_used = process_cpu_us() - cpu_before;
  auto after = commandstats(nodes);

  std::vector<std::vector<double>> latencies;
  double total_cycles = 0, errors = 0;
  for (auto& c : chains) {
    latencies.push_back(std::move(c.samples));
    total_cycles += static_cast<double>(c.cycles);
    errors += static_cast<double>(c.errors);
  }
  row r = uncontended_row(async_variant, nodes.size(), lockers, latencies, total_cycles, errors,
                          t, before, after, cpu_used);
  r.figures["cycles_total"] = total_cycles;  // warm-up and drain included
  return r;
}

namespace {

class mutex_contender final : public contender {
 public:
  mutex_contender(std::vector<client> nodes, const std::string& key, lock_options o)
      : lock_(std::move(nodes), key, std::move(o)) {}
  bool acquire_until(bench_clock::time_point deadline) override {
    return lock_.try_lock_until(deadline);
  }
  bool release() override {
    lock_.unlock();
    return !lock_.last_error();
  }

 private:
  mutex lock_;
};

class semaphore_contender final : public contender {
 public:
  semaphore_contender(client node, const std::string& key, int limit, semaphore_options o)
      : sem_(std::move(node), key, limit, std::move(o)) {}
  bool acquire_until(bench_clock::time_point deadline) override {
    permit_ = sem_.try_acquire_until(deadline);
    return static_cast<bool>(permit_);
  }
  bool release() override { return !sem_.release(permit_); }

 private:
  semaphore sem_;
  lease permit_;
};

}  // namespace

contender_factory mutex_contenders(std::vector<client> nodes, std::string key, lock_options o) {
  return [=] { return std::make_unique<mutex_contender>(nodes, key, o); };
}

contender_factory semaphore_contenders(client node, std::string key, int limit,
                                       semaphore_options o) {
  return [=] { return std::make_unique<semaphore_contender>(node, key, limit, o); };
}

// Handoff latency pairs each acquisition with the oldest release not yet paired that happened
// while some worker was waiting: for a mutex that is simply the previous holder's release.
// Its timestamp is taken just before the release is sent, so a handoff covers the release's
// trip to the server, the wake-up or poll of the waiter, and its acquiring round trip.
//
// Polite workers (the default): after releasing, one waits until another worker has acquired
// (or 1 s passed) before it contends again. Each handoff therefore goes to a worker that was
// already waiting, instead of to the releaser barging back in with a head start. Greedy
// workers (the fairness scenario) contend again at once, which is what fairness is about.
row run_contended(std::vector<client> nodes, const contended_setup& s, const timing& t,
                  const contender_factory& make) {
  const auto workers = static_cast<std::size_t>(s.workers);
  std::vector<std::vector<double>> handoffs(workers);
  std::vector<std::uint64_t> acquired_in_window(workers, 0);
  std::atomic<std::uint64_t> total{0}, violations{0}, errors{0};
  std::atomic<int> holders{0}, waiting{0};
  std::mutex state_mutex;  // guards seq and releases
  std::condition_variable seq_changed;
  std::uint64_t seq = 0;                         // acquisitions so far
  std::deque<bench_clock::time_point> releases;  // not yet paired with an acquisition
  auto before = commandstats(nodes);
  double cpu_before = process_cpu_us();

  auto start = bench_clock::now() + milliseconds(20);
  auto begin = start + t.warm, end = begin + t.measure;
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < workers; ++i) {
    threads.emplace_back([&, i] {
      auto lock = make();
      std::this_thread::sleep_until(start);
      while (bench_clock::now() < end) {
        bool got = false;
        ++waiting;
        try {
          got = lock->acquire_until(end);
        } catch (const std::exception&) {
          ++errors;
        }
        --waiting;
        if (!got) continue;
        auto acquired = bench_clock::now();
        if (holders.fetch_add(1) >= s.limit) ++violations;
        if (acquired >= begin && acquired <= end) ++acquired_in_window[i];
        ++total;
        std::uint64_t my_seq;
        {
          std::lock_guard guard(state_mutex);
          my_seq = ++seq;
          if (!releases.empty()) {
            auto released = releases.front();
            releases.pop_front();
            if (released >= begin && acquired <= end) handoffs[i].push_back(ms_between(released, acquired));
          }
        }
        seq_changed.notify_all();

        std::this_thread::sleep_for(t.hold);
        holders.fetch_sub(1);
        if (waiting.load() > 0) {
          std::lock_guard guard(state_mutex);
          releases.push_back(bench_clock::now());
        }
        if (!lock->release()) ++errors;

        if (!s.polite) continue;
        std::unique_lock guard(state_mutex);
        seq_changed.wait_until(guard, std::min(end, bench_clock::now() + std::chrono::seconds(1)),
                               [&] { return seq != my_seq; });
      }
    });
  }
  for (auto& th : threads) th.join();
  double cpu_used = process_cpu_us() - cpu_before;
  auto after = commandstats(nodes);

  auto all = merge(handoffs);
  auto p = summarize(all);
  double in_window = std::accumulate(acquired_in_window.begin(), acquired_in_window.end(), 0.0);
  auto [lo, hi] = std::minmax_element(acquired_in_window.begin(), acquired_in_window.end());
  row r{s.scenario, "dlock", s.variant, static_cast<int>(nodes.size()), s.workers, {}, {}};
  r.figures["acquisitions_per_s"] = in_window / std::chrono::duration<double>(t.measure).count();
  r.figures["handoff_p50_ms"] = p.p50_ms;
  r.figures["handoff_p99_ms"] = p.p99_ms;
  r.figures["samples"] = static_cast<double>(p.samples);
  r.figures["violations"] = static_cast<double>(violations.load());
  r.figures["errors"] = static_cast<double>(errors.load());
  r.figures["per_worker_min"] = static_cast<double>(*lo);
  r.figures["per_worker_max"] = static_cast<double>(*hi);
  add_server_figures(r, before, after, "dlock", static_cast<double>(total.load()));
  if (total.load() > 0) r.figures["client_cpu_us_per_op"] = cpu_used / static_cast<double>(total.load());
  return r;
}

row run_exec_rtt(client node, milliseconds how_long) {
  std::vector<double> samples;
  node.exec({"PING"});  // connected before timing
  auto end = bench_clock::now() + how_long;
  auto first = bench_clock::now();
  for (auto t0 = first; t0 < end; t0 = bench_clock::now()) {
    node.exec({"PING"});
    samples.push_back(ms_between(t0, bench_clock::now()));
  }
  double seconds = std::chrono::duration<double>(bench_clock::now() - first).count();
  auto p = summarize(samples);
  row r{"rtt", "dlock", "client.exec(PING), blocking, 1 thread", 1, 1, {}, {}};
  r.figures["rps"] = static_cast<double>(samples.size()) / seconds;
  r.figures["rtt_ms"] = p.mean_ms;
  r.figures["p50_ms"] = p.p50_ms;
  r.figures["p99_ms"] = p.p99_ms;
  return r;
}

void run_cycles(client node, int cycles, const std::string& key) {
  mutex lock{node, key, {}};
  for (int i = 0; i < cycles; ++i) {
    lock.lock();
    lock.unlock();
  }
}

}  // namespace dlock::bench
