// SPDX-License-Identifier: Apache-2.0
// tests/sim/sim_set_client.hpp: one simulated client of dlock::lock_set (src/lock_set.cpp).
//   sim_set_client  a loop of cycles on one node: pick a random non-empty subset of a pool of
//                   lock names, in random order (normalized as lock_set does: sorted, unique);
//                   acquire it (try once, until a deadline, or without bound) by attempts of
//                   acquire_all.lua under a fresh token each, polling in between; hold
//                   (sometimes past the TTL, sometimes extending every key with extend.lua),
//                   release every key (release.lua) or abandon the lease; idle, again
// lock_set_core runs on a real connection and reads the system clock, so its single-node
// protocol is written out here step by step on the client's simulated clock: the same scripts,
// keys and arguments, the same verdicts, the same retry policy (algo/retry.hpp). The plain
// mutexes (sim_client) of the same names contend for the same keys.
// Not thread-safe: part of one world.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "algo/retry.hpp"
#include "sim_checker.hpp"
#include "sim_client.hpp"
#include "sim_world.hpp"

namespace dlock::sim {

class sim_set_client {
 public:
  // A set takes 2 script keys a name (key, fence) and a script at most 8 (script_keys).
  static constexpr std::size_t max_pool = 4;

  // `pool`: the names' keys (lock_keys_for); `options`: the set's ttl, retry_delay,
  // node_timeout and drift_factor. `bug` is taken_as_granted or double_validity, or none.
  sim_set_client(world& w, checker& k, std::vector<lock_keys> pool, const lock_options& options,
                 std::chrono::milliseconds request_timeout, std::size_t index, int cycles,
                 liveness_rule liveness, client_bug bug = client_bug::none);
  sim_set_client(const sim_set_client&) = delete;
  sim_set_client& operator=(const sim_set_client&) = delete;

  void start(sim_time at);
  bool done() const noexcept { return phase_ == phase::done; }
  // At the end of the run: a client that has not finished its cycles is stuck.
  void check_finished();
  const client_stats& stats() const noexcept { return stats_; }

 private:
  enum class phase { idle, acquiring, holding, releasing, done };
  // lock_set::try_acquire, acquire_until, acquire.
  enum class mode { try_once, deadline, unbounded };

  steady::time_point now() const { return w_.clock(c_); }
  std::string who() const { return "c" + std::to_string(c_); }
  void next_cycle();
  void attempt();
  void on_attempt_reply(const std::string& token, steady::time_point start, std::error_code ec,
                        const reply& r);
  // acquire_until's loop after a failed attempt: try again, or give up.
  void after_failed_attempt(std::error_code ec, long long wait_hint);
  // Unbounded: the free time of the set's keys since the faults ended, checked against the
  // bound (0 in the other modes).
  sim_time check_liveness();
  void finish_acquisition(std::error_code ec);
  // release.lua on each key for `token`; `done` (may be empty) once every answer is in.
  void release_keys(const std::string& token, std::function<void()> done);
  void hold(const std::string& token, steady::time_point valid_until);
  void extend();
  void on_extend_verdict(std::error_code ec, steady::time_point valid_until,
                         std::chrono::milliseconds by);
  void release();
  void idle();
  std::string fresh_token();

  world& w_;
  checker& check_;
  const std::vector<lock_keys> pool_;  // the requests' keys point into it
  std::chrono::milliseconds ttl_, retry_delay_, node_timeout_;
  double drift_factor_;
  std::size_t c_;
  int cycles_left_;
  liveness_rule liveness_;
  client_bug bug_;
  client_stats stats_;
  phase phase_ = phase::idle;
  std::uint64_t cycle_ = 0;  // answers and timers of an earlier cycle are ignored

  // The cycle's set: indices into pool_, sorted and unique, and their keys for the checker.
  std::vector<std::size_t> names_;
  std::vector<std::string> keys_;
  mode mode_ = mode::try_once;
  steady::time_point deadline_ = steady::time_point::max();
  detail::endless_wait_rule endless_;  // the wait's failed attempts, as lock_set's loop counts them
  sim_time acquire_began_ = 0;
  std::uint64_t tokens_drawn_ = 0, requests_ = 0;
  std::int64_t fake_fence_ = 1'000'000;  // client_bug::taken_as_granted's fences

  // The lease held.
  std::string token_;
  steady::time_point valid_until_{}, hold_until_{};
  bool abandon_ = false;
  std::uint64_t extend_serial_ = 0;  // which extend an answer is for
};

}  // namespace dlock::sim
