// SPDX-License-Identifier: Apache-2.0
// tests/support/promtool.hpp: Prometheus' own checker, for the tests of dlock's metrics.
//   promtool_check  runs `promtool check metrics` on a text; its exit status and output
//   metric_value    one series' value in a text, by its exact name{labels}
// promtool comes from scripts/bootstrap (build/tools/bin/promtool, fetched from Debian's
// prometheus package without installing its server), else from PATH; without it the calling
// test fails. Needs DLOCK_SOURCE_DIR (the repository) defined for the test.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace dlock::test {

inline std::string promtool_path() {
  namespace fs = std::filesystem;
  fs::path local = fs::path(DLOCK_SOURCE_DIR) / "build/tools/bin/promtool";
  if (fs::exists(local)) return local.string();
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) return "promtool";
  ADD_FAILURE() << "promtool not found in " << local << " nor on PATH: run scripts/bootstrap";
  return {};
}

inline std::pair<int, std::string> promtool_check(const std::string& text) {
  namespace fs = std::filesystem;
  std::string tool = promtool_path();
  if (tool.empty()) return {-1, "no promtool"};
  fs::path dir = fs::temp_directory_path() / ("dlock-promtool-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.prom") << text;
  std::string cmd = tool + " check metrics < " + (dir / "in.prom").string() + " > " +
                    (dir / "out.txt").string() + " 2>&1";
  int status = std::system(cmd.c_str());
  std::ifstream in(dir / "out.txt");
  std::stringstream out;
  out << in.rdbuf();
  fs::remove_all(dir);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out.str()};
}

// The value of `series` (name{labels}, exactly as rendered) in `text`, or -1 when absent.
inline double metric_value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1;
}

}  // namespace dlock::test
