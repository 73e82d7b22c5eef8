// tests/support/checks.hpp: small predicates the integration tests share.
//   eventually          polls a condition until it holds or a time limit passes
//   is_invalid_argument runs a callable and says whether it threw errc::invalid_argument
#pragma once

#include <chrono>
#include <system_error>
#include <thread>

#include "dlock/error.hpp"

namespace dlock::test {

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
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

}  // namespace dlock::test
