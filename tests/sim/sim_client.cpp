// SPDX-License-Identifier: Apache-2.0
// The client's loop. Acquiring follows the engine's driver loop (algo/acquisition.hpp) as
// acquire_run carries it out: channels for the subscribed inboxes when queues_next(),
// begin_attempt, send what take_requests gives, feed the answers, and then either sleep what
// take_sleep says or finish with take_outcome (sending its leftovers first). Sleeping and
// waking follow wake_waiter (net/inbox.cpp): a handoff goes to on_handoff first; a plain
// wake-up, or a handoff the engine would not take, ends the sleep at once, or, mid-attempt,
// skips the next sleep; a lost confirmed subscription wakes the waiter too (inbox::on_drop);
// a sleep subscribes the missing inboxes, and one that follows an attempt that could not queue
// everywhere ends once they are subscribed.
//
// Pacing is checked on what the engine asks for: no sleep shorter than retry_delay / 2, except
// down to the shortest "taken" holder's PTTL + 1 ms (the engine may wake at the holder's
// expiry) or a sleep that ends at the deadline; no attempt after a full sleep goes out before
// that floor. Attempts the driver begins early (woken, inboxes subscribed) are counted, at
// most one per wake-up.
#include "sim_client.hpp"

#include <algorithm>
#include <climits>

namespace dlock::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

}  // namespace

sim_client::sim_client(world& w, checker& k, const detail::lock_target& target, std::size_t index,
                       int cycles, liveness_rule liveness, client_bug bug)
    : w_(w),
      check_(k),
      lock_(target),
      permits_(k.key_permits()),
      claimed_keys_{target.keys.key},
      c_(index),
      cycles_left_(cycles),
      liveness_(liveness),
      bug_(bug) {}

sim_client::sim_client(world& w, checker& k, const detail::semaphore_target& target,
                       std::size_t index, int cycles, liveness_rule liveness, client_bug bug)
    : w_(w),
      check_(k),
      sem_(target),
      c_(index),
      cycles_left_(cycles),
      liveness_(liveness),
      bug_(bug) {}

sim_client::sim_client(world& w, checker& k, std::vector<std::string> pool,
                       const lock_options& options, milliseconds request_timeout,
                       std::size_t index, int cycles, liveness_rule liveness, client_bug bug)
    : w_(w),
      check_(k),
      set_pool_(std::move(pool)),
      set_options_(options),
      set_request_timeout_(request_timeout),
      permits_(k.key_permits()),
      c_(index),
      cycles_left_(cycles),
      liveness_(liveness),
      bug_(bug) {}

// A random non-empty subset, named in random order, sometimes one name twice: lock_set sorts
// the keys and drops the duplicates (checked_keys), and on one node takes them as one group.
const detail::lock_set_target& sim_client::pick_set() {
  auto& rnd = w_.random();
  std::vector<std::string> asked;
  while (asked.empty()) {
    for (const auto& name : set_pool_) {
      if (rnd.chance(0.5)) asked.push_back(name);
    }
  }
  for (std::size_t n = asked.size(); n > 1; --n) std::swap(asked[n - 1], asked[rnd.below(n)]);
  if (rnd.chance(0.1)) asked.push_back(rnd.pick(asked));
  if (w_.tracing()) {
    std::string named;
    for (const auto& name : asked) named += " " + name;
    w_.note(who() + " names lock_set" + named);
  }
  std::sort(asked.begin(), asked.end());
  asked.erase(std::unique(asked.begin(), asked.end()), asked.end());
  claimed_keys_ = asked;
  // One group, as on a single node; or, half the time, as on a cluster: a group per "slot",
  // here the key's last character's parity, the same for every client, taken in slot order.
  std::vector<std::vector<std::size_t>> groups(1);
  bool by_slot = rnd.chance(0.5);
  if (by_slot) groups.resize(2);
  for (std::size_t i = 0; i < asked.size(); ++i) {
    groups[by_slot ? static_cast<unsigned char>(asked[i].back()) % 2 : 0].push_back(i);
  }
  std::erase_if(groups, [](const auto& g) { return g.empty(); });
  set_ = &set_targets_.emplace_back(std::move(asked), std::move(groups), set_options_,
                                    set_request_timeout_);
  return *set_;
}

