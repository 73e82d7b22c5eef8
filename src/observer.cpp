// SPDX-License-Identifier: Apache-2.0
// The process-wide observer and log sink (dlock/observer.hpp).
//
// Readers take a raw pointer with one atomic load and never a lock: that is the whole cost of
// an unset hook on the hot paths. A replaced observer or sink may still be in use on another
// thread, and nothing tells when that use ends, so every one installed is kept in a list that
// is never destroyed (dlock's I/O thread outlives static destruction, see net/runtime.cpp).
#include "observe.hpp"

#include <mutex>
#include <vector>

namespace dlock {
namespace detail {

std::atomic<observer*> installed_observer{nullptr};
std::atomic<const log_sink*> installed_log_sink{nullptr};

namespace {

struct kept_hooks {
  std::mutex guard;
  std::vector<std::shared_ptr<observer>> observers;
  std::vector<std::unique_ptr<log_sink>> sinks;
};

kept_hooks& kept() {
  static kept_hooks* hooks = new kept_hooks;
  return *hooks;
}

}  // namespace

void log(log_level level, std::string_view message) noexcept {
  if (const log_sink* sink = installed_log_sink.load(std::memory_order_acquire)) {
    (*sink)(level, message);
  }
}

}  // namespace detail

observer::~observer() = default;

void set_observer(std::shared_ptr<observer> o) {
  auto& hooks = detail::kept();
  std::lock_guard lock(hooks.guard);
  observer* raw = o.get();
  if (o) hooks.observers.push_back(std::move(o));
  detail::installed_observer.store(raw, std::memory_order_release);
}

void set_log_sink(log_sink sink) {
  auto& hooks = detail::kept();
  std::lock_guard lock(hooks.guard);
  const log_sink* raw = nullptr;
  if (sink) {
    hooks.sinks.push_back(std::make_unique<log_sink>(std::move(sink)));
    raw = hooks.sinks.back().get();
  }
  detail::installed_log_sink.store(raw, std::memory_order_release);
}

std::string_view to_string(primitive p) noexcept {
  switch (p) {
    case primitive::lock: return "lock";
    case primitive::semaphore: return "semaphore";
    case primitive::shared_mutex: return "shared_mutex";
  }
  return "lock";
}

std::string_view to_string(connection_event::change c) noexcept {
  switch (c) {
    case connection_event::change::connected: return "connected";
    case connection_event::change::connect_failed: return "connect_failed";
    case connection_event::change::dropped: return "dropped";
  }
  return "connected";
}

std::string_view to_string(log_level l) noexcept {
  switch (l) {
    case log_level::debug: return "debug";
    case log_level::info: return "info";
    case log_level::warning: return "warning";
    case log_level::error: return "error";
  }
  return "info";
}

}  // namespace dlock
