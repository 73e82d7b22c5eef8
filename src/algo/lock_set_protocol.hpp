// SPDX-License-Identifier: Apache-2.0
// algo/lock_set_protocol.hpp: a lock set's part of an acquisition (wait_loop.hpp).
//   lock_set_protocol  an attempt takes the set's slot groups one acquire_all.lua each, in
//                      order, then raises the fences of the groups that drew less than the
//                      highest; a refusal or an error gives back the groups taken so far
// Not thread-safe: driven by its wait_loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algo/targets.hpp"
#include "algo/wait_loop.hpp"

namespace dlock::detail {

class lock_set_protocol final : public acquire_protocol {
 public:
  // `target` must outlive the protocol and its requests.
  explicit lock_set_protocol(const lock_set_target& target) : target_(target) {}

  pacing pace() const noexcept override;
  void begin(wait_loop& loop, steady::time_point now,
             const std::vector<std::string>& channels) override;
  void on_answer(wait_loop& loop, purpose what, std::size_t node, steady::time_point now,
                 std::error_code ec, const reply& r) override;
  void give_up(wait_loop& loop, const attempt_verdict* ended) override;
  // A set never queues, so no release hands it anything.
  handoff_timing timing_of_handoff(const wait_loop&, std::size_t) const override {
    return handoff_timing::wake_only;
  }
  std::string handoff_token(const wait_loop&, std::size_t) const override { return {}; }
  void give_back_script(const wait_loop&, acquisition::late_handoff_give_back&) const override {}
  std::string_view holder_key(std::size_t node) const noexcept override;
  std::uint16_t slot(std::size_t node) const noexcept override;

 private:
  // What the attempt in flight adds to the loop's.
  struct attempt_state {
    std::string value{};  // "<id>.<index>", written to every key
    std::size_t next_group = 0;
    std::vector<std::uint64_t> fences{};  // each group's, as its script drew it
    std::uint64_t top_fence = 0;
    std::size_t fences_outstanding = 0;
    std::error_code fence_error{};
  };

  void take_next_group(wait_loop& loop);
  void on_group(wait_loop& loop, steady::time_point now, std::error_code ec, const reply& r);
  void raise_fences(wait_loop& loop, steady::time_point now);
  void on_fence(wait_loop& loop, steady::time_point now, std::error_code ec, const reply& r);
  void grant(wait_loop& loop, steady::time_point now);
  // Ends the attempt with `ec`, giving back (not awaited) the first `taken` groups.
  void fail(wait_loop& loop, steady::time_point now, std::error_code ec, std::size_t taken);
  void release_groups(wait_loop& loop, const std::string& value, std::size_t groups,
                      std::optional<purpose> awaited_for);

  const lock_set_target& target_;
  attempt_state attempt_;
};

}  // namespace dlock::detail
