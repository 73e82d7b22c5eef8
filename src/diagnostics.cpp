// SPDX-License-Identifier: Apache-2.0
// Start-up diagnostics: the deployment facts that silently weaken Redlock (SPEC section 3-4).
//
// Every node is asked at once, with one pipelined request (four INFO sections and CONFIG GET
// appendfsync and min-replicas-to-write), so a hung node costs one request_timeout rather than
// one per node. INFO is read by field name; sections are asked for one by one because Redis
// before 7 accepts only one.
#include "dlock/diagnostics.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>

#include "access.hpp"
#include "algo/cluster_routing.hpp"
#include "algo/quorum_round.hpp"
#include "dlock/key_layout.hpp"
#include "key_layout_internal.hpp"
#include "net/cluster.hpp"
#include "net/sentinel.hpp"

namespace dlock {
namespace {

struct probe {
  std::error_code ec;
  reply r;
};

// The value of `key:value` in an INFO text, or empty.
std::string info_field(std::string_view info, std::string_view key) {
  std::size_t pos = 0;
  while (pos < info.size()) {
    auto end = info.find('\n', pos);
    if (end == std::string_view::npos) end = info.size();
    auto line = info.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ':') {
      return std::string(line.substr(key.size() + 1));
    }
    pos = end + 1;
  }
  return {};
}

// Sends `cmd` to every node at once and waits for every answer (each within its client's
// request_timeout).
std::vector<probe> probe_all(const std::vector<client>& nodes, const command& cmd) {
  struct gather {
    std::mutex m;
    std::vector<probe> probes;
    std::size_t left;
    std::promise<void> done;
  };
  // Handlers run on the I/O thread and may outlive a slow waiter's view of the stack, so the
  // tally is shared rather than borrowed.
  if (nodes.empty()) return {};  // nothing would ever complete the wait below
  auto g = std::make_shared<gather>();
  g->probes.resize(nodes.size());
  g->left = nodes.size();
  auto finished = g->done.get_future();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    client node = nodes[i];
    detail::access::start_exec(node, cmd, node.options().request_timeout,
                               [g, i](std::error_code ec, reply r) {
                                 bool last = false;
                                 {
                                   std::lock_guard lock(g->m);
                                   g->probes[i] = probe{ec, std::move(r)};
                                   last = --g->left == 0;
                                 }
                                 if (last) g->done.set_value();
                               });
  }
  finished.wait();
  std::lock_guard lock(g->m);
  return std::move(g->probes);
}

// What one node told us; empty strings for what it did not.
struct node_facts {
  std::string run_id, role, master, policy, maxmemory, aof_enabled, appendfsync, replicas;
  std::string min_replicas;  // min-replicas-to-write
  std::string full_coverage;  // cluster-require-full-coverage (empty outside a cluster)
};

// An error reply inside the pipeline (INFO refused by an ACL) makes the node uncheckable; a
// refused CONFIG only leaves appendfsync and min-replicas-to-write unknown.
std::error_code read_facts(const reply& r, node_facts& f, std::string& why) {
  const auto& e = r.elements();
  if (!r.is_array() || e.size() != 7) {
    why = "unexpected reply " + r.to_string();
    return errc::protocol_error;
  }
  for (std::size_t i = 0; i < 4; ++i) {
    if (e[i].is_error()) {
      why = e[i].str();
      return error_from_reply(e[i]);
    }
  }
  f.run_id = info_field(e[0].str(), "run_id");
  f.role = info_field(e[1].str(), "role");
  f.master = info_field(e[1].str(), "master_host") + ":" + info_field(e[1].str(), "master_port");
  f.replicas = info_field(e[1].str(), "connected_slaves");
  f.policy = info_field(e[2].str(), "maxmemory_policy");
  f.maxmemory = info_field(e[2].str(), "maxmemory");
  f.aof_enabled = info_field(e[3].str(), "aof_enabled");
  const auto& config = e[4].elements();
  if (config.size() == 2 && config[1].is_string()) f.appendfsync = config[1].str();
  const auto& min_replicas = e[5].elements();
  if (min_replicas.size() == 2 && min_replicas[1].is_string()) f.min_replicas = min_replicas[1].str();
  const auto& coverage = e[6].elements();
  if (coverage.size() == 2 && coverage[1].is_string()) f.full_coverage = coverage[1].str();
  return {};
}

