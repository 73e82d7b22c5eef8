// SPDX-License-Identifier: Apache-2.0
// algo/acquisition.hpp: the one acquisition engine of every primitive, sans-io.
//   lock_target    what all acquisitions of one lock share: node count, keys, pacing
//   semaphore_target  the same for one semaphore
//   acquisition    attempt -> decide -> sleep (cut short by a wake-up) -> attempt again, take
//                  a handoff, or give up (leaving nothing queued behind); the mutex on 1 and N
//                  nodes and the semaphore (fair and unfair) all run it
//   quorum_release compare-and-delete of one owner value on every node, tallied
//   quorum_extend  compare-and-pexpire (or settle) on every node, judged as a quorum round
//   parse_semaphore_reply  decodes the semaphore acquire scripts' answers
// Nothing here reads a clock, draws a random number from the system, or touches a socket: the
// caller feeds events (replies, the time, wake-up and handoff messages) and carries out what
// the engine asks for (send these requests; sleep this long; report this outcome). The library
// drives it on its I/O thread (lock_core, semaphore_core), the simulator (tests/sim) under
// seeded schedules; both run this very code.
// Not thread-safe: one acquisition is driven by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "dlock/error.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/options.hpp"
#include "dlock/reply.hpp"
#include "dlock/semaphore.hpp"
#include "script.hpp"

