// SPDX-License-Identifier: Apache-2.0
#include "algo/transaction_backoff.hpp"

#include <algorithm>

#include "algo/retry.hpp"

namespace dlock::detail {

std::chrono::steady_clock::duration transaction_backoff(std::chrono::milliseconds base,
                                                        std::chrono::milliseconds cap,
                                                        int aborted, std::uint64_t random) {
  if (aborted < 1 || base.count() <= 0 || cap.count() <= 0) return {};
  auto d = base;
  // Double without overflow: stop as soon as the cap is reached.
  for (int i = 1; i < aborted && d < cap; ++i) d = d > cap / 2 ? cap : d * 2;
  return jittered_delay(std::min(d, cap), random);
}

}  // namespace dlock::detail