void add(std::vector<warning>& out, warning::code c, std::string node, std::string message,
         std::string fix) {
  out.push_back(warning{c, std::move(node), std::move(message), std::move(fix)});
}

void check_count(std::size_t n, std::vector<warning>& out) {
  std::size_t quorum = detail::quorum_of(n);
  if (n < 3) {
    add(out, warning::code::too_few_nodes, {},
        n == 1 ? "1 node: the lock is only as available as that node, and a crash or failover "
                 "that loses its keys lets a second owner in"
               : "2 nodes: the quorum is 2, so any one failed node makes the lock unavailable",
        "use 3 or, better, 5 independent masters");
  }
  if (n % 2 == 0) {
    add(out, warning::code::even_node_count, {},
        std::to_string(n) + " nodes: the quorum is " + std::to_string(quorum) + ", tolerating " +
            std::to_string(n - quorum) + " failed node(s), no more than " + std::to_string(n - 1) +
            " nodes would",
        "use an odd number of nodes (" + std::to_string(n - 1) + " or " + std::to_string(n + 1) +
            ")");
  }
}

// How a node is used. `quarantined`: its client has restart_quarantine, which covers a restart
// that lost the locks and a promoted replica that missed some; `guarded`: its
// replication_guard, which keeps grants from standing on the master alone. `cluster_copies`:
// the node is a master of a redis-cluster:// client (which has neither), and the lock keeps
// that many copies (0: one, on its slot's master).
struct node_use {
  bool quarantined = false, guarded = false, in_cluster = false;
  int cluster_copies = 0;
};

void check_node(const std::string& name, const node_facts& f, const node_use& use,
                std::vector<warning>& out) {
  const bool quarantined = use.quarantined, guarded = use.guarded;
  if (f.role == "slave") {
    add(out, warning::code::replica, name,
        "the node is a replica of " + f.master +
            ": it refuses lock writes (READONLY), and a writable replica loses them to its "
            "master's stream",
        "list masters only: Redlock needs N independent masters, no replication between them");
  }
  if (!f.policy.empty() && f.policy != "noeviction") {
    std::string when = f.maxmemory == "0" ? " once maxmemory is set" : " at maxmemory";
    add(out, warning::code::evicting_policy, name,
        "maxmemory-policy is " + f.policy + ": a held lock key can be evicted silently" + when,
        "CONFIG SET maxmemory-policy noeviction (or give locks a Redis of their own)");
  }
  const char* persistence_fix =
      use.in_cluster
          ? "appendonly yes with appendfsync always (the quarantine is not available on a "
            "cluster yet)"
          : "appendonly yes with appendfsync always, or set client_options::restart_quarantine "
            "(dlock --quarantine) to the longest TTL, which keeps a restarted node out of "
            "quorums that long";
  const bool master_with_replicas = !f.replicas.empty() && f.replicas != "0" && f.role == "master";
  if (master_with_replicas && use.in_cluster) {
    // Copies on distinct masters are the cluster's guard: one failover takes one copy.
    if (use.cluster_copies < 3) {
      add(out, warning::code::unguarded_failover, name,
          "the master has " + f.replicas + " replica(s) and each lock lives on its slot's master "
              "alone: a failover may promote a replica that missed the last lock writes, and a "
              "second owner gets in (the fence then refuses the first one's writes)",
          "lock with copies (lock_options::copies, dlock --copies 3): K copies on K distinct "
          "masters, so that one failover cannot hand the lock to two clients");
    }
  } else if (master_with_replicas && !(quarantined && guarded)) {
    std::string missing = !guarded && !quarantined ? "neither the replication guard nor the "
                                                     "quarantine"
                          : !guarded               ? "no replication guard"
                                                   : "no quarantine";
    add(out, warning::code::unguarded_failover, name,
        "the node has " + f.replicas + " replica(s) and the client has " + missing +
            ": a failover may promote one that missed the last lock writes, and a second owner "
            "gets in",
        "set client_options::replication_guard (dlock --replication-guard), so that a grant "
        "counts once a replica has it, and client_options::restart_quarantine (dlock "
        "--quarantine) to the longest TTL, so that a promoted replica grants nothing until "
        "what it may have missed has expired");
  }
  if (master_with_replicas && f.min_replicas == "0") {
    add(out, warning::code::no_min_replicas, name,
        "min-replicas-to-write is 0: a master that a failover deposed keeps granting locks to "
        "the clients that still reach it, which the new master does not know (split brain)",
        "CONFIG SET min-replicas-to-write 1 (with min-replicas-max-lag): a master cut off "
        "from its replicas then refuses lock writes");
  }
  if (quarantined) return;
  if (f.aof_enabled == "0") {
    add(out, warning::code::forgets_on_restart, name,
        "appendonly is no: after a restart the node forgets the locks it held, so another owner "
        "can reach a quorum while the first still holds the lock",
        persistence_fix);
  } else if (f.aof_enabled == "1" && !f.appendfsync.empty() && f.appendfsync != "always") {
    add(out, warning::code::forgets_on_restart, name,
        "appendfsync is " + f.appendfsync +
            ": a crash loses the lock writes not yet fsync'd (up to a second with everysec)",
        persistence_fix);
  }
}