void sim_client::start(sim_time at) {
  if (wake_on_release()) {
    for (std::size_t i = 0; i < nodes(); ++i) w_.subscribe(c_, i);
  }
  w_.at_client(c_, at, [this] { next_cycle(); });
}

void sim_client::next_cycle() {
  if (cycles_left_ == 0) {
    phase_ = phase::done;
    return;
  }
  --cycles_left_;
  ++cycle_;
  ++stats_.acquisitions;
  phase_ = phase::acquiring;
  auto& rnd = w_.random();
  auto ttl_us = microseconds(ttl()).count();
  int attempts = INT_MAX;
  auto deadline = steady::time_point::max();
  auto roll = rnd.below(100);
  if (roll < 25) {
    mode_ = mode::try_once;
    attempts = 1;
  } else if (roll < 50) {
    mode_ = mode::bounded;
    attempts = static_cast<int>(rnd.between(2, 8));
  } else if (roll < 70) {
    mode_ = mode::deadline;
    deadline = now() + microseconds(rnd.between(ttl_us / 2, 4 * ttl_us));
  } else {
    mode_ = mode::unbounded;
  }
  if (unbounded_only_) {
    mode_ = mode::unbounded;
    attempts = INT_MAX;
    deadline = steady::time_point::max();
  }
  // A lock acquisition's id, or a semaphore's owner token (unique, as random_token()'s are,
  // and hex digits only, as theirs: acquire.lua takes any other holder for another library's).
  std::string id = who() + "a" + std::to_string(cycle_);
  if (lock_) {
    // Half the time round 0 tries acquire_unqueued first, as lock_core does while the lock
    // was free at its last acquisition (where the protocol allows it: one node, not fair).
    acq_ = &engines_.emplace_back(*lock_, id, deadline, attempts, rnd.next(), rnd.chance(0.5));
  } else if (!set_pool_.empty()) {
    const auto& set = pick_set();
    acq_ = &engines_.emplace_back(set, id, deadline, attempts, rnd.next());
  } else {
    permits_ = all_or_one_ ? (rnd.chance(0.3) ? max_permits_ : 1)
                           : static_cast<std::ptrdiff_t>(rnd.between(1, max_permits_));
    // Half the time attempt 0 tries the solo grant first, as semaphore_core does while the
    // name was free at its last acquisition (where the protocol allows it: a name to mark).
    acq_ = &engines_.emplace_back(*sem_, id, permits_, deadline, attempts, rnd.next(),
                                  rnd.chance(0.5));
  }
  acquire_began_ = w_.now();
  deadline_ = deadline;
  in_attempt_ = sleeping_ = wake_pending_ = queued_everywhere_ = stopped_ = false;
  wakes_unused_ = 0;
  next_attempt_floor_ = {};
  if (w_.tracing()) {
    static constexpr const char* names[] = {"try once", "bounded", "deadline", "unbounded"};
    w_.note(who() + " starts acquisition " + id + " (" + names[static_cast<int>(mode_)] +
            (mode_ == mode::bounded ? ", " + std::to_string(attempts) + " attempts" : "") +
            (mode_ == mode::deadline ? ", deadline in " + format_time(deadline - now()) : "") +
            (sem_ ? ", " + std::to_string(permits_) + " permit(s)" : "") + ")");
  }
  // Sometimes the caller gives up from outside (a stop_token, the CLI's Ctrl-C).
  if (mode_ != mode::try_once && !unbounded_only_ && rnd.chance(0.1)) {
    w_.at_client(c_, w_.now() + rnd.between(0, 2 * ttl_us), [this, cycle = cycle_] {
      if (cycle == cycle_) stop_waiting();
    });
  }
  // The driver's deadline timer (acquire_run::arm_deadline).
  if (deadline != steady::time_point::max()) {
    w_.at_client(c_, w_.when(c_, deadline), [this, cycle = cycle_] {
      if (cycle != cycle_ || phase_ != phase::acquiring || !acq_ || acq_->done()) return;
      if (w_.tracing()) w_.note(who() + "'s deadline for " + acq_->id());
      acq_->on_deadline(now());
      pump();
    });
  }
  begin_attempt(cause::first);
}

