// SPDX-License-Identifier: Apache-2.0
// tests/sim/sim_lua.hpp: the simulated node's script engine (private to tests/sim).
//   lua_engine   one Lua 5.1 interpreter (the version Redis embeds) with Redis 7.0's script
//                environment: the `redis` table (call, pcall, error_reply, status_reply),
//                KEYS/ARGV, read-only globals, the error handler, and the script cache by SHA1
//   sha1_hex     a body's SHA1 as Redis names scripts (lowercase hex)
// Owned by one node; SCRIPT FLUSH and a restart replace it, as Redis starts a new interpreter
// (whose Lua state may be a reused one: see lua_engine::interpreter).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "dlock/reply.hpp"

struct lua_State;

namespace dlock::sim {

class node;

std::string sha1_hex(std::string_view bytes);

class lua_engine {
 public:
  explicit lua_engine(node& owner);
  ~lua_engine();
  lua_engine(const lua_engine&) = delete;
  lua_engine& operator=(const lua_engine&) = delete;

  // Compiles and caches `body`; the reply is its SHA1, or Redis's "Error compiling script".
  reply load(std::string_view body);
  bool has(std::string_view sha) const { return loaded_.contains(std::string(sha)); }
  // Runs a cached script, converting its result (or its error) to a reply as Redis does.
  reply run(const std::string& sha, std::span<const std::string> keys,
            std::span<const std::string> argv);

 private:
  struct compiled {
    std::string sha, source, bytecode;  // bytecode: empty when the source does not compile
  };
  // A prepared Lua state (libraries, the redis table, the error handler, read-only globals) and
  // the functions loaded into it. Engines borrow one from a per-thread pool and give it back:
  // a sweep builds thousands of nodes, and preparing a state cost more than their scripts'
  // runs. Nothing a script does outlives its call (the globals are read-only, KEYS and ARGV
  // are set anew), so a reused state answers as a fresh one; what a node has loaded is
  // loaded_, its own.
  struct interpreter;
  static compiled& compile_once(std::string_view body);
  static std::vector<std::unique_ptr<interpreter>>& pool();  // this thread's idle ones
  static interpreter* borrow_interpreter();
  static void give_back(interpreter* i);
  static int redis_call(lua_State* lua);
  static int redis_pcall(lua_State* lua);
  static int redis_call_common(lua_State* lua, bool raise);

  node& node_;
  interpreter* interpreter_;
  std::unordered_set<std::string> loaded_;  // the node's script cache (SHA1s)
};

}  // namespace dlock::sim