// A redis-sentinel:// node: whether its sentinels can fail over at all, and agree with the URL
// on how many they are (a majority of the URL's list must match a majority of theirs).
void check_sentinels(const client& node, std::vector<warning>& out) {
  const endpoint& where = node.where();
  const std::string name = where.to_string();
  const std::size_t listed = where.sentinels.size();
  if (listed < 3) {
    add(out, warning::code::sentinel_quorum, name,
        std::to_string(listed) + " sentinel(s): a failover needs a majority of the sentinels to "
            "agree, so one that fails or is cut off stops failovers (and the URL's vote)",
        "run 3 or more sentinels on independent hosts and list them all in the URL");
  }
  std::vector<client> sentinels;
  auto options = detail::sentinel_options(node.options());
  for (const auto& s : where.sentinels) {
    sentinels.emplace_back(endpoint{.host = s.host, .port = s.port}, options);
  }
  command cmd{"SENTINEL", "MASTER", where.master_name};
  cmd.then({"SENTINEL", "CKQUORUM", where.master_name});
  auto probes = probe_all(sentinels, cmd);
  for (std::size_t i = 0; i < probes.size(); ++i) {
    std::string who = "sentinel " + sentinels[i].where().to_string();
    const auto& r = probes[i].r;
    if (probes[i].ec || !r.is_array() || r.elements().size() != 2 ||
        r.elements()[0].is_error()) {
      std::string why = probes[i].ec ? probes[i].ec.message() : "";
      if (r.is_error()) why = r.str();
      if (r.is_array() && !r.elements().empty() && r.elements()[0].is_error()) {
        why = r.elements()[0].str();
      }
      add(out, warning::code::sentinel_quorum, name, who + " could not be asked: " + why,
          "make every listed sentinel reachable, and let it watch '" + where.master_name + "'");
      continue;
    }
    const auto& fields = r.elements()[0].elements();
    std::size_t known = 0;  // the sentinel itself and the others it knows of; 0: unknown
    for (std::size_t k = 0; k + 1 < fields.size(); k += 2) {
      if (fields[k].str() != "num-other-sentinels") continue;
      const std::string& text = fields[k + 1].str();
      std::size_t others = 0;
      auto [end, perr] = std::from_chars(text.data(), text.data() + text.size(), others);
      if (perr == std::errc{} && end == text.data() + text.size()) known = others + 1;
    }
    if (known != 0 && known != listed) {
      add(out, warning::code::sentinel_quorum, name,
          who + " knows " + std::to_string(known) + " sentinels, the URL lists " +
              std::to_string(listed) + ": a majority of the URL's may not be a majority of theirs",
          "list every sentinel that watches '" + where.master_name + "' in the URL");
    }
    const reply& ckquorum = r.elements()[1];
    if (ckquorum.is_error()) {
      add(out, warning::code::sentinel_quorum, name, who + ": " + ckquorum.str(),
          "start the missing sentinels, or lower the quorum no further than a majority");
    }
  }
}

