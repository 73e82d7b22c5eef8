// SPDX-License-Identifier: Apache-2.0
// Optimistic transactions: WATCH, the caller's reads, MULTI + queued writes, EXEC; again on
// conflict. The header explains why each run needs a connection of its own; this file adds how
// a silently replaced connection is caught before it can run writes without their WATCH:
//
//   1. CLIENT SETNAME <random> + WATCH keys   one request, so both land on the same socket
//   2. the body's reads                       any connection would do; they only read
//   3. CLIENT GETNAME + MULTI + writes         queued, not run; the name proves that this is
//                                             still the connection that WATCHed
//   4. EXEC                                   alone: a connection that replaced ours between 3
//                                             and 4 has no MULTI and answers an error
//
// A connection whose name no longer matches holds our writes in a MULTI of its own, which
// DISCARD drops. Timeouts also close the connection (its replies could no longer be paired),
// which the name check catches the same way.
#include "dlock/transaction.hpp"

#include <mutex>
#include <span>
#include <thread>

#include "access.hpp"
#include "algo/cluster_routing.hpp"
#include "algo/retry.hpp"
#include "dlock/key_layout.hpp"
#include "algo/transaction_backoff.hpp"
#include "token.hpp"

namespace dlock {
namespace detail {

struct transaction_pool {
  transaction_pool(endpoint w, client_options o, transaction_options t)
      : where(std::move(w)), options(std::move(o)), topts(t) {}
  ~transaction_pool() {
    for (auto& c : idle) c.disconnect();
  }

  client take() {
    {
      std::lock_guard guard(mutex);
      if (!idle.empty()) {
        client c = std::move(idle.back());
        idle.pop_back();
        return c;
      }
    }
    client c(where, options);  // connects on its first request
    access::make_dedicated(c);
    return c;
  }

  // Only a connection with no WATCH or MULTI left on it goes back.
  void give_back(client c) {
    std::unique_lock guard(mutex);
    if (idle.size() < topts.idle_connections) {
      idle.push_back(std::move(c));
      return;
    }
    guard.unlock();
    c.disconnect();
  }

  endpoint where;
  client_options options;
  transaction_options topts;
  std::mutex mutex;
  std::vector<client> idle;
};

}  // namespace detail

namespace {

// Failures of the link, not of the command: before EXEC they leave nothing applied (a queued
// MULTI dies with its connection), so the attempt may simply be made again.
bool is_transport_error(std::error_code ec) {
  return ec == errc::timeout || ec == errc::connection_lost || ec == errc::node_unreachable;
}

// The first error reply among a pipelined request's replies, or nullptr.
const reply* first_error(const reply& r) {
  for (const auto& e : r.elements()) {
    if (e.is_error()) return &e;
  }
  return nullptr;
}

// Holds the dedicated connection for one run(); returns it to the pool only if marked clean.
class borrowed_connection {
 public:
  explicit borrowed_connection(detail::transaction_pool& pool) : pool_(pool), conn_(pool.take()) {}
  ~borrowed_connection() {
    if (clean_) {
      pool_.give_back(std::move(conn_));
    } else {
      conn_.disconnect();
    }
  }
  borrowed_connection(const borrowed_connection&) = delete;
  borrowed_connection& operator=(const borrowed_connection&) = delete;

  client& get() noexcept { return conn_; }
  void set_clean(bool clean) noexcept { clean_ = clean; }

