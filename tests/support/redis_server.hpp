// SPDX-License-Identifier: Apache-2.0
// tests/support/redis_server.hpp: the tests' name for the throwaway redis-server processes
// (tools/local_redis, which `dlock demo` uses too): redis_server, child_process, free_port,
// raw_command, self_dir.
#pragma once

#include "local_redis/local_redis.hpp"

namespace dlock::test {

using local::child_process;
using local::free_port;
using local::raw_command;
using local::redis_server;
using local::self_dir;
using local::server_options;

}  // namespace dlock::test
