// lock_core.hpp: the shared engine behind dlock::mutex and its leases. Private.
//   lock_core  rounds over N nodes: acquire (with Redlock's fencing step), release, extend,
//              and the retry loop; the lease_owner of a mutex's leases; runs on the I/O thread
// Leases keep the core alive, so a lease may outlive the mutex that made it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "algo/quorum_round.hpp"
#include "dlock/lease.hpp"
#include "dlock/mutex.hpp"
#include "lease_state.hpp"
#include "script.hpp"

namespace dlock::detail {

// Errors that another round may cure (contention, nodes down or slow) versus those it cannot
// (credentials, ACLs, wrong key type, a peer that is not Redis).
bool is_retryable(std::error_code ec) noexcept;

class lock_core final : public lease_owner, public std::enable_shared_from_this<lock_core> {
 public:
  using acquire_handler = unique_function<void(std::error_code, lease)>;

  lock_core(std::vector<client> nodes, std::string key, lock_options options);

  const std::string& key() const noexcept override { return key_; }
  std::chrono::milliseconds default_ttl() const noexcept override { return options_.ttl; }
  std::size_t size() const noexcept { return nodes_.size(); }
  const lock_options& options() const noexcept { return options_; }
  io_executor executor() const noexcept override { return nodes_.front().get_executor(); }

  // Up to `attempts` rounds until `deadline`, under one acquisition id: round n writes the
  // owner value "<id>.<n>" (see lock_core.cpp), and a key holding any value of the id counts as
  // ours, not as a rival's (a late SET of an earlier round). `out`, if set, gets the last
  // round's votes before the handler runs.
  // `id`: the acquisition id whose round 0 acquire_direct sent, or "" for a fresh one.
  void start_acquire(steady::time_point deadline, int attempts, acquire_handler handler,
                     node_results* out, std::string id = {});
  // A blocking acquisition's first round, on the calling thread when the node's connection is
  // idle (run_script_direct; single node only, never on the I/O thread). True when it decided:
  // `result` holds the lease, or `ec` says not_acquired for a one-attempt try. Otherwise the
  // caller goes on with start_acquire(..., id), one attempt fewer when `id` is set (round 0
  // went out under it, and a late SET of it must count as ours).
  bool acquire_direct(int attempts, lease& result, std::error_code& ec, node_results* out,
                      std::string& id);
  bool try_release_direct(const std::shared_ptr<lease_state>& state,
                          std::error_code& ec) override;
  // Compare-and-delete on every node. Succeeds once too few nodes may still hold the key to
  // form a quorum; not_held when none of those had it; quorum_not_reached (or the error, when no
  // node answered) when a quorum may still hold it until it expires.
  void start_release(const std::shared_ptr<lease_state>& state, done_handler handler) override;
  // Compare-and-pexpire on every node; needs a quorum within the lease's validity.
  void start_extend(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override;
  // The same, settling (lease_owner::start_settle).
  void start_settle(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override;
  lease adopt(std::string token, std::uint64_t fence);

 private:
  struct round_op;
  struct acquire_op;
  // What the release of one value on the nodes came to.
  struct release_tally {
    std::size_t released = 0;  // nodes that deleted the key
    std::size_t answered = 0;  // nodes that answered at all (deleted it, or did not hold it)
    std::error_code first_error;
  };
  using round_handler = unique_function<void(std::error_code, std::shared_ptr<round_op>)>;

  void start_round(std::string token, std::vector<std::string> waiter_entries,
                   round_handler handler, std::shared_ptr<acquire_op> acquisition = nullptr);
  void decide(const std::shared_ptr<round_op>& op);
  void raise_fence(const std::shared_ptr<round_op>& op, const fence_plan& plan);
  void finish_round(const std::shared_ptr<round_op>& op, std::error_code ec);
  void attempt(const std::shared_ptr<acquire_op>& op);
  void finish(const std::shared_ptr<acquire_op>& op, std::error_code ec, lease l,
              const node_results& votes);
  // A single node hands the lock to its first waiter on release (release.lua); N nodes cannot
  // (one node's grant is no quorum), so Redlock waiters are only woken.
  bool accepts_handoff() const noexcept { return nodes_.size() == 1 && options_.wake_on_release; }
  // The handoff message "<fence> <round>": finishes `op` with the lock; false when it cannot
  // be taken, or not yet (then it counts as a wake-up).
  bool take_handoff(const std::shared_ptr<acquire_op>& op, std::string_view grant);
  // Finishes `op` with the key a release handed to its round `round`, unless that lease would
  // be born expired (it is then given back); false when it did not.
  bool accept_handoff(const std::shared_ptr<acquire_op>& op, std::uint64_t fence,
                      std::size_t round);
  steady::duration retry_delay(const node_results& votes) const;
  // extend.lua on every node: extend (`successor` empty) or settle (see lease_owner).
  void extend_everywhere(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                         const std::string& successor, done_handler handler);
  // Runs release.lua for `value` on every node; reports once every node answered or failed,
  // or as soon as `enough` of them answered. `skip[i]` leaves node i out (empty: none).
  void release_everywhere(const std::string& value, std::vector<bool> skip,
                          unique_function<void(release_tally)> handler,
                          std::size_t enough = SIZE_MAX);

  std::vector<client> nodes_;
  std::vector<std::string> node_names_;  // endpoint::to_string() of each, for the votes
  std::string key_;
  std::string fence_key_;
  std::string queue_key_, waiter_info_key_, tickets_key_;  // the waiter queue (acquire.lua)
  lock_options options_;
  std::chrono::milliseconds node_timeout_;
};

}  // namespace dlock::detail
