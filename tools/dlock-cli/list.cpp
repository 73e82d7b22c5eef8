// SPDX-License-Identifier: Apache-2.0
// dlock list [PATTERN] [--json]: every lock, read-write lock, semaphore, election and latch whose
// name matches PATTERN, with its holders, waiters and expiry, one line (or JSON object) each.
//
// It walks each node with SCAN (a cursor, COUNT 1000, MATCH built from PATTERN), every master of
// a Redis Cluster and every node of a Redlock set, never KEYS: each step is short, so a large
// database is never blocked. A name is listed only for what dlock itself leaves in Redis:
//   - a companion key (key_names.hpp undoes E(name) + suffix): :waiters, :waiter-info, :tickets,
//     :fence and :holder make a lock; :sem:* a semaphore, :fairsem:* a fair one; :rw:* a
//     read-write lock; :election an election (whose lock and candidates it shows); a copy key
//     ({T}dlock-copy:i/K:name) a cluster lock in K copies;
//   - the name's own key holding a mark (read_write_lock_mark, semaphore_mark) or a dlock owner
//     value ("<32 hex>.<round>"), which no other program writes by accident;
//   - a latch, which is only a count with a TTL: listed when someone waits on its channel, or
//     for every such key with --latches (another program's counter looks the same).
// Another client's lock (node-redlock, redsync, redis-py: a random token with a TTL) is listed
// when dlock keys sit beside it (a dlock waiter queues for it); alone it is a string with a TTL
// like a session or a cache entry, so it is not listed. User data never is.
// Each name found is then read as `dlock status` reads it (lock_view.hpp), so a line says no
// more than status would. Reads only: SCAN, GET, PTTL, ZRANGE, HGETALL, PUBSUB, never a script.
// Work is bounded: at most --max-keys keys are examined and --limit names listed; past either
// it says so and exits 1. A node that cannot be asked (down, refusing the user) is named on
// stderr and the exit is 69 (77 when every refusal is over credentials or ACL rights): a list
// that could not ask every node is never presented as the whole.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "dlock/election.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/shared_mutex.hpp"
#include "key_names.hpp"
#include "lock_view.hpp"

namespace dlock::cli {
namespace {

using std::chrono::milliseconds;

constexpr const char* scan_count = "1000";  // keys per SCAN step: short steps, few round trips
constexpr std::size_t read_batch = 256;     // name keys per pipeline of GET/PTTL
constexpr int cluster_slot_count = 16384;

struct list_options {
  std::string pattern = "*";
  bool json = false;
  bool held_only = false;
  bool latches = false;
  std::size_t limit = 1000;
  std::size_t max_keys = 100'000;
};

// What could not be asked or read: a node, a slot range, a name.
struct failure {
  std::string where;
  std::error_code ec;
  std::string message;
  bool of_name = false;  // a name's entry says it already ("held": null)
};

// A node that SCAN walks: one of the -r nodes, or a master of a cluster among them (`owner`).
struct scan_node {
  client node;
  std::size_t owner = 0;
  bool cluster_master = false;  // a latch's waiters are sharded subscribers there
  std::string cursor = "0";
  bool done = false;
  std::set<std::string> plain{};  // keys that may be a name's own key: GET in the second step
};

// What the keys of one name say, over every node.
struct found {
  bool queue = false, fence = false, note = false;  // a lock's companions
  int copies = 0;
  bool semaphore = false, fair_semaphore = false, read_write = false, election = false;
  std::optional<std::size_t> one_node;  // the scan node of its semaphore or read-write keys
  std::optional<std::size_t> key_node;  // the scan node whose copy of the name's key was read
  std::optional<std::string> value;     // the name's own key, when it holds a string
  long long pttl_ms = -2;
  std::optional<semaphore_mark_info> mark;
  long long subscribers = 0;  // on its latch channel

