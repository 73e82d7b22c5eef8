// SPDX-License-Identifier: Apache-2.0
// The simulated node's keyspace and commands. Each command follows Redis 7.0.15's code path
// closely enough that its replies, error texts and side effects (a key emptied by ZREM or HDEL
// is deleted; ZINTERSTORE's destination loses its TTL; PEXPIRE into the past deletes) are the
// real server's: sim_node_diff_test checks them against one. Options the scripts never send
// (SET GET, ZADD GT/LT/INCR, ZRANGE BYSCORE/REV/LIMIT ...) answer "ERR syntax error" instead of
// being half-implemented.
#include "sim_node.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <limits>

#include "sim_lua.hpp"

namespace dlock::sim {
namespace {

using kind = reply::kind;

reply ok() { return reply::make_string(kind::status, "OK"); }
reply error(std::string_view text) { return reply::make_string(kind::error, text); }
reply bulk(std::string_view text) { return reply::make_string(kind::string, text); }
reply integer(std::int64_t v) { return reply::make_integer(v); }

const reply& wrong_type_error() {
  static const reply r =
      error("WRONGTYPE Operation against a key holding the wrong kind of value");
  return r;
}
reply not_integer() { return error("ERR value is not an integer or out of range"); }
reply syntax_error() { return error("ERR syntax error"); }

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}
std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Redis's string2ll: an optional '-', then digits without a leading zero (or just "0"); no
// spaces, no '+', no overflow. INCR and every integer argument go through it.
bool parse_integer(std::string_view s, std::int64_t& out) {
  if (s.empty() || s.size() >= 21) return false;
  if (s == "0") {
    out = 0;
    return true;
  }
  std::size_t i = 0;
  bool negative = s[0] == '-';
  if (negative && ++i == s.size()) return false;
  if (s[i] < '1' || s[i] > '9') return false;
  unsigned long long v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    unsigned long long digit = static_cast<unsigned long long>(s[i] - '0');
    if (v > (std::numeric_limits<unsigned long long>::max() - digit) / 10) return false;
    v = v * 10 + digit;
  }
  constexpr auto max = static_cast<unsigned long long>(std::numeric_limits<std::int64_t>::max());
  if (negative) {
    if (v > max + 1) return false;
    out = v == max + 1 ? std::numeric_limits<std::int64_t>::min() : -static_cast<std::int64_t>(v);
  } else {
    if (v > max) return false;
    out = static_cast<std::int64_t>(v);
  }
  return true;
}

// Redis's getDoubleFromObject (ZADD scores, WEIGHTS): strtod, whole string, no leading space,
// no NaN, no overflow.
bool parse_double(const std::string& s, double& out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(s.c_str(), &end);
  if (*end != '\0' || std::isnan(out)) return false;
  if (errno == ERANGE && (std::isinf(out) || out == 0)) return false;
  return true;
}

// zslParseRange: "(" makes a bound exclusive; strtod as is (so "" reads as 0).
bool parse_score_bound(const std::string& s, double& value, bool& exclusive) {
  exclusive = !s.empty() && s[0] == '(';
  const char* start = s.c_str() + (exclusive ? 1 : 0);
  char* end = nullptr;
  value = std::strtod(start, &end);
  return *end == '\0' && !std::isnan(value);
}

// addReplyDouble in RESP2 (Redis 7.0): %.17g, infinities spelled out.
std::string format_score(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", d);
  return buffer;
}

}  // namespace

bool same_reply(const reply& a, const reply& b) {
  if (a.type() != b.type() || a.integer() != b.integer() || a.str() != b.str()) return false;
  return std::equal(a.elements().begin(), a.elements().end(), b.elements().begin(),
                    b.elements().end(), same_reply);
}

node::node() : lua_(std::make_unique<lua_engine>(*this)) {}
node::~node() = default;

reply node::exec(std::span<const std::string> argv) { return dispatch(argv, false); }

