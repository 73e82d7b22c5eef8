// semaphore_core.hpp: the engine behind dlock::semaphore and its permits. Private.
//   sem_*_script         the semaphore's Lua scripts (src/lua/sem_*.lua)
//   semaphore_core       the acquire loop (driven by algo/semaphore_wait, woken through the
//                        client's inbox), and the lease_owner of every permit: release (which
//                        wakes waiters) and refresh; runs on the I/O thread
// Permits keep the core alive, so a permit may outlive the semaphore that made it.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "algo/semaphore_wait.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/semaphore.hpp"
#include "lease_state.hpp"
#include "script.hpp"

namespace dlock::detail {

inline constexpr script sem_acquire_script{scripts::sem_acquire_body, scripts::sem_acquire_sha1};
inline constexpr script sem_fair_acquire_script{scripts::sem_fair_acquire_body,
                                                scripts::sem_fair_acquire_sha1};
inline constexpr script sem_release_script{scripts::sem_release_body, scripts::sem_release_sha1};
inline constexpr script sem_refresh_script{scripts::sem_refresh_body, scripts::sem_refresh_sha1};

class semaphore_core final : public lease_owner,
                             public std::enable_shared_from_this<semaphore_core> {
 public:
  using acquire_handler = unique_function<void(std::error_code, lease)>;

  semaphore_core(client node, std::string key, std::ptrdiff_t limit, semaphore_options options);

  const std::string& key() const noexcept override { return key_; }
  std::chrono::milliseconds default_ttl() const noexcept override { return options_.ttl; }
  io_executor executor() const noexcept override { return node_.get_executor(); }
  const semaphore_options& options() const noexcept { return options_; }
  std::ptrdiff_t limit() const noexcept { return limit_; }
  const semaphore_keys& keys() const noexcept { return keys_; }

  // Up to `attempts` attempts until `deadline`, one owner token for all of them. `permits` must
  // already be checked (1..limit).
  void start_acquire(steady::time_point deadline, int attempts, std::ptrdiff_t permits,
                     acquire_handler handler);
  // Removes the permit's entries. not_held when it had expired or was gone.
  void start_release(const std::shared_ptr<lease_state>& state, done_handler handler) override;
  // release() on the caller's thread when the connection is idle (run_script_direct).
  bool try_release_direct(const std::shared_ptr<lease_state>& state,
                          std::error_code& ec) override;
  // Refresh: expiry = at least server now + ttl if still live; lease_lost (and lost() fired)
  // if not.
  void start_extend(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override;
  // The same, settling (lease_owner::start_settle).
  void start_settle(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override;

 private:
  struct acquire_op;

  void attempt(const std::shared_ptr<acquire_op>& op);
  void on_attempt(const std::shared_ptr<acquire_op>& op, std::error_code ec, const reply& r);
  // Runs sem_release.lua for `token`: gives back its permits or its queue place, and wakes as
  // many waiters as that freed permits.
  void release_entry(const std::string& token,
                     unique_function<void(std::error_code, reply)> handler);
  // sem_refresh.lua: extend (`successor` empty) or settle, as start_extend / start_settle.
  void refresh_entry(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                     const std::string& successor, done_handler handler);

  client node_;
  std::string key_;
  std::ptrdiff_t limit_;
  semaphore_options options_;
  semaphore_keys keys_;
  std::chrono::milliseconds node_timeout_;
  std::chrono::milliseconds queue_ttl_;   // fair: a waiter's place between two polls
  std::string waiter_entry_;              // unfair: "<waiter ttl ms> " (sem_acquire.lua ARGV[5])
};

}  // namespace dlock::detail
