// SPDX-License-Identifier: Apache-2.0
// dlock::command writes the same bytes as hiredis's formatter, and refuses commands that would
// break reply pairing on a shared connection.
#include "dlock/client.hpp"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "access.hpp"

#include <random>
#include <span>
#include <string_view>
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

// dlock's own requests (scripts, pipelined plain commands) are written into one reused command
// per thread: every length's digits, a longer request then a shorter one, and several commands
// in one write must come out exactly as hiredis formats them, with nothing of an earlier request
// left behind.
TEST(CommandTest, AReusedLibraryCommandWritesExactlyWhatHiredisWrites) {
  std::mt19937 rng(777);
  command reused = detail::access::library_command({});
  for (int round = 0; round < 3000; ++round) {
    std::size_t count = 1 + rng() % 3;
    std::vector<std::vector<std::string>> commands(count);
    std::string expected;
    for (auto& args : commands) {
      args.resize(1 + rng() % 12);
      for (auto& a : args) {
        // Lengths of 0-9, 10-99, 100-999 and 1000-1500 bytes, each often.
        static constexpr std::size_t tops[] = {10, 100, 1000, 1501};
        a.resize(rng() % tops[rng() % 4]);
        for (auto& c : a) c = static_cast<char>(rng());
      }
      expected += hiredis_format(args);
    }
    std::vector<std::vector<std::string_view>> views;
    for (const auto& args : commands) views.emplace_back(args.begin(), args.end());
    std::vector<std::span<const std::string_view>> words(views.begin(), views.end());
    detail::access::reformat(reused, words);
    ASSERT_EQ(reused.bytes(), expected) << "round " << round;
    ASSERT_EQ(reused.size(), count);
    ASSERT_EQ(detail::access::library_command(words).bytes(), expected);
  }
}

}  // namespace
}  // namespace dlock
