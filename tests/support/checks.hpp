// SPDX-License-Identifier: Apache-2.0
// tests/support/checks.hpp: small predicates and time bounds the tests share.
//   slowdown            how many times slower this build runs than a plain one (sanitizers),
//                       times DLOCK_TEST_SLOWDOWN (a loaded or slow machine)
//   scaled              a bound on how long something may take, times slowdown()
//   eventually          polls a condition until it holds or a scaled time limit passes
//   holds_within        the same with the limit as given: for a bound a test already scaled
//                       and capped (it must stay below another mechanism's time)
//   is_invalid_argument runs a callable and says whether it threw errc::invalid_argument
//   raise_to            raises an atomic maximum (the most readers seen at once, a fence)
//   since               the whole milliseconds passed since a steady_clock time point
//   ms                  a duration in milliseconds with a fraction, for a failure message
// A test waits for a condition, never for a guessed time: every bound it gives is an upper
// bound on a wait that normally ends much sooner, so making it generous costs nothing while the
// test passes, and keeps a slow build or a busy machine from failing it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <system_error>
#include <thread>
#include <utility>

#include "dlock/error.hpp"

namespace dlock::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr double build_slowdown = 8;  // ThreadSanitizer: 5-15 x
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr double build_slowdown = 3;  // AddressSanitizer + UBSan: about 2-3 x
#else
inline constexpr double build_slowdown = 1;
#endif

// build_slowdown times DLOCK_TEST_SLOWDOWN (a number >= 1, default 1).
inline double slowdown() {
  static const double factor = [] {
    const char* v = std::getenv("DLOCK_TEST_SLOWDOWN");
    double extra = v ? std::strtod(v, nullptr) : 1.0;
    return build_slowdown * (extra >= 1.0 ? extra : 1.0);
  }();
  return factor;
}

// `bound` times slowdown(): for the limit of a wait, never for a time the test itself needs to
// pass (a TTL, a hold) -- those are what the test is about.
template <class Rep, class Period>
std::chrono::milliseconds scaled(std::chrono::duration<Rep, Period> bound) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(bound);
  return std::chrono::milliseconds(static_cast<long long>(static_cast<double>(ms.count()) * slowdown()));
}

// Polls `pred` every 5 ms until it holds (true) or `limit` has passed (false).
template <class Pred>
bool holds_within(Pred pred, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

// Polls `pred` every 5 ms until it holds (true) or scaled(limit) has passed (false).
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  return holds_within(std::move(pred), scaled(limit));
}

// True when `make` throws std::system_error(errc::invalid_argument): a refusal before any I/O.
template <class Make>
bool is_invalid_argument(Make make) {
  try {
    make();
  } catch (const std::system_error& e) {
    return e.code() == errc::invalid_argument;
  }
  return false;
}

// Raises `most` to `value` if it is lower, whatever other threads do meanwhile.
template <class T>
void raise_to(std::atomic<T>& most, T value) {
  T seen = most.load();
  while (value > seen && !most.compare_exchange_weak(seen, value)) {
  }
}

// The whole milliseconds passed since `t0`.
inline std::chrono::milliseconds since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0);
}

// `d` in milliseconds with a fraction, for a failure message or a report line.
inline double ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace dlock::test
