// SPDX-License-Identifier: Apache-2.0
// The script engine follows Redis 7.0.15's script_lua.c and eval.c where a script can tell the
// difference:
// - Lua -> reply: a string is a bulk string; a number an integer (truncated toward zero); true
//   is 1 and false nil; a table with a string field err is an error, with ok a status, and any
//   other table an array that ends at its first nil; anything else is nil.
// - reply -> Lua (what redis.call returns): integers become numbers, nil becomes false, a
//   status {ok=...}, an error {err="CODE message"}; redis.call raises that table instead.
// - Arguments to redis.call: strings as they are, numbers as "%.17g" (Redis 7.0's format;
//   0.1 is sent as 0.10000000000000001), anything else an error.
// - A script error becomes "<err> script: <sha>, on @user_script:<line>.", the line found by
//   Redis's own error handler (kept verbatim below, since that is what fixes the line).
// Lua's errors are longjmps: every function that may raise one keeps no C++ object alive across
// the raise (the work happens in helpers that return first).
#include "sim_lua.hpp"

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
}

#include <openssl/evp.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "sim_node.hpp"

namespace dlock::sim {
namespace {

using kind = reply::kind;

// Redis 7.0's script error handler (eval.c, scriptingInit): it records where the script was
// when the error happened, skipping a C function such as redis.call.
constexpr const char* error_handler_source =
    "local dbg = debug\n"
    "debug = nil\n"
    "function __redis__err__handler(err)\n"
    "  local i = dbg.getinfo(2,'nSl')\n"
    "  if i and i.what == 'C' then\n"
    "    i = dbg.getinfo(3,'nSl')\n"
    "  end\n"
    "  if type(err) ~= 'table' then\n"
    "    err = {err='ERR ' .. tostring(err)}"
    "  end"
    "  if i then\n"
    "    err['source'] = i.source\n"
    "    err['line'] = i.currentline\n"
    "  end"
    "  return err\n"
    "end\n";

// Redis 7.0 makes the globals read-only and refuses to read undefined ones.
int global_read_error(lua_State* lua) {
  const char* name = lua_tostring(lua, 2);
  return luaL_error(lua, "Script attempted to access nonexistent global variable '%s'",
                    name ? name : "?");
}
int global_write_error(lua_State* lua) {
  return luaL_error(lua, "Attempt to modify a readonly table");
}

// luaPushErrorBuff: "-CODE message" keeps its code, a text without a space gets ERR.
void push_error_table(lua_State* lua, std::string_view text) {
  std::size_t space = text.find(' ');
  std::string err = space == std::string_view::npos ? "ERR " + std::string(text)
                                                    : std::string(text);
  while (!err.empty() && (err.back() == '\r' || err.back() == '\n')) err.pop_back();
  lua_newtable(lua);
  lua_pushstring(lua, "err");
  lua_pushlstring(lua, err.data(), err.size());
  lua_rawset(lua, -3);
}

void push_reply(lua_State* lua, const reply& r) {
  switch (r.type()) {
    case kind::nil: lua_pushboolean(lua, 0); break;
    case kind::integer: lua_pushnumber(lua, static_cast<lua_Number>(r.integer())); break;
    case kind::string: lua_pushlstring(lua, r.str().data(), r.str().size()); break;
    case kind::status:
      lua_newtable(lua);
      lua_pushstring(lua, "ok");
      lua_pushlstring(lua, r.str().data(), r.str().size());
      lua_rawset(lua, -3);
      break;
    case kind::error: push_error_table(lua, r.str()); break;
    case kind::array: {
      lua_newtable(lua);
      int i = 1;
      for (const reply& element : r.elements()) {
        push_reply(lua, element);
        lua_rawseti(lua, -2, i++);
      }
      break;
    }
  }
}

// \r and \n would break the protocol line of a status or error reply; Redis maps them to spaces.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  return text;
}

// The string field `name` of the table at `index`, if it is a string (or a number).
std::optional<std::string> string_field(lua_State* lua, int index, const char* name) {
  lua_pushstring(lua, name);
  lua_rawget(lua, index);
  std::optional<std::string> out;
  if (lua_type(lua, -1) == LUA_TSTRING || lua_type(lua, -1) == LUA_TNUMBER) {
    std::size_t length = 0;
    const char* text = lua_tolstring(lua, -1, &length);
    out.emplace(text, length);
  }
  lua_pop(lua, 1);
  return out;
}

reply to_reply(lua_State* lua, int index) {
  switch (lua_type(lua, index)) {
    case LUA_TSTRING: {
      std::size_t length = 0;
      const char* text = lua_tolstring(lua, index, &length);
      return reply::make_string(kind::string, {text, length});
    }
    case LUA_TBOOLEAN:
      return lua_toboolean(lua, index) ? reply::make_integer(1) : reply::make_nil();
    case LUA_TNUMBER: {
      // (long long) of the double, as Redis casts; out of range gives x86's INT64_MIN
      // (the cast itself would be undefined here).
      double n = lua_tonumber(lua, index);
      bool fits = n > -9.3e18 && n < 9.3e18;
      return reply::make_integer(fits ? static_cast<std::int64_t>(n)
                                      : std::numeric_limits<std::int64_t>::min());
    }
    case LUA_TTABLE: {
      lua_pushstring(lua, "err");
      lua_rawget(lua, index);
      bool is_error = lua_type(lua, -1) == LUA_TSTRING;
      lua_pop(lua, 1);
      if (is_error) {
        std::string text = *string_field(lua, index, "err");
        while (!text.empty() && (text.back() == '\r' || text.back() == '\n')) text.pop_back();
        return reply::make_string(kind::error, one_line(std::move(text)));
      }
      lua_pushstring(lua, "ok");
      lua_rawget(lua, index);
      bool is_status = lua_type(lua, -1) == LUA_TSTRING;
      lua_pop(lua, 1);
      if (is_status) {
        return reply::make_string(kind::status, one_line(*string_field(lua, index, "ok")));
      }
      std::vector<reply> elements;
      for (int i = 1;; ++i) {
        lua_rawgeti(lua, index, i);
        if (lua_isnil(lua, -1)) {
          lua_pop(lua, 1);
          break;
        }
        elements.push_back(to_reply(lua, lua_gettop(lua)));
        lua_pop(lua, 1);
      }
      return reply::make_array(std::move(elements));
    }
    default: return reply::make_nil();
  }
}

// Turns redis.call's arguments into an argv, or returns the error text.
std::optional<std::string> read_arguments(lua_State* lua, std::vector<std::string>& argv) {
  int count = lua_gettop(lua);
  if (count == 0) return "Please specify at least one argument for this redis lib call";
  for (int i = 1; i <= count; ++i) {
    if (lua_type(lua, i) == LUA_TNUMBER) {
      auto number = static_cast<double>(lua_tonumber(lua, i));
      char buffer[64];
      // An integral value below 1e17 prints under "%.17g" as its integer digits; to_chars
      // writes those many times faster (the scripts pass integers: TTLs, times, counts); -0
      // keeps its sign through printf.
      bool integral = number == std::trunc(number) && !(number == 0 && std::signbit(number));
      if (integral && std::abs(number) < 1e17) {
        auto end = std::to_chars(buffer, std::end(buffer), static_cast<long long>(number)).ptr;
        argv.emplace_back(buffer, end);
      } else {
        std::snprintf(buffer, sizeof buffer, "%.17g", number);
        argv.emplace_back(buffer);
      }
    } else if (lua_type(lua, i) == LUA_TSTRING) {
      std::size_t length = 0;
      const char* text = lua_tolstring(lua, i, &length);
      argv.emplace_back(text, length);
    } else {
      return "Lua redis lib command arguments must be strings or integers";
    }
  }
  return std::nullopt;
}

void set_global_array(lua_State* lua, const char* name, std::span<const std::string> items) {
  lua_pushstring(lua, name);
  lua_newtable(lua);
  int i = 1;
  for (const std::string& item : items) {
    lua_pushlstring(lua, item.data(), item.size());
    lua_rawseti(lua, -2, i++);
  }
  lua_rawset(lua, LUA_GLOBALSINDEX);  // raw: the globals are read-only to scripts
}

}  // namespace

