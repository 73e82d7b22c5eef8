// SPDX-License-Identifier: Apache-2.0
// dlock status KEY [--json]: is the lock held, by whom, until when, who queues for it, and where
// its fencing counter stands, node by node.
// dlock status --semaphore LIMIT [--fair] KEY [--json]: the semaphore's holders, the permits
// they hold out of LIMIT, and its waiters. A semaphore stores neither its limit nor whether it
// is fair (every user passes them), so status takes them the way `dlock run --semaphore` does.
// Reads only: plain GET/PTTL/ZRANGE/HGETALL/TIME, never a script, so looking changes nothing.
// Exit 0 when the nodes that answered settle it (held or free alike); when they cannot, it
// says "unknown" (JSON "held": null) and exits 69, or 77 when the nodes refused our
// credentials or ACL user. It never reports a guess as a fact.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "dlock/key_layout.hpp"
#include "key_names.hpp"
#include "dlock/mutex.hpp"
#include "lock_view.hpp"

namespace dlock::cli {
namespace {

using std::chrono::milliseconds;

struct status_options {
  std::string key;
  bool json = false;
  std::optional<long long> semaphore_limit;
  bool fair = false;
};

const char* json_bool(bool b) { return b ? "true" : "false"; }

std::string json_holder(const holder_info& h) {
  return "{\"host\":" + json_string(h.host) + ",\"pid\":" + std::to_string(h.pid) +
         ",\"since_unix_ms\":" + std::to_string(h.since_unix_ms) +
         ",\"command\":" + json_string(h.command) + "}";
}

void write_out(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

// ---- lock ----

std::string holders_text(std::size_t n) {
  return std::to_string(n) + (n == 1 ? " holder" : " holders");
}

// Why the nodes that answered cannot settle whether the lock is held.
std::string unknown_text(const lock_view& v) {
  std::string text = "could not tell whether it is held: " + std::to_string(v.reachable) +
                     " of " + std::to_string(v.nodes.size()) + " nodes answered";
  if (v.answered()) {
    text += ", and " + std::to_string(v.holding) + " of them hold it for one owner, who holds " +
            "it if the nodes that did not answer do";
  } else {
    text += " (a quorum is " + std::to_string(v.quorum) + ")";
  }
  return text + ": " + v.failures();
}

void print_lock_json(const lock_view& v, const std::vector<other_kind>& others) {
  std::string out = "{\"key\":" + json_string(v.key) + ",\"type\":\"lock\"";
  // null: the nodes that answered cannot settle it (see "error").
  out += ",\"held\":" + std::string(v.known() ? json_bool(v.held()) : "null");
  out += ",\"token\":" + (v.held() ? json_string(*v.token) : std::string("null"));
  out += ",\"pttl_ms\":" + (v.held() ? std::to_string(v.pttl_ms) : std::string("null"));
  // With no quorum, the fence and the queue are not known either.
  out += ",\"fence\":" + (v.answered() ? std::to_string(v.fence) : std::string("null"));
  out += ",\"holder\":" + (v.held() && v.holder ? json_holder(*v.holder) : std::string("null"));
  out += ",\"other_kinds\":[";
  for (std::size_t i = 0; i < others.size(); ++i) {
    const auto& o = others[i];
    auto count = [&](std::uint64_t n) { return o.answered ? std::to_string(n) : "null"; };
    out += std::string(i ? "," : "") + "{\"kind\":" + json_string(o.kind) +
           ",\"holders\":" + count(o.holders) + ",\"fence\":" + count(o.fence) +
           ",\"waiters\":" + count(o.waiters) + ",\"reachable\":" + json_bool(o.answered) + "}";
  }
  out += "],\"waiters\":";
  out += v.answered() ? "[" : "null";
  for (std::size_t i = 0; v.answered() && i < v.waiters.size(); ++i) {
    const auto& w = v.waiters[i];
    if (i) out += ",";
    out += "{\"id\":" + json_string(w.id) + ",\"position\":" + std::to_string(i + 1) +
           ",\"nodes\":" + std::to_string(w.nodes) +
           ",\"expires_in_ms\":" + std::to_string(w.expires_in_ms) +
           ",\"takes_handoff\":" + json_bool(w.takes_handoff) +
           ",\"who\":" + (w.who ? json_holder(*w.who) : std::string("null")) + "}";
  }
  if (v.answered()) out += "]";
  out += ",\"quorum\":" + std::to_string(v.quorum) +
         ",\"reachable\":" + std::to_string(v.reachable);
  if (!v.known()) out += ",\"error\":" + json_string(unknown_text(v));
  out += ",\"nodes\":[";
  for (std::size_t i = 0; i < v.nodes.size(); ++i) {
    const auto& n = v.nodes[i];
    if (i) out += ",";
    out += "{\"node\":" + json_string(n.node) + ",\"reachable\":" + json_bool(!n.ec);
    if (n.ec) {
      out += ",\"error\":" + json_string(n.message) + "}";
      continue;
    }
    out += ",\"token\":" + (n.token ? json_string(*n.token) : std::string("null"));
    out += ",\"pttl_ms\":" + std::to_string(n.pttl_ms) + ",\"fence\":" + std::to_string(n.fence) +
           ",\"waiters\":" + std::to_string(n.waiters) + "}";
  }
  out += "]}\n";
  write_out(out);
}

// The counter expires a TTL after it was set (even while the lock is held): then there is none
// to show (JSON: 0).
std::string fence_text(std::uint64_t fence) {
  if (fence == 0) {
    return "  fence counter: none (expired or never drawn; the next token starts from the "
           "server's clock, above every earlier one)\n";
  }
  return "  fence counter " + std::to_string(fence) + " (the next holder gets a higher token)\n";
}

// "entry expires in 0.9 s unless it polls again": a live waiter renews its entry at each
// attempt; one that crashed lets it lapse and is dropped.
std::string entry_text(const waiter_view& w) {
  return "entry expires in " + seconds_text(milliseconds(w.expires_in_ms)) +
         " unless it polls again";
}

std::string waiters_heading(std::size_t count) {
  if (count == 0) return "  no waiters queued\n";
  return "  " + std::to_string(count) + (count == 1 ? " waiter" : " waiters") +
         ", first in line first:\n";
}

// Whether some other kind's keys could not be read: the name may be held all the same.
bool others_unknown(const std::vector<other_kind>& others) {
  return std::any_of(others.begin(), others.end(), [](const other_kind& o) { return !o.answered; });
}

void print_lock_text(const lock_view& v, const std::vector<other_kind>& others) {
  // Readers, a writer or a semaphore's holders hold the name: the lines below say how many.
  const auto marked = v.held() ? marked_kind(*v.token) : std::nullopt;
  const bool held_by_others = std::any_of(others.begin(), others.end(), [](const other_kind& o) {
    return o.answered && o.holders > 0;
  });
  if (!v.known()) {
    std::printf("%s: unknown\n", v.key.c_str());
  } else if (marked) {
    std::printf("%s: held as %s, its mark expires in %.1f s\n", v.key.c_str(), marked->c_str(),
                static_cast<double>(v.pttl_ms) / 1000.0);
  } else if (v.held()) {
    std::printf("%s: held", v.key.c_str());
    if (v.holder) std::printf(" by %s", describe(*v.holder).c_str());
    if (v.pttl_ms >= 0) std::printf(", expires in %.1f s", static_cast<double>(v.pttl_ms) / 1000.0);
    if (v.pttl_ms == -1) {
      std::printf(", never expires (no TTL: not a dlock lock, or one taken without a TTL and "
                  "never released)");
    }
    std::printf(" (on %zu of %zu nodes)\n", v.holding, v.nodes.size());
  } else if (v.token) {
    std::printf("%s: free (a stale or partial key on %zu of %zu nodes, fewer than the quorum of %zu)\n",
                v.key.c_str(), v.holding, v.nodes.size(), v.quorum);
  } else if (held_by_others) {
    std::printf("%s: free as a lock, but not free:\n", v.key.c_str());
  } else if (others_unknown(others)) {
    std::printf("%s: unknown (free as a lock; the keys of another kind could not be read)\n",
                v.key.c_str());
  } else {
    std::printf("%s: free\n", v.key.c_str());
  }
  for (const auto& o : others) {
    if (!o.answered) {
      std::printf("  as a %s: no answer\n", o.kind);
      continue;
    }
    // A read-write lock and a semaphore keep every other kind out with their mark; a
    // semaphore of an earlier version marks nothing.
    std::string queued = o.waiters == 0 ? std::string(", nobody waiting in its line")
                                        : ", " + std::to_string(o.waiters) +
                                              (o.waiters == 1 ? " waiter" : " waiters") +
                                              " in its line";
    std::printf("  held as a %s by %s%s%s\n", o.kind, holders_text(o.holders).c_str(),
                queued.c_str(),
                marked ? "" : " (its holders left no mark on the name: an earlier dlock's, which "
                              "a plain run does not see)");
    // Its holders draw their tokens from its own counter, not the lock's.
    std::printf("    its %s", fence_text(o.fence).substr(2).c_str());
  }
  // With no quorum, "no waiters" or "no fence counter" would be guesses too. The lock's
  // counter is about the name's holders only while no other kind holds it.
  if (v.answered() && !marked && !held_by_others) std::printf("%s", fence_text(v.fence).c_str());
  if (v.answered() && marked && !held_by_others && !others_unknown(others)) {
    std::printf("  its holders, line and counter: not found (they changed between two reads): "
                "ask again\n");
  }
  std::string queue = v.answered() ? waiters_heading(v.waiters.size()) : "";
  // Another kind holds the name: the queue below is the lock's (mutexes waiting for the name),
  // not that kind's line.
  if ((marked || held_by_others) && !queue.empty()) queue.insert(2, "as a lock: ");
  for (std::size_t i = 0; i < v.waiters.size(); ++i) {
    const auto& w = v.waiters[i];
    queue += "    " + std::to_string(i + 1) + ". " + w.id + "  ";
    if (w.who) queue += describe(*w.who) + ", ";
    if (v.nodes.size() > 1) {
      queue +=
          "on " + std::to_string(w.nodes) + " of " + std::to_string(v.nodes.size()) + " nodes, ";
    }
    if (w.takes_handoff) queue += "takes a handoff, ";
    queue += entry_text(w) + "\n";
  }
  write_out(queue);
  if (v.nodes.size() == 1 && !v.nodes[0].ec) return;
  for (const auto& n : v.nodes) {
    if (n.ec) {
      std::printf("  %-24s no answer: %s\n", n.node.c_str(), n.message.c_str());
    } else if (n.token) {
      std::printf("  %-24s %s, PTTL %lld ms, fence %llu\n", n.node.c_str(),
                  n.token == v.token && v.held() ? "held" : "other owner", n.pttl_ms,
                  static_cast<unsigned long long>(n.fence));
    } else {
      std::printf("  %-24s free, fence %llu\n", n.node.c_str(), static_cast<unsigned long long>(n.fence));
    }
  }
}

int lock_status(const global_options& g, const status_options& o) {
  // Such a key ("{x}:fence") is no lock, and reading it as one would show nonsense ("held").
  // The lock commands refuse it through the library; status reads directly, so it checks here.
  if (is_companion_key(o.key)) {
    throw usage_error("'" + o.key + "' is not a lock: it is one of the keys dlock keeps for " +
                      "another name (such as {x}:fence, lock x's fence counter)");
  }
  auto nodes = make_clients(g);
  // --copies as the lock takes it (refused, with the library's reason, as run refuses it).
  if (g.copies > 1) (void)mutex{nodes, o.key, {.copies = g.copies}};
  auto view = inspect_lock(nodes, o.key, read_queue::yes, g.copies);
  const auto others = other_kinds_held(nodes, o.key);
  if (o.json) {
    print_lock_json(view, others);
  } else {
    print_lock_text(view, others);
  }
  std::fflush(stdout);
  if (view.known() && !view.held() && others_unknown(others) &&
      std::none_of(others.begin(), others.end(),
                   [](const other_kind& k) { return k.answered && k.holders > 0; })) {
    say("could not tell whether '%s' is held: the keys of another kind of lock under that name "
        "did not answer; ask again", o.key.c_str());
    return exit_unavailable;
  }
  if (view.known()) return exit_ok;
  say("%s", unknown_text(view).c_str());
  bool refused = std::all_of(view.nodes.begin(), view.nodes.end(), [](const node_view& n) {
    return !n.ec || is_refusal(n.ec);
  });
  return refused ? exit_no_permission : exit_unavailable;
}

// ---- semaphore ----

void print_semaphore_json(const semaphore_view& v, long long limit) {
  std::string out = "{\"key\":" + json_string(v.key) + ",\"type\":\"semaphore\",\"fair\":" +
                    json_bool(v.fair) + ",\"limit\":" + std::to_string(limit);
  if (!v.answered()) {  // nothing known: no counts that would read as "all free"
    out += ",\"in_use\":null,\"free\":null,\"holders\":null,\"waiters\":null,\"node\":" +
           json_string(v.node) + ",\"reachable\":false,\"error\":" + json_string(v.message) +
           "}\n";
    return write_out(out);
  }
  out += ",\"in_use\":" + std::to_string(v.in_use) +
         ",\"free\":" + std::to_string(std::max(limit - v.in_use, 0LL)) +
         ",\"fence\":" + std::to_string(v.fence) + ",\"holders\":[";
  for (std::size_t i = 0; i < v.holders.size(); ++i) {
    const auto& h = v.holders[i];
    if (i) out += ",";
    out += "{\"token\":" + json_string(h.token) + ",\"permits\":" + std::to_string(h.permits) +
           ",\"expires_in_ms\":" + std::to_string(h.expires_in_ms) + "}";
  }
  out += "],\"waiters\":[";
  for (std::size_t i = 0; i < v.waiters.size(); ++i) {
    const auto& w = v.waiters[i];
    if (i) out += ",";
    out += "{\"token\":" + json_string(w.id) + ",\"position\":" + std::to_string(i + 1) +
           ",\"expires_in_ms\":" + std::to_string(w.expires_in_ms) +
           ",\"woken\":" + json_bool(w.woken) +
           ",\"takes_handoff\":" + json_bool(w.takes_handoff) +
           ",\"who\":" + (w.who ? json_holder(*w.who) : std::string("null")) + "}";
  }
  out += "],\"node\":" + json_string(v.node) + ",\"reachable\":true}\n";
  write_out(out);
}

void print_semaphore_text(const semaphore_view& v, long long limit) {
  if (!v.answered()) {
    std::printf("%s: unknown (semaphore on %s: no answer)\n", v.key.c_str(), v.node.c_str());
    return;
  }
  std::string out = v.key + ": semaphore, " + std::to_string(v.in_use) + " of " +
                    std::to_string(limit) + " permits in use (" + (v.fair ? "fair" : "unfair") +
                    ")\n";
  if (v.holders.empty()) {
    out += "  no holders\n";
  } else {
    out += "  " + std::to_string(v.holders.size()) +
           (v.holders.size() == 1 ? " holder" : " holders") + ", the first to expire first:\n";
  }
  for (const auto& h : v.holders) {
    out += "    " + h.token + "  " + std::to_string(h.permits) +
           (h.permits == 1 ? " permit" : " permits") + ", expires in " +
           seconds_text(milliseconds(h.expires_in_ms)) + "\n";
  }
  out += waiters_heading(v.waiters.size());
  for (std::size_t i = 0; i < v.waiters.size(); ++i) {
    const auto& w = v.waiters[i];
    out += "    " + std::to_string(i + 1) + ". " + w.id + "  " +
           (w.who ? describe(*w.who) + ", " : std::string()) + (w.woken ? "woken, " : "") +
           (w.takes_handoff ? "takes a handoff, " : "") + entry_text(w) + "\n";
  }
  out += fence_text(v.fence);
  write_out(out);
}

int semaphore_status(const global_options& g, const status_options& o) {
  auto nodes = make_clients(g);
  if (nodes.size() != 1) {
    throw usage_error("--semaphore needs exactly one Redis node: a semaphore lives on one node");
  }
  auto view = inspect_semaphore(nodes.front(), o.key, o.fair, read_queue::yes);
  if (o.json) {
    print_semaphore_json(view, *o.semaphore_limit);
  } else {
    print_semaphore_text(view, *o.semaphore_limit);
  }
  std::fflush(stdout);
  if (!view.answered()) {
    say("could not tell who holds the semaphore: %s did not answer: %s", view.node.c_str(),
        view.message.c_str());
    return is_refusal(view.ec) ? exit_no_permission : exit_unavailable;
  }
  return exit_ok;
}

int status_command(const global_options& g, const status_options& o) {
  if (o.key.empty()) throw usage_error("KEY is empty");
  return o.semaphore_limit ? semaphore_status(g, o) : lock_status(g, o);
}

}  // namespace

subcommand add_status_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<status_options>();
  auto* app = parent.add_subcommand(
      "status", "Show whether KEY is held, by whom, its TTL, fence and waiters (reads only)");
  app->fallthrough();
  app->add_flag("--json", o->json, "One JSON object on stdout");
  auto* semaphore = app->add_option("--semaphore", o->semaphore_limit,
                                    "KEY is a semaphore of LIMIT permits (as for `dlock run "
                                    "--semaphore`): show its holders, permits and waiters")
                        ->type_name("LIMIT")
                        ->check(CLI::Range(1, 1'000'000));
  app->add_flag("--fair", o->fair,
                "The semaphore is a fair one (the library's semaphore_options::fair)")
      ->needs(semaphore);
  app->add_option("KEY", o->key, "The lock's or the semaphore's name")->required();
  return {app, [&g, o] { return status_command(g, *o); }};
}

}  // namespace dlock::cli
