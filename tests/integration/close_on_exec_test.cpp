// SPDX-License-Identifier: Apache-2.0
// The sockets dlock opens are close-on-exec from their first moment: a program that forks and
// execs on another thread while dlock connects (`dlock run` does, a test's worker does) must not
// hand its Redis connections to the child. Setting the flag after socket() leaves a window.
// socket() is wrapped for this whole test program: the wrapper notes the type flags of each
// stream socket while a test records, then calls the real one.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "dlock/dlock.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace {

std::atomic<bool> recording{false};
std::mutex recorded_mutex;
std::vector<int> recorded_types;

}  // namespace

extern "C" int socket(int domain, int type, int protocol) noexcept {
  using socket_function = int (*)(int, int, int);
  static auto real = reinterpret_cast<socket_function>(::dlsym(RTLD_NEXT, "socket"));
  bool stream = (type & 0xf) == SOCK_STREAM;
  if (recording && stream && (domain == AF_INET || domain == AF_INET6 || domain == AF_UNIX)) {
    std::lock_guard lock{recorded_mutex};
    recorded_types.push_back(type);
  }
  return real(domain, type, protocol);
}

namespace dlock::test {
namespace {

TEST(CloseOnExecTest, EverySocketDlockOpensIsCloseOnExecFromTheStart) {
  redis_server server;
  recording = true;
  {
    // A request connection, and a lock's wake-up inbox beside it.
    dlock::client node{server.url()};
    std::error_code ec;
    node.exec({"PING"}, ec);
    ASSERT_FALSE(ec) << ec.message();
    dlock::mutex lock{node, test_key("close-on-exec")};
    auto held = lock.acquire(ec);
    ASSERT_TRUE(held) << ec.message();
    EXPECT_FALSE(held.release());
  }
  recording = false;
  std::lock_guard lock{recorded_mutex};
  ASSERT_FALSE(recorded_types.empty()) << "dlock opened no stream socket through socket()";
  for (int type : recorded_types) {
    EXPECT_TRUE(type & SOCK_CLOEXEC) << "a socket opened without SOCK_CLOEXEC (type " << type
                                     << "): a fork and exec meanwhile inherits it";
  }
}

}  // namespace
}  // namespace dlock::test
