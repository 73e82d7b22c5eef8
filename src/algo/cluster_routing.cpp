// SPDX-License-Identifier: Apache-2.0
#include "algo/cluster_routing.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "dlock/key_layout.hpp"

namespace dlock::detail {
namespace {

// A flat [name, value, name, value ...] array (CLUSTER SHARDS's maps in RESP2): the value of
// `name`, or null.
const reply* field(const reply& map, std::string_view name) {
  if (!map.is_array()) return nullptr;
  const auto& e = map.elements();
  for (std::size_t i = 0; i + 1 < e.size(); i += 2) {
    if (e[i].is_string() && e[i].str() == name) return &e[i + 1];
  }
  return nullptr;
}

std::optional<unsigned short> as_port(const reply* r) {
  if (!r) return std::nullopt;
  long long v = -1;
  if (r->is_integer()) {
    v = r->integer();
  } else if (r->is_string()) {
    auto s = std::string_view(r->str());
    if (std::from_chars(s.data(), s.data() + s.size(), v).ec != std::errc{}) return std::nullopt;
  }
  if (v <= 0 || v > 65535) return std::nullopt;
  return static_cast<unsigned short>(v);
}

bool valid_range(long long first, long long last) {
  return first >= 0 && last >= first && last < static_cast<long long>(cluster_slots);
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) ==
                  std::toupper(static_cast<unsigned char>(y));
         });
}

// Reads "<c><digits>\r\n" at `pos` (c = '*' or '$'), advancing past it.
std::optional<long long> read_header(std::string_view resp, std::size_t& pos, char c) {
  if (pos >= resp.size() || resp[pos] != c) return std::nullopt;
  auto end = resp.find("\r\n", pos);
  if (end == std::string_view::npos) return std::nullopt;
  long long v = 0;
  auto [p, ec] = std::from_chars(resp.data() + pos + 1, resp.data() + end, v);
  if (ec != std::errc{} || p != resp.data() + end) return std::nullopt;
  pos = end + 2;
  return v;
}

// One command's arguments; null when the bytes are not a RESP array of bulk strings.
std::optional<std::vector<std::string_view>> read_command(std::string_view resp,
                                                          std::size_t& pos) {
  auto count = read_header(resp, pos, '*');
  if (!count || *count < 0) return std::nullopt;
  std::vector<std::string_view> args;
  for (long long i = 0; i < *count; ++i) {
    auto len = read_header(resp, pos, '$');
    if (!len || *len < 0 || pos + static_cast<std::size_t>(*len) + 2 > resp.size()) {
      return std::nullopt;
    }
    args.push_back(resp.substr(pos, static_cast<std::size_t>(*len)));
    pos += static_cast<std::size_t>(*len) + 2;
  }
  return args;
}

// Commands that name no key: any master serves them.
constexpr std::string_view keyless[] = {
    "ACL",       "ASKING",    "AUTH",     "BGREWRITEAOF", "BGSAVE",   "CLIENT",   "CLUSTER",
    "COMMAND",   "CONFIG",    "DBSIZE",   "DEBUG",        "DISCARD",  "ECHO",     "EXEC",
    "FAILOVER",  "FLUSHALL",  "FLUSHDB",  "FUNCTION",     "HELLO",    "INFO",     "KEYS",
    "LASTSAVE",  "LATENCY",   "LOLWUT",   "MODULE",       "MONITOR",  "MULTI",    "PING",
    "PUBLISH",   "PUBSUB",    "QUIT",     "RANDOMKEY",    "READONLY", "READWRITE", "REPLICAOF",
    "RESET",     "ROLE",      "SAVE",     "SCAN",         "SCRIPT",   "SELECT",   "SENTINEL",
    "SHUTDOWN",  "SLAVEOF",   "SLOWLOG",  "SWAPDB",       "TIME",     "UNWATCH",  "WAIT",
    "WAITAOF"};

