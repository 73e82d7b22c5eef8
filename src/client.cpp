// SPDX-License-Identifier: Apache-2.0
#include "dlock/client.hpp"

#include "dlock/key_layout.hpp"
#include "node_link.hpp"
#include "observe.hpp"

namespace dlock {

client::client(std::string_view url, client_options options)
    : client(parse_endpoint(url), std::move(options)) {}

namespace detail {

node_link::node_link(const endpoint& where, client_options options) {
  if (where.is_cluster()) {
    cluster = std::make_shared<cluster_router>(where, options);
    subscribers = std::make_shared<shard_subscribers>(cluster, options);
    return;
  }
  conn = std::make_shared<connection>(where, options);  // checks the options
  if (!where.tls && !where.is_sentinel()) {
    spares.resize(static_cast<std::size_t>(options.blocking_connections));
  }
  wake_inbox = std::make_shared<inbox>(where, options);
  if (options.replication_guard.enabled) guard = std::make_shared<replication_guard>(where, options);
}

inbox& node_link::inbox_for(std::uint16_t slot) {
  if (!cluster) return *wake_inbox;
  std::lock_guard lock(slot_inboxes_mutex);
  auto& box = slot_inboxes[slot];
  if (!box) box = std::make_shared<inbox>(cluster, subscribers, slot, cluster->options());
  return *box;
}

bool node_link::try_exchange_on_spare(std::string_view payload, std::size_t replies,
                                      clock::time_point deadline, std::error_code& ec,
                                      reply& out) {
  if (spares.empty() || in_forked_child() || unfinished_submissions_of_this_thread() != 0) {
    return false;
  }
  auto* o = current_observer();
  auto began = o ? clock::now() : clock::time_point{};
  std::size_t count = spare_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < count; ++i) {
    if (spares[i]->try_exchange_direct(payload, replies, deadline, ec, out)) {
      if (o) o->on_node_request({name(), ec, clock::now() - began});
      return true;
    }
  }
  if (count == spares.size()) {
    revive_dormant_spares(deadline);
    return false;
  }
  if (!conn->occupied()) return false;
  std::lock_guard lock(spares_mutex);
  count = spare_count.load(std::memory_order_relaxed);
  if (count == spares.size()) return false;
  auto spare = std::make_shared<connection>(conn->where(), conn->options());
  // Connects now, so that it is ready for the next call; the PING's answer is not needed.
  spare->submit(command{"PING"}.bytes(), 1, deadline, [](std::error_code, reply) {});
  spares[count] = std::move(spare);
  spare_count.store(count + 1, std::memory_order_release);
  return false;
}

// A PING makes a dropped connection connect again; one that is connecting only answers it.
void node_link::revive_dormant_spares(clock::time_point deadline) {
  auto now = clock::now().time_since_epoch().count();
  auto due = next_revival.load(std::memory_order_relaxed);
  auto next = now + clock::duration(std::chrono::milliseconds(100)).count();
  if (now < due || !next_revival.compare_exchange_strong(due, next, std::memory_order_relaxed)) {
    return;
  }
  for (auto& spare : spares) {
    if (spare->dormant()) {
      spare->submit(command{"PING"}.bytes(), 1, deadline, [](std::error_code, reply) {});
    }
  }
}

node_link::~node_link() {
  if (in_forked_child()) {
    // The connections' sockets and I/O state are the parent's, and their locks may have been
    // copied held: never close or destroy them here.
    static auto* kept = new std::vector<std::shared_ptr<void>>;  // only the child's thread
    kept->push_back(conn);
    kept->push_back(cluster);
    kept->push_back(wake_inbox);
    kept->push_back(guard);
    for (auto& [slot, box] : slot_inboxes) kept->push_back(box);
    for (auto& spare : spares) kept->push_back(spare);
    kept->push_back(subscribers);
    return;
  }
  if (conn) conn->close(errc::cancelled);
  for (auto& spare : spares) {
    if (spare) spare->close(errc::cancelled);
  }
  if (cluster) cluster->shut_down();
  if (wake_inbox) wake_inbox->close();
  for (auto& [slot, box] : slot_inboxes) box->close();
  if (subscribers) subscribers->close();
  if (guard) guard->close();
}

}  // namespace detail

