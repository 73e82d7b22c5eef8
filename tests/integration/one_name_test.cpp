// SPDX-License-Identifier: Apache-2.0
// One name is one lock (issue 36), against a real redis-server: a mutex, a lock set, another
// client's SET NX and a read-write lock of one name exclude each other; the read-write lock's
// mark on the name lasts while it has holders and goes with the last; a waiter of one kind is
// woken when the other kind lets go; fences grow across the kinds.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <vector>
#include <string>
#include <thread>
#include <utility>

#include "dlock/key_layout.hpp"
#include "dlock/lock_set.hpp"
#include "dlock/mutex.hpp"
#include "dlock/shared_mutex.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

// The Lua scripts' mark (rw_name.lua) is the header's.
const std::string rw_mark{read_write_lock_mark};

class OneNameTest : public ::testing::Test {
 protected:
  // What the name's own key holds, or "" when nothing does.
  std::string name_value() {
    auto r = admin_.exec({"GET", test_key()});
    return r.is_nil() ? std::string() : r.str();
  }
  // Another client's lock of the name, as redis-py's Lock or node-redlock take it.
  bool foreign_set_nx(const std::string& value = "foreign-token", const char* px = "60000") {
    return !admin_.exec({"SET", test_key(), value, "NX", "PX", px}).is_nil();
  }

  // Neither a reader nor a writer gets the name through `rw`: both are refused as taken.
  void expect_readers_and_writers_kept_out(shared_mutex& rw) {
    std::error_code ec;
    EXPECT_FALSE(rw.try_acquire_shared(ec));
    EXPECT_EQ(ec, errc::not_acquired);
    EXPECT_FALSE(rw.try_acquire(ec));
    EXPECT_EQ(ec, errc::not_acquired);
  }
  // A reader's hold of the name through `rw`; an empty lease, with the reason as a failure,
  // if it is refused.
  lease reader_of(shared_mutex& rw) {
    std::error_code ec;
    lease held = rw.try_acquire_shared(ec);
    EXPECT_TRUE(held) << ec.message();
    return held;
  }

  redis_server server_;
  client admin_{server_.url()};
  client client_{server_.url()};
};

TEST_F(OneNameTest, AMutexHolderKeepsReadersAndWritersOut) {
  mutex plain{client_, test_key()};
  shared_mutex rw{client_, test_key()};
  std::error_code ec;
  lease held = plain.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  expect_readers_and_writers_kept_out(rw);
  held.release();
  lease reader = rw.try_acquire_shared(ec);
  EXPECT_TRUE(reader) << ec.message();
}

TEST_F(OneNameTest, ReadersAndAWriterKeepAMutexALockSetAndOtherClientsOut) {
  shared_mutex rw{client_, test_key()};
  mutex plain{client_, test_key()};
  lock_set set{client_, {test_key(), test_key() + "-other"}};
  std::error_code ec;
  for (bool writer : {false, true}) {
    SCOPED_TRACE(writer ? "writer" : "reader");
    lease held = writer ? rw.try_acquire(ec) : rw.try_acquire_shared(ec);
    ASSERT_TRUE(held) << ec.message();
    // The mark, alone or a solo holder's (semaphore_protocol.hpp).
    EXPECT_EQ(name_value().substr(0, std::string(rw_mark).size()), rw_mark);
    EXPECT_FALSE(plain.try_acquire(ec));
    EXPECT_EQ(ec, errc::not_acquired);
    EXPECT_FALSE(set.try_acquire(ec));
    EXPECT_EQ(ec, errc::not_acquired);
    EXPECT_FALSE(foreign_set_nx()) << "another client's SET NX took a name readers hold";
    held.release();
    EXPECT_EQ(name_value(), "") << "the mark outlived the last holder";
  }
  EXPECT_TRUE(plain.try_acquire(ec)) << ec.message();
}

TEST_F(OneNameTest, AnotherClientsHolderKeepsReadersAndWritersOut) {
  ASSERT_TRUE(foreign_set_nx());
  shared_mutex rw{client_, test_key()};
  expect_readers_and_writers_kept_out(rw);
  EXPECT_EQ(name_value(), "foreign-token") << "the read-write lock touched another's value";
}

