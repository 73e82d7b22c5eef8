// node_link.hpp: what the copies of one dlock::client share. Private.
//   node_link  the node's request connection (or, for a cluster, the router to its masters), its
//              wake-up inbox and its replication guard; destroyed with the last copy, it closes
//              them all at once (requests in flight complete with errc::cancelled), except in
//              the child of a fork(), where they are the parent's
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

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

  std::shared_ptr<connection> conn;        // null for a cluster
  std::shared_ptr<cluster_router> cluster;  // redis-cluster:// only
  std::mutex slot_inboxes_mutex;
  std::unordered_map<std::uint16_t, std::shared_ptr<inbox>> slot_inboxes;  // cluster only
  std::shared_ptr<shard_subscribers> subscribers;  // cluster only: the inboxes' connections
  std::shared_ptr<inbox> wake_inbox;  // null for a cluster
  std::shared_ptr<replication_guard> guard;  // null unless client_options::replication_guard
};

}  // namespace dlock::detail
