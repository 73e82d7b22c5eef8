// SPDX-License-Identifier: Apache-2.0
// support/semaphore_name.hpp: a fixture for tests of a semaphore under test_key() on one
// redis-server, run once unfair and once fair (the test parameter), which look at the name's own
// key (its mark, a solo holder) and the semaphore's keys.
//   semaphore_name_test   fair(), options(), keys(), mark(), name_value(), pttl(), exists(),
//                         warm(): the first grant of a name, through the script
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <system_error>

#include "dlock/client.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/semaphore.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {

class semaphore_name_test : public ::testing::TestWithParam<bool> {  // fair?
 protected:
  bool fair() const { return GetParam(); }
  semaphore_options options(std::chrono::milliseconds ttl = std::chrono::seconds(10)) const {
    return {.ttl = ttl, .fair = fair()};
  }
  semaphore_keys keys() const { return semaphore_keys_for(test_key(), fair()); }
  std::string mark(std::ptrdiff_t limit) const { return semaphore_mark(limit, fair()); }
  // What the name's own key holds, or "" when nothing does.
  std::string name_value() {
    auto r = admin_.exec({"GET", test_key()});
    return r.is_nil() ? std::string() : r.str();
  }
  long long pttl(const std::string& key) { return admin_.exec({"PTTL", key}).integer(); }
  bool exists(const std::string& key) { return admin_.exec({"EXISTS", key}).integer() == 1; }
  // A name's first grant goes through the script, which starts its fencing counter from the
  // clock: a plain INCR that makes the counter draws no token (lock_protocol.hpp). The solo
  // grant works from the next one on, while the counter lives.
  void warm(semaphore& sem) {
    std::error_code ec;
    lease first = sem.try_acquire(ec);
    ASSERT_TRUE(first) << ec.message();
    ASSERT_EQ(first.release(), std::error_code{});
  }

  redis_server server_;
  client admin_{server_.url()};
  client client_{server_.url()};
};

}  // namespace dlock::test
