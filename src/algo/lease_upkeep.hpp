// SPDX-License-Identifier: Apache-2.0
// algo/lease_upkeep.hpp: what a held lock's lease sends to its nodes, sans-io.
//   quorum_release  compare-and-delete of one owner value on every node, tallied
//   quorum_extend   compare-and-pexpire (or settle) on every node, judged as a quorum round
//   set_release, set_extend  the same for a lock set: one script a key, all of them on its one
//                   node (or cluster client), and the lease holds only while every key does
// The caller sends the requests, feeds the answers and the time, and takes the outcome; nothing
// here reads a clock or touches a socket. Not thread-safe: one thread drives each object.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <system_error>
#include <vector>

#include "algo/quorum_round.hpp"
#include "algo/targets.hpp"
#include "dlock/reply.hpp"
#include "algo/request.hpp"

namespace dlock::detail {

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

// release.lua for `value` on every key of a lock set's first `groups` groups (all by default):
// success when every key was still ours, not_held when some were not (gone, or taken after
// they expired), else the first error; once every key answered.
class set_release {
 public:
  set_release(const lock_set_target& target, const std::string& value,
              std::size_t groups = SIZE_MAX);
  std::vector<request> take_requests() { return std::exchange(requests_, {}); }
  void on_reply(std::uint64_t request_id, std::error_code ec, const reply& r);
  std::optional<std::error_code> take_outcome() { return std::exchange(outcome_, std::nullopt); }

 private:
  std::vector<request> requests_;
  std::vector<bool> open_;  // per request
  std::size_t outstanding_ = 0, ours_ = 0;
  std::error_code first_error_;
  std::optional<std::error_code> outcome_;
};

// extend.lua on every key of a lock set (`successor` empty), or settle under `successor`. A key
// that answered "not ours" proves the loss, whatever another key's error says; the new validity
// counts from `now`, and an answer after the old one ended cannot vouch for the gap.
class set_extend {
 public:
  set_extend(const lock_set_target& target, const std::string& token,
             std::chrono::milliseconds ttl, const std::string& successor, steady::time_point now);
  std::vector<request> take_requests() { return std::exchange(requests_, {}); }
  void on_reply(std::uint64_t request_id, steady::time_point now,
                std::optional<steady::time_point> deadline, std::error_code ec, const reply& r);
  std::optional<quorum_extend::verdict> take_outcome() {
    return std::exchange(outcome_, std::nullopt);
  }

 private:
  std::vector<request> requests_;
  std::vector<bool> open_;  // per key
  std::size_t outstanding_ = 0, ours_ = 0, theirs_ = 0;
  std::error_code first_error_;
  steady::time_point valid_until_;
  std::optional<quorum_extend::verdict> outcome_;
};

}  // namespace dlock::detail
