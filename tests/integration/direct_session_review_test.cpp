// SPDX-License-Identifier: Apache-2.0
// Adversarial review of the blocking sessions (connection_direct.cpp): deadlines of callers that
// joined a session while another caller writes, and replies paired with their own requests
// under timeouts, drops and disconnects.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "access.hpp"
#include "dlock/client.hpp"
#include "dlock/error.hpp"
#include "net/connection.hpp"
#include "support/checks.hpp"
#include "support/direct_path.hpp"
#include "support/loopback.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// How late past its own deadline a caller may return on this build and machine: the bound of
// the tests below. Whatever holds a caller wrongly holds it for seconds beyond it (the other
// caller's deadline is set that far out), so the bound stays generous.
milliseconds margin() { return test::scaled(1s); }

// A loopback proxy to one redis-server whose directions can be held: a held direction is not
// read at all, so the sender's buffers fill and its send() blocks (EAGAIN, then poll).
class gated_proxy {
 public:
  explicit gated_proxy(unsigned short target) : target_(target) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int small = 4096;  // inherited by accepted sockets: the client's sends block sooner
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    auto addr = loopback_address(0);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 16) != 0) {
      throw std::runtime_error("gated_proxy: cannot listen");
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~gated_proxy() {
    stop_ = true;
    thread_.join();
    for (auto& p : pairs_) {
      ::close(p.client);
      ::close(p.server);
    }
    ::close(listen_fd_);
  }
  gated_proxy(const gated_proxy&) = delete;
  gated_proxy& operator=(const gated_proxy&) = delete;

  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // Returns once the proxy's thread has seen the change (two turns of its loop).
  void hold_requests(bool on) {
    hold_up_ = on;
    settle();
  }
  void hold_replies(bool on) {
    hold_down_ = on;
    settle();
  }
  // Replies go on one byte every 2 ms: the socket is readable all the time, slowly.
  void trickle_replies(bool on) {
    trickle_down_ = on;
    settle();
  }

 private:
  struct link {
    int client, server;
  };
  static bool send_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
      auto k = ::send(fd, p, n, MSG_NOSIGNAL);
      if (k <= 0) return false;
      p += k;
      n -= static_cast<std::size_t>(k);
    }
    return true;
  }
  void settle() {
    auto seen = turns_.load();
    while (turns_.load() < seen + 2) std::this_thread::sleep_for(1ms);
  }
  void run() {
    std::vector<char> buf(1 << 16);
    for (;; ++turns_) {
      if (stop_) break;
      const bool up = !hold_up_, down = !hold_down_;
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (auto& p : pairs_) {
        fds.push_back({p.client, static_cast<short>(up ? POLLIN : 0), 0});
        fds.push_back({p.server, static_cast<short>(down ? POLLIN : 0), 0});
      }
      if (::poll(fds.data(), fds.size(), 5) <= 0) continue;  // (the for's ++turns_ runs)
      if (fds[0].revents & POLLIN) {
        int c = ::accept(listen_fd_, nullptr, nullptr);
        if (c >= 0) {
          int s = ::socket(AF_INET, SOCK_STREAM, 0);
          auto a = loopback_address(target_);
          if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
            int nodelay = 1;  // a trickle's single bytes go out at once (no Nagle)
            ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
            pairs_.push_back({c, s});
          } else {
            ::close(c);
            ::close(s);
          }
        }
      }
      std::vector<std::size_t> dead;
      const std::size_t polled = (fds.size() - 1) / 2;  // not the one accepted just now
      for (std::size_t i = 0; i < polled; ++i) {
        auto& p = pairs_[i];
        bool gone = false;
        for (int dir = 0; dir < 2 && !gone; ++dir) {
          const auto& f = fds[1 + 2 * i + static_cast<std::size_t>(dir)];
          if (!(dir == 0 ? up : down)) continue;
          if (!(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
          const bool trickle = dir == 1 && trickle_down_;
          if (trickle) std::this_thread::sleep_for(2ms);
          auto n = ::recv(f.fd, buf.data(), trickle ? 1 : buf.size(), 0);
          if (n <= 0 || !send_all(dir == 0 ? p.server : p.client, buf.data(),
                                  static_cast<std::size_t>(n))) {
            gone = true;
          }
        }
        if (gone) dead.push_back(i);
      }
      for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
        ::close(pairs_[*it].client);
        ::close(pairs_[*it].server);
        pairs_.erase(pairs_.begin() + static_cast<std::ptrdiff_t>(*it));
      }
    }
  }

  unsigned short target_;
  unsigned short port_ = 0;
  int listen_fd_ = -1;
  std::vector<link> pairs_;  // the proxy's thread only
  std::atomic<bool> hold_up_{false}, hold_down_{false}, trickle_down_{false}, stop_{false};
  std::atomic<unsigned long> turns_{0};
  std::thread thread_;
};

