// SPDX-License-Identifier: Apache-2.0
// One schedule. The seed decides the configuration (make_config) and, through the world's one
// generator, everything after it: the fault times are drawn up front so that the moment the
// faults are over (and the liveness bound starts) is known before the run; which link drops or
// which node crashes is drawn when the fault happens.
#include "sim_run.hpp"

#include <algorithm>
#include <memory>

#include "dlock/shared_mutex.hpp"

namespace dlock::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr const char* lock_name = "sim:lock";
constexpr const char* semaphore_name = "sim:sem";

// lockset's names: lock_name + ":<n>".
std::string pool_name(std::size_t n) { return std::string(lock_name) + ":" + std::to_string(n); }

const char* name(topology t) {
  switch (t) {
    case topology::single:
      return "single";
    case topology::single_fair:
      return "single_fair";
    case topology::redlock3:
      return "redlock3";
    case topology::redlock5:
      return "redlock5";
    case topology::semaphore:
      return "semaphore";
    case topology::semaphore_fair:
      return "semaphore_fair";
    case topology::rwlock:
      return "rwlock";
    case topology::lockset:
      return "lockset";
    case topology::mixed:
      return "mixed";
  }
  return "?";
}

sim_time us(milliseconds d) { return microseconds(d).count(); }

// Every fault that happens, drawn at its time.
enum class fault_kind {
  drop,
  node_pause,
  crash,
  client_pause,
  amnesia_after_ttl,
  amnesia,
  script_flush
};

fault_kind pick(rng& r, const fault_mix& m) {
  int weights[] = {m.drop,    m.node_pause,  m.crash, m.client_pause, m.amnesia_after_ttl,
                   m.amnesia, m.script_flush};
  int total = 0;
  for (int w : weights) total += w;
  auto roll = static_cast<int>(r.below(static_cast<std::uint64_t>(total)));
  for (int k = 0; k < 7; ++k) {
    if (roll < weights[k]) return static_cast<fault_kind>(k);
    roll -= weights[k];
  }
  return fault_kind::drop;
}

}  // namespace