// --- acquiring ---

void sim_client::begin_attempt(cause why) {
  ++stats_.attempts;
  if (why == cause::woken) {
    ++stats_.woken_attempts;
    if (wakes_unused_ == 0)
      check_.violation("PACING: " + who() + " began an attempt early without a wake-up");
    if (wakes_unused_ > 0) --wakes_unused_;
  }
  if (why == cause::subscribed) ++stats_.subscribed_attempts;
  if (mode_ == mode::unbounded && !stopped_) {
    // Still waiting although the lock has been free too long: no need to wait for the end.
    sim_time free = check_.free_time(std::max(acquire_began_, liveness_.quiet_from), w_.now(),
                                     permits_, claimed_keys_);
    if (free > liveness_.max_free_wait) {
      check_.violation("LIVENESS: " + who() + "'s unbounded acquisition " + acq_->id() +
                       " still waits, after " + std::to_string(acq_->attempts_made()) +
                       " attempts, with " + std::string(lock_ ? "the lock" : "enough permits") +
                       " free for " + format_time(free) +
                       " since the faults ended (bound " + format_time(liveness_.max_free_wait) +
                       ")");
    }
  }
  auto t = now();
  // wake_waiter::begin_attempt: a channel where the node's inbox is subscribed.
  bool queue = wake_on_release() && acq_->queues_next(t);
  std::vector<std::string> channels(nodes());
  queued_everywhere_ = queue;
  for (std::size_t i = 0; queue && i < nodes(); ++i) {
    if (w_.subscribed(c_, i)) {
      channels[i] = w_.wake_channel(c_);
    } else {
      queued_everywhere_ = false;
    }
  }
  in_attempt_ = true;
  wake_pending_ = false;
  sleeping_ = false;
  attempt_requests_.clear();
  shortest_holder_ttl_ms_.reset();
  if (w_.tracing()) {
    static constexpr const char* causes[] = {"", " (after sleeping)", " (woken)",
                                             " (inbox subscribed)"};
    std::string where;
    for (const auto& channel : channels) where += channel.empty() ? " -" : " q";
    w_.note(who() + " attempt " + std::to_string(acq_->attempts_made() + 1) + " of " + acq_->id() +
            causes[static_cast<int>(why)] + ", queueing:" + where);
  }
  acq_->begin_attempt(t, channels);
  pump();
  if (why == cause::backstop && !attempt_requests_.empty() && t < next_attempt_floor_) {
    check_.violation("PACING: " + who() + "'s attempt " + std::to_string(acq_->attempts_made()) +
                     " of " + acq_->id() + " went out " + format_time(next_attempt_floor_ - t) +
                     " before the retry policy allows");
  }
}

void sim_client::pump() {
  for (auto& r : acq_->take_requests()) send_for_acquisition(r);
  if (phase_ != phase::acquiring) return;
  if (auto sleep = acq_->take_sleep()) return go_to_sleep(*sleep);
  if (auto outcome = acq_->take_outcome()) {
    for (auto& r : acq_->take_requests()) send_for_acquisition(r);
    finish_acquisition(*outcome);
  }
}

void sim_client::send_for_acquisition(detail::request r) {
  r.gate = acq_->gate();
  bool attempt_script = r.code == &detail::acquire_script ||
                        r.code == &detail::acquire_all_script ||
                        r.code == &detail::sem_acquire_script ||
                        r.code == &detail::sem_fair_acquire_script;
  if (attempt_script && in_attempt_) {
    attempt_requests_.push_back(r.id);
    // One per node; a lock set's, one per slot group.
    std::size_t most = set_ ? set_->groups.size() : nodes();
    if (attempt_requests_.size() > most) {
      check_.violation("PACING: " + who() + "'s attempt sent " +
                       std::to_string(attempt_requests_.size()) + " acquire requests, more than " +
                       std::to_string(most));
    }
  }
  w_.call(c_, r, [this, cycle = cycle_, id = r.id](std::error_code ec, const reply& answer) {
    on_acquisition_reply(cycle, id, ec, answer);
  });
}

