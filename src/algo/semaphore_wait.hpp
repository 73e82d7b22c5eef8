// algo/semaphore_wait.hpp: the decisions of a semaphore acquisition, without sockets or clocks.
//   semaphore_reply        one acquire script's answer, decoded
//   parse_semaphore_reply  decodes sem_acquire.lua / sem_fair_acquire.lua replies
//   semaphore_wait         fed with each attempt's reply and the time, says what to do next:
//                          granted (with validity), retry after a delay, or give up (and
//                          whether our entry must be removed first)
// Not thread-safe: one acquisition is driven by one thread (dlock's I/O thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <system_error>

#include "dlock/error.hpp"
#include "dlock/reply.hpp"

namespace dlock::detail {

struct semaphore_reply {
  bool granted = false;
  std::int64_t ticket = 0;          // granted: the fencing token; fair, queued: the ticket
  bool queued = false;              // fair: not granted, but our place in the queue is kept
  std::int64_t next_expiry_ms = -1; // unfair, not granted: ms until the earliest holder expires
};

// protocol_error (and an empty result) for any shape the scripts do not produce.
semaphore_reply parse_semaphore_reply(const reply& r, bool fair, std::error_code& ec);

class semaphore_wait {
 public:
  using steady = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;

  struct config {
    steady::time_point deadline = steady::time_point::max();  // max: bounded by attempts only
    int attempts = 1;
    milliseconds ttl{10'000};
    double drift_factor = 0.01;
    milliseconds retry_delay{50};
    bool fair = false;
    // How long the server keeps a fair waiter's place between polls.
    milliseconds queue_ttl{0};
  };

  struct action {
    enum class kind { granted, retry, give_up };
    kind what = kind::give_up;
    steady::duration delay{};        // retry: sleep this long first
    steady::time_point valid_until;  // granted: start of the attempt + ttl - drift
    std::int64_t fence = 0;          // granted
    bool cleanup = false;            // give_up: our entry may exist (queued, or outcome unknown)
    std::error_code ec;              // give_up: why
  };

  explicit semaphore_wait(config c) noexcept;

  // Starts an attempt at `now`; returns the queue_ms argument for the fair script: 0 when this
  // attempt is the last one possible (so the server drops us at once if not granted).
  milliseconds begin_attempt(steady::time_point now) noexcept;
  // The attempt begun last cannot be followed by another (attempts or time run out), so it
  // should not queue: in either variant, a waiter queues only when it will come back.
  bool last_attempt() const noexcept { return last_; }
  // Judges the attempt begun last. `ec` is the transport's or the server's error (then `r` is
  // ignored); `random` feeds the retry jitter.
  action on_reply(steady::time_point now, std::error_code ec, const semaphore_reply& r,
                  std::uint64_t random);

  int attempts_made() const noexcept { return made_; }

 private:
  action retry_or_give_up(steady::time_point now, steady::duration delay, std::error_code ec,
                          bool cleanup) const;

  config c_;
  int made_ = 0;
  bool last_ = false;
  steady::time_point start_{};
};

}  // namespace dlock::detail
