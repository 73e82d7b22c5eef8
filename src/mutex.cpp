// SPDX-License-Identifier: Apache-2.0
#include "dlock/mutex.hpp"

#include <climits>

#include "algo/retry.hpp"
#include "dlock/key_layout.hpp"
#include "lock_core.hpp"
#include "lockable.hpp"
#include "option_checks.hpp"

namespace dlock {
namespace {

void check_arguments(const std::vector<client>& nodes, const std::string& name,
                     const std::string& key, const lock_options& o) {
  using detail::reject_argument;
  if (nodes.empty()) reject_argument("a lock needs at least one node");
  detail::check_shared_options("lock", name, key, o);
  // Such a key would share its value with another name's fencing counter or queue.
  if (is_companion_key(key)) {
    reject_argument("the lock key is one of dlock's companion keys of another name (such as "
                    "{x}:fence; see dlock/key_layout.hpp)");
  }
  if (o.copies < 0 || o.copies > 15 || (o.copies > 1 && o.copies % 2 == 0)) {
    reject_argument("copies must be 0, 1 or odd from 3 to 15");
  }
  if (o.copies > 1 && (nodes.size() != 1 || !nodes.front().where().is_cluster())) {
    reject_argument("copies need one redis-cluster:// client");
  }
  if (o.fair && (nodes.size() > 1 || o.copies > 1 || !o.wake_on_release)) {
    reject_argument("fair mode needs a single node, one copy and wake_on_release");
  }
}

// With copies, the Redlock engine sees one node per copy: the cluster client, which sends each
// copy's commands to the master of its slot.
std::vector<client> per_copy(std::vector<client> nodes, const lock_options& o) {
  if (o.copies <= 1) return nodes;
  return std::vector<client>(static_cast<std::size_t>(o.copies), nodes.front());
}

}  // namespace

mutex::mutex(client node, std::string name, lock_options options)
    : mutex(std::vector<client>{std::move(node)}, std::move(name), std::move(options)) {}

mutex::mutex(std::vector<client> nodes, std::string name, lock_options options)
    : holdings_(std::make_unique<detail::lockable_holdings>()) {
  std::string key = options.key_prefix + name;
  check_arguments(nodes, name, key, options);
  core_ = std::make_shared<detail::lock_core>(per_copy(std::move(nodes), options), std::move(key),
                                              std::move(options));
}

mutex::~mutex() = default;  // each thread's lease releases as holdings_ goes

void mutex::start_acquire(clock::time_point deadline, int attempts,
                          detail::unique_function<void(std::error_code, lease)> handler,
                          node_results* nodes, std::stop_token stop) {
  core_->start_acquire(deadline, attempts, std::move(handler), nodes,
                       wait_control{.stop = std::move(stop), .on_retry = {}});
}

// Every blocking acquisition: the first round from this thread when the connection is idle
// (no hand-over to the I/O thread and back), the rest, if any, the async way.
lease mutex::acquire_blocking(clock::time_point deadline, int attempts, std::error_code& ec,
                              node_results* nodes) {
  return core_->acquire_blocking(deadline, attempts, ec, nodes);
}

lease mutex::acquire_until(clock::time_point deadline, std::error_code& ec) {
  return acquire_blocking(deadline, INT_MAX, ec, nullptr);
}

lease mutex::acquire_until(clock::time_point deadline, node_results* nodes, std::error_code& ec) {
  return acquire_blocking(deadline, INT_MAX, ec, nodes);
}

lease mutex::acquire_until(clock::time_point deadline, const wait_control& control,
                           node_results* nodes, std::error_code& ec) {
  return core_->acquire_blocking(deadline, INT_MAX, ec, nodes, control);
}

lease mutex::acquire(std::error_code& ec) {
  return acquire_blocking(clock::time_point::max(), INT_MAX, ec, nullptr);
}

lease mutex::acquire(node_results* nodes, std::error_code& ec) {
  return acquire_blocking(clock::time_point::max(), INT_MAX, ec, nodes);
}

lease mutex::try_acquire(std::error_code& ec) {
  return acquire_blocking(clock::time_point::max(), 1, ec, nullptr);
}

lease mutex::try_acquire(node_results* nodes, std::error_code& ec) {
  return acquire_blocking(clock::time_point::max(), 1, ec, nodes);
}

lease mutex::try_acquire() { return acquire_or_throw(clock::now()); }

// A deadline already past is one whole round (try_acquire).
lease mutex::acquire_or_throw(clock::time_point deadline) {
  std::error_code ec;
  lease l = acquire_until(deadline, ec);
  if (detail::throws_from_wait(ec, deadline)) {
    throw std::system_error(ec, "dlock: cannot lock " + key());
  }
  return l;
}

lease mutex::acquire() {
  std::error_code ec;
  node_results nodes;
  lease l = acquire(&nodes, ec);
  if (ec) {
    std::string what = "dlock: cannot lock " + key();
    for (const auto& n : nodes) what += "; " + n.node + ": " + to_string(n);
    throw std::system_error(ec, what);
  }
  return l;
}

lease mutex::adopt(std::string token, std::uint64_t fencing_token) {
  if (token.empty() || token.size() > max_key_bytes) {
    throw std::system_error(make_error_code(errc::invalid_argument), "bad owner token");
  }
  return core_->adopt(std::move(token), fencing_token);
}

bool mutex::lock_until(clock::time_point deadline) {
  std::error_code ec;
  node_results results;
  lease l = acquire_until(deadline, &results, ec);
  bool ok = static_cast<bool>(l);
  holdings_->remember(std::move(l), ec, std::move(results));
  if (!ok && detail::throws_from_wait(ec, deadline)) {
    // A deadline can only end a wait; credentials, ACLs or a wrong key type will not heal.
    throw std::system_error(ec, "dlock: cannot lock " + key());
  }
  return ok;
}

void mutex::lock() {
  if (!lock_until(clock::time_point::max())) {
    throw std::system_error(last_error(), "dlock: cannot lock " + key());
  }
}

bool mutex::try_lock() {
  std::error_code ec;
  node_results results;
  lease l = try_acquire(&results, ec);
  bool ok = static_cast<bool>(l);
  holdings_->remember(std::move(l), ec, std::move(results));
  return ok;
}

void mutex::unlock() noexcept { holdings_->unlock(); }

const lease* mutex::current_lease() const noexcept { return holdings_->current(); }
std::error_code mutex::last_error() const noexcept { return holdings_->last_error(); }
node_results mutex::last_results() const { return holdings_->last_results(); }

const std::string& mutex::key() const noexcept { return core_->key(); }
std::size_t mutex::node_count() const noexcept { return core_->size(); }
detail::io_executor mutex::get_executor() const noexcept { return core_->get_executor(); }

std::string to_string(const node_result& r) {
  switch (r.outcome) {
    case node_result::vote::granted: return "granted";
    case node_result::vote::taken:
      return "taken (holder's TTL " + std::to_string(r.holder_ttl_ms) + " ms)";
    case node_result::vote::failed: return "failed: " + r.message;
    case node_result::vote::pending: return "pending";
  }
  return {};
}

}  // namespace dlock
