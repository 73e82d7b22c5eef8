// SPDX-License-Identifier: Apache-2.0
// dlock/detail/deadline.hpp: the one conversion of a caller's wait or deadline to the
// steady_clock deadline that dlock's waits run on (the try_*_for/until templates use it).
//   deadline_after(d)  a wait of `d` from now, of any duration type
//   deadline_at(tp)    a deadline of any clock, its clock read once, on entry
// Both saturate instead of overflowing: a wait longer than no_deadline_beyond, or a deadline
// further away, is no deadline (steady_clock::time_point::max(), which every wait reads as
// "until acquired"); a zero or negative wait, or a deadline already past, is now: one attempt.
// Not API. Thread-safe: pure functions of the clocks.
#pragma once

#include <chrono>
#include <ratio>
#include <type_traits>

namespace dlock::detail {

// 100 years: "for ever", as the `dlock` command reads its longest waits. steady_clock counts
// int64 nanoseconds from its epoch (292 years), so what a wait adds to its deadline (grace
// periods of seconds) cannot overflow either.
inline constexpr std::chrono::hours no_deadline_beyond{24 * 36525};

// The comparisons are made in long double nanoseconds, which neither overflow nor wrap whatever
// the representation and period (hours::max(), a double, a system_clock time point of seconds);
// only a wait known to fit goes back to integer nanoseconds.
using wide_nanoseconds = std::chrono::duration<long double, std::nano>;

inline std::chrono::steady_clock::time_point deadline_after(
    wide_nanoseconds wait, std::chrono::steady_clock::time_point now) {
  using steady = std::chrono::steady_clock;
  if (!(wait > wide_nanoseconds::zero())) return now;  // zero, negative (or NaN): one attempt
  const wide_nanoseconds room = steady::time_point::max() - now;
  if (wait >= wide_nanoseconds(no_deadline_beyond) || wait >= room) {
    return steady::time_point::max();
  }
  return now + std::chrono::ceil<steady::duration>(wait);
}

template <class Rep, class Period>
std::chrono::steady_clock::time_point deadline_after(
    const std::chrono::duration<Rep, Period>& d,
    std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
  return deadline_after(wide_nanoseconds(d), now);
}

template <class Clock, class Duration>
std::chrono::steady_clock::time_point deadline_at(
    const std::chrono::time_point<Clock, Duration>& tp) {
  using steady = std::chrono::steady_clock;
  const auto now = Clock::now();
  steady::time_point steady_now;
  if constexpr (std::is_same_v<Clock, steady>) {
    steady_now = now;  // one reading: a steady_clock deadline stays itself
  } else {
    steady_now = steady::now();
  }
  return deadline_after(
      wide_nanoseconds(tp.time_since_epoch()) - wide_nanoseconds(now.time_since_epoch()),
      steady_now);
}

}  // namespace dlock::detail