class DirectIoSessionReview : public ::testing::Test {
 protected:
  redis_server server_;
};

struct timed {
  bool direct = false;
  std::error_code ec;
  milliseconds took{};
};

timed direct_call(client& c, const command& cmd, milliseconds timeout) {
  timed t;
  reply out;
  auto t0 = steady::now();
  t.direct = detail::access::try_exec_direct(c, cmd, timeout, out, t.ec);
  t.took = since(t0);
  return t;
}

// The opener writes its request holding session_mutex_; a caller that comes meanwhile waits for
// that mutex, with no deadline of its own, until the opener's write ends (its deadline). Before
// the sessions it found the socket taken and went to the I/O thread at once.
TEST_F(DirectIoSessionReview, ACallerIsNotHeldPastItsDeadlineByTheOpenersBlockedWrite) {
  gated_proxy proxy{server_.port()};
  client c{proxy.url(), {.request_timeout = test::scaled(10s)}};
  ASSERT_TRUE(until_direct(c));
  proxy.hold_requests(true);
  const std::string big(32u << 20, 'x');
  auto before = direct_count();
  const auto bound = 300ms + margin();
  auto opener = std::async(std::launch::async,
                           [&] { return direct_call(c, {"SET", test_key(), big}, bound + 3s); });
  ASSERT_TRUE(test::eventually([&] { return direct_count() - before == 1; }));
  std::this_thread::sleep_for(200ms);  // its send() blocks now: the proxy reads nothing
  auto late = direct_call(c, {"PING"}, 300ms);
  EXPECT_LT(late.took, bound) << "a 300 ms call took " << late.took.count() << " ms (direct "
                               << late.direct << ", " << late.ec.message() << ")";
  proxy.hold_requests(false);
  auto first = opener.get();
  EXPECT_EQ(first.ec, errc::timeout) << first.ec.message();
}

// The reader hands the reading to the front of the FIFO once its own reply is in; when that
// front is a joiner still writing (blocked, server not reading), nobody looks at the FIFO's
// deadlines until that write ends: a caller that joined behind it waits for the writer's
// deadline, not its own.
TEST_F(DirectIoSessionReview, AJoinerBehindABlockedWriterWhoLeadsKeepsItsDeadline) {
  gated_proxy proxy{server_.port()};
  client c{proxy.url(), {.request_timeout = test::scaled(10s)}};
  ASSERT_TRUE(until_direct(c));
  proxy.hold_replies(true);
  auto before = direct_count();
  const auto bound = 400ms + margin();
  auto reader =
      std::async(std::launch::async, [&] { return direct_call(c, {"ECHO", "r"}, bound + 4s); });
  ASSERT_TRUE(test::eventually([&] { return direct_count() - before == 1; }));
  std::this_thread::sleep_for(100ms);  // ECHO r reached the server; its reply is held
  proxy.hold_requests(true);
  const std::string big(32u << 20, 'x');
  auto writer = std::async(std::launch::async,
                           [&] { return direct_call(c, {"SET", test_key(), big}, bound + 4s); });
  ASSERT_TRUE(test::eventually([&] { return direct_count() - before == 2; }));
  std::this_thread::sleep_for(200ms);  // the writer's send() blocks
  auto joiner = std::async(std::launch::async, [&] { return direct_call(c, {"PING"}, 400ms); });
  ASSERT_TRUE(test::eventually([&] { return direct_count() - before == 3; }));
  proxy.hold_replies(false);  // the reader's reply comes: it hands the reading to the writer
  auto r = reader.get();
  EXPECT_FALSE(r.ec) << r.ec.message();
  auto j = joiner.get();
  EXPECT_LT(j.took, bound) << "a 400 ms call took " << j.took.count() << " ms (direct "
                            << j.direct << ", " << j.ec.message() << ")";
  proxy.hold_requests(false);
  writer.get();
}

