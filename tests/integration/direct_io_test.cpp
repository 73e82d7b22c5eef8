// SPDX-License-Identifier: Apache-2.0
// The blocking fast path (connection::try_exchange_direct, client::exec, run_script_direct)
// against real redis-server processes and a scripted non-Redis peer: blocking calls take it,
// replies never shift between direct and queued requests, pipelined commands, a server that
// closes an idle connection (CLIENT KILL, crash and restart), a hung server, bytes that are not
// RESP, and the I/O thread waiting for, or closing during, a caller's exchange.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "access.hpp"
#include "dlock/client.hpp"
#include "dlock/error.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "net/connection.hpp"
#include "script.hpp"
#include "support/checks.hpp"
#include "support/direct_path.hpp"
#include "support/fake_peer.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// The I/O thread gave `c`'s socket up: a blocking call now would take it (nothing is sent).
bool socket_given_up(const client& c) {
  const auto* conn = detail::access::request_connection(c);
  return !conn->occupied() && !conn->dormant();
}

// How often dlock's I/O thread ("dlock-io") has been switched out so far (voluntary and not:
// each wake-up ends in one); -1 when it cannot be found.
long long io_thread_switches() {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string name;
    std::getline(std::ifstream(task.path() / "comm"), name);
    if (name != "dlock-io") continue;
    std::ifstream status(task.path() / "status");
    long long sum = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.find("ctxt_switches:") != std::string::npos) {
        sum += std::stoll(line.substr(line.find(':') + 1));
      }
    }
    return sum;
  }
  return -1;
}

class DirectIoTest : public ::testing::Test {
 protected:
  // A blocking exec's outcome: its error, its reply and how long it took.
  struct exchange {
    std::error_code ec;
    reply r;
    milliseconds took;
  };
  // Pauses the server, then runs c.exec(ECHO "direct") on another thread and waits until that
  // exchange has taken the socket directly: it stays there until the server resumes or its
  // deadline passes.
  std::future<exchange> pause_during_a_direct_exchange(client& c) {
    server_.pause();
    auto before = direct_count();
    auto blocking = std::async(std::launch::async, [&c] {
      exchange x;
      auto t0 = steady::now();
      x.r = c.exec({"ECHO", "direct"}, x.ec);
      x.took = since(t0);
      return x;
    });
    EXPECT_TRUE(test::eventually([&] { return direct_count() - before == 1; }));
    return blocking;
  }

  redis_server server_;
};

TEST_F(DirectIoTest, BlockingExecTakesTheDirectPath) {
  client c{server_.url()};
  ASSERT_EQ(c.exec({"PING"}).str(), "PONG");  // connects on the I/O thread
  ASSERT_TRUE(until_direct(c));
  auto before = direct_count();
  for (int i = 0; i < 200; ++i) {
    std::string p = "echo-" + std::to_string(i);
    ASSERT_EQ(c.exec({"ECHO", p}).str(), p);
  }
  // One thread, nothing else on the connection: every call after the first is direct.
  EXPECT_EQ(direct_count() - before, 200u);

  // Error replies map to their errc and keep the server's text, as on the async path.
  EXPECT_EQ(c.exec({"SET", test_key(), "text"}).str(), "OK");
  std::error_code ec;
  reply r = c.exec({"INCR", test_key()}, ec);
  EXPECT_EQ(ec, errc::server_error) << ec.message();
  EXPECT_TRUE(r.is_error());
  r = c.exec({"LPUSH", test_key(), "x"}, ec);
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_NE(r.str().find("WRONGTYPE"), std::string::npos) << r.to_string();
  EXPECT_EQ(c.exec({"ECHO", "still-paired"}).str(), "still-paired");
}