void sim_client::on_acquisition_reply(std::uint64_t cycle, std::uint64_t id, std::error_code ec,
                                      reply r) {
  if (cycle != cycle_ || !acq_) return;
  bool this_attempt =
      std::find(attempt_requests_.begin(), attempt_requests_.end(), id) != attempt_requests_.end();
  // {0, x}: "taken", x the holder's PTTL (lock) or ms until the first holder expires (unfair
  // semaphore; 0 counts, where a lock's 0 means "no expiry to wait for"); the fair semaphore's
  // {0, ticket, rank} has no such hint.
  // A lock's {0, x, 1}: the holder is another library's (none here, but the shape counts).
  // A lock set's {0, i, PTTL}: name i is held for PTTL more (i = 0: the node is quarantined).
  bool fair_sem = sem_ && sem_->fair;
  bool set = !set_pool_.empty();
  std::size_t taken_size = fair_sem || set ? 3 : 2;
  auto size = r.elements().size();
  bool taken = !ec && r.is_array() &&
               (size == taken_size || (lock_ && size == 3)) &&
               r.elements()[0].is_integer() && r.elements()[0].integer() == 0;
  std::size_t hint_at = set ? 2 : 1;
  if (this_attempt && taken && !fair_sem && r.elements()[hint_at].is_integer() &&
      r.elements()[hint_at].integer() >= (lock_ ? 1 : 0)) {
    auto pttl = r.elements()[hint_at].integer();
    shortest_holder_ttl_ms_ = std::min(shortest_holder_ttl_ms_.value_or(pttl), pttl);
  }
  if (bug_ == client_bug::taken_as_granted && this_attempt && taken) {
    // High fences, so that mutual exclusion or the limit (not the fence order) has to catch it.
    std::vector<reply> granted{reply::make_integer(1), reply::make_integer(++fake_fence_)};
    if (fair_sem) granted.push_back(reply::make_integer(0));
    r = reply::make_array(std::move(granted));
  }
  acq_->on_reply(id, now(), ec, r);
  pump();
}

// The engine's sleep is at least retry_delay / 2, or down to the shortest holder's PTTL + 1 ms
// when that holder expires sooner; shorter only when it ends just before the deadline
// (acquisition::last_attempt_lead) for a last attempt, after which no sleep fits. The next
// attempt is held to that floor (checked when it begins).
void sim_client::go_to_sleep(steady::duration sleep) {
  in_attempt_ = false;
  auto t = now();
  steady::duration shortest = retry_delay() / 2;
  if (shortest_holder_ttl_ms_) {
    shortest = std::min(shortest, steady::duration(milliseconds(*shortest_holder_ttl_ms_ + 1)));
  }
  bool ends_before_deadline = deadline_ != steady::time_point::max() &&
                              t + sleep >= deadline_ - detail::acquisition::last_attempt_lead;
  if (sleep < shortest && !ends_before_deadline) {
    check_.violation("PACING: " + who() + " told to sleep " + format_time(sleep) + " after attempt " +
                     std::to_string(acq_->attempts_made()) + ", less than " + format_time(shortest));
  }
  shortest = std::min(shortest, sleep);
  next_attempt_floor_ = t + shortest;
  // wake_waiter::sleep: at once when woken during the attempt, or when every inbox is
  // subscribed now although the attempt could not queue everywhere; and it subscribes the
  // missing inboxes, whose confirmation ends the sleep (on_subscribed).
  bool all_subscribed = true;
  for (std::size_t i = 0; wake_on_release() && i < nodes(); ++i) {
    if (!w_.subscribed(c_, i)) {
      all_subscribed = false;
      w_.subscribe(c_, i);
    }
  }
  cause next = cause::backstop;
  sim_time at = w_.when(c_, t + sleep);
  if (wake_pending_) {
    next = cause::woken;
    at = w_.now();
  } else if (wake_on_release() && all_subscribed && !queued_everywhere_) {
    next = cause::subscribed;
    at = w_.now();
  }
  wake_pending_ = false;
  sleeping_ = true;
  auto id = ++sleep_id_;
  if (w_.tracing()) {
    w_.note(who() + " sleeps " +
            (next == cause::backstop
                 ? format_time(sleep)
                 : "0 (" +
                       std::string(next == cause::woken ? "woken during the attempt"
                                                        : "inboxes subscribed now") +
                       ")"));
  }
  w_.at_client(c_, at, [this, cycle = cycle_, id, next] {
    if (cycle != cycle_ || !sleeping_ || id != sleep_id_) return;
    sleeping_ = false;
    begin_attempt(next);
  });
}

