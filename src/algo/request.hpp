// SPDX-License-Identifier: Apache-2.0
// algo/request.hpp: what the engines ask the nodes to run, without any I/O.
//   script       a script's body and SHA1 (generated at build time from src/lua/*.lua), and the
//                library's scripts (and the one request of plain commands, acquire_unqueued)
//   fallback_gate  whether a NOSCRIPT fallback may still go out
//   script_keys  a script's KEYS, inline or viewed where they live
//   request      one script call the engine asks for (script.hpp runs it on a node)
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/detail/scripts.hpp"

namespace dlock::detail {

struct script {
  std::string_view body;
  std::string_view sha1;
  // No script: the request is acquire_unqueued's plain commands (lock_protocol.hpp's
  // unqueued_commands), sent pipelined, and its answer the array of their replies.
  bool as_commands = false;
};

inline constexpr script acquire_script{scripts::acquire_body, scripts::acquire_sha1};
// The uncontended lock's first try on a single node, without Lua (lock_protocol.hpp).
inline constexpr script acquire_unqueued_commands{{}, {}, true};
inline constexpr script release_script{scripts::release_body, scripts::release_sha1};
inline constexpr script extend_script{scripts::extend_body, scripts::extend_sha1};
inline constexpr script fence_raise_script{scripts::fence_raise_body, scripts::fence_raise_sha1};
inline constexpr script fenced_set_script{scripts::fenced_set_body, scripts::fenced_set_sha1};
inline constexpr script leave_script{scripts::leave_body, scripts::leave_sha1};
inline constexpr script sem_acquire_script{scripts::sem_acquire_body, scripts::sem_acquire_sha1};
inline constexpr script sem_fair_acquire_script{scripts::sem_fair_acquire_body,
                                                scripts::sem_fair_acquire_sha1};
inline constexpr script sem_release_script{scripts::sem_release_body, scripts::sem_release_sha1};
inline constexpr script sem_refresh_script{scripts::sem_refresh_body, scripts::sem_refresh_sha1};
inline constexpr script elect_announce_script{scripts::elect_announce_body,
                                              scripts::elect_announce_sha1};
inline constexpr script latch_script{scripts::latch_body, scripts::latch_sha1};
inline constexpr script acquire_all_script{scripts::acquire_all_body, scripts::acquire_all_sha1};
// Single-key steps while a cluster slot migrates (slot_migration.hpp).
inline constexpr script migrating_lock_release_script{scripts::migrating_lock_release_body,
                                                      scripts::migrating_lock_release_sha1};
inline constexpr script migrating_member_refresh_script{scripts::migrating_member_refresh_body,
                                                        scripts::migrating_member_refresh_sha1};
inline constexpr script migrating_outlive_script{scripts::migrating_outlive_body,
                                                 scripts::migrating_outlive_sha1};
inline constexpr script migrating_name_keep_script{scripts::migrating_name_keep_body,
                                                   scripts::migrating_name_keep_sha1};

// Asked when an EVALSHA comes back NOSCRIPT, before the EVAL fallback goes out: the fallback
// is sent after every request pipelined behind the EVALSHA, so an attempt whose answer is no
// longer wanted (its cleanup may already have run) must not run late. false: the fallback is
// not sent, and the request completes with errc::timeout (its EVALSHA did not run).
struct fallback_gate {
  const void* owner = nullptr;
  bool (*wanted)(const void* owner, std::uint64_t request_id) = nullptr;
};

// A script's KEYS, held inline (dlock's scripts take at most 7: sem_fair_acquire.lua), so that
// a request allocates nothing for them: a vector was two allocations per lock cycle. A lock
// set's acquire_all.lua takes two keys a name, up to 2000: those are viewed where they live
// (viewing), which must outlive the request.
class script_keys {
 public:
  static constexpr std::size_t capacity = 8;
  script_keys() = default;
  script_keys(std::initializer_list<std::string_view> keys) {
    for (auto k : keys) push_back(k);
  }
  static script_keys viewing(std::span<const std::string_view> keys) noexcept {
    script_keys k;
    k.outside_ = keys;
    return k;
  }
  void push_back(std::string_view key) {
    if (size_ == capacity || !outside_.empty()) {
      throw std::logic_error("dlock: a script takes at most 8 keys held inline");
    }
    keys_[size_++] = key;
  }
  const std::string_view* begin() const noexcept {
    return outside_.empty() ? keys_.data() : outside_.data();
  }
  const std::string_view* end() const noexcept { return begin() + size(); }
  std::size_t size() const noexcept { return outside_.empty() ? size_ : outside_.size(); }
  bool empty() const noexcept { return size() == 0; }
  const std::string_view& operator[](std::size_t i) const noexcept { return begin()[i]; }

 private:
  std::array<std::string_view, capacity> keys_{};
  std::size_t size_ = 0;
  std::span<const std::string_view> outside_{};
};

// One script call, as the engine (algo/acquisition.hpp) asks for it: run `code` on node `node`
// within `timeout`, and hand the answer back under `id`. Requests to one node go out in the
// order they were made (one connection, FIFO). `keys` point into the target (lock_target,
// semaphore_target) the engine was made for, which must outlive the request's answer.
struct request {
  std::uint64_t id = 0;
  std::size_t node = 0;
  const script* code = nullptr;
  script_keys keys;
  std::vector<std::string> args;
  std::chrono::milliseconds timeout{};
  fallback_gate gate{};  // set by the driver (acquire_run); empty: always fall back
};

}  // namespace dlock::detail
