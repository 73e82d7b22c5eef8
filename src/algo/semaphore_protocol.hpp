// SPDX-License-Identifier: Apache-2.0
// algo/semaphore_protocol.hpp: the semaphore's part of an acquisition (wait_loop.hpp).
//   semaphore_protocol     one acquire script per attempt (sem_acquire.lua, fair:
//                          sem_fair_acquire.lua) on the one node, under one owner token for
//                          every attempt; the give-up's release; a release's handoff
//   semaphore_reply, parse_semaphore_reply  the acquire scripts' answers, decoded
//   solo_commands, read_solo_answer  the solo grant's plain commands, and how they answer
//   plain_commands_of  the plain commands of any request that is no script
// Not thread-safe: driven by its wait_loop.
#pragma once

#include <cstdint>
#include <string>
#include <system_error>

#include "algo/lock_protocol.hpp"
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

// The solo grant: the uncontended acquire without Lua, as the lock's acquire_unqueued
// (lock_protocol.hpp), where nobody holds or waits. The holder's whole state is the name's own
// key, "<mark> <token> <permits>" (solo_value; name_mark.lua), with the permit's expiry:
//   MULTI; SET name solo NX PX ttl; EXISTS <line>; INCR fence; MGET quarantine fence-floor; EXEC
// sent in one write; the line is the fair variant's owners, the unfair one's waiters and their
// entries. The name's key is free only when nobody holds (the holders' mark lasts as long as
// the latest of them), so the SET is a grant within the limit, and granted only where the
// EXISTS found nobody in line: a fair waiter must not be overtaken, and an unfair one must be
// woken by the release, which a solo holder's is not (sem_release.lua). One transaction, unlike
// the lock's: with more than one permit another client may be granted beside us between the
// SET and the INCR, and would draw the lower token though granted after us. The fence and the
// node's state read as the lock's (read_unqueued_answer). Anything but a clean grant goes on at
// once with the acquire script, which first makes a solo holder one of the holders
// (adopt_solo), or, fair, drops the value if the line was not empty. The first script that
// reads the holders adopts it the same way; its release is a compare-and-delete
// (sem_release.lua), its refresh renews the key (sem_refresh.lua).
inline constexpr script sem_solo_commands{{}, {}, true};
std::string solo_value(std::string_view mark, std::string_view token, std::string_view permits);
// keys: {name, fence, the line's one or two keys}; args: {solo value, ttl}.
std::array<plain_command, 6> solo_commands(std::span<const std::string_view> keys,
                                           std::span<const std::string_view> args,
                                           std::size_t& size) noexcept;
unqueued_answer read_solo_answer(const reply& r) noexcept;

// The plain commands of a request whose code is no script (script::as_commands: the lock's
// acquire_unqueued_commands, the solo grants), in order; `size` of them.
std::array<plain_command, 6> plain_commands_of(const script& s,
                                               std::span<const std::string_view> keys,
                                               std::span<const std::string_view> args,
                                               std::size_t& size) noexcept;

class semaphore_protocol final : public acquire_protocol {
 public:
  // `target` must outlive the protocol and its requests. `solo_first`: attempt 0 tries the
  // solo grant first, on a single node (not a cluster) with a name to mark.
  semaphore_protocol(const semaphore_target& target, std::ptrdiff_t permits,
                     bool solo_first = false)
      : target_(target),
        permits_(std::to_string(permits)),
        solo_first_(solo_first && !target.cluster && !target.keys.name.empty() &&
                    permits <= target.limit) {}

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
  bool refused_plain_commands() const noexcept override { return solo_refused_; }

 private:
  void emit_script(wait_loop& loop, const std::vector<std::string>& channels);

  const semaphore_target& target_;
  std::string permits_;
  bool solo_first_;
  bool solo_refused_ = false;
  bool solo_in_flight_ = false;
  std::vector<std::string> channels_;  // attempt 0's, for the script that follows the solo try
  // An attempt's answer was lost or came too late, so it may have left a permit or a place
  // behind.
  bool attempt_lost_ = false;
};

}  // namespace dlock::detail
