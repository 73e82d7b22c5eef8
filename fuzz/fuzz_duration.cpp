// SPDX-License-Identifier: Apache-2.0
// fuzz_duration: arbitrary text into the CLI's parse_duration (tools/dlock-cli/duration.hpp).
// Checks: a parsed duration is never negative nor past longest_duration; it reads back the same
// when written as "<n>ms" and as plain seconds with three decimals ("<s>.<mmm>", a bare number
// being seconds); format_duration works on it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "duration.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto d = dlock::cli::parse_duration(text);
  if (!d) return 0;
  if (d->count() < 0 || *d > dlock::cli::longest_duration) std::abort();
  char seconds[48];
  std::snprintf(seconds, sizeof seconds, "%lld.%03lld", static_cast<long long>(d->count() / 1000),
                static_cast<long long>(d->count() % 1000));
  if (dlock::cli::parse_duration(std::to_string(d->count()) + "ms") != d ||
      dlock::cli::parse_duration(seconds) != d) {
    std::abort();
  }
  (void)dlock::cli::format_duration(*d);
  return 0;
}
