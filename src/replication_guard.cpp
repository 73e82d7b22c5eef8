// SPDX-License-Identifier: Apache-2.0
// WAIT only counts the writes of its own connection: on a fresh connection it returns at once,
// whatever the replicas hold. So each batch first PUBLISHes (a write that replicates and sets
// this connection's offset past every write the server ran before it, ours on the request
// connection included), then WAITs for that offset. The channel is the wake-up channels'
// prefix, which the documented ACL rule already allows; nobody subscribes to it. Redis Cluster
// does not replicate PUBLISH, so there the guard refuses to vouch for anything.
#include "replication_guard.hpp"

#include <algorithm>

#include "access.hpp"

namespace dlock::detail {
namespace {

constexpr std::string_view guard_channel = "dlock:wake:guard";
// How long after the server's WAIT timeout its reply may take to come back.
constexpr auto reply_grace = std::chrono::milliseconds(25);

client_options guard_connection_options(client_options o) {
  o.restart_quarantine = std::chrono::milliseconds::zero();  // the request connection checks
  return o;
}

}  // namespace

replication_guard::replication_guard(const endpoint& where, client_options options)
    : conn_(std::make_shared<connection>(where, guard_connection_options(options))),
      options_(options.replication_guard),
      request_timeout_(options.request_timeout) {}

void replication_guard::close() { conn_->close(errc::cancelled); }

void replication_guard::confirm(clock::time_point deadline, done_handler done) {
  waiting_.push_back({std::move(done), std::min(deadline, clock::now() + options_.timeout)});
  if (!busy_) start_batch();
}

void replication_guard::start_batch() {
  busy_ = true;
  auto batch = std::make_shared<std::vector<waiter>>(std::exchange(waiting_, {}));
  auto deadline = std::min_element(batch->begin(), batch->end(), [](auto& a, auto& b) {
                    return a.deadline < b.deadline;
                  })->deadline;
  auto self = shared_from_this();
  command ask{"ROLE"};
  ask.then({"INFO", "cluster"});
  auto asked_by = std::min(clock::now() + request_timeout_, deadline + reply_grace);
  conn_->submit(ask.bytes(), 2, asked_by, [self, batch, deadline](std::error_code ec, reply r) {
    const auto& e = r.elements();
    if (!ec && (!r.is_array() || e.size() != 2)) ec = errc::protocol_error;
    for (std::size_t i = 0; !ec && i < e.size(); ++i) {
      if (e[i].is_error()) return self->finish(*batch, error_from_reply(e[i]), e[i].str());
    }
    if (ec) return self->finish(*batch, ec, "ROLE: " + ec.message());
    const reply& role = e[0];
    const auto& parts = role.elements();
    if (!role.is_array() || parts.size() < 3 || parts[0].str() != "master" ||
        !parts[2].is_array()) {
      // With Sentinel, the node was demoted since this connection was made: reconnect, which
      // asks the sentinels again, for the next batch.
      if (self->conn_->where().is_sentinel()) self->conn_->close(errc::connection_lost);
      return self->finish(*batch, errc::replication_not_confirmed,
                          "the node is no master (ROLE: " + role.to_string() + ")");
    }
    if (e[1].is_string() && e[1].str().find("cluster_enabled:1") != std::string::npos) {
      return self->finish(*batch, errc::replication_not_confirmed,
                          "the guard cannot work on Redis Cluster, which does not replicate "
                          "the PUBLISH it waits on");
    }
    long long connected = static_cast<long long>(parts[2].elements().size());
    long long need = self->options_.replicas > 0 ? self->options_.replicas : connected / 2 + 1;
    if (connected == 0 || need > connected) {
      return self->finish(*batch, errc::replication_not_confirmed,
                          std::to_string(need) + " replica(s) must acknowledge, " +
                              std::to_string(connected) + " connected");
    }
    // WAIT n 0 would wait for good: at least 1 ms.
    auto within = std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()),
                           std::chrono::milliseconds(1));
    command wait{"PUBLISH", guard_channel, ""};
    wait.then({"WAIT", std::to_string(need), std::to_string(within.count())});
    self->conn_->submit(wait.bytes(), 2, clock::now() + within + reply_grace,
                        [self, batch, need, within](std::error_code ec, reply r) {
      const auto& steps = r.elements();
      if (!ec && (!r.is_array() || steps.size() != 2)) ec = errc::protocol_error;
      for (std::size_t i = 0; !ec && i < steps.size(); ++i) {
        if (steps[i].is_error()) return self->finish(*batch, error_from_reply(steps[i]), steps[i].str());
      }
      // The server checks WAIT's timeout at its own pace (hz 10: up to 100 ms late), so the
      // deadline here is what holds; missing it closes this connection, not the others.
      if (ec == errc::timeout) {
        return self->finish(*batch, errc::replication_not_confirmed,
                            "fewer than " + std::to_string(need) +
                                " replica(s) acknowledged within " +
                                std::to_string(within.count()) + " ms (no answer to WAIT)");
      }
      if (ec) return self->finish(*batch, ec, "WAIT: " + ec.message());
      long long acked = steps[1].is_integer() ? steps[1].integer() : -1;
      if (acked < need) {
        return self->finish(*batch, errc::replication_not_confirmed,
                            std::to_string(std::max(acked, 0LL)) + " of " + std::to_string(need) +
                                " replica(s) acknowledged within " +
                                std::to_string(within.count()) + " ms");
      }
      self->finish(*batch, {}, {});
    });
  });
}

void replication_guard::finish(std::vector<waiter>& batch, std::error_code ec,
                               const std::string& why) {
  busy_ = false;
  for (auto& w : batch) w.done(ec, why);
  if (!waiting_.empty() && !busy_) start_batch();
}

void guard_writes(std::vector<client>& nodes, const std::vector<std::size_t>& which,
                  std::size_t need, clock::time_point deadline,
                  replication_guard::done_handler done) {
  struct tally {
    std::size_t confirmed = 0, left = 0, need = 0;
    std::string why;
    replication_guard::done_handler done;
  };
  auto t = std::make_shared<tally>();
  t->need = need;
  t->done = std::move(done);
  std::vector<replication_guard*> guards;
  for (std::size_t i : which) {
    if (auto* guard = access::guard(nodes[i])) {
      guards.push_back(guard);
    } else {
      ++t->confirmed;
    }
  }
  if (guards.empty() || t->confirmed >= need) return t->done({}, {});
  t->left = guards.size();
  for (auto* guard : guards) {
    guard->confirm(deadline, [t](std::error_code ec, std::string why) {
      --t->left;
      if (!ec) {
        ++t->confirmed;
      } else if (t->why.empty()) {
        t->why = std::move(why);
      }
      if (!t->done) return;  // decided already
      if (t->confirmed >= t->need) return std::exchange(t->done, {})({}, {});
      if (t->confirmed + t->left < t->need) {
        std::exchange(t->done, {})(errc::replication_not_confirmed, t->why);
      }
    });
  }
}

}  // namespace dlock::detail
