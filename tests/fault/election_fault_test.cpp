// SPDX-License-Identifier: Apache-2.0
// Leader election under faults (label fault): five candidate processes (lock_worker elect),
// each behind a proxy of its own, write a fenced resource while they lead. The test observes the
// election in-process and strikes whoever leads: SIGKILL, SIGSTOP past the TTL, a partition
// from Redis. It then checks, from the workers' logs and the observer's events:
//   - no stale write was accepted: no write of term T accepted that was sent after a write of
//     a later term had been accepted (the fence refuses them; a deposed leader does try);
//   - the observer saw every term that any worker was given, in order, each one's end before
//     the next began;
//   - after each crash a new leader was elected (the time it took is printed, not asserted:
//     docs/benchmarks.md has the measured figures).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "dlock/election.hpp"
#include "fault/tcp_proxy.hpp"
#include "support/checks.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::fault {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using change = election_event::change;
using test::eventually;
using test::scaled;

constexpr int candidates = 5;
constexpr auto ttl = 500ms;

struct timed_event {
  election_event e;
  steady::time_point at;
};

struct write_record {
  std::uint64_t term;
  bool accepted;
  long long start_ns, end_ns;
};

class ElectionFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = server_.dir();
    watching_ = observer_.observe([this](const election_event& e) {
      std::lock_guard lock(mu_);
      events_.push_back({e, steady::now()});
    });
    for (int i = 0; i < candidates; ++i) {
      proxies_.push_back(std::make_unique<tcp_proxy>(server_.port()));
      start(i);
    }
  }
  void TearDown() override {
    watching_.stop();
    for (auto& w : workers_) {
      if (w) w->signal(SIGKILL);
    }
  }

  void start(int i) {
    std::vector<std::string> argv{test::self_dir() + "/../lock_worker", "elect",
                                  "--lock", proxies_[static_cast<std::size_t>(i)]->url(),
                                  "--resource", server_.url(),
                                  "--key", key_,
                                  "--value", std::to_string(i),
                                  "--log", dir_ + "/candidate-" + std::to_string(i) + ".log",
                                  "--ttl", std::to_string(ttl.count()),
                                  "--retry-delay", "50",
                                  "--resign-after", "40"};
    if (workers_.size() <= static_cast<std::size_t>(i)) workers_.resize(candidates);
    workers_[static_cast<std::size_t>(i)] = std::make_unique<test::child_process>(argv);
  }

  // The leader the observer last saw elected (and not ended) after `since`, waiting up to 10 s
  // (scaled).
  std::optional<election_event> leader_after(std::uint64_t term_above) {
    std::optional<election_event> found;
    eventually([&] {
      std::lock_guard lock(mu_);
      if (!events_.empty() && events_.back().e.what == change::elected &&
          events_.back().e.term > term_above) {
        found = events_.back().e;
      }
      return found.has_value();
    });
    return found;
  }
  // Whether the observer's last word is that `term` leads.
  bool leads(std::uint64_t term) {
    std::lock_guard lock(mu_);
    return !events_.empty() && events_.back().e.what == change::elected &&
           events_.back().e.term == term;
  }
  // The terms the observer saw elected so far.
  std::vector<std::uint64_t> terms_seen() {
    std::lock_guard lock(mu_);
    std::vector<std::uint64_t> out;
    for (const auto& t : events_) {
      if (t.e.what == change::elected) out.push_back(t.e.term);
    }
    return out;
  }
  steady::time_point elected_at(std::uint64_t term) {
    std::lock_guard lock(mu_);
    for (const auto& t : events_) {
      if (t.e.what == change::elected && t.e.term == term) return t.at;
    }
    return {};
  }

  // Accepted writes of `term`, from the workers' logs.
  std::size_t accepted_writes(std::uint64_t term) {
    std::vector<std::uint64_t> ignored;
    auto writes = writes_and_terms(ignored);
    return static_cast<std::size_t>(std::count_if(writes.begin(), writes.end(), [&](const auto& w) {
      return w.accepted && w.term == term;
    }));
  }

  std::vector<write_record> writes_and_terms(std::vector<std::uint64_t>& elected) {
    std::vector<write_record> out;
    for (int i = 0; i < candidates; ++i) {
      std::ifstream in(dir_ + "/candidate-" + std::to_string(i) + ".log");
      std::string line;
      while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string what, verdict;
        std::uint64_t term = 0;
        words >> what >> term;
        if (what == "elected") elected.push_back(term);
        if (what != "write") continue;
        write_record w{term, false, 0, 0};
        words >> verdict >> w.start_ns >> w.end_ns;
        w.accepted = verdict == "accepted";
        out.push_back(w);
      }
    }
    return out;
  }

  test::redis_server server_;
  std::string key_ = test::test_key("election");
  std::string dir_;
  std::vector<std::unique_ptr<tcp_proxy>> proxies_;
  std::vector<std::unique_ptr<test::child_process>> workers_;
  election observer_{client{server_.url()}, key_, "observer", {.lock = {.ttl = ttl}}};
  std::mutex mu_;
  std::vector<timed_event> events_;
  observation watching_;
};

