#include "duration.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>

namespace dlock::cli {

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  // Digits past the cap only need checking: the value is the cap whatever they are.
  constexpr std::int64_t cap = longest_duration.count();
  std::size_t i = 0;
  std::int64_t value = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    value = std::min(value * 10 + (text[i] - '0'), cap + 1);
    ++i;
  }
  if (i == 0) return std::nullopt;  // no digits: empty, "-5", "ms", " 5"
  std::string_view unit = text.substr(i);
  std::int64_t scale = 0;
  if (unit.empty() || unit == "ms") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60 * 1000;
  } else if (unit == "h") {
    scale = 3600 * 1000;
  } else {
    return std::nullopt;
  }
  if (value > cap / scale) return longest_duration;
  return std::chrono::milliseconds(value * scale);
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