void sim_client::on_message(std::size_t node, std::string_view payload) {
  auto space = payload.find(' ');
  std::string_view id = payload.substr(0, space);
  std::string_view rest = space == std::string_view::npos ? "" : payload.substr(space + 1);
  // The inbox routes by id to a listener, which exists from the first attempt that queued
  // until the acquisition is over.
  if (phase_ != phase::acquiring || !acq_ || acq_->done() || acq_->id() != id || !acq_->queued()) {
    if (w_.tracing())
      w_.note(who() + " ignores \"" + std::string(payload) + "\" from n" + std::to_string(node));
    return;
  }
  if (!rest.empty() && accepts_handoff()) {
    bool took = acq_->on_handoff(now(), rest);
    if (took && sem_) ++stats_.handoffs;  // a lock's shows in its token (".h")
    if (w_.tracing())
      w_.note(who() + " on_handoff(\"" + std::string(rest) + "\") -> " +
              (took ? "taken" : "not taken"));
    pump();
    if (took || phase_ != phase::acquiring) return;
  }
  wake();
}

void sim_client::on_subscribed(std::size_t) {
  // A sleep after an attempt that could not queue everywhere ends when an inbox it was
  // waiting for is subscribed (wake_waiter::sleep; it waits for all it started, we for one).
  if (phase_ != phase::acquiring || !sleeping_ || queued_everywhere_ || !wake_on_release())
    return;
  sleeping_ = false;
  ++sleep_id_;
  begin_attempt(cause::subscribed);
}

void sim_client::on_subscription_lost(std::size_t) {
  if (phase_ != phase::acquiring || !acq_ || acq_->done() || !acq_->queued()) return;
  wake();
}

void sim_client::wake() {
  ++stats_.wakes;
  ++wakes_unused_;
  if (in_attempt_) {
    wake_pending_ = true;
    return;
  }
  if (!sleeping_) return;
  sleeping_ = false;
  ++sleep_id_;
  begin_attempt(cause::woken);
}

void sim_client::stop_waiting() {
  if (phase_ != phase::acquiring || !acq_ || acq_->done()) return;
  ++stats_.stops;
  stopped_ = true;
  if (w_.tracing()) w_.note(who() + " stops waiting for " + acq_->id());
  acq_->stop(now(), errc::cancelled);
  pump();
}

