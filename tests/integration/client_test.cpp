// SPDX-License-Identifier: Apache-2.0
// The client against real redis-server processes (and two small non-Redis TCP peers): replies
// pair with their own requests under load and after faults, log-in and SELECT, unix sockets,
// deadlines, fast failure while a node is down, reconnection, error replies, completion tokens.
#include "dlock/client.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/bind_executor.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <atomic>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "access.hpp"
#include "dlock/error.hpp"
#include "support/fake_peer.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"
#include "support/checks.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// The outcome of one async_exec, for waiting on with a bound.
struct outcome {
  std::error_code ec;
  reply r;
  milliseconds elapsed{};
};

std::future<outcome> start(client& c, command cmd) {
  auto done = std::make_shared<std::promise<outcome>>();
  auto result = done->get_future();
  c.async_exec(std::move(cmd), [done, t0 = steady::now()](std::error_code ec, reply r) {
    done->set_value({ec, std::move(r), since(t0)});
  });
  return result;
}

outcome wait(std::future<outcome>& f, milliseconds limit = 5s) {
  if (f.wait_for(test::scaled(limit)) != std::future_status::ready) {
    ADD_FAILURE() << "no completion within " << test::scaled(limit).count() << " ms";
    return {errc::cancelled, {}, limit};
  }
  return f.get();
}

// Bytes written to the server on `port` that it has not read, over its established TCP
// connections (/proc/net/tcp, rx_queue): where a request to a paused server waits.
long long unread_by_server(unsigned short port) {
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // the header
  long long unread = 0;
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues;
    fields >> slot >> local >> remote >> state >> queues;
    auto colon = local.find(':'), queue = queues.find(':');
    if (colon == std::string::npos || queue == std::string::npos || state != "01") continue;
    if (std::stoul(local.substr(colon + 1), nullptr, 16) != port) continue;
    unread += std::stoll(queues.substr(queue + 1), nullptr, 16);
  }
  return unread;
}

class ClientTest : public ::testing::Test {
 protected:
  redis_server server_;
};

TEST_F(ClientTest, ExecBasics) {
  client c{server_.url()};
  EXPECT_EQ(c.where().port, server_.port());
  EXPECT_EQ(c.exec({"PING"}).str(), "PONG");
  EXPECT_EQ(c.exec({"SET", test_key(), "v1"}).str(), "OK");
  EXPECT_EQ(c.exec({"GET", test_key()}).str(), "v1");
  EXPECT_TRUE(c.exec({"GET", test_key("missing")}).is_nil());
  EXPECT_EQ(c.exec({"INCRBY", test_key("n"), "41"}).integer(), 41);
  EXPECT_EQ(c.exec({"INCR", test_key("n")}).integer(), 42);
  // Arguments are binary-safe: CRLF and NUL go through untouched.
  using namespace std::string_literals;
  const std::string binary = "a\r\nb\0c\r\n*1\r\n$4\r\nPING\r\n"s;
  EXPECT_EQ(c.exec({"SET", test_key("bin"), binary}).str(), "OK");
  EXPECT_EQ(c.exec({"GET", test_key("bin")}).str(), binary);
  EXPECT_EQ(c.exec({"STRLEN", test_key("bin")}).integer(),
            static_cast<std::int64_t>(binary.size()));
  reply list = c.exec({"LRANGE", test_key("none"), "0", "-1"});
  EXPECT_TRUE(list.is_array());
  EXPECT_TRUE(list.elements().empty());
}

TEST_F(ClientTest, CommandFromSpans) {
  client c{server_.url()};
  const std::string key = test_key();
  std::vector<std::string> set{"SET", key, "spanned"};
  std::vector<std::string_view> get{"GET", key};
  EXPECT_EQ(c.exec(command(std::span<const std::string>(set))).str(), "OK");
  EXPECT_EQ(c.exec(command(std::span<const std::string_view>(get))).str(), "spanned");
}