std::optional<std::string> node::peek(const std::string& key) const {
  auto it = keys_.find(key);
  if (it == keys_.end() || expired(it->second)) return std::nullopt;
  if (const auto* s = std::get_if<std::string>(&it->second.value)) return *s;
  return std::holds_alternative<hash>(it->second.value) ? "<hash>" : "<zset>";
}

std::int64_t node::peek_pttl(const std::string& key) const {
  auto it = keys_.find(key);
  if (it == keys_.end() || expired(it->second)) return -2;
  return it->second.expires_at ? *it->second.expires_at - now_ms_ : -1;
}

std::optional<double> node::peek_score(const std::string& key, const std::string& member) const {
  auto it = keys_.find(key);
  if (it == keys_.end() || expired(it->second)) return std::nullopt;
  const auto* z = std::get_if<sorted_set>(&it->second.value);
  if (!z) return std::nullopt;
  auto m = z->score_of.find(member);
  if (m == z->score_of.end()) return std::nullopt;
  return m->second;
}

reply node::exec(std::initializer_list<std::string_view> argv) {
  std::vector<std::string> copy(argv.begin(), argv.end());
  return dispatch(copy, false);
}

node::entry* node::find(const std::string& key) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return nullptr;
  if (expired(it->second)) {
    keys_.erase(it);
    return nullptr;
  }
  return &it->second;
}

template <class T>
T* node::find_as(const std::string& key, reply& wrong_type) {
  entry* e = find(key);
  if (!e) return nullptr;
  if (T* value = std::get_if<T>(&e->value)) return value;
  wrong_type = wrong_type_error();
  return nullptr;
}

template <class T>
T* node::find_or_create(const std::string& key, reply& wrong_type) {
  entry* e = find(key);
  if (!e) return &std::get<T>(keys_[key].value = T{});
  if (T* value = std::get_if<T>(&e->value)) return value;
  wrong_type = wrong_type_error();
  return nullptr;
}

