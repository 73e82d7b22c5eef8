// SPDX-License-Identifier: Apache-2.0
// The CLI's duration parser: bare numbers are seconds (as for flock, sleep and timeout),
// decimals, the units ms s m h d and compounds, saturating at 100 years; everything else refused.
#include "duration.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

namespace dlock::cli {
namespace {

using namespace std::chrono_literals;

// A text and the duration it parses to.
struct parses_to {
  std::string text;
  std::chrono::milliseconds value;
};

void expect_parses(std::initializer_list<parses_to> cases) {
  for (const auto& c : cases) EXPECT_EQ(parse_duration(c.text), c.value) << '"' << c.text << '"';
}

TEST(DurationTest, AcceptsEachUnit) {
  expect_parses({{"500ms", 500ms}, {"30s", 30s}, {"2m", 2min}, {"1h", 1h}, {"1d", 24h}});
}

// `flock -w 60` waits a minute; so does `dlock run -w 60` (it gave up after 60 ms).
TEST(DurationTest, BareNumbersAreSecondsAsInFlock) {
  expect_parses({{"60", 60s}, {"1", 1s}, {"007", 7s}});
}

TEST(DurationTest, DecimalsInAnyUnit) {
  expect_parses({{"2.5", 2500ms},
                 {".5", 500ms},
                 {"0.25s", 250ms},
                 {"1.5m", 90s},
                 {"0.5d", 12h},
                 {"2.000", 2s}});
  // Below a millisecond rounds up: a positive wait or TTL never becomes zero.
  expect_parses({{"0.0001", 1ms}, {"1.2ms", 2ms}, {"0.0000000000001s", 1ms}});
  // Up to 18 digits count exactly: 0.0000000111 d is 0.959 ms, so 1 ms (not 2).
  expect_parses({{"0.0000000111d", 1ms}, {"0.0000166661m", 1ms}, {"0.000000000000000000001", 1ms}});
}

TEST(DurationTest, CompoundsNameTheirUnitsLongestFirst) {
  expect_parses({{"1m30s", 90s},
                 {"1h30m", 90min},
                 {"1d2h3m4s5ms", 24h + 2h + 3min + 4s + 5ms},
                 {"1m0.5s", 60500ms},
                 {"2s500ms", 2500ms}});
}

TEST(DurationTest, ZeroParsesSoCallersCanSayWhyItIsWrong) {
  expect_parses({{"0", 0ms}, {"0s", 0ms}, {"0.0", 0ms}});
}

TEST(DurationTest, RefusesMalformedText) {
  for (const char* bad :
       {"", "ms", "s", ".", "-5", "+5", " 5", "5 ", "5 s", "5.", "5.s", "1..5", "1.2.3", "5sec",
        "5S", "5MS", "5us", "5w", "0x10", "5s5", "1m30", "5mss", "30s1m", "1m1m", "1s1s",
        "1ms1s", "abc", "5ms\n", "1e3", "inf", "nan", "5,5"}) {
    EXPECT_FALSE(parse_duration(bad).has_value()) << '"' << bad << '"';
  }
}

// Past 100 years a duration means "for ever": it saturates there, however long the text, so a
// deadline computed from it (now + d, in steady_clock's int64 nanoseconds) cannot overflow.
TEST(DurationTest, SaturatesAtAHundredYears) {
  const auto max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(longest_duration, std::chrono::hours(876'600));  // 100 years of 365.25 days
  EXPECT_EQ(parse_duration("876600h"), longest_duration);
  EXPECT_EQ(parse_duration("36525d"), longest_duration);
  EXPECT_EQ(parse_duration(std::to_string(longest_duration.count()) + "ms"), longest_duration);
  EXPECT_EQ(parse_duration(std::to_string(longest_duration.count() - 1) + "ms"),
            longest_duration - std::chrono::milliseconds(1));
  for (const std::string& huge : std::vector<std::string>{
           "876601h", "2562048h", std::to_string(max), std::to_string(max) + "0",
           "99999999999999999999", std::to_string(max / 1000 + 1) + "s",
           std::to_string(max / 3'600'000 + 1) + "h", std::string(400, '9') + "ms",
           std::string(400, '9') + ".5", "36524d23h59m59s999.5ms", "36525d1ms",
           std::to_string(max) + "d" + std::to_string(max) + "h"}) {
    EXPECT_EQ(parse_duration(huge), longest_duration) << huge;
  }
  // Saturating does not make bad text good.
  EXPECT_FALSE(parse_duration("99999999999999999999x").has_value());
  EXPECT_FALSE(parse_duration("2562048 h").has_value());
  EXPECT_FALSE(parse_duration(std::string(400, '9') + "h1d").has_value());
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
