// SPDX-License-Identifier: Apache-2.0
// tests/support/redis_cluster.hpp: a Redis Cluster of real redis-server processes on loopback
// (local_redis), for the tests of redis-cluster:// URLs: masters, their replicas, slot
// migration in steps and failover. Checked over plain sockets, independent of dlock. Not
// thread-safe.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "support/checks.hpp"
#include "support/loopback.hpp"
#include "support/redis_server.hpp"

namespace dlock::test {

constexpr int cluster_slots = 16384;

// CRC16/XMODEM (poly 0x1021, init 0), the checksum Redis Cluster hashes keys with.
inline std::uint16_t cluster_crc16(std::string_view data) {
  std::uint16_t crc = 0;
  for (unsigned char c : data) {
    crc = static_cast<std::uint16_t>(crc ^ (c << 8));
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<std::uint16_t>(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
  }
  return crc;
}

// The slot of a key: only its hash tag counts, the text between the first '{' and the next
// '}', when that is not empty.
inline std::uint16_t cluster_slot(std::string_view key) {
  auto open = key.find('{');
  if (open != std::string_view::npos) {
    auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<std::uint16_t>(cluster_crc16(key) % cluster_slots);
}

// A key in `slot`: prefix + "{N}" with the smallest N whose digits hash there. Keys with other
// prefixes and the same slot share the tag, so they may go in one multi-key command. The
// prefix must not hold a '{' of its own (that would be the hash tag).
inline std::string key_in_slot(std::uint16_t slot, std::string_view prefix = "k") {
  // Every slot's smallest tag, found once: about 10^5 checksums cover all 16384 slots.
  static const std::vector<std::uint32_t> tags = [] {
    std::vector<std::uint32_t> first(cluster_slots, UINT32_MAX);
    int missing = cluster_slots;
    for (std::uint32_t n = 0; missing > 0; ++n) {
      auto& tag = first[cluster_crc16(std::to_string(n)) % cluster_slots];
      if (tag == UINT32_MAX) {
        tag = n;
        --missing;
      }
    }
    return first;
  }();
  if (slot >= cluster_slots) {
    throw std::invalid_argument("key_in_slot: no slot " + std::to_string(slot));
  }
  std::string key = std::string(prefix) + "{" + std::to_string(tags[slot]) + "}";
  if (cluster_slot(key) != slot) {
    throw std::invalid_argument("key_in_slot: the prefix has a hash tag of its own: " + key);
  }
  return key;
}

// An argument for an inline command, quoted so that spaces, quotes and any byte survive
// (Redis splits inline commands like sdssplitargs: "..." with \" \\ and \xHH).
inline std::string inline_arg(std::string_view arg) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : arg) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Where the RESP2 reply that starts at `at` ends; npos while it is incomplete.
inline std::size_t resp_end(const std::string& r, std::size_t at) {
  if (at >= r.size()) return std::string::npos;
  auto eol = r.find("\r\n", at);
  if (eol == std::string::npos) return std::string::npos;
  if (r[at] != '$' && r[at] != '*') return eol + 2;  // + - : are one line
  long long n = std::strtoll(r.c_str() + at + 1, nullptr, 10);
  if (n < 0) return eol + 2;  // null
  if (r[at] == '$') {
    auto end = eol + 2 + static_cast<std::size_t>(n) + 2;
    return end <= r.size() ? end : std::string::npos;
  }
  auto next = eol + 2;
  for (long long i = 0; i < n && next != std::string::npos; ++i) next = resp_end(r, next);
  return next;
}

// raw_command, but it reads until the reply is complete rather than until the server is quiet
// for 50 ms: whole CLUSTER NODES and GETKEYSINSLOT replies however big, and no 50 ms a call
// (the waits below poll every node many times). Empty if the node does not answer in time
// (killed, or paused: the kernel still accepts the connection).
inline std::string raw_command_complete(
    unsigned short port, const std::string& inline_command,
    std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return {};
  sockaddr_in addr = loopback_address(port);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    std::string line = inline_command + "\r\n";
    std::size_t sent = 0;
    while (sent < line.size()) {
      auto n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    auto until = std::chrono::steady_clock::now() + timeout;
    char buf[16384];
    pollfd p{fd, POLLIN, 0};
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      auto n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
      if (resp_end(out, 0) != std::string::npos) break;
    }
  }
  ::close(fd);
  return resp_end(out, 0) == std::string::npos ? std::string{} : out;
}

struct redis_cluster_options {
  int masters = 3;
  int replicas_per_master = 0;
  std::chrono::milliseconds node_timeout{1000};  // cluster-node-timeout
  bool require_full_coverage = true;             // cluster-require-full-coverage
  // false: no slot is assigned at all (a test assigns them with add_slots). true: the slots
  // are split evenly between the masters in contiguous ranges, except those in `uncovered`.
  bool assign_all_slots = true;
  std::vector<std::uint16_t> uncovered{};  // slots no master serves (with assign_all_slots)
  std::vector<std::string> extra{};      // more redis-server arguments for every node
  // When not empty: every node also listens for TLS on a port of its own (tls_port(i)), with
  // these --tls-* arguments, and the cluster bus and replication run over TLS. The plain port
  // stays, for the harness (which speaks no TLS).
  std::vector<std::string> tls{};
};

class redis_cluster {
 public:
  // Starts the nodes, gives each master its slots, joins them (CLUSTER MEET), makes the
  // replicas replicate their masters, then waits until the cluster is ok (wait_ok), or, when
  // slots are left out and that makes it fail, until the nodes at least agree.
  explicit redis_cluster(redis_cluster_options o = {}) : options_(std::move(o)) {
    if (options_.masters < 1 || options_.masters > cluster_slots ||
        options_.replicas_per_master < 0) {
      throw std::invalid_argument("redis_cluster: bad masters/replicas_per_master");
    }
    int count = options_.masters * (1 + options_.replicas_per_master);
    for (int i = 0; i < count; ++i) start_node();
    for (int i = 0; i < count; ++i) {
      ids_.push_back(bulk(command(i, "CLUSTER MYID")));
      if (ids_.back().empty()) {
        throw std::runtime_error("redis_cluster: no CLUSTER MYID from node " + std::to_string(i));
      }
      // Distinct epochs before the nodes meet, as redis-cli --cluster create does: no epoch
      // collisions to resolve before the slot map settles.
      expect_ok(i, "CLUSTER SET-CONFIG-EPOCH " + std::to_string(i + 1));
    }
    if (options_.assign_all_slots) {
      // Rounded as redis-cli does it: 0-5460, 5461-10922, 10923-16383 for three.
      double share = static_cast<double>(cluster_slots) / options_.masters;
      for (int m = 0, first = 0; m < options_.masters; ++m) {
        int last = m + 1 == options_.masters ? cluster_slots - 1
                                             : static_cast<int>(std::lround((m + 1) * share - 1));
        assign(m, first, last);
        first = last + 1;
      }
    }
    for (int i = 1; i < count; ++i) {
      // MEET ip port cluster-bus-port: the bus is not at port + 10000 here.
      expect_ok(i, "CLUSTER MEET 127.0.0.1 " + std::to_string(node(0).port()) + " " +
                       std::to_string(bus_ports_[0]));
    }
    wait_for("the nodes to know each other", std::chrono::seconds(10), [&] {
      for (int i = 0; i < count; ++i) {
        auto known = parse_nodes(cluster_nodes(i));
        for (int j = 0; j < count; ++j) {
          auto at = std::find_if(known.begin(), known.end(),
                                 [&](const node_line& n) { return n.id == ids_[j]; });
          if (at == known.end() || has_flag(*at, "handshake") || has_flag(*at, "noaddr")) {
            return "node " + std::to_string(i) + " does not know node " + std::to_string(j);
          }
        }
      }
      return std::string{};
    });
    for (int m = 0; m < options_.masters; ++m) {
      for (int r = 0; r < options_.replicas_per_master; ++r) {
        expect_ok(replica_index(m, r), "CLUSTER REPLICATE " + ids_[static_cast<std::size_t>(m)]);
      }
    }
    // Left-out slots fail a cluster that needs full coverage; no slots at all fail any cluster.
    bool can_be_ok = options_.assign_all_slots &&
                     (options_.uncovered.empty() || !options_.require_full_coverage);
    wait_for(can_be_ok ? "cluster_state:ok" : "the nodes to agree", std::chrono::seconds(20),
             [&] { return not_settled(can_be_ok); });
  }