// The command table: arity as Redis declares it (negative: at least that many), and whether
// scripts may call it (EVAL and SCRIPT are "noscript" in Redis).
reply node::dispatch(args argv, bool from_script) {
  struct spec {
    int arity;
    bool scripts_may_call;
    std::function<reply(node&, args)> run;
  };
  static const std::map<std::string, spec, std::less<>> table = {
      {"GET", {2, true, [](node& n, args a) { return n.cmd_get(a); }}},
      {"MGET", {-2, true, [](node& n, args a) { return n.cmd_mget(a); }}},
      {"SET", {-3, true, [](node& n, args a) { return n.cmd_set(a); }}},
      {"DEL", {-2, true, [](node& n, args a) { return n.cmd_del(a); }}},
      {"EXISTS", {-2, true, [](node& n, args a) { return n.cmd_exists(a); }}},
      {"TYPE", {2, true, [](node& n, args a) { return n.cmd_type(a); }}},
      {"PTTL", {2, true, [](node& n, args a) { return n.cmd_pttl(a); }}},
      {"PEXPIRE", {-3, true, [](node& n, args a) { return n.cmd_pexpire(a, false); }}},
      {"PEXPIREAT", {-3, true, [](node& n, args a) { return n.cmd_pexpire(a, true); }}},
      {"INCR", {2, true, [](node& n, args a) { return n.cmd_incrby(a, false); }}},
      {"INCRBY", {3, true, [](node& n, args a) { return n.cmd_incrby(a, true); }}},
      {"HGET", {3, true, [](node& n, args a) { return n.cmd_hget(a); }}},
      {"HSET", {-4, true, [](node& n, args a) { return n.cmd_hset(a); }}},
      {"HDEL", {-3, true, [](node& n, args a) { return n.cmd_hdel(a); }}},
      {"HMGET", {-3, true, [](node& n, args a) { return n.cmd_hmget(a); }}},
      {"HVALS", {2, true, [](node& n, args a) { return n.cmd_hvals(a, false); }}},
      {"HGETALL", {2, true, [](node& n, args a) { return n.cmd_hvals(a, true); }}},
      {"ZADD", {-4, true, [](node& n, args a) { return n.cmd_zadd(a); }}},
      {"ZREM", {-3, true, [](node& n, args a) { return n.cmd_zrem(a); }}},
      {"ZRANGE", {-4, true, [](node& n, args a) { return n.cmd_zrange(a); }}},
      {"ZRANGEBYSCORE", {-4, true, [](node& n, args a) { return n.cmd_zrangebyscore(a, false); }}},
      {"ZREMRANGEBYSCORE", {4, true, [](node& n, args a) { return n.cmd_zrangebyscore(a, true); }}},
      {"ZSCORE", {3, true, [](node& n, args a) { return n.cmd_zscore(a); }}},
      {"ZRANK", {3, true, [](node& n, args a) { return n.cmd_zrank(a); }}},
      {"ZCARD", {2, true, [](node& n, args a) { return n.cmd_zcard(a); }}},
      {"ZINTERSTORE", {-4, true, [](node& n, args a) { return n.cmd_zinterstore(a); }}},
      {"PUBLISH", {3, true, [](node& n, args a) { return n.cmd_publish(a); }}},
      {"TIME", {1, true, [](node& n, args) { return n.cmd_time(); }}},
      {"KEYS", {2, true, [](node& n, args a) { return n.cmd_keys(a); }}},
      {"FLUSHALL", {-1, true, [](node& n, args) { n.keys_.clear(); return ok(); }}},
      {"EVAL", {-3, false, [](node& n, args a) { return n.cmd_eval(a, false); }}},
      {"EVALSHA", {-3, false, [](node& n, args a) { return n.cmd_eval(a, true); }}},
      {"SCRIPT", {-2, false, [](node& n, args a) { return n.cmd_script(a); }}},
  };
  if (argv.empty()) return error("ERR empty command");
  auto it = table.find(argv[0]);  // most callers spell commands in capitals already
  if (it == table.end()) it = table.find(upper(argv[0]));
  if (it == table.end()) {
    if (from_script) return error("ERR Unknown Redis command called from script");
    std::string text = "ERR unknown command '" + argv[0].substr(0, 128) +
                       "', with args beginning with: ";
    for (std::size_t i = 1; i < argv.size(); ++i) text += "'" + argv[i].substr(0, 128) + "' ";
    return error(text);
  }
  const spec& s = it->second;
  auto argc = static_cast<int>(argv.size());
  if ((s.arity > 0 && argc != s.arity) || argc < -s.arity) {
    if (from_script) return error("ERR Wrong number of args calling Redis command from script");
    return error("ERR wrong number of arguments for '" + lower(argv[0]) + "' command");
  }
  if (from_script && !s.scripts_may_call) {
    return error("ERR This Redis command is not allowed from script");
  }
  return s.run(*this, argv);
}

// --- strings and keys ---

reply node::cmd_get(args a) {
  reply wrong;
  if (auto* s = find_as<std::string>(a[1], wrong)) return bulk(*s);
  return wrong;  // nil when absent
}

// A key that holds no string reads as nil here, not as WRONGTYPE.
reply node::cmd_mget(args a) {
  std::vector<reply> values;
  for (std::size_t i = 1; i < a.size(); ++i) {
    reply wrong;
    auto* s = find_as<std::string>(a[i], wrong);
    values.push_back(s ? bulk(*s) : reply{});
  }
  return reply::make_array(std::move(values));
}

