// The CLI's duration parser: 500ms, 30s, 2m, 1h and plain milliseconds; everything else refused.
#include "duration.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace dlock::cli {
namespace {

using namespace std::chrono_literals;

TEST(DurationTest, AcceptsEachUnit) {
  EXPECT_EQ(parse_duration("500ms"), 500ms);
  EXPECT_EQ(parse_duration("30s"), 30s);
  EXPECT_EQ(parse_duration("2m"), 2min);
  EXPECT_EQ(parse_duration("1h"), 1h);
}

TEST(DurationTest, PlainNumbersAreMilliseconds) {
  EXPECT_EQ(parse_duration("250"), 250ms);
  EXPECT_EQ(parse_duration("1"), 1ms);
  EXPECT_EQ(parse_duration("007"), 7ms);
}

TEST(DurationTest, ZeroParsesSoCallersCanSayWhyItIsWrong) {
  EXPECT_EQ(parse_duration("0"), 0ms);
  EXPECT_EQ(parse_duration("0s"), 0ms);
}

TEST(DurationTest, RefusesMalformedText) {
  for (const char* bad : {"", "ms", "s", "-5", "+5", " 5", "5 ", "5 s", "1.5s", "5sec", "5S",
                          "5MS", "5us", "5d", "0x10", "5s5", "5mss", "abc", "5ms\n"}) {
    EXPECT_FALSE(parse_duration(bad).has_value()) << '"' << bad << '"';
  }
}

TEST(DurationTest, RefusesOverflowInsteadOfWrapping) {
  const auto max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(parse_duration(std::to_string(max)), std::chrono::milliseconds(max));
  EXPECT_FALSE(parse_duration(std::to_string(max) + "0").has_value());
  EXPECT_FALSE(parse_duration("99999999999999999999").has_value());
  EXPECT_FALSE(parse_duration(std::to_string(max / 1000 + 1) + "s").has_value());
  EXPECT_FALSE(parse_duration(std::to_string(max / 3'600'000 + 1) + "h").has_value());
  EXPECT_EQ(parse_duration(std::to_string(max / 3'600'000) + "h"),
            std::chrono::milliseconds(max / 3'600'000 * 3'600'000));
}

TEST(DurationTest, FormatsForPeople) {
  EXPECT_EQ(format_duration(0ms), "0 ms");
  EXPECT_EQ(format_duration(750ms), "750 ms");
  EXPECT_EQ(format_duration(1500ms), "1.5 s");
  EXPECT_EQ(format_duration(125s), "2 min 5 s");
  EXPECT_EQ(format_duration(-1500ms), "-1.5 s");
}

}  // namespace
}  // namespace dlock::cli
