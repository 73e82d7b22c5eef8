// tests/support/commandstats.hpp: what the server says it ran, from INFO commandstats.
#pragma once

#include <string>

#include "dlock/client.hpp"

namespace dlock::test {

// Scripts the server has run so far: EVALSHA calls, as dlock sends them.
inline long long scripts_run(client& c) {
  auto info = c.exec({"INFO", "commandstats"}).str();
  static const std::string field = "cmdstat_evalsha:calls=";
  auto at = info.find(field);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + field.size()));
}

}  // namespace dlock::test