reply node::cmd_set(args a) {
  bool nx = false, xx = false, keep_ttl = false;
  std::optional<std::string> expire;
  std::int64_t unit_ms = 1;
  for (std::size_t i = 3; i < a.size(); ++i) {
    std::string option = upper(a[i]);
    if (option == "NX" && !xx) {
      nx = true;
    } else if (option == "XX" && !nx) {
      xx = true;
    } else if (option == "KEEPTTL" && !expire) {
      keep_ttl = true;
    } else if ((option == "PX" || option == "EX") && !expire && !keep_ttl && i + 1 < a.size()) {
      expire = a[++i];
      unit_ms = option == "EX" ? 1000 : 1;
    } else {
      return syntax_error();
    }
  }
  std::int64_t expires_at = 0;
  if (expire) {
    std::int64_t amount = 0;
    if (!parse_integer(*expire, amount)) return not_integer();
    if (amount <= 0 || amount > std::numeric_limits<std::int64_t>::max() / unit_ms ||
        amount * unit_ms > std::numeric_limits<std::int64_t>::max() - now_ms_) {
      return error("ERR invalid expire time in 'set' command");
    }
    expires_at = amount * unit_ms + now_ms_;
  }
  entry* existing = find(a[1]);  // SET checks no type: it overwrites anything
  if ((nx && existing) || (xx && !existing)) return reply::make_nil();
  std::optional<std::int64_t> kept = existing && keep_ttl ? existing->expires_at : std::nullopt;
  keys_[a[1]] = entry{a[2], expire ? std::optional(expires_at) : kept};
  return ok();
}

reply node::cmd_del(args a) {
  std::int64_t deleted = 0;
  for (std::size_t i = 1; i < a.size(); ++i) {
    if (find(a[i])) {
      keys_.erase(a[i]);
      ++deleted;
    }
  }
  return integer(deleted);
}

reply node::cmd_exists(args a) {
  std::int64_t found = 0;
  for (std::size_t i = 1; i < a.size(); ++i) found += find(a[i]) ? 1 : 0;
  return integer(found);
}

reply node::cmd_type(args a) {
  static constexpr const char* names[] = {"string", "hash", "zset"};
  entry* e = find(a[1]);
  return reply::make_string(kind::status, e ? names[e->value.index()] : "none");
}

reply node::cmd_pttl(args a) {
  entry* e = find(a[1]);
  if (!e) return integer(-2);
  if (!e->expires_at) return integer(-1);
  return integer(std::max<std::int64_t>(*e->expires_at - now_ms_, 0));
}

// expireGenericCommand: a deadline at or before now deletes the key at once (checkAlreadyExpired
// uses <=), while an existing key only counts as expired once now is past its deadline.
reply node::cmd_pexpire(args a, bool absolute) {
  std::int64_t when = 0;
  if (!parse_integer(a[2], when)) return not_integer();
  if (a.size() > 3) return syntax_error();  // NX/XX/GT/LT: unused by the scripts
  std::int64_t base = absolute ? 0 : now_ms_;
  if (when > std::numeric_limits<std::int64_t>::max() - base) {
    return error("ERR invalid expire time in '" + lower(a[0]) + "' command");
  }
  when += base;
  entry* e = find(a[1]);
  if (!e) return integer(0);
  if (when <= now_ms_) {
    keys_.erase(a[1]);
  } else {
    e->expires_at = when;
  }
  return integer(1);
}

reply node::cmd_incrby(args a, bool by_argument) {
  std::int64_t increment = 1;
  if (by_argument && !parse_integer(a[2], increment)) return not_integer();
  reply wrong;
  auto* s = find_as<std::string>(a[1], wrong);
  if (wrong.is_error()) return wrong;
  std::int64_t value = 0;
  if (s && !parse_integer(*s, value)) return not_integer();
  if ((increment < 0 && value < std::numeric_limits<std::int64_t>::min() - increment) ||
      (increment > 0 && value > std::numeric_limits<std::int64_t>::max() - increment)) {
    return error("ERR increment or decrement would overflow");
  }
  value += increment;
  if (s) {
    *s = std::to_string(value);  // the TTL stays
  } else {
    keys_[a[1]] = entry{std::to_string(value), std::nullopt};
  }
  return integer(value);
}

