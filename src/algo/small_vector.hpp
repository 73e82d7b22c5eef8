// SPDX-License-Identifier: Apache-2.0
// algo/small_vector.hpp: a vector of trivially copyable values that holds its first N inline.
//   small_vector  the engines' per-acquisition bookkeeping (one entry per node or attempt):
//                 nearly always a few entries, and each std::vector of them was an allocation
//                 per lock cycle (callgrind). Past N it moves everything to the heap for good.
// Not thread-safe, like std::vector. Only what the engines use.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

namespace dlock::detail {

template <class T, std::size_t N>
class small_vector {
  static_assert(std::is_trivially_copyable_v<T>, "entries are copied as they are");

 public:
  small_vector() = default;
  small_vector(std::size_t count, const T& value) {
    for (std::size_t i = 0; i < count; ++i) push_back(value);
  }

  std::size_t size() const noexcept { return spilled_ ? heap_.size() : size_; }
  bool empty() const noexcept { return size() == 0; }
  T* data() noexcept { return spilled_ ? heap_.data() : inline_.data(); }
  const T* data() const noexcept { return spilled_ ? heap_.data() : inline_.data(); }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size(); }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size(); }
  T& operator[](std::size_t i) noexcept { return data()[i]; }
  const T& operator[](std::size_t i) const noexcept { return data()[i]; }

  void push_back(const T& value) {
    if (!spilled_) {
      if (size_ < N) {
        inline_[size_++] = value;
        return;
      }
      heap_.reserve(2 * N);
      heap_.assign(inline_.begin(), inline_.begin() + size_);
      spilled_ = true;
    }
    heap_.push_back(value);
  }
  // Removes the entry at `at` (keeping the order); returns where the next one now is.
  T* erase(T* at) noexcept {
    std::copy(at + 1, end(), at);
    if (spilled_) {
      heap_.pop_back();
    } else {
      --size_;
    }
    return at;
  }
  void clear() noexcept {
    heap_.clear();
    size_ = 0;
  }

 private:
  std::array<T, N> inline_{};
  std::size_t size_ = 0;  // while not spilled
  bool spilled_ = false;
  std::vector<T> heap_;
};

}  // namespace dlock::detail
