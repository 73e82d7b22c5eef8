// SPDX-License-Identifier: Apache-2.0
// The observer and the log sink (dlock/observer.hpp) and the Prometheus observer
// (dlock/prometheus.hpp), against a real redis-server: each count matches what the test made
// happen, and promtool (support/promtool.hpp) accepts the exposition text.
#include "dlock/observer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "dlock/key_layout.hpp"
#include "dlock/mutex.hpp"
#include "dlock/prometheus.hpp"
#include "dlock/semaphore.hpp"
#include "support/dlock_cli.hpp"
#include "support/promtool.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"
#include "support/checks.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

long long value_of(const std::string& text, const std::string& series) {
  return static_cast<long long>(test::metric_value(text, series));
}

class ObserverTest : public ::testing::Test {
 protected:
  void SetUp() override { set_observer(metrics_); }
  void TearDown() override {
    set_observer(nullptr);
    set_log_sink({});
  }

  std::string node() const { return "127.0.0.1:" + std::to_string(server_.port()); }

  redis_server server_;
  client client_{server_.url()};
  std::shared_ptr<prometheus_metrics> metrics_ = std::make_shared<prometheus_metrics>();
};

TEST_F(ObserverTest, CountsALocksAcquisitionsReleasesAndTheirRequests) {
  mutex a{client_, test_key()};
  mutex b{client_, test_key()};
  auto held = a.acquire();
  std::error_code ec;
  EXPECT_FALSE(b.try_acquire(ec));
  EXPECT_EQ(ec, errc::not_acquired);
  EXPECT_FALSE(held.release());

  std::string text = metrics_->render();
  SCOPED_TRACE(text);
  EXPECT_EQ(value_of(text, R"(dlock_acquisitions_total{primitive="lock",result="ok"})"), 1);
  EXPECT_EQ(value_of(text, R"(dlock_acquisitions_total{primitive="lock",result="not_acquired"})"), 1);
  EXPECT_EQ(value_of(text, R"(dlock_acquire_attempts_total{primitive="lock"})"), 2);
  EXPECT_EQ(value_of(text, R"(dlock_acquire_wait_seconds_count{primitive="lock",result="ok"})"), 1);
  EXPECT_EQ(value_of(text, R"(dlock_releases_total{primitive="lock",result="ok"})"), 1);
  EXPECT_EQ(value_of(text, R"(dlock_handoffs_total{primitive="lock"})"), -1);
  // Three scripts ran (acquire, the refused acquire, release), each first as EVALSHA: the
  // first use of each of the two scripts met NOSCRIPT and went again as EVAL.
  std::string n = "node=\"" + node() + "\"";
  EXPECT_EQ(value_of(text, "dlock_node_requests_total{" + n + ",result=\"ok\"}"), 3);
  EXPECT_EQ(value_of(text, "dlock_node_requests_total{" + n + ",result=\"script_error\"}"), 2);
  EXPECT_EQ(value_of(text, "dlock_node_request_duration_seconds_count{" + n + "}"), 5);
  EXPECT_EQ(value_of(text, "dlock_node_connection_events_total{" + n + ",event=\"connected\"}"), 1);
  auto [status, out] = promtool_check(text);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "");
}

TEST_F(ObserverTest, CountsASemaphoresPermits) {
  semaphore s{client_, test_key(), 1};
  auto permit = s.acquire();
  std::error_code ec;
  EXPECT_FALSE(s.try_acquire(ec));
  EXPECT_FALSE(permit.release());

  std::string text = metrics_->render();
  SCOPED_TRACE(text);
  EXPECT_EQ(value_of(text, R"(dlock_acquisitions_total{primitive="semaphore",result="ok"})"), 1);
  EXPECT_EQ(value_of(text, R"(dlock_acquisitions_total{primitive="semaphore",result="not_acquired"})"), 1);
  EXPECT_EQ(value_of(text, R"(dlock_releases_total{primitive="semaphore",result="ok"})"), 1);
  EXPECT_EQ(value_of(text, R"(dlock_acquisitions_total{primitive="lock",result="ok"})"), -1);
}

