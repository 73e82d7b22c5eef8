// SPDX-License-Identifier: Apache-2.0
// One name is one lock with another library too (issue 36): redis-py's Lock (Debian's
// python3-redis, which scripts/bootstrap installs) takes a name with SET NX PX and a token, as
// node-redlock and redsync do. Against a real redis-server: its holder keeps dlock's mutex,
// readers and writers out; dlock's readers and writers keep it out; each lets the other in once
// it lets go, and neither's release touches what the other holds.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "dlock/key_layout.hpp"
#include "dlock/mutex.hpp"
#include "dlock/shared_mutex.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

// Debian's interpreter, where python3-redis is installed (not whatever python3 PATH finds).
constexpr const char* python = "/usr/bin/python3";

class RedisPyInteropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto version = py("print(redis.__version__)");
    ASSERT_FALSE(version.empty()) << "redis-py not found: scripts/bootstrap installs python3-redis";
  }

  // Runs `body` after `import redis; r = <a client of the server>; lock = r.lock(<the name>)`,
  // and returns what it printed ("" when it failed, which the caller's expectation shows).
  std::string py(const std::string& body) {
    std::string program = "import redis\nr = redis.Redis(port=" +
                          std::to_string(server_.port()) + ")\nlock = r.lock('" + test_key() +
                          "', timeout=60)\n" + body + "\n";
    std::string command = std::string("timeout 20 ") + python + " -c \"$DLOCK_PY\" 2>&1";
    ::setenv("DLOCK_PY", program.c_str(), 1);
    FILE* out = ::popen(command.c_str(), "r");
    if (!out) return {};
    std::string text;
    std::array<char, 256> buf{};
    while (std::fgets(buf.data(), static_cast<int>(buf.size()), out)) text += buf.data();
    int status = ::pclose(out);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ADD_FAILURE() << "python3 failed: " << text;
      return {};
    }
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }
  // redis-py's Lock, taken without waiting under a token of ours so that a later program can
  // release it: "True" or "False".
  std::string py_try_lock() { return py("print(lock.acquire(blocking=False, token='py-token'))"); }
  void py_unlock() { py("lock.do_release(b'py-token')"); }

  redis_server server_;
  client client_{server_.url()};
};

TEST_F(RedisPyInteropTest, ItsHolderKeepsDlocksMutexReadersAndWritersOut) {
  ASSERT_EQ(py_try_lock(), "True");
  mutex plain{client_, test_key()};
  shared_mutex rw{client_, test_key()};
  std::error_code ec;
  EXPECT_FALSE(plain.try_acquire(ec));
  EXPECT_EQ(ec, errc::not_acquired);
  EXPECT_FALSE(rw.try_acquire_shared(ec));
  EXPECT_EQ(ec, errc::not_acquired);
  EXPECT_FALSE(rw.try_acquire(ec));
  EXPECT_EQ(ec, errc::not_acquired);
  py_unlock();
  lease reader = rw.try_acquire_shared(ec);
  EXPECT_TRUE(reader) << ec.message();
}

TEST_F(RedisPyInteropTest, DlocksReadersAndWritersKeepItOutUntilTheLastLetsGo) {
  shared_mutex rw{client_, test_key()};
  std::error_code ec;
  lease first = rw.try_acquire_shared(ec), second = rw.try_acquire_shared(ec);
  ASSERT_TRUE(first && second) << ec.message();
  EXPECT_EQ(py_try_lock(), "False");
  EXPECT_EQ(first.release(), std::error_code());
  EXPECT_EQ(py_try_lock(), "False") << "one reader still holds";
  EXPECT_EQ(second.release(), std::error_code());
  lease writer = rw.try_acquire(ec);
  ASSERT_TRUE(writer) << ec.message();
  EXPECT_EQ(py_try_lock(), "False");
  // redis-py's release of a token it does not hold changes nothing (its script compares). The
  // writer, alone on a free name, holds it solo: the mark, its token and its permits
  // (semaphore_protocol.hpp).
  auto before = client_.exec({"GET", test_key()}).str();
  EXPECT_EQ(before.rfind(std::string(read_write_lock_mark), 0), 0u) << before;
  EXPECT_EQ(py("try:\n  lock.do_release(b'py-token')\nexcept redis.exceptions.LockNotOwnedError:\n"
               "  print('not owned')\nprint(r.get('" + test_key() + "').decode())"),
            "not owned\n" + before);
  EXPECT_EQ(writer.release(), std::error_code());
  EXPECT_EQ(py_try_lock(), "True");
  py_unlock();
}

TEST_F(RedisPyInteropTest, ItsLockAndDlocksMutexAreOneLock) {
  mutex plain{client_, test_key()};
  std::error_code ec;
  lease held = plain.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  EXPECT_EQ(py_try_lock(), "False");
  EXPECT_EQ(held.release(), std::error_code());
  EXPECT_EQ(py_try_lock(), "True");
  EXPECT_FALSE(plain.try_acquire(ec));
  py_unlock();
  EXPECT_TRUE(plain.try_acquire(ec)) << ec.message();
}

}  // namespace
}  // namespace dlock::test