std::string sha1_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha1(), nullptr);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

struct lua_engine::interpreter {
  lua_State* lua = luaL_newstate();
  int error_handler = 0;                          // registry reference
  node* owner = nullptr;                          // the engine's node, for redis.call
  std::unordered_map<std::string, int> functions;  // sha -> registry reference

  interpreter();
  ~interpreter() { lua_close(lua); }
  interpreter(const interpreter&) = delete;
  interpreter& operator=(const interpreter&) = delete;
};

lua_engine::interpreter::interpreter() {
  // The libraries Redis opens that dlock's scripts may use (Redis adds cjson, struct,
  // cmsgpack and bit, which they do not).
  for (lua_CFunction open : {luaopen_base, luaopen_table, luaopen_string, luaopen_math,
                             luaopen_debug}) {
    lua_pushcfunction(lua, open);
    lua_call(lua, 0, 0);
  }
  for (const char* removed : {"loadfile", "dofile"}) {
    lua_pushnil(lua);
    lua_setglobal(lua, removed);
  }

  lua_newtable(lua);
  auto add = [&](const char* name, lua_CFunction f) {
    lua_pushstring(lua, name);
    lua_pushlightuserdata(lua, this);
    lua_pushcclosure(lua, f, 1);
    lua_rawset(lua, -3);
  };
  add("call", &lua_engine::redis_call);
  add("pcall", &lua_engine::redis_pcall);
  add("error_reply", [](lua_State* lua) -> int {
    // An optional leading '-' goes; then the first word is the code, or ERR for one word.
    if (lua_gettop(lua) != 1 || lua_type(lua, -1) != LUA_TSTRING) {
      push_error_table(lua, "ERR wrong number or type of arguments");
      return 1;
    }
    std::string_view text = lua_tostring(lua, -1);
    push_error_table(lua, text.substr(text.starts_with('-') ? 1 : 0));
    return 1;
  });
  add("status_reply", [](lua_State* lua) -> int {
    if (lua_gettop(lua) != 1 || lua_type(lua, -1) != LUA_TSTRING) {
      push_error_table(lua, "ERR wrong number or type of arguments");
      return 1;
    }
    lua_newtable(lua);
    lua_pushstring(lua, "ok");
    lua_pushvalue(lua, -3);
    lua_rawset(lua, -3);
    return 1;
  });
  lua_setglobal(lua, "redis");

  luaL_loadstring(lua, error_handler_source);
  lua_call(lua, 0, 0);
  lua_getglobal(lua, "__redis__err__handler");
  error_handler = luaL_ref(lua, LUA_REGISTRYINDEX);

  lua_newtable(lua);
  lua_pushcfunction(lua, global_read_error);
  lua_setfield(lua, -2, "__index");
  lua_pushcfunction(lua, global_write_error);
  lua_setfield(lua, -2, "__newindex");
  lua_setmetatable(lua, LUA_GLOBALSINDEX);
}

