// SPDX-License-Identifier: Apache-2.0
// tests/sim/sim_world.hpp: the deterministic simulator's world (issue 14).
//   sim_time         true time, in microseconds since the world began
//   network_profile  how long a message takes on a link: usually short, sometimes very long
//   world            one seeded, single-threaded discrete-event world: an event queue ordered
//                    by (time, sequence number), N simulated Redis nodes (sim_node.hpp), the
//                    clients' clocks and connections, pub/sub delivery, and the faults
//   world_stats      what happened in a run, for the report
// Everything is driven from run(): no threads, no system clock, no std:: distributions; one
// seed gives one schedule, so a seed that fails replays exactly.
//
// The network follows the library's connection (src/net/connection.cpp) where the engine can
// tell the difference:
// - A connection is a FIFO each way: a message arrives at max(the previous arrival on that
//   link, now + a random delay), so requests on different links (to different nodes, from
//   different clients) overtake each other, but never on one link.
// - A script call is run_script: EVALSHA, and on a NOSCRIPT reply an EVAL with the body on the
//   same connection within what is left of the same timeout.
// - acquire_unqueued's plain commands (lock_protocol.hpp) go out in one write and run one by
//   one: usually back to back, as a server runs a write that arrived whole, but by coin with a
//   short wait after a command, in which other connections' commands run (a write that arrived
//   in parts). The connection's later requests wait behind them.
// - When an in-flight request passes its deadline (on the client's clock) the whole connection
//   fails: every request in flight on it completes with errc::timeout and their replies are
//   lost, while the requests already sent still run on the node when they arrive (the late
//   SET). The next request opens a new connection.
// - A dropped connection fails its requests with errc::connection_lost; of those still
//   travelling, a prefix (by coin) still arrives and runs.
// - A crashed node loses the requests travelling to it; its clients learn of it one delay
//   later (connection_lost); a connection opened while it is down is refused
//   (errc::node_unreachable).
// Each client also keeps one subscriber connection per node for its wake channel
// "dlock:wake:<client>", subscribed at the start and again (after a random delay) whenever it
// is lost; messages the node publishes travel to the client on that link.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "algo/acquisition.hpp"
#include "algo/lock_protocol.hpp"
#include "dlock/reply.hpp"
#include "sim_node.hpp"
#include "sim_random.hpp"

namespace dlock::sim {

using sim_time = std::int64_t;  // microseconds of true time
using steady = std::chrono::steady_clock;

constexpr sim_time ms(std::int64_t n) { return n * 1000; }

struct network_profile {
  sim_time min_delay = 50;  // one way, usual case
  sim_time max_delay = 500;
  double spike_chance = 0;  // per message: a delay in [max_delay, spike_max] instead
  sim_time spike_max = 0;
};

// A client's steady clock: offset + t * (1 + rate_ppm / 1e6), in microseconds.
struct client_clock {
  std::int64_t offset_us = 0;
  std::int64_t rate_ppm = 0;
};

struct world_stats {
  std::uint64_t events = 0, calls = 0, evals = 0, timeouts = 0, drops = 0, refused = 0,
                lost_in_flight = 0, late_executions = 0, messages = 0, messages_lost = 0;
};

class world {
 public:
  using reply_handler = std::function<void(std::error_code, const reply&)>;

  world(std::uint64_t seed, std::size_t nodes, network_profile net);
  ~world();
  world(const world&) = delete;
  world& operator=(const world&) = delete;

  // --- time and events ---
  sim_time now() const noexcept { return now_; }
  rng& random() noexcept { return rng_; }
  // From now on messages take this long (a calm network once the faults are over); on the
  // links of node i, when it has a profile of its own (a node far away).
  void set_network(network_profile net) { net_ = net; }
  void set_node_network(std::size_t i, network_profile net) { nodes_[i].net = net; }
  // Runs `fn` at true time `t` (now, if t is in the past); same-time events run in the order
  // they were scheduled.
  void at(sim_time t, std::function<void()> fn);
  // Runs the next event; false when none is left or the next one is after `until`.
  bool step(sim_time until = INT64_MAX);
  std::size_t pending_events() const noexcept { return queue_.size(); }