run_config make_config(std::uint64_t seed, topology t) {
  run_config c;
  c.seed = seed;
  c.topo = t;
  // A seed's configuration comes from a stream of its own, so that the family and the seed
  // alone decide it.
  rng r(seed * 4 + static_cast<std::uint64_t>(t) + 0x5eed);
  c.nodes = t == topology::redlock3 ? 3 : t == topology::redlock5 ? 5 : 1;
  c.lock.fair =
      t == topology::single_fair || t == topology::semaphore_fair || t == topology::rwlock;
  // A fair lock's queue needs wake-ups (a poll would find the head's handoff gone); a fair
  // semaphore's ticket keeps the place across polls.
  c.lock.wake_on_release = (c.lock.fair && !is_semaphore(t)) ||
                           r.chance(t == topology::single || t == topology::semaphore ? 0.85 : 0.7);
  std::int64_t ttl = r.between(20, 200);
  c.lock.ttl = milliseconds(ttl);
  c.lock.retry_delay = milliseconds(r.between(std::max<std::int64_t>(2, ttl / 20), ttl / 2));
  c.lock.node_timeout = r.chance(0.8) ? milliseconds(0) : milliseconds(r.between(2, ttl / 3));
  c.lock.drift_factor = 0.01;
  c.clients = static_cast<std::size_t>(r.between(2, 4));
  c.cycles = static_cast<int>(r.between(2, 5));
  auto node_timeout =
      us(detail::effective_node_timeout(c.lock.node_timeout, c.lock.ttl, c.request_timeout));
  // Calm, the network leaves room in node_timeout for two round trips (EVALSHA, NOSCRIPT, EVAL)
  // plus the millisecond run_script's truncation can cost: with less, a node that lost its
  // script cache is never sent the EVAL, and liveness cannot hold (sim_findings_test).
  c.calm_net.min_delay = r.between(20, 200);
  c.calm_net.max_delay = c.calm_net.min_delay + r.between(50, 1000);
  c.calm_net.max_delay = std::min(c.calm_net.max_delay, (node_timeout - 1000) / 4);
  c.calm_net.min_delay = std::min(c.calm_net.min_delay, c.calm_net.max_delay);
  c.net = c.calm_net;
  c.net.spike_chance = r.pick(std::vector<double>{0, 0.01, 0.05});
  c.net.spike_max = r.chance(0.7) ? 2 * node_timeout : 2 * us(c.lock.ttl);
  if (r.chance(0.9)) {
    c.fault_end = r.between(0, 4 * us(c.lock.ttl) * c.cycles);
    c.fault_gap_max = r.between(us(c.lock.ttl) / 2, 5 * us(c.lock.ttl));
    c.faults.drop = static_cast<int>(r.between(0, 4));
    c.faults.node_pause = static_cast<int>(r.between(0, 2));
    c.faults.crash = static_cast<int>(r.between(0, 2));
    c.faults.client_pause = static_cast<int>(r.between(0, 2));
    c.faults.amnesia_after_ttl = r.chance(0.1) ? 1 : 0;
    c.faults.amnesia = r.chance(0.03) ? 1 : 0;
    c.faults.script_flush = static_cast<int>(r.between(0, 2));
    if (c.faults.drop + c.faults.node_pause + c.faults.crash + c.faults.client_pause +
            c.faults.amnesia_after_ttl + c.faults.amnesia + c.faults.script_flush ==
        0) {
      c.faults.drop = 1;
    }
  }
  c.resubscribe_max = r.between(0, 3 * us(c.lock.retry_delay));
  if (c.nodes > 1 && r.chance(0.3)) {
    c.far_node = r.below(c.nodes);
    c.far_factor = r.between(3, 20);
  }
  if (t == topology::rwlock) {
    c.limit = c.max_permits = shared_mutex::max_readers;
    c.readers_and_writers = true;
    c.clients = static_cast<std::size_t>(r.between(2, 5));
  } else if (is_semaphore(t)) {  // drawn last: the lock families' seeds keep their configurations
    c.limit = r.between(1, 3);
    c.max_permits = r.chance(0.5) ? c.limit : 1;
    c.clients = static_cast<std::size_t>(r.between(2, c.limit + 2));
  } else if (t == topology::lockset) {  // drawn last too
    c.lock_names = 3;
    c.clients = static_cast<std::size_t>(r.between(2, 5));
    for (std::size_t k = 0; k < c.clients; ++k) {
      c.mutex_name.push_back(r.chance(0.5) ? run_config::set_client : r.below(c.lock_names));
    }
    c.mutex_name[r.below(c.clients)] = run_config::set_client;  // at least one set
  } else if (t == topology::mixed) {
    // Drawn last too. The mutexes fair or not (a fair lock's queue needs wake-ups, as above);
    // the read-write lock is fair whatever they are.
    c.lock.fair = r.chance(0.5);
    c.lock.wake_on_release = c.lock.wake_on_release || c.lock.fair;
    c.limit = c.max_permits = shared_mutex::max_readers;
    c.readers_and_writers = true;
    c.lock_names = 2;  // the name, and one more for the lock sets
    c.clients = static_cast<std::size_t>(r.between(2, 5));
    for (std::size_t k = 0; k < c.clients; ++k) {
      auto roll = r.below(100);
      c.mutex_name.push_back(roll < 45   ? run_config::read_write_client
                             : roll < 80 ? 0
                                         : run_config::set_client);
    }
    // At least one reader or writer, and one mutex or set beside it.
    auto shared = r.below(c.clients);
    c.mutex_name[shared] = run_config::read_write_client;
    auto other = (shared + 1 + r.below(c.clients - 1)) % c.clients;
    if (c.mutex_name[other] == run_config::read_write_client) {
      c.mutex_name[other] = r.chance(0.7) ? 0 : run_config::set_client;
    }
  }
  return c;
}

network_profile scaled(network_profile p, std::int64_t factor) {
  p.min_delay *= factor;
  p.max_delay *= factor;
  p.spike_max *= factor;
  return p;
}

semaphore_options run_config::semaphore() const {
  semaphore_options o;
  o.ttl = lock.ttl;
  o.fair = lock.fair;
  o.retry_delay = lock.retry_delay;
  o.wake_on_release = lock.wake_on_release;
  o.node_timeout = lock.node_timeout;
  o.drift_factor = lock.drift_factor;
  return o;
}