namespace {
// Per thread, since a Lua state is single-threaded; a few suffice (a world has at most five
// nodes, and a restart gives one back before it borrows).
constexpr std::size_t pool_size = 16;
}  // namespace

std::vector<std::unique_ptr<lua_engine::interpreter>>& lua_engine::pool() {
  thread_local std::vector<std::unique_ptr<interpreter>> idle;
  return idle;
}

lua_engine::interpreter* lua_engine::borrow_interpreter() {
  auto& idle = pool();
  if (idle.empty()) return new interpreter;
  interpreter* i = idle.back().release();
  idle.pop_back();
  return i;
}

void lua_engine::give_back(interpreter* i) {
  std::unique_ptr<interpreter> owned(i);
  owned->owner = nullptr;
  lua_settop(owned->lua, 0);
  if (pool().size() < pool_size) pool().push_back(std::move(owned));
}

lua_engine::lua_engine(node& owner) : node_(owner), interpreter_(borrow_interpreter()) {
  interpreter_->owner = &owner;
}

lua_engine::~lua_engine() { give_back(interpreter_); }

reply lua_engine::load(std::string_view body) {
  compiled& c = compile_once(body);
  if (loaded_.contains(c.sha)) return reply::make_string(kind::string, c.sha);
  if (!interpreter_->functions.contains(c.sha)) {
    // The bytecode when the body compiled (loading it skips the parser), else the source, for
    // its error message.
    lua_State* lua = interpreter_->lua;
    const std::string& chunk = c.bytecode.empty() ? c.source : c.bytecode;
    if (luaL_loadbuffer(lua, chunk.data(), chunk.size(), "@user_script") != 0) {
      std::string message = lua_tostring(lua, -1);
      lua_pop(lua, 1);
      return reply::make_string(kind::error, "ERR Error compiling script (new function): " +
                                                 one_line(message));
    }
    interpreter_->functions[c.sha] = luaL_ref(lua, LUA_REGISTRYINDEX);
  }
  loaded_.insert(c.sha);
  return reply::make_string(kind::string, c.sha);
}

