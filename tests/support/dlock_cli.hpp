// SPDX-License-Identifier: Apache-2.0
// tests/support/dlock_cli.hpp: starting the built `dlock` command (DLOCK_CLI_PATH, which the
// integration tests' target defines) as a child process, and reading what it wrote.
//   read_file        the whole text of a file ("" when there is none)
//   cli_environment  our environment without any DLOCK_* setting, plus the test's own
//   spawn_cli        posix_spawn of `dlock args...` in that environment
#pragma once

#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace dlock::test {

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Ours without any DLOCK_* setting and without what `extra` sets (getenv finds the first of
// two), plus `extra`: a test's CLI sees only the settings the test gives it.
inline std::vector<std::string> cli_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  auto overridden = [&](std::string_view entry) {
    auto name = entry.substr(0, entry.find('=') + 1);
    return std::any_of(extra.begin(), extra.end(),
                       [&](const std::string& x) { return x.starts_with(name); });
  };
  for (char** e = environ; *e; ++e) {
    if (std::string_view(*e).starts_with("DLOCK_") || overridden(*e)) continue;
    env.emplace_back(*e);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// Spawns `dlock args...` with cli_environment(env) and the file actions `fa`: its pid, or -1
// when it cannot start.
inline pid_t spawn_cli(std::vector<std::string> args, const std::vector<std::string>& env,
                       const posix_spawn_file_actions_t& fa) {
  args.insert(args.begin(), DLOCK_CLI_PATH);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto full_env = cli_environment(env);
  for (auto& e : full_env) envp.push_back(e.data());
  envp.push_back(nullptr);
  // Every signal at its default and none blocked, as a terminal's shell starts a command:
  // dlock hands its dispositions on to CMD (an ignored SIGQUIT cannot be trapped there), and a
  // harness may have ignored some (a shell script's `cmd &` ignores SIGINT and SIGQUIT).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  int failed = ::posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  return failed == 0 ? pid : -1;
}

}  // namespace dlock::test