 private:
  detail::transaction_pool& pool_;
  client conn_;
  bool clean_ = false;
};

}  // namespace

reply transaction::read(command cmd, std::error_code& ec) { return conn_.exec(std::move(cmd), ec); }

reply transaction::read(command cmd) { return conn_.exec(std::move(cmd)); }

namespace {

// A transaction on a cluster runs on the connection to one master: every key it WATCHes or
// writes must be in one slot (use a hash tag: "{order:42}:items"), or its EXEC would meet a
// connection without its WATCH.
constexpr const char* cross_slot_text =
    "a transaction on a Redis Cluster must keep all its keys in one slot (use a hash tag)";

std::optional<std::uint16_t> slot_of(const std::vector<std::string>& args) {
  return detail::command_slot(command(std::span<const std::string>(args)).bytes());
}

}  // namespace

void transaction::watch(std::string_view key) {
  if (conn_.where().is_cluster() && hash_slot(key) != slot_) {
    throw std::system_error(make_error_code(errc::invalid_argument), cross_slot_text);
  }
  conn_.exec({"WATCH", key});
}

void transaction::queue(std::initializer_list<std::string_view> args) {
  queued_.emplace_back(args.begin(), args.end());
}

void transaction::queue(std::vector<std::string> args) { queued_.push_back(std::move(args)); }

transaction_runner::transaction_runner(const client& node, transaction_options options) {
  if (options.max_attempts < 1) {
    throw std::system_error(make_error_code(errc::invalid_argument), "max_attempts must be >= 1");
  }
  if (options.backoff.count() < 0 || options.max_backoff.count() < 0) {
    throw std::system_error(make_error_code(errc::invalid_argument), "backoff is negative");
  }
  pool_ = std::make_shared<detail::transaction_pool>(node.where(), node.options(), options);
}

transaction_runner::~transaction_runner() = default;

transaction_result transaction_runner::run(std::vector<std::string> keys, const body_type& body,
                                           std::error_code& ec) {
  ec.clear();
  transaction_result result;
  if (keys.empty() || !body) {
    ec = errc::invalid_argument;
    return result;
  }
  const bool cluster = pool_->where.is_cluster();
  const std::uint16_t slot = hash_slot(keys.front());
  if (cluster && std::any_of(keys.begin(), keys.end(),
                             [&](const std::string& k) { return hash_slot(k) != slot; })) {
    ec = errc::invalid_argument;
    return result;
  }
  if (detail::on_io_thread()) {
    ec = errc::would_block_io_thread;
    return result;
  }
  const auto& topts = pool_->topts;
  borrowed_connection held(*pool_);
  client& conn = held.get();
  std::vector<std::string> watch_args{"WATCH"};
  watch_args.insert(watch_args.end(), keys.begin(), keys.end());

  std::error_code last_failure = errc::transaction_aborted;  // why the last attempt did not commit
  for (int attempt = 1; attempt <= topts.max_attempts; ++attempt) {
    result.attempts = attempt;
    if (attempt > 1) {
      std::this_thread::sleep_for(detail::transaction_backoff(
          topts.backoff, topts.max_backoff, attempt - 1, detail::jitter_random()));
    }
    // 1. Name the connection and WATCH, in one request.
    std::string name = "dlock-tx-" + detail::random_token();
    command start{"CLIENT", "SETNAME", name};
    start.then(std::span<const std::string>(watch_args));
    reply started = conn.exec(std::move(start), ec);
    if (is_transport_error(ec)) {
      last_failure = std::exchange(ec, {});
      continue;
    }
    if (ec) return result;
    if (const reply* e = first_error(started)) {
      ec = error_from_reply(*e);
      return result;
    }

    // 2. The body reads and queues. An exception leaves `held` unclean: the connection, with
    // its WATCH, is closed rather than reused.
    transaction tx(conn, attempt);
    tx.slot_ = slot;
    body(tx);
    if (cluster && std::any_of(tx.queued_.begin(), tx.queued_.end(), [&](const auto& args) {
          auto queued_slot = slot_of(args);
          return queued_slot && *queued_slot != tx.slot_;
        })) {
      conn.exec({"UNWATCH"}, ec);
      held.set_clean(!ec);
      ec = errc::invalid_argument;
      return result;
    }
    if (tx.discarded_) {
      conn.exec({"UNWATCH"}, ec);
      held.set_clean(!ec);
      ec.clear();
      return result;
    }

    // 3. Queue the writes behind the name check.
    command queue{"CLIENT", "GETNAME"};
    queue.then({"MULTI"});
    for (const auto& args : tx.queued_) queue.then(std::span<const std::string>(args));
    reply queued = conn.exec(std::move(queue), ec);
    if (is_transport_error(ec)) {
      // The connection dropped: its MULTI, and our writes, died with it.
      last_failure = std::exchange(ec, {});
      continue;
    }
    if (ec) return result;
    const auto& q = queued.elements();
    if (q.size() < 2 || !q[0].is_string() || q[0].str() != name) {
      // Not the connection that WATCHed: it was replaced after step 1. Drop what it queued.
      last_failure = errc::connection_lost;
      conn.exec({"DISCARD"}, ec);
      if (is_transport_error(ec)) ec.clear();
      if (ec) return result;
      continue;
    }
    if (const reply* e = first_error(queued)) {
      // A malformed write (unknown command, wrong arity ...): EXEC would refuse it anyway.
      ec = error_from_reply(*e);
      std::error_code ignored;
      conn.exec({"DISCARD"}, ignored);
      held.set_clean(!ignored);
      return result;
    }

    // 4. EXEC alone.
    reply done = conn.exec({"EXEC"}, ec);
    if (ec) {
      if (done.is_error() && done.str().find("EXEC without MULTI") != std::string::npos) {
        // Replaced between 3 and 4: nothing ran, and the new connection is clean.
        last_failure = errc::connection_lost;
        ec.clear();
        continue;
      }
      return result;  // timeout / connection_lost: the writes may have been applied
    }
    if (done.is_nil()) {  // a watched key changed: nothing was written
      last_failure = errc::transaction_aborted;
      continue;
    }
    if (!done.is_array()) {
      ec = errc::protocol_error;
      return result;
    }
    held.set_clean(true);
    result.committed = true;
    result.replies = std::move(done);
    return result;
  }
  // Whatever ended the last attempt left nothing watched: EXEC (even an aborted one) clears
  // WATCH, and a replaced connection never had it. A dropped one reconnects clean.
  held.set_clean(true);
  ec = last_failure;
  return result;
}

transaction_result transaction_runner::run(std::vector<std::string> keys, const body_type& body) {
  std::error_code ec;
  transaction_result result = run(std::move(keys), body, ec);
  if (ec) {
    throw std::system_error(ec, "dlock: transaction gave up after " +
                                    std::to_string(result.attempts) + " attempts");
  }
  return result;
}

}  // namespace dlock
