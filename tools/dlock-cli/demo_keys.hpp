// SPDX-License-Identifier: Apache-2.0
// tools/dlock-cli/demo_keys.hpp: the keys `dlock demo` and its workers share on the resource
// server. Plain values.
#pragma once

#include <string>

#include "dlock/key_layout.hpp"

namespace dlock::cli {

struct demo_keys {
  explicit demo_keys(const std::string& name)
      : count(name + ":count"),
        high_fence(high_fence_key(count)),  // where dlock::fenced_set keeps it
        fences(name + ":fences"),
        handoff(name + ":handoff"),
        released_at(name + ":released-at"),
        stale(name + ":stale") {}
  std::string count;        // the fenced record: a counter
  std::string high_fence;   // the highest token that read or wrote the record
  std::string fences;       // list: every acquisition's fencing token, in acquisition order
  std::string handoff;      // list: microseconds from a release to the next acquisition
  std::string released_at;  // when the last holder released (CLOCK_MONOTONIC microseconds)
  std::string stale;        // how many late writes the record refused
};

}  // namespace dlock::cli
