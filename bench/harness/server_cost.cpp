// SPDX-License-Identifier: Apache-2.0
// Floors of a fenced lock's server cost, and dlock's other primitives in the same chains.
//
// A floor is what any fenced lock must ask of Redis per cycle: take the key if free with a TTL,
// draw a fencing token, and later delete the key only if it is still ours. Its server us per
// cycle is the bar dlock's scripts are judged against (report.cpp): whatever dlock spends above
// it goes to its waiter queue, quarantine and fence-floor checks, and Lua's own overhead.
//
// How commandstats count a transaction (redis 7.0.15, checked with redis-cli: MULTI, then SET,
// INCR and a Lua busy loop queued, then EXEC): the queued commands are not counted when queued
// (only MULTI's call shows before EXEC); EXEC runs them, counts each under its own name, and
// EXEC's usec includes theirs (EXEC 137353 us >= EVAL 137256 + SET 11 + INCR 2). So the no-Lua
// floor's server time is MULTI + EXEC + the release's EVALSHA, SET and INCR not added again, as
// a script's inner calls are not added to its EVALSHA. Neither form counts the parsing and
// queueing of the commands, as no command in commandstats does.
#include "harness/server_cost.hpp"

#include <sys/resource.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include <asio/post.hpp>

#include "access.hpp"
#include "dlock/semaphore.hpp"
#include "dlock/shared_mutex.hpp"

namespace dlock::bench {
namespace {

// KEYS[1] the lock, KEYS[2] its fence counter; ARGV[1] the owner, ARGV[2] the TTL in ms.
// Returns the new fencing token, or nil when the key is taken.
constexpr const char* floor_acquire_lua =
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "return redis.call('INCR', KEYS[2]) end return false";
// KEYS[1] the lock; ARGV[1] the owner. Deletes the key only if it is still ours: 1, else 0.
constexpr const char* floor_release_lua =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
    "return 0";
constexpr const char* floor_ttl_ms = "10000";  // dlock's default TTL

double process_cpu_us() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto us = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
  return us(u.ru_utime) + us(u.ru_stime);
}

// One chain's cycle, started on dlock's I/O thread; `done(ok)` is called from its last
// completion (false: an error, the cycle is not counted).
using start_cycle = std::function<void(std::size_t chain, std::function<void(bool ok)> done)>;

struct chain {
  std::vector<double> samples;
  std::uint64_t cycles = 0, errors = 0;
  bench_clock::time_point t0;
};

// N chains, as run_uncontended_async runs dlock's mutex: each cycle is started from the
// previous one's completion, so a chain never leaves the I/O thread; latency = start to done.
struct chain_run {
  chain_run(detail::io_executor e, std::size_t n, start_cycle s)
      : ex(std::move(e)), chains(n), start(std::move(s)) {}

  detail::io_executor ex;
  std::vector<chain> chains;
  start_cycle start;
  bench_clock::time_point begin, end;
  std::mutex done_mutex;
  std::condition_variable all_done;
  std::size_t running = 0;

  void next(std::size_t i) {
    auto& me = chains[i];
    me.t0 = bench_clock::now();
    if (me.t0 >= end) return finish();
    start(i, [this, i](bool ok) {
      auto& me = chains[i];
      if (!ok) {
        ++me.errors;  // posted: an error may complete at once, and must not recurse
        return asio::post(ex, [this, i] { next(i); });
      }
      auto t1 = bench_clock::now();
      ++me.cycles;
      if (me.t0 >= begin && t1 <= end)
        me.samples.push_back(std::chrono::duration<double, std::milli>(t1 - me.t0).count());
      next(i);
    });
  }
  void finish() {
    std::lock_guard guard(done_mutex);
    if (--running == 0) all_done.notify_all();
  }
};

// Runs `n` chains on `node`'s server and makes the row; `sent` are the commands the chains send
// themselves (the server time counted).
row run_chains(client node, std::size_t n, const timing& t, start_cycle start, row r,
               const std::set<std::string>& sent) {
  chain_run run(node.get_executor(), n, std::move(start));
  for (auto& c : run.chains) c.samples.reserve(65536);
  run.running = n;
  std::vector<client> nodes{node};
  auto before = commandstats(nodes);
  double cpu_before = process_cpu_us();
  auto start_at = bench_clock::now() + milliseconds(20);
  run.begin = start_at + t.warm;
  run.end = run.begin + t.measure;
  std::this_thread::sleep_until(start_at);
  for (std::size_t i = 0; i < n; ++i) asio::post(run.ex, [&run, i] { run.next(i); });
  {
    std::unique_lock guard(run.done_mutex);
    run.all_done.wait(guard, [&] { return run.running == 0; });
  }
  double cpu_used = process_cpu_us() - cpu_before;
  auto after = commandstats(nodes);

  std::vector<double> all;
  double total = 0, errors = 0;
  for (auto& c : run.chains) {
    all.insert(all.end(), c.samples.begin(), c.samples.end());
    total += static_cast<double>(c.cycles);
    errors += static_cast<double>(c.errors);
  }
  add_cycle_figures(r, std::move(all), t, errors);
  r.figures["cycles_total"] = total;
  add_server_figures(r, before, after, sent, total);
  if (total > 0) r.figures["client_cpu_us_per_op"] = cpu_used / total;
  return r;
}

// A fenced acquire succeeded: the Lua floor's reply is the token; the transaction's is
// [OK, QUEUED, QUEUED, [OK, token]].
bool granted(floor_kind kind, std::error_code ec, const reply& r) {
  if (ec) return false;
  if (kind == floor_kind::lua) return r.is_integer();
  if (!r.is_array() || r.elements().size() != 4) return false;
  const auto& exec = r.elements()[3];
  return exec.is_array() && exec.elements().size() == 2 && exec.elements()[1].is_integer();
}

}  // namespace