// Where the first key is, or null for none.
std::optional<std::string_view> first_key(const std::vector<std::string_view>& args) {
  if (args.empty()) return std::nullopt;
  std::string_view name = args[0];
  for (std::string_view verb : {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"}) {
    if (!iequals(name, verb)) continue;
    long long keys = 0;
    if (args.size() < 4 ||
        std::from_chars(args[2].data(), args[2].data() + args[2].size(), keys).ec != std::errc{} ||
        keys <= 0) {
      return std::nullopt;
    }
    return args[3];
  }
  for (std::string_view verb : keyless) {
    if (iequals(name, verb)) return std::nullopt;
  }
  auto arg = [&](std::size_t i) {
    return args.size() > i ? std::optional(args[i]) : std::nullopt;
  };
  // The key after a subcommand, an operation or a numkeys: OBJECT ENCODING key, MEMORY USAGE
  // key, BITOP op destkey, XGROUP CREATE key, XINFO STREAM key, ZINTER numkeys key ...
  for (std::string_view verb : {"OBJECT", "MEMORY", "BITOP", "XGROUP", "XINFO", "ZINTER", "ZUNION",
                                "ZDIFF", "SINTERCARD", "ZINTERCARD", "LMPOP", "ZMPOP"}) {
    if (iequals(name, verb)) return arg(2);
  }
  // BLMPOP timeout numkeys key ...
  if (iequals(name, "BLMPOP") || iequals(name, "BZMPOP")) return arg(3);
  // XREAD [COUNT n] [BLOCK ms] STREAMS key ... id ...
  if (iequals(name, "XREAD") || iequals(name, "XREADGROUP")) {
    for (std::size_t i = 1; i + 1 < args.size(); ++i) {
      if (iequals(args[i], "STREAMS")) return arg(i + 1);
    }
    return std::nullopt;
  }
  return arg(1);
}

bool starts_with(const reply& r, std::string_view prefix) {
  return r.is_error() && std::string_view(r.str()).substr(0, prefix.size()) == prefix;
}

}  // namespace

std::optional<slot_map> slot_map::from_shards(const reply& r, bool tls, std::string& why) {
  if (!r.is_array()) {
    why = "CLUSTER SHARDS did not answer an array";
    return std::nullopt;
  }
  slot_map map;
  for (const auto& shard : r.elements()) {
    const reply* slots = field(shard, "slots");
    const reply* nodes = field(shard, "nodes");
    if (!slots || !nodes || !slots->is_array() || !nodes->is_array()) {
      why = "CLUSTER SHARDS: a shard without slots or nodes";
      return std::nullopt;
    }
    std::optional<host_port> master;
    for (const auto& node : nodes->elements()) {
      const reply* role = field(node, "role");
      const reply* health = field(node, "health");
      // A failed master may still be listed as one (health "fail"; "failed" in some versions).
      bool failed = health && (health->str() == "fail" || health->str() == "failed");
      if (!role || role->str() != "master" || failed) continue;
      const reply* host = field(node, "endpoint");
      if (!host || !host->is_string() || host->str().empty() || host->str() == "?") {
        host = field(node, "ip");
      }
      auto port = as_port(field(node, tls ? "tls-port" : "port"));
      if (!host || !host->is_string() || host->str().empty() || !port) {
        why = std::string("CLUSTER SHARDS: a master without an address") +
              (tls ? " or tls-port (is TLS on for the cluster bus clients?)" : "");
        return std::nullopt;
      }
      master = host_port{host->str(), *port};
      break;
    }
    const auto& ranges = slots->elements();
    if (ranges.size() % 2 != 0) {
      why = "CLUSTER SHARDS: an odd slot list";
      return std::nullopt;
    }
    // No master: a shard whose master failed with no replica to promote; its slots stay
    // uncovered until one serves them.
    if (!master) continue;
    for (std::size_t i = 0; i < ranges.size(); i += 2) {
      if (!ranges[i].is_integer() || !ranges[i + 1].is_integer() ||
          !valid_range(ranges[i].integer(), ranges[i + 1].integer())) {
        why = "CLUSTER SHARDS: a slot range out of 0-16383";
        return std::nullopt;
      }
      for (auto s = ranges[i].integer(); s <= ranges[i + 1].integer(); ++s) {
        map.set_owner(static_cast<std::uint16_t>(s), *master);
      }
    }
  }
  return map;
}

