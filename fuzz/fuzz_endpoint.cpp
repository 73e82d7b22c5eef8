// SPDX-License-Identifier: Apache-2.0
// fuzz_endpoint: arbitrary text into parse_endpoint (redis:// and unix:// URLs).
// Checks, for every URL that parses: a TCP endpoint has a non-empty host and a port in
// 1-65535; to_string() does not depend on the credentials (it never shows them);
// "redis://" + to_string() + "/db" parses back to the same host, port and db (what logs print
// can be pasted back).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dlock/endpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view url(reinterpret_cast<const char*>(data), size);
  std::error_code ec;
  dlock::endpoint ep = dlock::parse_endpoint(url, ec);
  if (ec) return 0;
  std::string shown = ep.to_string();
  dlock::endpoint anonymous = ep;
  anonymous.user.clear();
  anonymous.password.clear();
  if (anonymous.to_string() != shown) std::abort();  // credentials leaked into a log line
  if (ep.is_unix() || url.substr(0, 8) != "redis://") return 0;
  if (ep.host.empty() || ep.port == 0) std::abort();
  std::error_code again;
  auto back = dlock::parse_endpoint("redis://" + shown + "/" + std::to_string(ep.db), again);
  if (again || back.host != ep.host || back.port != ep.port || back.db != ep.db) std::abort();
  return 0;
}