TEST_F(ObserverTest, CountsAHandoffToAQueuedWaiter) {
  mutex a{client_, test_key()};
  // Polls every 5..10 s: only the release's handoff can grant it in time. (Its first round
  // found the lock taken, and a next one at 5..10 s could not start before the deadline, so the
  // wait used to end there, in 0.02 s: LockAcquisitionTest.AWaiterWaitsOutItsDeadline...)
  mutex b{client_, test_key(), {.retry_delay = 10s}};
  auto held = a.acquire();
  lease got;
  std::error_code ec;
  std::jthread waiter([&] { got = b.acquire_until(std::chrono::steady_clock::now() + 8s, ec); });
  // Queued: the waiter's entry is on the server.
  std::string queue = lock_keys_for(test_key()).waiters;
  ASSERT_TRUE(eventually([&] { return client_.exec({"ZCARD", queue}).integer() == 1; }));
  EXPECT_FALSE(held.release());
  waiter.join();
  ASSERT_TRUE(got) << ec.message();

  std::string text = metrics_->render();
  SCOPED_TRACE(text);
  EXPECT_EQ(value_of(text, R"(dlock_handoffs_total{primitive="lock"})"), 1);
  EXPECT_EQ(value_of(text, R"(dlock_acquisitions_total{primitive="lock",result="ok"})"), 2);
}

TEST_F(ObserverTest, CountsRenewalsAndTheLossThatEndsThem) {
  mutex m{client_, test_key(), {.ttl = 300ms}};
  auto l = m.acquire();
  ASSERT_FALSE(l.keep_alive());  // every ~100 ms
  ASSERT_TRUE(eventually([&] {
    return value_of(metrics_->render(), R"(dlock_renewals_total{primitive="lock",result="ok"})") >= 2;
  }));
  client_.exec({"DEL", test_key()});  // taken from under it: the next renewal finds it gone
  ASSERT_TRUE(eventually([&] { return l.lost().stop_requested(); }));

  std::string text = metrics_->render();
  SCOPED_TRACE(text);
  EXPECT_EQ(value_of(text, R"(dlock_renewals_total{primitive="lock",result="lease_lost"})"), 1);
  EXPECT_EQ(value_of(text, R"(dlock_leases_lost_total{primitive="lock",reason="lease_lost"})"), 1);
  auto renewals = value_of(text, R"(dlock_renewals_total{primitive="lock",result="ok"})");
  EXPECT_EQ(value_of(text, R"(dlock_renewal_lag_seconds_count{primitive="lock"})"), renewals + 1);
  // A timer on an idle I/O thread is not late by a second.
  EXPECT_EQ(value_of(text, R"(dlock_renewal_lag_seconds_bucket{primitive="lock",le="1"})"), renewals + 1);
}

TEST_F(ObserverTest, ReportsANodeThatGoesAwayAndLogsItOnlyToTheSink) {
  std::mutex guard;
  std::vector<std::pair<log_level, std::string>> lines;
  set_log_sink([&](log_level level, std::string_view message) {
    std::lock_guard lock(guard);
    lines.emplace_back(level, std::string(message));
  });
  // What the library writes to stderr meanwhile: nothing.
  std::fflush(stderr);
  int saved = ::dup(2);
  FILE* capture = std::tmpfile();
  ::dup2(::fileno(capture), 2);

  mutex m{client_, test_key()};
  EXPECT_FALSE(m.acquire().release());
  server_.kill();
  std::error_code ec;
  EXPECT_FALSE(m.try_acquire(ec));
  EXPECT_FALSE(m.try_acquire(ec));

  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fseek(capture, 0, SEEK_END);
  EXPECT_EQ(std::ftell(capture), 0) << "the library wrote to stderr";
  std::fclose(capture);

  std::string text = metrics_->render();
  SCOPED_TRACE(text);
  std::string n = "node=\"" + node() + "\"";
  EXPECT_EQ(value_of(text, "dlock_node_connection_events_total{" + n + ",event=\"connected\"}"), 1);
  EXPECT_EQ(value_of(text, "dlock_node_connection_events_total{" + n + ",event=\"dropped\"}"), 1);
  EXPECT_GE(value_of(text, "dlock_node_connection_events_total{" + n + ",event=\"connect_failed\"}"), 1);
  EXPECT_GE(value_of(text, "dlock_node_requests_total{" + n + ",result=\"node_unreachable\"}"), 1);
  EXPECT_EQ(value_of(text, R"(dlock_acquisitions_total{primitive="lock",result="node_unreachable"})"), 2);

  std::lock_guard lock(guard);
  bool connect_failed = false, dropped = false;
  for (const auto& [level, message] : lines) {
    EXPECT_EQ(level, log_level::warning) << message;
    connect_failed |= message.find(node() + ": connect failed: ") == 0;
    dropped |= message.find(node() + ": connection dropped: ") == 0;
  }
  EXPECT_TRUE(connect_failed);
  EXPECT_TRUE(dropped);
}

