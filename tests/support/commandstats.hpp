// SPDX-License-Identifier: Apache-2.0
// tests/support/commandstats.hpp: what the server says it ran, from INFO commandstats.
#pragma once

#include <map>
#include <sstream>
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

// Every command the server ran, inside scripts too, by lower-case name: its call count.
inline std::map<std::string, long long> command_calls(client& c) {
  std::map<std::string, long long> calls;
  std::istringstream info(c.exec({"INFO", "commandstats"}).str());
  std::string line;
  static const std::string prefix = "cmdstat_";
  while (std::getline(info, line)) {
    auto colon = line.find(':');
    auto count = line.find("calls=");
    if (line.rfind(prefix, 0) != 0 || colon == std::string::npos || count == std::string::npos) {
      continue;
    }
    calls[line.substr(prefix.size(), colon - prefix.size())] = std::stoll(line.substr(count + 6));
  }
  return calls;
}

}  // namespace dlock::test
