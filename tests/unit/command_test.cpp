// SPDX-License-Identifier: Apache-2.0
// dlock::command writes the same bytes as hiredis's formatter, and refuses commands that would
// break reply pairing on a shared connection.
#include "dlock/client.hpp"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <random>
#include <vector>

namespace dlock {
namespace {

std::string hiredis_format(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* out = nullptr;
  long long n = redisFormatCommandArgv(&out, static_cast<int>(args.size()), argv.data(), lens.data());
  std::string s(out, static_cast<std::size_t>(n));
  redisFreeCommand(out);
  return s;
}

TEST(CommandTest, BytesEqualHiredisFormatterForRandomArguments) {
  std::mt19937 rng(12345);
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::string> args(1 + rng() % 12);
    for (auto& a : args) {
      a.resize(rng() % (round % 50 == 0 ? 70000 : 40));  // now and then past 64 KiB
      for (auto& c : a) c = static_cast<char>(rng());  // binary, NULs and CRLFs included
    }
    args[0] = "GET";  // a verb the pairing check accepts
    ASSERT_EQ(command(std::span<const std::string>(args)).bytes(), hiredis_format(args));
  }
}

TEST(CommandTest, PipelinedCommandsConcatenate) {
  command c{"SET", "k", "v"};
  c.then({"GET", "k"});
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.bytes(), hiredis_format({"SET", "k", "v"}) + hiredis_format({"GET", "k"}));
}

TEST(CommandTest, RefusesEmptyAndUnpairedCommands) {
  auto refused = [](std::initializer_list<std::string_view> args) {
    try {
      command c(args);
      return false;
    } catch (const std::system_error& e) {
      return e.code() == errc::invalid_argument;
    }
  };
  EXPECT_TRUE(refused({}));
  EXPECT_TRUE(refused({"SUBSCRIBE", "ch"}));
  EXPECT_TRUE(refused({"psubscribe", "ch*"}));
  EXPECT_TRUE(refused({"Monitor"}));
  EXPECT_TRUE(refused({"CLIENT", "REPLY", "OFF"}));
  EXPECT_FALSE(refused({"CLIENT", "SETNAME", "x"}));
  EXPECT_FALSE(refused({"PUBLISH", "ch", "m"}));
}

}  // namespace
}  // namespace dlock
