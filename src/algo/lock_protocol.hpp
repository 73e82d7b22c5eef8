// SPDX-License-Identifier: Apache-2.0
// algo/lock_protocol.hpp: the mutex's part of an acquisition (wait_loop.hpp), on 1 and N nodes.
//   lock_protocol  a round of acquire.lua on every node, judged as a quorum (quorum_round),
//                  with the fence raised where the granting nodes disagree; a failed round's
//                  cleanup; the queues left on a grant or a give-up; a release's handoff. On a
//                  single node its first round may try acquire_unqueued first (no Lua)
//   unqueued_commands  that try's plain commands, in order
//   unqueued_answer  how their answers read
// Not thread-safe: driven by its wait_loop.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "algo/targets.hpp"
#include "algo/wait_loop.hpp"

namespace dlock::detail {

// One plain command: its words, viewed.
struct plain_command {
  std::array<std::string_view, 6> words{};
  std::size_t size = 0;
  std::span<const std::string_view> view() const noexcept { return {words.data(), size}; }
};

// acquire_unqueued: the uncontended acquire without Lua, as three plain commands sent in one
// write (script.cpp pipelines them; the simulator runs them one by one, as a server does when
// the write reaches it in parts):
//   SET key owner NX PX ttl; INCR fence; MGET quarantine fence-floor
// Not a transaction: another client's command may run between two of them. What matters is
// that nobody is granted the key while our SET holds it, so the INCR draws above every token
// granted before, and a quarantine or floor that began in between shows in the MGET after it
// (lock_protocol.cpp says the rest). A counter the INCR makes has no expiry and counts from 1:
// below the clock's range, so it is never claimed, and the acquire.lua that follows at once
// starts it again with one (or deletes it). Only a client that dies in that round trip leaves
// it, until the lock is next used (docs/guarantees.md).
std::array<plain_command, 3> unqueued_commands(std::string_view key, std::string_view fence,
                                               std::string_view owner,
                                               std::string_view ttl) noexcept;

// The answers of acquire_unqueued's commands: an array of their three replies, each on its own
// (a command refused is not the others).
struct unqueued_answer {
  bool wrote = false;    // the key was free, and now holds the round's value
  bool granted = false;  // ... and the node may grant: not quarantined, a token drawn in order
  bool unknown = false;  // no answer per command: whether the SET ran is unknown
  bool never = false;    // a command was refused for good: a permission (NOPERM) or one it lacks
  std::int64_t fence = 0;
};
unqueued_answer read_unqueued_answer(const reply& r) noexcept;
// A refusal that will not pass (unlike OOM, LOADING, READONLY during a failover, BUSY ...): a
// permission, or a command the server lacks (renamed); also an EXECABORT for one of those,
// which is what Redis answers where EXEC itself is refused (an ACL with +multi but not +exec).
bool refused_for_good(const reply& r) noexcept;

// Counters start from the server's clock in ms x 1024 (next_fence, node_state.lua), far above
// this; one below it was made by a plain INCR, which counts from 0, and must start again.
inline constexpr std::int64_t fence_clock_range = std::int64_t{1} << 40;

class lock_protocol final : public acquire_protocol {
 public:
  // `target` must outlive the protocol and its requests. `unqueued_first`: on a single node,
  // neither fair nor a cluster, round 0 tries acquire_unqueued before acquire.lua (its plain
  // commands cost Redis a fraction of the script; lock_core asks for it while the lock was free
  // at its last acquisitions).
  lock_protocol(const lock_target& target, bool unqueued_first)
      : target_(target),
        unqueued_first_(unqueued_first && target.nodes == 1 && !target.fair && !target.cluster) {}

  pacing pace() const noexcept override;
  void begin(wait_loop& loop, steady::time_point now,
             const std::vector<std::string>& channels) override;
  void on_answer(wait_loop& loop, purpose what, std::size_t node, steady::time_point now,
                 std::error_code ec, const reply& r) override;
  void on_late_answer(wait_loop& loop, std::size_t node, std::error_code ec,
                      const reply& r) override;
  void on_granted(wait_loop& loop) override { leave_queues(loop, true); }
  void give_up(wait_loop& loop, const attempt_verdict* ended) override;
  handoff_timing timing_of_handoff(const wait_loop& loop, std::size_t r) const override;
  std::string handoff_token(const wait_loop& loop, std::size_t r) const override;
  void refuse_handoff(wait_loop& loop, std::size_t r) override;
  void give_back_script(const wait_loop& loop,
                        acquisition::late_handoff_give_back& plan) const override;
  std::string_view holder_key(std::size_t node) const noexcept override;
  bool refused_plain_commands() const noexcept override { return unqueued_refused_; }
  std::uint16_t slot(std::size_t node) const noexcept override;

 private:
  // What the round in flight adds to the loop's attempt (its index and votes).
  struct round_state {
    std::string value{};  // "<id>.<index>"
    bool decided = false;
    bool concluded = false;  // its verdict reached the loop (or it was cut short)
    std::int64_t fence = 0;
    std::size_t fence_confirmed = 0, fence_outstanding = 0;
    std::size_t cleanup_outstanding = 0;
    std::error_code failure{};  // while cleaning up: why it failed
    bool unqueued = false;        // acquire_unqueued is in flight (node 0)
    bool wrote_unqueued = false;  // ... and set the key: node 0 holds this round's value
    std::string entry{};          // node 0's waiter entry, for the acquire.lua that follows
  };

  // acquire.lua's waiter entry on `node` ("" not to queue).
  std::string waiter_entry(const wait_loop& loop, std::size_t node,
                           const std::vector<std::string>& channels) const;
  void emit_acquire(wait_loop& loop, std::size_t node, std::string entry);
  void on_vote(wait_loop& loop, std::size_t node, steady::time_point now, std::error_code ec,
               const reply& r);
  void on_fence(wait_loop& loop, steady::time_point now, std::error_code ec, const reply& r);
  void conclude_round(wait_loop& loop, steady::time_point now, std::error_code ec);
  void on_cleanup(wait_loop& loop, steady::time_point now);
  void round_done(wait_loop& loop, steady::time_point now, std::error_code ec);
  void emit_release(wait_loop& loop, const std::string& value, std::optional<purpose> awaited_for);
  void leave_queues(wait_loop& loop, bool granted);

  const lock_target& target_;
  bool unqueued_first_;
  bool unqueued_refused_ = false;
  round_state round_;  // the round begun last (after a grant: the granting round)
};

}  // namespace dlock::detail