std::string run_config::describe() const {
  std::string s =
      std::string(name(topo)) + " seed " + std::to_string(seed) + ": " + std::to_string(nodes) +
      " node(s), ttl " + std::to_string(lock.ttl.count()) + "ms, retry_delay " +
      std::to_string(lock.retry_delay.count()) + "ms, node_timeout " +
      std::to_string(lock.node_timeout.count()) + "ms" + (lock.fair ? ", fair" : "") +
      (readers_and_writers ? ", readers (1 permit) and writers (all " +
                                 std::to_string(limit) + ")"
       : limit > 0     ? ", limit " + std::to_string(limit) + ", up to " +
                         std::to_string(max_permits) + " permit(s) per acquisition"
                       : "") +
      (lock.wake_on_release ? ", wake_on_release" : ", polling") + "; " + std::to_string(clients) +
      " clients x " + std::to_string(cycles) + " cycles; network " + format_time(net.min_delay) +
      "-" + format_time(net.max_delay) + ", slow messages " + std::to_string(net.spike_chance) +
      " up to " + format_time(net.spike_max) + "; faults until " + format_time(fault_end);
  if (fault_end > 0) {
    s += " (every <=" + format_time(fault_gap_max) + "; weights drop " +
         std::to_string(faults.drop) + ", node pause " + std::to_string(faults.node_pause) +
         ", crash " + std::to_string(faults.crash) + ", client pause " +
         std::to_string(faults.client_pause) + ", amnesia after ttl " +
         std::to_string(faults.amnesia_after_ttl) + ", amnesia " + std::to_string(faults.amnesia) +
         ", script flush " + std::to_string(faults.script_flush) + ")";
  }
  if (far_node) {
    s += "; n" + std::to_string(*far_node) + " is " + std::to_string(far_factor) + "x farther";
  }
  if (lock_names > 0) {
    s += "; clients:";
    for (std::size_t k = 0; k < mutex_name.size(); ++k) {
      s += (k == 0 ? " " : ", ") +
           (mutex_name[k] == set_client          ? std::string("lock_set")
            : mutex_name[k] == read_write_client ? "shared_mutex " + pool_name(0)
                                                 : "mutex " + pool_name(mutex_name[k]));
    }
  }
  if (bug == client_bug::taken_as_granted) s += "; BUG: taken as granted";
  if (bug == client_bug::double_validity) s += "; BUG: double validity";
  return s;
}