TEST_F(OneNameTest, ALockSetHoldingTheNameKeepsReadersOut) {
  lock_set set{client_, {test_key() + "-other", test_key()}};
  shared_mutex rw{client_, test_key()};
  std::error_code ec;
  lease held = set.try_acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  EXPECT_FALSE(rw.try_acquire_shared(ec));
  EXPECT_EQ(ec, errc::not_acquired);
  held.release();
  EXPECT_TRUE(rw.try_acquire_shared(ec)) << ec.message();
}

// The mark lasts while any reader holds, whichever leaves first, and goes with the last.
TEST_F(OneNameTest, TheMarkGoesWithTheLastReader) {
  shared_mutex rw{client_, test_key(), {.ttl = 10s}};
  mutex plain{client_, test_key()};
  std::error_code ec;
  lease first = rw.try_acquire_shared(ec);
  lease second = rw.try_acquire_shared(ec);
  ASSERT_TRUE(first && second) << ec.message();
  first.release();
  EXPECT_EQ(name_value(), rw_mark);
  EXPECT_FALSE(plain.try_acquire(ec)) << "a mutex got in beside a reader";
  second.release();
  EXPECT_EQ(name_value(), "");
  EXPECT_TRUE(plain.try_acquire(ec)) << ec.message();
}

// A reader that vanishes without releasing: its mark expires with its hold, not later.
TEST_F(OneNameTest, AVanishedReadersMarkExpiresWithItsHold) {
  shared_mutex rw{client_, test_key(), {.ttl = 1500ms}};
  std::error_code ec;
  lease held = reader_of(rw);
  ASSERT_TRUE(held);
  auto pttl = admin_.exec({"PTTL", test_key()}).integer();
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 1500);
  held.detach();  // as a crashed holder: nothing is sent
  mutex plain{client_, test_key()};
  EXPECT_TRUE(eventually([&] { return bool(plain.try_acquire(ec)); }, test::scaled(5s)))
      << "the name stayed marked after the reader's hold expired";
}

// A renewal moves the mark out with the hold, so a long reader keeps the name.
TEST_F(OneNameTest, ARenewalMovesTheMarkOut) {
  shared_mutex rw{client_, test_key(), {.ttl = 2s}};
  lease held = reader_of(rw);
  ASSERT_TRUE(held);
  admin_.exec({"PEXPIRE", test_key(), "300"});  // as if the mark were about to go
  ASSERT_FALSE(held.extend()) << "extend failed";
  EXPECT_GT(admin_.exec({"PTTL", test_key()}).integer(), 1000);
}

// A reader that settles its hold short (release_after, `dlock run --min-hold`) takes the mark
// down to its new end: a mutex gets the name then, not a whole TTL later.
TEST_F(OneNameTest, AReaderSettledShortLetsAMutexInWhenItsHoldEnds) {
  shared_mutex rw{client_, test_key(), {.ttl = 30s}};
  std::error_code ec;
  lease held = reader_of(rw);
  ASSERT_TRUE(held);
  ASSERT_FALSE(held.release_after(500ms));
  EXPECT_LE(admin_.exec({"PTTL", test_key()}).integer(), 1000) << "the mark kept the long TTL";
  mutex plain{client_, test_key()};
  EXPECT_TRUE(eventually([&] { return bool(plain.try_acquire(ec)); }, test::scaled(5s)));
}

