// SPDX-License-Identifier: Apache-2.0
// acquire_run.hpp: carries out one acquisition engine's decisions on real nodes. Private.
//   acquire_run  sends the engine's requests (run_request), sleeps between attempts with a
//                wake_waiter (inboxes, handoffs), and turns the outcome into a lease; for the
//                lock on 1 and N nodes and for the semaphore alike
//   lease_from   the one place a granted outcome becomes a dlock::lease
//   copies_share_a_master  whether a lock's copies on a cluster still sit on distinct masters
// Everything after start() runs on the I/O thread; run_blocking() may make the first attempt
// on the caller's thread when the node's connection is idle (run_request_direct).
#pragma once

#include <asio/steady_timer.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "algo/acquisition.hpp"
#include "lease_state.hpp"
#include "net/inbox.hpp"

namespace dlock::detail {

lease lease_from(std::shared_ptr<lease_owner> owner, acquisition::outcome& granted);

// lock_options::copies: the copies of a lock (`slots`: copy i's slot), all on the one cluster
// client that `nodes` repeats, must sit on distinct masters, or one master's failover could
// take two of a quorum's votes with it; all of them, not only those that answered first (a
// copy that did not grant may still be taken by the next client). `holding`: the copies that
// granted or extended, whose master must be known. Checked at every grant and every extend, by
// the map as the client knows it (MOVED and the periodic reads keep it current): "" when they
// do (or `nodes` are no copies), else why not.
std::string copies_share_a_master(const std::vector<client>& nodes,
                                  const std::vector<std::uint16_t>& slots,
                                  const std::vector<std::size_t>& holding);

class acquire_run : public std::enable_shared_from_this<acquire_run> {
 public:
  using handler_type = unique_function<void(std::error_code, lease)>;

  // `nodes` belong to `owner`, which this run keeps alive. `out`, if set, gets the last round's
  // votes before the handler runs.
  acquire_run(std::shared_ptr<lease_owner> owner, std::vector<client>& nodes, acquisition engine,
              bool wake_on_release, node_results* out, wait_control control = {});

  // Runs the acquisition on the I/O thread; `handler` gets the lease or the error there.
  // `first`: requests the engine emitted before (run_blocking), to send before anything else.
  void start(handler_type handler, std::vector<request> first = {});
  // The same, blocking the calling thread (not the I/O thread).
  lease run_blocking(std::error_code& ec);
  // Told at the end, before the handler: whether the wait was granted by its first attempt (not
  // a handoff), and whether a node refused the engine's plain commands (acquisition.hpp). Set
  // before start().
  std::function<void(bool granted_at_once, bool refused_plain_commands)> on_end;

 private:
  void attempt();
  void send(request r);
  // An answer for the engine: at once, or after the batch being sent (inline_answers_).
  void take_answer(std::uint64_t id, std::error_code ec, reply answer);
  void pump();
  // Ends the wait at the engine's deadline however long the nodes take to answer.
  void arm_deadline();
  bool on_handoff(std::string_view grant);
  // After a give-up that queued: a handoff that still comes is given back (inbox.hpp).
  void remember_gave_up();
  void stop(std::error_code why);
  void confirm_replicated(acquisition::outcome granted);
  std::string copies_collapsed(const node_results& votes) const;
  void give_back(std::shared_ptr<acquisition::outcome> granted, std::error_code ec,
                 std::string why);
  void deliver(acquisition::outcome result);
  // Tells the observer (observe.hpp) how the acquisition ended.
  void report(const acquisition::outcome& result) const;

  std::shared_ptr<lease_owner> owner_;
  std::vector<client>& nodes_;
  acquisition engine_;
  bool wake_on_release_;
  std::shared_ptr<wake_waiter> waiter_;  // made on the I/O thread, by start()
  std::optional<asio::steady_timer> deadline_timer_;  // armed by start() for a bounded wait
  handler_type handler_;
  node_results* out_;
  wait_control control_;
  // Answers that came back inside a send (a node in connect backoff fails at once): fed to the
  // engine after the whole batch went out, so that requests to one node keep their order.
  struct answer {
    std::uint64_t id;
    std::error_code ec;
    reply r;
  };
  std::vector<answer> inline_answers_;
  bool pumping_ = false;
  std::optional<std::stop_callback<unique_function<void()>>> on_stop_;
  steady::time_point began_ = steady::now();
};

// A core's choice of its plain commands first (the lock's acquire_unqueued, the semaphore's
// solo grant): while its last acquisition was granted by its first attempt the name is likely
// free and they save Redis most of a script; a wait or a handoff shows contention, where they
// would only add a round trip; never again once a node refused them for good.
class plain_first_policy {
 public:
  explicit plain_first_policy(bool at_first) : next_(at_first) {}
  bool next() const noexcept {
    return next_.load(std::memory_order_relaxed) && !refused_.load(std::memory_order_relaxed);
  }
  // Learns from `run`'s end; the run must keep this policy's owner alive until it ends.
  void follow(acquire_run& run) {
    run.on_end = [this](bool granted_at_once, bool refused_plain_commands) {
      next_.store(granted_at_once, std::memory_order_relaxed);
      if (refused_plain_commands) refused_.store(true, std::memory_order_relaxed);
    };
  }

 private:
  std::atomic<bool> next_;
  std::atomic<bool> refused_{false};
};

}  // namespace dlock::detail
