// lease_state.hpp: what every lease is made of, whatever granted it. Private.
//   lease_state  owner token, fence, validity, loss signal, released flag
//   lease_owner  what a lease asks of the thing that granted it (a lock, a semaphore):
//                release and extend, on the I/O thread
//   make_lease   builds the public dlock::lease
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <stop_token>
#include <string>

#include "dlock/detail/async.hpp"
#include "dlock/lease.hpp"

namespace dlock::detail {

using steady = std::chrono::steady_clock;

struct lease_state {
  std::string token;
  std::uint64_t fence = 0;
  std::atomic<steady::rep> valid_until{0};  // steady_clock ticks since its epoch
  std::stop_source lost;
  std::atomic<bool> released{false};
  bool validity_known = true;  // false for adopted tokens: extend cannot judge a gap

  steady::time_point deadline() const noexcept {
    return steady::time_point(steady::duration(valid_until.load(std::memory_order_acquire)));
  }
  void set_deadline(steady::time_point t) noexcept {
    valid_until.store(t.time_since_epoch().count(), std::memory_order_release);
  }
};

class lease_owner {
 public:
  using done_handler = unique_function<void(std::error_code)>;
  virtual ~lease_owner() = default;

  virtual const std::string& key() const noexcept = 0;
  virtual std::chrono::milliseconds default_ttl() const noexcept = 0;
  virtual io_executor executor() const noexcept = 0;
  // Deletes the holder's entry where it is still this token's. not_held when none was.
  virtual void start_release(const std::shared_ptr<lease_state>& state, done_handler handler) = 0;
  // Pushes the expiry out to `ttl`; lease_lost (and lost() fired) when the entry is gone.
  virtual void start_extend(const std::shared_ptr<lease_state>& state,
                            std::chrono::milliseconds ttl, done_handler handler) = 0;
};

lease make_lease(std::shared_ptr<lease_owner> owner, std::shared_ptr<lease_state> state) noexcept;

}  // namespace dlock::detail