  bool companions() const {
    return queue || fence || note || copies > 0 || semaphore || fair_semaphore || read_write ||
           election;
  }
  bool rw_mark() const { return value && mark_part(*value) == read_write_lock_mark; }
  bool owner_value() const { return value && is_dlock_owner(*value); }
  // A value that is neither a mark nor dlock's: another client's token (or anything else).
  bool foreign_value() const { return value && !rw_mark() && !mark && !owner_value(); }
  std::optional<long long> count() const {
    return value && pttl_ms > 0 ? latch_count(*value) : std::nullopt;
  }
};


failure node_failure(std::string where, std::error_code ec, const reply& r) {
  return {std::move(where), ec, with_remedy(ec, r.is_error() ? r.str() : ec.message())};
}

// ---- finding the nodes ----

// A key of each cluster slot ("0", "1" ... the first decimal that hashes there).
const std::vector<std::string>& slot_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out(cluster_slot_count);
    int missing = cluster_slot_count;
    for (unsigned n = 0; missing > 0; ++n) {
      auto& key = out[hash_slot(std::to_string(n))];
      if (key.empty()) {
        key = std::to_string(n);
        --missing;
      }
    }
    return out;
  }();
  return keys;
}

// A client of the master at "host:port" (or "[v6]:port"), with the cluster's credentials and TLS,
// as the library connects to it.
client master_client(const client& cluster, const std::string& at) {
  endpoint e = cluster.where();
  e.cluster = false;
  e.seeds.clear();
  auto colon = at.rfind(':');
  e.host = at.substr(0, colon);
  if (e.host.size() >= 2 && e.host.front() == '[') e.host = e.host.substr(1, e.host.size() - 2);
  e.port = static_cast<unsigned short>(std::stoi(at.substr(colon + 1)));
  return client{e, cluster.options()};
}

// Every master that serves a slot, by the library's own slot map (as doctor sees them): the client
// is asked for each slot's master. Slots that no master serves are a failure: names kept there
// cannot be listed.
std::vector<std::string> cluster_masters(const client& cluster, std::vector<failure>& failures) {
  std::vector<std::string> masters;
  std::size_t uncovered = 0;
  for (const auto& key : slot_keys()) {
    std::error_code ec;
    std::string at = cluster.node_for(key, ec);
    if (ec == errc::cluster_error) {
      ++uncovered;
      continue;
    }
    if (ec) {  // no map at all: every slot would wait for it again
      failures.push_back({cluster.where().to_string(), ec,
                          with_remedy(ec, "cannot read the cluster's slot map: " + ec.message())});
      return {};
    }
    if (std::find(masters.begin(), masters.end(), at) == masters.end()) masters.push_back(at);
  }
  if (uncovered > 0) {
    failures.push_back({cluster.where().to_string(), errc::cluster_error,
                        std::to_string(uncovered) + " of " + std::to_string(cluster_slot_count) +
                            " slots have no master: names kept there cannot be listed"});
  }
  return masters;
}

std::vector<scan_node> scan_targets(std::vector<client>& nodes, std::vector<failure>& failures) {
  std::vector<scan_node> out;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].where().is_cluster()) {
      out.push_back({nodes[i], i});
      continue;
    }
    for (const auto& at : cluster_masters(nodes[i], failures)) {
      out.push_back({master_client(nodes[i], at), i, true});
    }
  }
  return out;
}

std::string label(const scan_node& n) { return n.node.where().to_string(); }

// ---- step 1: SCAN ----

