// SPDX-License-Identifier: Apache-2.0
// algo/wait_loop.hpp: the engine behind `acquisition`: one wait loop driving one protocol.
//   wait_loop         attempt -> judge -> sleep (cut short by a wake-up) -> attempt again, take
//                     a handoff, or give up. It owns what every primitive shares: the deadline
//                     (deadline_rule.hpp) and the attempts, pacing, stop, queueing and wake-ups,
//                     handoff deferral, give-up, the outcome, and the bookkeeping of the
//                     requests in flight
//   acquire_protocol  what one primitive adds: its attempt's requests, how it judges their
//                     answers, what a give-up sends, when a handoff may be taken
//   purpose, attempt_verdict, pacing  what the two pass each other
// The protocols: lock_protocol.hpp (the mutex on 1 and N nodes), semaphore_protocol.hpp.
// Sans-io, as acquisition.hpp says. Not thread-safe: one thread drives a loop at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "algo/acquisition.hpp"
#include "algo/deadline_rule.hpp"
#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "algo/small_vector.hpp"

namespace dlock::detail {

class wait_loop;

// What a request is for, which says how the loop treats its answer.
//   attempt        an attempt's own request (a lock's vote, a semaphore's acquire script)
//   step           a follow-up the attempt needs before it is decided (a lock's fence raise)
//   cleanup        what a failed attempt removes before the next one begins
//   final_cleanup  what a give-up sends (leave the queues, give back what it won); the outcome
//                  waits for its answers
// A cleanup of either kind is awaited only where wait_loop::awaited_cleanup says so.
enum class purpose { attempt, step, cleanup, final_cleanup };

// How an attempt ended, as its protocol judged it.
struct attempt_verdict {
  std::error_code ec{};  // empty: granted
  std::string token{};   // granted: the owner value the lease holds
  std::uint64_t fence = 0;
  steady::time_point valid_until{};
  // The attempt may have left something of ours (a key, a permit, a queue place) that a
  // give-up must remove.
  bool leftovers = false;
};

// The target's values the loop paces and judges by.
struct pacing {
  std::size_t nodes = 1;
  milliseconds retry_delay{}, node_timeout{}, ttl{};
  double drift_factor = 0;
  // A "taken" vote whose holder has at least this much life left (ms) shortens the sleep to
  // its expiry (a lock's 0 means "free, but a fair queue's head goes first").
  long long holder_ttl_floor = 0;
  bool accepts_handoff = false;
  // How long a queued place that a release may still hand over lives.
  milliseconds place_ttl{};
  const std::vector<std::string>* node_names = nullptr;  // label the votes
};

// A lock_target's or semaphore_target's pacing, with what differs between the two.
template <class Target>
pacing pacing_of(const Target& t, std::size_t nodes, long long holder_ttl_floor,
                 milliseconds place_ttl) noexcept {
  return {nodes, t.retry_delay, t.node_timeout, t.ttl, t.drift_factor,
          holder_ttl_floor, t.accepts_handoff(), place_ttl, &t.node_names};
}

// One primitive's part of an acquisition. The loop calls it; it answers by calling the loop
// back (emit, attempt_over, note_foreign_holder...).
class acquire_protocol {
 public:
  // When a handoff naming attempt r may be taken (wait_loop::on_handoff).
  enum class handoff_timing {
    take,       // now
    defer,      // once the attempt in flight proves it ran before the release
    wake_only,  // never: the next attempt settles what the key holds
  };

