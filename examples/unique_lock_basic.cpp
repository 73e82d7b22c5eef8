// SPDX-License-Identifier: Apache-2.0
// unique_lock_basic: the README's usage example. Takes the Redis URL from $DLOCK_REDIS.
#include <dlock/dlock.hpp>

#include <cstdlib>
#include <iostream>
#include <mutex>

using namespace std::chrono_literals;

int main() {
  const char* url = std::getenv("DLOCK_REDIS");
  dlock::client redis{url ? url : "redis://127.0.0.1:6379"};
  dlock::mutex lock{redis, "orders:42", {.ttl = 10s, .retry_delay = 50ms}};

  std::unique_lock guard{lock, std::defer_lock};
  if (!guard.try_lock_for(2s)) {
    std::cerr << "busy: " << lock.last_error().message() << "\n";
    return 75;
  }
  const dlock::lease& lease = *lock.current_lease();
  std::cout << "holding " << lease.key() << " with fencing token " << lease.fencing_token()
            << " for another " << lease.remaining().count() << " ms\n";
  // ... write to the protected resource, passing lease.fencing_token() along ...
  return 0;
}  // guard.unlock(): compare-and-delete, never throws
