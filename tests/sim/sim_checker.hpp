// SPDX-License-Identifier: Apache-2.0
// tests/sim/sim_checker.hpp: the simulator's invariants, checked as the world runs.
//   checker  keeps every client's claim on the lock or on semaphore permits, in true time, and
//            the node-side view; a lock checker may watch several lock keys (a lock_set's
//            names, and mutexes of them), a claim being on one of them or on several:
//     mutual exclusion  (lock) no two clients' claims on a key overlap (a claim runs from the
//                       grant's arrival until the client's own clock reaches valid_until, it
//                       sends its release, or an extend loses the lease; an extend moves
//                       valid_until)
//     limit             (semaphore) at no moment do the claims hold more than `limit` permits
//     fences            (lock) each grant's fence is above every earlier grant's on each of its
//                       keys; (semaphore) each grant the node answers carries a fence above its
//                       earlier grants' (grant order is the node's: answers may arrive in
//                       another order)
//     born valid        no grant is reported already expired on the client's clock
//     holders           (lock) while a claim lasts, a quorum of nodes holds its exact token
//                       (on every key it claims), and when it begins or is extended, its keys
//                       live on a quorum (by PTTL) until the claim's end at least; (semaphore)
//                       after every script, each claimed permit's entry (its score, and the
//                       key's PTTL) lives until the claim's end at least
//     ownership         (lock) a script changes a lock key only when its caller owns it:
//                       release and extend compare the exact value (give-up: the acquisition's
//                       prefix), acquire takes over only a free key or one of its own id,
//                       acquire_all only free keys
//     orphans           (lock) an acquisition that gives up leaves no value of its own on
//                       the node (a handoff that reached it first is passed on, not left for
//                       a TTL)
//     free time         how long enough permits for a waiter (the lock: it) stayed unclaimed
//                       in an interval (the liveness bound)
//     one name          (lock keys, one of them also a read-write lock's name) a lock's claim
//                       takes all of the read-write lock's permits, a reader's one, a writer's
//                       all: no claim of a mutex or lock set overlaps a reader's or a writer's,
//                       nor two writers'; while a reader or writer claims, the name's key holds
//                       the read-write lock's mark and the line its entry, both until the
//                       claim's end; its scripts only mark the name where it is free or marked;
//                       the fences drawn from the name's one counter go up in the node's order,
//                       and arrive above every earlier grant's (a reader's: above every earlier
//                       exclusive grant's, as readers' answers may cross)
// The first violation is kept (with the true time); the run stops there. Faults outside the
// algorithm's assumptions turn the safety checks off (leave_assumptions); a node that forgot
// its data within the assumptions (down longer than any TTL) turns off the checks it cannot
// meet: fences and holders (forget_fences), as docs/guarantees.md says.
// Not thread-safe: part of one world.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim_world.hpp"

namespace dlock::sim {

class checker {
 public:
  checker(world& w, lock_keys keys, std::size_t nodes);
  // Locks on each key of `pool` (one node): claims on different keys do not exclude each other.
  checker(world& w, const std::vector<lock_keys>& pool, std::size_t nodes);
  // A semaphore of `limit` permits on one node.
  checker(world& w, semaphore_keys keys, std::ptrdiff_t limit);
  // Locks on each key of `pool` (one node), whose first name is also the name of a read-write
  // lock (`read_write`: its keys, whose name key is pool's first key) of `readers` permits.
  checker(world& w, const std::vector<lock_keys>& pool, semaphore_keys read_write,
          std::ptrdiff_t readers);

  // --- what the clients report ---
  // A grant (a round's, or a handoff's) of `permits` (a lock: key_permits()) arrived now, on
  // the lock keys `keys` (empty: on every key the checker watches); `read_write_lock`: a
  // reader's or writer's, on the read-write lock's name.
  void granted(std::size_t c, const std::string& token, std::uint64_t fence,
               steady::time_point valid_until, std::ptrdiff_t permits = 1,
               const std::vector<std::string>& keys = {}, bool read_write_lock = false);
  // What a lock's claim takes of each of its keys: 1, or with a read-write lock on one of
  // them, all of its permits (a reader takes 1).
  std::ptrdiff_t key_permits() const noexcept { return sem_ ? 1 : limit_; }
  void extended(std::size_t c, steady::time_point valid_until);
  // The claim ends now: the release was sent, an extend lost the lease, the client gave up.
  void ended(std::size_t c, const std::string& why);
  // Whether c's clock still says its lease is valid.
  bool claiming(std::size_t c) const;

  // --- hooks around every script run on a node ---
  void before_script(std::size_t i, const detail::request& r);
  void after_script(std::size_t i, const detail::request& r, const reply& result);