  // Replicas stop first, so no master waits on SIGTERM for a replica to catch up.
  ~redis_cluster() {
    while (!nodes_.empty()) nodes_.pop_back();
  }
  redis_cluster(const redis_cluster&) = delete;
  redis_cluster& operator=(const redis_cluster&) = delete;

  int size() const { return static_cast<int>(nodes_.size()); }
  int masters() const { return options_.masters; }
  // Replica r of master m, as started (a failover swaps the roles, not the indexes).
  int replica_index(int master, int r = 0) const {
    return options_.masters + master * options_.replicas_per_master + r;
  }
  redis_server& node(int i) { return *nodes_.at(static_cast<std::size_t>(i)); }
  const redis_server& node(int i) const { return *nodes_.at(static_cast<std::size_t>(i)); }
  unsigned short bus_port(int i) const { return bus_ports_.at(static_cast<std::size_t>(i)); }
  // With options().tls: node i's TLS port.
  unsigned short tls_port(int i) const { return tls_ports_.at(static_cast<std::size_t>(i)); }
  const redis_cluster_options& options() const { return options_; }

  std::string seed_url(int i = 0) const {
    return "redis-cluster://127.0.0.1:" + std::to_string(node(i).port());
  }
  // The nodes started as masters.
  std::string seeds_url() const {
    std::string u = "redis-cluster://";
    for (int m = 0; m < options_.masters; ++m) {
      if (m > 0) u += ',';
      u += "127.0.0.1:" + std::to_string(node(m).port());
    }
    return u;
  }
  // CLUSTER MYID, read at start; nodes.conf in the node's dir keeps it across restart().
  std::string node_id(int i) const { return ids_.at(static_cast<std::size_t>(i)); }