// --- hashes ---

reply node::cmd_hget(args a) {
  reply wrong;
  auto* h = find_as<hash>(a[1], wrong);
  if (!h) return wrong;
  for (const auto& [field, value] : *h) {
    if (field == a[2]) return bulk(value);
  }
  return reply::make_nil();
}

reply node::cmd_hset(args a) {
  if (a.size() % 2 != 0) return error("ERR wrong number of arguments for 'hset' command");
  reply wrong;
  auto* h = find_or_create<hash>(a[1], wrong);
  if (!h) return wrong;
  std::int64_t added = 0;
  for (std::size_t i = 2; i < a.size(); i += 2) {
    auto it = std::find_if(h->begin(), h->end(), [&](const auto& p) { return p.first == a[i]; });
    if (it != h->end()) {
      it->second = a[i + 1];
    } else {
      h->emplace_back(a[i], a[i + 1]);
      ++added;
    }
  }
  return integer(added);
}

reply node::cmd_hdel(args a) {
  reply wrong;
  auto* h = find_as<hash>(a[1], wrong);
  if (!h) return wrong.is_error() ? wrong : integer(0);
  std::int64_t removed = 0;
  for (std::size_t i = 2; i < a.size(); ++i) {
    removed += std::erase_if(*h, [&](const auto& p) { return p.first == a[i]; });
  }
  if (h->empty()) keys_.erase(a[1]);
  return integer(removed);
}

reply node::cmd_hmget(args a) {
  reply wrong;
  auto* h = find_as<hash>(a[1], wrong);
  if (wrong.is_error()) return wrong;
  std::vector<reply> values;
  for (std::size_t i = 2; i < a.size(); ++i) {
    reply value;
    for (const auto& [field, v] : h ? *h : hash{}) {
      if (field == a[i]) value = bulk(v);
    }
    values.push_back(std::move(value));
  }
  return reply::make_array(std::move(values));
}

reply node::cmd_hvals(args a, bool with_fields) {
  reply wrong;
  auto* h = find_as<hash>(a[1], wrong);
  if (wrong.is_error()) return wrong;
  std::vector<reply> out;
  for (const auto& [field, value] : h ? *h : hash{}) {
    if (with_fields) out.push_back(bulk(field));
    out.push_back(bulk(value));
  }
  return reply::make_array(std::move(out));
}

// --- sorted sets ---

reply node::cmd_zadd(args a) {
  bool nx = false, xx = false, changed = false;
  std::size_t i = 2;
  for (; i < a.size(); ++i) {
    std::string option = upper(a[i]);
    if (option == "NX") {
      nx = true;
    } else if (option == "XX") {
      xx = true;
    } else if (option == "CH") {
      changed = true;
    } else {
      break;
    }
  }
  std::size_t elements = a.size() - i;
  if (elements == 0 || elements % 2 != 0) return syntax_error();
  if (nx && xx) return error("ERR XX and NX options at the same time are not compatible");
  std::vector<std::pair<double, std::string>> pairs;
  for (; i < a.size(); i += 2) {
    double score = 0;
    if (!parse_double(a[i], score)) return error("ERR value is not a valid float");
    pairs.emplace_back(score, a[i + 1]);
  }
  reply wrong;
  sorted_set* z = find_as<sorted_set>(a[1], wrong);
  if (wrong.is_error()) return wrong;
  if (!z) {
    if (xx) return integer(0);
    z = &std::get<sorted_set>(keys_[a[1]].value = sorted_set{});
  }
  std::int64_t added = 0, updated = 0;
  for (auto& [score, member] : pairs) {
    auto it = z->score_of.find(member);
    if (it == z->score_of.end()) {
      if (xx) continue;
      z->score_of.emplace(member, score);
      z->by_score.emplace(score, member);
      ++added;
    } else if (!nx && it->second != score) {
      z->by_score.erase({it->second, member});
      z->by_score.emplace(score, member);
      it->second = score;
      ++updated;
    }
  }
  if (z->score_of.empty()) keys_.erase(a[1]);  // XX on nothing new never creates a key
  return integer(changed ? added + updated : added);
}

