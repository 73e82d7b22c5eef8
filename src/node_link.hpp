// node_link.hpp: what the copies of one dlock::client share. Private.
//   node_link  the node's request connection, its wake-up inbox and its replication guard;
//              destroyed with the last copy, it closes them all at once (requests in flight
//              complete with errc::cancelled), except in the child of a fork(), where they are
//              the parent's
#pragma once

#include <memory>

#include "net/connection.hpp"
#include "net/inbox.hpp"
#include "replication_guard.hpp"

namespace dlock::detail {

struct node_link {
  node_link(const endpoint& where, client_options options);
  ~node_link();
  node_link(const node_link&) = delete;
  node_link& operator=(const node_link&) = delete;

  std::shared_ptr<connection> conn;
  std::shared_ptr<inbox> wake_inbox;
  std::shared_ptr<replication_guard> guard;  // null unless client_options::replication_guard
};

}  // namespace dlock::detail