void sim_client::finish_acquisition(const detail::acquisition::outcome& o) {
  in_attempt_ = sleeping_ = wake_pending_ = false;
  ++sleep_id_;
  if (stopped_ && !o.ec) {
    check_.violation("STOP: " + who() + "'s acquisition " + acq_->id() + " was granted (" +
                     o.token + ") after stop()");
  }
  if (mode_ == mode::unbounded && !stopped_) {
    if (o.ec) {
      check_.violation("LIVENESS: " + who() + "'s unbounded acquisition " + acq_->id() +
                       " gave up: " + o.ec.message());
    } else {
      sim_time from = std::max(acquire_began_, liveness_.quiet_from);
      sim_time free = check_.free_time(from, w_.now(), permits_, claimed_keys_);
      stats_.longest_free_wait = std::max(stats_.longest_free_wait, free);
      if (free > liveness_.max_free_wait) {
        check_.violation("LIVENESS: " + who() + "'s unbounded acquisition " + acq_->id() +
                         " waited while " + std::string(lock_ ? "the lock was" : "enough permits were") +
                         " free for " + format_time(free) +
                         " after the faults ended (bound " + format_time(liveness_.max_free_wait) +
                         ")");
      }
    }
  }
  if (o.ec) {
    ++stats_.failures;
    if (w_.tracing()) w_.note(who() + " acquisition " + acq_->id() + " failed: " + o.ec.message());
    return idle();
  }
  ++stats_.grants;
  if (o.token.find(".h") != std::string::npos) ++stats_.handoffs;
  auto claimed = o.valid_until;
  if (bug_ == client_bug::double_validity) claimed += ttl();
  check_.granted(c_, o.token, o.fence, claimed, permits_, claimed_keys_, sem_ && all_or_one_);
  hold(o.token, o.fence, o.valid_until);
}

hold_plan plan_hold(rng& random, milliseconds ttl) {
  auto ttl_us = microseconds(ttl).count();
  auto roll = random.below(100);
  hold_plan plan;
  plan.extending = roll >= 80;
  plan.hold = roll < 60   ? random.between(0, ttl_us / 2)
              : roll < 80 ? random.between(ttl_us / 2, 3 * ttl_us / 2)
                          : random.between(ttl_us, 3 * ttl_us);
  plan.abandon = random.chance(0.1);
  return plan;
}

milliseconds pick_extend(rng& random, milliseconds ttl) {
  auto roll = random.below(4);
  return roll == 0 ? std::max(ttl / 2, milliseconds(1)) : roll == 1 ? longest_extend(ttl) : ttl;
}

// --- holding and releasing ---

void sim_client::hold(const std::string& token, std::uint64_t, steady::time_point valid_until) {
  phase_ = phase::holding;
  granted_at_ = w_.now();
  token_ = token;
  valid_until_ = valid_until;
  auto plan = plan_hold(w_.random(), ttl());
  extending_ = plan.extending;
  abandon_ = plan.abandon;
  hold_until_ = now() + microseconds(plan.hold);
  if (w_.tracing()) {
    w_.note(who() + " holds for " + format_time(plan.hold) + (extending_ ? ", extending" : "") +
            (abandon_ ? ", then abandons it" : ", then releases"));
  }
  w_.at_client(c_, w_.when(c_, hold_until_), [this, cycle = cycle_] {
    if (cycle == cycle_) release();
  });
  watchdog_.reset();
  if (extending_) {
    // As lease::keep_alive({}) does: renewals every third of the TTL.
    watchdog_.emplace(detail::keep_alive_schedule::settings{{}, {}, 0, ttl()}, w_.random().next());
    watchdog_->start(now(), valid_until_);
    arm_watchdog();
  }
}

void sim_client::arm_watchdog() {
  auto at = std::max(watchdog_->wake_at(now(), valid_until_), now());
  w_.at_client(c_, w_.when(c_, at), [this, cycle = cycle_, armed = ++watchdog_timer_] {
    if (cycle == cycle_ && armed == watchdog_timer_) on_watchdog_timer();
  });
}

void sim_client::on_watchdog_timer() {
  // From hold_until_ on, the release (due then) ends it.
  if (phase_ != phase::holding || !watchdog_ || now() >= hold_until_) return;
  switch (watchdog_->on_timer(now(), valid_until_)) {
    case detail::keep_alive_schedule::step::wait:
      return arm_watchdog();
    case detail::keep_alive_schedule::step::renew:
      extend();
      return arm_watchdog();  // meanwhile, the end of validity
    case detail::keep_alive_schedule::step::expired:
      return lose_lease("validity ran out without a renewal");
  }
}

// With the faults over, on a network whose renewals fit (liveness_rule), the watchdog keeps a
// lease granted since for as long as it is held.
void sim_client::lose_lease(const std::string& why) {
  ++stats_.lost_leases;
  if (liveness_.renewals_fit && granted_at_ >= liveness_.quiet_from) {
    check_.violation("LIVENESS: " + who() + "'s kept-alive lease " + token_ +
                     ", granted after the faults ended, was lost: " + why);
  }
  check_.ended(c_, why);
  release();  // the lease's lost() fired; the holder lets go
}