// A writer's release hands the lock to the readers queued behind it inside the script; the
// name is marked for as long as the longest of their holds before any of them is told.
TEST_F(OneNameTest, ReadersHandedTheLockByAWritersReleaseKeepTheName) {
  shared_mutex writer_lock{client_, test_key(), {.ttl = 2s}};
  std::error_code ec;
  lease writer = writer_lock.try_acquire(ec);
  ASSERT_TRUE(writer) << ec.message();
  client readers_client{server_.url()};
  shared_mutex readers{readers_client, test_key(), {.ttl = 30s, .retry_delay = test::scaled(20s)}};
  auto got = std::async(std::launch::async, [&] {
    std::error_code wait_ec;
    return readers.acquire_shared_until(std::chrono::steady_clock::now() + test::scaled(20s), wait_ec);
  });
  const auto owners = shared_mutex_keys_for(test_key()).owners;
  ASSERT_TRUE(eventually([&] { return admin_.exec({"ZCARD", owners}).integer() == 2; }))
      << "the reader never queued";
  writer.release();
  lease reader = got.get();
  ASSERT_TRUE(reader);
  EXPECT_EQ(name_value(), rw_mark);
  EXPECT_GT(admin_.exec({"PTTL", test_key()}).integer(), 20'000)
      << "the mark ends before the reader's hold";
}

// A release that finds the name's key turned into something that is no lock (a hash) says so,
// and changes nothing: the read-write lock's scripts read the name before they write.
TEST_F(OneNameTest, AReleaseThatFindsTheNameNoLockChangesNothing) {
  shared_mutex rw{client_, test_key(), {.ttl = 10s}};
  lease held = reader_of(rw);
  ASSERT_TRUE(held);
  admin_.exec({"DEL", test_key()});
  admin_.exec({"HSET", test_key(), "field", "value"});
  EXPECT_EQ(held.release(), errc::wrong_type);
  EXPECT_EQ(admin_.exec({"ZCARD", shared_mutex_keys_for(test_key()).expiries}).integer(), 1)
      << "the release wrote before it failed";
}

// The mark is nobody's owner value: a mutex that adopts it (as `dlock release NAME TOKEN` with
// the value `dlock status` shows) neither releases nor extends it, and the readers keep the name.
TEST_F(OneNameTest, TheMarkIsNobodysOwnerValue) {
  shared_mutex rw{client_, test_key(), {.ttl = 10s}};
  std::error_code ec;
  lease reader = reader_of(rw);
  ASSERT_TRUE(reader);
  mutex plain{client_, test_key()};
  lease adopted = plain.adopt(rw_mark);
  EXPECT_EQ(adopted.extend(), errc::lease_lost);
  lease again = plain.adopt(rw_mark);
  EXPECT_TRUE(again.release()) << "released the readers' mark";
  EXPECT_EQ(name_value(), rw_mark);
  EXPECT_FALSE(plain.try_acquire(ec)) << "a mutex got in beside a reader";
}

// A reader whose mark was lost (a restart, a FLUSH) while another took the name learns at its
// next renewal that it holds no more.
TEST_F(OneNameTest, AReaderThatLostTheNameIsToldAtItsRenewal) {
  shared_mutex rw{client_, test_key(), {.ttl = 10s}};
  lease held = reader_of(rw);
  ASSERT_TRUE(held);
  admin_.exec({"DEL", test_key()});
  ASSERT_TRUE(foreign_set_nx());
  EXPECT_EQ(held.extend(), errc::lease_lost);
  EXPECT_EQ(name_value(), "foreign-token");
}

// A waiting mutex is woken when the last reader leaves (it watches the marked key), and a
// waiting reader when another client's holder lets go: within a second, though both poll only
// every 20 s.
TEST_F(OneNameTest, AWaiterOfOneKindIsWokenWhenTheOtherLetsGo) {
  const auto slow_polls = test::scaled(20s);
  // Starts `acquire_until` (up to slow_polls) on another thread, lets `let_go` end the other
  // holder once the waiter's first attempt found the name taken, and expects the waiter (`who`)
  // to get in after that and within a second.
  auto expect_woken = [&](auto acquire_until, auto let_go, const std::string& who,
                          const std::string& other) {
    auto got = std::async(std::launch::async, [&] {
      std::error_code wait_ec;
      lease l = acquire_until(std::chrono::steady_clock::now() + slow_polls, wait_ec);
      return std::pair{std::move(l), std::chrono::steady_clock::now()};
    });
    std::this_thread::sleep_for(300ms);  // its first attempt found the name taken
    auto released = std::chrono::steady_clock::now();
    let_go();
    auto [held, at] = got.get();
    ASSERT_TRUE(held);
    EXPECT_GT(at, released) << who << " got in beside " << other;
    EXPECT_LT(at - released, test::scaled(1s)) << who << " waited for its poll, not the wake-up";
  };
  {
    shared_mutex rw{client_, test_key(), {.ttl = 60s}};
    lease reader = reader_of(rw);
    ASSERT_TRUE(reader);
    client waiting{server_.url()};
    mutex plain{waiting, test_key(), {.ttl = 60s, .retry_delay = slow_polls}};
    expect_woken(
        [&](auto deadline, std::error_code& ec) { return plain.acquire_until(deadline, ec); },
        [&] { reader.release(); }, "the mutex", "the reader");
  }
  {
    ASSERT_TRUE(foreign_set_nx());
    client waiting{server_.url()};
    shared_mutex rw{waiting, test_key(), {.ttl = 60s, .retry_delay = slow_polls}};
    expect_woken(
        [&](auto deadline, std::error_code& ec) { return rw.acquire_shared_until(deadline, ec); },
        [&] { admin_.exec({"DEL", test_key()}); }, "the reader", "another client's holder");
  }
}

// One fencing counter for every mode of the name: each holder's token is above the last one's,
// whatever kind either was.
TEST_F(OneNameTest, FencesGrowAcrossTheKinds) {
  mutex plain{client_, test_key()};
  shared_mutex rw{client_, test_key()};
  std::error_code ec;
  std::uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    lease a = plain.try_acquire(ec);
    ASSERT_TRUE(a) << ec.message();
    EXPECT_GT(a.fencing_token(), last);
    last = a.fencing_token();
    a.release();
    lease w = rw.try_acquire(ec);
    ASSERT_TRUE(w) << ec.message();
    EXPECT_GT(w.fencing_token(), last);
    last = w.fencing_token();
    w.release();
    lease r = rw.try_acquire_shared(ec);
    ASSERT_TRUE(r) << ec.message();
    EXPECT_GT(r.fencing_token(), last);
    last = r.fencing_token();
    r.release();
  }
}