// Jepsen-style: threads make blocking calls with their own payloads and mixed deadlines (some
// so short that they expire in the middle of the FIFO), large ones that need many sends, while
// another thread kills the connection, disconnects and submits async requests. Every reply
// that comes without an error is the one for the caller's own request; nothing hangs.
TEST_F(DirectIoSessionReview, RepliesStayPairedUnderTimeoutsDropsAndDisconnects) {
  client c{server_.url(), {.request_timeout = test::scaled(2s)}};
  client killer{server_.url()};
  ASSERT_TRUE(until_direct(c));
  constexpr int threads = 8;
  const auto run_for = 2s;  // how long the chaos runs (a duration, not a bound: unscaled)
  std::atomic<bool> stop{false};
  std::atomic<long> wrong{0}, ok{0}, failed{0}, direct{0}, async_wrong{0};
  std::vector<std::future<void>> workers;
  for (int t = 0; t < threads; ++t) {
    workers.push_back(std::async(std::launch::async, [&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
      for (long i = 0; !stop; ++i) {
        std::string p = "t" + std::to_string(t) + "-" + std::to_string(i) + "-";
        int kind = static_cast<int>(rng() % 20);
        if (kind == 0) p.append(200000 + rng() % 300000, static_cast<char>('a' + t));
        std::error_code ec;
        reply out;
        if (kind <= 3) {
          auto timeout = milliseconds(kind == 0 ? 2 + rng() % 5 : rng() % 3);
          if (!detail::access::try_exec_direct(c, {"ECHO", p}, timeout, out, ec)) continue;
          ++direct;
        } else {
          out = c.exec({"ECHO", p}, ec);
        }
        if (ec) {
          ++failed;
        } else if (!out.is_string() || out.str() != p) {
          ++wrong;
        } else {
          ++ok;
        }
      }
    }));
  }
  auto chaos = std::async(std::launch::async, [&] {
    std::mt19937 rng(4242);
    std::vector<std::future<bool>> seen;
    while (!stop) {
      std::this_thread::sleep_for(milliseconds(5 + rng() % 40));
      switch (rng() % 4) {
        case 0: {
          std::error_code ec;
          killer.exec({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}, ec);
          break;
        }
        case 1:
          c.disconnect();
          break;
        default: {
          auto pr = std::make_shared<std::promise<bool>>();
          seen.push_back(pr->get_future());
          std::string p = "async-" + std::to_string(seen.size());
          c.async_exec({"ECHO", p}, [pr, p](std::error_code ec, reply r) {
            pr->set_value(ec || (r.is_string() && r.str() == p));
          });
        }
      }
    }
    for (auto& f : seen) {
      if (f.wait_for(test::scaled(10s)) != std::future_status::ready || !f.get()) ++async_wrong;
    }
  });
  std::this_thread::sleep_for(run_for);
  stop = true;
  for (auto& w : workers) {
    ASSERT_EQ(w.wait_for(test::scaled(20s)), std::future_status::ready) << "a caller hangs";
  }
  chaos.get();
  EXPECT_EQ(wrong.load(), 0) << "replies paired with another request";
  EXPECT_EQ(async_wrong.load(), 0);
  EXPECT_GT(ok.load(), 100);
  std::cout << "ok " << ok << " failed " << failed << " short direct " << direct << "\n";
}

