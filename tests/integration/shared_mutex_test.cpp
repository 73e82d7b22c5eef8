// SPDX-License-Identifier: Apache-2.0
// The read-write lock against a real redis-server: readers overlap, a writer overlaps nobody,
// fences grow across both kinds, a waiting writer is overtaken by no reader that came after it,
// one release hands the lock to a whole batch of readers, and each reader's hold expires on its
// own.
#include "dlock/shared_mutex.hpp"

#include <gtest/gtest.h>

#include <asio/use_future.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include "dlock/key_layout.hpp"
#include "dlock/semaphore.hpp"
#include "support/checks.hpp"
#include "support/commandstats.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

class SharedMutexTest : public ::testing::Test {
 protected:
  // How many writers hold or wait: only a writer has an entry in the weights hash (a reader's
  // weight, 1, is not written).
  long long writers_in_line() {
    auto keys = shared_mutex_keys_for(test_key());
    return client_.exec({"HLEN", keys.weights}).integer();
  }
  redis_server server_;
  client client_{server_.url()};
};

// Polls so rare, and holds so long, that within the (scaled) seconds a test allows only a wake
// can serve a waiter: its first poll comes after retry_delay / 2 at the soonest, or when the
// hold in its way expires.
shared_mutex_options slow_polls() {
  return {.ttl = test::scaled(60s), .retry_delay = test::scaled(20s)};
}

