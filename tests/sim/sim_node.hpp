// SPDX-License-Identifier: Apache-2.0
// tests/sim/sim_node.hpp: a simulated Redis 7.0 node for the deterministic simulator.
//   node        an in-memory keyspace (strings, hashes, sorted sets) with expiry by an
//               injected clock, a script cache, pub/sub delivery counts, and restarts; it runs
//               dlock's real src/lua scripts in an embedded Lua 5.1, as Redis does
//   message     a PUBLISH delivered to one subscribed connection
//   key_state   one key as dump() shows it: type, value, PTTL
//   same_reply  exact equality of two replies (dlock::reply has no operator==)
// A node is a plain single-threaded value: the simulator (or a test) drives it, nothing runs
// behind its back. Replies are dlock::reply, the library's own type (built with its public
// make_* functions), so a simulated connection can hand them to the engine unchanged.
//
// Only what dlock's scripts and tests use is implemented; anything else answers
// "ERR unknown command", so a script that starts using a new command fails loudly here first.
// The differential test (sim_node_diff_test.cpp) holds this model to a real redis-server.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "dlock/reply.hpp"

namespace dlock::sim {

class lua_engine;  // sim_lua.hpp

// Identifies a client connection to the node, for pub/sub.
using connection_id = std::uint64_t;

struct message {
  connection_id to;
  std::string channel;
  std::string payload;
};

// One key as dump() shows it. value: a string's bytes as a bulk string; a hash as an array of
// field, value pairs sorted by field (Redis's own order is an encoding detail); a sorted set as
// ZRANGE key 0 -1 WITHSCORES gives it. pttl: -1 without expiry, else ms left (as PTTL says).
struct key_state {
  std::string type;  // "string", "hash" or "zset", as TYPE names them
  reply value;
  std::int64_t pttl = -1;
};

bool same_reply(const reply& a, const reply& b);

class node {
 public:
  node();
  ~node();
  node(const node&) = delete;
  node& operator=(const node&) = delete;

  // The node's wall clock, in ms since the epoch: TIME answers it and keys expire by it. It
  // moves only here, so it stands still during a script, as Redis 7 freezes expiry time while
  // one runs. Moving it backwards is allowed (a clock step), as on a real server.
  void set_time(std::int64_t ms_since_epoch) noexcept { now_ms_ = ms_since_epoch; }
  std::int64_t time() const noexcept { return now_ms_; }

  // Runs one command, as a client on a plain connection would: GET, SET, DEL, EXISTS, TYPE,
  // PTTL, PEXPIRE, PEXPIREAT, INCR, INCRBY, HGET, HSET, HDEL, HMGET, HVALS, HGETALL, ZADD, ZREM,
  // ZRANGE, ZRANGEBYSCORE, ZREMRANGEBYSCORE, ZSCORE, ZRANK, ZCARD, ZINTERSTORE, PUBLISH, TIME,
  // KEYS, FLUSHALL, EVAL, EVALSHA, SCRIPT LOAD|EXISTS|FLUSH. Errors are error replies with
  // Redis 7.0's text; nothing throws.
  reply exec(std::span<const std::string> argv);
  reply exec(std::initializer_list<std::string_view> argv);

  // Pub/sub: a subscribed connection receives every PUBLISH on the channel (PUBLISH counts it).
  void subscribe(connection_id c, std::string_view channel);
  void unsubscribe(connection_id c, std::string_view channel);
  void disconnect(connection_id c);  // a closed connection: all its subscriptions end
  // The messages delivered since the last call, in delivery order.
  std::vector<message> take_messages();

  // A crash and restart: connections (subscriptions) and the script cache are gone; with
  // persistence (AOF, fsync always) the keyspace survives, less the keys that expired,
  // without it the node comes back empty.
  void restart(bool persisted);

  // Every live key, by name.
  std::map<std::string, key_state> dump() const;
  // What GET and PTTL would answer for one key, without running a command (and without
  // deleting it when it is due): the simulator's checker reads keys after every script.
  // peek: nullopt when absent or expired, "<type>" for a key of another type.
  std::optional<std::string> peek(const std::string& key) const;
  std::int64_t peek_pttl(const std::string& key) const;  // -2 absent, -1 no expiry, else ms
  // What ZSCORE would answer: nullopt when the key or the member is absent (or the key expired).
  std::optional<double> peek_score(const std::string& key, const std::string& member) const;

 private:
  friend class lua_engine;

  struct sorted_set {
    std::unordered_map<std::string, double> score_of;
    std::set<std::pair<double, std::string>> by_score;  // Redis's order: score, then bytes
  };
  // A hash keeps insertion order, as Redis's small-hash encoding (listpack) shows it.
  using hash = std::vector<std::pair<std::string, std::string>>;
  struct entry {
    std::variant<std::string, hash, sorted_set> value;
    std::optional<std::int64_t> expires_at;  // ms since the epoch
  };
  using args = std::span<const std::string>;

  reply dispatch(args argv, bool from_script);
  entry* find(const std::string& key);  // nullptr when absent or expired (then deleted)
  bool expired(const entry& e) const noexcept { return e.expires_at && now_ms_ > *e.expires_at; }
  template <class T>
  T* find_as(const std::string& key, reply& wrong_type);
  template <class T>
  T* find_or_create(const std::string& key, reply& wrong_type);

  reply cmd_get(args a);
  reply cmd_mget(args a);
  reply cmd_set(args a);
  reply cmd_del(args a);
  reply cmd_exists(args a);
  reply cmd_type(args a);
  reply cmd_pttl(args a);
  reply cmd_pexpire(args a, bool absolute);
  reply cmd_incrby(args a, bool by_argument);
  reply cmd_hget(args a);
  reply cmd_hset(args a);
  reply cmd_hdel(args a);
  reply cmd_hmget(args a);
  reply cmd_hvals(args a, bool with_fields);
  reply cmd_zadd(args a);
  reply cmd_zrem(args a);
  reply cmd_zrange(args a);
  reply cmd_zrangebyscore(args a, bool remove);
  reply cmd_zscore(args a);
  reply cmd_zrank(args a);
  reply cmd_zcard(args a);
  reply cmd_zinterstore(args a);
  reply cmd_publish(args a);
  reply cmd_time();
  reply cmd_keys(args a);
  reply cmd_script(args a);
  reply cmd_eval(args a, bool by_sha);

  std::int64_t now_ms_ = 0;
  std::map<std::string, entry> keys_;
  std::map<std::string, std::set<connection_id>> subscribers_;
  std::vector<message> delivered_;
  std::unique_ptr<lua_engine> lua_;
};

}  // namespace dlock::sim