// The same through a proxy that now and then stops reading requests or replies for a few ms:
// sends block halfway (requests partly written when a deadline passes), deadlines expire in the
// middle of the FIFO, pipelined requests share the session.
TEST_F(DirectIoSessionReview, RepliesStayPairedWhenWritesStallHalfway) {
  gated_proxy proxy{server_.port()};
  client c{proxy.url(), {.request_timeout = test::scaled(2s)}};
  ASSERT_TRUE(until_direct(c));
  constexpr int threads = 8;
  const auto run_for = 2s;  // how long the chaos runs (a duration, not a bound: unscaled)
  std::atomic<bool> stop{false};
  std::atomic<long> wrong{0}, ok{0}, failed{0};
  std::vector<std::future<void>> workers;
  for (int t = 0; t < threads; ++t) {
    workers.push_back(std::async(std::launch::async, [&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 104729u + 3);
      for (long i = 0; !stop; ++i) {
        std::string p = "t" + std::to_string(t) + "-" + std::to_string(i) + "-";
        if (rng() % 3 == 0) p.append(rng() % 65536, static_cast<char>('a' + t));
        const bool pipelined = rng() % 4 == 0;
        command cmd{"ECHO", p};
        if (pipelined) cmd.then({"ECHO", p + "2"});
        std::error_code ec;
        reply out;
        if (rng() % 5 == 0) {
          if (!detail::access::try_exec_direct(c, cmd, milliseconds(5 + rng() % 25), out, ec)) {
            continue;
          }
        } else {
          out = c.exec(std::move(cmd), ec);
        }
        if (ec) {
          ++failed;
          continue;
        }
        bool right = pipelined ? out.is_array() && out.elements().size() == 2 &&
                                     out.elements()[0].str() == p &&
                                     out.elements()[1].str() == p + "2"
                               : out.is_string() && out.str() == p;
        if (right) {
          ++ok;
        } else {
          ++wrong;
        }
      }
    }));
  }
  std::mt19937 rng(777);
  auto until = steady::now() + run_for;
  while (steady::now() < until) {
    std::this_thread::sleep_for(milliseconds(5 + rng() % 25));
    const auto r = rng() % 10;
    if (r < 4) {
      proxy.hold_requests(true);
      std::this_thread::sleep_for(milliseconds(rng() % 40));
      proxy.hold_requests(false);
    } else if (r < 8) {
      proxy.hold_replies(true);
      std::this_thread::sleep_for(milliseconds(rng() % 40));
      proxy.hold_replies(false);
    } else if (r == 8) {
      c.disconnect();
    }
  }
  stop = true;
  for (auto& w : workers) {
    ASSERT_EQ(w.wait_for(test::scaled(20s)), std::future_status::ready) << "a caller hangs";
  }
  EXPECT_EQ(wrong.load(), 0) << "replies paired with another request";
  EXPECT_GT(ok.load(), 100);
  std::cout << "ok " << ok << " failed " << failed << "\n";
}

// A session that fails while a joiner's send is blocked is handed back by that writer once its
// write ends: the write goes on to the writer's own deadline though every request of the
// session has failed, and the I/O thread cannot fail and replace the socket meanwhile.
TEST_F(DirectIoSessionReview, ABlockedWriterStopsOnceTheSessionFailed) {
  gated_proxy proxy{server_.port()};
  client c{proxy.url(), {.request_timeout = test::scaled(10s)}};
  ASSERT_TRUE(until_direct(c));
  const command set{"SET", test_key(), std::string(32u << 20, 'x')};  // made before the clock runs
  proxy.hold_requests(true);
  auto before = direct_count();
  // The reader's deadline fails the session; the writer's own is seconds beyond the bound.
  const auto reader_due = margin(), bound = reader_due + margin();
  auto reader =
      std::async(std::launch::async, [&] { return direct_call(c, {"ECHO", "r"}, reader_due); });
  ASSERT_TRUE(test::eventually([&] { return direct_count() - before == 1; }));
  auto writer = std::async(std::launch::async, [&] { return direct_call(c, set, bound + 5s); });
  ASSERT_TRUE(test::eventually([&] { return direct_count() - before == 2; }));
  auto r = reader.get();
  EXPECT_EQ(r.ec, errc::timeout) << r.ec.message();
  auto w = writer.get();
  EXPECT_EQ(w.ec, errc::timeout) << w.ec.message();
  EXPECT_LT(w.took, bound) << "the writer kept writing for " << w.took.count()
                            << " ms after its session failed (direct " << w.direct << ")";
  proxy.hold_requests(false);
}

