// SPDX-License-Identifier: Apache-2.0
// dlock::shared_mutex: a fair semaphore of max_readers permits under keys of its own, where a
// reader takes one permit and a writer all of them. The fair semaphore's ranking by ticket is
// what gives the read-write rules (dlock/shared_mutex.hpp): a grant needs the permits of
// everyone ahead plus one's own to fit, so a writer ahead stops every reader behind it, and a
// writer waits for everyone ahead. The Lockable facade keeps one lease per thread (lockable.hpp).
#include "dlock/shared_mutex.hpp"

#include <climits>

#include "algo/retry.hpp"
#include "dlock/key_layout.hpp"
#include "lockable.hpp"
#include "option_checks.hpp"
#include "semaphore_core.hpp"

namespace dlock {
namespace {

semaphore_options as_fair_semaphore(const shared_mutex_options& o) {
  return {.ttl = o.ttl,
          .fair = true,
          .retry_delay = o.retry_delay,
          .wake_on_release = o.wake_on_release,
          .node_timeout = o.node_timeout,
          .drift_factor = o.drift_factor,
          .key_prefix = o.key_prefix};
}

std::string cannot(const std::string& key, std::ptrdiff_t permits) {
  return std::string("dlock: cannot lock ") + key +
         (permits == shared_mutex::max_readers ? "" : " for reading");
}

}  // namespace

shared_mutex::shared_mutex(client node, std::string name, shared_mutex_options options)
    : options_(std::move(options)), holdings_(std::make_unique<detail::lockable_holdings>()) {
  std::string key = options_.key_prefix + name;
  detail::check_shared_options("read-write lock", name, key, options_);
  auto keys = shared_mutex_keys_for(key);
  core_ = std::make_shared<detail::semaphore_core>(std::move(node), std::move(key), max_readers,
                                                   as_fair_semaphore(options_), std::move(keys),
                                                   primitive::shared_mutex);
}

shared_mutex::~shared_mutex() = default;  // the held leases release themselves

void shared_mutex::start_acquire(std::ptrdiff_t permits,
                                 detail::unique_function<void(std::error_code, lease)> handler,
                                 std::stop_token stop) {
  core_->start_acquire(clock::time_point::max(), INT_MAX, permits, std::move(handler),
                       std::move(stop));
}

lease shared_mutex::acquire_blocking(clock::time_point deadline, int attempts,
                                     std::ptrdiff_t permits, std::error_code& ec,
                                     const wait_control& control) {
  return core_->acquire_blocking(deadline, attempts, permits, ec, control);
}

lease shared_mutex::acquire(std::error_code& ec) {
  return acquire_blocking(clock::time_point::max(), INT_MAX, max_readers, ec);
}
lease shared_mutex::acquire_shared(std::error_code& ec) {
  return acquire_blocking(clock::time_point::max(), INT_MAX, 1, ec);
}
lease shared_mutex::acquire() {
  std::error_code ec;
  lease l = acquire(ec);
  if (ec) throw std::system_error(ec, cannot(key(), max_readers));
  return l;
}
lease shared_mutex::acquire_shared() {
  std::error_code ec;
  lease l = acquire_shared(ec);
  if (ec) throw std::system_error(ec, cannot(key(), 1));
  return l;
}
lease shared_mutex::acquire_until(clock::time_point deadline, std::error_code& ec) {
  return acquire_blocking(deadline, INT_MAX, max_readers, ec);
}
lease shared_mutex::acquire_until(clock::time_point deadline, const wait_control& control,
                                  std::error_code& ec) {
  return acquire_blocking(deadline, INT_MAX, max_readers, ec, control);
}
lease shared_mutex::acquire_shared_until(clock::time_point deadline, std::error_code& ec) {
  return acquire_blocking(deadline, INT_MAX, 1, ec);
}
lease shared_mutex::acquire_shared_until(clock::time_point deadline, const wait_control& control,
                                         std::error_code& ec) {
  return acquire_blocking(deadline, INT_MAX, 1, ec, control);
}
lease shared_mutex::try_acquire(std::error_code& ec) {
  return acquire_blocking(clock::time_point::max(), 1, max_readers, ec);
}
lease shared_mutex::try_acquire_shared(std::error_code& ec) {
  return acquire_blocking(clock::time_point::max(), 1, 1, ec);
}

lease shared_mutex::try_acquire() { return acquire_or_throw(clock::now(), max_readers); }
lease shared_mutex::try_acquire_shared() { return acquire_or_throw(clock::now(), 1); }

// A deadline already past is one whole attempt (try_acquire).
lease shared_mutex::acquire_or_throw(clock::time_point deadline, std::ptrdiff_t permits) {
  std::error_code ec;
  bool past = deadline <= clock::now();
  lease l = acquire_blocking(past ? clock::time_point::max() : deadline, past ? 1 : INT_MAX,
                             permits, ec);
  if (detail::throws_from_wait(ec, deadline)) throw std::system_error(ec, cannot(key(), permits));
  return l;
}

bool shared_mutex::lock_until(clock::time_point deadline, std::ptrdiff_t permits, bool once) {
  // A thread that holds it does not lock it again, as with std::shared_mutex.
  if (!holdings_->holds_nothing()) return false;
  std::error_code ec;
  lease l = acquire_blocking(deadline, once ? 1 : INT_MAX, permits, ec);
  bool ok = static_cast<bool>(l);
  holdings_->remember(std::move(l), ec, /*results=*/{}, /*shared=*/permits == 1);
  // A deadline can only end a wait; credentials, ACLs or a wrong key type will not heal. A
  // try_lock() says false, as mutex::try_lock does (last_error() tells why).
  if (!ok && !once && detail::throws_from_wait(ec, deadline)) {
    throw std::system_error(ec, cannot(key(), permits));
  }
  return ok;
}

void shared_mutex::lock() {
  if (!lock_until(clock::time_point::max(), max_readers)) {
    throw std::system_error(last_error(), cannot(key(), max_readers));
  }
}
bool shared_mutex::try_lock() { return lock_until(clock::time_point::max(), max_readers, true); }

void shared_mutex::lock_shared() {
  if (!lock_until(clock::time_point::max(), 1)) {
    throw std::system_error(last_error(), cannot(key(), 1));
  }
}
bool shared_mutex::try_lock_shared() { return lock_until(clock::time_point::max(), 1, true); }

void shared_mutex::unlock() noexcept { holdings_->unlock(false); }
void shared_mutex::unlock_shared() noexcept { holdings_->unlock(true); }

const lease* shared_mutex::current_lease() const noexcept { return holdings_->current(); }
std::error_code shared_mutex::last_error() const noexcept { return holdings_->last_error(); }

const std::string& shared_mutex::key() const noexcept { return core_->key(); }
const shared_mutex_options& shared_mutex::options() const noexcept { return options_; }
detail::io_executor shared_mutex::get_executor() const noexcept { return core_->get_executor(); }

}  // namespace dlock
