// SPDX-License-Identifier: Apache-2.0
// The fault kit checks itself, so that a quiet scenario means a safe library, not a broken
// tool: the proxy delays, stalls, drops and refuses; the clock shim moves a live redis-server's
// wall clock (and expires its keys); the overlap detector and the fence audit count what they
// should on made-up histories.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "fault/history.hpp"
#include "fault/tcp_proxy.hpp"
#include "support/checks.hpp"
#include "support/monitor.hpp"
#include "support/redis_server.hpp"

namespace dlock::fault {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using test::eventually;
using test::redis_server;
using test::scaled;

constexpr stamp ms = 1'000'000;

using test::raw_connection;

// A redis-server behind a proxy, and a connection through the proxy that a PING went through.
class kit_proxy : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(c_.connected());
    ASSERT_EQ(c_.call("PING", scaled(2s)), "+PONG");
  }

  redis_server server_;
  tcp_proxy proxy_{server_.port()};
  raw_connection c_{proxy_.port()};
};

TEST_F(kit_proxy, forwards_with_latency_each_way) {
  // Long enough that a PING without it, however slow the machine, takes less.
  proxy_.set_latency(300ms, 400ms);
  auto start = steady::now();
  EXPECT_EQ(c_.call("PING", scaled(2s) + 700ms), "+PONG");
  EXPECT_GE(steady::now() - start, 700ms);
  proxy_.set_latency(0ms, 0ms);
  start = steady::now();
  EXPECT_EQ(c_.call("PING", scaled(2s)), "+PONG");
  EXPECT_LT(steady::now() - start, 700ms) << "the latency is still on";
}

TEST_F(kit_proxy, stall_holds_bytes_and_delivers_them_on_heal) {
  proxy_.set_mode(tcp_proxy::mode::stall);
  // The SET is held, not lost: it lands after the partition heals (a "ghost" write).
  EXPECT_EQ(c_.call("SET k v", 300ms), std::nullopt);
  EXPECT_EQ(test::raw_command(server_.port(), "EXISTS k"), ":0\r\n");
  proxy_.set_mode(tcp_proxy::mode::pass);
  EXPECT_EQ(c_.next_line(scaled(2s)), "+OK");
  EXPECT_EQ(test::raw_command(server_.port(), "EXISTS k"), ":1\r\n");
}

TEST_F(kit_proxy, dropped_replies_run_on_the_server_and_the_connection_dies_on_heal) {
  proxy_.set_mode(tcp_proxy::mode::drop_replies);
  EXPECT_EQ(c_.call("SET k v", 300ms), std::nullopt);
  EXPECT_TRUE(eventually([&] { return test::raw_command(server_.port(), "EXISTS k") == ":1\r\n"; }))
      << "the SET never ran";
  proxy_.set_mode(tcp_proxy::mode::pass);
  EXPECT_EQ(c_.next_line(scaled(2s)), std::nullopt);
  EXPECT_TRUE(c_.eof());
}

TEST_F(kit_proxy, dropped_requests_never_reach_the_server) {
  proxy_.set_mode(tcp_proxy::mode::drop_requests);
  EXPECT_EQ(c_.call("SET k v", 300ms), std::nullopt);
  proxy_.set_mode(tcp_proxy::mode::pass);
  EXPECT_EQ(c_.next_line(1s), std::nullopt);
  EXPECT_EQ(test::raw_command(server_.port(), "EXISTS k"), ":0\r\n");
}

TEST_F(kit_proxy, refuse_closes_the_port) {
  proxy_.set_mode(tcp_proxy::mode::refuse);
  EXPECT_EQ(c_.next_line(scaled(1s)), std::nullopt);
  EXPECT_TRUE(c_.eof());
  // The proxy closes its port before the connections (the eof above), so this holds at once.
  EXPECT_FALSE(raw_connection{proxy_.port()}.connected());
  proxy_.set_mode(tcp_proxy::mode::pass);
  // The proxy thread listens again when it wakes to the new mode.
  EXPECT_TRUE(eventually([&] { return raw_connection{proxy_.port()}.connected(); }))
      << "the port stayed closed";
  raw_connection again{proxy_.port()};
  EXPECT_EQ(again.call("PING", scaled(2s)), "+PONG");
}

// Redis's TIME, in milliseconds.
long long server_time_ms(unsigned short port) {
  std::string r = test::raw_command(port, "TIME");  // *2 $10 <s> $6 <us>
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < r.size();) {
    auto end = r.find("\r\n", at);
    if (end == std::string::npos) break;
    lines.push_back(r.substr(at, end - at));
    at = end + 2;
  }
  if (lines.size() < 5) return -1;
  return std::stoll(lines[2]) * 1000 + std::stoll(lines[4]) / 1000;
}

