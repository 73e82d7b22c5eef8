// SPDX-License-Identifier: Apache-2.0
// lease::async_release() and async_extend() against a real redis-server: the same outcomes as
// the blocking calls, completions on dlock's I/O thread, and lock cycles chained purely on
// callbacks.
#include "dlock/lease.hpp"

#include <gtest/gtest.h>

#include <asio/use_future.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "access.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "support/checks.hpp"
#include "support/commandstats.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

// Waits for a callback's error code, failing the test instead of hanging when it never comes.
std::error_code await(std::future<std::error_code>& f) {
  if (f.wait_for(scaled(10s)) != std::future_status::ready) {
    ADD_FAILURE() << "the completion never ran";
    return make_error_code(errc::timeout);
  }
  return f.get();
}

class LeaseAsyncTest : public ::testing::Test {
 protected:
  redis_server server_;
  client client_{server_.url()};
};

// Polls EXISTS from the test thread: true once `key` is gone, false if it outlived `limit`
// (scaled). Keys that would wait for their TTL instead have one far above it (120 s).
bool key_gone_within(client& c, const std::string& key, std::chrono::milliseconds limit) {
  return test::eventually([&] { return c.exec({"EXISTS", key}).integer() == 0; }, limit);
}

TEST_F(LeaseAsyncTest, BlockingReleaseInsideACompletionStillDeletesTheKey) {
  mutex m{client_, test_key(), {.ttl = 120s}};
  std::promise<std::error_code> done;
  auto result = done.get_future();
  bool still_held = true;
  m.async_acquire([&](std::error_code ec, lease l) {
    if (ec) return done.set_value(ec);
    // On the I/O thread release() cannot wait for the answer: it starts the release instead.
    std::error_code rec = l.release();
    still_held = static_cast<bool>(l);
    done.set_value(rec);
  });
  EXPECT_EQ(await(result), errc::would_block_io_thread);
  EXPECT_FALSE(still_held);
  EXPECT_TRUE(key_gone_within(client_, test_key(), 2s)) << "the key waits for its 120 s TTL";
}

TEST_F(LeaseAsyncTest, MoveAssignmentInsideACompletionReleasesTheOldLease) {
  mutex first{client_, test_key("first"), {.ttl = 120s}};
  mutex second{client_, test_key("second"), {.ttl = 30s}};
  lease held = first.acquire();
  std::promise<std::error_code> done;
  auto result = done.get_future();
  second.async_acquire([&](std::error_code ec, lease l) {
    if (!ec) held = std::move(l);  // lets go of `first`'s lease on the I/O thread
    done.set_value(ec);
  });
  EXPECT_EQ(await(result), std::error_code());
  EXPECT_TRUE(key_gone_within(client_, test_key("first"), 2s)) << "the key waits for its TTL";
  ASSERT_TRUE(held);
  EXPECT_EQ(client_.exec({"GET", test_key("second")}).str(), held.value());
  EXPECT_FALSE(held.release());
}

TEST_F(LeaseAsyncTest, CallbackReleaseDeletesTheKeyOnTheIoThread) {
  mutex m{client_, test_key()};
  auto l = m.acquire();
  ASSERT_EQ(client_.exec({"GET", test_key()}).str(), l.value());
  std::promise<std::error_code> done;
  auto result = done.get_future();
  std::atomic<bool> on_io{false};
  l.async_release([&](std::error_code ec) {
    on_io = detail::on_io_thread();
    done.set_value(ec);
  });
  EXPECT_FALSE(l);  // empty as soon as the release started
  EXPECT_EQ(await(result), std::error_code());
  EXPECT_TRUE(on_io.load());
  EXPECT_TRUE(client_.exec({"GET", test_key()}).is_nil());
}

TEST_F(LeaseAsyncTest, SecondReleaseAndEmptyLeaseReportNotHeld) {
  mutex m{client_, test_key()};
  auto l = m.acquire();
  std::promise<std::error_code> first, second, empty;
  auto r1 = first.get_future(), r2 = second.get_future(), r3 = empty.get_future();
  l.async_release([&](std::error_code ec) { first.set_value(ec); });
  l.async_release([&](std::error_code ec) { second.set_value(ec); });
  lease none;
  none.async_release([&](std::error_code ec) { empty.set_value(ec); });
  EXPECT_EQ(await(r1), std::error_code());
  EXPECT_EQ(await(r2), errc::not_held);
  EXPECT_EQ(await(r3), errc::not_held);
}

TEST_F(LeaseAsyncTest, ReleaseOfAKeyThatIsNoLongerOursReportsNotHeld) {
  mutex m{client_, test_key()};
  auto l = m.acquire();
  client_.exec({"DEL", test_key()});
  std::future<void> f = l.async_release(asio::use_future);
  try {
    f.get();
    ADD_FAILURE() << "released a key that was gone";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::not_held);
  }
}

TEST_F(LeaseAsyncTest, UseFutureReleasesAndThenThrowsNotHeld) {
  mutex m{client_, test_key()};
  auto l = m.acquire();
  std::future<void> f = l.async_release(asio::use_future);
  ASSERT_EQ(f.wait_for(scaled(10s)), std::future_status::ready);
  EXPECT_NO_THROW(f.get());
  EXPECT_TRUE(client_.exec({"GET", test_key()}).is_nil());
  std::future<void> again = l.async_release(asio::use_future);
  try {
    again.get();
    ADD_FAILURE() << "a second release succeeded";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::not_held);
  }
}