  // --- nodes ---
  std::size_t nodes() const noexcept { return nodes_.size(); }
  node& redis(std::size_t i) { return *nodes_[i].redis; }
  bool node_down(std::size_t i) const { return nodes_[i].down; }
  std::int64_t wall_ms() const noexcept { return epoch_ms_ + now_ / 1000; }

  // --- clients ---
  std::size_t add_client(client_clock clock);
  std::size_t clients() const noexcept { return clients_.size(); }
  // The client's steady clock now, and the true time at which it reads `t` (never before now).
  steady::time_point clock(std::size_t c) const { return clock_at(c, now_); }
  steady::time_point clock_at(std::size_t c, sim_time t) const;
  sim_time when(std::size_t c, steady::time_point t) const;
  // Runs `fn` on client c at true time `t`, or when the client's pause ends (a paused process
  // handles nothing; what piled up runs in its original order on resuming).
  void at_client(std::size_t c, sim_time t, std::function<void()> fn);
  const std::string& wake_channel(std::size_t c) const { return clients_[c].channel; }

  // Runs the script call `r` on node r.node over the client's command connection (opened if
  // it has none) and hands the outcome to `done` on the client: the reply, or the
  // connection's error (timeout, connection_lost, node_unreachable) with an empty reply.
  // r.keys are views (detail::request): what they name must outlive the run.
  void call(std::size_t c, const detail::request& r, reply_handler done);

  // Subscribes the client's wake channel on node i, unless subscribed or subscribing.
  void subscribe(std::size_t c, std::size_t i);
  bool subscribed(std::size_t c, std::size_t i) const;
  // How long after losing a subscription the client subscribes again: random in [0, max].
  void set_resubscribe_delay(sim_time max) { resubscribe_max_ = max; }

  // Delivered on the client: a message published to its channel on node i, a confirmed
  // subscription, and the loss of one (a message may have been lost with it).
  std::function<void(std::size_t c, std::size_t i, std::string_view payload)> on_message;
  std::function<void(std::size_t c, std::size_t i)> on_subscribed;
  std::function<void(std::size_t c, std::size_t i)> on_subscription_lost;
  // Around every EVALSHA or EVAL on a node (after set_time; an EVALSHA answered NOSCRIPT runs
  // nothing, but is reported too): the checker's hooks. For acquire_unqueued's plain commands,
  // around the first (the SET, the only one that may write the lock key) with its reply, and
  // after the last once more (no before) with the whole answer.
  std::function<void(std::size_t i, const detail::request& r)> before_script;
  std::function<void(std::size_t i, const detail::request& r, const reply& result)> after_script;

  // --- faults ---
  // Open connections (command and subscriber) as (client, node, link id).
  struct link_info {
    std::size_t client, node;
    std::uint64_t id;
    bool subscriber;
  };
  std::vector<link_info> open_links() const;
  void drop_link(std::uint64_t id);
  // Arrivals wait until the pause ends; the node's clock (and expiry) goes on.
  void pause_node(std::size_t i, sim_time duration);
  // Down for `down_for`, then restarts: with `persisted` (AOF, fsync always) it keeps the keys
  // that have not expired meanwhile, without it it comes back empty.
  void crash_node(std::size_t i, sim_time down_for, bool persisted);
  // SCRIPT FLUSH: the next EVALSHA of every script answers NOSCRIPT.
  void flush_scripts(std::size_t i);
  // A stop-the-world pause of the client process (GC, swapping, SIGSTOP).
  void pause_client(std::size_t c, sim_time duration);

  // --- trace ---
  // When on, the world narrates each event into trace(); off, it costs nothing.
  void set_tracing(bool on) { tracing_ = on; }
  // Also print each line to stderr as it happens (for a run that crashes before its report).
  void set_echo(bool on) { echo_ = on; }
  bool tracing() const noexcept { return tracing_; }
  void note(std::string text);  // "<time> <text>", when tracing
  const std::vector<std::string>& trace() const noexcept { return trace_; }
  const world_stats& stats() const noexcept { return stats_; }