  // Raw text of node i's CLUSTER INFO / CLUSTER NODES; empty if it does not answer within
  // probe_timeout (short, as the waits poll: a node paused a moment ago may not have stopped
  // yet when asked, and then never answers).
  static constexpr std::chrono::milliseconds probe_timeout{500};
  std::string cluster_info(int i) const {
    return bulk(command(i, "CLUSTER INFO", probe_timeout));
  }
  std::string cluster_nodes(int i) const {
    return bulk(command(i, "CLUSTER NODES", probe_timeout));
  }
  // "ok" or "fail" as node i says; empty if it does not answer.
  std::string cluster_state(int i) const { return info_field(cluster_info(i), "cluster_state"); }
  // Whether node i calls itself a master.
  bool is_master(int i) const {
    for (const auto& n : parse_nodes(cluster_nodes(i))) {
      if (has_flag(n, "myself")) return has_flag(n, "master");
    }
    return false;
  }

  // The node that serves `slot` in the view of node 0, or of the first node after it that
  // answers (not killed or paused); -1 if none does.
  int owner_of(std::uint16_t slot) const { return index_of(view().at(slot)); }
  // The slots node `i` serves in that view, in order.
  std::vector<std::uint16_t> slots_of(int i) const {
    auto owners = view();
    std::vector<std::uint16_t> slots;
    for (int s = 0; s < cluster_slots; ++s) {
      if (owners[static_cast<std::size_t>(s)] == node_id(i)) {
        slots.push_back(static_cast<std::uint16_t>(s));
      }
    }
    return slots;
  }

  // CLUSTER ADDSLOTSRANGE first..last on master i (the others learn it by gossip).
  void add_slots(int i, std::uint16_t first, std::uint16_t last) {
    expect_ok(i, "CLUSTER ADDSLOTSRANGE " + std::to_string(first) + " " + std::to_string(last));
  }

  // Until every running node says cluster_state:ok, all of them name the same owner for every
  // slot, and every running replica's link to its master is up. Killed and paused nodes are
  // left out.
  void wait_ok(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    wait_for("cluster_state:ok", timeout, [&] { return not_settled(true); });
  }