// Files one key under the name it belongs to, if that name matches.
void file_key(const std::string& key, std::size_t at, const std::string& pattern,
              std::map<std::string, found>& names, scan_node& node) {
  if (is_node_key(key)) return;
  if (auto copy = decode_copy_key(key)) {
    if (glob_match(pattern, copy->name)) names[copy->name].copies = copy->copies;
    return;
  }
  auto c = decode_companion(key);
  if (!c) {
    if (glob_match(pattern, key)) node.plain.insert(key);
    return;
  }
  std::string name = c->name;
  int copies = 0;
  if (auto copy = decode_copy_key(name)) {  // a companion of one of a lock's copies
    name = copy->name;
    copies = copy->copies;
  }
  if (c->role == key_role::data_fence || c->role == key_role::latch_channel) return;
  if (!glob_match(pattern, name)) return;
  found& f = names[name];
  f.copies = std::max(f.copies, copies);
  switch (c->role) {
    case key_role::lock:
      f.queue = true;
      break;
    case key_role::fence:
      f.fence = true;
      break;
    case key_role::holder_note:
      f.note = true;
      break;
    case key_role::semaphore:
      f.semaphore = true;
      break;
    case key_role::fair_semaphore:
      f.fair_semaphore = true;
      break;
    case key_role::read_write_lock:
      f.read_write = true;
      break;
    case key_role::election:
      f.election = true;
      break;
    default:
      break;
  }
  const bool one_node_kind = c->role == key_role::semaphore ||
                             c->role == key_role::fair_semaphore ||
                             c->role == key_role::read_write_lock;
  if (one_node_kind && !f.one_node) f.one_node = at;
}

// Walks every node with SCAN, all at once, a step each per round trip. Returns whether it stopped
// at max_keys.
bool scan_all(std::vector<scan_node>& targets, const list_options& o,
              std::map<std::string, found>& names, std::vector<failure>& failures) {
  const std::string match = scan_match(o.pattern);
  std::size_t examined = 0;
  for (;;) {
    std::vector<std::size_t> active;
    std::vector<client> clients;
    std::vector<command> cmds;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (targets[i].done) continue;
      active.push_back(i);
      clients.push_back(targets[i].node);
      cmds.push_back(command{"SCAN", targets[i].cursor, "MATCH", match, "COUNT", scan_count});
    }
    if (active.empty()) return false;
    auto replies = exec_each(clients, cmds);
    for (std::size_t k = 0; k < active.size(); ++k) {
      scan_node& n = targets[active[k]];
      const auto& r = replies[k];
      const auto& e = r.value.elements();
      if (r.ec || !r.value.is_array() || e.size() != 2 || !e[1].is_array()) {
        failures.push_back(node_failure(label(n), r.ec ? r.ec : errc::protocol_error, r.value));
        n.done = true;
        continue;
      }
      n.cursor = e[0].str();
      n.done = n.cursor == "0";
      for (const auto& key : e[1].elements()) file_key(key.str(), active[k], o.pattern, names, n);
      examined += e[1].elements().size();
    }
    const bool more =
        std::any_of(targets.begin(), targets.end(), [](const scan_node& n) { return !n.done; });
    if (!more) return false;
    if (examined >= o.max_keys) return true;
  }
}

// ---- step 2: the names' own keys ----

// GET and PTTL of each key that may be a name's own, in batches; a key holding a mark, a dlock
// owner value or (a latch) a count joins the names, others only when dlock keys sit beside it.
void read_name_keys(std::vector<scan_node>& targets, std::map<std::string, found>& names,
                    std::vector<failure>& failures) {
  for (std::size_t at = 0; at < targets.size(); ++at) {
    scan_node& n = targets[at];
    std::vector<std::string> keys(n.plain.begin(), n.plain.end());
    for (std::size_t from = 0; from < keys.size(); from += read_batch) {
      const std::size_t to = std::min(keys.size(), from + read_batch);
      command cmd{"GET", keys[from]};
      cmd.then({"PTTL", keys[from]});
      for (std::size_t i = from + 1; i < to; ++i) {
        cmd.then({"GET", keys[i]}).then({"PTTL", keys[i]});
      }
      std::error_code ec;
      reply r = n.node.exec(cmd, ec);
      if (ec || !r.is_array() || r.elements().size() != 2 * (to - from)) {
        failures.push_back(node_failure(label(n), ec ? ec : errc::protocol_error, r));
        break;
      }
      for (std::size_t i = from; i < to; ++i) {
        const reply& value = r.elements()[2 * (i - from)];
        const reply& pttl = r.elements()[2 * (i - from) + 1];
        if (!value.is_string() || !pttl.is_integer()) continue;  // not a string: no name of ours
        found probe;
        probe.value = value.str();
        probe.pttl_ms = pttl.integer();
        probe.mark = parse_semaphore_mark(value.str());
        auto it = names.find(keys[i]);
        const bool ours = probe.rw_mark() || probe.mark || probe.owner_value() || probe.count();
        if (it == names.end() && !ours) continue;  // user data, or another program's lock alone
        found& f = names[keys[i]];
        if (f.value && !ours) continue;  // a Redlock node's dlock value wins over another's
        f.value = probe.value;
        f.pttl_ms = probe.pttl_ms;
        f.mark = probe.mark;
        f.key_node = at;
        if ((probe.mark || probe.rw_mark()) && !f.one_node) f.one_node = at;
      }
    }
  }
}

