// SPDX-License-Identifier: Apache-2.0
// algo/acquisition.hpp: the one acquisition engine of every primitive, sans-io.
//   acquisition    attempt -> decide -> sleep (cut short by a wake-up) -> attempt again, take
//                  a handoff, or give up (leaving nothing queued behind); the mutex on 1 and N
//                  nodes, the semaphore (fair and unfair) and the lock set all run it
// It is one wait loop (wait_loop.hpp) driving one protocol per primitive (lock_protocol.hpp,
// semaphore_protocol.hpp, lock_set_protocol.hpp); the targets it runs on are in targets.hpp, and what a held lease
// sends (release, extend) in lease_upkeep.hpp.
// Nothing here reads a clock, draws a random number from the system, or touches a socket: the
// caller feeds events (replies, the time, wake-up and handoff messages) and carries out what
// the engine asks for (send these requests; sleep this long; report this outcome). The library
// drives it on its I/O thread (lock_core, semaphore_core), the simulator (tests/sim) under
// seeded schedules; both run this very code.
// Not thread-safe: one acquisition is driven by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "algo/deadline_rule.hpp"
#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "algo/targets.hpp"
#include "dlock/error.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/options.hpp"
#include "dlock/reply.hpp"
#include "algo/request.hpp"

namespace dlock::detail {

class wait_loop;

class acquisition {
 public:
  struct outcome {
    std::error_code ec;  // empty: granted
    std::string token;   // granted: the owner value the lease holds
    std::uint64_t fence = 0;
    steady::time_point valid_until{};
    node_results votes;  // the last round's, for diagnostics
    bool handoff = false;  // granted by a release's handoff (release.lua, sem_release.lua)
  };

  // A lock acquisition: up to `attempts` rounds until `deadline` (max(): attempts only, and
  // what endless_wait_rule says no wait cures), under the acquisition id `id` (round n writes
  // "<id>.<n>", a handoff "<id>.h<n>"). `seed` feeds the retry jitter.
  // `unqueued_first`: round 0 tries acquire_unqueued first where it can (lock_protocol.hpp).
  acquisition(const lock_target& target, std::string id, steady::time_point deadline,
              int attempts, std::uint64_t seed, bool unqueued_first = false);
  // A semaphore acquisition of `permits`, under the owner token `token` for every attempt.
  // `solo_first`: attempt 0 tries the solo grant first where it can (semaphore_protocol.hpp).
  acquisition(const semaphore_target& target, std::string token, std::ptrdiff_t permits,
              steady::time_point deadline, int attempts, std::uint64_t seed,
              bool solo_first = false);
  // A lock set's acquisition: as a lock's, attempt n writing "<id>.<n>" to every key.
  acquisition(const lock_set_target& target, std::string id, steady::time_point deadline,
              int attempts, std::uint64_t seed);
  acquisition(acquisition&&) noexcept;
  acquisition& operator=(acquisition&&) noexcept;
  ~acquisition();

  // A sleep that would end past the deadline is cut to end this long before it, for one last
  // attempt (a queued waiter keeps waiting for a release's wake-up or handoff until then).
  static constexpr steady::duration last_attempt_lead = std::chrono::milliseconds(1);
  // How long past the deadline the answers to an attempt begun before it are still awaited
  // (gives_up_at): the rule every wait keeps (deadline_rule.hpp).
  static constexpr steady::duration answer_grace = deadline_rule::answer_grace;

