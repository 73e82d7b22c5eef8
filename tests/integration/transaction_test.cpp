// SPDX-License-Identifier: Apache-2.0
// Optimistic transactions against a real redis-server: exact results under contention, retry
// counts, give-up, discard, queueing errors, and a connection replaced behind WATCH's back.
#include "dlock/transaction.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;

long long integer_of(const reply& r) { return r.is_nil() ? 0 : std::stoll(r.str()); }

class TransactionTest : public ::testing::Test {
 protected:
  redis_server server_;
  client client_{server_.url()};
};

TEST_F(TransactionTest, ConcurrentReadModifyWriteEndsExactAndShowsContention) {
  constexpr int threads = 8, rounds = 25;
  transaction_runner runner{client_, {.max_attempts = 1000, .backoff = 1ms, .max_backoff = 8ms}};
  std::string key = test_key("counter");
  std::atomic<int> attempts{0}, failures{0}, most{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        std::error_code ec;
        auto r = runner.run({key}, [&](transaction& tx) {
          long long v = integer_of(tx.read({"GET", key}));
          std::this_thread::sleep_for(200us);  // widen the window between read and write
          tx.queue({"SET", key, std::to_string(v + 1)});
        }, ec);
        if (ec || !r.committed) ++failures;
        attempts += r.attempts;
        int seen = most.load();
        while (r.attempts > seen && !most.compare_exchange_weak(seen, r.attempts)) {
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(client_.exec({"GET", key}).str(), std::to_string(threads * rounds));
  // Without contention every run takes one attempt; conflicts show as extra attempts.
  EXPECT_GT(attempts, threads * rounds + threads) << "no conflicts: the test proved nothing";
  EXPECT_GT(most, 1);
  RecordProperty("attempts", attempts.load());
  RecordProperty("most_attempts_in_one_run", most.load());
}

TEST_F(TransactionTest, ReturnsExecsRepliesAndCountsOneAttemptWithoutConflict) {
  transaction_runner runner{client_};
  auto r = runner.run({test_key()}, [&](transaction& tx) {
    EXPECT_EQ(tx.attempt(), 1);
    tx.queue({"INCR", test_key()});
    tx.queue(std::vector<std::string>{"INCRBY", test_key(), "10"});
  });
  EXPECT_TRUE(r.committed);
  EXPECT_EQ(r.attempts, 1);
  ASSERT_EQ(r.replies.elements().size(), 2u);
  EXPECT_EQ(r.replies.elements()[0].integer(), 1);
  EXPECT_EQ(r.replies.elements()[1].integer(), 11);
}

TEST_F(TransactionTest, GivesUpAfterMaxAttemptsWhenEveryAttemptConflicts) {
  transaction_runner runner{client_, {.max_attempts = 3, .backoff = 1ms}};
  int bodies = 0;
  std::error_code ec;
  auto r = runner.run({test_key()}, [&](transaction& tx) {
    ++bodies;
    client_.exec({"INCR", test_key()});  // another client changes the watched key every time
    tx.queue({"SET", test_key("written"), "yes"});
  }, ec);
  EXPECT_EQ(ec, errc::transaction_aborted);
  EXPECT_FALSE(r.committed);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(bodies, 3);
  EXPECT_TRUE(client_.exec({"GET", test_key("written")}).is_nil());
  EXPECT_THROW(runner.run({test_key()}, [&](transaction& tx) {
    client_.exec({"INCR", test_key()});
    tx.queue({"SET", test_key("written"), "yes"});
  }), std::system_error);
}

TEST_F(TransactionTest, KeysWatchedMidBodyCountToo) {
  transaction_runner runner{client_, {.backoff = 1ms}};
  client_.exec({"SET", test_key("index"), test_key("item")});
  auto r = runner.run({test_key("index")}, [&](transaction& tx) {
    std::string item = tx.read({"GET", test_key("index")}).str();
    tx.watch(item);
    long long v = integer_of(tx.read({"GET", item}));
    if (tx.attempt() == 1) client_.exec({"SET", item, "100"});  // a rival write to the item
    tx.queue({"SET", item, std::to_string(v + 1)});
  });
  EXPECT_TRUE(r.committed);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(client_.exec({"GET", test_key("item")}).str(), "101");
}

TEST_F(TransactionTest, DiscardEndsWithoutWritingOrRetrying) {
  transaction_runner runner{client_};
  int bodies = 0;
  auto r = runner.run({test_key()}, [&](transaction& tx) {
    ++bodies;
    tx.queue({"SET", test_key(), "never"});
    tx.discard();
  });
  EXPECT_FALSE(r.committed);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(bodies, 1);
  EXPECT_TRUE(client_.exec({"GET", test_key()}).is_nil());
}

TEST_F(TransactionTest, MalformedQueuedWriteFailsAndNothingRuns) {
  transaction_runner runner{client_};
  std::error_code ec;
  auto r = runner.run({test_key()}, [&](transaction& tx) {
    tx.queue({"SET", test_key("a"), "1"});
    tx.queue({"SET", test_key("b")});  // wrong arity: refused when queued
  }, ec);
  EXPECT_EQ(ec, errc::server_error);
  EXPECT_FALSE(r.committed);
  EXPECT_TRUE(client_.exec({"GET", test_key("a")}).is_nil());
  // The runner stays usable.
  EXPECT_TRUE(runner.run({test_key()}, [&](transaction& tx) {
    tx.queue({"SET", test_key("a"), "1"});
  }).committed);
}

TEST_F(TransactionTest, ConnectionReplacedBehindWatchIsCaughtNotCommitted) {
  // The body's connection is killed after WATCH and a rival changes the key. A silent reconnect
  // would run MULTI/EXEC without WATCH and lose the rival's update; the name check catches it.
  transaction_runner runner{client_, {.backoff = 1ms}};
  std::string key = test_key("counter");
  client_.exec({"SET", key, "10"});
  auto r = runner.run({key}, [&](transaction& tx) {
    long long v = integer_of(tx.read({"GET", key}));
    if (tx.attempt() == 1) {
      std::string id = std::to_string(tx.read({"CLIENT", "ID"}).integer());
      client_.exec({"CLIENT", "KILL", "ID", id});
      client_.exec({"SET", key, "50"});
      std::this_thread::sleep_for(50ms);  // let the client notice the close first
    }
    tx.queue({"SET", key, std::to_string(v + 1)});
  });
  EXPECT_TRUE(r.committed);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(client_.exec({"GET", key}).str(), "51");
}

TEST_F(TransactionTest, ConnectionLostBetweenQueueAndExecRunsNothing) {
  // QUIT is not queued inside MULTI: the server answers it and closes the connection, after our
  // writes were queued and before EXEC. EXEC then goes out on a fresh connection that has no
  // MULTI (refused: the attempt is repeated), or fails in flight (connection_lost). Either way
  // the writes queued before the close never run, so the rival's update is not lost.
  transaction_runner runner{client_, {.backoff = 1ms}};
  std::string key = test_key("counter");
  client_.exec({"SET", key, "10"});
  std::error_code ec;
  auto r = runner.run({key}, [&](transaction& tx) {
    long long v = integer_of(tx.read({"GET", key}));
    tx.queue({"SET", key, std::to_string(v + 1)});
    if (tx.attempt() == 1) {
      client_.exec({"SET", key, "50"});
      tx.queue({"QUIT"});
    }
  }, ec);
  std::string value = client_.exec({"GET", key}).str();
  if (r.committed) {
    EXPECT_EQ(r.attempts, 2);
    EXPECT_EQ(value, "51");
  } else {
    EXPECT_EQ(ec, errc::connection_lost);
    EXPECT_EQ(value, "50");
  }
  RecordProperty("outcome", r.committed ? "retried" : "connection_lost");
}

TEST_F(TransactionTest, BadInputIsRejectedBeforeAnyIo) {
  client nowhere{"redis://127.0.0.1:1"};
  EXPECT_THROW((transaction_runner{nowhere, {.max_attempts = 0}}), std::system_error);
  EXPECT_THROW((transaction_runner{nowhere, {.backoff = -1ms}}), std::system_error);
  transaction_runner runner{nowhere};
  std::error_code ec;
  runner.run({}, [](transaction&) {}, ec);
  EXPECT_EQ(ec, errc::invalid_argument);
  runner.run({"k"}, {}, ec);
  EXPECT_EQ(ec, errc::invalid_argument);
}

TEST_F(TransactionTest, ExceptionFromTheBodyPropagatesAndSendsNothing) {
  transaction_runner runner{client_};
  EXPECT_THROW(runner.run({test_key()}, [&](transaction& tx) {
    tx.queue({"SET", test_key(), "never"});
    throw std::runtime_error("changed my mind");
  }), std::runtime_error);
  EXPECT_TRUE(client_.exec({"GET", test_key()}).is_nil());
  EXPECT_TRUE(runner.run({test_key()}, [&](transaction& tx) {
    tx.queue({"SET", test_key(), "ok"});
  }).committed);
}

}  // namespace
}  // namespace dlock::test