TEST_F(ElectionFaultTest, OneLeaderActsAtATimeAndObserversSeeEveryTerm) {
  std::uint64_t last_term = 0;
  std::vector<double> failover_ms;
  for (int round = 0; round < 6; ++round) {
    auto leader = leader_after(last_term);
    ASSERT_TRUE(leader) << "no leader elected in round " << round;
    int who = std::stoi(leader->value);
    // Let it write (it resigns after 40), a fenced history to judge whatever the machine's pace:
    // 10 writes, unless its term ends first.
    eventually([&] { return accepted_writes(leader->term) >= 10 || !leads(leader->term); });
    // The leader may have resigned meanwhile (every 40 writes): strike whoever leads now.
    leader = leader_after(0);
    ASSERT_TRUE(leader);
    who = std::stoi(leader->value);
    auto struck_at = steady::now();
    switch (round % 3) {
      case 0:  // a crash
        workers_[static_cast<std::size_t>(who)]->signal(SIGKILL);
        workers_[static_cast<std::size_t>(who)]->wait(scaled(5s));
        break;
      case 1:  // a pause past the TTL: it wakes believing it leads, and writes
        workers_[static_cast<std::size_t>(who)]->signal(SIGSTOP);
        std::this_thread::sleep_for(2 * ttl);
        workers_[static_cast<std::size_t>(who)]->signal(SIGCONT);
        break;
      default:  // cut off from Redis, but not from the resource
        proxies_[static_cast<std::size_t>(who)]->set_mode(tcp_proxy::mode::stall);
        std::this_thread::sleep_for(2 * ttl);
        proxies_[static_cast<std::size_t>(who)]->set_mode(tcp_proxy::mode::pass);
        break;
    }
    auto next = leader_after(leader->term);
    ASSERT_TRUE(next) << "no new leader after striking " << who;
    if (round % 3 == 0) {
      failover_ms.push_back(
          std::chrono::duration<double, std::milli>(elected_at(next->term) - struck_at).count());
      start(who);  // the crashed candidate comes back
    }
    last_term = next->term;
  }
  for (auto& w : workers_) w->signal(SIGKILL);
  for (auto& w : workers_) w->wait(scaled(5s));
  std::vector<std::uint64_t> elected_in_logs;
  auto writes = writes_and_terms(elected_in_logs);  // complete: every writer is dead
  std::sort(elected_in_logs.begin(), elected_in_logs.end());
  // The last announcements reach the observer: every term a worker logged (checked below).
  eventually([&] {
    auto seen = terms_seen();
    std::sort(seen.begin(), seen.end());
    return std::includes(seen.begin(), seen.end(), elected_in_logs.begin(), elected_in_logs.end());
  });
  watching_.stop();

  std::size_t accepted = 0, refused = 0, stale_accepted = 0;
  for (const auto& w : writes) (w.accepted ? accepted : refused)++;
  // A write sent after a later term's write had been accepted must have been refused.
  for (const auto& w : writes) {
    if (!w.accepted) continue;
    for (const auto& later : writes) {
      if (later.accepted && later.term > w.term && later.end_ns < w.start_ns) {
        ++stale_accepted;
        break;
      }
    }
  }
  EXPECT_EQ(stale_accepted, 0u);
  EXPECT_GT(accepted, 50u);

  // The observer: terms elected in increasing order, each ended before the next began, and
  // every term a worker was given among them (and no other).
  std::vector<std::uint64_t> elected_seen;
  std::optional<std::uint64_t> open;
  for (const auto& t : events_) {
    if (t.e.what == change::elected) {
      EXPECT_FALSE(open) << "term " << t.e.term << " began before " << *open << " ended";
      EXPECT_TRUE(elected_seen.empty() || t.e.term > elected_seen.back());
      elected_seen.push_back(t.e.term);
      open = t.e.term;
    } else {
      EXPECT_EQ(open, t.e.term);
      open.reset();
    }
  }
  EXPECT_EQ(elected_seen, elected_in_logs);

  std::string failovers;
  for (double ms : failover_ms) failovers += " " + std::to_string(static_cast<int>(ms)) + "ms";
  std::printf("election: %zu terms, %zu writes accepted, %zu refused, 0 stale; failover after "
              "a crash (TTL %lld ms):%s\n",
              elected_seen.size(), accepted, refused, static_cast<long long>(ttl.count()),
              failovers.c_str());
  RecordProperty("failover_ms", failovers);
}

}  // namespace
}  // namespace dlock::fault