TEST_F(ClientTest, PipelinedCommandReturnsArrayOfReplies) {
  client c{server_.url()};
  command cmd{"SET", test_key(), "1"};
  cmd.then({"INCR", test_key()}).then({"GET", test_key()}).then({"GET", test_key("missing")});
  std::vector<std::string> echo{"ECHO", "last"};
  cmd.then(std::span<const std::string>(echo));
  EXPECT_EQ(cmd.size(), 5u);
  reply r = c.exec(cmd);
  ASSERT_TRUE(r.is_array()) << r.to_string();
  ASSERT_EQ(r.elements().size(), 5u);
  EXPECT_EQ(r.elements()[0].type(), reply::kind::status);
  EXPECT_EQ(r.elements()[0].str(), "OK");
  EXPECT_EQ(r.elements()[1].integer(), 2);
  EXPECT_EQ(r.elements()[2].str(), "2");
  EXPECT_TRUE(r.elements()[3].is_nil());
  EXPECT_EQ(r.elements()[4].str(), "last");

  // An array reply inside a pipeline stays one element.
  command lists{"RPUSH", test_key("l"), "a", "b"};
  lists.then({"LRANGE", test_key("l"), "0", "-1"}).then({"LLEN", test_key("l")});
  reply lr = c.exec(lists);
  ASSERT_EQ(lr.elements().size(), 3u);
  ASSERT_TRUE(lr.elements()[1].is_array());
  EXPECT_EQ(lr.elements()[1].elements().size(), 2u);
  EXPECT_EQ(lr.elements()[2].integer(), 2);
}

TEST_F(ClientTest, EmptyCommandIsRejectedBeforeAnyIo) {
  // Redis answers nothing to an empty multibulk ("*0\r\n"), so such a request would take the
  // next request's reply. It must never reach the wire.
  auto expect_invalid = [](auto make) {
    try {
      make();
      ADD_FAILURE() << "empty command accepted";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
    }
  };
  expect_invalid([] { command c{}; });
  expect_invalid([] { command c(std::span<const std::string>{}); });
  expect_invalid([] { command c(std::span<const std::string_view>{}); });
  expect_invalid([] { command{"PING"}.then({}); });
  client c{server_.url()};
  EXPECT_EQ(c.exec({"ECHO", "still paired"}).str(), "still paired");
}

