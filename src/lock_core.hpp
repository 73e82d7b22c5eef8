// SPDX-License-Identifier: Apache-2.0
// lock_core.hpp: what a dlock::mutex is on the inside. Private.
//   lock_core  the lock's nodes, key and options; runs its acquisitions (algo/acquisition,
//              driven by acquire_run) and is the lease_owner of its leases: release and extend
//              over the N nodes (quorum_release, quorum_extend); works on the I/O thread
// Leases keep the core alive, so a lease may outlive the mutex that made it.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "acquire_run.hpp"
#include "algo/acquisition.hpp"
#include "dlock/lease.hpp"
#include "dlock/mutex.hpp"
#include "lease_state.hpp"

namespace dlock::detail {

class acquire_run;

class lock_core final : public lease_owner, public std::enable_shared_from_this<lock_core> {
 public:
  using acquire_handler = unique_function<void(std::error_code, lease)>;

  lock_core(std::vector<client> nodes, std::string key, lock_options options);

  const std::string& key() const noexcept override { return key_; }
  primitive kind() const noexcept override { return primitive::lock; }
  std::chrono::milliseconds default_ttl() const noexcept override { return options_.ttl; }
  std::size_t size() const noexcept { return nodes_.size(); }
  const lock_options& options() const noexcept { return options_; }
  io_executor get_executor() const noexcept override { return nodes_.front().get_executor(); }

  // Up to `attempts` rounds until `deadline` (max(): attempts only), under one acquisition id.
  // `out`, if set, gets the last round's votes before the handler runs. `control`: its stop
  // ends the wait (cancelled, what was won given back); its on_retry hears of each failed round.
  void start_acquire(steady::time_point deadline, int attempts, acquire_handler handler,
                     node_results* out, wait_control control = {});
  // The same, blocking the calling thread; on a single node the first round goes out from
  // this thread when the connection is idle.
  lease acquire_blocking(steady::time_point deadline, int attempts, std::error_code& ec,
                         node_results* out, const wait_control& control = {});
  bool try_release_direct(const std::shared_ptr<lease_state>& state,
                          std::error_code& ec) override;
  // Compare-and-delete on every node. Succeeds once too few nodes may still hold the key to
  // form a quorum; not_held when none of those had it; quorum_not_reached (or the error, when
  // no node answered) when a quorum may still hold it until it expires.
  void start_release(const std::shared_ptr<lease_state>& state, done_handler handler) override;
  // Compare-and-pexpire on every node; needs a quorum within the lease's validity.
  void start_extend(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override;
  // The same, settling (lease_owner::start_settle).
  void start_settle(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override;
  void watch_changes(const std::shared_ptr<lease_state>& state,
                     std::function<void()> on_change) override;
  void forget_changes(const std::string& token) override;
  lease adopt(std::string token, std::uint64_t fence);
  // A key that each extend gives the lock's remaining life (lock_target::lives_with_lock). Set
  // before the first acquisition; not thread-safe.
  void set_lives_with_lock(std::string key) { target_.lives_with_lock = std::move(key); }

 private:
  std::shared_ptr<acquire_run> make_run(steady::time_point deadline, int attempts,
                                        node_results* out, const wait_control& control);
  void extend_everywhere(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                         std::string successor, done_handler handler);
  // copies_share_a_master for the copies (node indices) that extended.
  std::string copies_moved_together(const std::vector<std::size_t>& holding) const;

  std::vector<client> nodes_;
  std::string key_;
  lock_options options_;
  lock_target target_;
  std::string reentry_slot_;  // lock_options::reentrant: where the owner's holding is filed
  // Whether the next acquisition tries acquire_unqueued (lock_protocol.hpp) first.
  plain_first_policy plain_first_{false};
};

}  // namespace dlock::detail