// Many threads, each with a client of its own, 9 reads to 1 write, checked in this process:
// readers are seen together, a writer never with anyone, and every hold's fence is above the
// fence of every hold of the other kind (or another writer) granted before it.
TEST_F(SharedMutexTest, ReadersOverlapAWriterOverlapsNobodyAndFencesGrow) {
  std::atomic<int> readers{0}, writers{0}, most_readers{0};
  std::atomic<int> overlaps{0}, fence_faults{0}, writes{0};
  std::atomic<std::uint64_t> last_writer_fence{0}, highest_fence{0};
  auto until = std::chrono::steady_clock::now() + 1500ms;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      shared_mutex rw{client{server_.url()}, test_key(), {.ttl = 10s}};
      std::mt19937 random(static_cast<unsigned>(t));
      while (std::chrono::steady_clock::now() < until) {
        std::error_code ec;
        bool write = random() % 10 == 0;
        if (write) {
          lease held = rw.acquire(ec);
          if (!held) {
            ADD_FAILURE() << ec.message();
            return;
          }
          if (held.fencing_token() <= highest_fence.load()) ++fence_faults;
          int w = ++writers;
          if (w != 1 || readers.load() != 0) ++overlaps;
          std::this_thread::sleep_for(2ms);
          last_writer_fence = held.fencing_token();
          raise_to(highest_fence, held.fencing_token());
          ++writes;
          --writers;
          EXPECT_FALSE(held.release());
        } else {
          lease held = rw.acquire_shared(ec);
          if (!held) {
            ADD_FAILURE() << ec.message();
            return;
          }
          if (held.fencing_token() <= last_writer_fence.load()) ++fence_faults;
          int r = ++readers;
          if (writers.load() != 0) ++overlaps;
          raise_to(most_readers, r);
          std::this_thread::sleep_for(3ms);
          raise_to(highest_fence, held.fencing_token());
          --readers;
          EXPECT_FALSE(held.release());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(fence_faults.load(), 0);
  EXPECT_GT(most_readers.load(), 1) << "readers never held together";
  EXPECT_GT(writes.load(), 0);
}

// A writer that waits stops every reader that asks after it, even while readers that came
// before it still hold; the writer is served as soon as those are gone.
TEST_F(SharedMutexTest, NoReaderOvertakesAWaitingWriter) {
  shared_mutex rw{client_, test_key()};
  std::error_code ec;
  lease early_reader = rw.acquire_shared(ec);
  ASSERT_TRUE(early_reader) << ec.message();
  std::atomic<bool> writer_granted{false}, writer_released{false};
  auto writer = std::async(std::launch::async, [&] {
    shared_mutex mine{client{server_.url()}, test_key()};
    std::error_code wec;
    lease held = mine.acquire(wec);
    writer_granted = static_cast<bool>(held);
    std::this_thread::sleep_for(100ms);
    writer_released = true;
    return held.release();
  });
  ASSERT_TRUE(eventually([&] { return writers_in_line() == 1; })) << "the writer never queued";
  // A reader that comes now is refused by a try, and a blocking one waits out the writer.
  EXPECT_FALSE(rw.try_acquire_shared(ec));
  EXPECT_EQ(ec, errc::not_acquired);
  auto late_reader = std::async(std::launch::async, [&] {
    shared_mutex mine{client{server_.url()}, test_key()};
    std::error_code rec;
    lease held = mine.acquire_shared(rec);
    return std::pair{static_cast<bool>(held), writer_released.load()};
  });
  // In line behind the writer: the early reader, the writer and the late reader.
  auto owners = shared_mutex_keys_for(test_key()).owners;
  EXPECT_TRUE(eventually([&] { return client_.exec({"ZCARD", owners}).integer() == 3; }));
  EXPECT_FALSE(writer_granted.load());  // the early reader still holds
  EXPECT_FALSE(early_reader.release());
  ASSERT_EQ(writer.wait_for(test::scaled(5s)), std::future_status::ready);
  EXPECT_FALSE(writer.get());
  EXPECT_TRUE(writer_granted.load());
  ASSERT_EQ(late_reader.wait_for(test::scaled(5s)), std::future_status::ready);
  auto [granted, after_writer] = late_reader.get();
  EXPECT_TRUE(granted);
  EXPECT_TRUE(after_writer) << "a reader that came after a waiting writer went before it";
}

// A writer's release wakes every reader queued behind it up to the next writer, in one go:
// with slow_polls(), polling could not grant them within the seconds allowed.
// The next writer waits for that batch, and the reader behind it for that writer.
TEST_F(SharedMutexTest, AWritersReleaseWakesTheWholeBatchOfReadersBehindIt) {
  shared_mutex rw{client_, test_key(), slow_polls()};
  lease first_writer = rw.acquire();
  std::atomic<int> readers_holding{0};
  std::atomic<bool> let_go{false}, second_writer_holds{false}, last_reader_holds{false};
  std::vector<std::jthread> threads;
  // Whatever happens below, the threads can finish (the jthreads join after this).
  struct finish {
    lease& writer;
    std::atomic<bool>& let_go;
    ~finish() {
      (void)writer.release();
      let_go = true;
    }
  };
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&] {
      shared_mutex mine{client{server_.url()}, test_key(), slow_polls()};
      std::error_code ec;
      lease held = mine.acquire_shared(ec);
      EXPECT_TRUE(held) << ec.message();
      ++readers_holding;
      while (!let_go) std::this_thread::sleep_for(5ms);
      --readers_holding;
    });
  }
  finish at_end{first_writer, let_go};
  auto in_line = [&](long long n) {
    auto owners = shared_mutex_keys_for(test_key()).owners;
    return eventually([&] { return client_.exec({"ZCARD", owners}).integer() == n; });
  };
  ASSERT_TRUE(in_line(6)) << "the 5 readers did not queue behind the writer";
  threads.emplace_back([&] {
    shared_mutex mine{client{server_.url()}, test_key(), slow_polls()};
    lease held = mine.acquire();
    second_writer_holds = true;
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(readers_holding.load(), 0);
    second_writer_holds = false;
  });
  ASSERT_TRUE(in_line(7));
  threads.emplace_back([&] {
    shared_mutex mine{client{server_.url()}, test_key(), slow_polls()};
    lease held = mine.acquire_shared();
    last_reader_holds = true;
  });
  ASSERT_TRUE(in_line(8));

  EXPECT_FALSE(first_writer.release());
  EXPECT_TRUE(eventually([&] { return readers_holding.load() == 5; }, 4s))
      << readers_holding.load() << " of 5 readers hold";
  EXPECT_FALSE(second_writer_holds.load());
  EXPECT_FALSE(last_reader_holds.load());
  let_go = true;
  EXPECT_TRUE(eventually([&] { return last_reader_holds.load(); }, 4s))
      << "the reader behind the second writer was not woken after it";
}

