// tools/dlock-cli/keys.hpp: the Redis keys around a lock key, as the library lays them out.
//   same_slot_key  "{key}suffix" (or key + suffix when key has a {tag}); must match
//                  src/lock_core.cpp's same_slot_key, which is private to the library
//   fence_key      the fencing counter: {K}:fence (written by acquire.lua)
//   holder_key     who holds the lock, for `status` and `run -v` (written by this CLI only)
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace dlock::cli {

inline std::string same_slot_key(const std::string& key, std::string_view suffix) {
  auto open = key.find('{');
  if (open != std::string::npos) {
    auto close = key.find('}', open + 1);
    if (close != std::string::npos && close > open + 1) return key + std::string(suffix);
  }
  return "{" + key + "}" + std::string(suffix);
}

inline std::string fence_key(const std::string& key) { return same_slot_key(key, ":fence"); }
inline std::string holder_key(const std::string& key) { return same_slot_key(key, ":holder"); }

}  // namespace dlock::cli