reply node::cmd_zrem(args a) {
  reply wrong;
  auto* z = find_as<sorted_set>(a[1], wrong);
  if (!z) return wrong.is_error() ? wrong : integer(0);
  std::int64_t removed = 0;
  for (std::size_t i = 2; i < a.size(); ++i) {
    auto it = z->score_of.find(a[i]);
    if (it == z->score_of.end()) continue;
    z->by_score.erase({it->second, a[i]});
    z->score_of.erase(it);
    ++removed;
  }
  if (z->score_of.empty()) keys_.erase(a[1]);
  return integer(removed);
}

reply node::cmd_zrange(args a) {
  std::int64_t start = 0, stop = 0;
  if (!parse_integer(a[2], start) || !parse_integer(a[3], stop)) return not_integer();
  bool with_scores = false;
  for (std::size_t i = 4; i < a.size(); ++i) {
    if (upper(a[i]) != "WITHSCORES") return syntax_error();  // BYSCORE, REV, LIMIT: unused
    with_scores = true;
  }
  reply wrong;
  auto* z = find_as<sorted_set>(a[1], wrong);
  if (!z) return wrong.is_error() ? wrong : reply::make_array({});
  auto length = static_cast<std::int64_t>(z->by_score.size());
  if (start < 0) start += length;
  if (stop < 0) stop += length;
  start = std::max<std::int64_t>(start, 0);
  std::vector<reply> out;
  if (start <= stop && start < length) {
    stop = std::min(stop, length - 1);
    auto it = std::next(z->by_score.begin(), start);
    for (std::int64_t rank = start; rank <= stop; ++rank, ++it) {
      out.push_back(bulk(it->second));
      if (with_scores) out.push_back(bulk(format_score(it->first)));
    }
  }
  return reply::make_array(std::move(out));
}

reply node::cmd_zrangebyscore(args a, bool remove) {
  double min = 0, max = 0;
  bool min_exclusive = false, max_exclusive = false;
  if (!parse_score_bound(a[2], min, min_exclusive) ||
      !parse_score_bound(a[3], max, max_exclusive)) {
    return error("ERR min or max is not a float");
  }
  bool with_scores = false;
  for (std::size_t i = 4; i < a.size(); ++i) {
    if (upper(a[i]) != "WITHSCORES") return syntax_error();  // LIMIT: unused
    with_scores = true;
  }
  reply wrong;
  auto* z = find_as<sorted_set>(a[1], wrong);
  if (!z) return wrong.is_error() ? wrong : remove ? integer(0) : reply::make_array({});
  auto in_range = [&](double s) {
    return (min_exclusive ? s > min : s >= min) && (max_exclusive ? s < max : s <= max);
  };
  std::vector<reply> out;
  std::int64_t removed = 0;
  for (auto it = z->by_score.begin(); it != z->by_score.end();) {
    if (!in_range(it->first)) {
      ++it;
      continue;
    }
    if (remove) {
      z->score_of.erase(it->second);
      it = z->by_score.erase(it);
      ++removed;
      continue;
    }
    out.push_back(bulk(it->second));
    if (with_scores) out.push_back(bulk(format_score(it->first)));
    ++it;
  }
  if (!remove) return reply::make_array(std::move(out));
  if (z->score_of.empty()) keys_.erase(a[1]);
  return integer(removed);
}

reply node::cmd_zscore(args a) {
  reply wrong;
  auto* z = find_as<sorted_set>(a[1], wrong);
  if (!z) return wrong;
  auto it = z->score_of.find(a[2]);
  return it == z->score_of.end() ? reply::make_nil() : bulk(format_score(it->second));
}

