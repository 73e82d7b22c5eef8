// fuzz_duration: arbitrary text into the CLI's parse_duration (tools/dlock-cli/duration.hpp).
// Checks: a parsed duration is never negative; it reads back the same when written as plain
// milliseconds and as "<n>ms"; format_duration works on it.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "duration.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto d = dlock::cli::parse_duration(text);
  if (!d) return 0;
  if (d->count() < 0) std::abort();
  std::string ms = std::to_string(d->count());
  if (dlock::cli::parse_duration(ms) != d || dlock::cli::parse_duration(ms + "ms") != d) {
    std::abort();
  }
  (void)dlock::cli::format_duration(*d);
  return 0;
}