TEST_F(ClientTest, LargeValuesCrossManyReads) {
  client c{server_.url(), {.request_timeout = 5s}};
  std::string big(3 << 20, 'x');
  for (std::size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>('a' + i % 26);
  EXPECT_EQ(c.exec({"SET", test_key(), big}).str(), "OK");
  EXPECT_EQ(c.exec({"GET", test_key()}).str(), big);
  command many{"GET", test_key()};
  for (int i = 0; i < 5; ++i) many.then({"GET", test_key()});
  reply r = c.exec(many);
  ASSERT_EQ(r.elements().size(), 6u);
  for (const auto& e : r.elements()) EXPECT_TRUE(e.str() == big);
}

// Many threads share one client and one connection. RESP pairs replies with requests by
// order only, so any slip in the queueing shows up as a reply carrying another request's
// payload.
TEST_F(ClientTest, ManyThreadsNeverSeeAnotherRequestsReply) {
  client c{server_.url(), {.request_timeout = 20s}};
  constexpr int threads = 8, per_thread = 2000, burst = 50;
  std::atomic<int> checked{0}, wrong{0};
  std::mutex m;
  std::string first_wrong;
  auto note = [&](bool ok, const std::string& want, const reply& got, std::error_code ec) {
    if (ok) {
      ++checked;
      return;
    }
    ++wrong;
    std::lock_guard lock(m);
    if (first_wrong.empty())
      first_wrong = "want " + want + ", got " + got.to_string() + " " + ec.message();
  };
  std::vector<std::string> keys;
  for (int t = 0; t < threads; ++t) keys.push_back(test_key("t" + std::to_string(t)));

  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        std::string val = "t" + std::to_string(t) + ":i" + std::to_string(i);
        std::error_code ec;
        if (i % 2 == 0) {
          reply r = c.exec({"ECHO", val}, ec);
          note(!ec && r.str() == val, val, r, ec);
        } else {
          reply r = c.exec(command{"SET", keys[t], val}.then({"GET", keys[t]}), ec);
          note(!ec && r.is_array() && r.elements().size() == 2 && r.elements()[0].str() == "OK" &&
                   r.elements()[1].str() == val,
               val, r, ec);
        }
        if (i % 200 == 199) {
          // A burst of async requests, many in flight at once on the shared connection.
          struct burst_state {
            std::atomic<int> left{burst};
            std::promise<void> all_done;
          };
          auto state = std::make_shared<burst_state>();
          auto all_done = state->all_done.get_future();
          for (int b = 0; b < burst; ++b) {
            std::string p = val + ":b" + std::to_string(b);
            c.async_exec(command{"ECHO", p}, [&note, state, p](std::error_code e, reply r) {
              note(!e && r.str() == p, p, r, e);
              if (--state->left == 0) state->all_done.set_value();
            });
          }
          if (all_done.wait_for(test::scaled(20s)) != std::future_status::ready) {
            note(false, "burst completion", {}, errc::timeout);
            std::abort();  // the callbacks reference `note` in this frame: cannot go on safely
          }
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(wrong.load(), 0) << first_wrong;
  EXPECT_EQ(checked.load(), threads * per_thread + threads * (per_thread / 200) * burst);
}

TEST(ClientAuthTest, RequirepassWithPasswordInUrl) {
  redis_server s{{.extra = {"--requirepass", "p@ss:w%rd"}}};
  client c{"redis://:p%40ss%3Aw%25rd@127.0.0.1:" + std::to_string(s.port())};
  EXPECT_EQ(c.exec({"PING"}).str(), "PONG");
  client bare{"redis://p%40ss%3Aw%25rd@127.0.0.1:" + std::to_string(s.port())};
  EXPECT_EQ(bare.exec({"PING"}).str(), "PONG");
}

TEST(ClientAuthTest, RequirepassWithPasswordInOptions) {
  redis_server s{{.extra = {"--requirepass", "from-options"}}};
  client c{s.url(), {.password = "from-options"}};
  EXPECT_EQ(c.exec({"PING"}).str(), "PONG");
  // The options override a wrong password in the URL, and the URL's never shows in where().
  client over{"redis://:wrong@127.0.0.1:" + std::to_string(s.port()), {.password = "from-options"}};
  EXPECT_EQ(over.exec({"PING"}).str(), "PONG");
  EXPECT_EQ(over.where().to_string().find("wrong"), std::string::npos);
}

TEST(ClientAuthTest, AclUserAndPassword) {
  redis_server s;
  ASSERT_EQ(test::raw_command(s.port(), "ACL SETUSER alice on >wonderland ~allowed:* +@all"),
            "+OK\r\n");
  const std::string port = std::to_string(s.port());
  client c{"redis://alice:wonderland@127.0.0.1:" + port};
  EXPECT_EQ(c.exec({"ACL", "WHOAMI"}).str(), "alice");
  EXPECT_EQ(c.exec({"SET", "allowed:x", "1"}).str(), "OK");
  std::error_code ec;
  reply r = c.exec({"SET", "forbidden:x", "1"}, ec);
  EXPECT_EQ(ec, errc::no_permission);
  EXPECT_EQ(r.str().rfind("NOPERM", 0), 0u) << r.str();

  client via_options{s.url(), {.user = "alice", .password = "wonderland"}};
  EXPECT_EQ(via_options.exec({"ACL", "WHOAMI"}).str(), "alice");

  client wrong{"redis://alice:rabbit@127.0.0.1:" + port};
  wrong.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::auth_failed);
}

TEST(ClientAuthTest, WrongPasswordIsAuthFailed) {
  redis_server s{{.extra = {"--requirepass", "right"}}};
  // A request timeout far above the bound below: waiting for it would show.
  client c{"redis://:wrong@127.0.0.1:" + std::to_string(s.port()),
           {.request_timeout = test::scaled(10s),
            .reconnect_backoff_min = 10ms,
            .reconnect_backoff_max = 10ms}};
  std::error_code ec;
  auto t0 = steady::now();
  c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::auth_failed) << ec.message();
  EXPECT_LT(since(t0), test::scaled(500ms));
  // Still refused once the backoff has passed: a new connection, a new AUTH.
  std::this_thread::sleep_for(50ms);  // the backoff (10 ms) runs out
  c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::auth_failed) << ec.message();
  // AUTH and SELECT go out together; the AUTH failure is the one reported.
  client with_db{"redis://:wrong@127.0.0.1:" + std::to_string(s.port()) + "/2"};
  with_db.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::auth_failed) << ec.message();
}

TEST(ClientAuthTest, NoPasswordIsAuthFailed) {
  redis_server s{{.extra = {"--requirepass", "right"}}};
  client c{s.url()};
  std::error_code ec;
  reply r = c.exec({"SET", "k", "v"}, ec);
  EXPECT_EQ(ec, errc::auth_failed);
  EXPECT_EQ(r.str().rfind("NOAUTH", 0), 0u) << r.str();
  try {
    c.exec({"PING"});
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::auth_failed);
    EXPECT_NE(std::string(e.what()).find("NOAUTH"), std::string::npos) << e.what();
  }
}

