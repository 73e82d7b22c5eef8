// SPDX-License-Identifier: Apache-2.0
// observe.hpp: how the library reports to the process's observer and log sink. Private.
//   current_observer  the installed observer, or null (one atomic load: the cost when unset)
//   logging / log     whether a sink is installed, and one line to it
//   node_name         the label a node's events carry
// See dlock/observer.hpp for the contract with the user's observer and sink.
#pragma once

#include <atomic>
#include <string>
#include <string_view>

#include "dlock/observer.hpp"

namespace dlock::detail {

extern std::atomic<observer*> installed_observer;
extern std::atomic<const log_sink*> installed_log_sink;

inline observer* current_observer() noexcept {
  return installed_observer.load(std::memory_order_acquire);
}

inline bool logging() noexcept {
  return installed_log_sink.load(std::memory_order_acquire) != nullptr;
}

// Sends one line to the sink, if any. Build the message only when logging() is true.
void log(log_level level, std::string_view message) noexcept;

}  // namespace dlock::detail
