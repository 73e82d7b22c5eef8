// SPDX-License-Identifier: Apache-2.0
// The acquisition engine's entry points: each builds or forwards to the wait loop
// (wait_loop.cpp), which drives the primitive's protocol (lock_protocol.cpp,
// semaphore_protocol.cpp, lock_set_protocol.cpp). Also how a failed attempt is classified for progress reports.
#include "algo/acquisition.hpp"

#include "algo/lock_protocol.hpp"
#include "algo/lock_set_protocol.hpp"
#include "algo/semaphore_protocol.hpp"
#include "algo/wait_loop.hpp"

namespace dlock {

// A mixed round (some nodes taken, the rest failed, no quorum either way) counts as contention
// when the failures alone could not have denied a quorum: the holder's release would let us in.
failure_kind classify_failure(std::error_code ec, const node_results& votes) {
  if (ec == errc::not_acquired) return failure_kind::contention;
  if (!detail::is_retryable(ec)) return failure_kind::fatal;
  if (ec == errc::quorum_not_reached) {
    std::size_t failed = 0, taken = 0;
    for (const auto& v : votes) {
      if (v.outcome == node_result::vote::failed) ++failed;
      if (v.outcome == node_result::vote::taken) ++taken;
    }
    std::size_t n = votes.size();
    if (taken > 0 && failed <= n - detail::quorum_of(n)) return failure_kind::contention;
  }
  return failure_kind::unavailable;
}

}  // namespace dlock

namespace dlock::detail {

acquisition::acquisition(const lock_target& target, std::string id, steady::time_point deadline,
                         int attempts, std::uint64_t seed, bool unqueued_first)
    : loop_(std::make_unique<wait_loop>(std::make_unique<lock_protocol>(target, unqueued_first),
                                        std::move(id), deadline, attempts, seed)) {}

acquisition::acquisition(const semaphore_target& target, std::string token, std::ptrdiff_t permits,
                         steady::time_point deadline, int attempts, std::uint64_t seed,
                         bool solo_first)
    : loop_(std::make_unique<wait_loop>(
          std::make_unique<semaphore_protocol>(target, permits, solo_first), std::move(token),
          deadline, attempts, seed)) {}

acquisition::acquisition(const lock_set_target& target, std::string id,
                         steady::time_point deadline, int attempts, std::uint64_t seed)
    : loop_(std::make_unique<wait_loop>(std::make_unique<lock_set_protocol>(target), std::move(id),
                                        deadline, attempts, seed)) {}

acquisition::acquisition(acquisition&&) noexcept = default;
acquisition& acquisition::operator=(acquisition&&) noexcept = default;
acquisition::~acquisition() = default;

bool acquisition::queues_next(steady::time_point now) const noexcept {
  return loop_->queues_next(now);
}

void acquisition::begin_attempt(steady::time_point now, const std::vector<std::string>& channels) {
  loop_->begin_attempt(now, channels);
}

void acquisition::on_reply(std::uint64_t request_id, steady::time_point now, std::error_code ec,
                           const reply& r) {
  loop_->on_reply(request_id, now, ec, r);
}

acquisition::late_handoff_give_back acquisition::give_back_plan() const {
  return loop_->give_back_plan();
}

bool acquisition::on_handoff(steady::time_point now, std::string_view grant) {
  return loop_->on_handoff(now, grant);
}

void acquisition::on_start(steady::time_point now) { loop_->on_start(now); }
void acquisition::on_deadline(steady::time_point now) { loop_->on_deadline(now); }
steady::time_point acquisition::gives_up_at() const noexcept { return loop_->gives_up_at(); }

bool acquisition::wants_fallback(std::uint64_t request_id) const noexcept {
  return loop_->wants_fallback(request_id);
}

fallback_gate acquisition::gate() const noexcept {
  return {this, [](const void* engine, std::uint64_t request_id) {
            return static_cast<const acquisition*>(engine)->wants_fallback(request_id);
          }};
}

void acquisition::stop(steady::time_point now, std::error_code why) { loop_->stop(now, why); }

steady::time_point acquisition::deadline() const noexcept { return loop_->deadline(); }
milliseconds acquisition::node_timeout() const noexcept { return loop_->node_timeout(); }
std::error_code acquisition::last_error() const noexcept { return loop_->last_error(); }
const node_results& acquisition::last_votes() const noexcept { return loop_->last_votes(); }
std::vector<request> acquisition::take_requests() { return loop_->take_requests(); }
std::optional<steady::duration> acquisition::take_sleep() { return loop_->take_sleep(); }

std::vector<acquisition::foreign_holder> acquisition::take_foreign_holders() {
  return loop_->take_foreign_holders();
}

std::optional<acquisition::outcome> acquisition::take_outcome() { return loop_->take_outcome(); }
bool acquisition::done() const noexcept { return loop_->done(); }
bool acquisition::queued() const noexcept { return loop_->queued(); }
bool acquisition::refused_plain_commands() const noexcept {
  return loop_->refused_plain_commands();
}

int acquisition::attempts_made() const noexcept { return loop_->attempts_made(); }
const std::string& acquisition::id() const noexcept { return loop_->id(); }
std::uint16_t acquisition::slot(std::size_t node) const noexcept { return loop_->slot(node); }

}  // namespace dlock::detail
