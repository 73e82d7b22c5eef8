// SPDX-License-Identifier: Apache-2.0
// The simulated world: events, clocks, links, nodes and faults. The header lists what the
// network reproduces of src/net/connection.cpp; the comments here say how.
//
// A link's two directions are independent FIFOs: each remembers when its last message
// arrives, and a new one arrives no earlier. A link is closed on each side separately: the
// client stops using it (a timeout, a drop it saw, a reset it received) and the node stops
// serving it (a crash, a drop it noticed). Requests already on their way when the client gives
// up still reach the node and run there, which is what makes a timed-out SET land late.
#include "sim_world.hpp"

#include <algorithm>
#include <cassert>
#include <cstdio>

#include "algo/lock_protocol.hpp"
#include "algo/semaphore_protocol.hpp"
#include "dlock/client.hpp"

namespace dlock::sim {
namespace {

bool is_noscript(const reply& r) { return r.is_error() && r.str().compare(0, 8, "NOSCRIPT") == 0; }

bool later(const auto& a, const auto& b) {
  return a.time != b.time ? a.time > b.time : a.seq > b.seq;
}

std::string render(const reply& r) {
  std::string s = r.to_string();
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

}  // namespace

std::string_view script_name(const detail::script* s) {
  if (s == &detail::acquire_script) return "acquire";
  if (s == &detail::acquire_unqueued_commands) return "acquire_unqueued";
  if (s == &detail::sem_solo_commands) return "sem_solo";
  if (s == &detail::release_script) return "release";
  if (s == &detail::extend_script) return "extend";
  if (s == &detail::fence_raise_script) return "fence_raise";
  if (s == &detail::fenced_set_script) return "fenced_set";
  if (s == &detail::leave_script) return "leave";
  if (s == &detail::acquire_all_script) return "acquire_all";
  return "script";
}

std::string format_time(sim_time t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lldms", static_cast<long long>(t / 1000),
                static_cast<long long>(t % 1000));
  return buf;
}

std::string format_time(steady::duration d) {
  return format_time(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

world::world(std::uint64_t seed, std::size_t nodes, network_profile net) : rng_(seed), net_(net) {
  // A wall clock far from zero, different per seed: nothing may assume an epoch.
  epoch_ms_ = 1'700'000'000'000 + rng_.between(0, 10'000'000'000);
  nodes_.resize(nodes);
  for (auto& n : nodes_) n.redis = std::make_unique<node>();
}

world::~world() = default;

void world::at(sim_time t, std::function<void()> fn) {
  queue_.push_back(event{std::max(t, now_), next_seq_++, std::move(fn)});
  std::push_heap(queue_.begin(), queue_.end(),
                 [](const event& a, const event& b) { return later(a, b); });
}

bool world::step(sim_time until) {
  if (queue_.empty() || queue_.front().time > until) return false;
  std::pop_heap(queue_.begin(), queue_.end(),
                [](const event& a, const event& b) { return later(a, b); });
  event e = std::move(queue_.back());
  queue_.pop_back();
  now_ = e.time;
  ++stats_.events;
  e.fn();
  return true;
}

sim_time world::delay(std::size_t i) {
  const auto& net = nodes_[i].net ? *nodes_[i].net : net_;
  if (net.spike_chance > 0 && rng_.chance(net.spike_chance)) {
    return rng_.between(net.max_delay, std::max(net.spike_max, net.max_delay));
  }
  return rng_.between(net.min_delay, net.max_delay);
}

// --- clients and their clocks ---

std::size_t world::add_client(client_clock clock) {
  client_state c;
  c.clock = clock;
  c.channel = "dlock:wake:c" + std::to_string(clients_.size());
  c.command_link.resize(nodes_.size());
  c.subs.resize(nodes_.size());
  clients_.push_back(std::move(c));
  return clients_.size() - 1;
}

std::int64_t world::clock_us(std::size_t c, sim_time t) const {
  const auto& k = clients_[c].clock;
  // |rate| < 1e6 ppm, so the correction moves by at most 1 per microsecond: still monotonic.
  // No overflow: runs last hours at most (1e10 us), rates are below 1e5 ppm.
  std::int64_t drift = t * k.rate_ppm / 1'000'000;
  return k.offset_us + t + drift;
}

steady::time_point world::clock_at(std::size_t c, sim_time t) const {
  return steady::time_point(std::chrono::microseconds(clock_us(c, t)));
}

sim_time world::when(std::size_t c, steady::time_point t) const {
  // Rounded up: the clock must have reached t.
  auto target = std::chrono::ceil<std::chrono::microseconds>(t.time_since_epoch()).count();
  if (clock_us(c, now_) >= target) return now_;
  const auto& k = clients_[c].clock;
  // Beyond any run (four months): "never" (a deadline of steady::time_point::max()).
  constexpr sim_time horizon = 10'000'000'000'000;
  if (target - k.offset_us > horizon) return horizon;
  sim_time guess = (target - k.offset_us) * 1'000'000 / (1'000'000 + k.rate_ppm);
  guess = std::max(guess, now_);
  while (clock_us(c, guess) < target) ++guess;
  while (guess > now_ && clock_us(c, guess - 1) >= target) --guess;
  return guess;
}

// A paused process handles nothing: what reaches it waits in its backlog, in arrival order,
// and runs when the pause ends. Anything arriving while the backlog is not yet empty waits
// behind it, or an arrival at the very end of the pause would overtake older ones (one link's
// FIFO order would break).
void world::at_client(std::size_t c, sim_time t, std::function<void()> fn) {
  at(t, [this, c, fn = std::move(fn)]() mutable { admit(clients_[c].gate, std::move(fn)); });
}

void world::at_node(std::size_t i, sim_time t, std::function<void()> fn) {
  at(t, [this, i, fn = std::move(fn)]() mutable { admit(nodes_[i].gate, std::move(fn)); });
}

void world::admit(pause_gate& g, std::function<void()> fn) {
  if (g.paused_until > now_ || !g.backlog.empty()) return g.backlog.push_back(std::move(fn));
  fn();
}

void world::pause(pause_gate& g, sim_time until, std::function<void()> drain) {
  g.paused_until = std::max(g.paused_until, until);
  at(g.paused_until, std::move(drain));
}

void world::drain(pause_gate& g) {
  while (g.paused_until <= now_ && !g.backlog.empty()) {
    auto fn = std::move(g.backlog.front());
    g.backlog.pop_front();
    fn();
  }
}

// --- script calls ---

std::uint64_t world::open_link(std::size_t c, std::size_t i, bool subscriber) {
  link_state l{};
  l.id = links_.size();
  l.client = c;
  l.node = i;
  l.subscriber = subscriber;
  l.opened_at = now_;
  links_.push_back(std::move(l));
  return links_.back().id;
}

// A connection opened while its node is down meets a closed port (every one open at the crash
// had its server side closed then). Nothing sent on it later can arrive, even once the node is
// back; the reset reaches the client one delay later.
void world::refuse(link_state& l) {
  if (!l.server_open) return;
  l.server_open = false;
  ++stats_.refused;
  if (tracing_)
    note("n" + std::to_string(l.node) + " is down: link " + std::to_string(l.id) + " refused");
  at_client(l.client, now_ + delay(l.node),
            [this, link_id = l.id] { fail_link(link_id, errc::node_unreachable); });
}

void world::call(std::size_t c, const detail::request& r, reply_handler done) {
  auto req = std::make_shared<const detail::request>(r);
  auto deadline = clock_us(c, now_) + std::chrono::microseconds(r.timeout).count();
  send(c, std::move(req), false, deadline, std::move(done));
}

void world::send(std::size_t c, std::shared_ptr<const detail::request> req, bool eval,
                 std::int64_t deadline_us, reply_handler handler) {
  std::size_t i = req->node;
  auto& slot = clients_[c].command_link[i];
  if (!slot) slot = open_link(c, i, false);
  auto& l = links_[*slot];
  std::uint64_t id = calls_.size();
  calls_.push_back(call_state{c, l.id, std::move(req), eval, deadline_us, false, false, false,
                              std::move(handler)});
  ++stats_.calls;
  if (eval) ++stats_.evals;
  l.inflight.push_back(id);
  l.last_at_node = std::max(l.last_at_node, now_ + delay(i));
  if (tracing_) {
    note("c" + std::to_string(c) + " -> n" + std::to_string(i) + " #" + std::to_string(id) +
         " link " + std::to_string(l.id) + " " + describe(*calls_[id].req, eval) + " (arrives " +
         format_time(l.last_at_node) + ")");
  }
  at_node(i, l.last_at_node, [this, id] { arrive(id); });
  std::int64_t deadline = deadline_us;
  at_client(c, when(c, steady::time_point(std::chrono::microseconds(deadline))), [this, id] {
    auto& k = calls_[id];
    if (k.done || !links_[k.link].client_open) return;
    ++stats_.timeouts;
    if (tracing_)
      note("c" + std::to_string(k.client) + " #" + std::to_string(id) + " deadline passed: link " +
           std::to_string(k.link) + " fails with timeout");
    fail_link(k.link, errc::timeout);
  });
}

void world::arrive(std::uint64_t call_id) {
  auto& k = calls_[call_id];
  auto& l = links_[k.link];
  std::size_t i = l.node;
  if (l.mid_request) return l.held.push_back(call_id);
  if (k.lost || !l.server_open) {
    k.lost = true;
    ++stats_.lost_in_flight;
    if (tracing_)
      note("n" + std::to_string(i) + " #" + std::to_string(call_id) + " lost on the way");
    return;
  }
  if (nodes_[i].down) {
    k.lost = true;
    refuse(l);
    return;
  }
  k.arrived = true;
  if (!l.client_open) ++stats_.late_executions;
  if (k.req->code->as_commands) return run_plain_command(call_id);
  auto& n = *nodes_[i].redis;
  n.set_time(wall_ms());
  const auto& r = *k.req;
  std::vector<std::string> argv;
  argv.reserve(3 + r.keys.size() + r.args.size());
  argv.emplace_back(k.eval ? "EVAL" : "EVALSHA");
  argv.emplace_back(k.eval ? r.code->body : r.code->sha1);
  argv.push_back(std::to_string(r.keys.size()));
  argv.insert(argv.end(), r.keys.begin(), r.keys.end());
  argv.insert(argv.end(), r.args.begin(), r.args.end());
  if (before_script) before_script(i, r);
  reply result = n.exec(argv);
  if (after_script) after_script(i, r, result);
  if (tracing_) {
    note("n" + std::to_string(i) + " #" + std::to_string(call_id) + " ran " +
         std::string(script_name(r.code)) + (l.client_open ? "" : " (its client gave up on it)") +
         " -> " + render(result));
  }
  send_reply(call_id, std::move(result));
}

void world::send_reply(std::uint64_t call_id, reply result) {
  auto& l = links_[calls_[call_id].link];
  deliver_messages(l.node);
  l.last_at_client = std::max(l.last_at_client, now_ + delay(l.node));
  at_client(l.client, l.last_at_client,
            [this, call_id, result = std::move(result)] { on_reply(call_id, result); });
}

// A request's plain commands (semaphore_protocol.hpp's plain_commands_of: the words the
// library sends).
std::array<detail::plain_command, 6> world::plain_steps(const detail::request& r,
                                                       std::size_t& size) const {
  std::vector<std::string_view> keys(r.keys.begin(), r.keys.end());
  std::vector<std::string_view> args(r.args.begin(), r.args.end());
  return detail::plain_commands_of(*r.code, keys, args, size);
}

// The next of a request's plain commands. A crash or a drop in between loses the rest, as it
// loses a write's unread end. MULTI ... EXEC runs as one step, as a server runs it.
void world::run_plain_command(std::uint64_t call_id) {
  auto& k = calls_[call_id];
  auto& l = links_[k.link];
  std::size_t i = l.node;
  std::size_t size = 0;
  auto steps = plain_steps(*k.req, size);
  if (k.lost || !l.server_open) {
    k.lost = true;
    ++stats_.lost_in_flight;
    if (tracing_)
      note("n" + std::to_string(i) + " #" + std::to_string(call_id) + " loses its last " +
           std::to_string(size - k.replies.size()) + " command(s)");
    l.mid_request = false;
    return arrive_held(l.id);
  }
  auto& n = *nodes_[i].redis;
  n.set_time(wall_ms());
  const auto& r = *k.req;
  std::size_t step = k.replies.size();
  auto argv_of = [&](std::size_t at) {
    auto words = steps[at].view();
    return std::vector<std::string>(words.begin(), words.end());
  };
  std::vector<std::string> argv = argv_of(step);
  if (step == 0 && before_script) before_script(i, r);
  reply result;
  if (argv[0] == "MULTI") {
    std::vector<reply> queued;
    k.replies.push_back(reply::make_string(reply::kind::status, "OK"));
    std::size_t at = step + 1;
    for (; at < size && argv_of(at)[0] != "EXEC"; ++at) {
      queued.push_back(n.exec(argv_of(at)));
      k.replies.push_back(reply::make_string(reply::kind::status, "QUEUED"));
    }
    result = reply::make_array(std::move(queued));
  } else {
    result = n.exec(argv);
  }
  if (step == 0 && after_script) after_script(i, r, result);
  if (tracing_) {
    note("n" + std::to_string(i) + " #" + std::to_string(call_id) + " ran " + argv[0] + " " +
         (argv.size() > 1 ? argv[1] : std::string()) +
         (l.client_open ? "" : " (its client gave up on it)") + " -> " + render(result));
  }
  k.replies.push_back(std::move(result));
  if (k.replies.size() < size) {
    l.mid_request = true;
    if (!rng_.chance(0.25)) return run_plain_command(call_id);
    // The rest of the write is still on its way: others run first.
    return at_node(i, now_ + rng_.between(1, 200), [this, call_id] { run_plain_command(call_id); });
  }
  l.mid_request = false;
  reply answer = reply::make_array(std::exchange(k.replies, {}));
  if (after_script) after_script(i, r, answer);
  send_reply(call_id, std::move(answer));
  arrive_held(l.id);
}

// The requests that arrived behind plain commands, in order, until one of them is plain too.
void world::arrive_held(std::uint64_t link_id) {
  while (!links_[link_id].mid_request && !links_[link_id].held.empty()) {
    auto id = links_[link_id].held.front();
    links_[link_id].held.pop_front();
    arrive(id);
  }
}

void world::on_reply(std::uint64_t call_id, const reply& r) {
  auto& k = calls_[call_id];
  auto& l = links_[k.link];
  if (!l.client_open) return;  // the connection failed: its replies are lost
  assert(!l.inflight.empty() && l.inflight.front() == call_id);
  l.inflight.pop_front();
  if (!k.eval && is_noscript(r)) {
    // run_request: no EVAL for an attempt the engine gave up on (fallback_gate)...
    const auto& gate = k.req->gate;
    if (gate.wanted && !gate.wanted(gate.owner, k.req->id)) {
      return complete(call_id, errc::timeout, reply{});
    }
    // ... else EVAL within what is left of the same timeout, rounded up to milliseconds
    // (src/script.cpp's time_left; truncated, a 1 ms timeout never sent it: finding 1).
    std::int64_t left_us = k.deadline_us - clock_us(k.client, now_);
    std::int64_t left_ms = left_us > 0 ? (left_us + 999) / 1000 : 0;
    if (left_ms <= 0) return complete(call_id, errc::timeout, reply{});
    k.done = true;
    if (tracing_)
      note("c" + std::to_string(k.client) + " #" + std::to_string(call_id) +
           " NOSCRIPT: EVAL follows");
    return send(k.client, k.req, true, clock_us(k.client, now_) + left_ms * 1000,
                std::move(k.handler));
  }
  complete(call_id, r.is_error() ? error_from_reply(r) : std::error_code{}, r);
}

void world::complete(std::uint64_t call_id, std::error_code ec, const reply& r) {
  auto& k = calls_[call_id];
  if (k.done) return;
  k.done = true;
  if (tracing_) {
    note("c" + std::to_string(k.client) + " #" + std::to_string(call_id) + " " +
         std::string(script_name(k.req->code)) + " on n" + std::to_string(k.req->node) + " -> " +
         (ec ? ec.message() + (r.is_error() ? " (" + r.str() + ")" : "") : render(r)));
  }
  auto handler = std::move(k.handler);
  handler(ec, r);
}

void world::fail_link(std::uint64_t link_id, std::error_code ec) {
  auto& l = links_[link_id];
  if (!l.client_open) return;
  if (l.subscriber) return lose_subscription(link_id);
  l.client_open = false;
  auto& slot = clients_[l.client].command_link[l.node];
  if (slot == link_id) slot.reset();
  if (tracing_)
    note("c" + std::to_string(l.client) + " link " + std::to_string(link_id) + " to n" +
         std::to_string(l.node) + " fails: " + ec.message());
  auto inflight = std::exchange(l.inflight, {});
  for (auto id : inflight) complete(id, ec, reply{});
}

// --- pub/sub ---

void world::subscribe(std::size_t c, std::size_t i) {
  auto& sub = clients_[c].subs[i];
  if (sub.state != sub_state::none) return;
  sub.state = sub_state::subscribing;
  sub.link = open_link(c, i, true);
  auto& l = links_[sub.link];
  l.last_at_node = std::max(l.last_at_node, now_ + delay(i));
  if (tracing_)
    note("c" + std::to_string(c) + " -> n" + std::to_string(i) + " SUBSCRIBE on link " +
         std::to_string(l.id));
  std::uint64_t link_id = l.id;
  at_node(i, l.last_at_node, [this, link_id] { arrive_subscribe(link_id); });
}

bool world::subscribed(std::size_t c, std::size_t i) const {
  return clients_[c].subs[i].state == sub_state::subscribed;
}

void world::arrive_subscribe(std::uint64_t link_id) {
  auto& l = links_[link_id];
  if (!l.server_open) return;
  if (nodes_[l.node].down) return refuse(l);
  nodes_[l.node].redis->subscribe(l.id, clients_[l.client].channel);
  l.last_at_client = std::max(l.last_at_client, now_ + delay(l.node));
  at_client(l.client, l.last_at_client, [this, link_id] {
    auto& l = links_[link_id];
    auto& sub = clients_[l.client].subs[l.node];
    if (!l.client_open || sub.link != link_id) return;
    sub.state = sub_state::subscribed;
    if (tracing_)
      note("c" + std::to_string(l.client) + " subscribed on n" + std::to_string(l.node));
    if (on_subscribed) on_subscribed(l.client, l.node);
  });
}

// The client side of a subscriber connection closes: like inbox::on_drop, only a confirmed
// subscription is reported lost. The client subscribes again after a random delay.
void world::lose_subscription(std::uint64_t link_id) {
  auto& l = links_[link_id];
  l.client_open = false;
  std::size_t c = l.client, i = l.node;
  auto& sub = clients_[c].subs[i];
  if (sub.link != link_id) return;
  bool was_subscribed = sub.state == sub_state::subscribed;
  sub.state = sub_state::none;
  if (tracing_)
    note("c" + std::to_string(c) + " subscriber link " + std::to_string(link_id) + " to n" +
         std::to_string(i) + " lost" + (was_subscribed ? " (was subscribed)" : ""));
  at_client(c, now_ + rng_.between(0, resubscribe_max_), [this, c, i] { subscribe(c, i); });
  if (was_subscribed && on_subscription_lost) on_subscription_lost(c, i);
}

void world::deliver_messages(std::size_t i) {
  for (auto& m : nodes_[i].redis->take_messages()) {
    auto& l = links_[m.to];
    ++stats_.messages;
    l.last_at_client = std::max(l.last_at_client, now_ + delay(i));
    if (tracing_)
      note("n" + std::to_string(i) + " publishes \"" + m.payload + "\" to c" +
           std::to_string(l.client) + " (arrives " + format_time(l.last_at_client) + ")");
    at_client(l.client, l.last_at_client, [this, link_id = l.id, payload = std::move(m.payload)] {
      auto& l = links_[link_id];
      if (!l.client_open) {
        ++stats_.messages_lost;
        if (tracing_)
          note("c" + std::to_string(l.client) + " message \"" + payload + "\" lost with its link");
        return;
      }
      if (tracing_)
        note("c" + std::to_string(l.client) + " receives \"" + payload + "\" from n" +
             std::to_string(l.node));
      if (on_message) on_message(l.client, l.node, payload);
    });
  }
}

// --- faults ---

std::vector<world::link_info> world::open_links() const {
  std::vector<link_info> out;
  for (const auto& l : links_) {
    if (l.client_open) out.push_back({l.client, l.node, l.id, l.subscriber});
  }
  return out;
}

void world::drop_link(std::uint64_t id) {
  auto& l = links_[id];
  if (!l.client_open) return;
  ++stats_.drops;
  if (tracing_)
    note("FAULT: link " + std::to_string(id) + " (c" + std::to_string(l.client) + " - n" +
         std::to_string(l.node) + ") drops");
  // Of the requests still travelling, a prefix gets through (TCP delivers in order or not
  // at all); they run on the node, but their replies are lost with the connection.
  bool through = true;
  for (auto call_id : l.inflight) {
    auto& k = calls_[call_id];
    if (k.arrived) continue;
    through = through && rng_.chance(0.5);
    if (!through) k.lost = true;
  }
  // The node notices later: until then a subscriber connection still counts for PUBLISH,
  // and its messages are lost.
  sim_time notice = std::max(l.last_at_node, now_ + delay(l.node));
  at(notice, [this, id] {
    auto& l = links_[id];
    if (!l.server_open) return;
    l.server_open = false;
    if (l.subscriber && !nodes_[l.node].down) nodes_[l.node].redis->disconnect(l.id);
  });
  fail_link(id, errc::connection_lost);
}

void world::pause_node(std::size_t i, sim_time duration) {
  if (nodes_[i].down) return;
  if (tracing_) note("FAULT: n" + std::to_string(i) + " pauses for " + format_time(duration));
  pause(nodes_[i].gate, now_ + duration, [this, i] { drain(nodes_[i].gate); });
}

void world::crash_node(std::size_t i, sim_time down_for, bool persisted) {
  auto& n = nodes_[i];
  if (n.down) return;
  if (tracing_) {
    note("FAULT: n" + std::to_string(i) + " crashes, restarts " + (persisted ? "with" : "WITHOUT") +
         " its data after " + format_time(down_for));
  }
  n.down = true;
  n.crashed_at = now_;
  // What waited for the pause to end arrives now, at a node that is down.
  n.gate.paused_until = 0;
  at(now_, [this, i] { drain(nodes_[i].gate); });
  for (auto& l : links_) {
    if (l.node != i || !l.server_open) continue;
    l.server_open = false;
    if (!l.client_open) continue;
    // The reset follows whatever the node had already sent on the connection.
    l.last_at_client = std::max(l.last_at_client, now_ + delay(i));
    at_client(l.client, l.last_at_client,
              [this, id = l.id] { fail_link(id, errc::connection_lost); });
  }
  at(now_ + down_for, [this, i, persisted] { restart_node(i, persisted); });
}

void world::restart_node(std::size_t i, bool persisted) {
  auto& n = nodes_[i];
  n.redis->set_time(wall_ms());
  n.redis->restart(persisted);
  n.down = false;
  if (tracing_)
    note("n" + std::to_string(i) + " is back (" + std::to_string(n.redis->dump().size()) +
         " keys)");
}

void world::flush_scripts(std::size_t i) {
  if (nodes_[i].down) return;
  if (tracing_) note("FAULT: n" + std::to_string(i) + " SCRIPT FLUSH");
  nodes_[i].redis->exec({"SCRIPT", "FLUSH"});
}

void world::pause_client(std::size_t c, sim_time duration) {
  if (tracing_) note("FAULT: c" + std::to_string(c) + " pauses for " + format_time(duration));
  pause(clients_[c].gate, now_ + duration, [this, c] { drain(clients_[c].gate); });
}

// --- trace ---

void world::note(std::string text) {
  if (!tracing_) return;
  trace_.push_back(format_time(now_) + "  " + std::move(text));
  if (echo_) std::fprintf(stderr, "%s\n", trace_.back().c_str());
}

std::string world::describe(const detail::request& r, bool eval) const {
  std::string s = r.code->as_commands ? "commands " : eval ? "EVAL " : "EVALSHA ";
  s += script_name(r.code);
  for (const auto& k : r.keys) s.append(" ").append(k);
  s += " |";
  for (auto a : r.args) s.append(" \"").append(a).append("\"");
  s += " timeout " + std::to_string(r.timeout.count()) + "ms";
  return s;
}

}  // namespace dlock::sim
