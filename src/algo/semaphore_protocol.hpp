// SPDX-License-Identifier: Apache-2.0
// algo/semaphore_protocol.hpp: the semaphore's part of an acquisition (wait_loop.hpp).
//   semaphore_protocol     one acquire script per attempt (sem_acquire.lua, fair:
//                          sem_fair_acquire.lua) on the one node, under one owner token for
//                          every attempt; the give-up's release; a release's handoff
//   semaphore_reply, parse_semaphore_reply  the acquire scripts' answers, decoded
// Not thread-safe: driven by its wait_loop.
#pragma once

#include <cstdint>
#include <string>
#include <system_error>

#include "algo/targets.hpp"
#include "algo/wait_loop.hpp"
#include "dlock/reply.hpp"

namespace dlock::detail {

// One semaphore acquire script's answer, decoded.
struct semaphore_reply {
  bool granted = false;
  std::int64_t ticket = 0;           // granted: the fencing token; fair, queued: the ticket
  bool queued = false;               // fair: not granted, but our place in the queue is kept
  std::int64_t next_expiry_ms = -1;  // unfair, not granted: ms until the earliest holder expires
  bool name_held = false;  // fair, not granted: another kind of lock holds the name (rw_name.lua)
};
// Decodes sem_acquire.lua / sem_fair_acquire.lua replies: protocol_error (and an empty result)
// for any shape the scripts do not produce.
semaphore_reply parse_semaphore_reply(const reply& r, bool fair, std::error_code& ec);

class semaphore_protocol final : public acquire_protocol {
 public:
  // `target` must outlive the protocol and its requests.
  semaphore_protocol(const semaphore_target& target, std::ptrdiff_t permits)
      : target_(target), permits_(std::to_string(permits)) {}

  pacing pace() const noexcept override;
  void begin(wait_loop& loop, steady::time_point now,
             const std::vector<std::string>& channels) override;
  void on_answer(wait_loop& loop, purpose what, std::size_t node, steady::time_point now,
                 std::error_code ec, const reply& r) override;
  void give_up(wait_loop& loop, const attempt_verdict* ended) override;
  handoff_timing timing_of_handoff(const wait_loop& loop, std::size_t r) const override;
  std::string handoff_token(const wait_loop& loop, std::size_t r) const override;
  void give_back_script(const wait_loop& loop,
                        acquisition::late_handoff_give_back& plan) const override;
  std::string_view holder_key(std::size_t node) const noexcept override;
  std::uint16_t slot(std::size_t node) const noexcept override;

 private:
  const semaphore_target& target_;
  std::string permits_;
  // An attempt's answer was lost or came too late, so it may have left a permit or a place
  // behind.
  bool attempt_lost_ = false;
};

}  // namespace dlock::detail
