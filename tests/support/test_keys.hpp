// SPDX-License-Identifier: Apache-2.0
// tests/support/test_keys.hpp: a key prefix of its own for each test, so tests never share keys.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace dlock::test {

inline std::string test_key(const std::string& suffix = "lock") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string("dlock-test:") + info->test_suite_name() + "." + info->name() + ":" + suffix;
}

}  // namespace dlock::test
