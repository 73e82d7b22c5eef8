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
  // call, else replication_not_confirmed (or the connection's error) and why, within `within`
  // (at least 1 ms) plus the request timeout.
  void confirm(std::chrono::milliseconds within, done_handler done);
  void close();

 private:
  struct waiter {
    done_handler done;
    std::chrono::milliseconds within;
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
// replication_not_confirmed once that can no longer happen. Without any guard on those nodes,
// `done` runs at once.
void guard_writes(std::vector<client>& nodes, const std::vector<std::size_t>& which,
                  std::size_t need, std::chrono::milliseconds within,
                  replication_guard::done_handler done);

// After an extend (a refresh, a settle) of a lease on `nodes`: the guard on all of them, a
// quorum needed, within each guard's own timeout.
void guard_extend(std::vector<client>& nodes, unique_function<void(std::error_code)> done);

}  // namespace dlock::detail
