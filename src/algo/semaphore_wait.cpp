// The pacing of a semaphore acquisition. Unlike a lock round there is one node and one reply per
// attempt, so the whole decision is: did the script grant, can we still use what it granted,
// and is another attempt allowed (attempts left, and the jittered delay ends before the
// deadline)? Whether our entry may still sit on the server when we give up follows from the
// last reply alone: every attempt reuses one owner token, so the scripts find an entry left by
// an earlier attempt (a ghost grant whose reply was lost, or a fair queue place) and account
// for it; a clean "not granted" from an unqueued attempt therefore means nothing is left.
#include "algo/semaphore_wait.hpp"

#include <algorithm>

#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "lock_core.hpp"

namespace dlock::detail {

semaphore_reply parse_semaphore_reply(const reply& r, bool fair, std::error_code& ec) {
  ec.clear();
  const auto& e = r.elements();
  std::size_t expected = fair ? 3 : 2;
  bool shape = r.is_array() && e.size() == expected;
  for (std::size_t i = 0; shape && i < e.size(); ++i) shape = e[i].is_integer();
  if (!shape || (e[0].integer() != 0 && e[0].integer() != 1)) {
    ec = errc::protocol_error;
    return {};
  }
  semaphore_reply out;
  out.granted = e[0].integer() == 1;
  if (fair) {
    out.ticket = e[1].integer();
    out.queued = !out.granted && out.ticket != 0;
  } else if (out.granted) {
    out.ticket = e[1].integer();
  } else {
    out.next_expiry_ms = std::max<std::int64_t>(e[1].integer(), 0);
  }
  return out;
}

semaphore_wait::semaphore_wait(config c) noexcept : c_(c) {}

semaphore_wait::milliseconds semaphore_wait::begin_attempt(steady::time_point now) noexcept {
  ++made_;
  start_ = now;
  // The shortest sleep is retry_delay / 2 (jitter): an attempt after which none could start
  // before the deadline is the last.
  last_ = made_ >= c_.attempts ||
          (c_.deadline != steady::time_point::max() && now + c_.retry_delay / 2 >= c_.deadline);
  if (!c_.fair || last_) return milliseconds::zero();
  return c_.queue_ttl;
}

semaphore_wait::action semaphore_wait::on_reply(steady::time_point now, std::error_code ec,
                                                const semaphore_reply& r, std::uint64_t random) {
  steady::duration delay = jittered_delay(c_.retry_delay, random);
  if (ec) {
    // The script may have run before the answer was lost: the next attempt (same token) finds
    // what it left, and giving up must remove it.
    if (!is_retryable(ec)) return {action::kind::give_up, {}, {}, 0, true, ec};
    return retry_or_give_up(now, delay, ec, true);
  }
  if (r.granted) {
    auto valid_until = start_ + c_.ttl - drift_allowance(c_.ttl, c_.drift_factor);
    if (now < valid_until) return {action::kind::granted, {}, valid_until, r.ticket, false, {}};
    // Granted too late to be of use. The entry is ours: a retry renews it, giving up drops it.
    return retry_or_give_up(now, delay, errc::lease_expired, true);
  }
  if (!c_.fair && r.next_expiry_ms >= 0) {
    // A holder that vanished frees its permit at its expiry: no point sleeping past that.
    delay = std::min(delay, steady::duration(milliseconds(r.next_expiry_ms + 1)));
  }
  return retry_or_give_up(now, delay, errc::not_acquired, r.queued);
}

semaphore_wait::action semaphore_wait::retry_or_give_up(steady::time_point now,
                                                        steady::duration delay,
                                                        std::error_code ec, bool cleanup) const {
  bool attempts_left = made_ < c_.attempts;
  bool time_left = c_.deadline == steady::time_point::max() || now + delay < c_.deadline;
  if (attempts_left && time_left) return {action::kind::retry, delay, {}, 0, false, {}};
  return {action::kind::give_up, {}, {}, 0, cleanup, ec};
}

}  // namespace dlock::detail
