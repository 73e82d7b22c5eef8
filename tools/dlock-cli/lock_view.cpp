// Reading a lock the way the library lays it out (value = owner token, PX expiry, its fencing
// counter and the CLI's own holder note where dlock/key_layout.hpp puts them).
#include "lock_view.hpp"

#include <unistd.h>

#include <algorithm>
#include <future>
#include <map>
#include <memory>

#include "cli.hpp"
#include "dlock/key_layout.hpp"

namespace dlock::cli {
namespace {

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<long long> to_number(std::string_view s) {
  if (s.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    long long v = std::stoll(std::string(s), &used);
    if (used != s.size()) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::vector<node_reply> exec_all(std::vector<client>& nodes, const command& cmd) {
  struct shared {
    std::vector<node_reply> replies;
    std::size_t outstanding;
    std::promise<void> done;
  };
  auto s = std::make_shared<shared>();
  s->replies.resize(nodes.size());
  s->outstanding = nodes.size();
  auto finished = s->done.get_future();
  if (nodes.empty()) return {};
  // Completions run on dlock's single I/O thread, so the counter needs no lock.
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    nodes[i].async_exec(cmd, [s, i](std::error_code ec, reply r) {
      s->replies[i] = node_reply{ec, std::move(r)};
      if (--s->outstanding == 0) s->done.set_value();
    });
  }
  finished.wait();
  return std::move(s->replies);
}

holder_info make_holder_info(std::string token, long pid, std::string command) {
  if (command.size() > 200) command = command.substr(0, 197) + "...";
  return holder_info{std::move(token), hostname(), pid, unix_ms_now(), std::move(command)};
}

// Tab-separated; tabs and newlines in the command are flattened to spaces first.
std::string encode(const holder_info& h) {
  std::string cmd = h.command;
  std::replace_if(cmd.begin(), cmd.end(), [](char c) { return c == '\t' || c == '\n'; }, ' ');
  return h.token + '\t' + h.host + '\t' + std::to_string(h.pid) + '\t' +
         std::to_string(h.since_unix_ms) + '\t' + cmd;
}

std::optional<holder_info> decode_holder(std::string_view text) {
  std::vector<std::string_view> parts;
  for (int i = 0; i < 4; ++i) {
    auto tab = text.find('\t');
    if (tab == std::string_view::npos) return std::nullopt;
    parts.push_back(text.substr(0, tab));
    text.remove_prefix(tab + 1);
  }
  auto pid = to_number(parts[2]);
  auto since = to_number(parts[3]);
  if (!pid || !since) return std::nullopt;
  return holder_info{std::string(parts[0]), std::string(parts[1]), static_cast<long>(*pid), *since,
                     std::string(text)};
}

std::string describe(const holder_info& h) {
  std::string out = h.host + " pid " + std::to_string(h.pid);
  if (!h.command.empty()) out += " (`" + h.command + "`)";
  auto held_ms = unix_ms_now() - h.since_unix_ms;
  if (held_ms >= 0) out += " for " + seconds_text(std::chrono::milliseconds(held_ms));
  return out;
}

void publish_holder(std::vector<client>& nodes, const std::string& key, const holder_info& h,
                    std::chrono::milliseconds ttl, bool wait) {
  command cmd{"SET", holder_key(key), encode(h), "PX", std::to_string(ttl.count())};
  if (wait) {
    (void)exec_all(nodes, cmd);
    return;
  }
  for (auto& node : nodes) node.async_exec(cmd, [](std::error_code, reply) {});
}

void clear_holder(std::vector<client>& nodes, const std::string& key, const std::string& token) {
  // GET, then DEL only where it names us: not atomic, but the annotation is advisory and we
  // still hold the lock here, so no other holder can have written it in between.
  auto current = exec_all(nodes, command{"GET", holder_key(key)});
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (current[i].ec || !current[i].value.is_string()) continue;
    auto h = decode_holder(current[i].value.str());
    if (h && h->token == token) {
      std::error_code ignored;
      (void)nodes[i].exec(command{"DEL", holder_key(key)}, ignored);
    }
  }
}

lock_view inspect_lock(std::vector<client>& nodes, const std::string& key) {
  lock_view view;
  view.key = key;
  view.quorum = nodes.size() / 2 + 1;
  command cmd{"GET", key};
  cmd.then({"PTTL", key}).then({"GET", lock_keys_for(key).fence}).then({"GET", holder_key(key)});
  auto replies = exec_all(nodes, cmd);
  std::map<std::string, std::size_t> votes;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    node_view n;
    n.node = nodes[i].where().to_string();
    const auto& r = replies[i];
    const auto& e = r.value.elements();
    if (r.ec || !r.value.is_array() || e.size() != 4) {
      n.ec = r.ec ? r.ec : std::error_code(errc::protocol_error);
      n.message = r.value.is_error() ? r.value.str() : n.ec.message();
    } else if (e[0].is_error()) {
      // WRONGTYPE: the key exists but is not a lock.
      n.ec = error_from_reply(e[0]);
      n.message = e[0].str();
    } else {
      ++view.reachable;
      if (e[0].is_string()) {
        n.token = e[0].str();
        ++votes[*n.token];
      }
      n.pttl_ms = e[1].integer();
      if (e[2].is_string()) n.fence = static_cast<std::uint64_t>(to_number(e[2].str()).value_or(0));
      if (e[3].is_string()) n.holder = decode_holder(e[3].str());
      view.fence = std::max(view.fence, n.fence);
    }
    view.nodes.push_back(std::move(n));
  }
  for (const auto& [token, count] : votes) {
    if (count > view.holding) {
      view.token = token;
      view.holding = count;
    }
  }
  if (view.token) {
    // The lock stays held until fewer than a quorum of nodes keep the key: the quorum-th
    // largest PTTL among the nodes holding it.
    std::vector<long long> pttls;
    for (const auto& n : view.nodes) {
      if (n.token == view.token) {
        pttls.push_back(n.pttl_ms);
        if (n.holder && n.holder->token == *view.token) view.holder = n.holder;
      }
    }
    std::sort(pttls.rbegin(), pttls.rend());
    std::size_t idx = std::min(view.quorum, pttls.size()) - 1;
    view.pttl_ms = pttls[idx];
  }
  return view;
}

}  // namespace dlock::cli
