// SPDX-License-Identifier: Apache-2.0
// The consumer library: takes a lock with a fencing token through nothing but the installed
// headers and library, written as the README writes it. scripts/check-install builds it as a
// shared library with -Wall -Wextra -Werror (a static libdlock.a must be position-independent
// to link into it), and the designated initializers below must compile without a warning.
#include "lock_job.hpp"

#include <dlock/dlock.hpp>

#include <chrono>
#include <iostream>
#include <system_error>

using namespace std::chrono_literals;

namespace {

// Every public aggregate, designated with one early field only, as users write them: each
// member left out must have a default member initializer, or -Wextra's
// -Wmissing-field-initializers fails the build under -Werror.
[[maybe_unused]] void designate_one_field() {
  [[maybe_unused]] dlock::lock_options lock{.ttl = 10s};
  [[maybe_unused]] dlock::semaphore_options sem{.ttl = 10s};
  [[maybe_unused]] dlock::shared_mutex_options rw{.ttl = 10s};
  [[maybe_unused]] dlock::latch_options latch{.ttl = 1h};
  [[maybe_unused]] dlock::keep_alive_options keep{.interval = 1s};
  [[maybe_unused]] dlock::wait_control wait{.stop = {}};
  [[maybe_unused]] dlock::wait_progress progress{.waited = 1s};
  [[maybe_unused]] dlock::election_options elect{.lock = {.ttl = 5s}};
  [[maybe_unused]] dlock::client_options client{.connect_timeout = 500ms};
  [[maybe_unused]] dlock::tls_options tls{.ca_file = "ca.pem"};
  [[maybe_unused]] dlock::replication_guard_options guard{.enabled = true};
  [[maybe_unused]] dlock::transaction_options tx{.max_attempts = 3};
  [[maybe_unused]] dlock::prometheus_options prom{.key_label = true};
  [[maybe_unused]] dlock::endpoint ep{.host = "localhost"};
  [[maybe_unused]] dlock::host_port hp{.host = "localhost"};
  [[maybe_unused]] dlock::node_result vote{.node = "n1"};
  [[maybe_unused]] dlock::leader_info leader{.term = 1};
  [[maybe_unused]] dlock::election_event change{.what = dlock::election_event::change::ended};
  [[maybe_unused]] dlock::warning warn{.what = dlock::warning::code::replica};
  [[maybe_unused]] dlock::lock_keys lkeys{.key = "k"};
  [[maybe_unused]] dlock::semaphore_keys skeys{.expiries = "e"};
  [[maybe_unused]] dlock::transaction_result result{.committed = true};
  [[maybe_unused]] dlock::acquire_event acquired{.key = "k"};
  [[maybe_unused]] dlock::release_event released{.key = "k"};
  [[maybe_unused]] dlock::renewal_event renewed{.key = "k"};
  [[maybe_unused]] dlock::lease_lost_event lost{.key = "k"};
  [[maybe_unused]] dlock::node_request_event request{.node = "n1"};
  [[maybe_unused]] dlock::connection_event connection{.node = "n1"};
}

}  // namespace

namespace consumer {

int lock_job(const char* url) {
  try {
    dlock::client redis{url};
    dlock::mutex lock{redis, "orders:42", {.ttl = 10s, .retry_delay = 50ms}};  // the README's
    // The error_code form, error_code last: the installed headers' API as users call it.
    std::error_code ec;
    dlock::node_results votes;
    dlock::lease held = lock.acquire(&votes, ec);
    if (!held || held.fencing_token() == 0) {
      std::cerr << "consumer: not acquired: " << ec.message() << "\n";
      for (const auto& v : votes) std::cerr << "  " << v.node << ": " << to_string(v) << "\n";
      return 1;
    }
    std::cout << "consumer: held " << held.key() << " with fencing token " << held.fencing_token()
              << "\n";
    if (auto released = held.release()) {
      std::cerr << "consumer: release failed: " << released.message() << "\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace consumer
