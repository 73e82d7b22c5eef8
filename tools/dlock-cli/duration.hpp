// SPDX-License-Identifier: Apache-2.0
// tools/dlock-cli/duration.hpp: the command line's durations.
//   parse_duration   "60" (seconds, as in flock), "2.5", "500ms", "30s", "5m", "1h", "1d",
//                    "1m30s" -> milliseconds
//   format_duration  a duration for messages: "750 ms", "1.5 s", "2 min 5 s"
// Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace dlock::cli {

// The longest duration the command line gives: 100 years, "for ever" for a wait or a grace
// period. Longer ones are cut to it, so that adding one to a clock reading cannot overflow
// (steady_clock counts int64 nanoseconds: 292 years).
inline constexpr std::chrono::milliseconds longest_duration{36525LL * 24 * 3600 * 1000};

// Reads a non-negative number, with an optional decimal fraction, and an optional unit: ms, s,
// m (minutes), h or d (days). No unit means seconds, as flock -w, sleep and timeout read it.
// Compounds name their units longest first, each once ("1h30m", "1m30.5s"); a bare number
// stands alone. A fraction of a millisecond rounds up (a positive duration never becomes 0).
// A value past longest_duration, however many digits, saturates to it. Returns nullopt for
// anything else: empty text, a sign, spaces, "5.", an unknown or repeated unit.
// Zero is a valid duration; commands that need a positive one (a TTL) check that themselves.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

// For human-readable messages, never for parsing back.
std::string format_duration(std::chrono::milliseconds d);

}  // namespace dlock::cli