// How many wait on each latch (subscribers of its channel, sharded on a cluster): a latch that
// someone waits on is one for sure.
void count_latch_waiters(std::vector<scan_node>& targets, std::map<std::string, found>& names,
                         std::vector<failure>& failures) {
  for (std::size_t at = 0; at < targets.size(); ++at) {
    std::vector<std::string> latches;
    for (auto& [name, f] : names) {
      if (f.key_node == at && f.count() && !f.companions()) latches.push_back(name);
    }
    if (latches.empty()) continue;
    scan_node& n = targets[at];
    const char* verb = n.cluster_master ? "SHARDNUMSUB" : "NUMSUB";
    std::vector<std::string> args{"PUBSUB", verb};
    for (const auto& name : latches) args.push_back(latch_channel(name));
    std::error_code ec;
    reply r = n.node.exec(command{std::span<const std::string>(args)}, ec);
    if (ec || !r.is_array() || r.elements().size() != 2 * latches.size()) {
      failures.push_back(node_failure(label(n), ec ? ec : errc::protocol_error, r));
      continue;
    }
    for (std::size_t i = 0; i < latches.size(); ++i) {
      names[latches[i]].subscribers = r.elements()[2 * i + 1].integer();
    }
  }
}

// ---- step 3: one entry per name and kind ----

struct entry {
  std::string name;
  std::string kind;       // "lock", "read-write lock", "semaphore", "fair semaphore" ...
  std::string json_kind;  // "lock", "read_write_lock", "semaphore", "election", "latch"
  bool active = false;    // held, or waited for (--held)
  std::string text{};     // the line after the name and kind
  std::string json{};     // the object's fields after "name" and "kind"
};

std::string seconds_of_ms(long long ms) { return seconds_text(milliseconds(ms)); }