TEST_F(ClientTest, SelectsTheDatabaseFromTheUrl) {
  client c{server_.url() + "/3"};
  EXPECT_EQ(c.exec({"SET", test_key(), "in-db-3"}).str(), "OK");
  EXPECT_NE(c.exec({"CLIENT", "INFO"}).str().find(" db=3 "), std::string::npos);
  // Checked without dlock: the key is in db 3 and not in db 0.
  EXPECT_EQ(test::raw_command(server_.port(), "SELECT 3\r\nGET " + test_key()),
            "+OK\r\n$7\r\nin-db-3\r\n");
  EXPECT_EQ(test::raw_command(server_.port(), "GET " + test_key()), "$-1\r\n");

  // A password and a db: AUTH then SELECT in one handshake.
  redis_server secured{{.extra = {"--requirepass", "pw"}}};
  client both{"redis://:pw@127.0.0.1:" + std::to_string(secured.port()) + "/5"};
  EXPECT_NE(both.exec({"CLIENT", "INFO"}).str().find(" db=5 "), std::string::npos);

  // A db the server does not have fails the handshake with the server's error.
  client out_of_range{server_.url() + "/999"};
  std::error_code ec;
  out_of_range.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::server_error) << ec.message();
}

TEST(ClientUnixTest, UnixSocketEndpoint) {
  redis_server s{{.unix_socket = true}};
  client c{s.socket_url()};
  EXPECT_TRUE(c.where().is_unix());
  EXPECT_EQ(c.exec({"SET", test_key(), "over-unix"}).str(), "OK");
  EXPECT_EQ(c.exec({"GET", test_key()}).str(), "over-unix");
  // Really over the socket: the server sees no TCP peer address.
  EXPECT_NE(c.exec({"CLIENT", "INFO"}).str().find("laddr=" + s.dir() + "/redis.sock"),
            std::string::npos);

  client db2{s.socket_url() + "?db=2"};
  EXPECT_EQ(db2.exec({"SET", test_key(), "db2"}).str(), "OK");
  EXPECT_EQ(test::raw_command(s.port(), "SELECT 2\r\nGET " + test_key()), "+OK\r\n$3\r\ndb2\r\n");
}

TEST(ClientUnixTest, OverlongSocketPathFailsTheRequestNotTheProcess) {
  // sun_path holds 107 bytes; a longer path must be an error, not an exception on the I/O thread.
  const std::string path = "/tmp/" + std::string(200, 'p') + ".sock";
  std::error_code ec;
  parse_endpoint("unix://" + path, ec);
  EXPECT_EQ(ec, errc::invalid_argument);
  endpoint where;
  where.socket_path = path;  // built by hand, bypassing the URL parser
  client c{where};
  c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::invalid_argument) << ec.message();
  redis_server s;  // the I/O thread still serves other clients
  EXPECT_EQ(client{s.url()}.exec({"PING"}).str(), "PONG");
}

TEST_F(ClientTest, HugeTimeoutMeansNoDeadlineNotAnOverflow) {
  client c{server_.url(), {.request_timeout = milliseconds::max()}};
  EXPECT_EQ(c.exec({"ECHO", "forever"}).str(), "forever");
  auto f = start(c, {"ECHO", "async forever"});
  EXPECT_EQ(wait(f).r.str(), "async forever");
}

TEST_F(ClientTest, LocalhostFallsBackAcrossResolvedAddresses) {
  // The server listens on 127.0.0.1 only; "localhost" may resolve to ::1 first.
  client c{"redis://localhost:" + std::to_string(server_.port())};
  EXPECT_EQ(c.exec({"PING"}).str(), "PONG");
}