  // Slot migration as redis-cli --cluster reshard does it, in steps so that a test can act
  // between them. First `to` imports, then `from` migrates: in the other order, `from` would
  // send ASK redirections to a node that does not accept them yet.
  void begin_migration(std::uint16_t slot, int from, int to) {
    auto s = std::to_string(slot);
    expect_ok(to, "CLUSTER SETSLOT " + s + " IMPORTING " + node_id(from));
    expect_ok(from, "CLUSTER SETSLOT " + s + " MIGRATING " + node_id(to));
  }
  // Moves the slot's keys from `from` to `to`, `batch` at a time, `pause` between two batches;
  // how many moved.
  int migrate_keys(std::uint16_t slot, int from, int to, int batch = 100,
                   std::chrono::milliseconds pause = std::chrono::milliseconds(0)) {
    int moved = 0;
    for (;;) {
      if (moved > 0) std::this_thread::sleep_for(pause);
      auto keys = bulk_array(command(from, "CLUSTER GETKEYSINSLOT " + std::to_string(slot) + " " +
                                               std::to_string(batch)));
      if (keys.empty()) return moved;
      std::string migrate =
          "MIGRATE 127.0.0.1 " + std::to_string(node(to).port()) + " \"\" 0 5000 KEYS";
      for (const auto& k : keys) migrate += " " + inline_arg(k);
      auto r = command(from, migrate, std::chrono::seconds(10));
      if (r.rfind("+OK", 0) != 0 && r.rfind("+NOKEY", 0) != 0) {
        throw std::runtime_error("redis_cluster: MIGRATE of slot " + std::to_string(slot) +
                                 " from node " + std::to_string(from) + " failed: " + r);
      }
      moved += static_cast<int>(keys.size());
    }
  }
  // Moves one key of a migrating slot from `from` to `to`.
  void migrate_key(int from, int to, const std::string& key) {
    auto r = command(from, "MIGRATE 127.0.0.1 " + std::to_string(node(to).port()) + " " +
                               inline_arg(key) + " 0 5000",
                     std::chrono::seconds(10));
    if (r.rfind("+OK", 0) != 0) {
      throw std::runtime_error("redis_cluster: MIGRATE of " + key + " failed: " + r);
    }
  }
  // The new owner first (it bumps its epoch, so its claim wins), then the old one (which stops
  // answering ASK), then every other master not killed or paused; replicas learn it by gossip.
  void end_migration(std::uint16_t slot, int from, int to) {
    std::string setslot = "CLUSTER SETSLOT " + std::to_string(slot) + " NODE " + node_id(to);
    expect_ok(to, setslot);
    expect_ok(from, setslot);
    for (int i = 0; i < size(); ++i) {
      if (i != to && i != from && is_master(i)) expect_ok(i, setslot);
    }
  }
  // The rest of a migration begun with begin_migration: the keys, then the switch.
  void move_slot_rest(std::uint16_t slot, int from, int to) {
    migrate_keys(slot, from, to);
    end_migration(slot, from, to);
  }
  void move_slot(std::uint16_t slot, int from, int to) {
    begin_migration(slot, from, to);
    migrate_keys(slot, from, to);
    end_migration(slot, from, to);
  }

  // CLUSTER FAILOVER [FORCE] on the replica, then until it is master and the cluster ok.
  void fail_over(int replica, bool force = false,
                 std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    expect_ok(replica, force ? "CLUSTER FAILOVER FORCE" : "CLUSTER FAILOVER");
    wait_promoted(replica, timeout);
  }
  // After its master was killed (or fail_over): until the replica is master and the cluster
  // ok again. Detection takes about node_timeout, the election 0.5 to 1 s more.
  void wait_promoted(int replica, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto until = std::chrono::steady_clock::now() + scaled(timeout);  // one bound for both
    wait_until("node " + std::to_string(replica) + " to be master", until, [&] {
      return is_master(replica) ? std::string{} : "it is not:\n" + cluster_nodes(replica);
    });
    wait_until("cluster_state:ok", until, [&] { return not_settled(true); });
  }

 private:
  struct node_line {
    std::string id, flags;
    std::vector<std::pair<int, int>> slots;  // ranges, last included
  };

  void start_node() {
    // The bus port is probed like the client port, so it may be taken by the time the node
    // binds it: then the node exits at start-up, and a fresh pair is tried.
    for (int attempt = 0;; ++attempt) {
      auto bus = free_port();
      auto tls = options_.tls.empty() ? 0 : free_port();
      server_options o;
      o.extra = {"--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf",  // in --dir, the node's own
                 "--cluster-port", std::to_string(bus),
                 "--cluster-node-timeout", std::to_string(options_.node_timeout.count()),
                 "--cluster-require-full-coverage", options_.require_full_coverage ? "yes" : "no",
                 "--repl-diskless-sync-delay", "0"};  // else a replica waits 5 s for its sync
      o.extra.insert(o.extra.end(), options_.extra.begin(), options_.extra.end());
      if (tls != 0) {
        o.extra.insert(o.extra.end(), {"--tls-port", std::to_string(tls), "--tls-cluster", "yes",
                                       "--tls-replication", "yes"});
        o.extra.insert(o.extra.end(), options_.tls.begin(), options_.tls.end());
      }
      try {
        nodes_.push_back(std::make_unique<redis_server>(o));
        bus_ports_.push_back(bus);
        tls_ports_.push_back(tls);
        return;
      } catch (const std::exception&) {
        if (attempt >= 2) throw;
      }
    }
  }

