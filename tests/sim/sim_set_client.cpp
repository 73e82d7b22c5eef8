// SPDX-License-Identifier: Apache-2.0
// The lock set's client loop. Each step names the function of src/lock_set.cpp it follows, for
// one node (one key group: every key is the node's, so no fence_raise.lua round):
// - attempt (start_attempt, take_group, grant): a fresh token, random_token() + ".0";
//   acquire_all.lua with KEYS key, fence, key, fence ... (the sorted keys), ARGV token, ttl;
//   {1, fence} granted, {0, i, PTTL} held, {0, 0, ms} quarantined. An error or a timeout gives
//   up (give_up): release.lua on every key for that token, not awaited (the attempt may have
//   taken keys); so does a grant that lands after start + ttl - drift, which is not taken. A
//   refusal gives back the groups taken before it: on one node, none.
// - the loop (acquire_loop): again while the error is retryable and the deadline not passed,
//   after a jittered retry_delay, or the PTTL in the way + 1 ms when sooner, but at least 1 ms
//   and at most until the deadline.
// - extend (extend_keys): extend.lua on every key; any "not ours" loses the lease, a missing
//   answer leaves it undecided, an answer after the validity cannot vouch for the gap.
// - release (release_keys): release.lua on every key.
#include "sim_set_client.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "dlock/client.hpp"

namespace dlock::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

}  // namespace

sim_set_client::sim_set_client(world& w, checker& k, std::vector<lock_keys> pool,
                               const lock_options& options, milliseconds request_timeout,
                               std::size_t index, int cycles, liveness_rule liveness,
                               client_bug bug)
    : w_(w),
      check_(k),
      pool_(std::move(pool)),
      ttl_(options.ttl),
      retry_delay_(options.retry_delay),
      node_timeout_(
          detail::effective_node_timeout(options.node_timeout, options.ttl, request_timeout)),
      drift_factor_(options.drift_factor),
      c_(index),
      cycles_left_(cycles),
      liveness_(liveness),
      bug_(bug) {
  if (pool_.empty() || pool_.size() > max_pool) {
    throw std::invalid_argument("sim_set_client: a pool of 1 to 4 names");
  }
}

void sim_set_client::start(sim_time at) {
  w_.at_client(c_, at, [this] { next_cycle(); });
}

// random_token()'s shape, 32 lowercase hex digits, then ".0": acquire.lua takes a holder of
// any other shape for another library's. The client and a count lead, for the trace's reader.
std::string sim_set_client::fresh_token() {
  char text[40];
  std::snprintf(text, sizeof text, "%02zx%014llx%016llx.0", c_ & 0xff,
                static_cast<unsigned long long>(++tokens_drawn_),
                static_cast<unsigned long long>(w_.random().next()));
  return text;
}

void sim_set_client::next_cycle() {
  if (cycles_left_ == 0) {
    phase_ = phase::done;
    return;
  }
  --cycles_left_;
  ++cycle_;
  ++stats_.acquisitions;
  phase_ = phase::acquiring;
  auto& rnd = w_.random();
  // A random non-empty subset, named in random order, sometimes one name twice: lock_set sorts
  // the keys and drops the duplicates.
  std::vector<std::size_t> asked;
  while (asked.empty()) {
    for (std::size_t j = 0; j < pool_.size(); ++j) {
      if (rnd.chance(0.5)) asked.push_back(j);
    }
  }
  for (std::size_t n = asked.size(); n > 1; --n) std::swap(asked[n - 1], asked[rnd.below(n)]);
  if (rnd.chance(0.1)) asked.push_back(rnd.pick(asked));
  names_ = asked;
  std::sort(names_.begin(), names_.end(),
            [this](std::size_t a, std::size_t b) { return pool_[a].key < pool_[b].key; });
  names_.erase(std::unique(names_.begin(), names_.end()), names_.end());
  keys_.clear();
  for (auto j : names_) keys_.push_back(pool_[j].key);

  auto ttl_us = microseconds(ttl_).count();
  auto roll = rnd.below(100);
  mode_ = roll < 25 ? mode::try_once : roll < 55 ? mode::deadline : mode::unbounded;
  deadline_ = mode_ == mode::deadline ? now() + microseconds(rnd.between(ttl_us / 2, 4 * ttl_us))
                                      : steady::time_point::max();
  acquire_began_ = w_.now();
  endless_ = {};
  if (w_.tracing()) {
    std::string named;
    for (auto j : asked) named += " " + pool_[j].key;
    static constexpr const char* modes[] = {"try once", "deadline", "unbounded"};
    w_.note(who() + " starts lock_set" + named + " (" + modes[static_cast<int>(mode_)] +
            (mode_ == mode::deadline ? ", deadline in " + format_time(deadline_ - now()) : "") + ")");
  }
  attempt();
}