TEST(ClientFailureTest, UnreachableFailsFastAndBacksOff) {
  const unsigned short port = test::free_port();  // nothing listens here
  // The backoff and the request timeout scale with the build, and so do the bounds below,
  // which stay far under them: failing fast is told from timing out, and the calls made
  // within the backoff fit in it.
  const auto backoff = test::scaled(700ms);
  client c{"redis://127.0.0.1:" + std::to_string(port),
           {.connect_timeout = 2s,
            .request_timeout = test::scaled(1s),
            .reconnect_backoff_min = backoff,
            .reconnect_backoff_max = backoff}};
  std::error_code ec;
  auto t0 = steady::now();
  reply r = c.exec({"PING"}, ec);
  auto failed_at = steady::now();  // the backoff began before
  EXPECT_EQ(ec, errc::node_unreachable) << ec.message();
  EXPECT_LT(since(t0), test::scaled(300ms));
  EXPECT_TRUE(r.is_error());
  EXPECT_FALSE(r.str().empty());  // the connect error's text

  // Something listens now, but within the backoff the client does not even try.
  fake_peer peer{fake_peer::mode::silent, port};
  for (int i = 0; i < 20; ++i) {
    auto t1 = steady::now();
    c.exec({"PING"}, ec);
    EXPECT_EQ(ec, errc::node_unreachable);
    EXPECT_LT(since(t1), test::scaled(50ms));
  }
  auto f = start(c, {"PING"});
  EXPECT_EQ(wait(f).ec, errc::node_unreachable);
  std::this_thread::sleep_for(20ms);  // a negative check: nothing connects meanwhile
  EXPECT_EQ(peer.accepted(), 0);

  // After the backoff it connects again (and times out on the silent peer).
  std::this_thread::sleep_until(failed_at + backoff + 100ms);
  c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::timeout) << ec.message();
  EXPECT_EQ(peer.accepted(), 1);
}

TEST(ClientFailureTest, RecoversWhenTheNodeComesBack) {
  redis_server s;
  client c{s.url(), {.reconnect_backoff_min = 20ms, .reconnect_backoff_max = 100ms}};
  EXPECT_EQ(c.exec({"PING"}).str(), "PONG");
  s.kill();
  std::error_code ec;
  c.exec({"PING"}, ec);
  EXPECT_TRUE(ec == errc::node_unreachable || ec == errc::connection_lost) << ec.message();
  c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::node_unreachable) << ec.message();
  s.restart();
  EXPECT_TRUE(eventually([&] { return c.exec({"PING"}, ec).str() == "PONG"; }, 5s)) << ec.message();
}

TEST_F(ClientTest, HungServerTimesOutByTheDeadlineAndNeverMispairs) {
  const auto timeout = 300ms;
  client c{server_.url(), {.request_timeout = timeout}};
  for (int i = 0; i < 10; ++i) {
    std::string p = "before-" + std::to_string(i);
    ASSERT_EQ(c.exec({"ECHO", p}).str(), p);
  }
  server_.pause();
  std::error_code ec;
  auto t0 = steady::now();
  c.exec({"ECHO", "during-sync"}, ec);
  auto took = since(t0);
  EXPECT_EQ(ec, errc::timeout) << ec.message();
  EXPECT_GE(took, timeout - 5ms);
  EXPECT_LT(took, timeout + test::scaled(250ms));

  // Several requests in flight during the hang: each fails by its deadline.
  std::vector<std::future<outcome>> during;
  for (int i = 0; i < 5; ++i) during.push_back(start(c, {"ECHO", "during-" + std::to_string(i)}));
  for (auto& f : during) {
    outcome o = wait(f);
    EXPECT_EQ(o.ec, errc::timeout) << o.ec.message();
    EXPECT_LT(o.elapsed, timeout + test::scaled(250ms));
    EXPECT_FALSE(o.r.is_string()) << o.r.to_string();
  }

  // A shorter per-request deadline wins over the client's default.
  auto short_done = std::make_shared<std::promise<outcome>>();
  auto short_f = short_done->get_future();
  detail::access::start_exec(c, {"ECHO", "short"}, 50ms,
                             [short_done, t1 = steady::now()](std::error_code e, reply r) {
                               short_done->set_value({e, std::move(r), since(t1)});
                             });
  outcome o = wait(short_f);
  EXPECT_EQ(o.ec, errc::timeout);
  EXPECT_LT(o.elapsed, 50ms + test::scaled(250ms));

  // Once the server runs again it answers the requests it had buffered, on sockets the client
  // has closed: none of those replies reaches a later request.
  server_.resume();
  std::vector<std::future<outcome>> after;
  for (int i = 0; i < 50; ++i) after.push_back(start(c, {"ECHO", "after-" + std::to_string(i)}));
  for (int i = 0; i < 50; ++i) {
    outcome a = wait(after[i]);
    EXPECT_FALSE(a.ec) << a.ec.message();
    EXPECT_EQ(a.r.str(), "after-" + std::to_string(i));
  }
  for (int i = 0; i < 20; ++i) {
    std::string p = "sync-after-" + std::to_string(i);
    EXPECT_EQ(c.exec({"ECHO", p}).str(), p);
  }
}