// The masters that serve a slot in the map, in slot order: a map patched by MOVED may still
// list a master demoted since.
std::vector<host_port> serving_masters(const detail::slot_map& map) {
  std::vector<host_port> out;
  for (std::size_t slot = 0; slot < detail::cluster_slots; ++slot) {
    const host_port* owner = map.owner(static_cast<std::uint16_t>(slot));
    if (owner && std::find(out.begin(), out.end(), *owner) == out.end()) out.push_back(*owner);
  }
  return out;
}

// Those masters, each a client of its own (the URL's credentials and TLS, the client's
// options), so that they are checked one by one.
std::vector<client> masters_of(const client& node, const std::vector<host_port>& masters) {
  std::vector<client> out;
  for (const auto& m : masters) {
    out.emplace_back(detail::access::cluster(node)->node_endpoint(m), node.options());
  }
  return out;
}

// "0.4%", and "under 0.1%" rather than "0.0%" for one collapsed placement in thousands.
std::string percent(std::size_t part, std::size_t whole) {
  double p = 100.0 * static_cast<double>(part) / static_cast<double>(std::max<std::size_t>(whole, 1));
  if (part > 0 && p < 0.1) return "under 0.1%";
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", p);
  return text;
}

// What the slot map says of a cluster: slots without a master, and with copies, whether each
// name's K copies land on K distinct masters. The copies' slots are lock_copy_key's; a name's
// slot only picks the copies' place within their K-ths, so every place is tried. `masters`: how
// many masters serve a slot.
void check_slot_map(const std::string& name, const detail::slot_map& map,
                    std::size_t masters, int copies, std::vector<warning>& out) {
  if (auto missing = map.uncovered(); missing > 0) {
    add(out, warning::code::cluster_coverage, name,
        std::to_string(missing) + " of " + std::to_string(detail::cluster_slots) +
            " slots have no master: the locks whose keys hash there fail with cluster_error",
        "assign every slot to a master (redis-cli --cluster fix), or bring back the lost one");
  }
  if (copies < 3) return;
  if (masters < static_cast<std::size_t>(copies)) {
    add(out, warning::code::copies_collapse, name,
        "the cluster has " + std::to_string(masters) + " master(s), fewer than the " +
            std::to_string(copies) + " copies: every lock is refused (cluster_error)",
        "add masters (as many as the copies, or more), or use fewer copies");
    return;
  }
  std::size_t places = 0, collapsed = 0;
  std::string example;
  std::vector<bool> seen_place(detail::cluster_slots);  // by copy 0's slot, which is the place
  for (std::uint16_t slot = 0; slot < detail::cluster_slots; ++slot) {
    // A name in `slot` (its hash tag) stands for every name whose copies go where its do.
    // Appended piecewise: GCC 12's -Wrestrict misfires on `"{" + std::string(...)` at -O2.
    std::string probe = "{";
    probe.append(detail::tag_for_slot(slot)).append("}");
    auto first = hash_slot(lock_copy_key(probe, 0, copies));
    if (seen_place[first]) continue;
    seen_place[first] = true;
    ++places;
    std::vector<const host_port*> owners;
    bool shared = false;
    for (int i = 0; i < copies && !shared; ++i) {
      const host_port* owner = map.owner(hash_slot(lock_copy_key(probe, i, copies)));
      if (!owner) break;  // uncovered: reported above
      for (const auto* o : owners) shared |= *o == *owner;
      if (shared && example.empty()) {
        example = "copy " + std::to_string(i) + " of a name in slot " + std::to_string(slot) +
                  " shares " + owner->to_string() + " with an earlier copy";
      }
      owners.push_back(owner);
    }
    if (shared) ++collapsed;
  }
  if (collapsed > 0) {
    add(out, warning::code::copies_collapse, name,
        "with " + std::to_string(copies) + " copies, " + std::to_string(collapsed) + " of the " +
            std::to_string(places) + " placements of a name's copies (" +
            percent(collapsed, places) + " of names) put two copies on one master (" + example +
            "): such a lock is refused (cluster_error), and a held one cannot be extended",
        "give each master one contiguous " + std::to_string(copies) +
            "th of the slots, as redis-cli --cluster create does for " + std::to_string(copies) +
            " masters (redis-cli --cluster rebalance), or use as many copies as the layout "
            "allows");
  }
}