const char* floor_variant(floor_kind k) {
  return k == floor_kind::lua ? "fenced, Lua" : "fenced, no Lua";
}

row run_floor(client node, floor_kind kind, int chains, const timing& t,
              const std::string& key_prefix) {
  std::string acquire_sha = node.exec({"SCRIPT", "LOAD", floor_acquire_lua}).str();
  std::string release_sha = node.exec({"SCRIPT", "LOAD", floor_release_lua}).str();
  // A connection of the floor's own, allowed to send MULTI/EXEC: each request is written whole,
  // so the chains' transactions never interleave on it.
  client conn{node.where(), node.options()};
  detail::access::make_dedicated(conn);
  conn.exec({"PING"});  // connected before the window

  auto n = static_cast<std::size_t>(chains);
  std::vector<std::string> keys, fences;
  std::vector<std::uint64_t> serial(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    keys.push_back(key_prefix + std::to_string(i));
    fences.push_back(keys.back() + ":fence");
  }
  auto cycle = [&, kind](std::size_t i, std::function<void(bool)> done) {
    // A fresh owner per cycle, of the length of dlock's (22 characters).
    auto owner = std::make_shared<std::string>(std::to_string(1000000000 + i) + "." +
                                               std::to_string(1000000000 + ++serial[i]));
    auto release = [&, i, owner, done](std::error_code ec, reply r) {
      if (!granted(kind, ec, r)) return done(false);
      conn.async_exec(command{"EVALSHA", release_sha, "1", keys[i], *owner},
                      [done](std::error_code ec, reply r) {
                        done(!ec && r.is_integer() && r.integer() == 1);
                      });
    };
    if (kind == floor_kind::lua) {
      conn.async_exec(
          command{"EVALSHA", acquire_sha, "2", keys[i], fences[i], *owner, floor_ttl_ms}, release);
    } else {
      command tx{"MULTI"};
      tx.then({"SET", keys[i], *owner, "NX", "PX", floor_ttl_ms})
          .then({"INCR", fences[i]})
          .then({"EXEC"});
      conn.async_exec(std::move(tx), release);
    }
  };
  row r{"uncontended", floor_library, floor_variant(kind), 1, chains, {}, {}};
  std::set<std::string> sent{"evalsha"};
  if (kind == floor_kind::native) sent = {"multi", "exec", "evalsha"};
  return run_chains(conn, n, t, cycle, r, sent);
}

row run_primitive_async(client node, primitive p, int chains, const timing& t,
                        const std::string& key_prefix) {
  auto n = static_cast<std::size_t>(chains);
  std::vector<std::unique_ptr<semaphore>> sems;
  std::vector<std::unique_ptr<shared_mutex>> rws;
  bool is_sem = p == primitive::semaphore || p == primitive::fair_semaphore;
  for (std::size_t i = 0; i < n; ++i) {
    std::string name = key_prefix + std::to_string(i);
    if (is_sem) {
      semaphore_options o;
      o.fair = p == primitive::fair_semaphore;
      sems.push_back(std::make_unique<semaphore>(node, name, 1, o));
    } else {
      rws.push_back(std::make_unique<shared_mutex>(node, name));
    }
  }
  auto then_release = [](std::function<void(bool)> done) {
    return [done](std::error_code ec, lease l) {
      if (ec) return done(false);
      l.async_release([done](std::error_code rec) { done(!rec); });
    };
  };
  auto cycle = [&](std::size_t i, std::function<void(bool)> done) {
    switch (p) {
      case primitive::semaphore:
      case primitive::fair_semaphore: return sems[i]->async_acquire(then_release(done));
      case primitive::rwlock_exclusive: return rws[i]->async_acquire(then_release(done));
      case primitive::rwlock_shared: return rws[i]->async_acquire_shared(then_release(done));
    }
  };
  const char* variant = p == primitive::semaphore        ? "async, limit 1"
                        : p == primitive::fair_semaphore ? "async, limit 1, fair"
                        : p == primitive::rwlock_exclusive ? "async, exclusive"
                                                           : "async, shared";
  row r{"uncontended", is_sem ? "dlock semaphore" : "dlock shared_mutex", variant, 1, chains, {}, {}};
  return run_chains(node, n, t, cycle, r, top_level_commands("dlock"));
}

}  // namespace dlock::bench
