// Start-up diagnostics: the deployment facts that silently weaken Redlock (SPEC section 3-4).
//
// Every node is asked at once, with one pipelined request (four INFO sections and CONFIG GET
// appendfsync and min-replicas-to-write), so a hung node costs one request_timeout rather than
// one per node. INFO is read by field name; sections are asked for one by one because Redis
// before 7 accepts only one.
#include "dlock/diagnostics.hpp"

#include <charconv>
#include <future>
#include <map>
#include <memory>
#include <mutex>

#include "access.hpp"
#include "algo/quorum_round.hpp"
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
};

// An error reply inside the pipeline (INFO refused by an ACL) makes the node uncheckable; a
// refused CONFIG only leaves appendfsync and min-replicas-to-write unknown.
std::error_code read_facts(const reply& r, node_facts& f, std::string& why) {
  const auto& e = r.elements();
  if (!r.is_array() || e.size() != 6) {
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

// `quarantined`: the node's client has restart_quarantine, which covers a restart that lost
// the locks and a promoted replica that missed some; `guarded`: its replication_guard, which
// keeps grants from standing on the master alone.
void check_node(const std::string& name, const node_facts& f, bool quarantined, bool guarded,
                std::vector<warning>& out) {
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
      "appendonly yes with appendfsync always, or set client_options::restart_quarantine (dlock "
      "--quarantine) to the longest TTL, which keeps a restarted node out of quorums that long";
  const bool master_with_replicas = !f.replicas.empty() && f.replicas != "0" && f.role == "master";
  if (master_with_replicas && !(quarantined && guarded)) {
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

}  // namespace

std::vector<warning> check_deployment(const std::vector<client>& nodes, std::error_code& ec) {
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
  check_count(nodes.size(), out);
  command cmd{"INFO", "server"};
  cmd.then({"INFO", "replication"}).then({"INFO", "memory"}).then({"INFO", "persistence"});
  cmd.then({"CONFIG", "GET", "appendfsync"}).then({"CONFIG", "GET", "min-replicas-to-write"});
  auto probes = probe_all(nodes, cmd);
  std::map<std::string, std::string> seen;  // run_id -> first endpoint with it
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::string name = nodes[i].where().to_string();
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
      if (nodes[i].where().is_sentinel()) check_sentinels(nodes[i], out);
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
    check_node(name, facts, nodes[i].options().restart_quarantine.count() > 0,
               nodes[i].options().replication_guard.enabled, out);
    if (nodes[i].where().is_sentinel()) check_sentinels(nodes[i], out);
  }
  return out;
}

std::vector<warning> check_deployment(const std::vector<client>& nodes) {
  std::error_code ec;
  auto out = check_deployment(nodes, ec);
  if (ec) {
    std::string what = "dlock: cannot check the deployment";
    for (const auto& w : out) {
      if (w.what == warning::code::unchecked) what += "; " + w.node + ": " + w.message;
    }
    throw std::system_error(ec, what);
  }
  return out;
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
  }
  return "unknown";
}

std::string to_string(const warning& w) {
  std::string out(to_string(w.what));
  if (!w.node.empty()) out += " " + w.node;
  return out + ": " + w.message + " (fix: " + w.fix + ")";
}

}  // namespace dlock