  virtual ~acquire_protocol() = default;
  virtual pacing pace() const noexcept = 0;
  // Sends the requests of the attempt the loop has just opened (attempt_index(), votes()).
  virtual void begin(wait_loop& loop, steady::time_point now,
                     const std::vector<std::string>& channels) = 0;
  // An answer to a request of the attempt in flight; once the attempt is decided, the
  // protocol ends it with wait_loop::attempt_over.
  virtual void on_answer(wait_loop& loop, purpose what, std::size_t node, steady::time_point now,
                         std::error_code ec, const reply& r) = 0;
  // An attempt request's answer that came after its attempt granted the wait.
  virtual void on_late_answer(wait_loop&, std::size_t /*node*/, std::error_code, const reply&) {}
  // The wait was granted, by an attempt or a handoff.
  virtual void on_granted(wait_loop&) {}
  // The wait ends without a grant: send what leaves nothing of ours behind. `ended`: the
  // attempt that just ended, or null when the wait ends between attempts.
  virtual void give_up(wait_loop& loop, const attempt_verdict* ended) = 0;
  virtual handoff_timing timing_of_handoff(const wait_loop& loop, std::size_t r) const = 0;
  // The owner value a handoff for attempt r gives us.
  virtual std::string handoff_token(const wait_loop& loop, std::size_t r) const = 0;
  // A handoff for attempt r that cannot be taken (born expired, or no longer wanted).
  virtual void refuse_handoff(wait_loop&, std::size_t /*r*/) {}
  // The script, keys and arguments of give_back_plan().
  virtual void give_back_script(const wait_loop& loop,
                                acquisition::late_handoff_give_back& plan) const = 0;
  // The key to watch on `node` when its holder is not a dlock client.
  virtual std::string_view holder_key(std::size_t node) const noexcept = 0;
  virtual std::uint16_t slot(std::size_t node) const noexcept = 0;
  // acquisition::refused_plain_commands.
  virtual bool refused_plain_commands() const noexcept { return false; }
};

class wait_loop {
 public:
  wait_loop(std::unique_ptr<acquire_protocol> protocol, std::string id, steady::time_point deadline,
            int attempts, std::uint64_t seed);

  // What acquisition forwards: its comments say what each does.
  bool queues_next(steady::time_point now) const noexcept;
  void begin_attempt(steady::time_point now, const std::vector<std::string>& channels);
  void on_reply(std::uint64_t request_id, steady::time_point now, std::error_code ec,
                const reply& r);
  bool on_handoff(steady::time_point now, std::string_view grant);
  acquisition::late_handoff_give_back give_back_plan() const;
  void on_start(steady::time_point now);
  void on_deadline(steady::time_point now);
  void stop(steady::time_point now, std::error_code why);
  steady::time_point deadline() const noexcept { return rule_.deadline(); }
  steady::time_point gives_up_at() const noexcept { return rule_.gives_up_at(); }
  bool wants_fallback(std::uint64_t request_id) const noexcept;
  std::vector<request> take_requests() { return std::exchange(out_, {}); }
  std::optional<steady::duration> take_sleep() { return std::exchange(sleep_, std::nullopt); }
  std::optional<acquisition::outcome> take_outcome() {
    return std::exchange(result_, std::nullopt);
  }
  std::vector<acquisition::foreign_holder> take_foreign_holders();
  bool done() const noexcept { return finished_; }
  bool queued() const noexcept { return queued_; }
  int attempts_made() const noexcept { return made_; }
  bool refused_plain_commands() const noexcept { return protocol_->refused_plain_commands(); }
  std::error_code last_error() const noexcept { return last_error_; }
  const node_results& last_votes() const noexcept { return last_votes_; }
  const std::string& id() const noexcept { return id_; }
  std::uint16_t slot(std::size_t node) const noexcept { return protocol_->slot(node); }
  milliseconds node_timeout() const noexcept { return protocol_->pace().node_timeout; }

