// SPDX-License-Identifier: Apache-2.0
// replication_guard.hpp: the replication guard (client_options::replication_guard). Private.
//   replication_guard  one per node: confirms, on a connection of its own, that enough of the
//                      node's replicas have every write this process saw answered before the
//                      call; calls that come while one WAIT is out share the next
//   guard_writes       runs it on some nodes of a lock and counts the confirmations
// All on the I/O thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dlock/client.hpp"
#include "net/connection.hpp"

namespace dlock::detail {

class replication_guard : public std::enable_shared_from_this<replication_guard> {
 public:
  using done_handler = unique_function<void(std::error_code, std::string why)>;

  replication_guard(const endpoint& where, client_options options);

  // `done` gets {} once the replicas asked for acknowledged every write answered before this
  // call, else replication_not_confirmed (or the connection's error) and why. It runs by
  // `deadline` or the guard's own timeout from now, whichever comes first, plus the time a
  // reply takes to come back.
  void confirm(clock::time_point deadline, done_handler done);
  void close();

 private:
  struct waiter {
    done_handler done;
    clock::time_point deadline;
  };
  void start_batch();
  void finish(std::vector<waiter>& batch, std::error_code ec, const std::string& why);

  std::shared_ptr<connection> conn_;
  replication_guard_options options_;
  std::chrono::milliseconds request_timeout_;
  std::vector<waiter> waiting_;
  bool busy_ = false;
};

// Confirms the writes on the nodes `which` of `nodes` (those whose client has the guard on;
// the others count as confirmed), and calls `done` with {} once `need` of them did, or with
// replication_not_confirmed once that can no longer happen, by `deadline` (see confirm).
// Without any guard on those nodes, `done` runs at once.
void guard_writes(std::vector<client>& nodes, const std::vector<std::size_t>& which,
                  std::size_t need, clock::time_point deadline,
                  replication_guard::done_handler done);

}  // namespace dlock::detail
