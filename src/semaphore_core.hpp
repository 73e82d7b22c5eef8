// SPDX-License-Identifier: Apache-2.0
// semaphore_core.hpp: the engine behind dlock::semaphore and its permits. Private.
//   semaphore_core       runs its acquisitions (algo/acquisition, driven by acquire_run), and
//                        is the lease_owner of every permit: release (which wakes waiters) and
//                        refresh; works on the I/O thread
// Permits keep the core alive, so a permit may outlive the semaphore that made it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "acquire_run.hpp"
#include "algo/acquisition.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/semaphore.hpp"
#include "lease_state.hpp"
#include "script.hpp"

namespace dlock::detail {

class acquire_run;

class semaphore_core final : public lease_owner,
                             public std::enable_shared_from_this<semaphore_core> {
 public:
  using acquire_handler = unique_function<void(std::error_code, lease)>;

  semaphore_core(client node, std::string key, std::ptrdiff_t limit, semaphore_options options);
  // The same under other keys, for a primitive built on the semaphore's scripts (a
  // shared_mutex: fair, a writer takes every permit).
  semaphore_core(client node, std::string key, std::ptrdiff_t limit, semaphore_options options,
                 semaphore_keys keys, primitive kind);

  const std::string& key() const noexcept override { return key_; }
  primitive kind() const noexcept override { return kind_; }
  std::chrono::milliseconds default_ttl() const noexcept override { return options_.ttl; }
  io_executor get_executor() const noexcept override { return nodes_.front().get_executor(); }
  const semaphore_options& options() const noexcept { return options_; }
  std::ptrdiff_t limit() const noexcept { return limit_; }
  const semaphore_keys& keys() const noexcept { return target_.keys; }

  // Up to `attempts` attempts until `deadline`, one owner token for all of them. `permits` must
  // already be checked (1..limit).
  void start_acquire(steady::time_point deadline, int attempts, std::ptrdiff_t permits,
                     acquire_handler handler, std::stop_token stop = {});
  // The same, blocking the calling thread; the first attempt goes out from this thread when
  // the connection is idle.
  lease acquire_blocking(steady::time_point deadline, int attempts, std::ptrdiff_t permits,
                         std::error_code& ec, const wait_control& control = {});
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
  std::shared_ptr<acquire_run> make_run(steady::time_point deadline, int attempts,
                                        std::ptrdiff_t permits, const wait_control& control);
  // Runs sem_release.lua for `token`: gives back its permits or its queue place, and wakes as
  // many waiters as that freed permits.
  void release_entry(const std::string& token,
                     unique_function<void(std::error_code, reply)> handler);
  // sem_refresh.lua: extend (`successor` empty) or settle, as start_extend / start_settle.
  void refresh_entry(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                     const std::string& successor, done_handler handler);

  std::vector<client> nodes_;  // one: acquire_run drives any number
  std::string key_;
  std::ptrdiff_t limit_;
  semaphore_options options_;
  semaphore_target target_;
  primitive kind_ = primitive::semaphore;
  // Whether the next acquisition tries the solo grant (semaphore_protocol.hpp) first.
  plain_first_policy plain_first_{true};
};

}  // namespace dlock::detail