// The handoff: a writer's release makes the readers queued behind it holders itself, up to the
// next writer, in that one script; none of them runs an attempt of its own after it. The next
// writer's place is left as it was: its turn comes with the last of those readers' releases.
TEST_F(SharedMutexTest, AWritersReleaseHandsTheLockToTheBatchOfReadersInOneScript) {
  shared_mutex rw{client_, test_key(), slow_polls()};
  lease writer = rw.acquire();
  auto keys = shared_mutex_keys_for(test_key());
  // Queued and offering a handoff (with a wake channel): n entries of waiter info with " f".
  auto offering = [&](std::size_t n) {
    return eventually([&] {
      std::size_t count = 0;
      reply entries = client_.exec({"HVALS", keys.waiter_info});
      for (const auto& e : entries.elements()) {
        if (e.str().find(" f") != std::string::npos) ++count;
      }
      return count == n;
    });
  };
  std::vector<std::future<lease>> readers;
  for (int i = 0; i < 3; ++i) {
    readers.push_back(std::async(std::launch::async, [&] {
      shared_mutex mine{client{server_.url()}, test_key(), slow_polls()};
      std::error_code ec;
      return mine.acquire_shared_until(std::chrono::steady_clock::now() + test::scaled(60s), ec);
    }));
  }
  ASSERT_TRUE(offering(3)) << "the readers did not queue behind the writer";
  auto next_writer = std::async(std::launch::async, [&] {
    shared_mutex mine{client{server_.url()}, test_key(), slow_polls()};
    std::error_code ec;
    return mine.acquire_until(std::chrono::steady_clock::now() + test::scaled(60s), ec);
  });
  ASSERT_TRUE(offering(4));
  auto before = test::scripts_run(client_);
  EXPECT_FALSE(writer.release());
  std::vector<lease> held;
  for (auto& r : readers) {
    ASSERT_EQ(r.wait_for(test::scaled(4s)), std::future_status::ready)
        << "a reader was not handed the lock";
    held.push_back(r.get());
    ASSERT_TRUE(held.back());
    EXPECT_GT(held.back().fencing_token(), writer.fencing_token());
  }
  EXPECT_EQ(test::scripts_run(client_) - before, 1) << "a reader ran an attempt of its own";
  EXPECT_EQ(next_writer.wait_for(100ms), std::future_status::timeout);
  EXPECT_TRUE(offering(1)) << "the next writer's place changed";
  for (auto& l : held) EXPECT_FALSE(l.release());
  ASSERT_EQ(next_writer.wait_for(test::scaled(4s)), std::future_status::ready);
  lease second = next_writer.get();
  ASSERT_TRUE(second);
  for (auto& l : held) EXPECT_GT(second.fencing_token(), l.fencing_token());
}

// A queued writer that gives up lets the readers it kept waiting in at once: its leaving wakes
// them (with slow_polls(), they would otherwise wait for their next poll).
TEST_F(SharedMutexTest, AWaitingWriterThatGivesUpLetsTheReadersBehindItIn) {
  shared_mutex rw{client_, test_key(), slow_polls()};
  lease reader = rw.acquire_shared();
  auto owners = shared_mutex_keys_for(test_key()).owners;
  // The writer gives up when told, once the reader is queued behind it (a deadline of its own
  // could pass before that on a slow machine).
  std::stop_source give_up;
  auto writer = std::async(std::launch::async, [&] {
    shared_mutex mine{client{server_.url()}, test_key(), slow_polls()};
    std::error_code ec;
    lease held = mine.acquire_until(std::chrono::steady_clock::now() + test::scaled(30s),
                                    {.stop = give_up.get_token()}, ec);
    return std::pair{static_cast<bool>(held), ec};
  });
  ASSERT_TRUE(eventually([&] { return client_.exec({"ZCARD", owners}).integer() == 2; }));
  auto waiting_reader = std::async(std::launch::async, [&] {
    shared_mutex mine{client{server_.url()}, test_key(), slow_polls()};
    std::error_code ec;
    lease held =
        mine.acquire_shared_until(std::chrono::steady_clock::now() + test::scaled(60s), ec);
    return std::chrono::steady_clock::now();
  });
  ASSERT_TRUE(eventually([&] { return client_.exec({"ZCARD", owners}).integer() == 3; }));
  give_up.request_stop();
  ASSERT_EQ(writer.wait_for(test::scaled(5s)), std::future_status::ready);
  auto [writer_held, writer_ec] = writer.get();
  EXPECT_FALSE(writer_held);
  EXPECT_EQ(writer_ec, errc::cancelled);
  auto gave_up = std::chrono::steady_clock::now();
  ASSERT_EQ(waiting_reader.wait_for(test::scaled(30s)), std::future_status::ready);
  auto in = waiting_reader.get();
  // Its own first poll would come test::scaled(10s) after it queued at the soonest.
  EXPECT_LT(in - gave_up, test::scaled(2s))
      << "the reader waited for its own poll, not the writer's leaving";
}

TEST_F(SharedMutexTest, EachReadersHoldExpiresOnItsOwn) {
  shared_mutex rw{client_, test_key(), {.ttl = 400ms}};
  std::error_code ec;
  lease forgotten = rw.acquire_shared(ec);
  lease kept = rw.acquire_shared(ec);
  ASSERT_TRUE(forgotten && kept) << ec.message();
  kept.keep_alive();
  std::this_thread::sleep_for(700ms);
  auto gone = forgotten.extend();
  EXPECT_TRUE(gone == errc::lease_lost || gone == errc::lease_expired) << gone.message();
  EXPECT_FALSE(kept.extend()) << "the renewed reader lost its hold";
  EXPECT_FALSE(rw.try_acquire(ec)) << "a writer got in beside a live reader";
  EXPECT_FALSE(kept.release());
  lease writer = rw.try_acquire(ec);
  EXPECT_TRUE(writer) << ec.message();
}