  // The driver's loop:
  //   1. channels = the wake channel of each node ("" where that node cannot wake us, or when
  //      !queues_next()), then begin_attempt(now, channels);
  //   2. send take_requests(); feed each answer to on_reply (ignored once done, or when stale);
  //      feed wake-up messages that carry a grant to on_handoff;
  //   3. take_sleep() says the attempt failed and another follows after that long (a wake-up
  //      may cut it short): then back to 1; take_outcome() says it is over (send the requests
  //      taken with it first: they take our leftovers out of the queue).
  // Whether an attempt begun now may be followed by another, so that queueing is worth it.
  bool queues_next(steady::time_point now) const noexcept;
  void begin_attempt(steady::time_point now, const std::vector<std::string>& channels);
  void on_reply(std::uint64_t request_id, steady::time_point now, std::error_code ec,
                const reply& r);
  // A handoff message's payload "<fence> <round>" (release.lua): true when it gave us the lock
  // (take_outcome has it); false when it cannot be taken, or not yet: then it counts as a
  // plain wake-up.
  bool on_handoff(steady::time_point now, std::string_view grant);
  // How to give back what a release hands this acquisition, or pass on the wake-up it sends,
  // after the acquisition gave up (single node; inbox::remember_gave_up): the release script
  // with owned keys and arguments, so that the driver can keep it past this acquisition, its
  // lock or semaphore, and its target. The lock's runs release.lua in give-up mode (leave the
  // queue, release whatever value of this id the key holds: a handoff, or a late round's own
  // SET), the semaphore's sem_release.lua for its token; both are idempotent. `window`: how
  // long such messages may still come (an attempt that ran late may have queued again, and
  // its queue entry lives waiter_entry_ttl).
  struct late_handoff_give_back {
    const script* code = nullptr;
    std::vector<std::string> keys;
    script_args args;
    std::chrono::milliseconds timeout{};
    steady::duration window{};
  };
  late_handoff_give_back give_back_plan() const;

  // Before the first attempt (the driver calls it once): a deadline already past makes this
  // one attempt without a deadline, as std::timed_mutex::try_lock_for(0) is try_lock().
  void on_start(steady::time_point now);
  // The wait is over (the driver's timer, at gives_up_at()): what is still awaited counts as
  // timed out, so the outcome comes now, however silent a node is. Its requests stay on the
  // wire, and their answers are ignored; attempts among them are not re-sent after NOSCRIPT
  // (wants_fallback). No-op before gives_up_at().
  void on_deadline(steady::time_point now);
  steady::time_point deadline() const noexcept;
  // deadline() + answer_grace; max() without a deadline.
  steady::time_point gives_up_at() const noexcept;
  // False for an attempt's request (vote, fence raise, semaphore attempt) whose answer the
  // engine no longer waits for: its NOSCRIPT fallback must not go out (fallback_gate).
  bool wants_fallback(std::uint64_t request_id) const noexcept;
  // wants_fallback as a fallback_gate, for this engine's requests (it must outlive them).
  fallback_gate gate() const noexcept;
  // How long a request of this acquisition may take (the target's node timeout).
  std::chrono::milliseconds node_timeout() const noexcept;

  // Ends the wait with `why` (cancelled, or whatever the caller gives up with): at once when
  // between attempts; else when the attempt in flight concludes, giving back what it won.
  void stop(steady::time_point now, std::error_code why);

  std::vector<request> take_requests();
  std::optional<steady::duration> take_sleep();
  std::optional<outcome> take_outcome();
  // After a lock's failed attempt (take_sleep had a value): the nodes where the holder is not a
  // dlock client (node-redlock, redsync...), with the lock's key there, once each. Such a
  // holder's release wakes nobody, so the driver watches the key (wake_waiter::watch_key).
  struct foreign_holder {
    std::size_t node;
    std::string_view key;  // into the target
  };
  std::vector<foreign_holder> take_foreign_holders();
  bool done() const noexcept;
  // Some attempt queued us on some node (a channel was given).
  bool queued() const noexcept;
  int attempts_made() const noexcept;
  // A node refused one of acquire_unqueued's plain commands for good (NOPERM: an ACL, say): do
  // not ask for them again.
  bool refused_plain_commands() const noexcept;
  // The last failed attempt's error and votes, for progress reports.
  std::error_code last_error() const noexcept;
  const node_results& last_votes() const noexcept;
  const std::string& id() const noexcept;
  // The Redis Cluster slot of the lock's or semaphore's keys on `node` (a copy's, with
  // lock_options::copies), where its wake-ups there are published.
  std::uint16_t slot(std::size_t node) const noexcept;

 private:
  std::unique_ptr<wait_loop> loop_;
};

}  // namespace dlock::detail
