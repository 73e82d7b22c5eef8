// SPDX-License-Identifier: Apache-2.0
// fuzz_cli_args: arbitrary command lines into the `dlock` CLI's argument parsing. The input is
// split at NUL bytes into at most 32 arguments after "dlock"; the app is built as main.cpp
// builds it (every subcommand registered through cli.hpp) and parsed, but no command runs:
// `run` would start processes and the others would talk to Redis.
// After a successful parse, make_clients() turns the URLs into clients (no I/O), unless a
// password file is named (it would read an arbitrary file).
// Checks: only CLI11's ParseError or the CLI's usage_error come out; nothing crashes.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dlock::cli;
  std::vector<std::string> args{"dlock"};
  std::string current;
  for (std::size_t i = 0; i < size && args.size() < 33; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current += static_cast<char>(data[i]);
    }
  }
  if (args.size() < 33) args.push_back(current);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());

  CLI::App app{"dlock", "dlock"};
  app.set_version_flag("--version", "dlock 0.1.0");
  app.require_subcommand(1);
  global_options g;
  app.add_option("-r,--redis", g.urls, "Redis node URL");
  app.add_option("--password-file", g.password_file, "password file");
  app.add_option("--user", g.user, "ACL user");
  duration_option(app, "--request-timeout", g.request_timeout, "per-request deadline");
  app.add_flag("-v,--verbose", g.verbose, "verbose");
  std::vector<subcommand> commands = add_all_commands(app, g);
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return 0;  // --help and --version land here too, without printing
  }
  if (!g.password_file.empty()) return 0;
  try {
    (void)make_clients(g);
  } catch (const usage_error&) {
  }
  return 0;
}