// Many threads, each with a client of its own, taking one name every way at random for 2 s:
// mutexes, lock sets that name it, writers and readers. Readers are seen together; a mutex, a
// set or a writer never with anyone; each exclusive hold's fence is above every hold's before
// it, each reader's above the last exclusive hold's.
TEST_F(OneNameTest, EveryModeOfANameAtOnceNeverOverlapsAndFencesGrow) {
  std::atomic<int> readers{0}, exclusive{0}, most_readers{0}, overlaps{0}, fence_faults{0};
  std::atomic<std::uint64_t> last_exclusive_fence{0}, highest_fence{0};
  std::array<std::atomic<int>, 4> holds{};  // mutex, set, writer, reader
  const auto until = std::chrono::steady_clock::now() + 2s;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      client own{server_.url()};
      mutex plain{own, test_key(), {.ttl = 10s, .retry_delay = 5ms}};
      lock_set set{own, {test_key(), test_key() + "-" + std::to_string(t)}, {.ttl = 10s, .retry_delay = 5ms}};
      shared_mutex rw{own, test_key(), {.ttl = 10s, .retry_delay = 5ms}};
      std::mt19937 random(static_cast<unsigned>(t));
      while (std::chrono::steady_clock::now() < until) {
        const int kind = std::array{0, 1, 2, 3, 3, 3, 3, 3}[random() % 8];
        const auto deadline = std::chrono::steady_clock::now() + test::scaled(30s);
        std::error_code ec;
        lease held = kind == 0   ? plain.acquire_until(deadline, ec)
                     : kind == 1 ? set.acquire_until(deadline, ec)
                     : kind == 2 ? rw.acquire_until(deadline, ec)
                                 : rw.acquire_shared_until(deadline, ec);
        if (!held) {
          ADD_FAILURE() << "kind " << kind << ": " << ec.message();
          return;
        }
        ++holds[static_cast<std::size_t>(kind)];
        const auto fence = held.fencing_token();
        if (kind < 3) {
          if (fence <= highest_fence.load()) ++fence_faults;
          if (++exclusive != 1 || readers.load() != 0) ++overlaps;
          std::this_thread::sleep_for(2ms);
          last_exclusive_fence = fence;
          --exclusive;
        } else {
          if (fence <= last_exclusive_fence.load()) ++fence_faults;
          int r = ++readers;
          if (exclusive.load() != 0) ++overlaps;
          raise_to(most_readers, r);
          std::this_thread::sleep_for(3ms);
          --readers;
        }
        raise_to(highest_fence, fence);
        EXPECT_FALSE(held.release());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(fence_faults.load(), 0);
  EXPECT_GT(most_readers.load(), 1) << "readers never held together";
  for (std::size_t k = 0; k < holds.size(); ++k) EXPECT_GT(holds[k].load(), 0) << "kind " << k;
  EXPECT_EQ(name_value(), "") << "something still holds the name";
}

// A name whose key is no lock at all (a hash): the read-write lock says so, and writes nothing.
TEST_F(OneNameTest, ANameThatIsNoLockIsRefusedWithWrongType) {
  admin_.exec({"HSET", test_key(), "field", "value"});
  shared_mutex rw{client_, test_key()};
  std::error_code ec;
  EXPECT_FALSE(rw.try_acquire_shared(ec));
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_EQ(admin_.exec({"EXISTS", shared_mutex_keys_for(test_key()).owners}).integer(), 0);
}

}  // namespace
}  // namespace dlock::test