TEST_F(ClientTest, ReconnectsAfterServerRestart) {
  client c{server_.url(), {.reconnect_backoff_min = 10ms, .reconnect_backoff_max = 50ms}};
  EXPECT_EQ(c.exec({"SET", test_key(), "before"}).str(), "OK");
  server_.restart();
  std::error_code ec;
  int failures = 0;
  bool ok = eventually(
      [&] {
        reply r = c.exec({"PING"}, ec);
        if (ec) {
          ++failures;
          EXPECT_TRUE(ec == errc::connection_lost || ec == errc::node_unreachable) << ec.message();
        }
        return r.str() == "PONG";
      },
      5s);
  EXPECT_TRUE(ok) << ec.message();
  EXPECT_LE(failures, 2);
  EXPECT_TRUE(c.exec({"GET", test_key()}).is_nil());  // no persistence: the key is gone
  for (int i = 0; i < 20; ++i) {
    std::string p = "after-restart-" + std::to_string(i);
    EXPECT_EQ(c.exec({"ECHO", p}).str(), p);
  }
}

// The request timeouts below are far above the bounds: only the crash or the disconnect can
// end the request in time.
TEST_F(ClientTest, CrashWithRequestInFlightIsConnectionLost) {
  client c{server_.url(), {.request_timeout = test::scaled(10s), .reconnect_backoff_min = 10ms}};
  EXPECT_EQ(c.exec({"PING"}).str(), "PONG");
  server_.pause();
  auto f = start(c, {"ECHO", "in-flight"});
  // Written and waiting: the paused server has it unread.
  EXPECT_TRUE(eventually([&] { return unread_by_server(server_.port()) > 0; }));
  server_.kill();
  outcome o = wait(f, 2s);
  EXPECT_EQ(o.ec, errc::connection_lost) << o.ec.message();
  EXPECT_LT(o.elapsed, test::scaled(1s));
  server_.restart();
  std::error_code ec;
  EXPECT_TRUE(eventually([&] { return c.exec({"ECHO", "x"}, ec).str() == "x"; }, 5s));
}

TEST_F(ClientTest, DisconnectCancelsInFlightRequests) {
  client c{server_.url(), {.request_timeout = test::scaled(10s)}};
  EXPECT_EQ(c.exec({"PING"}).str(), "PONG");
  server_.pause();
  auto f = start(c, {"ECHO", "cancel-me"});
  EXPECT_TRUE(eventually([&] { return unread_by_server(server_.port()) > 0; }));  // in flight
  c.disconnect();
  outcome o = wait(f, 2s);
  EXPECT_EQ(o.ec, errc::cancelled) << o.ec.message();
  EXPECT_LT(o.elapsed, test::scaled(1s));
  server_.resume();
  EXPECT_EQ(c.exec({"ECHO", "again"}).str(), "again");
}

TEST(ClientPeerTest, GarbagePeerIsAProtocolErrorAndTheConnectionIsDropped) {
  fake_peer peer{fake_peer::mode::garbage};
  // A request timeout far above the bound below: only the garbage ends the request in time.
  client c{peer.url(), {.request_timeout = test::scaled(10s), .reconnect_backoff_min = 1s}};
  std::error_code ec;
  auto t0 = steady::now();
  c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::protocol_error) << ec.message();
  EXPECT_LT(since(t0), test::scaled(1s));
  EXPECT_TRUE(eventually([&] { return peer.closed() == 1; })) << peer.closed();
  EXPECT_EQ(peer.accepted(), 1);
}

TEST(ClientPeerTest, GarbageDuringTheHandshakeIsAProtocolErrorToo) {
  // With a password the first bytes sent are AUTH, so the garbage arrives mid-handshake. The
  // request must fail with protocol_error at once, not loop reconnecting until its deadline.
  fake_peer peer{fake_peer::mode::garbage};
  client c{peer.url(":secret"),
           {.request_timeout = test::scaled(10s), .reconnect_backoff_min = 1s}};
  std::error_code ec;
  auto t0 = steady::now();
  c.exec({"PING"}, ec);
  EXPECT_EQ(ec, errc::protocol_error) << ec.message();
  EXPECT_LT(since(t0), test::scaled(1s));
  EXPECT_EQ(peer.accepted(), 1);
  EXPECT_TRUE(eventually([&] { return peer.closed() == 1; }));
}

