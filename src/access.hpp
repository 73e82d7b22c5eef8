// SPDX-License-Identifier: Apache-2.0
// access.hpp: the library's way in to the private members of public classes. Private.
//   access  static forwarders to client's and mutex's type-erased cores, client's inbox and
//           cluster router, and the switch that gives a transaction its own connection
// The public headers keep these members private so that the API shows only what users call;
// src/ (scripts, the acquisition driver, diagnostics) and white-box tests come through here.
#pragma once

#include <chrono>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>

#include "dlock/client.hpp"
#include "dlock/mutex.hpp"
#include "net/subscriber.hpp"
#include "node_link.hpp"

namespace dlock::detail {

struct access {
  // dlock's own words (a script call, the plain commands of acquire_unqueued), formatted as
  // one request without the checks that user commands need.
  static command library_command(std::span<const std::span<const std::string_view>> commands) {
    return command(command::library_words{}, commands);
  }
  // The same, written into this thread's reusable command (exchange_script_direct's). It stays
  // valid until the thread's next call; a call made meanwhile (re-entered from an observer)
  // gets a command of its own, and so does one made after the thread's objects were destroyed
  // (a lease in a static or thread_local object, released at exit): null then.
  struct scratch_command {
    command cmd{command::library_words{}};
    bool in_use = false;
  };
  static scratch_command* thread_scratch() {
    // Trivially destructible: still readable while the thread's other objects are destroyed.
    thread_local bool destroyed = false;
    if (destroyed) return nullptr;
    struct owner {
      scratch_command scratch;
      bool& destroyed;
      ~owner() { destroyed = true; }
    };
    thread_local owner o{{}, destroyed};
    return &o.scratch;
  }
  static void reformat(command& cmd, std::span<const std::span<const std::string_view>> commands) {
    cmd.reformat(command::library_words{}, commands);
  }
  // client::async_exec's core: sends `cmd`, `timeout` bounding the whole request.
  static void start_exec(client& c, command cmd, std::chrono::milliseconds timeout,
                         unique_function<void(std::error_code, reply)> handler) {
    c.start_exec(std::move(cmd), timeout, std::move(handler));
  }
  // exec()'s blocking fast path: false, nothing sent, unless the connection is idle.
  static bool try_exec_direct(client& c, const command& cmd, std::chrono::milliseconds timeout,
                              reply& out, std::error_code& ec) {
    return c.try_exec_direct(cmd, timeout, out, ec);
  }
  // The same, then on the node's spare connections (node_link::try_exchange_on_spare): for
  // dlock's own blocking script calls only.
  static bool try_exec_direct_any(client& c, const command& cmd,
                                  std::chrono::milliseconds timeout, reply& out,
                                  std::error_code& ec) {
    if (c.try_exec_direct(cmd, timeout, out, ec)) return true;
    return c.link_->try_exchange_on_spare(cmd.bytes(), cmd.size(),
                                          std::chrono::steady_clock::now() + timeout, ec, out);
  }
  // The pub/sub inbox through which a release wakes this client's waiters on keys in `slot`.
  static inbox& wake_inbox(const client& c, std::uint16_t slot) {
    return c.link_->inbox_for(slot);
  }
  // What a client shares with its copies, for a callback that must not keep them alive (a
  // weak_ptr of it), and a handle made from it again.
  static std::weak_ptr<node_link> link_of(const client& c) noexcept { return c.link_; }
  static client client_of(std::shared_ptr<node_link> link) { return client(std::move(link)); }
  // The node's request connection, or null for a cluster (whose connections its router keeps).
  static connection* request_connection(const client& c) noexcept { return c.link_->conn.get(); }
  // The node's replication guard, or null when the client has none.
  static replication_guard* guard(const client& c) noexcept { return c.link_->guard.get(); }
  // The router of a redis-cluster:// client, or null.
  static cluster_router* cluster(const client& c) noexcept { return c.link_->cluster.get(); }
  // Where a channel_subscriber of this client's node subscribes.
  static subscription_site subscription_site_of(const client& c) {
    return {c.where(), c.options(), c.link_->cluster, c.get_executor()};
  }
  // A transaction's own connection, shared with no one: it may WATCH and MULTI.
  static void make_dedicated(client& c) noexcept { c.dedicated_ = true; }

  // The mutex's core (an election sets what its extends carry along).
  static std::shared_ptr<lock_core> core_of(const mutex& m) noexcept { return m.core_; }
  // mutex::async_acquire's core: up to `attempts` rounds until `deadline`.
  static void start_acquire(mutex& m, mutex::clock::time_point deadline, int attempts,
                            unique_function<void(std::error_code, lease)> handler,
                            node_results* nodes = nullptr) {
    m.start_acquire(deadline, attempts, std::move(handler), nodes);
  }
};

}  // namespace dlock::detail