// A lease kept in a thread_local, made before the thread's first blocking call, is released
// on the direct path at thread exit, after the thread's reusable request buffer was destroyed
// (thread_locals go in reverse order): the release must not write into that buffer (ASan saw
// a heap-use-after-free there), and it still goes out, so the lock is free at once.
TEST_F(DirectIoTest, ALeaseInAThreadLocalIsReleasedAtThreadExit) {
  client c{server_.url()};
  ASSERT_EQ(c.exec({"PING"}).str(), "PONG");
  ASSERT_TRUE(until_direct(c));
  mutex m{c, test_key(), {.ttl = 30s}};
  auto before = direct_count();
  std::uint64_t after_acquire = 0;
  std::thread([&m, &after_acquire] {
    thread_local std::optional<lease> held;
    held.emplace();  // constructed before the thread's first dlock call
    held = m.acquire();
    EXPECT_TRUE(*held);
    after_acquire = direct_count();
  }).join();
  EXPECT_GT(after_acquire, before) << "acquired on the direct path";
  EXPECT_GE(direct_count() - after_acquire, 1u) << "released on the direct path at exit";
  std::error_code ec;
  lease again = m.try_acquire(ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(again);
}

// A caller reading its reply off the socket must not wake the I/O thread (the socket leaves
// its epoll set while callers drive it): that was two wake-ups per blocking lock cycle, and
// a core's worth of thread switches when many threads lock.
TEST_F(DirectIoTest, BlockingCallsDoNotWakeTheIoThread) {
  client c{server_.url()};
  mutex m{c, test_key()};
  m.lock();  // connects and loads the scripts on the I/O thread
  m.unlock();
  ASSERT_TRUE(until_direct(c));
  auto before_switches = io_thread_switches();
  ASSERT_GE(before_switches, 0) << "no thread named dlock-io in /proc/self/task";
  auto before = direct_count();
  constexpr int cycles = 300;
  for (int i = 0; i < cycles; ++i) {
    m.lock();
    m.unlock();
  }
  ASSERT_EQ(direct_count() - before, 2u * cycles) << "the cycles did not all run directly";
  // A few for timers and the one request to leave the epoll set; not one per exchange.
  EXPECT_LT(io_thread_switches() - before_switches, cycles / 10);
  // The I/O thread still takes the socket back when it needs it, and gives it up again.
  std::promise<std::string> got;
  c.async_exec({"ECHO", "async"}, [&](std::error_code ec, reply r) {
    got.set_value(ec ? ec.message() : r.str());
  });
  EXPECT_EQ(got.get_future().get(), "async");
  ASSERT_TRUE(until_direct(c));
  EXPECT_EQ(c.exec({"ECHO", "direct"}).str(), "direct");
}

TEST_F(DirectIoTest, LargeReplyCrossesManyReads) {
  client c{server_.url()};
  ASSERT_TRUE(until_direct(c));
  std::string big(1 << 20, 'x');
  for (std::size_t i = 0; i < big.size(); i += 7) big[i] = static_cast<char>('a' + i % 26);
  auto before = direct_count();
  EXPECT_EQ(c.exec({"SET", test_key(), big}).str(), "OK");
  EXPECT_EQ(c.exec({"GET", test_key()}).str(), big);
  EXPECT_EQ(direct_count() - before, 2u);
}

TEST_F(DirectIoTest, PipelinedCommandIsAnArrayOfReplies) {
  client c{server_.url()};
  ASSERT_TRUE(until_direct(c));
  const std::string k = test_key("k"), n = test_key("n");
  auto before = direct_count();
  command cmd{"SET", k, "v"};
  cmd.then({"GET", k}).then({"INCR", n}).then({"INCR", k}).then({"INCR", n});
  std::error_code ec;
  reply r = c.exec(std::move(cmd), ec);
  EXPECT_EQ(direct_count() - before, 1u);
  // Like the async path: the request succeeded; one element is an error reply.
  EXPECT_FALSE(ec) << ec.message();
  ASSERT_TRUE(r.is_array()) << r.to_string();
  ASSERT_EQ(r.elements().size(), 5u);
  EXPECT_EQ(r.elements()[0].str(), "OK");
  EXPECT_EQ(r.elements()[1].str(), "v");
  EXPECT_EQ(r.elements()[2].integer(), 1);
  EXPECT_TRUE(r.elements()[3].is_error());
  EXPECT_EQ(r.elements()[4].integer(), 2);
  EXPECT_EQ(c.exec({"ECHO", "next"}).str(), "next");
}

// Blocking calls (often direct) and async calls (queued on the I/O thread) from many threads on
// one client: every reply is the one for its own request. Each thread INCRs keys of its own,
// so the expected value of every reply is known.
TEST_F(DirectIoTest, ManyThreadsMixingBlockingAndAsyncNeverShiftReplies) {
  client c{server_.url(), {.request_timeout = 10s}};
  ASSERT_EQ(c.exec({"PING"}).str(), "PONG");
  constexpr int threads = 8, rounds = 2000;
  std::atomic<int> wrong{0}, errors{0};
  auto before = direct_count();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const std::string sync_key = test_key("sync-" + std::to_string(t));
      const std::string async_key = test_key("async-" + std::to_string(t));
      std::int64_t sync_n = 0, async_n = 0;
      for (int i = 0; i < rounds; ++i) {
        if (t % 2 == 0 || i % 3 != 0) {
          std::error_code ec;
          reply r = c.exec({"INCR", sync_key}, ec);
          if (ec) ++errors;
          if (r.integer() != ++sync_n) ++wrong;
        } else {
          // Three async INCRs in flight at once, then the replies in order.
          std::vector<std::future<std::int64_t>> f;
          for (int j = 0; j < 3; ++j) {
            auto p = std::make_shared<std::promise<std::int64_t>>();
            f.push_back(p->get_future());
            detail::access::start_exec(
                c, {"INCR", async_key}, 10s,
                [p](std::error_code ec, reply r) { p->set_value(ec ? -1 : r.integer()); });
          }
          for (auto& one : f) {
            if (one.wait_for(15s) != std::future_status::ready) {
              ++errors;
              continue;
            }
            if (one.get() != ++async_n) ++wrong;
          }
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(direct_count() - before, 0u) << "no blocking call took the direct path";
  // The server agrees with what the threads counted.
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(c.exec({"GET", test_key("sync-" + std::to_string(t))}).str(),
              std::to_string(t % 2 == 0 ? rounds : rounds - (rounds + 2) / 3));
  }
}

// A thread that sends A asynchronously and then makes blocking call B sees A run first: the
// direct path never overtakes a request already submitted.
TEST_F(DirectIoTest, BlockingCallNeverOvertakesThisThreadsAsyncRequest) {
  client c{server_.url()};
  ASSERT_TRUE(until_direct(c));
  std::atomic<int> failed{0};
  for (int i = 0; i < 300; ++i) {
    std::string v = std::to_string(i);
    detail::access::start_exec(c, {"SET", test_key(), v}, 2s, [&failed](std::error_code ec, reply) {
      if (ec) ++failed;
    });
    ASSERT_EQ(c.exec({"GET", test_key()}).str(), v) << "round " << i;
    if (i % 3 == 0) std::this_thread::sleep_for(100us);  // sometimes idle again first
  }
  EXPECT_EQ(failed.load(), 0);
}

TEST_F(DirectIoTest, ClientKillWhileIdleIsNoticedAndTheNextCallReconnects) {
  client c{server_.url()};
  client other{server_.url()};
  ASSERT_TRUE(until_direct(c));
  std::int64_t id = c.exec({"CLIENT", "ID"}).integer();
  EXPECT_EQ(other.exec({"CLIENT", "KILL", "ID", std::to_string(id)}).integer(), 1);
  // Blocking: the dropped socket is seen before anything is written on it.
  std::error_code ec;
  reply r = c.exec({"CLIENT", "ID"}, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_NE(r.integer(), id);
  EXPECT_EQ(c.exec({"ECHO", "after-kill"}).str(), "after-kill");

  // Async: the I/O thread checks an idle socket the same way before writing.
  ASSERT_TRUE(until_direct(c));
  id = c.exec({"CLIENT", "ID"}).integer();
  EXPECT_EQ(other.exec({"CLIENT", "KILL", "ID", std::to_string(id)}).integer(), 1);
  auto p = std::make_shared<std::promise<std::pair<std::error_code, reply>>>();
  auto f = p->get_future();
  detail::access::start_exec(c, {"CLIENT", "ID"}, 2s, [p](std::error_code e, reply rr) {
    p->set_value({e, std::move(rr)});
  });
  ASSERT_EQ(f.wait_for(test::scaled(5s)), std::future_status::ready);
  auto [e2, r2] = f.get();
  EXPECT_FALSE(e2) << e2.message();
  EXPECT_NE(r2.integer(), id);
}

TEST_F(DirectIoTest, ServerCrashAndRestartWhileIdleNeverHangs) {
  const auto timeout = 500ms;
  client c{server_.url(), {.request_timeout = timeout, .reconnect_backoff_min = 10ms,
                           .reconnect_backoff_max = 50ms}};
  ASSERT_TRUE(until_direct(c));
  server_.kill();
  server_.restart();
  std::error_code ec;
  auto t0 = steady::now();
  reply r = c.exec({"PING"}, ec);
  EXPECT_LT(since(t0), timeout + test::scaled(500ms));
  if (ec) {
    EXPECT_TRUE(ec == errc::connection_lost || ec == errc::node_unreachable) << ec.message();
  } else {
    EXPECT_EQ(r.str(), "PONG");
  }
  EXPECT_EQ(c.exec({"ECHO", "after-restart"}).str(), "after-restart");

  // Killed and not back yet: a typed error at once, not a hang; then it recovers.
  ASSERT_TRUE(until_direct(c));
  server_.kill();
  t0 = steady::now();
  c.exec({"PING"}, ec);
  EXPECT_TRUE(ec == errc::connection_lost || ec == errc::node_unreachable) << ec.message();
  EXPECT_LT(since(t0), timeout + test::scaled(500ms));
  server_.restart();
  EXPECT_TRUE(test::eventually([&] { return c.exec({"PING"}, ec).str() == "PONG"; }, 5s));
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(c.exec({"ECHO", "back"}).str(), "back");
}

TEST_F(DirectIoTest, HungServerTimesOutByTheDeadlineAndTheNextCallWorks) {
  const auto timeout = 300ms;
  client c{server_.url(), {.request_timeout = timeout}};
  ASSERT_TRUE(until_direct(c));
  server_.pause();
  auto before = direct_count();
  std::error_code ec;
  auto t0 = steady::now();
  reply r = c.exec({"ECHO", "during"}, ec);
  auto took = since(t0);
  EXPECT_EQ(direct_count() - before, 1u);
  EXPECT_EQ(ec, errc::timeout) << ec.message();
  EXPECT_FALSE(r.is_string()) << r.to_string();
  EXPECT_GE(took, timeout - 5ms);
  EXPECT_LT(took, timeout + test::scaled(250ms));
  server_.resume();
  // The late reply to "during" goes to the closed socket, never to these.
  for (int i = 0; i < 20; ++i) {
    std::string p = "after-" + std::to_string(i);
    EXPECT_EQ(c.exec({"ECHO", p}).str(), p);
  }
}

// While a caller's exchange holds the socket, an async request waits for it and goes out on
// the same connection as soon as the exchange is over.
TEST_F(DirectIoTest, AsyncRequestWaitsForADirectExchange) {
  // Deadlines far beyond the pause, however long the waits below take.
  const auto timeout = test::scaled(10s);
  client c{server_.url(), {.request_timeout = timeout}};
  ASSERT_TRUE(until_direct(c));
  std::int64_t id = c.exec({"CLIENT", "ID"}).integer();
  auto before = direct_count();
  auto blocking = pause_during_a_direct_exchange(c);
  auto p = std::make_shared<std::promise<std::pair<std::error_code, reply>>>();
  auto f = p->get_future();
  detail::access::start_exec(c, {"CLIENT", "ID"}, timeout, [p](std::error_code e, reply rr) {
    p->set_value({e, std::move(rr)});
  });
  std::this_thread::sleep_for(100ms);  // a negative check: no answer may come meanwhile
  EXPECT_EQ(f.wait_for(0s), std::future_status::timeout) << "answered while paused?";
  server_.resume();
  auto [ec, r, took] = blocking.get();
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(r.str(), "direct");
  EXPECT_EQ(direct_count() - before, 1u);
  ASSERT_EQ(f.wait_for(test::scaled(5s)), std::future_status::ready);
  auto [e2, r2] = f.get();
  EXPECT_FALSE(e2) << e2.message();
  EXPECT_EQ(r2.integer(), id);  // the same connection
}

// disconnect() during a caller's exchange: the close waits for the caller (its fd stays
// valid), then happens; the next call reconnects.
TEST_F(DirectIoTest, DisconnectDuringADirectExchangeWaitsForIt) {
  const auto timeout = 400ms;
  client c{server_.url(), {.request_timeout = timeout}};
  ASSERT_TRUE(until_direct(c));
  std::int64_t id = c.exec({"CLIENT", "ID"}).integer();
  auto blocking = pause_during_a_direct_exchange(c);
  c.disconnect();
  auto [ec, echoed, took] = blocking.get();
  EXPECT_EQ(ec, errc::timeout) << ec.message();  // it kept its socket until its deadline
  EXPECT_LT(took, timeout + test::scaled(250ms));
  server_.resume();
  reply r = c.exec({"CLIENT", "ID"}, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_NE(r.integer(), id);
}

// Blocking calls from many threads at once join the caller that holds the socket: every call
// goes out on the shared connection, none through the I/O thread, and each gets its own reply.
TEST_F(DirectIoTest, BlockingCallsFromManyThreadsShareTheConnectionAndKeepTheirReplies) {
  client c{server_.url(), {.request_timeout = test::scaled(10s)}};
  ASSERT_TRUE(until_direct(c));
  std::int64_t id = c.exec({"CLIENT", "ID"}).integer();
  constexpr int threads = 8, rounds = 1000;
  std::atomic<int> wrong{0}, errors{0}, elsewhere{0};
  auto before = direct_count();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const std::string key = test_key("n-" + std::to_string(t));
      for (int i = 1; i <= rounds; ++i) {
        std::error_code ec;
        reply r = i % 100 == 0 ? c.exec({"CLIENT", "ID"}, ec) : c.exec({"INCR", key}, ec);
        if (ec) ++errors;
        if (i % 100 == 0) {
          if (r.integer() != id) ++elsewhere;
        } else if (r.integer() != i - i / 100) {
          ++wrong;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(elsewhere.load(), 0) << "calls went out on another connection";
  EXPECT_EQ(direct_count() - before, std::uint64_t{threads} * rounds)
      << "calls queued on the I/O thread instead of joining the caller holding the socket";
}

// While the server hangs, callers that joined the one holding the socket all end with a timeout
// (their requests were written: the outcome is unknown, the socket goes), and the calls after
// the server resumes get their own replies, never the late ones.
TEST_F(DirectIoTest, HungServerTimesOutEveryJoinedCallAndTheNextCallsWork) {
  const auto timeout = 300ms;
  client c{server_.url(), {.request_timeout = timeout}};
  ASSERT_TRUE(until_direct(c));
  std::int64_t id = c.exec({"CLIENT", "ID"}).integer();
  server_.pause();
  auto before = direct_count();
  std::vector<std::future<std::error_code>> calls;
  for (int t = 0; t < 4; ++t) {
    calls.push_back(std::async(std::launch::async, [&c, t] {
      std::error_code ec;
      c.exec({"ECHO", "during-" + std::to_string(t)}, ec);
      return ec;
    }));
  }
  for (auto& f : calls) {
    ASSERT_EQ(f.wait_for(test::scaled(10s)), std::future_status::ready) << "a joined call hangs";
    EXPECT_EQ(f.get(), errc::timeout);
  }
  EXPECT_GE(direct_count() - before, 1u);
  server_.resume();
  for (int i = 0; i < 20; ++i) {
    std::string p = "after-" + std::to_string(i);
    EXPECT_EQ(c.exec({"ECHO", p}).str(), p);
  }
  EXPECT_NE(c.exec({"CLIENT", "ID"}).integer(), id) << "the timed-out socket was kept";
}

// A call that joins a session while its reader waits for a later deadline is still failed by its
// own: the reader looks at the FIFO's deadlines again while it waits. Its request was written,
// so every request on the socket ends with a timeout (outcome unknown), as on the async path.
TEST_F(DirectIoTest, AJoinedCallDueBeforeTheReaderTimesOutByItsOwnDeadline) {
  const auto timeout = test::scaled(10s);
  client c{server_.url(), {.request_timeout = timeout}};
  ASSERT_TRUE(until_direct(c));
  std::int64_t id = c.exec({"CLIENT", "ID"}).integer();
  auto blocking = pause_during_a_direct_exchange(c);
  std::error_code ec;
  reply out;
  auto before = direct_count();
  auto t0 = steady::now();
  EXPECT_TRUE(detail::access::try_exec_direct(c, {"ECHO", "early"}, 200ms, out, ec));
  auto took = since(t0);
  EXPECT_EQ(direct_count() - before, 1u);
  EXPECT_EQ(ec, errc::timeout) << ec.message();
  EXPECT_LT(took, timeout / 2) << "it waited for the reader's deadline";
  auto [first_ec, first, first_took] = blocking.get();
  EXPECT_EQ(first_ec, errc::timeout) << first_ec.message();
  server_.resume();
  EXPECT_EQ(c.exec({"ECHO", "after"}).str(), "after");
  EXPECT_NE(c.exec({"CLIENT", "ID"}).integer(), id) << "the timed-out socket was kept";
}

// disconnect() while callers share the socket: the close waits until the session is over (the
// fd stays valid for every caller), and the next call reconnects.
TEST_F(DirectIoTest, DisconnectDuringASessionWaitsForAllItsCallers) {
  const auto timeout = 400ms;
  client c{server_.url(), {.request_timeout = timeout}};
  ASSERT_TRUE(until_direct(c));
  std::int64_t id = c.exec({"CLIENT", "ID"}).integer();
  auto blocking = pause_during_a_direct_exchange(c);
  auto before = direct_count();
  auto joined = std::async(std::launch::async, [&c] {
    std::error_code e;
    c.exec({"ECHO", "joined"}, e);
    return e;
  });
  EXPECT_TRUE(test::eventually([&] { return direct_count() - before == 1; }));
  c.disconnect();
  auto [ec, echoed, took] = blocking.get();
  EXPECT_EQ(ec, errc::timeout) << ec.message();
  EXPECT_EQ(joined.get(), errc::timeout);
  server_.resume();
  reply r = c.exec({"CLIENT", "ID"}, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_NE(r.integer(), id);
}

TEST(DirectIoPeerTest, BytesThatAreNotRespAreAProtocolErrorAndDropTheConnection) {
  test::fake_peer peer{test::fake_peer::mode::pong_then_garbage};
  // A request timeout far above the bound below: only the garbage can end the call in time.
  client c{peer.url(), {.request_timeout = test::scaled(10s), .reconnect_backoff_min = 1s}};
  EXPECT_EQ(c.exec({"PING"}).str(), "PONG");
  ASSERT_TRUE(test::eventually([&] { return socket_given_up(c); }))
      << "the I/O thread kept the socket";
  auto before = direct_count();
  std::error_code ec;
  auto t0 = steady::now();
  c.exec({"PING"}, ec);
  EXPECT_EQ(direct_count() - before, 1u);
  EXPECT_EQ(ec, errc::protocol_error) << ec.message();
  EXPECT_LT(since(t0), test::scaled(1s));
  test::eventually([&] { return peer.closed() != 0; }, 3s);
  EXPECT_EQ(peer.closed(), 1) << "the connection stayed open after the protocol error";
}

TEST_F(DirectIoTest, RunScriptDirectFallsBackFromNoscriptToEval) {
  client c{server_.url()};
  ASSERT_TRUE(until_direct(c));
  const std::string key = test_key();
  ASSERT_EQ(c.exec({"SCRIPT", "FLUSH"}).str(), "OK");
  std::error_code ec;
  reply out;
  auto before = direct_count();
  // fenced_set: KEYS = data key, high-water key; ARGV = token, value.
  ASSERT_TRUE(detail::run_script_direct(c, detail::fenced_set_script, {key, key + ":high"},
                                        {"5", "v5"}, 1s, ec, out));
  EXPECT_FALSE(ec) << ec.message() << " " << out.to_string();
  EXPECT_EQ(direct_count() - before, 2u);  // EVALSHA (NOSCRIPT), then EVAL
  before = direct_count();
  ASSERT_TRUE(detail::run_script_direct(c, detail::fenced_set_script, {key, key + ":high"},
                                        {"7", "v7"}, 1s, ec, out));
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(direct_count() - before, 1u);  // cached now: EVALSHA only
  EXPECT_EQ(c.exec({"GET", key}).str(), "v7");
}

TEST(DirectIoNotTakenTest, NotTakenOnAnUnconnectedConnection) {
  redis_server s;
  client c{s.url()};
  std::error_code ec;
  reply out;
  // Never connected: the I/O thread owns the socket, nothing is sent.
  EXPECT_FALSE(detail::access::try_exec_direct(c, {"PING"}, 1s, out, ec));
  EXPECT_FALSE(ec);
  EXPECT_FALSE(detail::run_script_direct(c, detail::fenced_set_script, {"a", "b"}, {"1", "x"}, 1s,
                                         ec, out));
}

// The callers wired to the direct path: a single-node lock's first acquire round and its
// release, and a semaphore permit's release; each is one exchange on the caller's thread, and
// does what the async path would (checked on the server).
TEST_F(DirectIoTest, LockAcquireAndReleaseAndPermitReleaseTakeTheDirectPath) {
  client c{server_.url()};
  mutex m{c, test_key()};
  semaphore sem{c, test_key("sem"), 2};
  // One cycle of each first: a script's first run is EVALSHA, NOSCRIPT, then EVAL (two).
  m.acquire().release();
  sem.acquire().release();
  ASSERT_TRUE(until_direct(c));
  auto before = direct_count();
  std::error_code ec;
  lease held = m.acquire(ec);
  ASSERT_TRUE(held) << ec.message();
  EXPECT_EQ(direct_count() - before, 1u);
  EXPECT_EQ(c.exec({"GET", test_key()}).str(), held.value());
  EXPECT_GT(held.remaining(), 0ms);
  ASSERT_TRUE(until_direct(c));
  before = direct_count();
  EXPECT_FALSE(held.release());
  EXPECT_EQ(direct_count() - before, 1u);
  EXPECT_TRUE(c.exec({"GET", test_key()}).is_nil());

  lease permit = sem.acquire(ec);
  ASSERT_TRUE(permit) << ec.message();
  ASSERT_TRUE(until_direct(c));
  before = direct_count();
  EXPECT_FALSE(permit.release());
  EXPECT_EQ(direct_count() - before, 1u);
  EXPECT_EQ(permit.release(), std::error_code());  // empty now: a no-op, as before
}

// A busy lock: the direct round answers "taken" for a one-attempt try without a second round.
TEST_F(DirectIoTest, TryLockOnAHeldLockIsOneDirectRound) {
  client c{server_.url()};
  mutex holder{c, test_key()};
  ASSERT_TRUE(holder.try_lock());
  mutex other{c, test_key()};
  ASSERT_TRUE(until_direct(c));
  auto before = direct_count();
  node_results votes;
  std::error_code ec;
  EXPECT_FALSE(other.try_acquire(&votes, ec));
  EXPECT_EQ(ec, errc::not_acquired);
  EXPECT_EQ(direct_count() - before, 1u);
  ASSERT_EQ(votes.size(), 1u);
  EXPECT_EQ(votes[0].outcome, node_result::vote::taken);
  EXPECT_GT(votes[0].holder_ttl_ms, 0);
  holder.unlock();
}

// The connections of `c` beside its shared one (whose id CLIENT ID asks on it) that served one
// of the library's lock calls last: a script (EVALSHA, EVAL), or the plain commands a free
// lock's first try is (the last of them: MGET). Spares serve only while the shared connection
// is busy, and callers then join each other's sessions on one spare before another opens.
int spares_that_served(client& c, client& observer) {
  std::string shared = "id=" + std::to_string(c.exec({"CLIENT", "ID"}).integer()) + " ";
  std::istringstream list(observer.exec({"CLIENT", "LIST"}).str());
  int n = 0;
  for (std::string line; std::getline(list, line);) {
    bool served = line.find(" cmd=eval") != std::string::npos ||
                  line.find(" cmd=mget ") != std::string::npos;
    if (served && line.rfind(shared, 0) != 0) ++n;
  }
  return n;
}

TEST(BlockingConnectionsTest, OutOfRangeIsInvalidArgument) {
  for (const char* url : {"redis://127.0.0.1:1", "redis-cluster://127.0.0.1:1"}) {
    for (int bad : {-1, 17}) {
      client_options o;
      o.blocking_connections = bad;
      try {
        client c{url, o};
        ADD_FAILURE() << url << " " << bad << " was accepted";
      } catch (const std::system_error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument) << url << " " << bad;
      }
    }
  }
}

// Runs `cycles` lock cycles on each of 8 threads, each on its own key, while chains of async
// PINGs keep the shared connection's I/O thread busy: blocking calls find it occupied and make
// their round trips on spare connections (opened one at a time), as they do beside a program's
// async work. Without that traffic the threads would join each other's sessions on the shared
// connection, and whether a spare serves a call would depend on the machine's timing. Returns
// the cycles that failed.
int lock_from_threads(client& c, int cycles) {
  std::atomic<bool> stop{false};
  constexpr int chains = 4;
  std::promise<void> chains_done;
  auto running = std::make_shared<std::atomic<int>>(chains);
  std::function<void(std::error_code, reply)> again = [&](std::error_code, reply) {
    if (!stop.load()) {
      c.async_exec({"PING"}, again);
    } else if (running->fetch_sub(1) == 1) {
      chains_done.set_value();
    }
  };
  for (int i = 0; i < chains; ++i) c.async_exec({"PING"}, again);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&c, &failures, t, cycles] {
      mutex m{c, test_key("spare" + std::to_string(t))};
      for (int i = 0; i < cycles; ++i) {
        std::error_code ec;
        lease l = m.acquire(ec);
        if (!l || l.release()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  stop = true;
  chains_done.get_future().wait();
  return failures.load();
}

// Threads that lock while the shared connection is busy make their round trips on spare
// connections (client_options::blocking_connections), never more of them than allowed; with
// none allowed, every call stays on the shared one.
TEST_F(DirectIoTest, BlockingLockCallsOpenAtMostTheAllowedSpareConnections) {
  for (int allowed : {0, 2}) {
    client_options o;
    o.blocking_connections = allowed;
    client c{server_.url(), o};
    EXPECT_EQ(lock_from_threads(c, 300), 0);
    client observer{server_.url()};
    int served = spares_that_served(c, observer);
    if (allowed == 0) {
      EXPECT_EQ(served, 0);
    } else {
      EXPECT_GE(served, 1) << "no spare connection served a call";
      EXPECT_LE(served, allowed);
    }
    observer.exec({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  }
}

// A thread's async command sent before its blocking release runs before that release, also
// when spare connections exist (a review found 904 of 2000 overtaken while the shared
// connection carried the thread's own command): the command sees the lock still held.
TEST_F(DirectIoTest, ABlockingReleaseNeverOvertakesThisThreadsAsyncCommand) {
  client c{server_.url()};
  ASSERT_EQ(lock_from_threads(c, 200), 0);  // opens spares
  client observer{server_.url()};
  ASSERT_GE(spares_that_served(c, observer), 1);
  mutex m{c, test_key()};
  constexpr int cycles = 500;
  std::vector<std::future<long long>> seen;
  for (int i = 0; i < cycles; ++i) {
    lease l = m.acquire();
    auto p = std::make_shared<std::promise<long long>>();
    seen.push_back(p->get_future());
    c.async_exec({"EXISTS", test_key()}, [p](std::error_code ec, reply r) {
      p->set_value(ec || !r.is_integer() ? -1 : r.integer());
    });
    EXPECT_FALSE(l.release());
  }
  int overtaken = 0;
  for (auto& f : seen) overtaken += f.get() != 1;
  EXPECT_EQ(overtaken, 0) << "of " << cycles;
}

// A spare that dropped (a restart, CLIENT KILL, the server's idle timeout) is asked to
// reconnect when the others are busy: the feature does not switch itself off.
TEST_F(DirectIoTest, DroppedSpareConnectionsComeBack) {
  client_options o;
  o.blocking_connections = 2;
  client c{server_.url(), o};
  ASSERT_EQ(lock_from_threads(c, 200), 0);
  client observer{server_.url()};
  ASSERT_GE(spares_that_served(c, observer), 1);
  observer.exec({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  std::string left = observer.exec({"CLIENT", "LIST"}).str();
  ASSERT_EQ(std::count(left.begin(), left.end(), '\n'), 1) << left;  // the observer's own
  std::error_code raced;  // the shared connection's first call may race the kill's news
  c.exec({"PING"}, raced);
  auto until = steady::now() + test::scaled(10s);
  while (spares_that_served(c, observer) < 1 && steady::now() < until) lock_from_threads(c, 50);
  EXPECT_GE(spares_that_served(c, observer), 1);
}

}  // namespace
}  // namespace dlock::test