// A cluster's masters beside the cluster-wide findings: cluster-require-full-coverage.
void check_full_coverage(const std::string& name, const std::vector<node_facts>& masters,
                         int copies, std::vector<warning>& out) {
  std::size_t full = std::count_if(masters.begin(), masters.end(), [](const node_facts& f) {
    return f.full_coverage == "yes";
  });
  if (full == 0) return;
  add(out, warning::code::cluster_coverage, name,
      "cluster-require-full-coverage is yes on " + std::to_string(full) + " of " +
          std::to_string(masters.size()) +
          " masters: while any slot has no master (one lost with no replica to promote), they "
          "refuse every lock (CLUSTERDOWN)" +
          (copies >= 3 ? ", so the copies on the other masters cannot form a quorum" : ""),
      "CONFIG SET cluster-require-full-coverage no on every master (and in redis.conf), so "
      "that the other masters keep serving their locks");
}

// One node to inspect: a client of the list, or a master of a cluster client in it.
struct target {
  client node;
  node_use use;
  std::size_t cluster = 0;  // 1 + index of its cluster in the list; 0: none
};

}  // namespace

std::vector<warning> check_deployment(const std::vector<client>& nodes, const lock_options& lock,
                                      std::error_code& ec) {
  ec.clear();
  std::vector<warning> out;
  if (nodes.empty()) {
    ec = errc::invalid_argument;
    return out;
  }
  if (detail::on_io_thread()) {
    ec = errc::would_block_io_thread;
    return out;
  }
  // A cluster client alone is one lock target whose masters are checked each: its copies, not
  // the list, make the quorum.
  if (nodes.size() > 1 || !nodes.front().where().is_cluster()) check_count(nodes.size(), out);
  std::vector<target> targets;
  std::vector<std::string> cluster_names(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const client& node = nodes[i];
    node_use use{node.options().restart_quarantine.count() > 0,
                 node.options().replication_guard.enabled, false, 0};
    if (!node.where().is_cluster()) {
      targets.push_back({node, use, 0});
      continue;
    }
    cluster_names[i] = node.where().to_string();
    std::error_code map_ec;
    auto map = detail::access::cluster(node)->current_map(map_ec);
    if (!map) {
      if (!ec) ec = map_ec;
      add(out, warning::code::unchecked, cluster_names[i],
          "could not read the cluster's slot map: " + map_ec.message(),
          "make a seed reachable and allow CLUSTER SHARDS (or SLOTS) and INFO for the lock's user");
      continue;
    }
    auto masters = serving_masters(*map);
    check_slot_map(cluster_names[i], *map, masters.size(), lock.copies, out);
    use.in_cluster = true;
    use.cluster_copies = lock.copies;
    for (auto& master : masters_of(node, masters)) targets.push_back({master, use, i + 1});
  }
  command cmd{"INFO", "server"};
  cmd.then({"INFO", "replication"}).then({"INFO", "memory"}).then({"INFO", "persistence"});
  cmd.then({"CONFIG", "GET", "appendfsync"}).then({"CONFIG", "GET", "min-replicas-to-write"});
  cmd.then({"CONFIG", "GET", "cluster-require-full-coverage"});
  std::vector<client> probed;
  for (const auto& t : targets) probed.push_back(t.node);
  auto probes = probe_all(probed, cmd);
  std::map<std::string, std::string> seen;  // run_id -> first endpoint with it
  std::vector<std::vector<node_facts>> cluster_masters(nodes.size());
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const client& node = targets[i].node;
    std::string name = node.where().to_string();
    node_facts facts;
    std::string why;
    std::error_code node_ec = probes[i].ec;
    if (node_ec) {
      why = probes[i].r.is_error() ? probes[i].r.str() : node_ec.message();
    } else {
      node_ec = read_facts(probes[i].r, facts, why);
    }
    if (node_ec) {
      if (!ec) ec = node_ec;
      add(out, warning::code::unchecked, name, "could not inspect the node: " + why,
          "make it reachable and allow INFO (and CONFIG GET) for the lock's user");
      // A master the sentinels cannot name is when their own state matters most.
      if (node.where().is_sentinel()) check_sentinels(node, out);
      continue;
    }
    if (!facts.run_id.empty()) {
      auto [it, fresh] = seen.emplace(facts.run_id, name);
      if (!fresh) {
        add(out, warning::code::same_server, name,
            "the same redis-server as " + it->second + " (run_id " + facts.run_id +
                "): its vote counts twice",
            "list each server once; the nodes must be independent masters");
      }
    }
    check_node(name, facts, targets[i].use, out);
    if (targets[i].cluster) cluster_masters[targets[i].cluster - 1].push_back(facts);
    if (node.where().is_sentinel()) check_sentinels(node, out);
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!cluster_masters[i].empty()) {
      check_full_coverage(cluster_names[i], cluster_masters[i], lock.copies, out);
    }
  }
  return out;
}