void sim_client::extend() {
  ++stats_.extends;
  milliseconds by = pick_extend(w_.random(), ttl());
  if (w_.tracing()) w_.note(who() + " extends " + token_ + " by " + std::to_string(by.count()) + " ms");
  if (lock_) return extend_lock(by);
  if (set_) return extend_set(by);
  refresh_permit(by);
}

void sim_client::extend_lock(milliseconds by) {
  extend_.emplace(*lock_, token_, by, "", now());
  // Each extend numbers its requests from 1: an answer is for the extend that sent it only (a
  // late one of an earlier extend would vouch for a key it set earlier).
  auto serial = ++extend_serial_;
  for (auto& r : extend_->take_requests()) {
    w_.call(c_, r, [this, cycle = cycle_, serial, id = r.id](std::error_code ec,
                                                                  const reply& answer) {
      if (cycle != cycle_ || phase_ != phase::holding || !extend_ || serial != extend_serial_) {
        return;
      }
      extend_->on_reply(id, now(), valid_until_, ec, answer);
      auto verdict = extend_->take_outcome();
      if (!verdict) return;
      extend_.reset();
      on_extend_verdict(verdict->ec, verdict->valid_until);
    });
  }
}

// lock_set_core::extend_keys: extend.lua on every key, judged by detail::set_extend.
void sim_client::extend_set(milliseconds by) {
  set_extend_.emplace(*set_, token_, by, "", now());
  auto serial = ++extend_serial_;
  for (auto& r : set_extend_->take_requests()) {
    w_.call(c_, r, [this, cycle = cycle_, serial, id = r.id](std::error_code ec,
                                                                  const reply& answer) {
      if (cycle != cycle_ || phase_ != phase::holding || !set_extend_ ||
          serial != extend_serial_) {
        return;
      }
      set_extend_->on_reply(id, now(), valid_until_, ec, answer);
      auto verdict = set_extend_->take_outcome();
      if (!verdict) return;
      set_extend_.reset();
      on_extend_verdict(verdict->ec, verdict->valid_until);
    });
  }
}

// semaphore_core::refresh_entry: validity from the moment the refresh is sent; a permit the
// script did not find is lost; an answer that lands after the old validity cannot vouch for
// the gap.
void sim_client::refresh_permit(milliseconds by) {
  auto serial = ++extend_serial_;
  auto start = now();
  const auto& k = sem_->keys;
  detail::request r;
  r.id = serial;
  r.code = &detail::sem_refresh_script;
  r.keys = detail::semaphore_refresh_keys(k, sem_->fair);
  r.args = {token_, std::to_string(by.count()), "", sem_->name_mark};
  r.timeout = sem_->node_timeout;
  w_.call(c_, r, [this, cycle = cycle_, serial, by, start](std::error_code ec,
                                                            const reply& answer) {
    if (cycle != cycle_ || phase_ != phase::holding || serial != extend_serial_) return;
    auto verdict = [&]() -> std::error_code {
      if (ec) return ec;
      if (!answer.is_integer()) return errc::protocol_error;
      if (answer.integer() != 1) return errc::lease_lost;
      if (now() >= valid_until_) return errc::lease_expired;
      return {};
    }();
    on_extend_verdict(verdict, start + by - detail::drift_allowance(by, sem_->drift_factor));
  });
}

void sim_client::on_extend_verdict(std::error_code ec, steady::time_point valid_until) {
  if (!ec) {
    valid_until_ = valid_until;
    auto claimed = valid_until_;
    if (bug_ == client_bug::double_validity) claimed += ttl();
    check_.extended(c_, claimed);
  }
  if (!ec || (ec != errc::lease_lost && ec != errc::lease_expired)) {
    // Undecided (timeouts, no quorum either way): the lease stands until its validity, and the
    // watchdog tries again soon.
    watchdog_->on_renewed(now(), valid_until_, !ec);
    return arm_watchdog();
  }
  lose_lease("extend failed: " + ec.message());
}