 private:
  struct event {
    sim_time time;
    std::uint64_t seq;
    std::function<void()> fn;
  };
  // A process that can pause: events for it wait in the backlog until the pause ends.
  struct pause_gate {
    sim_time paused_until = 0;
    std::deque<std::function<void()>> backlog;
  };
  struct node_state {
    std::unique_ptr<node> redis;
    bool down = false;
    sim_time crashed_at = -1;
    pause_gate gate;
    std::optional<network_profile> net;
  };
  struct link_state {
    std::uint64_t id;
    std::size_t client, node;
    bool subscriber;
    sim_time opened_at;
    bool client_open = true;  // the client still uses it
    bool server_open = true;  // the node still serves it
    sim_time last_at_node = 0, last_at_client = 0;
    std::deque<std::uint64_t> inflight;  // call ids awaiting a reply, in send order
    bool mid_request = false;             // plain commands of a request are still to run
    std::deque<std::uint64_t> held;       // arrivals waiting behind them, in order
  };
  struct call_state {
    std::size_t client;
    std::uint64_t link;
    std::shared_ptr<const detail::request> req;
    bool eval;
    std::int64_t deadline_us;  // on the client's clock
    bool arrived = false, lost = false, done = false;
    reply_handler handler;
    std::vector<reply> replies{};  // plain commands: the answers of those run so far
  };
  enum class sub_state { none, subscribing, subscribed };
  struct subscription {
    sub_state state = sub_state::none;
    std::uint64_t link = 0;
  };
  struct client_state {
    client_clock clock;
    pause_gate gate;
    std::string channel;
    std::vector<std::optional<std::uint64_t>> command_link;  // per node
    std::vector<subscription> subs;                          // per node
  };

  sim_time delay(std::size_t node);  // one way, on a link of that node
  std::int64_t clock_us(std::size_t c, sim_time t) const;
  void at_node(std::size_t i, sim_time t, std::function<void()> fn);
  void admit(pause_gate& g, std::function<void()> fn);
  // Pauses until `until` (or later, if already paused longer); `drain` runs drain(g) then.
  void pause(pause_gate& g, sim_time until, std::function<void()> drain);
  void drain(pause_gate& g);
  std::uint64_t open_link(std::size_t c, std::size_t i, bool subscriber);
  void send(std::size_t c, std::shared_ptr<const detail::request> req, bool eval,
            std::int64_t deadline_us, reply_handler handler);
  void arrive(std::uint64_t call_id);
  void run_plain_command(std::uint64_t call_id);
  std::array<detail::plain_command, 6> plain_steps(const detail::request& r, std::size_t& size) const;
  void send_reply(std::uint64_t call_id, reply result);
  void arrive_held(std::uint64_t link_id);
  void on_reply(std::uint64_t call_id, const reply& r);
  void complete(std::uint64_t call_id, std::error_code ec, const reply& r);
  void fail_link(std::uint64_t link_id, std::error_code ec);
  void arrive_subscribe(std::uint64_t link_id);
  void lose_subscription(std::uint64_t link_id);
  void deliver_messages(std::size_t i);
  void restart_node(std::size_t i, bool persisted);
  void refuse(link_state& l);
  std::string describe(const detail::request& r, bool eval) const;

  rng rng_;
  network_profile net_;
  sim_time now_ = 0;
  std::uint64_t next_seq_ = 0;
  std::vector<event> queue_;  // a binary heap, earliest first
  std::int64_t epoch_ms_;
  std::vector<node_state> nodes_;
  std::vector<client_state> clients_;
  std::deque<link_state> links_;  // by id
  std::deque<call_state> calls_;  // by id
  sim_time resubscribe_max_ = 0;
  bool tracing_ = false, echo_ = false;
  std::vector<std::string> trace_;
  world_stats stats_;
};

// The script's name ("acquire", "release", ...), for traces.
std::string_view script_name(const detail::script* s);
// "12.345ms": true time for traces.
std::string format_time(sim_time t);
// The same for a span of a client's clock.
std::string format_time(steady::duration d);

}  // namespace dlock::sim