reply node::cmd_zrank(args a) {
  reply wrong;
  auto* z = find_as<sorted_set>(a[1], wrong);
  if (!z) return wrong;
  auto it = z->score_of.find(a[2]);
  if (it == z->score_of.end()) return reply::make_nil();
  auto at = z->by_score.find({it->second, a[2]});
  return integer(std::distance(z->by_score.begin(), at));
}

reply node::cmd_zcard(args a) {
  reply wrong;
  auto* z = find_as<sorted_set>(a[1], wrong);
  if (!z) return wrong.is_error() ? wrong : integer(0);
  return integer(static_cast<std::int64_t>(z->score_of.size()));
}

// zunionInterGenericCommand, intersection with SUM: a member's score is the sum of weight x
// score over the inputs (NaN, as from 0 x inf, counts as 0). The destination is replaced by a
// new key without TTL, or deleted when the intersection is empty.
reply node::cmd_zinterstore(args a) {
  std::int64_t count = 0;
  if (!parse_integer(a[2], count)) return not_integer();
  if (count < 1) return error("ERR at least 1 input key is needed for 'zinterstore' command");
  if (count > static_cast<std::int64_t>(a.size()) - 3) return syntax_error();
  auto inputs = static_cast<std::size_t>(count);
  std::vector<double> weights(inputs, 1.0);
  for (std::size_t i = 3 + inputs; i < a.size(); ++i) {
    if (upper(a[i]) == "WEIGHTS" && i + inputs < a.size()) {
      for (std::size_t w = 0; w < inputs; ++w) {
        if (!parse_double(a[++i], weights[w])) {
          return error("ERR weight value is not a float");
        }
      }
    } else {
      return syntax_error();  // AGGREGATE: unused
    }
  }
  std::vector<const sorted_set*> sets;
  for (std::size_t i = 0; i < inputs; ++i) {
    reply wrong;
    sets.push_back(find_as<sorted_set>(a[3 + i], wrong));
    if (wrong.is_error()) return wrong;
  }
  sorted_set result;
  if (std::find(sets.begin(), sets.end(), nullptr) == sets.end()) {
    for (const auto& [member, first_score] : sets[0]->score_of) {
      double score = weights[0] * first_score;
      if (std::isnan(score)) score = 0;
      bool everywhere = true;
      for (std::size_t i = 1; i < inputs && everywhere; ++i) {
        auto it = sets[i]->score_of.find(member);
        everywhere = it != sets[i]->score_of.end();
        if (everywhere) score += weights[i] * it->second;
        if (std::isnan(score)) score = 0;
      }
      if (!everywhere) continue;
      result.score_of.emplace(member, score);
      result.by_score.emplace(score, member);
    }
  }
  auto size = static_cast<std::int64_t>(result.score_of.size());
  keys_.erase(a[1]);
  if (size > 0) keys_[a[1]] = entry{std::move(result), std::nullopt};
  return integer(size);
}

// --- pub/sub, server ---

reply node::cmd_publish(args a) {
  auto it = subscribers_.find(a[1]);
  if (it == subscribers_.end()) return integer(0);
  for (connection_id c : it->second) delivered_.push_back({c, a[1], a[2]});
  return integer(static_cast<std::int64_t>(it->second.size()));
}

void node::subscribe(connection_id c, std::string_view channel) {
  subscribers_[std::string(channel)].insert(c);
}

void node::unsubscribe(connection_id c, std::string_view channel) {
  auto it = subscribers_.find(std::string(channel));
  if (it == subscribers_.end()) return;
  it->second.erase(c);
  if (it->second.empty()) subscribers_.erase(it);
}

void node::disconnect(connection_id c) {
  for (auto it = subscribers_.begin(); it != subscribers_.end();) {
    it->second.erase(c);
    it = it->second.empty() ? subscribers_.erase(it) : std::next(it);
  }
}