void sim_client::release() {
  if (phase_ != phase::holding) return;
  phase_ = phase::releasing;
  watchdog_.reset();
  extend_.reset();
  set_extend_.reset();
  if (abandon_) {
    ++stats_.abandoned;
    check_.ended(c_, "abandoned: the holder stops using it and never releases");
    return idle();
  }
  ++stats_.releases;
  check_.ended(c_, "release sent");
  if (sem_) return release_permit();
  if (set_) return release_set();
  release_.emplace(*lock_, token_, std::vector<bool>{},
                   detail::quorum_release::release_quorum(nodes()));
  for (auto& r : release_->take_requests()) {
    w_.call(c_, r, [this, cycle = cycle_, id = r.id](std::error_code ec, const reply& answer) {
      if (cycle != cycle_ || !release_) return;
      release_->on_reply(id, ec, answer);
      if (phase_ != phase::releasing) return;
      if (auto tally = release_->take_outcome()) {
        if (w_.tracing()) {
          w_.note(who() + " release of " + token_ + ": " +
                  detail::quorum_release::judge(*tally, nodes()).message());
        }
        idle();
      }
    });
  }
}

// lock_set_core::start_release: release.lua on every key, judged by detail::set_release.
void sim_client::release_set() {
  set_release_.emplace(*set_, token_);
  auto serial = ++release_serial_;
  for (auto& r : set_release_->take_requests()) {
    w_.call(c_, r, [this, cycle = cycle_, serial, id = r.id](std::error_code ec,
                                                             const reply& answer) {
      if (cycle != cycle_ || !set_release_ || serial != release_serial_) return;
      set_release_->on_reply(id, ec, answer);
      if (phase_ != phase::releasing) return;
      if (auto verdict = set_release_->take_outcome()) {
        if (w_.tracing()) {
          w_.note(who() + " release of " + token_ + ": " +
                  (*verdict ? verdict->message() : std::string("released")));
        }
        idle();
      }
    });
  }
}

// semaphore_core::release_entry: sem_release.lua, 1 when the permit was still live.
void sim_client::release_permit() {
  const auto& k = sem_->keys;
  detail::request r;
  r.id = ++release_serial_;
  r.code = &detail::sem_release_script;
  r.keys = detail::semaphore_release_keys(k);
  r.args = {token_, sem_->limit_text, sem_->variant_text, sem_->name_mark};
  r.timeout = sem_->node_timeout;
  w_.call(c_, r, [this, cycle = cycle_](std::error_code ec, const reply& answer) {
    if (cycle != cycle_ || phase_ != phase::releasing) return;
    if (w_.tracing()) {
      std::string verdict = ec                    ? ec.message()
                            : !answer.is_integer() ? "protocol error"
                            : answer.integer() == 1 ? "released"
                                                    : "not held";
      w_.note(who() + " release of " + token_ + ": " + verdict);
    }
    idle();
  });
}

void sim_client::idle() {
  phase_ = phase::idle;
  auto ttl_us = microseconds(ttl()).count();
  w_.at_client(c_, w_.now() + w_.random().between(0, ttl_us), [this, cycle = cycle_] {
    if (cycle == cycle_ && phase_ == phase::idle) next_cycle();
  });
}

void sim_client::check_finished() {
  if (phase_ == phase::done) return;
  static constexpr const char* phases[] = {"idle", "acquiring", "holding", "releasing", "done"};
  std::string what = who() + " never finished: stuck " + phases[static_cast<int>(phase_)];
  if (phase_ == phase::acquiring && acq_) {
    what += " " + acq_->id() + " after " + std::to_string(acq_->attempts_made()) + " attempts" +
            (in_attempt_ ? ", mid-attempt" : "") + (sleeping_ ? ", sleeping" : "") +
            (acq_->done() ? ", done" : "");
  }
  check_.violation("LIVENESS: " + what);
}

}  // namespace dlock::sim