run_result run_schedule(const run_config& c, bool trace, bool echo) {
  run_result result;
  world w(c.seed, c.nodes, c.net);
  w.set_tracing(trace || echo);
  w.set_echo(echo);
  w.set_resubscribe_delay(c.resubscribe_max);
  auto& rnd = w.random();
  bool mixed = c.topo == topology::mixed;
  bool semaphore = c.limit > 0 && !mixed;
  std::vector<lock_keys> pool;
  for (std::size_t n = 0; n < c.lock_names; ++n) pool.push_back(lock_keys_for(pool_name(n)));
  auto check = mixed       ? checker(w, pool, shared_mutex_keys_for(pool_name(0)), c.limit)
               : semaphore ? checker(w, semaphore_keys_for(semaphore_name, c.lock.fair), c.limit)
               : pool.empty() ? checker(w, lock_keys_for(lock_name), c.nodes)
                              : checker(w, pool, c.nodes);
  check.check_holders(c.check_holders);
  check.check_fences(c.check_fences);
  w.before_script = [&](std::size_t i, const detail::request& r) { check.before_script(i, r); };
  w.after_script = [&](std::size_t i, const detail::request& r, const reply& answer) {
    check.after_script(i, r, answer);
  };
  auto target = detail::make_lock_target(c.nodes, lock_name, c.lock, c.request_timeout);
  auto sem_target =
      detail::make_semaphore_target(semaphore_name, c.limit, c.semaphore(), c.request_timeout);
  // mixed: the shared_mutex of the mutexes' name, as semaphore_core makes it.
  auto read_write = c.semaphore();
  read_write.fair = true;
  auto rw_target =
      detail::make_semaphore_target(pool_name(0), c.limit, read_write, c.request_timeout);
  rw_target.keys = shared_mutex_keys_for(pool_name(0));
  rw_target.name_mark = read_write_lock_mark;
  sim_time ttl = us(c.lock.ttl), longest = us(longest_extend(c.lock.ttl));

  // The faults' times, and when their effects are over.
  std::vector<sim_time> fault_times;
  sim_time quiet = c.fault_end;
  for (sim_time t = rnd.between(0, c.fault_gap_max); t < c.fault_end;
       t += 1 + rnd.between(0, c.fault_gap_max)) {
    fault_times.push_back(t);
  }
  std::vector<std::pair<fault_kind, sim_time>> plan;  // kind, duration
  for (sim_time t : fault_times) {
    auto kind = pick(rnd, c.faults);
    sim_time d = 0;
    switch (kind) {
      case fault_kind::drop:
        break;
      case fault_kind::node_pause:
      case fault_kind::client_pause:
        d = rnd.chance(0.8) ? rnd.between(ms(1), 2 * ttl) : rnd.between(2 * ttl, 5 * ttl);
        break;
      case fault_kind::crash:
        d = rnd.between(ms(1), 2 * ttl);
        break;
      case fault_kind::amnesia_after_ttl:  // longer than any key lives (an extend's TTL too)
        d = longest + rnd.between(ms(1), ttl);
        break;
      case fault_kind::amnesia:
        d = rnd.between(0, ttl / 2);
        break;
      case fault_kind::script_flush:
        break;
    }
    plan.emplace_back(kind, d);
    quiet = std::max(quiet, t + d);
  }
  quiet += c.resubscribe_max;
  result.quiet_from = quiet;
  result.faults = plan.size();

  // After the faults, an unbounded waiter sees the lock free for at most a few TTLs and retry
  // delays: a holder that vanished leaves its key for a TTL (or an extend's longer one); a
  // round that timed out can leave one more; Redlock's split votes cost a few retry delays
  // each. In fair mode a waiter that vanished from the queue's head holds it up until its entry
  // expires.
  sim_time bound = 3 * ttl + longest + 10 * us(c.lock.retry_delay) +
                   4 * us(target.node_timeout) + c.resubscribe_max;
  // A semaphore's waiter that vanished keeps its place (fair) or its wake-up (unfair) as long.
  if (c.lock.fair || semaphore || mixed) {
    bound += us(detail::waiter_entry_ttl(c.lock.retry_delay));
  }
  result.max_free_wait = bound;

  // A renewal, answered after two calm round trips at most (a NOSCRIPT reload), fits in what
  // is left of a lease when it goes out: at least half of (an extend's shortest TTL, ttl / 2,
  // less the drift and a round trip) and of (a grant's validity, less the node timeout its
  // answer may have taken), three such answers over. No node is far.
  sim_time renewal = 4 * c.calm_net.max_delay;
  sim_time drift = us(std::chrono::duration_cast<milliseconds>(
      detail::drift_allowance(c.lock.ttl / 2, c.lock.drift_factor)));
  bool renewals_fit = !c.far_node && c.calm_net.spike_chance == 0 &&
                      3 * renewal < ttl / 2 - drift - us(target.node_timeout);

  // By world index: a lock, semaphore or lock set client.
  std::vector<std::unique_ptr<sim_client>> clients;
  for (std::size_t k = 0; k < c.clients; ++k) {
    client_clock clock{rnd.between(1'000'000'000, 1'000'000'000'000),
                       rnd.between(-c.max_rate_ppm, c.max_rate_ppm)};
    std::size_t index = w.add_client(clock);
    liveness_rule liveness{quiet, bound, renewals_fit};
    bool sets = !pool.empty() && c.mutex_name[k] == run_config::set_client;
    clients.emplace_back();
    if (sets) {
      std::vector<std::string> names;
      for (const auto& k : pool) names.push_back(k.key);
      clients.back() = std::make_unique<sim_client>(w, check, std::move(names), c.lock,
                                                    c.request_timeout, index, c.cycles, liveness,
                                                    c.bug);
      continue;
    }
    if (!pool.empty() && c.mutex_name[k] == run_config::read_write_client) {
      clients.back() = std::make_unique<sim_client>(w, check, rw_target, index, c.cycles,
                                                    liveness);
      clients.back()->set_max_permits(c.limit, true);
      clients.back()->set_claimed_keys({pool_name(0)});
    } else if (!pool.empty()) {
      auto own = detail::make_lock_target(1, pool_name(c.mutex_name[k]), c.lock,
                                          c.request_timeout);
      clients.back() = std::make_unique<sim_client>(w, check, own, index, c.cycles, liveness);
    } else if (semaphore) {
      clients.back() = std::make_unique<sim_client>(w, check, sem_target, index, c.cycles,
                                                    liveness, c.bug);
      clients.back()->set_max_permits(c.max_permits, c.readers_and_writers);
    } else {
      clients.back() =
          std::make_unique<sim_client>(w, check, target, index, c.cycles, liveness, c.bug);
    }
    clients.back()->set_unbounded_only(c.unbounded_only);
  }
  // A set client subscribes to nothing (a set polls): these reach the others only.
  w.on_message = [&](std::size_t k, std::size_t i, std::string_view payload) {
    if (clients[k]) clients[k]->on_message(i, payload);
  };
  w.on_subscribed = [&](std::size_t k, std::size_t i) {
    if (clients[k]) clients[k]->on_subscribed(i);
  };
  w.on_subscription_lost = [&](std::size_t k, std::size_t i) {
    if (clients[k]) clients[k]->on_subscription_lost(i);
  };

  for (std::size_t f = 0; f < plan.size(); ++f) {
    w.at(fault_times[f], [&w, &check, &c, kind = plan[f].first, d = plan[f].second] {
      auto& r = w.random();
      std::size_t node = r.below(c.nodes);
      switch (kind) {
        case fault_kind::drop: {
          auto links = w.open_links();
          if (!links.empty()) w.drop_link(links[r.below(links.size())].id);
          break;
        }
        case fault_kind::node_pause:
          w.pause_node(node, d);
          break;
        case fault_kind::script_flush:
          w.flush_scripts(node);
          break;
        case fault_kind::crash:
          w.crash_node(node, d, true);
          break;
        case fault_kind::client_pause:
          w.pause_client(r.below(c.clients), d);
          break;
        case fault_kind::amnesia_after_ttl:
          if (w.node_down(node)) break;
          check.forget_fences("n" + std::to_string(node) + " restarts without its data");
          w.crash_node(node, d, false);
          break;
        case fault_kind::amnesia:
          if (w.node_down(node)) break;
          check.leave_assumptions("n" + std::to_string(node) +
                                  " restarts without its data before the TTL passed");
          w.crash_node(node, d, false);
          break;
      }
    });
  }
  if (c.far_node) w.set_node_network(*c.far_node, scaled(c.net, c.far_factor));
  w.at(c.fault_end, [&w, &c] {
    if (w.tracing()) w.note("faults are over");
    w.set_network(c.calm_net);
    if (c.far_node) w.set_node_network(*c.far_node, scaled(c.calm_net, c.far_factor));
  });
  for (std::size_t k = 0; k < c.clients; ++k) {
    clients[k]->start(rnd.between(0, ttl));
  }

  // Generous: the liveness bounds catch a slow waiter long before this.
  sim_time cap =
      quiet + static_cast<sim_time>(c.clients * static_cast<std::size_t>(c.cycles) + 10) *
                  (4 * ttl + bound);
  while (!check.failed() && w.step(cap)) {
  }
  if (!check.failed()) {
    for (auto& client : clients) {
      if (client) client->check_finished();
    }
  }
  result.failure = check.failed() ? check.failure() : "";
  result.within_assumptions = check.within_assumptions();
  result.grants = check.grants();
  result.ended_at = w.now();
  result.world = w.stats();
  for (std::size_t k = 0; k < c.clients; ++k) {
    const auto& s = clients[k]->stats();
    auto& sum = result.clients;
    sum.acquisitions += s.acquisitions;
    sum.grants += s.grants;
    sum.handoffs += s.handoffs;
    sum.failures += s.failures;
    sum.attempts += s.attempts;
    sum.woken_attempts += s.woken_attempts;
    sum.wakes += s.wakes;
    sum.extends += s.extends;
    sum.lost_leases += s.lost_leases;
    sum.releases += s.releases;
    sum.abandoned += s.abandoned;
    sum.longest_free_wait = std::max(sum.longest_free_wait, s.longest_free_wait);
  }
  if (trace) result.trace = w.trace();
  return result;
}

std::string report(const run_config& c, const run_result& r, std::size_t lines) {
  std::string s = "DLOCK_SIM_SEED=" + std::to_string(c.seed) + " (" + name(c.topo) + ")\n" +
                  c.describe() + "\n";
  s += "VIOLATION at " + r.failure + "\n";
  s += "within the assumptions: " + std::string(r.within_assumptions ? "yes" : "no") +
       "; faults over at " + format_time(r.quiet_from) + "; run ended at " +
       format_time(r.ended_at) + "\n";
  std::size_t from = r.trace.size() > lines ? r.trace.size() - lines : 0;
  s += "last " + std::to_string(r.trace.size() - from) + " of " + std::to_string(r.trace.size()) +
       " events:\n";
  for (std::size_t k = from; k < r.trace.size(); ++k) s += "  " + r.trace[k] + "\n";
  return s;
}

}  // namespace dlock::sim