  // Master m's slots from first to last, less those left out.
  void assign(int m, int first, int last) {
    std::string ranges;
    for (int s = first; s <= last;) {
      while (s <= last && left_out(s)) ++s;
      if (s > last) break;
      int end = s;
      while (end + 1 <= last && !left_out(end + 1)) ++end;
      // Appended piecewise: GCC 12's -Wrestrict misfires on `" " + std::to_string(...)` at -O2.
      ranges.append(" ").append(std::to_string(s)).append(" ").append(std::to_string(end));
      s = end + 1;
    }
    if (!ranges.empty()) expect_ok(m, "CLUSTER ADDSLOTSRANGE" + ranges);
  }
  bool left_out(int slot) const {
    return std::find(options_.uncovered.begin(), options_.uncovered.end(), slot) !=
           options_.uncovered.end();
  }

  std::string command(int i, const std::string& inline_command,
                      std::chrono::milliseconds timeout = std::chrono::seconds(2)) const {
    if (!live(i)) return {};
    return raw_command_complete(node(i).port(), inline_command, timeout);
  }
  // Running and not paused (SIGSTOP: state T in /proc/PID/stat). A paused node would only
  // time out; the waits treat it like a killed one, as the other nodes soon do.
  bool live(int i) const {
    if (!node(i).running()) return false;
    std::ifstream stat("/proc/" + std::to_string(node(i).pid()) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    auto name_end = text.rfind(')');  // the state follows the command name: "PID (NAME) S"
    return name_end == std::string::npos || name_end + 2 >= text.size() ||
           (text[name_end + 2] != 'T' && text[name_end + 2] != 't');
  }
  void expect_ok(int i, const std::string& inline_command) {
    auto r = command(i, inline_command);
    if (r.rfind("+OK", 0) != 0) {
      throw std::runtime_error("redis_cluster: node " + std::to_string(i) + " answered " +
                               (r.empty() ? "nothing" : r) + " to " + inline_command);
    }
  }

  // Polls every 20 ms until `problem` returns empty; throws with its last answer after
  // scaled(timeout) (a slow build or a busy machine settles later, never sooner).
  template <class Problem>
  static void wait_for(const std::string& what, std::chrono::milliseconds timeout,
                       Problem problem) {
    wait_until(what, std::chrono::steady_clock::now() + scaled(timeout), problem);
  }
  template <class Problem>
  static void wait_until(const std::string& what, std::chrono::steady_clock::time_point until,
                         Problem problem) {
    auto start = std::chrono::steady_clock::now();
    for (;;) {
      std::string seen = problem();
      if (seen.empty()) return;
      auto now = std::chrono::steady_clock::now();
      if (now > until) {
        auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
        throw std::runtime_error("redis_cluster: no " + what + " after " +
                                 std::to_string(waited.count()) + " ms: " + seen);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // What keeps the cluster from being settled (state ok if `need_ok`, one slot map, replicas
  // linked); empty when nothing does.
  std::string not_settled(bool need_ok) const {
    std::vector<std::string> agreed;
    int agreed_by = -1;
    for (int i = 0; i < size(); ++i) {
      if (!live(i)) continue;
      auto name = "node " + std::to_string(i) + " (port " + std::to_string(node(i).port()) + ")";
      auto lines = parse_nodes(cluster_nodes(i));
      if (lines.empty()) return name + " does not answer CLUSTER NODES";
      if (need_ok) {
        auto info = cluster_info(i);
        if (info_field(info, "cluster_state") != "ok") return name + " says\n" + info;
      }
      auto owners = owners_in(lines);
      if (agreed_by < 0) {
        agreed = std::move(owners);
        agreed_by = i;
      } else if (owners != agreed) {
        int s = static_cast<int>(std::mismatch(owners.begin(), owners.end(), agreed.begin()).first -
                                 owners.begin());
        return name + " says slot " + std::to_string(s) + " is served by node " +
               std::to_string(index_of(owners[static_cast<std::size_t>(s)])) + ", node " +
               std::to_string(agreed_by) + " by node " +
               std::to_string(index_of(agreed[static_cast<std::size_t>(s)]));
      }
      auto self = std::find_if(lines.begin(), lines.end(),
                               [](const node_line& n) { return has_flag(n, "myself"); });
      if (self != lines.end() && has_flag(*self, "slave")) {
        auto repl = bulk(command(i, "INFO replication", probe_timeout));
        if (info_field(repl, "master_link_status") != "up") {
          return name + ", a replica, has no link to its master:\n" + repl;
        }
      }
    }
    return agreed_by < 0 ? "no node is running" : "";
  }

  // Each slot's owner id in the view of node 0, or of the first node after it that answers.
  std::vector<std::string> view() const {
    for (int i = 0; i < size(); ++i) {
      auto lines = parse_nodes(cluster_nodes(i));
      if (!lines.empty()) return owners_in(lines);
    }
    return std::vector<std::string>(cluster_slots);
  }
  static std::vector<std::string> owners_in(const std::vector<node_line>& lines) {
    std::vector<std::string> owners(cluster_slots);
    for (const auto& n : lines) {
      for (auto [first, last] : n.slots) {
        for (int s = first; s <= last && s < cluster_slots; ++s) {
          owners[static_cast<std::size_t>(s)] = n.id;
        }
      }
    }
    return owners;
  }
  int index_of(const std::string& id) const {
    if (id.empty()) return -1;
    auto at = std::find(ids_.begin(), ids_.end(), id);
    return at == ids_.end() ? -1 : static_cast<int>(at - ids_.begin());
  }

  // CLUSTER NODES lines: "<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link>
  // <slot or first-last>...", where "[slot->-id]" / "[slot-<-id]" mark a migration.
  static std::vector<node_line> parse_nodes(const std::string& text) {
    std::vector<node_line> out;
    std::size_t at = 0;
    while (at < text.size()) {
      auto eol = text.find('\n', at);
      if (eol == std::string::npos) eol = text.size();
      std::vector<std::string> words;
      for (std::size_t w = at; w < eol;) {
        auto sp = std::min(text.find(' ', w), eol);
        if (sp > w) words.push_back(text.substr(w, sp - w));
        w = sp + 1;
      }
      at = eol + 1;
      if (words.size() < 8) continue;
      node_line n{words[0], words[2], {}};
      for (std::size_t k = 8; k < words.size(); ++k) {
        if (words[k].front() == '[') continue;
        auto dash = words[k].find('-');
        int first = std::atoi(words[k].c_str());
        int last = dash == std::string::npos ? first : std::atoi(words[k].c_str() + dash + 1);
        n.slots.emplace_back(first, last);
      }
      out.push_back(std::move(n));
    }
    return out;
  }
  static bool has_flag(const node_line& n, std::string_view flag) {
    std::string_view flags = n.flags;
    for (std::size_t at = 0; at <= flags.size();) {
      auto comma = std::min(flags.find(',', at), flags.size());
      if (flags.substr(at, comma - at) == flag) return true;
      at = comma + 1;
    }
    return false;
  }

  // The text of a bulk string reply ("$5\r\nhello\r\n"); empty for anything else.
  static std::string bulk(const std::string& reply) {
    if (reply.empty() || reply[0] != '$') return {};
    auto eol = reply.find("\r\n");
    long long n = std::strtoll(reply.c_str() + 1, nullptr, 10);
    if (n < 0 || eol + 2 + static_cast<std::size_t>(n) > reply.size()) return {};
    return reply.substr(eol + 2, static_cast<std::size_t>(n));
  }
  // The bulk strings of a flat array reply (GETKEYSINSLOT).
  static std::vector<std::string> bulk_array(const std::string& reply) {
    std::vector<std::string> out;
    if (reply.empty() || reply[0] != '*') return out;
    auto at = reply.find("\r\n") + 2;
    while (at < reply.size()) {
      auto end = resp_end(reply, at);
      if (end == std::string::npos) break;
      out.push_back(bulk(reply.substr(at, end - at)));
      at = end;
    }
    return out;
  }
  // "name:value" of a CLUSTER INFO or INFO text.
  static std::string info_field(const std::string& info, const std::string& name) {
    auto at = info.rfind(name + ":", 0) == 0 ? 0 : info.find("\n" + name + ":");
    if (at == std::string::npos) return {};
    auto start = info.find(':', at) + 1;
    return info.substr(start, info.find_first_of("\r\n", start) - start);
  }

  redis_cluster_options options_;
  std::vector<std::unique_ptr<redis_server>> nodes_;
  std::vector<unsigned short> bus_ports_;
  std::vector<unsigned short> tls_ports_;  // 0 without options_.tls
  std::vector<std::string> ids_;
};

}  // namespace dlock::test
