// SPDX-License-Identifier: Apache-2.0
// algo/request.hpp: what the engines ask the nodes to run, without any I/O.
//   script       a script's body and SHA1 (generated at build time from src/lua/*.lua), and the
//                library's scripts (and the one request of plain commands, acquire_unqueued)
//   fallback_gate  whether a NOSCRIPT fallback may still go out
//   script_keys  a script's KEYS, inline or viewed where they live
//   script_args  a script's ARGV, copied inline
//   request      one script call the engine asks for (script.hpp runs it on a node)
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iterator>
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

// A script's ARGV, copied into the request: an answer may come after the protocol moved on
// (a new round's value), and a NOSCRIPT fallback sends them again. Held inline up to
// inline_bytes in all, so that a request allocates nothing for them: a vector of strings was
// two allocations per lock cycle (callgrind). Longer ones (an election's announced value)
// spill into one string.
class script_args {
 public:
  static constexpr std::size_t capacity = 8;
  static constexpr std::size_t inline_bytes = 176;

  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = std::string_view;
    iterator() = default;
    iterator(const script_args* args, std::size_t i) noexcept : args_(args), i_(i) {}
    std::string_view operator*() const noexcept { return (*args_)[i_]; }
    iterator& operator++() noexcept {
      ++i_;
      return *this;
    }
    iterator operator++(int) noexcept {
      iterator before = *this;
      ++i_;
      return before;
    }
    bool operator==(const iterator& other) const noexcept { return i_ == other.i_; }

   private:
    const script_args* args_ = nullptr;
    std::size_t i_ = 0;
  };

  script_args() = default;
  script_args(std::initializer_list<std::string_view> args) {
    for (auto a : args) push_back(a);
  }
  explicit script_args(const std::vector<std::string>& args) {
    for (const auto& a : args) push_back(a);
  }
  void push_back(std::string_view arg) {
    if (size_ == capacity) throw std::logic_error("dlock: a script takes at most 8 arguments");
    std::size_t start = size_ == 0 ? 0 : ends_[size_ - 1];
    if (!spilled_ && start + arg.size() > inline_bytes) {
      spill_.assign(inline_.data(), start);
      spilled_ = true;
    }
    if (spilled_) {
      spill_.append(arg);
    } else if (!arg.empty()) {
      std::memcpy(inline_.data() + start, arg.data(), arg.size());
    }
    ends_[size_++] = start + arg.size();
  }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::string_view operator[](std::size_t i) const noexcept {
    std::size_t start = i == 0 ? 0 : ends_[i - 1];
    return {(spilled_ ? spill_.data() : inline_.data()) + start, ends_[i] - start};
  }
  std::string_view at(std::size_t i) const {
    if (i >= size_) throw std::out_of_range("dlock: no such script argument");
    return (*this)[i];
  }
  std::string_view back() const { return at(size_ - 1); }
  iterator begin() const noexcept { return {this, 0}; }
  iterator end() const noexcept { return {this, size_}; }
  friend bool operator==(const script_args& a, const std::vector<std::string>& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  std::array<char, inline_bytes> inline_{};
  std::array<std::size_t, capacity> ends_{};
  std::size_t size_ = 0;
  bool spilled_ = false;
  std::string spill_;
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
  script_args args;
  std::chrono::milliseconds timeout{};
  fallback_gate gate{};  // set by the driver (acquire_run); empty: always fall back
};

}  // namespace dlock::detail