client::client(endpoint where, client_options options)
    : link_(std::make_shared<detail::node_link>(where, std::move(options))) {}

const endpoint& client::where() const noexcept {
  return link_->cluster ? link_->cluster->where() : link_->conn->where();
}
const client_options& client::options() const noexcept {
  return link_->cluster ? link_->cluster->options() : link_->conn->options();
}
detail::io_executor client::get_executor() const noexcept {
  return link_->cluster ? link_->cluster->get_executor() : link_->conn->get_executor();
}

namespace {

// now + timeout, saturating: milliseconds::max() means no deadline, where plain addition would
// overflow (UB) into a deadline in the past.
detail::clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  auto now = detail::clock::now();
  auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
      detail::clock::time_point::max() - now);
  return timeout <= std::chrono::milliseconds::zero() ? now
         : timeout < room                             ? now + timeout
                                                      : detail::clock::time_point::max();
}

reply session_refusal() {
  return reply::make_string(reply::kind::error,
                            "dlock: this command would change the shared connection's state "
                            "(database, user, transaction, tracking); set the database and user "
                            "in the client's URL or options, use dlock::transaction for "
                            "WATCH/MULTI/EXEC");
}

}  // namespace

void client::start_exec(command cmd, std::chrono::milliseconds timeout,
                        detail::unique_function<void(std::error_code, reply)> handler) {
  if (cmd.changes_session() && !dedicated_) return handler(errc::invalid_argument, session_refusal());
  std::size_t count = cmd.size();
  if (auto* o = detail::current_observer()) {
    // Timed only when someone listens: an unobserved request reads no clock for it.
    handler = [o, link = link_, began = detail::clock::now(), h = std::move(handler)](
                  std::error_code ec, reply r) mutable {
      o->on_node_request({link->name(), ec, detail::clock::now() - began});
      h(ec, std::move(r));
    };
  }
  if (link_->cluster) {
    return link_->cluster->submit(std::string(cmd.bytes()), count, deadline_after(timeout),
                                  std::move(handler));
  }
  link_->conn->submit(std::string(cmd.bytes()), count, deadline_after(timeout), std::move(handler));
}

bool client::try_exec_direct(const command& cmd, std::chrono::milliseconds timeout, reply& out,
                             std::error_code& ec) {
  if (cmd.changes_session() && !dedicated_) {
    ec = errc::invalid_argument;
    out = session_refusal();
    return true;
  }
  auto* o = detail::current_observer();
  auto began = o ? detail::clock::now() : detail::clock::time_point{};
  bool done = link_->cluster ? link_->cluster->try_exchange_direct(
                                   cmd.bytes(), cmd.size(), deadline_after(timeout), ec, out)
                             : link_->conn->try_exchange_direct(
                                   cmd.bytes(), cmd.size(), deadline_after(timeout), ec, out);
  if (!done) return false;
  if (o) o->on_node_request({link_->name(), ec, detail::clock::now() - began});
  return true;
}

// The caller's thread does the round trip itself when the connection is idle (no wake-up of
// the I/O thread, no wake-up back); otherwise the request queues behind the others.
reply client::exec(command cmd, std::error_code& ec) {
  reply out;
  if (!detail::on_io_thread() && try_exec_direct(cmd, options().request_timeout, out, ec)) {
    return out;
  }
  return detail::wait<reply>(ec, [&](auto handler) {
    start_exec(std::move(cmd), options().request_timeout, std::move(handler));
  });
}

reply client::exec(command cmd) {
  std::error_code ec;
  reply r = exec(std::move(cmd), ec);
  if (ec) throw std::system_error(ec, r.is_error() ? r.str() : where().to_string());
  return r;
}

std::string client::node_for(std::string_view key, std::error_code& ec) const {
  ec.clear();
  if (!link_->cluster) return where().to_string();
  auto owner = link_->cluster->owner_of(hash_slot(key), ec);
  return owner ? owner->to_string() : std::string{};
}

void client::disconnect() {
  if (link_->cluster) return link_->cluster->close(errc::cancelled);
  link_->conn->close(errc::cancelled);
  for (std::size_t i = 0; i < link_->spare_count.load(std::memory_order_acquire); ++i) {
    link_->spares[i]->close(errc::cancelled);
  }
}

}  // namespace dlock
