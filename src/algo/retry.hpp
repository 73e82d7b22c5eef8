// SPDX-License-Identifier: Apache-2.0
// algo/retry.hpp: whether to try again, and how long to sleep between two lock rounds.
//   is_retryable        what another attempt may cure
//   endless_wait_rule   what ends a wait without a deadline all the same
//   throws_from_wait    what a timed wait's throwing form throws rather than reports
// Private; no clocks read here.
#pragma once

#include <chrono>
#include <cstdint>
#include <system_error>

#include "dlock/error.hpp"

namespace dlock::detail {

// Errors that another attempt may cure (contention, nodes down or slow) versus those it cannot
// (credentials, ACLs, wrong key type, a peer that is not Redis).
bool is_retryable(std::error_code ec) noexcept;

// A wait without a deadline (acquire(), lock(), a deadline too far to count) gives up on what
// is_retryable rejects, and also on two retryable errors that, repeated, show a node or a
// configuration that fails every attempt alike; waiting for ever would hide them. A wait with a
// deadline rides both out until it: memory may be freed, a stall may pass.
//   out_of_memory  at once, from more nodes than a quorum can spare: a node at maxmemory
//                  (noeviction) refuses every write until someone else frees memory
//   lease_expired  on expired_in_a_row attempts in a row: every grant's validity was spent
//                  before its answer came, so the TTL is shorter than a round trip; one or two
//                  are a stall (a paused process, a slow node), which passes
// Fed each failed attempt of one wait, in order.
class endless_wait_rule {
 public:
  static constexpr int expired_in_a_row = 5;
  // The error to give up with after this failed attempt (`votes`: its per-node answers, if
  // any), or none to go on.
  std::error_code gives_up_on(std::error_code ec, const node_results& votes = {}) noexcept;

 private:
  int expired_ = 0;
};

// Whether a timed wait's throwing form (try_acquire_for/until, try_lock_for/until) throws `ec`
// instead of reporting "not acquired" (an empty lease, false): an error that retrying cannot
// cure; and, for a wait without a deadline, any error, since such a wait ends on nothing else.
bool throws_from_wait(std::error_code ec, std::chrono::steady_clock::time_point deadline) noexcept;

// A uniformly random delay in [retry_delay/2, retry_delay] (redsync, node-redlock), so that
// lockers that failed together do not retry together. `random` is any 64-bit random value.
std::chrono::steady_clock::duration jittered_delay(std::chrono::milliseconds retry_delay,
                                                   std::uint64_t random);

// A fresh random value from a per-thread generator (not cryptographic; for jitter only).
std::uint64_t jitter_random();

}  // namespace dlock::detail