long long wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(kit_clock_shim, moves_a_running_servers_wall_clock_and_expires_its_keys) {
  std::string file = "/tmp/dlock-fault-clock-" + std::to_string(::getpid());
  std::ofstream(file) << "0 1\n";
  ::setenv("LD_PRELOAD", DLOCK_CLOCK_SHIM, 1);
  ::setenv("DLOCK_FAULT_CLOCK", file.c_str(), 1);
  redis_server server;
  ::unsetenv("LD_PRELOAD");
  ::unsetenv("DLOCK_FAULT_CLOCK");

  EXPECT_NEAR(server_time_ms(server.port()), wall_ms(), 1000);
  test::raw_command(server.port(), "SET k v PX 60000");
  std::ofstream(file) << "120000 1\n";  // two minutes ahead: the key's expiry has passed
  // The shim re-reads the file at the server's next clock reading (at most once a millisecond).
  auto skew = [&] { return server_time_ms(server.port()) - wall_ms(); };
  EXPECT_TRUE(eventually([&] { return std::llabs(skew() - 120000) < 1000; }));
  EXPECT_NEAR(skew(), 120000, 1000);
  EXPECT_EQ(test::raw_command(server.port(), "EXISTS k"), ":0\r\n");

  std::ofstream(file) << "120000 3\n";  // and now three times as fast
  // Past the shim's re-read interval (1 ms of a coarse clock): the TIME below reads the new rate.
  std::this_thread::sleep_for(20ms);
  long long skew_before = skew();
  auto real_before = steady::now();
  std::this_thread::sleep_for(500ms);  // the span the fast clock is measured over
  long long skew_after = skew();
  auto real_ms = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - real_before);
  // The server gains two of its milliseconds per real one (500 ms real, 1500 ms on the server),
  // measured over however long the sleep really took.
  EXPECT_NEAR(skew_after - skew_before, 2 * real_ms.count(), 300);
  std::remove(file.c_str());
}

interval held(const std::string& lock, int limit, stamp from_ms, stamp to_ms) {
  return interval{lock, limit, from_ms * ms, to_ms * ms, 0};
}

TEST(kit_history, overlap_detector_counts_holdings_beyond_the_limit) {
  EXPECT_EQ(count_overlaps({held("a", 1, 0, 10), held("a", 1, 10, 20), held("a", 1, 20, 30)}), 0u);
  EXPECT_EQ(count_overlaps({held("a", 1, 0, 10), held("a", 1, 5, 20), held("a", 1, 19, 30)}), 2u);
  // Different locks never overlap each other.
  EXPECT_EQ(count_overlaps({held("a", 1, 0, 10), held("b", 1, 5, 20)}), 0u);
  // A semaphore with two permits: the third concurrent holder is the overlap.
  EXPECT_EQ(count_overlaps({held("s", 2, 0, 10), held("s", 2, 1, 10), held("s", 2, 2, 10),
                            held("s", 2, 10, 20)}),
            1u);
  // A read-write lock: readers (weight 1) together are fine; a writer (weight = limit) beside
  // anyone is an overlap, whichever began first.
  auto writer = [](stamp from_ms, stamp to_ms) {
    interval i = held("rw", 1 << 20, from_ms, to_ms);
    i.weight = 1 << 20;
    return i;
  };
  EXPECT_EQ(count_overlaps({held("rw", 1 << 20, 0, 10), held("rw", 1 << 20, 1, 10),
                            writer(10, 20), held("rw", 1 << 20, 20, 30)}),
            0u);
  EXPECT_EQ(count_overlaps({held("rw", 1 << 20, 0, 10), writer(5, 20)}), 1u);
  EXPECT_EQ(count_overlaps({writer(0, 10), held("rw", 1 << 20, 5, 20)}), 1u);
  auto by_lock =
      count_overlaps_by_lock({held("a", 1, 0, 10), held("a", 1, 1, 2), held("b", 1, 0, 1)});
  EXPECT_EQ(by_lock["a"], 1u);
  EXPECT_EQ(by_lock["b"], 0u);
}

write_record wrote(std::uint64_t token, stamp sent_ms, stamp answered_ms, bool accepted) {
  return write_record{"r", token, sent_ms * ms, answered_ms * ms, accepted};
}

TEST(kit_history, fence_audit_flags_an_older_token_accepted_after_a_newer_one) {
  auto audit = check_writes(
      {wrote(1, 0, 1, true), wrote(2, 2, 3, true), wrote(1, 4, 5, false), wrote(2, 6, 7, true)});
  EXPECT_EQ(audit.accepted, 3u);
  EXPECT_EQ(audit.rejected, 1u);
  EXPECT_EQ(audit.wrongly_accepted, 0u);
  // Token 1 accepted after token 2's acceptance was known: wrong.
  EXPECT_EQ(check_writes({wrote(2, 0, 1, true), wrote(1, 2, 3, true)}).wrongly_accepted, 1u);
  // Concurrent writes may land in either order: not provably wrong.
  EXPECT_EQ(check_writes({wrote(2, 0, 5, true), wrote(1, 1, 3, true)}).wrongly_accepted, 0u);
}

TEST(kit_history, reports_round_trip_through_files) {
  report r;
  r.intervals.push_back(held("single", 1, 1, 2));
  r.intervals.back().weight = 5;
  r.writes.push_back(wrote(7, 1, 2, true));
  r.counters["acquired.single"] = 3;
  std::string path = "/tmp/dlock-fault-report-" + std::to_string(::getpid());
  ASSERT_TRUE(r.save(path));
  report back;
  ASSERT_TRUE(back.load(path));
  std::remove(path.c_str());
  ASSERT_EQ(back.intervals.size(), 1u);
  EXPECT_EQ(back.intervals[0].end, 2 * ms);
  EXPECT_EQ(back.intervals[0].weight, 5);
  ASSERT_EQ(back.writes.size(), 1u);
  EXPECT_EQ(back.writes[0].token, 7u);
  EXPECT_EQ(back.counters["acquired.single"], 3);
}

}  // namespace
}  // namespace dlock::fault