TEST_F(ObserverTest, KeyLabelsAreEscapedIntoValidExpositionText) {
  auto labelled = std::make_shared<prometheus_metrics>(prometheus_options{.key_label = true});
  set_observer(labelled);
  // A quote, a backslash, a newline, and a byte that is not UTF-8.
  std::string key = test_key() + "a\"b\\c\nd\xff" + "\xc3\xa9";
  mutex m{client_, key};
  EXPECT_FALSE(m.acquire().release());

  std::string text = labelled->render();
  SCOPED_TRACE(text);
  std::string escaped = test_key() + "a\\\"b\\\\c\\nd\xef\xbf\xbd\xc3\xa9";
  EXPECT_EQ(value_of(text, "dlock_acquisitions_total{key=\"" + escaped +
                               "\",primitive=\"lock\",result=\"ok\"}"),
            1);
  auto [status, out] = promtool_check(text);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(metrics_->render(), "") << "the observer replaced counts nothing more";
}

// Constant labels come first on every series, the node series included; a hold is timed from
// the grant to the release; gauge_text renders the caller's gauge with the same labels.
// Names that Prometheus or dlock's own labels forbid are refused.
TEST_F(ObserverTest, ConstantLabelsLeadEverySeriesAndHoldsAreTimed) {
  auto labelled = std::make_shared<prometheus_metrics>(prometheus_options{
      .constant_labels = {{"job", "nightly \"a\""}, {"team", "ops"}}});
  set_observer(labelled);
  mutex m{client_, test_key()};
  auto held = m.acquire();
  std::this_thread::sleep_for(20ms);  // a hold of at least this long, to be seen in the sum
  EXPECT_FALSE(held.release());

  std::string text = labelled->render() +
                     labelled->gauge_text("my_level", "A caller's gauge.", 2.5, {{"x", "y"}});
  SCOPED_TRACE(text);
  const std::string lead = R"(job="nightly \"a\"",team="ops")";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_NE(line.find("{" + lead), std::string::npos) << line;
  }
  EXPECT_EQ(value_of(text, "dlock_hold_seconds_count{" + lead + R"(,primitive="lock"})"), 1);
  EXPECT_GE(test::metric_value(text, "dlock_hold_seconds_sum{" + lead + R"(,primitive="lock"})"),
            0.02);
  EXPECT_EQ(test::metric_value(text, "my_level{" + lead + R"(,x="y"})"), 2.5);
  auto [status, out] = promtool_check(text);
  EXPECT_EQ(status, 0) << out;

  for (const char* bad : {"", "9job", "__job", "a-b", "primitive", "node", "le", "result"}) {
    EXPECT_TRUE(test::is_invalid_argument([&] {
      prometheus_metrics refused{prometheus_options{.constant_labels = {{bad, "v"}}}};
    })) << '"' << bad << '"';
  }
  EXPECT_TRUE(test::is_invalid_argument([&] {
    prometheus_metrics refused{prometheus_options{.key_label = true, .constant_labels = {{"key", "v"}}}};
  }));
  EXPECT_TRUE(test::is_invalid_argument([&] {
    prometheus_metrics refused{prometheus_options{.constant_labels = {{"job", "a"}, {"job", "b"}}}};
  }));

  // An adopted token's grant was not seen here: its release times no hold.
  auto again = m.acquire();
  std::string token = again.value();
  again.detach();
  EXPECT_FALSE(m.adopt(token).release());
  EXPECT_EQ(value_of(labelled->render(), "dlock_hold_seconds_count{" + lead + R"(,primitive="lock"})"),
            1);
}

TEST_F(ObserverTest, WritesTheTextfileAtomicallyOrNotAtAll) {
  mutex m{client_, test_key()};
  EXPECT_FALSE(m.acquire().release());
  fs::path dir = fs::temp_directory_path() / ("dlock-textfile-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path file = dir / "dlock.prom";
  std::string extra = "# HELP job_done Whether the job ran.\n# TYPE job_done gauge\njob_done 1\n";
  ASSERT_FALSE(metrics_->write_textfile(file.string(), extra));
  std::string text = read_file(file);
  EXPECT_EQ(text, metrics_->render() + extra);
  auto [status, out] = promtool_check(text);
  EXPECT_EQ(status, 0) << out;
  // Only the file itself is left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);

  // A directory that does not exist: an error, and nothing written anywhere.
  auto ec = metrics_->write_textfile((dir / "missing" / "dlock.prom").string());
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dlock::test