// --- acquiring ---

void sim_set_client::attempt() {
  ++stats_.attempts;
  check_liveness();
  auto token = fresh_token();
  auto start = now();
  detail::request r;
  r.id = ++requests_;
  r.code = &detail::acquire_all_script;
  for (auto j : names_) {
    r.keys.push_back(pool_[j].key);
    r.keys.push_back(pool_[j].fence);
  }
  r.args = {token, std::to_string(ttl_.count())};
  r.timeout = node_timeout_;
  // One attempt is out at a time: its answer belongs to the cycle that sent it.
  w_.call(c_, r, [this, cycle = cycle_, token, start](std::error_code ec, const reply& answer) {
    if (cycle == cycle_ && phase_ == phase::acquiring) on_attempt_reply(token, start, ec, answer);
  });
}

void sim_set_client::on_attempt_reply(const std::string& token, steady::time_point start,
                                      std::error_code ec, const reply& r) {
  if (!ec && r.is_error()) ec = error_from_reply(r);
  const auto& e = r.elements();
  if (!ec && (!r.is_array() || e.size() < 2 || !e[0].is_integer() || !e[1].is_integer())) {
    ec = errc::protocol_error;
  }
  if (ec) {
    // A timeout may have taken the keys, an error midway part of them.
    release_keys(token, {});
    return after_failed_attempt(ec, -1);
  }
  bool granted = e[0].integer() == 1;
  auto fence = static_cast<std::uint64_t>(e[1].integer());
  if (!granted && bug_ == client_bug::taken_as_granted) {
    granted = true;
    fence = static_cast<std::uint64_t>(++fake_fence_);  // high: exclusion has to catch it
  }
  if (!granted) {
    return after_failed_attempt(errc::not_acquired,
                                e.size() == 3 && e[2].is_integer() ? e[2].integer() : -1);
  }
  auto until = start + ttl_ - detail::drift_allowance(ttl_, drift_factor_);
  if (now() >= until) {
    if (w_.tracing()) w_.note(who() + "'s grant of " + token + " came after its validity");
    release_keys(token, {});
    return after_failed_attempt(errc::lease_expired, -1);
  }
  ++stats_.grants;
  stats_.longest_free_wait = std::max(stats_.longest_free_wait, check_liveness());
  auto claimed = until;
  if (bug_ == client_bug::double_validity) claimed += ttl_;
  check_.granted(c_, token, fence, claimed, check_.key_permits(), keys_);
  hold(token, until);
}