TEST_F(SharedMutexTest, WorksWithStdSharedLockAndUniqueLock) {
  shared_mutex rw{client_, test_key()};
  shared_mutex other{client{server_.url()}, test_key()};
  {
    std::shared_lock<shared_mutex> mine(rw);
    ASSERT_TRUE(mine.owns_lock());
    ASSERT_NE(rw.current_lease(), nullptr);
    auto theirs = std::async(std::launch::async, [&] {
      std::shared_lock<shared_mutex> reader(other, std::try_to_lock);
      bool read_too = reader.owns_lock();
      if (read_too) reader.unlock();
      std::unique_lock<shared_mutex> writer(other, std::defer_lock);
      bool wrote = writer.try_lock_for(100ms);
      return std::pair{read_too, wrote};
    });
    auto [read_too, wrote] = theirs.get();
    EXPECT_TRUE(read_too);
    EXPECT_FALSE(wrote) << "a writer got in beside a reader";
  }
  EXPECT_EQ(rw.current_lease(), nullptr);
  EXPECT_FALSE(rw.last_error());
  std::unique_lock<shared_mutex> writer(rw);
  EXPECT_TRUE(writer.owns_lock());
  EXPECT_FALSE(other.try_lock_shared());
  EXPECT_EQ(other.last_error(), errc::not_acquired);
}

TEST_F(SharedMutexTest, AThreadThatHoldsItCannotLockItAgain) {
  shared_mutex rw{client_, test_key()};
  rw.lock_shared();
  const lease* held = rw.current_lease();
  ASSERT_NE(held, nullptr);
  std::string value = held->value();
  EXPECT_TRUE(test::is_invalid_argument([&] { rw.lock(); }));
  EXPECT_FALSE(rw.try_lock_shared());
  EXPECT_EQ(rw.last_error(), errc::invalid_argument);
  ASSERT_NE(rw.current_lease(), nullptr);
  EXPECT_EQ(rw.current_lease()->value(), value) << "the hold it had was dropped";
  rw.unlock();  // not a writer: nothing released
  EXPECT_EQ(rw.last_error(), errc::not_held);
  rw.unlock_shared();
  EXPECT_FALSE(rw.last_error());
  EXPECT_EQ(rw.current_lease(), nullptr);
}

TEST_F(SharedMutexTest, AsyncFormsAndKeysOfItsOwn) {
  // A fair semaphore of the same name (the same scripts) keeps keys of its own, and one name is
  // one lock: while it holds, the read-write lock is refused (NameKindTest has the rest).
  semaphore same_name{client_, test_key(), 1, {.fair = true}};
  lease permit = same_name.acquire();
  shared_mutex rw{client_, test_key()};
  std::error_code ec;
  EXPECT_FALSE(rw.try_acquire(ec));
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_FALSE(permit.release());
  auto write = rw.async_acquire(asio::use_future);
  ASSERT_EQ(write.wait_for(test::scaled(5s)), std::future_status::ready);
  lease writer = write.get();
  ASSERT_TRUE(writer);
  EXPECT_EQ(writer.key(), test_key());
  auto read = rw.async_acquire_shared(asio::use_future);
  EXPECT_EQ(read.wait_for(200ms), std::future_status::timeout);
  EXPECT_FALSE(writer.release());
  ASSERT_EQ(read.wait_for(test::scaled(5s)), std::future_status::ready);
  lease reader = read.get();
  EXPECT_TRUE(reader);
  EXPECT_GT(reader.fencing_token(), writer.fencing_token());
}

TEST_F(SharedMutexTest, BadArgumentsAndWrongTypeAreTypedErrors) {
  EXPECT_TRUE(test::is_invalid_argument([&] { shared_mutex rw(client_, ""); }));
  EXPECT_TRUE(test::is_invalid_argument([&] { shared_mutex rw(client_, "x", {.ttl = 0ms}); }));
  EXPECT_TRUE(
      test::is_invalid_argument([&] { shared_mutex rw(client_, "x", {.drift_factor = 0.9}); }));
  auto keys = shared_mutex_keys_for(test_key());
  client_.exec({"SET", keys.owners, "not a zset"});
  shared_mutex rw{client_, test_key()};
  std::error_code ec;
  EXPECT_FALSE(rw.try_acquire_shared(ec));
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_EQ(client_.exec({"GET", keys.owners}).str(), "not a zset");
  try {
    rw.lock();
    ADD_FAILURE() << "lock() over a wrong type returned";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::wrong_type);
  }
}

}  // namespace
}  // namespace dlock::test
