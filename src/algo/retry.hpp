// SPDX-License-Identifier: Apache-2.0
// algo/retry.hpp: whether to try again, and how long to sleep between two lock rounds.
//   is_retryable        what another attempt may cure
//   endless_wait_rule   what ends a wait without a deadline all the same
//   is_silence          a node that did not answer at all
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
// is_retryable rejects, and also on two retryable errors that, lasting, show a node or a
// configuration that fails every attempt alike; waiting for ever would hide them. Each must
// fail in_a_row attempts in a row and for at least lasting_for: a few are a stall (a paused
// process, memory that eviction or expiry frees soon), which passes. A wait with a deadline
// rides both out until it.
//   out_of_memory  a node at maxmemory refuses every write until memory is freed; on a Redlock,
//                  only from more nodes than a quorum can spare
//   lease_expired  every grant's validity was spent before its answer came: the TTL is shorter
//                  than a round trip
// Fed each failed attempt of one wait, in order, with the time it failed.
class endless_wait_rule {
 public:
  static constexpr int in_a_row = 5;
  static constexpr std::chrono::seconds lasting_for{2};
  // The error to give up with after this failed attempt (`votes`: its per-node answers, if
  // any), or none to go on.
  std::error_code gives_up_on(std::error_code ec, const node_results& votes,
                              std::chrono::steady_clock::time_point now) noexcept;

 private:
  std::error_code repeated_;  // the lasting failure of the attempts in a row so far
  int count_ = 0;
  std::chrono::steady_clock::time_point since_{};
};

// Whether an error means the node did not answer at all (down, cut off, too slow), which a
// read backs off from, as opposed to an answer that refused (a cluster in change, an error
// reply), which is read again at the usual pace.
bool is_silence(std::error_code ec) noexcept;

// Whether a timed wait's throwing form (try_acquire_for/until, try_lock_for/until) throws `ec`
// instead of reporting "not acquired" (an empty lease, false): an error that retrying cannot
// cure; and, for a wait without a deadline, any error, since such a wait ends on nothing else.
bool throws_from_wait(std::error_code ec, std::chrono::steady_clock::time_point deadline) noexcept;

// A uniformly random delay in [retry_delay/2, retry_delay] (redsync, node-redlock), so that
// lockers that failed together do not retry together. `random` is any 64-bit random value.
std::chrono::steady_clock::duration jittered_delay(std::chrono::milliseconds retry_delay,
                                                   std::uint64_t random);

// The next value of the seeded sequence `state` (the sans-io machines' random source, so that
// a seed replays).
std::uint64_t next_random(std::uint64_t& state) noexcept;

// A fresh random value from a per-thread generator (not cryptographic; for jitter only).
std::uint64_t jitter_random();

}  // namespace dlock::detail