// A reply that trickles in keeps the socket readable: the reader still fails a joiner by its
// deadline (once the earliest deadline passed, its wait takes no time, and the first look that
// finds no byte fails the session). Passes on 8730f6b: the suspicion was wrong.
TEST_F(DirectIoSessionReview, AJoinerBehindATricklingReplyKeepsItsDeadline) {
  gated_proxy proxy{server_.port()};
  client c{proxy.url(), {.request_timeout = test::scaled(10s)}};
  ASSERT_TRUE(until_direct(c));
  proxy.trickle_replies(true);
  auto before = direct_count();
  auto reader = std::async(std::launch::async,
                           [&] {
                             return direct_call(c, {"ECHO", std::string(600, 'r')},
                                                300ms + margin() + 5s);
                           });
  ASSERT_TRUE(test::eventually([&] { return direct_count() - before == 1; }));
  std::this_thread::sleep_for(100ms);
  auto j = direct_call(c, {"PING"}, 300ms);
  EXPECT_LT(j.took, 300ms + margin())
      << "a 300 ms call took " << j.took.count() << " ms (direct " << j.direct << ", "
      << (j.ec ? j.ec.message() : "answered") << ")";
  proxy.trickle_replies(false);
  auto r = reader.get();
  std::cout << "joiner: " << j.took.count() << " ms, direct " << j.direct << ", "
            << j.ec.message() << "; reader: " << r.took.count() << " ms, " << r.ec.message()
            << "\n";
}

// A joiner whose bytes still wait in the outbox when the session fails (here: another caller's
// deadline, while a writer's send is blocked) never reached the server, yet it fails with
// timeout (outcome unknown) long before its own deadline. Before the sessions it queued on the
// I/O thread, and a request not yet written when a socket fails goes out on a fresh one.
TEST_F(DirectIoSessionReview, ARequestThatNeverWentOutIsNotFailedByAnotherCallersDeadline) {
  gated_proxy proxy{server_.port()};
  client c{proxy.url(), {.request_timeout = test::scaled(10s)}};
  ASSERT_TRUE(until_direct(c));
  const command set{"SET", test_key(), std::string(32u << 20, 'x')};
  proxy.hold_requests(true);
  auto before = direct_count();
  // The reader's deadline (long enough for the others to join first) fails the session.
  auto reader =
      std::async(std::launch::async, [&] { return direct_call(c, {"ECHO", "r"}, margin()); });
  ASSERT_TRUE(test::eventually([&] { return direct_count() - before == 1; }));
  auto writer = std::async(std::launch::async, [&] { return direct_call(c, set, margin() + 3s); });
  ASSERT_TRUE(test::eventually([&] { return direct_count() - before == 2; }));
  std::this_thread::sleep_for(100ms);  // the writer's send() blocks
  auto joiner = std::async(std::launch::async, [&] {
    timed t;
    auto t0 = steady::now();
    reply r = c.exec({"ECHO", "j"}, t.ec);  // request_timeout: 10 s
    t.took = since(t0);
    t.direct = !t.ec && r.is_string() && r.str() == "j";  // (here: answered right)
    return t;
  });
  ASSERT_TRUE(test::eventually([&] { return direct_count() - before == 3; }));
  auto r = reader.get();
  EXPECT_EQ(r.ec, errc::timeout) << r.ec.message();
  proxy.hold_requests(false);  // the server is reachable again
  auto j = joiner.get();
  EXPECT_FALSE(j.ec) << "a request that never went out failed after " << j.took.count()
                     << " ms with " << j.ec.message();
  EXPECT_TRUE(j.direct) << "not answered ECHO j";
  writer.get();
}

}  // namespace
}  // namespace dlock::test