void sim_set_client::after_failed_attempt(std::error_code ec, long long wait_hint) {
  if (mode_ == mode::try_once || !detail::is_retryable(ec)) return finish_acquisition(ec);
  // As lock_set's loop: without a deadline, what no wait cures ends it all the same.
  auto t = now();
  auto why = endless_.gives_up_on(ec, {}, t);
  if (why && deadline_ == steady::time_point::max()) return finish_acquisition(why);
  if (t >= deadline_) return finish_acquisition(ec);
  steady::duration sleep = detail::jittered_delay(retry_delay_, w_.random().next());
  if (wait_hint >= 0) sleep = std::min<steady::duration>(sleep, milliseconds(wait_hint + 1));
  sleep = std::max<steady::duration>(sleep, milliseconds(1));
  if (deadline_ != steady::time_point::max()) sleep = std::min(sleep, deadline_ - t);
  if (w_.tracing()) w_.note(who() + " attempt: " + ec.message() + ", sleeps " + format_time(sleep));
  w_.at_client(c_, w_.when(c_, t + sleep), [this, cycle = cycle_] {
    if (cycle == cycle_ && phase_ == phase::acquiring) attempt();
  });
}

// An unbounded wait must end once its keys have been free long enough after the faults
// (sim_client's bound). A set polls, so a stream of mutexes can keep it waiting, but not while
// all of its names are free.
sim_time sim_set_client::check_liveness() {
  if (mode_ != mode::unbounded) return 0;
  sim_time free =
      check_.free_time(std::max(acquire_began_, liveness_.quiet_from), w_.now(),
                       check_.key_permits(), keys_);
  if (free > liveness_.max_free_wait) {
    check_.violation("LIVENESS: " + who() + "'s unbounded lock_set acquisition waited with " +
                     "its keys free for " + format_time(free) + " after the faults ended " +
                     "(bound " + format_time(liveness_.max_free_wait) + ")");
  }
  return free;
}

void sim_set_client::finish_acquisition(std::error_code ec) {
  if (mode_ == mode::unbounded) {
    check_.violation("LIVENESS: " + who() +
                     "'s unbounded lock_set acquisition gave up: " + ec.message());
  }
  ++stats_.failures;
  if (w_.tracing()) w_.note(who() + " lock_set acquisition failed: " + ec.message());
  idle();
}

void sim_set_client::release_keys(const std::string& token, std::function<void()> done) {
  struct tally {
    std::size_t pending, wanted, ours = 0;
    std::error_code first_error;
    std::function<void()> done;
  };
  auto t = std::make_shared<tally>(tally{names_.size(), names_.size(), 0, {}, std::move(done)});
  for (auto j : names_) {
    detail::request r;
    r.id = ++requests_;
    r.code = &detail::release_script;
    r.keys = detail::lock_release_keys(pool_[j]);
    r.args = {token};
    r.timeout = node_timeout_;
    w_.call(c_, r, [this, t, token](std::error_code ec, const reply& answer) {
      if (!ec && answer.is_error()) ec = error_from_reply(answer);
      if (ec && !t->first_error) t->first_error = ec;
      if (!ec && answer.is_integer() && answer.integer() == 1) ++t->ours;
      if (--t->pending > 0) return;
      if (w_.tracing()) {
        w_.note(who() + " release of " + token + ": " +
                (t->first_error         ? t->first_error.message()
                 : t->ours == t->wanted ? std::string("released")
                                        : std::string("not held")));
      }
      if (t->done) t->done();
    });
  }
}

// --- holding and releasing (sim_client's choices) ---

void sim_set_client::hold(const std::string& token, steady::time_point valid_until) {
  phase_ = phase::holding;
  token_ = token;
  valid_until_ = valid_until;
  auto plan = plan_hold(w_.random(), ttl_);
  bool extending = plan.extending;
  abandon_ = plan.abandon;
  hold_until_ = now() + microseconds(plan.hold);
  if (w_.tracing()) {
    w_.note(who() + " holds for " + format_time(plan.hold) + (extending ? ", extending" : "") +
            (abandon_ ? ", then abandons it" : ", then releases"));
  }
  w_.at_client(c_, w_.when(c_, hold_until_), [this, cycle = cycle_] {
    if (cycle == cycle_) release();
  });
  if (extending) {
    w_.at_client(c_, w_.when(c_, now() + ttl_ / 3), [this, cycle = cycle_] {
      if (cycle == cycle_) extend();
    });
  }
}

