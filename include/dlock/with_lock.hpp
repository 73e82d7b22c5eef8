// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/with_lock.hpp: run a function while holding a lock, kept alive throughout.
/// - with_lock(lock, fn):           acquire(), keep_alive(), fn(lease&), release()
/// - with_lock(lock, options, fn):  the same with watchdog options
///
/// fn can watch lease.lost() (a std::stop_token) to stop early when the lease is lost.
/// Works with anything whose acquire() returns a dlock::lease (mutex, semaphore).
#pragma once

#include <functional>
#include <type_traits>
#include <utility>

#include "dlock/lease.hpp"
#include "dlock/watchdog.hpp"

namespace dlock {

/// Runs `fn(lease&)` while holding `lock`, renewed as `options` say. Blocks in acquire()
/// (which throws std::system_error when it fails), renews while fn runs, releases when fn
/// returns or throws (the release never throws), and returns fn's result or rethrows its
/// exception.
template <class Lock, class Fn>
decltype(auto) with_lock(Lock& lock, keep_alive_options options, Fn&& fn) {
  lease held = lock.acquire();
  held.keep_alive(std::move(options));
  struct release_on_exit {
    lease& l;
    ~release_on_exit() { (void)l.release(); }
  } guard{held};
  return std::invoke(std::forward<Fn>(fn), held);
}

/// The same with the default keep_alive_options.
template <class Lock, class Fn>
decltype(auto) with_lock(Lock& lock, Fn&& fn) {
  return with_lock(lock, keep_alive_options{}, std::forward<Fn>(fn));
}

}  // namespace dlock