std::optional<slot_map> slot_map::from_slots(const reply& r, std::string& why) {
  if (!r.is_array()) {
    why = "CLUSTER SLOTS did not answer an array";
    return std::nullopt;
  }
  slot_map map;
  for (const auto& range : r.elements()) {
    const auto& e = range.elements();
    if (!range.is_array() || e.size() < 3 || !e[0].is_integer() || !e[1].is_integer() ||
        !valid_range(e[0].integer(), e[1].integer()) || !e[2].is_array() ||
        e[2].elements().size() < 2 || !e[2].elements()[0].is_string()) {
      why = "CLUSTER SLOTS: a range that is not [start, end, [ip, port ...] ...]";
      return std::nullopt;
    }
    auto port = as_port(&e[2].elements()[1]);
    if (!port || e[2].elements()[0].str().empty()) {
      why = "CLUSTER SLOTS: a master without an address";
      return std::nullopt;
    }
    host_port master{e[2].elements()[0].str(), *port};
    for (auto s = e[0].integer(); s <= e[1].integer(); ++s) {
      map.set_owner(static_cast<std::uint16_t>(s), master);
    }
  }
  return map;
}

const host_port* slot_map::owner(std::uint16_t slot) const noexcept {
  if (slot >= cluster_slots || owner_[slot] == none) return nullptr;
  return &masters_[owner_[slot]];
}

std::size_t slot_map::index_of(const host_port& node) {
  auto it = std::find(masters_.begin(), masters_.end(), node);
  if (it != masters_.end()) return static_cast<std::size_t>(it - masters_.begin());
  masters_.push_back(node);
  return masters_.size() - 1;
}

void slot_map::set_owner(std::uint16_t slot, const host_port& node) {
  if (slot >= cluster_slots) return;
  owner_[slot] = static_cast<std::uint16_t>(index_of(node));
}

std::size_t slot_map::uncovered() const noexcept {
  return static_cast<std::size_t>(std::count(owner_.begin(), owner_.end(), none));
}

std::optional<redirect> parse_redirect(const reply& r, const host_port& from) {
  bool moved = starts_with(r, "MOVED ");
  if (!moved && !starts_with(r, "ASK ")) return std::nullopt;
  std::string_view text = std::string_view(r.str()).substr(moved ? 6 : 4);
  auto space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  unsigned slot = 0;
  auto slot_text = text.substr(0, space);
  auto [p, ec] = std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), slot);
  if (ec != std::errc{} || p != slot_text.data() + slot_text.size() || slot >= cluster_slots) {
    return std::nullopt;
  }
  std::string_view address = text.substr(space + 1);
  auto colon = address.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  unsigned port = 0;
  auto port_text = address.substr(colon + 1);
  auto [q, ec2] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec2 != std::errc{} || q != port_text.data() + port_text.size() || port == 0 ||
      port > 65535) {
    return std::nullopt;
  }
  redirect out;
  out.ask = !moved;
  out.slot = static_cast<std::uint16_t>(slot);
  out.to = host_port{host.empty() ? from.host : std::string(host),
                     static_cast<unsigned short>(port)};
  return out;
}

bool is_retry_later(const reply& r) noexcept {
  return starts_with(r, "TRYAGAIN") || starts_with(r, "CLUSTERDOWN") || starts_with(r, "LOADING");
}

std::optional<std::uint16_t> command_slot(std::string_view resp) {
  std::size_t pos = 0;
  while (pos < resp.size()) {
    auto args = read_command(resp, pos);
    if (!args) return std::nullopt;
    if (auto key = first_key(*args)) return hash_slot(*key);
  }
  return std::nullopt;
}

}  // namespace dlock::detail
