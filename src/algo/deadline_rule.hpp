// SPDX-License-Identifier: Apache-2.0
// algo/deadline_rule.hpp: when a bounded wait ends; the one rule of every wait (wait_loop, the
// latch's wait, the election's campaign).
//   - A wait whose deadline was already due when it began is one whole look: it has no
//     deadline and awaits its first answer, as try_lock_for(0) is try_lock().
//   - Any other ends at its deadline, starting no look at or after it; an answer asked for
//     before it is awaited until gives_up_at() (deadline + answer_grace), and no longer,
//     whatever the node does.
// Sans-io: the caller passes the time. Not thread-safe.
#pragma once

#include <chrono>

namespace dlock::detail {

class deadline_rule {
 public:
  using steady = std::chrono::steady_clock;

  // How long past the deadline the answer to a look begun before it is still awaited (a wait
  // loop's last attempt starts acquisition::last_attempt_lead before the deadline).
  static constexpr steady::duration answer_grace = std::chrono::milliseconds(25);

  // `deadline`: max() for none.
  explicit deadline_rule(steady::time_point deadline) noexcept : deadline_(deadline) {}

  // The wait begins at `now`: a deadline already due makes it one whole look (true). Calling
  // it again changes nothing once it is one, and nothing for a wait without a deadline.
  bool begin(steady::time_point now) noexcept {
    if (!bounded() || now < deadline_) return whole_look_;
    deadline_ = steady::time_point::max();
    return whole_look_ = true;
  }

  bool whole_look() const noexcept { return whole_look_; }
  // max(): none (a whole look has none).
  steady::time_point deadline() const noexcept { return deadline_; }
  bool bounded() const noexcept { return deadline_ != steady::time_point::max(); }
  bool passed(steady::time_point now) const noexcept { return bounded() && now >= deadline_; }
  // Whether another look may begin at `now`, after one that did not end the wait.
  bool another_look(steady::time_point now) const noexcept {
    return !whole_look_ && !passed(now);
  }
  // When the answers to a look begun before the deadline stop being awaited; max() without one.
  steady::time_point gives_up_at() const noexcept {
    return deadline_ >= steady::time_point::max() - answer_grace ? steady::time_point::max()
                                                                 : deadline_ + answer_grace;
  }

 private:
  steady::time_point deadline_;
  bool whole_look_ = false;
};

}  // namespace dlock::detail
