// WAIT only counts the writes of its own connection: on a fresh connection it returns at once,
// whatever the replicas hold. So each batch first PUBLISHes (a write that replicates and sets
// this connection's offset past every write the server ran before it, ours on the request
// connection included), then WAITs for that offset. The channel is the wake-up channels'
// prefix, which the documented ACL rule already allows; nobody subscribes to it.
#include "replication_guard.hpp"

#include <algorithm>

#include "access.hpp"
#include "algo/quorum_round.hpp"

namespace dlock::detail {
namespace {

constexpr std::string_view guard_channel = "dlock:wake:guard";

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

void replication_guard::confirm(std::chrono::milliseconds within, done_handler done) {
  waiting_.push_back({std::move(done), std::max(within, std::chrono::milliseconds(1))});
  if (!busy_) start_batch();
}

void replication_guard::start_batch() {
  busy_ = true;
  auto batch = std::make_shared<std::vector<waiter>>(std::exchange(waiting_, {}));
  auto within = std::min_element(batch->begin(), batch->end(), [](auto& a, auto& b) {
                  return a.within < b.within;
                })->within;
  within = std::min(within, options_.timeout);
  within = std::max(within, std::chrono::milliseconds(1));  // WAIT n 0 would wait for good
  auto self = shared_from_this();
  conn_->submit(command{"ROLE"}.bytes(), 1, clock::now() + request_timeout_,
                [self, batch, within](std::error_code ec, reply role) {
    if (!ec && role.is_error()) ec = error_from_reply(role);
    if (ec) return self->finish(*batch, ec, "ROLE: " + (role.is_error() ? role.str() : ec.message()));
    const auto& e = role.elements();
    if (!role.is_array() || e.size() < 3 || e[0].str() != "master" || !e[2].is_array()) {
      return self->finish(*batch, errc::replication_not_confirmed,
                          "the node is no master (ROLE: " + role.to_string() + ")");
    }
    long long connected = static_cast<long long>(e[2].elements().size());
    long long need = self->options_.replicas > 0 ? self->options_.replicas : connected / 2 + 1;
    if (connected == 0 || need > connected) {
      return self->finish(*batch, errc::replication_not_confirmed,
                          std::to_string(need) + " replica(s) must acknowledge, " +
                              std::to_string(connected) + " connected");
    }
    command wait{"PUBLISH", guard_channel, ""};
    wait.then({"WAIT", std::to_string(need), std::to_string(within.count())});
    self->conn_->submit(wait.bytes(), 2, clock::now() + within + self->request_timeout_,
                        [self, batch, need, within](std::error_code ec, reply r) {
      std::string why;
      if (!ec) {
        const auto& steps = r.elements();
        for (const auto& step : steps) {
          if (step.is_error()) {
            ec = error_from_reply(step);
            why = step.str();
            break;
          }
        }
        if (!ec && steps.size() == 2 && steps[1].is_integer() && steps[1].integer() < need) {
          ec = errc::replication_not_confirmed;
          why = std::to_string(steps[1].integer()) + " of " + std::to_string(need) +
                " replica(s) acknowledged within " + std::to_string(within.count()) + " ms";
        }
      } else {
        why = ec.message();
      }
      self->finish(*batch, ec, why);
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
                  std::size_t need, std::chrono::milliseconds within,
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
    auto* guard = access::guard(nodes[i]);
    if (guard) {
      guards.push_back(guard);
    } else {
      ++t->confirmed;
    }
  }
  if (guards.empty() || t->confirmed >= need) return t->done({}, {});
  t->left = guards.size();
  for (auto* guard : guards) {
    guard->confirm(within, [t](std::error_code ec, std::string why) {
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

void guard_extend(std::vector<client>& nodes, unique_function<void(std::error_code)> done) {
  std::vector<std::size_t> all(nodes.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  guard_writes(nodes, all, quorum_of(nodes.size()), std::chrono::milliseconds::max(),
               [done = std::move(done)](std::error_code ec, std::string) mutable { done(ec); });
}

}  // namespace dlock::detail
