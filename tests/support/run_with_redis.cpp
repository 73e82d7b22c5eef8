// SPDX-License-Identifier: Apache-2.0
// run_with_redis CMD [ARGS...]: runs CMD with DLOCK_REDIS pointing at a throwaway redis-server
// (free loopback port, temp dir), then stops the server. Exits with CMD's status. Lets the
// examples run as tests exactly as a user would run them.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "support/redis_server.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: run_with_redis CMD [ARGS...]\n";
    return 64;
  }
  dlock::test::redis_server server;
  ::setenv("DLOCK_REDIS", server.url().c_str(), 1);
  dlock::test::child_process child(std::vector<std::string>(argv + 1, argv + argc));
  int status = child.wait(std::chrono::minutes(5));
  return status < 0 ? 70 : status;
}
