// tools/dlock-cli/lock_wait.hpp: waiting for a lock the way flock(1) does, for `run`/`acquire`.
//   wait_options  -n / -w, pacing, how long a node outage is waited out, how to sleep
//   wait_result   acquired (with the lease), conflict, unavailable, failed or interrupted
//   wait_for_lock one attempt after another until one of those
// It tells contention (another owner holds the lock: keep waiting, then "conflict") from
// unavailability (too few nodes answer for a quorum: keep trying for a grace period, then
// "unavailable"), because they map to different exit codes (75 and 69). Blocks the caller.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <system_error>

#include "dlock/error.hpp"
#include "dlock/lease.hpp"

namespace dlock::cli {

struct wait_options {
  bool nonblock = false;                           // one attempt only (-n)
  std::optional<std::chrono::milliseconds> wait;   // -w; nullopt: wait for as long as it takes
  std::chrono::milliseconds retry_delay{50};       // between attempts, jittered to [d/2, d]
  std::chrono::milliseconds unavailable_grace{2000};  // node outage tolerated before giving up
  std::size_t node_count = 1;
  // Sleeps up to `d`; returns a signal number when a signal cut the sleep short, else 0.
  std::function<int(std::chrono::milliseconds)> sleep;
  // With -v: a description of the current holder for the progress line (may be empty).
  std::function<std::string()> describe_holder;
  std::string key;  // for messages
};

enum class wait_outcome { acquired, conflict, unavailable, failed, interrupted };

struct wait_result {
  wait_outcome outcome = wait_outcome::failed;
  lease held;
  std::error_code ec;   // the last attempt's error
  std::string message;  // one line for the user (why not acquired)
  int signal = 0;       // for interrupted
};

// One attempt: returns a lease, or an empty one with ec and the per-node votes filled.
using attempt_fn = std::function<lease(std::error_code&, node_results*)>;

wait_result wait_for_lock(const attempt_fn& attempt, const wait_options& options);

}  // namespace dlock::cli