std::vector<message> node::take_messages() { return std::exchange(delivered_, {}); }

reply node::cmd_time() {
  // Floor division: a clock before the epoch still gives 0 <= microseconds < 1e6.
  std::int64_t seconds = now_ms_ / 1000 - (now_ms_ % 1000 < 0 ? 1 : 0);
  std::int64_t micros = (now_ms_ - seconds * 1000) * 1000;
  return reply::make_array({bulk(std::to_string(seconds)), bulk(std::to_string(micros))});
}

reply node::cmd_keys(args a) {
  std::vector<reply> out;
  for (const auto& [key, e] : keys_) {
    if (!expired(e) && ::fnmatch(a[1].c_str(), key.c_str(), 0) == 0) out.push_back(bulk(key));
  }
  return reply::make_array(std::move(out));
}

void node::restart(bool persisted) {
  if (persisted) {
    std::erase_if(keys_, [this](const auto& k) { return expired(k.second); });
  } else {
    keys_.clear();
  }
  subscribers_.clear();
  lua_ = std::make_unique<lua_engine>(*this);
}

std::map<std::string, key_state> node::dump() const {
  std::map<std::string, key_state> out;
  for (const auto& [key, e] : keys_) {
    if (expired(e)) continue;
    key_state state;
    state.pttl = e.expires_at ? std::max<std::int64_t>(*e.expires_at - now_ms_, 0) : -1;
    std::vector<reply> items;
    if (const auto* s = std::get_if<std::string>(&e.value)) {
      state.type = "string";
      state.value = bulk(*s);
    } else if (const auto* h = std::get_if<hash>(&e.value)) {
      state.type = "hash";
      hash sorted = *h;
      std::sort(sorted.begin(), sorted.end());
      for (const auto& [field, value] : sorted) {
        items.push_back(bulk(field));
        items.push_back(bulk(value));
      }
      state.value = reply::make_array(std::move(items));
    } else {
      state.type = "zset";
      for (const auto& [score, member] : std::get<sorted_set>(e.value).by_score) {
        items.push_back(bulk(member));
        items.push_back(bulk(format_score(score)));
      }
      state.value = reply::make_array(std::move(items));
    }
    out.emplace(key, std::move(state));
  }
  return out;
}

// --- scripts ---

reply node::cmd_script(args a) {
  std::string sub = upper(a[1]);
  if (sub == "LOAD" && a.size() == 3) return lua_->load(a[2]);
  if (sub == "EXISTS" && a.size() >= 3) {
    std::vector<reply> found;
    for (std::size_t i = 2; i < a.size(); ++i) found.push_back(integer(lua_->has(a[i]) ? 1 : 0));
    return reply::make_array(std::move(found));
  }
  if (sub == "FLUSH" && a.size() <= 3) {
    lua_ = std::make_unique<lua_engine>(*this);  // Redis starts a fresh interpreter too
    return ok();
  }
  return error("ERR unknown subcommand or wrong number of arguments for '" + a[1] +
               "'. Try SCRIPT HELP.");
}

reply node::cmd_eval(args a, bool by_sha) {
  std::int64_t count = 0;
  if (!parse_integer(a[2], count)) return not_integer();
  if (count > static_cast<std::int64_t>(a.size()) - 3) {
    return error("ERR Number of keys can't be greater than number of args");
  }
  if (count < 0) return error("ERR Number of keys can't be negative");
  std::string sha;
  if (by_sha) {
    sha = lower(a[1]);
    if (!lua_->has(sha)) return error("NOSCRIPT No matching script. Please use EVAL.");
  } else {
    reply loaded = lua_->load(a[1]);
    if (loaded.is_error()) return loaded;
    sha = loaded.str();
  }
  auto keys = a.subspan(3, static_cast<std::size_t>(count));
  auto argv = a.subspan(3 + static_cast<std::size_t>(count));
  return lua_->run(sha, keys, argv);
}

}  // namespace dlock::sim