// Compiled once per process, in an interpreter of its own; lua_dump keeps the debug info, so
// errors name the same lines as the source would. Deterministic, and only a cache: a mutex
// keeps it safe should two threads ever run simulations.
lua_engine::compiled& lua_engine::compile_once(std::string_view body) {
  static std::mutex mutex;
  static std::unordered_map<std::string, compiled> cache;
  std::lock_guard lock(mutex);
  auto [it, fresh] = cache.try_emplace(std::string(body));
  compiled& c = it->second;
  if (!fresh) return c;
  c.sha = sha1_hex(body);
  c.source = std::string(body);
  lua_State* lua = luaL_newstate();
  if (luaL_loadbuffer(lua, body.data(), body.size(), "@user_script") == 0) {
    lua_dump(lua, [](lua_State*, const void* p, size_t n, void* out) {
      static_cast<std::string*>(out)->append(static_cast<const char*>(p), n);
      return 0;
    }, &c.bytecode);
  }
  lua_close(lua);
  return c;
}

reply lua_engine::run(const std::string& sha, std::span<const std::string> keys,
                      std::span<const std::string> argv) {
  lua_State* lua = interpreter_->lua;
  lua_settop(lua, 0);
  lua_rawgeti(lua, LUA_REGISTRYINDEX, interpreter_->error_handler);
  set_global_array(lua, "KEYS", keys);
  set_global_array(lua, "ARGV", argv);
  lua_rawgeti(lua, LUA_REGISTRYINDEX, interpreter_->functions.at(sha));
  reply out;
  if (lua_pcall(lua, 0, 1, 1) == 0) {
    out = to_reply(lua, 2);
  } else if (lua_istable(lua, 2)) {
    // The handler's table: {err=..., source=..., line=...}.
    std::string text = string_field(lua, 2, "err").value_or("");
    auto source = string_field(lua, 2, "source");
    auto line = string_field(lua, 2, "line");
    if (source && line) text += " script: " + sha + ", on " + *source + ":" + *line + ".";
    out = reply::make_string(kind::error, text);
  } else {
    const char* message = lua_tostring(lua, 2);
    out = reply::make_string(kind::error, "ERR Error running script " + sha + ", " +
                                              std::string(message ? message : "execution failure")
                                                  .substr(0, 100));
  }
  lua_settop(lua, 0);
  return out;
}

int lua_engine::redis_call(lua_State* lua) { return redis_call_common(lua, true); }
int lua_engine::redis_pcall(lua_State* lua) { return redis_call_common(lua, false); }

// Leaves the result (or the error table) on the stack; raises it only after every C++ object
// of the call is gone, because lua_error does not unwind the C++ stack.
int lua_engine::redis_call_common(lua_State* lua, bool raise) {
  bool failed = [lua] {
    auto* self = static_cast<interpreter*>(lua_touserdata(lua, lua_upvalueindex(1)));
    std::vector<std::string> argv;
    if (auto problem = read_arguments(lua, argv)) {
      push_error_table(lua, "ERR " + *problem);
      return true;
    }
    reply r = self->owner->dispatch(argv, true);
    push_reply(lua, r);
    return r.is_error();
  }();
  if (failed && raise) return lua_error(lua);
  return 1;
}

}  // namespace dlock::sim