std::string count_text(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string expiry_text(long long pttl_ms) {
  if (pttl_ms == -1) return "never expires";
  return "expires in " + seconds_of_ms(pttl_ms);
}

std::string json_expiry(bool known, long long pttl_ms) {
  // -1: a key without a TTL.
  return ",\"expires_in_ms\":" + (known ? std::to_string(pttl_ms) : std::string("null"));
}

std::string unknown(const std::string& why) { return "unknown: " + why; }

// The error of the first node that did not answer: a lock is unknown only when one did not.
std::error_code first_error(const lock_view& v) {
  for (const auto& n : v.nodes) {
    if (n.ec) return n.ec;
  }
  return errc::node_unreachable;
}

std::string holder_json(const holder_info& h) {
  return "{\"host\":" + json_string(h.host) + ",\"pid\":" + std::to_string(h.pid) +
         ",\"since_unix_ms\":" + std::to_string(h.since_unix_ms) +
         ",\"command\":" + json_string(h.command) + "}";
}

// Reads a lock (or an election's lock) across `nodes`, as status does.
entry lock_entry(std::vector<client>& nodes, const std::string& name, const found& f,
                 std::vector<failure>& failures) {
  entry out{name, f.copies > 1 ? "lock (" + std::to_string(f.copies) + " copies)" : "lock", "lock"};
  auto v = inspect_lock(nodes, name, read_queue::yes, f.copies > 1 ? f.copies : 0);
  if (!v.known()) {
    failures.push_back({name, first_error(v), v.failures(), true});
    out.text = unknown(v.failures());
    out.json = ",\"held\":null,\"error\":" + json_string(v.failures());
    out.active = true;
    return out;
  }
  const bool held = v.held();
  out.active = held || !v.waiters.empty();
  if (held) {
    out.text = "held by ";
    if (v.holder) {
      out.text += describe(*v.holder);
    } else if (mark_part(*v.token) == read_write_lock_mark) {
      out.text += "the read-write lock's holders";
    } else if (parse_semaphore_mark(*v.token)) {
      out.text += "the semaphore's holders";
    } else {
      out.text += (is_dlock_owner(*v.token) ? "owner " : "another client's token ") + *v.token;
    }
    out.text += ", " + expiry_text(v.pttl_ms);
  } else {
    out.text = "free";
  }
  out.text += ", " + count_text(v.waiters.size(), "waiter", "waiters");
  if (v.nodes.size() > 1) {
    out.text +=
        ", on " + std::to_string(v.holding) + " of " + std::to_string(v.nodes.size()) + " nodes";
  }
  out.json = std::string(",\"held\":") + (held ? "true" : "false") +
             ",\"token\":" + (held ? json_string(*v.token) : "null") +
             ",\"holder\":" + (held && v.holder ? holder_json(*v.holder) : "null") +
             json_expiry(held, v.pttl_ms) + ",\"waiters\":" + std::to_string(v.waiters.size()) +
             ",\"fence\":" + std::to_string(v.fence) +
             ",\"copies\":" + std::to_string(std::max(f.copies, 1)) +
             ",\"nodes\":" + std::to_string(v.nodes.size()) +
             ",\"holding\":" + std::to_string(v.holding);
  return out;
}

std::string holders_json(const semaphore_view& v) {
  std::string out = ",\"holders\":[";
  for (std::size_t i = 0; i < v.holders.size(); ++i) {
    const auto& h = v.holders[i];
    out += std::string(i ? "," : "") + "{\"token\":" + json_string(h.token) +
           ",\"permits\":" + std::to_string(h.permits) +
           ",\"expires_in_ms\":" + std::to_string(h.expires_in_ms) + "}";
  }
  return out + "]";
}

// A semaphore or a read-write lock (a fair semaphore's set under :rw:) on its one node.
entry permit_entry(client& node, const std::string& name, const found& f, bool rw, bool fair,
                   std::vector<failure>& failures) {
  const char* kind = rw ? "read-write lock" : fair ? "fair semaphore" : "semaphore";
  entry out{name, kind, rw ? "read_write_lock" : "semaphore"};
  auto v = rw ? inspect_semaphore(node, name, shared_mutex_keys_for(name), true, read_queue::yes)
              : inspect_semaphore(node, name, fair, read_queue::yes);
  if (!v.answered()) {
    failures.push_back({name + " (" + v.node + ")", v.ec, v.message, true});
    out.text = unknown(v.node + ": " + v.message);
    out.json = ",\"held\":null,\"error\":" + json_string(v.node + ": " + v.message);
    out.active = true;
    return out;
  }
  const bool held = !v.holders.empty();
  out.active = held || !v.waiters.empty();
  // holders come earliest expiry first
  const long long first_expiry = held ? v.holders.front().expires_in_ms : 0;
  const auto waiters = count_text(v.waiters.size(), "waiter", "waiters");
  if (rw) {
    const bool writer = held && v.holders.front().permits >= shared_mutex::max_readers;
    out.text = !held    ? "free"
               : writer ? "held by a writer"
                        : "held by " + count_text(v.holders.size(), "reader", "readers");
    if (held) {
      out.text += ", " + std::string(writer ? "" : "the first ") + expiry_text(first_expiry);
    }
    out.text += ", " + waiters;
    out.json = std::string(",\"held\":") + (held ? "true" : "false") + ",\"mode\":" +
               (!held ? "null" : writer ? "\"write\"" : "\"read\"");
  } else {
    // The limit is stored only in the holders' mark (semaphore_mark), when there is one.
    const bool limit_known = f.mark && f.mark->fair == fair;
    out.text = std::to_string(v.in_use) +
               (limit_known ? " of " + std::to_string(f.mark->limit) : "") +
               (v.in_use == 1 && !limit_known ? " permit" : " permits") + " held by " +
               count_text(v.holders.size(), "holder", "holders");
    if (held) out.text += ", the first " + expiry_text(first_expiry);
    out.text += ", " + waiters;
    out.json = std::string(",\"held\":") + (held ? "true" : "false") +
               ",\"fair\":" + (fair ? "true" : "false") +
               ",\"limit\":" + (limit_known ? std::to_string(f.mark->limit) : "null") +
               ",\"in_use\":" + std::to_string(v.in_use);
  }
  out.json += holders_json(v) + json_expiry(held, first_expiry) +
              ",\"waiters\":" + std::to_string(v.waiters.size()) +
              ",\"fence\":" + std::to_string(v.fence) + ",\"node\":" + json_string(v.node);
  return out;
}

// An election: its leader (the record and the lock, election::leader) and its candidates (the
// lock's waiters).
entry election_entry(std::vector<client>& nodes, const std::string& name,
                     std::vector<failure>& failures) {
  entry out{name, "election", "election"};
  auto v = inspect_lock(nodes, name, read_queue::yes);
  std::error_code ec;
  leader_info leader;
  if (v.known()) {
    try {
      leader = election{nodes, name, ""}.leader(ec);
    } catch (const std::system_error& e) {
      ec = e.code();
    }
  }
  if (!v.known() || ec) {
    std::string why = ec ? with_remedy(ec, ec.message()) : v.failures();
    failures.push_back({name, ec ? ec : first_error(v), why, true});
    out.text = unknown(why);
    out.json = ",\"held\":null,\"error\":" + json_string(why);
    out.active = true;
    return out;
  }
  const bool held = v.held() && leader;
  out.active = held || !v.waiters.empty();
  out.text = held ? "led by term " + std::to_string(leader.term) + " (" + leader.value + "), " +
                        expiry_text(v.pttl_ms)
                  : "no leader";
  out.text += ", " + count_text(v.waiters.size(), "candidate waiting", "candidates waiting");
  out.json = std::string(",\"held\":") + (held ? "true" : "false") +
             ",\"term\":" + (held ? std::to_string(leader.term) : "null") +
             ",\"value\":" + (held ? json_string(leader.value) : "null") +
             ",\"owner\":" + (held ? json_string(leader.owner) : "null") +
             json_expiry(held, v.pttl_ms) + ",\"waiters\":" + std::to_string(v.waiters.size());
  return out;
}

entry latch_entry(const std::string& name, const found& f) {
  entry out{name, "latch", "latch"};
  const long long count = *f.count();
  out.active = count > 0 || f.subscribers > 0;
  out.text = (count == 0 ? std::string("open") : "count " + std::to_string(count)) + ", " +
             expiry_text(f.pttl_ms) + ", " +
             count_text(static_cast<std::size_t>(f.subscribers), "waiter", "waiters");
  // Nothing but a waiter tells a latch from another program's counter with a TTL.
  if (f.subscribers == 0) out.text += " (a count with a TTL: could be any counter)";
  out.json = std::string(",\"held\":null,\"count\":") + std::to_string(count) +
             ",\"open\":" + (count == 0 ? "true" : "false") + json_expiry(true, f.pttl_ms) +
             ",\"waiters\":" + std::to_string(f.subscribers) +
             ",\"identified_by\":" + (f.subscribers > 0 ? "\"waiters\"" : "\"count\"");
  return out;
}

// The entries of one name: one per kind found under it (usually one).
std::vector<entry> entries_of(const std::string& name, const found& f, std::vector<client>& nodes,
                              std::vector<scan_node>& targets, const list_options& o,
                              std::vector<failure>& failures) {
  std::vector<entry> out;
  const bool rw = f.read_write || f.rw_mark();
  const bool unfair = f.semaphore || (f.mark && !f.mark->fair);
  const bool fair = f.fair_semaphore || (f.mark && f.mark->fair);
  const bool one_node_kind = rw || unfair || fair;
  // The lock's own companions, or a value in the name's key that is neither a mark (the read-write
  // lock's or semaphore's, listed as such) nor nothing: a lock, dlock's or another client's, that
  // dlock keys sit beside. An election's lock is the election.
  const bool is_lock = !f.election && (f.queue || f.copies > 0 || f.owner_value() ||
                                       (f.foreign_value() && f.companions()) ||
                                       ((f.fence || f.note) && !one_node_kind));
  if (f.election) out.push_back(election_entry(nodes, name, failures));
  if (is_lock) out.push_back(lock_entry(nodes, name, f, failures));
  if (one_node_kind) {
    // A read-write lock or a semaphore lives on one node: the one it was found on (through the
    // cluster client for a cluster master, which follows a slot that moved meanwhile).
    const scan_node& at = targets[f.one_node.value_or(f.key_node.value_or(0))];
    client node = nodes[at.owner].where().is_cluster() ? nodes[at.owner] : at.node;
    if (rw) out.push_back(permit_entry(node, name, f, true, true, failures));
    if (unfair) out.push_back(permit_entry(node, name, f, false, false, failures));
    if (fair) out.push_back(permit_entry(node, name, f, false, true, failures));
  }
  if (!f.companions() && f.count() && (f.subscribers > 0 || o.latches)) {
    out.push_back(latch_entry(name, f));
  }
  return out;
}

// ---- output ----

void print_text(const std::vector<entry>& entries) {
  std::size_t width = 0;
  for (const auto& e : entries) width = std::max(width, e.name.size());
  width = std::min<std::size_t>(width, 40);
  std::string out;
  for (const auto& e : entries) {
    std::string name = e.name;
    if (name.size() < width) name.resize(width, ' ');
    std::string kind = e.kind;
    if (kind.size() < 15) kind.resize(15, ' ');
    out += name + "  " + kind + "  " + e.text + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

// The entries, then an object of kind "error" for each node that could not be asked (the list
// lacks what it keeps) and one of kind "truncated" when a bound cut the list: a reader that
// ignores the exit status still cannot take a part for the whole.
void print_json(const std::vector<entry>& entries, const std::vector<failure>& failures,
                const std::string& bound) {
  std::vector<std::string> objects;
  for (const auto& e : entries) {
    objects.push_back("{\"name\":" + json_string(e.name) + ",\"kind\":" + json_string(e.json_kind) +
                      e.json + "}");
  }
  for (const auto& f : failures) {
    if (f.of_name) continue;
    objects.push_back("{\"kind\":\"error\",\"node\":" + json_string(f.where) +
                      ",\"error\":" + json_string(f.message) + "}");
  }
  if (!bound.empty()) {
    objects.push_back("{\"kind\":\"truncated\",\"note\":" + json_string(bound) + "}");
  }
  std::string out = "[";
  for (std::size_t i = 0; i < objects.size(); ++i) out += (i ? ",\n " : "") + objects[i];
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

int list_command(const global_options& g, const list_options& o) {
  if (o.limit == 0 || o.max_keys == 0) {
    throw usage_error("--limit and --max-keys must be at least 1");
  }
  auto nodes = make_clients(g);
  std::vector<failure> failures;
  auto targets = scan_targets(nodes, failures);
  std::map<std::string, found> names;
  const bool stopped_at_keys = scan_all(targets, o, names, failures);
  read_name_keys(targets, names, failures);
  count_latch_waiters(targets, names, failures);

  std::vector<entry> entries;
  std::size_t listed_names = 0, more_names = 0;
  for (const auto& [name, f] : names) {
    if (listed_names >= o.limit) {
      ++more_names;  // counted, not read
      continue;
    }
    auto of_name = entries_of(name, f, nodes, targets, o, failures);
    std::erase_if(of_name, [&](const entry& e) { return o.held_only && !e.active; });
    if (of_name.empty()) continue;
    ++listed_names;
    for (auto& e : of_name) entries.push_back(std::move(e));
  }
  std::string bound;
  if (more_names > 0) {
    bound = "... and up to " + std::to_string(more_names) +
            " more names: narrow the PATTERN or raise --limit";
  } else if (stopped_at_keys) {
    bound = "... stopped after examining " + std::to_string(o.max_keys) +
            " keys, so more names may match: narrow the PATTERN or raise --max-keys";
  }
  if (o.json) {
    print_json(entries, failures, bound);
  } else {
    print_text(entries);
  }
  if (!o.json && !bound.empty()) std::printf("%s\n", bound.c_str());
  if (!o.json && entries.empty() && failures.empty() && bound.empty()) {
    std::printf("no lock, read-write lock, semaphore, election or latch matches '%s'\n",
                o.pattern.c_str());
  }
  std::fflush(stdout);
  if (o.json && !bound.empty()) say("%s", bound.c_str());
  if (!failures.empty()) {
    for (const auto& f : failures) say("%s: %s", f.where.c_str(), f.message.c_str());
    say("the list is incomplete: %zu %s could not be read", failures.size(),
        failures.size() == 1 ? "node or name" : "nodes or names");
    const bool refused = std::all_of(failures.begin(), failures.end(),
                                     [](const failure& f) { return is_refusal(f.ec); });
    return refused ? exit_no_permission : exit_unavailable;
  }
  return bound.empty() ? exit_ok : 1;
}

constexpr const char* list_rules =
    R"(What is listed: only what dlock leaves in Redis. Its companion keys
({NAME}:waiters, {NAME}:sem:holders ...), a mark in the name's key (a
read-write lock's or a semaphore's) or a dlock owner value make a lock,
read-write lock, semaphore or election. A latch is a count with a TTL and
nothing else: listed when someone waits on it, or with --latches (another
program's counter then shows too). Another client's lock (redsync,
node-redlock, redis-py) is a random token with a TTL, like a session:
listed only when dlock keys sit beside it (a dlock waiter queues for it);
`dlock status NAME` reads it. Other keys are never listed.
Each node is walked with SCAN (COUNT 1000; every master of a cluster,
every node of a Redlock set), never KEYS, so a large database is not
blocked; each name found is then read as status reads it. A semaphore's
limit shows when its holders' mark names it.
Exit: 0 listed; 1 stopped at --limit or --max-keys (the list says so);
69 a node could not be asked or a name read (named on stderr: the list
is incomplete); 77 the same, all over credentials or ACL rights.)";

}  // namespace

subcommand add_list_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<list_options>();
  auto* app = parent.add_subcommand(
      "list", "List the locks, read-write locks, semaphores, elections and latches whose name "
              "matches PATTERN, with holders, waiters and expiry (SCAN; reads only)");
  app->add_flag("--json", o->json,
                "One JSON array on stdout: an object per name and kind, and one of kind "
                "\"error\" per node that could not be asked or \"truncated\" at a bound");
  app->add_flag("--held", o->held_only, "Only what is held or waited for now");
  app->add_flag("--latches", o->latches,
                "Also list keys that hold a count with a TTL which nobody waits on (a latch "
                "leaves no other mark)");
  app->add_option("--limit", o->limit, "List at most N names (default 1000)")->type_name("N");
  app->add_option("--max-keys", o->max_keys,
                  "Examine at most N keys over all nodes (default 100000)")
      ->type_name("N");
  app->add_option("PATTERN", o->pattern,
                  "Which names: a glob as Redis matches keys (*, ?, [a-z], \\x); default *");
  app->footer(list_rules);
  return {app, [&g, o] { return list_command(g, *o); }};
}

}  // namespace dlock::cli