TEST(ClientPeerTest, SilentPeerTimesOut) {
  fake_peer peer{fake_peer::mode::silent};
  const auto timeout = 300ms;
  client c{peer.url(), {.request_timeout = timeout}};
  std::error_code ec;
  auto t0 = steady::now();
  c.exec({"PING"}, ec);
  auto took = since(t0);
  EXPECT_EQ(ec, errc::timeout) << ec.message();
  EXPECT_GE(took, timeout - 5ms);
  EXPECT_LT(took, timeout + test::scaled(250ms));
  // The connection is closed: a late reply could no longer be handed to anyone.
  EXPECT_TRUE(eventually([&] { return peer.closed() == 1; }));
}

TEST(ClientPeerTest, DisconnectDuringTheHandshakeDoesNotReconnect) {
  // The silent peer never answers AUTH, so the request waits in the queue while connecting.
  fake_peer peer{fake_peer::mode::silent};
  client c{peer.url(":pw"), {.connect_timeout = 5s, .request_timeout = 5s}};
  auto f = start(c, {"PING"});
  ASSERT_TRUE(eventually([&] { return peer.accepted() == 1; }));
  c.disconnect();
  outcome o = wait(f, 2s);
  EXPECT_EQ(o.ec, errc::cancelled) << o.ec.message();
  EXPECT_TRUE(eventually([&] { return peer.closed() == 1; }));
  std::this_thread::sleep_for(100ms);  // a negative check: no new connection meanwhile
  EXPECT_EQ(peer.accepted(), 1) << "disconnect() opened a new connection";
}

TEST_F(ClientTest, ErrorRepliesCompleteWithTheMappedErrorAndText) {
  client c{server_.url()};
  ASSERT_EQ(c.exec({"SET", test_key(), "abc"}).str(), "OK");
  std::error_code ec;
  reply r = c.exec({"INCR", test_key()}, ec);
  EXPECT_EQ(ec, errc::server_error);
  EXPECT_TRUE(r.is_error());
  EXPECT_NE(r.str().find("not an integer"), std::string::npos) << r.str();

  r = c.exec({"LPUSH", test_key(), "x"}, ec);
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_EQ(r.str().rfind("WRONGTYPE", 0), 0u) << r.str();

  r = c.exec({"NO-SUCH-COMMAND"}, ec);
  EXPECT_EQ(ec, errc::server_error);
  EXPECT_NE(r.str().find("unknown command"), std::string::npos) << r.str();

  r = c.exec({"EVALSHA", std::string(40, 'a'), "0"}, ec);
  EXPECT_EQ(ec, errc::script_error);
  EXPECT_EQ(r.str().rfind("NOSCRIPT", 0), 0u) << r.str();

  try {
    c.exec({"LPUSH", test_key(), "x"});
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::wrong_type);
    EXPECT_NE(std::string(e.what()).find("WRONGTYPE"), std::string::npos) << e.what();
  }

  // In a pipeline an error reply is one element; the request itself succeeds.
  reply p = c.exec(command{"INCR", test_key()}.then({"GET", test_key()}), ec);
  EXPECT_FALSE(ec);
  ASSERT_EQ(p.elements().size(), 2u);
  EXPECT_TRUE(p.elements()[0].is_error());
  EXPECT_EQ(p.elements()[1].str(), "abc");
  // And the connection still pairs replies correctly.
  EXPECT_EQ(c.exec({"GET", test_key()}).str(), "abc");
}

TEST_F(ClientTest, AsyncExecWithCallback) {
  client c{server_.url()};
  std::promise<std::tuple<std::error_code, reply, std::error_code>> done;
  auto f = done.get_future();
  c.async_exec(command{"ECHO", "callback"}, [&](std::error_code ec, reply r) {
    // The default executor is dlock's I/O thread, where blocking calls are refused.
    std::error_code nested;
    c.exec({"PING"}, nested);
    done.set_value({ec, std::move(r), nested});
  });
  ASSERT_EQ(f.wait_for(test::scaled(5s)), std::future_status::ready);
  auto [ec, r, nested] = f.get();
  EXPECT_FALSE(ec);
  EXPECT_EQ(r.str(), "callback");
  EXPECT_EQ(nested, errc::would_block_io_thread);

  // A callback may issue the next request itself.
  std::promise<std::string> chained;
  auto cf = chained.get_future();
  c.async_exec(command{"SET", test_key(), "chained"}, [&](std::error_code, reply) {
    c.async_exec(command{"GET", test_key()},
                 [&](std::error_code, reply r2) { chained.set_value(r2.str()); });
  });
  ASSERT_EQ(cf.wait_for(test::scaled(5s)), std::future_status::ready);
  EXPECT_EQ(cf.get(), "chained");
}