  // --- assumptions ---
  void leave_assumptions(const std::string& why);
  void forget_fences(const std::string& why);
  // Off: only the claims themselves are compared (sim_checker_test proves that mutual exclusion
  // alone catches a broken client, not just the holders and fence checks, which often fire
  // first).
  void check_holders(bool on) { holders_ = on; }
  void check_fences(bool on) { fence_order_ = on; }
  bool within_assumptions() const noexcept { return safety_; }

  // True time in [from, to] during which at least `wanted` permits (the lock: it; lock keys:
  // all of `keys`, empty for every one) were unclaimed.
  sim_time free_time(sim_time from, sim_time to, std::ptrdiff_t wanted = 1,
                     const std::vector<std::string>& keys = {}) const;

  void violation(const std::string& what);
  bool failed() const noexcept { return failure_.has_value(); }
  const std::string& failure() const { return *failure_; }
  std::uint64_t grants() const noexcept { return grants_; }

 private:
  struct claim {
    std::size_t client;
    std::string token;
    std::uint64_t fence;
    sim_time begin, end;        // end: tentative until it passes
    std::vector<bool> holders;  // lock, per node: held the token (on every key) when last looked
    std::ptrdiff_t permits = 1;
    std::vector<std::size_t> keys;  // lock: the keys claimed, as indices into keys_
    bool read_write = false;        // a reader's or writer's: the name's mark, not the token
  };
  claim* active(std::size_t c);
  void open_claim(std::size_t c, const std::string& token, std::uint64_t fence, sim_time end,
                  std::ptrdiff_t permits, std::vector<std::size_t> keys, bool read_write);
  // Indices into keys_ of `keys` (empty: all of them).
  std::vector<std::size_t> key_indices(const std::vector<std::string>& keys);
  void check_limit(const claim& k);
  void check_exclusion(claim& k);
  // Lock key keys_[key] on node i, as GET would read it.
  std::optional<std::string> value_on(std::size_t i, std::size_t key = 0);
  // Whether node i holds the claim's token on each of its keys.
  bool holds(std::size_t i, const claim& k);
  // Ownership, orphans and holders of lock key keys_[key] after a script that names it.
  void after_lock_script(std::size_t i, const detail::request& r, const reply& result,
                         std::size_t key, const std::optional<std::string>& before);
  void after_semaphore_script(const detail::request& r, const reply& result);
  // Holds for the claim's nodes: the quorum-th longest remaining life of its keys (on a node,
  // the first of them to expire, by PTTL) covers the claim's end.
  void check_key_outlives(const claim& k);
  // Semaphore, read-write lock: the claim's entry on the node lives until the claim's end.
  void check_permit_outlives(const claim& k);
  // Read-write lock: so does its entry, and the name's key holds the mark as long.
  void check_mark_outlives(const claim& k);
  // A grant drawn from the counter of the semaphore or of the read-write lock's name: above
  // the node's earlier grants (or, acquire.lua's re-grant of an earlier value, equal).
  void check_node_fence(const detail::request& r, const reply& result);
  // A grant's `fence` on the node: above every earlier one (equal where `may_repeat`).
  void note_node_fence(const detail::request& r, std::int64_t fence, bool may_repeat);
  bool checks_holders() const noexcept { return safety_ && fences_ && holders_; }
  std::string describe(const claim& k) const;
  std::string on_keys(const claim& k) const;  // " on k1,k2" when the checker watches several

  world& w_;
  std::vector<std::string> keys_;  // lock: the lock keys watched
  std::optional<semaphore_keys> sem_;  // set: the claims are on a semaphore's permits
  std::optional<semaphore_keys> rw_;   // set: keys_[0] is also this read-write lock's name
  std::ptrdiff_t limit_ = 1;           // semaphore: its limit; lock: key_permits()
  std::size_t nodes_, quorum_;
  bool safety_ = true, fences_ = true, holders_ = true, fence_order_ = true;
  std::vector<claim> claims_;                        // every claim, in the order they began
  std::vector<std::optional<std::size_t>> current_;  // per client: its latest claim
  std::vector<std::optional<std::uint64_t>> last_fence_;            // lock: per key, the highest
  std::vector<std::optional<std::uint64_t>> last_exclusive_fence_;  // per key: not a reader's
  std::optional<std::int64_t> last_node_fence_;  // semaphore, read-write lock: the node's latest
  std::vector<std::size_t> looked_;  // the lock keys the running script names
  std::vector<std::optional<std::string>> before_values_;  // their values before the script
  std::optional<std::string> failure_;
  std::uint64_t grants_ = 0;
};

}  // namespace dlock::sim
