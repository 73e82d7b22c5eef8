// SPDX-License-Identifier: Apache-2.0
// algo/lock_protocol.hpp: the mutex's part of an acquisition (wait_loop.hpp), on 1 and N nodes.
//   lock_protocol  a round of acquire.lua on every node, judged as a quorum (quorum_round),
//                  with the fence raised where the granting nodes disagree; a failed round's
//                  cleanup; the queues left on a grant or a give-up; a release's handoff
// Not thread-safe: driven by its wait_loop.
#pragma once

#include <cstdint>
#include <string>

#include "algo/targets.hpp"
#include "algo/wait_loop.hpp"

namespace dlock::detail {

class lock_protocol final : public acquire_protocol {
 public:
  // `target` must outlive the protocol and its requests.
  explicit lock_protocol(const lock_target& target) : target_(target) {}

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
  };

  void on_vote(wait_loop& loop, std::size_t node, steady::time_point now, std::error_code ec,
               const reply& r);
  void on_fence(wait_loop& loop, steady::time_point now, std::error_code ec, const reply& r);
  void conclude_round(wait_loop& loop, steady::time_point now, std::error_code ec);
  void on_cleanup(wait_loop& loop, steady::time_point now);
  void round_done(wait_loop& loop, steady::time_point now, std::error_code ec);
  void emit_release(wait_loop& loop, const std::string& value, std::optional<purpose> awaited_for);
  void leave_queues(wait_loop& loop, bool granted);

  const lock_target& target_;
  round_state round_;  // the round begun last (after a grant: the granting round)
};

}  // namespace dlock::detail
