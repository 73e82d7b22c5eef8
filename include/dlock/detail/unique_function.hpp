// SPDX-License-Identifier: Apache-2.0
// dlock/detail/unique_function.hpp: a move-only std::function, for completion handlers
// (Asio's handlers are often move-only, and Asio 1.22 has no any_completion_handler). Not API.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace dlock::detail {

template <class Signature>
class unique_function;

template <class R, class... Args>
class unique_function<R(Args...)> {
 public:
  unique_function() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, unique_function>>>
  unique_function(F&& f) : impl_(std::make_unique<model<std::decay_t<F>>>(std::forward<F>(f))) {}

  explicit operator bool() const noexcept { return impl_ != nullptr; }
  R operator()(Args... args) { return impl_->call(std::forward<Args>(args)...); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual R call(Args... args) = 0;
  };
  template <class F>
  struct model final : concept_t {
    explicit model(F f) : f_(std::move(f)) {}
    R call(Args... args) override { return f_(std::forward<Args>(args)...); }
    F f_;
  };
  std::unique_ptr<concept_t> impl_;
};

}  // namespace dlock::detail
