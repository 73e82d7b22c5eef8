// SPDX-License-Identifier: Apache-2.0
// tests/support/seen_events.hpp: what an election's observer saw, for the test thread.
//   seen_events  sink() is the observe() callback (dlock's I/O thread); size() and copy() read
//                what it collected, under its mutex
#pragma once

#include <functional>
#include <mutex>
#include <vector>

#include "dlock/election.hpp"

namespace dlock::test {

struct seen_events {
  std::mutex mu;
  std::vector<election_event> events;
  std::function<void(const election_event&)> sink() {
    return [this](const election_event& e) {
      std::lock_guard lock(mu);
      events.push_back(e);
    };
  }
  std::size_t size() {
    std::lock_guard lock(mu);
    return events.size();
  }
  std::vector<election_event> copy() {
    std::lock_guard lock(mu);
    return events;
  }
};

}  // namespace dlock::test
