// SPDX-License-Identifier: Apache-2.0
// tests/support/sentinel_group.hpp: a master, its replica and the Redis Sentinels that watch
// them, as real processes on loopback (local_redis), for the tests of redis-sentinel:// URLs.
// Checked with raw_command, independent of dlock. Not thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/checks.hpp"
#include "support/redis_server.hpp"

namespace dlock::test {

struct sentinel_group_options {
  int sentinels = 3;
  std::string name = "mymaster";
  std::chrono::milliseconds down_after{500};  // sentinel down-after-milliseconds
  std::vector<std::string> data_extra{};       // more arguments for the master and the replica
  std::vector<std::string> master_extra{};     // more arguments for the first master only
  std::vector<std::string> sentinel_extra{};   // more lines for each sentinel's config
  // When set, called with the master's port: the port the replica replicates from instead (a
  // proxy that can make it lag for real: a paused replica still reads, on resume, what the
  // kernel buffered). The sentinels then leave that setting alone for failover_timeout.
  std::function<unsigned short(unsigned short)> replicate_via{};
  std::chrono::milliseconds failover_timeout{3000};  // sentinel failover-timeout
};

class sentinel_group {
 public:
  explicit sentinel_group(sentinel_group_options o = {}) : options_(std::move(o)) {
    auto data = server_options{.extra = options_.data_extra};
    data.extra.insert(data.extra.end(), {"--repl-diskless-sync-delay", "0"});
    auto master = data;
    master.extra.insert(master.extra.end(), options_.master_extra.begin(),
                        options_.master_extra.end());
    nodes_.push_back(std::make_unique<redis_server>(master));
    auto replica = data;
    auto upstream = options_.replicate_via ? options_.replicate_via(nodes_[0]->port())
                                           : nodes_[0]->port();
    replica.extra.insert(replica.extra.end(),
                         {"--replicaof", "127.0.0.1", std::to_string(upstream)});
    nodes_.push_back(std::make_unique<redis_server>(replica));
    for (int i = 0; i < options_.sentinels; ++i) {
      std::string n = options_.name;
      std::vector<std::string> config{
          "sentinel monitor " + n + " 127.0.0.1 " + std::to_string(nodes_[0]->port()) + " " +
              std::to_string(options_.sentinels / 2 + 1),
          "sentinel down-after-milliseconds " + n + " " +
              std::to_string(options_.down_after.count()),
          "sentinel failover-timeout " + n + " " +
              std::to_string(options_.failover_timeout.count()),
          "sentinel parallel-syncs " + n + " 1"};
      config.insert(config.end(), options_.sentinel_extra.begin(), options_.sentinel_extra.end());
      sentinels_.push_back(
          std::make_unique<redis_server>(server_options{.sentinel_config = std::move(config)}));
    }
  }

  redis_server& node(int i) { return *nodes_.at(static_cast<std::size_t>(i)); }
  redis_server& sentinel(int i) { return *sentinels_.at(static_cast<std::size_t>(i)); }
  int sentinels() const { return static_cast<int>(sentinels_.size()); }
  const std::string& name() const { return options_.name; }

  std::string url() const {
    std::string u = "redis-sentinel://";
    for (const auto& s : sentinels_) {
      if (&s != &sentinels_.front()) u += ',';
      u += "127.0.0.1:" + std::to_string(s->port());
    }
    return u + "/" + options_.name;
  }

  // The master's port as sentinel `i` names it now; 0 if it does not answer.
  unsigned short master_port(int i) {
    // "*2\r\n$9\r\n127.0.0.1\r\n$5\r\n12345\r\n"
    std::string r = raw_command(sentinel(i).port(), "SENTINEL GET-MASTER-ADDR-BY-NAME " + name());
    auto end = r.rfind("\r\n");
    auto start = end == std::string::npos ? std::string::npos : r.rfind("\r\n", end - 1);
    if (r.rfind("*2", 0) != 0 || start == std::string::npos) return 0;
    return static_cast<unsigned short>(std::stoi(r.substr(start + 2, end - start - 2)));
  }

  // Until every sentinel knows the replica, the other sentinels and that the master is up:
  // before that, a failover cannot be authorised. Throws after scaled(limit). Not for
  // sentinels with a password (raw_command does not log in).
  void wait_ready(std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    auto until = std::chrono::steady_clock::now() + scaled(limit);
    std::string others = std::to_string(options_.sentinels - 1);
    for (int i = 0; i < sentinels(); ++i) {
      for (;;) {
        std::string m = raw_command(sentinel(i).port(), "SENTINEL MASTER " + name());
        if (field(m, "num-slaves") == "1" && field(m, "num-other-sentinels") == others &&
            field(m, "flags") == "master") {
          break;
        }
        if (std::chrono::steady_clock::now() > until) {
          throw std::runtime_error("sentinels not ready: " + m);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }

  // SENTINEL FAILOVER on the first sentinel, now rather than after down-after-milliseconds
  // (retried while it answers NOGOODSLAVE: it has not seen the replica answer lately); then
  // until a majority names node 1. False if that does not happen within scaled(20 s).
  bool fail_over_to_replica() {
    const std::string failover = "SENTINEL FAILOVER " + name();
    for (auto until = std::chrono::steady_clock::now() + scaled(std::chrono::seconds(10));
         std::chrono::steady_clock::now() < until;) {
      if (raw_command(sentinel(0).port(), failover).rfind("+OK", 0) == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return wait_for_master(node(1).port());
  }

  // Until a majority of the sentinels name `port` as the master; false after scaled(limit).
  bool wait_for_master(unsigned short port,
                       std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    auto until = std::chrono::steady_clock::now() + scaled(limit);
    for (;;) {
      int naming = 0;
      for (int i = 0; i < sentinels(); ++i) naming += master_port(i) == port;
      if (naming > sentinels() / 2) return true;
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

 private:
  // A field of SENTINEL MASTER's flat array of bulk strings: "$5\r\nflags\r\n$6\r\nmaster\r\n".
  static std::string field(const std::string& reply, const std::string& name) {
    auto at = reply.find("\r\n" + name + "\r\n");
    if (at == std::string::npos) return {};
    auto value = reply.find("\r\n", at + name.size() + 4);  // past the value's $len line
    if (value == std::string::npos) return {};
    auto end = reply.find("\r\n", value + 2);
    return reply.substr(value + 2, end - value - 2);
  }

  sentinel_group_options options_;
  std::vector<std::unique_ptr<redis_server>> nodes_;
  std::vector<std::unique_ptr<redis_server>> sentinels_;
};

}  // namespace dlock::test
