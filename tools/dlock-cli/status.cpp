// dlock status KEY [--json]: is the lock held, by whom, until when, and where its fencing
// counter stands, node by node. Exit 0 when a quorum of nodes answered (held or free alike),
// 69 when too few did to say.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "cli.hpp"
#include "lock_view.hpp"

namespace dlock::cli {
namespace {

struct status_options {
  std::string key;
  bool json = false;
};

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_holder(const holder_info& h) {
  return "{\"host\":" + json_string(h.host) + ",\"pid\":" + std::to_string(h.pid) +
         ",\"since_unix_ms\":" + std::to_string(h.since_unix_ms) +
         ",\"command\":" + json_string(h.command) + "}";
}

void print_json(const lock_view& v) {
  std::string out = "{\"key\":" + json_string(v.key) + ",\"held\":" + (v.held() ? "true" : "false");
  out += ",\"token\":" + (v.held() ? json_string(*v.token) : std::string("null"));
  out += ",\"pttl_ms\":" + (v.held() ? std::to_string(v.pttl_ms) : std::string("null"));
  out += ",\"fence\":" + std::to_string(v.fence);
  out += ",\"holder\":" + (v.held() && v.holder ? json_holder(*v.holder) : std::string("null"));
  out += ",\"quorum\":" + std::to_string(v.quorum) + ",\"reachable\":" + std::to_string(v.reachable);
  out += ",\"nodes\":[";
  for (std::size_t i = 0; i < v.nodes.size(); ++i) {
    const auto& n = v.nodes[i];
    if (i) out += ",";
    out += "{\"node\":" + json_string(n.node) + ",\"reachable\":" + (n.ec ? "false" : "true");
    if (n.ec) {
      out += ",\"error\":" + json_string(n.message) + "}";
      continue;
    }
    out += ",\"token\":" + (n.token ? json_string(*n.token) : std::string("null"));
    out += ",\"pttl_ms\":" + std::to_string(n.pttl_ms) + ",\"fence\":" + std::to_string(n.fence) + "}";
  }
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

void print_text(const lock_view& v) {
  if (v.held()) {
    std::printf("%s: held", v.key.c_str());
    if (v.holder) std::printf(" by %s", describe(*v.holder).c_str());
    if (v.pttl_ms >= 0) std::printf(", expires in %.1f s", static_cast<double>(v.pttl_ms) / 1000.0);
    std::printf(" (on %zu of %zu nodes)\n", v.holding, v.nodes.size());
  } else if (v.token) {
    std::printf("%s: free (a stale or partial key on %zu of %zu nodes, fewer than the quorum of %zu)\n",
                v.key.c_str(), v.holding, v.nodes.size(), v.quorum);
  } else {
    std::printf("%s: free\n", v.key.c_str());
  }
  std::printf("  fence counter %llu (the next holder gets a higher token)\n",
              static_cast<unsigned long long>(v.fence));
  if (v.nodes.size() == 1 && !v.nodes[0].ec) return;
  for (const auto& n : v.nodes) {
    if (n.ec) {
      std::printf("  %-24s down: %s\n", n.node.c_str(), n.message.c_str());
    } else if (n.token) {
      std::printf("  %-24s %s, PTTL %lld ms, fence %llu\n", n.node.c_str(),
                  n.token == v.token && v.held() ? "held" : "other owner", n.pttl_ms,
                  static_cast<unsigned long long>(n.fence));
    } else {
      std::printf("  %-24s free, fence %llu\n", n.node.c_str(), static_cast<unsigned long long>(n.fence));
    }
  }
}

int status_command(const global_options& g, const status_options& o) {
  if (o.key.empty()) throw usage_error("KEY is empty");
  auto nodes = make_clients(g);
  auto view = inspect_lock(nodes, o.key);
  if (o.json) {
    print_json(view);
  } else {
    print_text(view);
  }
  std::fflush(stdout);
  if (!view.answered()) {
    std::string why;
    for (const auto& n : view.nodes) {
      if (n.ec) why += (why.empty() ? "" : "; ") + n.node + ": " + n.message;
    }
    say("only %zu of %zu nodes answered (a quorum is %zu): %s", view.reachable, view.nodes.size(),
        view.quorum, why.c_str());
    return exit_unavailable;
  }
  return exit_ok;
}

}  // namespace

subcommand add_status_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<status_options>();
  auto* app = parent.add_subcommand("status", "Show whether KEY is held, by whom, its TTL and fence");
  app->fallthrough();
  app->add_flag("--json", o->json, "One JSON object on stdout");
  app->add_option("KEY", o->key, "The lock's name")->required();
  return {app, [&g, o] { return status_command(g, *o); }};
}

}  // namespace dlock::cli
