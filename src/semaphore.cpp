// SPDX-License-Identifier: Apache-2.0
// dlock::semaphore: argument checks before any I/O, and the blocking facade over
// semaphore_core's asynchronous acquire.
#include "dlock/semaphore.hpp"

#include <climits>

#include "option_checks.hpp"
#include "semaphore_core.hpp"

namespace dlock {
namespace {

void check_arguments(const std::string& name, const std::string& key, std::ptrdiff_t limit,
                     const semaphore_options& o) {
  if (limit <= 0) detail::reject_argument("a semaphore's limit must be at least 1");
  detail::check_shared_options("semaphore", name, key, o);
}

}  // namespace

semaphore::semaphore(client node, std::string name, std::ptrdiff_t limit,
                     semaphore_options options) {
  std::string key = options.key_prefix + name;
  check_arguments(name, key, limit, options);
  core_ = std::make_shared<detail::semaphore_core>(std::move(node), std::move(key), limit,
                                                   std::move(options));
}

semaphore::~semaphore() = default;  // permits keep the core alive on their own

void semaphore::start_acquire(std::ptrdiff_t permits,
                              detail::unique_function<void(std::error_code, lease)> handler,
                              std::stop_token stop) {
  if (permits < 1 || permits > core_->limit()) return handler(errc::invalid_argument, lease{});
  core_->start_acquire(clock::time_point::max(), INT_MAX, permits, std::move(handler),
                       std::move(stop));
}

namespace {

lease acquire_blocking(detail::semaphore_core& core, semaphore::clock::time_point deadline,
                       int attempts, std::ptrdiff_t permits, std::error_code& ec,
                       const wait_control& control = {}) {
  if (permits < 1 || permits > core.limit()) {
    ec = errc::invalid_argument;
    return {};
  }
  return core.acquire_blocking(deadline, attempts, permits, ec, control);
}

}  // namespace

// Like std::counting_semaphore::acquire: no attempt limit and no deadline, so the engine gives
// up only on what no wait cures (algo/retry.hpp: is_retryable, endless_wait_rule).
lease semaphore::acquire(std::error_code& ec) { return acquire(1, ec); }

lease semaphore::acquire(std::ptrdiff_t permits, std::error_code& ec) {
  return acquire_blocking(*core_, clock::time_point::max(), INT_MAX, permits, ec);
}

lease semaphore::acquire(std::ptrdiff_t permits) {
  std::error_code ec;
  lease l = acquire(permits, ec);
  if (ec) throw std::system_error(ec, "dlock: cannot acquire a permit of " + key());
  return l;
}

lease semaphore::acquire_until(clock::time_point deadline, std::error_code& ec) {
  return acquire_until(deadline, 1, ec);
}

lease semaphore::acquire_until(clock::time_point deadline, std::ptrdiff_t permits,
                               std::error_code& ec) {
  return acquire_blocking(*core_, deadline, INT_MAX, permits, ec);
}

lease semaphore::acquire_until(clock::time_point deadline, std::ptrdiff_t permits,
                               const wait_control& control, std::error_code& ec) {
  return acquire_blocking(*core_, deadline, INT_MAX, permits, ec, control);
}

lease semaphore::try_acquire(std::error_code& ec) { return try_acquire(1, ec); }

lease semaphore::try_acquire(std::ptrdiff_t permits, std::error_code& ec) {
  return acquire_blocking(*core_, clock::time_point::max(), 1, permits, ec);
}

lease semaphore::try_acquire(std::ptrdiff_t permits) {
  std::error_code ec;
  lease l = try_acquire(permits, ec);
  if (ec && !detail::is_retryable(ec)) {
    throw std::system_error(ec, "dlock: cannot acquire a permit of " + key());
  }
  return l;
}

lease semaphore::wait_until(clock::time_point deadline, std::ptrdiff_t permits) {
  std::error_code ec;
  lease l = acquire_until(deadline, permits, ec);
  // A deadline can only end a wait; credentials, ACLs or a wrong key type will not heal.
  if (detail::throws_from_wait(ec, deadline)) {
    throw std::system_error(ec, "dlock: cannot acquire a permit of " + key());
  }
  return l;
}

std::error_code semaphore::release(lease& permit) noexcept {
  if (!permit) return errc::not_held;
  if (permit.key() != key()) return errc::invalid_argument;
  return permit.release();
}

const std::string& semaphore::key() const noexcept { return core_->key(); }
std::ptrdiff_t semaphore::limit() const noexcept { return core_->limit(); }
const semaphore_options& semaphore::options() const noexcept { return core_->options(); }
detail::io_executor semaphore::get_executor() const noexcept { return core_->get_executor(); }

}  // namespace dlock
