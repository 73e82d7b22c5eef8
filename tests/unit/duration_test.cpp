// The CLI's duration parser: 500ms, 30s, 2m, 1h and plain milliseconds, saturating at 100 years;
// everything else refused.
#include "duration.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

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

// Past 100 years a duration means "for ever": it saturates there, however long the text, so a
// deadline computed from it (now + d, in steady_clock's int64 nanoseconds) cannot overflow.
TEST(DurationTest, SaturatesAtAHundredYears) {
  const auto max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(longest_duration, std::chrono::hours(876'600));  // 100 years of 365.25 days
  EXPECT_EQ(parse_duration("876600h"), longest_duration);
  EXPECT_EQ(parse_duration(std::to_string(longest_duration.count())), longest_duration);
  EXPECT_EQ(parse_duration(std::to_string(longest_duration.count() - 1)),
            longest_duration - std::chrono::milliseconds(1));
  for (const std::string& huge : std::vector<std::string>{
           "876601h", "2562048h", std::to_string(max), std::to_string(max) + "0",
        "99999999999999999999", std::to_string(max / 1000 + 1) + "s",
        std::to_string(max / 3'600'000 + 1) + "h", std::string(400, '9') + "ms"}) {
    EXPECT_EQ(parse_duration(huge), longest_duration) << huge;
  }
  // Saturating does not make bad text good.
  EXPECT_FALSE(parse_duration("99999999999999999999x").has_value());
  EXPECT_FALSE(parse_duration("2562048 h").has_value());
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