std::vector<warning> check_deployment(const std::vector<client>& nodes, std::error_code& ec) {
  return check_deployment(nodes, lock_options{}, ec);
}

std::vector<warning> check_deployment(const std::vector<client>& nodes, const lock_options& lock) {
  std::error_code ec;
  auto out = check_deployment(nodes, lock, ec);
  if (ec) {
    std::string what = "dlock: cannot check the deployment";
    for (const auto& w : out) {
      if (w.what == warning::code::unchecked) what += "; " + w.node + ": " + w.message;
    }
    throw std::system_error(ec, what);
  }
  return out;
}

std::vector<warning> check_deployment(const std::vector<client>& nodes) {
  return check_deployment(nodes, lock_options{});
}

std::string_view to_string(warning::code c) noexcept {
  switch (c) {
    case warning::code::too_few_nodes: return "too_few_nodes";
    case warning::code::even_node_count: return "even_node_count";
    case warning::code::same_server: return "same_server";
    case warning::code::replica: return "replica";
    case warning::code::evicting_policy: return "evicting_policy";
    case warning::code::forgets_on_restart: return "forgets_on_restart";
    case warning::code::unchecked: return "unchecked";
    case warning::code::unguarded_failover: return "unguarded_failover";
    case warning::code::no_min_replicas: return "no_min_replicas";
    case warning::code::sentinel_quorum: return "sentinel_quorum";
    case warning::code::cluster_coverage: return "cluster_coverage";
    case warning::code::copies_collapse: return "copies_collapse";
  }
  return "unknown";
}

std::string to_string(const warning& w) {
  std::string out(to_string(w.what));
  if (!w.node.empty()) out += " " + w.node;
  return out + ": " + w.message + " (fix: " + w.fix + ")";
}

}  // namespace dlock
