// SPDX-License-Identifier: Apache-2.0
// net/cluster.hpp: a redis-cluster:// endpoint's requests, each sent to the master of its slot.
// Private.
//   cluster_router  reads the slot map (CLUSTER SHARDS, else CLUSTER SLOTS) from the seeds or
//                   the masters it knows, keeps one pipelined connection per master, follows
//                   MOVED (patches the map, reads it again, resends) and ASK (ASKING, resends
//                   once), retries TRYAGAIN / CLUSTERDOWN / LOADING within the request's
//                   deadline, and reads the map again after a connection fails and every
//                   `map_max_age`. The slot is the command's first key's (algo/cluster_routing);
//                   a command without a key goes where the last one with a key went.
// Thread-safety: every public member may be called from any thread; answers and redirects are
// handled on the I/O thread. `mu_` guards the map and the connections.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algo/cluster_routing.hpp"
#include "net/connection.hpp"

namespace dlock::detail {

// Throws std::system_error(invalid_argument) for a cluster endpoint or options that cannot
// work: no seeds, a db other than 0 (a cluster has only database 0), a unix socket,
// restart_quarantine or the replication guard (not supported on a cluster yet).
void check_cluster_endpoint(const endpoint& where, const client_options& options);

class cluster_router : public std::enable_shared_from_this<cluster_router> {
 public:
  // How many MOVED one request may follow before it fails with cluster_error: a slot that
  // moves twice during one request is rare; more is a loop.
  static constexpr int max_redirects = 5;
  static constexpr std::chrono::milliseconds retry_later_delay{20};
  static constexpr std::chrono::seconds map_max_age{30};
  // Reading the map again after a redirect or a failure waits at least this long after the
  // last read, so that a storm of MOVED during a migration costs one read per interval.
  static constexpr std::chrono::milliseconds min_map_interval{100};

  cluster_router(endpoint where, client_options options);

  const endpoint& where() const noexcept { return where_; }
  const std::string& name() const noexcept { return name_; }
  const client_options& options() const noexcept { return options_; }
  io_executor get_executor() const noexcept { return executor_; }

  // As connection::submit, to the master of the command's slot (any master for a command
  // without a key). The handler runs exactly once, on the I/O thread, by `deadline`.
  void submit(std::string payload, std::size_t replies, clock::time_point deadline,
              reply_handler handler);
  // As connection::try_exchange_direct, on the connection to the slot's master, when the map
  // is known. A redirect or a "retry later" answer did not run the command: the map is
  // patched and false returned, so that the caller's submit() follows it.
  bool try_exchange_direct(std::string_view payload, std::size_t replies,
                           clock::time_point deadline, std::error_code& ec, reply& out);
  // Closes the connections (a later request connects again); requests waiting for the map
  // fail with `reason`.
  void close(std::error_code reason);
  // For good (the client's last copy is gone): what is still under way (retries, redirects,
  // reads of the map) ends with errc::cancelled instead of connecting again.
  void shut_down();

  // The master serving `slot` as the client believes it, read from the cluster if need be.
  // Blocking; for diagnostics and tests.
  std::optional<host_port> owner_of(std::uint16_t slot, std::error_code& ec);

  // The map as it stands, read from the cluster first if there is none yet. Blocking; for
  // diagnostics (dlock doctor).
  std::optional<slot_map> current_map(std::error_code& ec);

  // The master serving `slot` by the map as it stands, without waiting; null (and a read of
  // the map started at once, unless `read_now` is false: then within min_map_interval) when
  // there is none yet. For the sharded wake-up inboxes (net/inbox.hpp) and the copies' check.
  std::optional<host_port> known_owner(std::uint16_t slot, bool read_now = true);
  // Starts a read of the map unless one is under way or the last was under min_map_interval
  // ago (unless `now`). Runs the reads on the I/O thread.
  void refresh(bool now = false);
  // The endpoint of one node: where()'s credentials and TLS, that node's address.
  endpoint node_endpoint(const host_port& node) const;

  // What the router has followed, for tests and metrics.
  struct counters {
    std::uint64_t moved = 0, ask = 0, retried_later = 0, map_reads = 0;
  };
  counters stats() const noexcept;

 private:
  struct job {
    std::string payload;
    std::size_t replies = 1;
    clock::time_point deadline;
    reply_handler handler;
    std::optional<std::uint16_t> slot;
    int redirects = 0;
    bool waited_for_map = false;  // routed once more after a fresh map: no second wait
    std::uint64_t id = 0;         // while it waits for a map
    clock::time_point tried_at{};  // when the try under way was routed
  };

  void route(job j);
  // Sends `j` to `to` over `conn`, with ASKING before it when `asking`.
  void send(const std::shared_ptr<connection>& conn, const host_port& to, job j, bool asking);
  void on_answer(const host_port& from, job j, bool asking, std::error_code ec, reply r);
  void retry_later(job j);
  // Fails the waiting job `id` with node_unreachable if it still waits for a map at `deadline`.
  void expire_wait(std::uint64_t id, clock::time_point deadline);
  void fail(job& j, std::error_code ec, std::string text);
  // One read of the map: the nodes to ask in turn and what each said.
  struct map_read {
    std::vector<host_port> candidates;
    std::size_t next = 0;
    std::vector<std::string> failures;
    std::vector<std::error_code> codes;  // each failure's, when it had one
    std::optional<slot_map> fallback;  // from a node whose cluster_state was not ok
  };
  void read_map_from(std::shared_ptr<map_read> read);
  void install(slot_map map);
  // After MOVED: the map's entry, and the note that a read under way may be older.
  void patch(std::uint16_t slot, const host_port& owner);
  void map_failed(std::error_code ec, std::string text);
  // Under mu_. Null (and `why`) when the connection cannot be made (TLS files unreadable).
  std::shared_ptr<connection> connection_to(const host_port& node, std::string& why);
  // Where a command without a key goes (under mu_, map_ set): the node of the last command
  // with one, so that a transaction's EXEC follows its WATCH and MULTI; else the first master.
  const host_port* keyless_target() const;

  endpoint where_;
  client_options options_;
  std::string name_;
  io_executor executor_;

  mutable std::mutex mu_;
  std::optional<slot_map> map_;
  clock::time_point map_read_at_{};
  bool reading_map_ = false;
  bool read_again_ = false;  // another read was asked for while one was under way
  std::vector<std::pair<std::uint16_t, host_port>> patches_since_read_;  // MOVED meanwhile
  std::atomic<bool> shut_down_{false};
  std::vector<std::pair<host_port, std::shared_ptr<connection>>> connections_;
  std::vector<job> waiting_for_map_;
  std::optional<host_port> last_keyed_node_;
  std::uint64_t last_job_id_ = 0;

  std::atomic<std::uint64_t> moved_{0}, ask_{0}, retried_later_{0}, map_reads_{0};
};

}  // namespace dlock::detail