TEST_F(LeaseAsyncTest, AnotherMutexAcquiresInOneRoundRightAfterTheRelease) {
  mutex first{client_, test_key(), {.ttl = 30s}};
  mutex second{client_, test_key(), {.ttl = 30s}};
  auto l = first.acquire();
  std::error_code ec;
  EXPECT_FALSE(second.try_acquire(ec));
  EXPECT_EQ(ec, errc::not_acquired);
  // From inside the completion: one round, no retry, so a key left behind would fail it.
  std::promise<std::error_code> got;
  auto result = got.get_future();
  lease taken;
  l.async_release([&](std::error_code rec) {
    if (rec) return got.set_value(rec);
    detail::access::start_acquire(second, mutex::clock::time_point::max(), 1,
                                  [&](std::error_code aec, lease next) {
                                    taken = std::move(next);
                                    got.set_value(aec);
                                  });
  });
  EXPECT_EQ(await(result), std::error_code());
  ASSERT_TRUE(taken);
  EXPECT_EQ(client_.exec({"GET", test_key()}).str(), taken.value());
  EXPECT_FALSE(taken.release());
}

TEST_F(LeaseAsyncTest, CallbackChainCompletesEveryCycle) {
  constexpr int cycles = 300;
  mutex m{client_, test_key()};
  std::promise<std::error_code> done;
  auto result = done.get_future();
  int completed = 0;  // touched only by the chain, one step at a time
  std::uint64_t first_fence = 0, last_fence = 0;
  bool fences_increase = true, all_on_io = true;
  std::function<void()> next = [&] {
    m.async_acquire([&](std::error_code ec, lease l) {
      all_on_io = all_on_io && detail::on_io_thread();
      if (ec) return done.set_value(ec);
      fences_increase = fences_increase && l.fencing_token() > last_fence;
      last_fence = l.fencing_token();
      if (first_fence == 0) first_fence = last_fence;
      l.async_release([&](std::error_code rec) {
        all_on_io = all_on_io && detail::on_io_thread();
        if (rec) return done.set_value(rec);
        if (++completed == cycles) return done.set_value({});
        next();
      });
    });
  };
  next();
  ASSERT_EQ(result.wait_for(scaled(60s)), std::future_status::ready);
  EXPECT_EQ(result.get(), std::error_code());
  EXPECT_EQ(completed, cycles);
  EXPECT_TRUE(fences_increase);
  EXPECT_TRUE(all_on_io);
  EXPECT_TRUE(client_.exec({"GET", test_key()}).is_nil());
  // One token per cycle, no more: the counter ends at the last, cycles - 1 above the first.
  EXPECT_EQ(client_.exec({"GET", "{" + test_key() + "}:fence"}).str(), std::to_string(last_fence));
  EXPECT_EQ(last_fence - first_fence + 1, static_cast<std::uint64_t>(cycles));
}

TEST_F(LeaseAsyncTest, ReleaseStopsKeepAliveWithoutFiringLost) {
  mutex m{client_, test_key(), {.ttl = 2s}};
  for (int i = 0; i < 50; ++i) {
    auto l = m.acquire();
    ASSERT_FALSE(l.keep_alive({.interval = 1ms}));  // renewals back to back
    auto lost = l.lost();
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (i % 10)));
    std::future<void> f = l.async_release(asio::use_future);
    ASSERT_EQ(f.wait_for(scaled(10s)), std::future_status::ready);
    EXPECT_NO_THROW(f.get());
    EXPECT_FALSE(lost.stop_requested()) << "round " << i;
    ASSERT_EQ(client_.exec({"EXISTS", test_key()}).integer(), 0) << "round " << i;
  }
  // No renewal keeps running against the released leases: the server's script calls stop.
  std::this_thread::sleep_for(scaled(50ms));  // one already sent when the last release ran lands
  auto before = test::scripts_run(client_);
  std::this_thread::sleep_for(scaled(100ms));  // a renewal still running would show up here
  EXPECT_EQ(test::scripts_run(client_), before);
}

TEST_F(LeaseAsyncTest, SemaphorePermitReleasesAsynchronously) {
  semaphore s{client_, test_key(), 2};
  auto permit = s.acquire();
  const std::string holders = "{" + test_key() + "}:sem:holders";
  ASSERT_EQ(client_.exec({"ZCARD", holders}).integer(), 1);
  std::future<void> f = permit.async_release(asio::use_future);
  ASSERT_EQ(f.wait_for(scaled(10s)), std::future_status::ready);
  EXPECT_NO_THROW(f.get());
  EXPECT_EQ(client_.exec({"ZCARD", holders}).integer(), 0);
}

TEST_F(LeaseAsyncTest, AsyncExtendPushesTheExpiryOut) {
  mutex m{client_, test_key(), {.ttl = 500ms}};
  auto l = m.acquire();
  std::future<void> f = l.async_extend(20s, asio::use_future);
  ASSERT_EQ(f.wait_for(scaled(10s)), std::future_status::ready);
  EXPECT_NO_THROW(f.get());
  EXPECT_GT(client_.exec({"PTTL", test_key()}).integer(), 10000);
  EXPECT_GT(l.remaining(), 10s);
  std::promise<std::error_code> gone;
  auto result = gone.get_future();
  client_.exec({"DEL", test_key()});
  l.async_extend([&](std::error_code ec) { gone.set_value(ec); });
  EXPECT_EQ(await(result), errc::lease_lost);
  EXPECT_TRUE(l.lost().stop_requested());
  lease none;
  std::promise<std::error_code> empty;
  auto r2 = empty.get_future();
  none.async_extend([&](std::error_code ec) { empty.set_value(ec); });
  EXPECT_EQ(await(r2), errc::not_held);
}

}  // namespace
}  // namespace dlock::test