namespace dlock::detail {

// The node's timeout when the options leave it 0: min(ttl / 10, the client's request timeout).
std::chrono::milliseconds effective_node_timeout(std::chrono::milliseconds configured,
                                                 std::chrono::milliseconds ttl,
                                                 std::chrono::milliseconds request_timeout);

// A queued waiter refreshes its entry at every attempt, at least once per retry_delay; an entry
// not refreshed for max(4 x retry_delay, 1 s) belongs to a waiter that crashed, and is dropped.
std::chrono::milliseconds waiter_entry_ttl(std::chrono::milliseconds retry_delay);

// A target is shared by all acquisitions of its lock or semaphore, and must outlive them and
// their requests (which point into its keys).
struct lock_target {
  std::size_t nodes = 1;
  lock_keys keys;
  // lock_options::copies: node i (the cluster client, once per copy) holds copy i's keys.
  std::vector<lock_keys> copies;
  const lock_keys& keys_on(std::size_t node) const noexcept {
    return copies.empty() ? keys : copies[node];
  }
  std::string ttl_text;                 // ttl in ms, as the scripts take it
  std::vector<std::string> node_names;  // label the votes (may be empty)
  // A key that each extend gives the lock's remaining life too (extend.lua's KEYS[2]): a
  // leader election's record. Empty: none.
  std::string lives_with_lock;
  std::chrono::milliseconds ttl{10'000};
  std::chrono::milliseconds retry_delay{50};
  std::chrono::milliseconds node_timeout{1'000};
  double drift_factor = 0.01;
  bool fair = false;
  bool wake_on_release = true;
  bool cluster = false;  // the node is a redis-cluster:// client
  // A single node hands the lock to its first waiter on release (release.lua); N nodes cannot
  // (one node's grant is no quorum), so Redlock waiters are only woken. Nor can a cluster: the
  // shard's replicas deliver SPUBLISH too, so a waiter subscribed on a master demoted meanwhile
  // would get the message while the count says nobody did, and the key would be freed under
  // it. On a cluster a release only wakes its waiter, which then tries again.
  bool accepts_handoff() const noexcept { return nodes == 1 && wake_on_release && !cluster; }
};
lock_target make_lock_target(std::size_t nodes, std::string_view key, const lock_options& o,
                             std::chrono::milliseconds request_timeout, bool cluster = false);

struct semaphore_target {
  semaphore_keys keys;
  std::string ttl_text, limit_text;     // as the scripts take them
  std::string variant_text;             // sem_release.lua's ARGV[3]: "fair" or ""
  // What the holders keep in the name's key (keys.name; name_mark.lua): semaphore_mark(limit,
  // fair), or a read-write lock's read_write_lock_mark.
  std::string name_mark;
  std::vector<std::string> node_names;  // label the votes (may be empty)
  std::ptrdiff_t limit = 1;
  bool fair = false;
  bool wake_on_release = true;
  bool cluster = false;
  std::chrono::milliseconds ttl{10'000};
  std::chrono::milliseconds retry_delay{50};
  std::chrono::milliseconds node_timeout{1'000};
  double drift_factor = 0.01;
  // Fair: how long the server keeps a waiter's place between two polls.
  std::chrono::milliseconds queue_ttl{0};
  // Whether a release may make a queued waiter a holder (sem_release.lua): not on a cluster
  // (whose wake-up count may miss the waiter: docs/guarantees.md).
  bool accepts_handoff() const noexcept { return wake_on_release && !cluster; }
};
semaphore_target make_semaphore_target(std::string_view key, std::ptrdiff_t limit,
                                       const semaphore_options& o,
                                       std::chrono::milliseconds request_timeout,
                                       bool cluster = false);

// release.lua's keys, for a release and a give-up alike (ARGV: the value, or the id and
// "give-up").
script_keys lock_release_keys(const lock_keys& k);

// sem_release.lua's keys, for a release, a leave and a give-up alike (ARGV: the token, the
// target's limit_text, variant_text and name_mark).
script_keys semaphore_release_keys(const semaphore_keys& k);

// sem_refresh.lua's keys, for an extend and a settle alike (ARGV: the token, the TTL in ms, ""
// or the successor token, the target's name_mark).
script_keys semaphore_refresh_keys(const semaphore_keys& k, bool fair);

// One semaphore acquire script's answer, decoded.
struct semaphore_reply {
  bool granted = false;
  std::int64_t ticket = 0;           // granted: the fencing token; fair, queued: the ticket
  bool queued = false;               // fair: not granted, but our place in the queue is kept
  std::int64_t next_expiry_ms = -1;  // unfair, not granted: ms until the earliest holder expires
  bool name_held = false;  // fair, not granted: another kind of lock holds the name (rw_name.lua)
};
// Decodes sem_acquire.lua / sem_fair_acquire.lua replies: protocol_error (and an empty result)
// for any shape the scripts do not produce.
semaphore_reply parse_semaphore_reply(const reply& r, bool fair, std::error_code& ec);

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
  acquisition(const lock_target& target, std::string id, steady::time_point deadline,
              int attempts, std::uint64_t seed);
  // A semaphore acquisition of `permits`, under the owner token `token` for every attempt.
  acquisition(const semaphore_target& target, std::string token, std::ptrdiff_t permits,
              steady::time_point deadline, int attempts, std::uint64_t seed);
  acquisition(acquisition&&) noexcept;
  acquisition& operator=(acquisition&&) noexcept;
  ~acquisition();

  // A sleep that would end past the deadline is cut to end this long before it, for one last
  // attempt (a queued waiter keeps waiting for a release's wake-up or handoff until then).
  static constexpr steady::duration last_attempt_lead = std::chrono::milliseconds(1);
  // How long past the deadline the answers to an attempt begun before it are still awaited
  // (gives_up_at): the last attempt starts last_attempt_lead before the deadline.
  static constexpr steady::duration answer_grace = std::chrono::milliseconds(25);

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
    std::vector<std::string> args;
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
  // The last failed attempt's error and votes, for progress reports.
  std::error_code last_error() const noexcept;
  const node_results& last_votes() const noexcept;
  const std::string& id() const noexcept;
  // The Redis Cluster slot of the lock's or semaphore's keys on `node` (a copy's, with
  // lock_options::copies), where its wake-ups there are published.
  std::uint16_t slot(std::size_t node) const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// release.lua for `value` on every node not in `skip`. Reports once every node answered or
// failed, or as soon as `enough` of them answered.
class quorum_release {
 public:
  struct tally {
    std::size_t released = 0;  // nodes that deleted the key
    std::size_t answered = 0;  // nodes that answered at all (deleted it, or did not hold it)
    std::error_code first_error;
  };
  quorum_release(const lock_target& target, std::string value, std::vector<bool> skip = {},
                 std::size_t enough = SIZE_MAX);
  std::vector<request> take_requests();
  void on_reply(std::uint64_t request_id, std::error_code ec, const reply& r);
  std::optional<tally> take_outcome();
  // The release of `value` on one node, and what its answer adds to a tally: for a caller that
  // releases on a single node without the bookkeeping (lock_core's caller-thread path).
  static request request_for(const lock_target& target, std::size_t node, std::string value);
  static void count(tally& t, std::error_code ec, const reply& r);
  // What a lease's release() reports from a tally with `enough` = the release quorum (see
  // release_quorum): success, not_held, quorum_not_reached or the transport's error.
  static std::error_code judge(const tally& t, std::size_t nodes);
  // How many answers leave too few nodes that may still hold the key to form a quorum.
  static std::size_t release_quorum(std::size_t nodes) noexcept {
    return nodes - quorum_of(nodes) + 1;
  }

 private:
  std::vector<request> requests_;
  std::vector<bool> open_;  // per node: awaiting its answer
  std::size_t outstanding_ = 0, enough_;
  tally so_far_;
  bool reported_ = false;
  std::optional<tally> outcome_;
};

// extend.lua on every node: extend (`successor` empty) or settle under `successor`. Needs a
// quorum within the lease's validity as it stands when the answers decide (another extend may
// have moved it meanwhile; nullopt: not known, as for adopted tokens).
class quorum_extend {
 public:
  struct verdict {
    std::error_code ec;  // empty: extended; lease_lost / lease_expired: the lease is gone
    steady::time_point valid_until{};  // when extended
    std::vector<std::size_t> extended{};  // when extended: the nodes that said so
  };
  quorum_extend(const lock_target& target, std::string token, std::chrono::milliseconds ttl,
                std::string successor, steady::time_point now);
  std::vector<request> take_requests();
  void on_reply(std::uint64_t request_id, steady::time_point now,
                std::optional<steady::time_point> deadline, std::error_code ec, const reply& r);
  std::optional<verdict> take_outcome();

 private:
  std::vector<request> requests_;
  quorum_round round_;
  bool reported_ = false;
  std::optional<verdict> outcome_;
};

}  // namespace dlock::detail