void sim_set_client::extend() {
  if (phase_ != phase::holding || now() >= hold_until_) return;
  ++stats_.extends;
  milliseconds by = pick_extend(w_.random(), ttl_);
  if (w_.tracing()) {
    w_.note(who() + " extends " + token_ + " by " + std::to_string(by.count()) + " ms");
  }
  struct tally {
    std::size_t pending, ours = 0, theirs = 0;
    std::error_code first_error;
  };
  auto t = std::make_shared<tally>(tally{names_.size(), 0, 0, {}});
  auto serial = ++extend_serial_;
  auto until = now() + by - detail::drift_allowance(by, drift_factor_);
  for (auto j : names_) {
    detail::request r;
    r.id = ++requests_;
    r.code = &detail::extend_script;
    r.keys = {pool_[j].key};
    r.args = {token_, std::to_string(by.count()), ""};
    r.timeout = node_timeout_;
    w_.call(c_, r,
            [this, cycle = cycle_, t, serial, until, by](std::error_code ec, const reply& answer) {
              if (!ec && answer.is_error()) ec = error_from_reply(answer);
              if (ec && !t->first_error) t->first_error = ec;
              if (!ec && answer.is_integer()) ++(answer.integer() == 1 ? t->ours : t->theirs);
              if (--t->pending > 0) return;
              if (cycle != cycle_ || phase_ != phase::holding || serial != extend_serial_) return;
              std::error_code verdict;
              if (t->theirs > 0) {
                verdict = errc::lease_lost;
              } else if (t->ours < names_.size()) {
                verdict = t->first_error ? t->first_error : errc::protocol_error;
              } else if (now() >= valid_until_) {
                verdict = errc::lease_expired;  // landed after the validity: a gap
              }
              on_extend_verdict(verdict, until, by);
            });
  }
}

// As the watchdog goes on: again after a third of the new validity, or soon after an undecided
// extend; a lost lease is let go.
void sim_set_client::on_extend_verdict(std::error_code ec, steady::time_point valid_until,
                                       milliseconds by) {
  auto again_in = [this](steady::duration after) {
    w_.at_client(c_, w_.when(c_, now() + after), [this, cycle = cycle_] {
      if (cycle == cycle_) extend();
    });
  };
  if (!ec) {
    valid_until_ = valid_until;
    auto claimed = valid_until_;
    if (bug_ == client_bug::double_validity) claimed += ttl_;
    check_.extended(c_, claimed);
    return again_in(by / 3);
  }
  if (ec != errc::lease_lost && ec != errc::lease_expired) {
    return again_in(std::max(ttl_ / 10, milliseconds(1)));
  }
  ++stats_.lost_leases;
  check_.ended(c_, "extend failed: " + ec.message());
  release();
}

void sim_set_client::release() {
  if (phase_ != phase::holding) return;
  phase_ = phase::releasing;
  if (abandon_) {
    ++stats_.abandoned;
    check_.ended(c_, "abandoned: the holder stops using it and never releases");
    return idle();
  }
  ++stats_.releases;
  check_.ended(c_, "release sent");
  release_keys(token_, [this, cycle = cycle_] {
    if (cycle == cycle_ && phase_ == phase::releasing) idle();
  });
}

void sim_set_client::idle() {
  phase_ = phase::idle;
  auto ttl_us = microseconds(ttl_).count();
  w_.at_client(c_, w_.now() + w_.random().between(0, ttl_us), [this, cycle = cycle_] {
    if (cycle == cycle_ && phase_ == phase::idle) next_cycle();
  });
}

void sim_set_client::check_finished() {
  if (phase_ == phase::done) return;
  static constexpr const char* phases[] = {"idle", "acquiring", "holding", "releasing", "done"};
  check_.violation("LIVENESS: " + who() + " (lock_set) never finished: stuck " +
                   phases[static_cast<int>(phase_)]);
}

}  // namespace dlock::sim
