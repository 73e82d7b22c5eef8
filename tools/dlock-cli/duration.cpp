// SPDX-License-Identifier: Apache-2.0
#include "duration.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>

namespace dlock::cli {
namespace {

constexpr std::int64_t cap = longest_duration.count();

// The units, longest first: a compound ("1h30m") names them in this order, each once.
struct unit {
  std::string_view name;
  std::int64_t ms;
};
constexpr std::array<unit, 5> units{{{"d", 86'400'000},
                                     {"h", 3'600'000},
                                     {"m", 60'000},
                                     {"s", 1000},
                                     {"ms", 1}}};
constexpr std::size_t no_unit = units.size();
constexpr std::size_t seconds = 3;

// The unit that `text` starts with (longest match: "ms" before "m"), or no_unit.
std::size_t unit_at(std::string_view text, std::size_t& length) {
  std::size_t best = no_unit;
  length = 0;
  for (std::size_t i = 0; i < units.size(); ++i) {
    if (text.substr(0, units[i].name.size()) == units[i].name && units[i].name.size() > length) {
      best = i;
      length = units[i].name.size();
    }
  }
  return best;
}

// The most fraction digits kept: finer ones only count as "a little more" (see below).
constexpr std::int64_t finest_fraction = 1'000'000'000'000'000'000;  // 10^18

// `whole`.`fraction` (fraction_scale: 10^digits) of a unit of `ms` milliseconds, rounded up to
// a whole millisecond (so that a positive duration never becomes zero), saturating past cap.
std::int64_t component_ms(std::int64_t whole, std::int64_t fraction, std::int64_t fraction_scale,
                          std::int64_t ms) {
  if (whole > cap / ms) return cap + 1;
  // fraction <= fraction_scale <= 10^18 and ms <= 86'400'000: the product needs 128 bits.
  __extension__ using wide = __int128;  // GCC's and Clang's; __extension__: no -Wpedantic
  const wide part = (static_cast<wide>(fraction) * ms + fraction_scale - 1) / fraction_scale;
  return whole * ms + static_cast<std::int64_t>(part);
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  std::int64_t total = 0;
  std::size_t i = 0, previous_unit = 0, components = 0;
  while (i < text.size()) {
    // A number: digits, optionally a point and more digits ("2.5", ".5"; "5." is refused).
    std::int64_t whole = 0, fraction = 0, fraction_scale = 1;
    std::size_t digits = 0;
    bool dropped = false;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
      whole = std::min<std::int64_t>(whole * 10 + (text[i] - '0'), cap + 1);
    }
    if (i < text.size() && text[i] == '.') {
      std::size_t fraction_digits = 0;
      for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++fraction_digits) {
        if (fraction_scale < finest_fraction) {
          fraction = fraction * 10 + (text[i] - '0');
          fraction_scale *= 10;
        } else if (text[i] != '0') {
          dropped = true;  // finer than 10^-18 of the unit: kept only as "a little more"
        }
      }
      if (fraction_digits == 0) return std::nullopt;
      if (dropped) ++fraction;
      digits += fraction_digits;
    }
    if (digits == 0) return std::nullopt;  // "", "-5", "ms", " 5"
    std::size_t length = 0;
    std::size_t u = unit_at(text.substr(i), length);
    if (u == no_unit) {
      // A bare number is seconds, as for flock, sleep and timeout; only alone ("90", not "1m30").
      if (i != text.size() || components > 0) return std::nullopt;
      u = seconds;
    } else if (components > 0 && u <= previous_unit) {
      return std::nullopt;  // "30s1m", "1m1m": units longest first, each once
    }
    i += length;
    total = std::min(total + component_ms(whole, fraction, fraction_scale, units[u].ms), cap + 1);
    previous_unit = u;
    ++components;
  }
  if (components == 0) return std::nullopt;
  if (total > cap) return longest_duration;
  return std::chrono::milliseconds(total);
}

std::string format_duration(std::chrono::milliseconds d) {
  // Formatted in one snprintf per case (GCC 12 warns wrongly about "-" + std::string).
  long long ms = d.count();
  const char* sign = ms < 0 ? "-" : "";
  if (ms < 0) ms = ms == std::numeric_limits<long long>::min() ? std::numeric_limits<long long>::max() : -ms;
  char buf[64];
  if (ms < 1000) {
    std::snprintf(buf, sizeof buf, "%s%lld ms", sign, ms);
  } else if (ms < 60'000) {
    std::snprintf(buf, sizeof buf, "%s%.1f s", sign, static_cast<double>(ms) / 1000.0);
  } else {
    std::snprintf(buf, sizeof buf, "%s%lld min %lld s", sign, ms / 60'000, ms % 60'000 / 1000);
  }
  return buf;
}

}  // namespace dlock::cli