TEST_F(ClientTest, AsyncExecRunsOnTheHandlersExecutor) {
  client c{server_.url()};
  asio::io_context mine;
  auto work = asio::make_work_guard(mine);
  std::thread::id ran_on;
  std::string got;
  c.async_exec(command{"ECHO", "bound"}, asio::bind_executor(mine, [&](std::error_code, reply r) {
                 ran_on = std::this_thread::get_id();
                 got = r.str();
                 work.reset();
               }));
  mine.run_for(test::scaled(5s));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(got, "bound");
}

TEST_F(ClientTest, AsyncExecWithUseFuture) {
  client c{server_.url()};
  std::future<reply> f = c.async_exec(command{"ECHO", "future"}, asio::use_future);
  ASSERT_EQ(f.wait_for(test::scaled(5s)), std::future_status::ready);
  EXPECT_EQ(f.get().str(), "future");

  ASSERT_EQ(c.exec({"SET", test_key(), "s"}).str(), "OK");
  auto bad = c.async_exec(command{"LPUSH", test_key(), "x"}, asio::use_future);
  ASSERT_EQ(bad.wait_for(test::scaled(5s)), std::future_status::ready);
  try {
    bad.get();
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::wrong_type);
  }

  std::vector<std::future<reply>> many;
  for (int i = 0; i < 100; ++i)
    many.push_back(c.async_exec(command{"ECHO", std::to_string(i)}, asio::use_future));
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(many[i].wait_for(test::scaled(5s)), std::future_status::ready);
    EXPECT_EQ(many[i].get().str(), std::to_string(i));
  }
}

// Commands that change the shared connection's state would move every lock of the client to
// another database or user, or into a user's MULTI: refused before anything is sent.
TEST_F(ClientTest, ExecRefusesCommandsThatChangeTheConnectionsState) {
  client c{server_.url()};
  c.exec({"SET", test_key(), "db0"});
  const std::vector<std::vector<std::string>> refused{
      {"SELECT", "1"},      {"select", "1"},       {"RESET"},          {"AUTH", "x"},
      {"HELLO", "3"},       {"MULTI"},             {"EXEC"},           {"DISCARD"},
      {"WATCH", "k"},       {"UNWATCH"},           {"READONLY"},       {"READWRITE"},
      {"ASKING"},           {"QUIT"},              {"CLIENT", "TRACKING", "on"},
      {"CLIENT", "CACHING", "yes"}, {"client", "setname", "x"}, {"CLIENT", "NO-EVICT", "on"},
      {"CLIENT", "NO-TOUCH", "on"}, {"CLIENT", "SETINFO", "lib-name", "x"}};
  for (const auto& args : refused) {
    std::error_code ec;
    reply r = c.exec(command(std::span<const std::string>(args)), ec);
    EXPECT_EQ(ec, errc::invalid_argument) << args[0];
    EXPECT_TRUE(r.is_error()) << args[0];
    auto async = c.async_exec(command(std::span<const std::string>(args)), asio::use_future);
    try {
      async.get();
      ADD_FAILURE() << args[0] << " accepted by async_exec";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument) << args[0];
    }
  }
  std::error_code ec;
  c.exec(command{"PING"}.then({"SELECT", "1"}), ec);  // hidden in a pipeline
  EXPECT_EQ(ec, errc::invalid_argument);
  // Nothing went out: still database 0, no name, no transaction open.
  EXPECT_EQ(c.exec({"GET", test_key()}).str(), "db0");
  EXPECT_TRUE(c.exec({"CLIENT", "GETNAME"}).is_nil());
  EXPECT_EQ(c.exec({"INCR", test_key("n")}).integer(), 1);  // not QUEUED inside a MULTI
  // Reading connection state stays allowed.
  EXPECT_FALSE(c.exec({"CLIENT", "ID"}, ec).is_error());
  EXPECT_FALSE(ec);
}
}  // namespace
}  // namespace dlock::test