  // What the protocols call.
  // The attempt in flight: its index (0 for the first) and its votes.
  bool in_flight() const noexcept { return round_.has_value(); }
  std::size_t attempt_index() const noexcept { return round_->index; }
  std::size_t attempts_begun() const noexcept { return round_started_.size(); }
  quorum_round& votes() noexcept { return round_->votes; }
  // No attempt can follow the one in flight: it must not queue.
  bool last_attempt() const noexcept { return last_; }
  void mark_queued() noexcept { queued_ = true; }
  bool stopping() const noexcept { return stopped_.has_value(); }
  // Queues a request; `awaited_for` empty: fire and forget (its answer is ignored).
  std::uint64_t emit(std::size_t node, const script& code, script_keys keys,
                     script_args args, std::optional<purpose> awaited_for);
  // Whether a cleanup sent now to `node` is awaited (`what`) or only sent (nullopt).
  std::optional<purpose> awaited_cleanup(std::size_t node, purpose what) const noexcept;
  // The attempt in flight's own requests still unanswered no longer count (wants_fallback).
  void abandon_attempt_requests();
  // The attempt in flight found a holder on `node` that is not a dlock client.
  void note_foreign_holder(std::size_t node) { foreign_holders_.push_back(node); }
  // Ends the attempt in flight: granted, or sleep, take a deferred handoff, or give up.
  void attempt_over(steady::time_point now, attempt_verdict v);

 private:
  struct pending {
    std::uint64_t id;
    purpose what;
    std::size_t node;
    // Attempts made when it was sent: a late answer never counts for a later attempt.
    std::size_t attempt;
  };
  struct attempt_state {
    std::size_t index = 0;
    quorum_round votes;
  };

  bool lost_touch_with(std::size_t node) const noexcept;
  std::optional<pending> claim(std::uint64_t rid);
  steady::duration retry_delay_after(const node_results& votes);
  std::error_code ends_for_good(steady::time_point now, std::error_code ec,
                                const node_results& votes);
  std::optional<steady::duration> next_sleep(steady::time_point now, steady::duration delay,
                                             std::error_code ec) const;
  bool accept_handoff(steady::time_point now, std::uint64_t fence, std::size_t r);
  void give_up(std::error_code ec, node_results votes, const attempt_verdict* ended);
  void finish_granted(std::string token, std::uint64_t fence, steady::time_point valid_until,
                      node_results votes);
  void finish_handed_over(std::string token, std::uint64_t fence, steady::time_point valid_until);
  void finish_failed(std::error_code ec, node_results votes);

  std::unique_ptr<acquire_protocol> protocol_;
  std::string id_;  // lock: the acquisition id; semaphore: the owner token
  deadline_rule rule_;
  int attempts_ = 1;
  int made_ = 0;
  bool last_ = false;  // the attempt begun last cannot be followed by another
  std::uint64_t random_state_;
  std::uint64_t next_request_ = 1;
  small_vector<pending, 4> awaited_;
  std::vector<request> out_;
  std::optional<steady::duration> sleep_;
  std::optional<acquisition::outcome> result_;
  bool finished_ = false;
  bool queued_ = false;
  small_vector<steady::time_point, 4> round_started_;  // when each attempt began, by index
  std::optional<attempt_state> round_;             // the attempt in flight
  // A handoff (fence, attempt) that waits for the attempt in flight's answer (handoff_timing).
  std::optional<std::pair<std::uint64_t, std::size_t>> deferred_handoff_;
  // What a give-up reports once its final cleanup answered (final_cleanup_left_).
  std::optional<acquisition::outcome> after_cleanup_;
  std::size_t final_cleanup_left_ = 0;
  std::optional<std::error_code> stopped_;  // stop(): why
  std::size_t granted_attempt_ = 0;         // the attempt that granted the wait, plus one
  std::error_code last_error_;
  node_results last_votes_;
  endless_wait_rule endless_;  // fed every failed attempt, in order
  // The nodes where the attempt begun last found a holder that is not a dlock client.
  std::vector<std::size_t> foreign_holders_;
  // The time of the call being handled (each entry point sets it): emit() judges by it.
  steady::time_point now_{};
  // Attempt requests given up on while unanswered (wants_fallback).
  std::vector<std::uint64_t> abandoned_;
};

}  // namespace dlock::detail
