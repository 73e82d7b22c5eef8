// SPDX-License-Identifier: Apache-2.0
// The key layout against a real redis-server. hash_slot agrees with CLUSTER KEYSLOT, and locks
// whose names differ only by braces ("x", "{x}") never share a companion key.
#include "dlock/key_layout.hpp"

#include <gtest/gtest.h>

#include <future>
#include <random>
#include <thread>

#include "dlock/mutex.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

TEST(KeyLayoutServerTest, HashSlotAgreesWithClusterKeyslot) {
  redis_server server{{.extra = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                 "--cluster-port", std::to_string(test::free_port())}}};
  client c{server.url()};
  // Keys biased toward braces, then any bytes, including the cases of hash tag parsing.
  std::vector<std::string> keys{"", "{", "}", "{}", "}{", "{}{x}", "{{x}}", "a{b}c", "{x}{y}"};
  std::mt19937 random{20240611};
  const std::string braces = "{}{}xa:";
  for (int i = 0; i < 3000; ++i) {
    std::string key(random() % 12, ' ');
    for (char& ch : key) {
      ch = i % 3 == 0 ? static_cast<char>(random() % 256) : braces[random() % braces.size()];
    }
    keys.push_back(key);
  }
  for (std::size_t from = 0; from < keys.size(); from += 500) {
    std::size_t to = std::min(keys.size(), from + 500);
    command batch{"CLUSTER", "KEYSLOT", keys[from]};
    for (std::size_t i = from + 1; i < to; ++i) batch.then({"CLUSTER", "KEYSLOT", keys[i]});
    reply r = c.exec(batch);
    ASSERT_EQ(r.elements().size(), to - from) << r.to_string();
    for (std::size_t i = from; i < to; ++i) {
      ASSERT_EQ(r.elements()[i - from].integer(), hash_slot(keys[i])) << '"' << keys[i] << '"';
    }
  }
}

TEST(KeyLayoutServerTest, ALockNamedLikeACompanionKeyIsRefused) {
  // No server listens there: invalid_argument comes before any I/O.
  client nowhere{"redis://127.0.0.1:1"};
  auto refused = [&](std::string name, std::string prefix = "") {
    try {
      mutex m{nowhere, std::move(name), {.key_prefix = std::move(prefix)}};
      return false;
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      return true;
    }
  };
  EXPECT_TRUE(refused("{x}:fence"));
  EXPECT_TRUE(refused(":waiters", "{x}"));  // judged on the whole key
  EXPECT_TRUE(refused("{x}{}:tickets"));
  EXPECT_TRUE(refused("{x}:sem:fence"));
  EXPECT_TRUE(refused("{count}:high-fence"));
  EXPECT_TRUE(refused(lock_keys_for("a}b").waiter_info));
  EXPECT_TRUE(refused(semaphore_keys_for("app:{jobs}", true).owners));
  for (std::string name : {"x", "{x}", "{x}{}", "{x}:sem", "orders:{42}:fence", "{x}:fence:1",
                           "a}b", "x:fence", "{x}}:fence"}) {
    EXPECT_FALSE(refused(name)) << name;
  }
}

class KeyLayoutMutexTest : public ::testing::Test {
 protected:
  redis_server server_;
  client client_{server_.url()};
};

// The review's case: "x" and "{x}" once shared {x}:waiters (and :fence ...), so releasing "x"
// handed the lock to a waiter of "{x}" while "{x}" was still held.
TEST_F(KeyLayoutMutexTest, ReleasingAPlainNameNeverHandsOnItsBracedTwin) {
  const std::string plain = test_key(), braced = "{" + plain + "}";
  mutex p1{client_, braced, {.ttl = 20s}};
  mutex p2{client_, braced, {.ttl = 20s, .retry_delay = 1s}};
  mutex p3{client_, plain};
  lease held = p1.acquire();
  auto waiter = std::async(std::launch::async, [&] {
    std::error_code ec;
    return p2.acquire_until(steady::now() + 10s, ec);
  });
  const std::string queue = lock_keys_for(braced).waiters;
  ASSERT_TRUE(test::eventually([&] { return client_.exec({"ZCARD", queue}).integer() >= 1; }))
      << "the waiter never queued";
  ASSERT_EQ(client_.exec({"ZCARD", queue}).integer(), 1) << "the waiter never queued";
  EXPECT_FALSE(p3.acquire().release());
  EXPECT_EQ(waiter.wait_for(500ms), std::future_status::timeout)
      << "the waiter of '" << braced << "' got it while p1 holds it";
  EXPECT_EQ(client_.exec({"GET", braced}).str(), held.value());
  EXPECT_FALSE(held.release());
  lease got = waiter.get();
  EXPECT_TRUE(got) << "the waiter never got the lock once it was free";
}

}  // namespace
}  // namespace dlock::test
