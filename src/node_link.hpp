// SPDX-License-Identifier: Apache-2.0
// node_link.hpp: what the copies of one dlock::client share. Private.
//   node_link  the node's request connection (or, for a cluster, the router to its masters), the
//              spare connections of blocking calls, its wake-up inbox and its replication
//              guard; destroyed with the last copy, it closes
//              them all at once (requests in flight complete with errc::cancelled), except in
//              the child of a fork(), where they are the parent's
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "net/cluster.hpp"
#include "net/connection.hpp"
#include "net/inbox.hpp"
#include "replication_guard.hpp"

namespace dlock::detail {

struct node_link {
  node_link(const endpoint& where, client_options options);
  ~node_link();
  node_link(const node_link&) = delete;
  node_link& operator=(const node_link&) = delete;

  // The label of this node's events (observe.hpp).
  const std::string& name() const noexcept { return cluster ? cluster->name() : conn->name(); }

  // Where waits on keys in `slot` are woken: the inbox, or a cluster's for that slot (made
  // on first use; net/inbox.hpp).
  inbox& inbox_for(std::uint16_t slot);

  // A blocking script call (a lock's first acquire round, a lock's or permit's release; never
  // a user's command, which keeps its order on `conn`) when `conn` is busy: the calling thread
  // makes the round trip itself on the first idle spare connection, unless it has requests of
  // its own still unfinished (they must not be overtaken). While all are busy, `conn` is
  // occupied by other work and fewer than client_options::blocking_connections exist, one more
  // is opened (it serves from the next call on), and false is returned: the caller queues on
  // `conn` as before. TLS and Sentinel endpoints have none (no direct path there; one master
  // vote per connection).
  bool try_exchange_on_spare(std::string_view payload, std::size_t replies,
                             clock::time_point deadline, std::error_code& ec, reply& out);
  // When all spares are busy: a PING to each that dropped makes it connect again (a dropped
  // connection that nothing is submitted to stays down); at most every 100 ms.
  void revive_dormant_spares(clock::time_point deadline);

  std::shared_ptr<connection> conn;        // null for a cluster
  std::shared_ptr<cluster_router> cluster;  // redis-cluster:// only
  std::mutex slot_inboxes_mutex;
  std::unordered_map<std::uint16_t, std::shared_ptr<inbox>> slot_inboxes;  // cluster only
  std::shared_ptr<shard_subscribers> subscribers;  // cluster only: the inboxes' connections
  std::shared_ptr<inbox> wake_inbox;  // null for a cluster
  std::shared_ptr<replication_guard> guard;  // null unless client_options::replication_guard
  // try_exchange_on_spare's connections, sized once: [0, spare_count) are set and never change
  // until the link goes; spares_mutex serialises adding one.
  std::vector<std::shared_ptr<connection>> spares;
  std::atomic<std::size_t> spare_count{0};
  std::mutex spares_mutex;
  // When dormant spares may next be asked to reconnect (clock ticks since its epoch).
  std::atomic<clock::rep> next_revival{0};
};

}  // namespace dlock::detail
