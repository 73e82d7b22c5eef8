// SPDX-License-Identifier: Apache-2.0
// Reading a lock or a semaphore the way the library lays it out (dlock/key_layout.hpp names the
// keys; src/lua/acquire.lua and sem_*acquire.lua say what they hold): a lock's value = owner
// token with a PX expiry, its fencing counter, its waiter queue (zset: acquisition id -> ticket)
// and waiter info (hash: id -> "<deadline ms> <channel>[ <ttl ms> <round>]"), and the CLI's own
// holder note; a semaphore's expiry set, weights, queue, waiter info and fence.
#include "lock_view.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <future>
#include <map>
#include <memory>
#include <span>

#include "cli.hpp"
#include "dlock/cli/scripts.hpp"
#include "dlock/key_layout.hpp"
#include "key_names.hpp"

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

std::optional<double> to_double(std::string_view s) {
  if (s.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    double v = std::stod(std::string(s), &used);
    if (used != s.size()) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The server's clock in ms, from TIME's [seconds, microseconds]: deadlines and expiries in the
// keys are written in it, so they are judged by it, never by ours.
long long server_ms(const reply& time) {
  const auto& e = time.elements();
  if (e.size() != 2) return 0;
  return to_number(e[0].str()).value_or(0) * 1000 + to_number(e[1].str()).value_or(0) / 1000;
}

// A flat [field, value, field, value ...] reply (HGETALL, ZRANGE ... WITHSCORES), in order.
std::vector<std::pair<std::string, std::string>> pairs(const reply& flat) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto& e = flat.elements();
  for (std::size_t i = 0; i + 1 < e.size(); i += 2) out.emplace_back(e[i].str(), e[i + 1].str());
  return out;
}

std::map<std::string, std::string> hash_of(const reply& flat) {
  auto p = pairs(flat);
  return {p.begin(), p.end()};
}

// Each waiter's note, where its command left one (publish_waiter).
void add_notes(std::vector<waiter_view>& waiters, const std::map<std::string, std::string>& notes) {
  for (auto& w : waiters) {
    auto note = notes.find(w.id);
    if (note == notes.end()) continue;
    auto who = decode_holder(note->second);
    if (who && who->token == w.id) w.who = std::move(who);
  }
}

// A waiter info entry split at its spaces; its first field is the deadline in server ms.
std::vector<std::string_view> fields(std::string_view entry) {
  std::vector<std::string_view> out;
  while (!entry.empty()) {
    auto space = entry.find(' ');
    out.push_back(entry.substr(0, space));
    if (space == std::string_view::npos) break;
    entry.remove_prefix(space + 1);
  }
  return out;
}

// The live waiters of one queue in its order. Scripts drop a member whose info entry is missing
// or past its deadline (a waiter that crashed) when they next meet it, so it is not listed.
// `mark` reads what the entry's other fields say.
template <class Mark>
std::vector<waiter_view> live_waiters(const reply& queue,
                                      const std::map<std::string, std::string>& info,
                                      long long now_ms, Mark mark) {
  std::vector<waiter_view> out;
  for (const auto& member : queue.elements()) {
    auto entry = info.find(member.str());
    if (entry == info.end()) continue;
    auto f = fields(entry->second);
    auto deadline = f.empty() ? std::nullopt : to_number(f[0]);
    if (!deadline || *deadline <= now_ms) continue;
    waiter_view w;
    w.id = member.str();
    w.expires_in_ms = *deadline - now_ms;
    mark(w, f);
    out.push_back(std::move(w));
  }
  return out;
}

// The first error among a pipeline's replies (WRONGTYPE: a key that is not what dlock keeps).
const reply* first_error(std::span<const reply> replies) {
  for (const auto& r : replies) {
    if (r.is_error()) return &r;
  }
  return nullptr;
}

// One list from every node's queue: by mean position (the nodes' queues agree unless a node
// missed some attempts), then by where each was first seen.
std::vector<waiter_view> merge_queues(const std::vector<std::vector<waiter_view>>& queues) {
  struct merged {
    waiter_view w;
    double position_sum = 0;
    std::size_t first_seen = 0;
  };
  std::map<std::string, merged> by_id;
  for (const auto& queue : queues) {
    for (std::size_t position = 0; position < queue.size(); ++position) {
      const auto& w = queue[position];
      auto [it, added] = by_id.try_emplace(w.id, merged{w, 0, by_id.size()});
      auto& m = it->second;
      if (!added) {
        ++m.w.nodes;
        m.w.expires_in_ms = std::max(m.w.expires_in_ms, w.expires_in_ms);
        m.w.takes_handoff = m.w.takes_handoff || w.takes_handoff;
      }
      m.position_sum += static_cast<double>(position);
    }
  }
  std::vector<merged> all;
  for (auto& [id, m] : by_id) all.push_back(std::move(m));
  std::sort(all.begin(), all.end(), [](const merged& a, const merged& b) {
    double pa = a.position_sum / static_cast<double>(a.w.nodes);
    double pb = b.position_sum / static_cast<double>(b.w.nodes);
    return pa != pb ? pa < pb : a.first_seen < b.first_seen;
  });
  std::vector<waiter_view> out;
  for (auto& m : all) out.push_back(std::move(m.w));
  return out;
}

}  // namespace

std::vector<node_reply> exec_each(std::vector<client>& nodes, const std::vector<command>& cmds) {
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
    nodes[i].async_exec(cmds[i], [s, i](std::error_code ec, reply r) {
      s->replies[i] = node_reply{ec, std::move(r)};
      if (--s->outstanding == 0) s->done.set_value();
    });
  }
  finished.wait();
  return std::move(s->replies);
}

std::vector<node_reply> exec_all(std::vector<client>& nodes, const command& cmd) {
  return exec_each(nodes, std::vector<command>(nodes.size(), cmd));
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

void publish_waiter(std::vector<client>& nodes, const std::string& key, const holder_info& w) {
  const auto notes = waiter_notes_key(key);
  command cmd{"HSET", notes, w.token, encode(w)};
  cmd.then({"PEXPIRE", notes, std::to_string(waiter_note_ttl.count())});
  for (auto& node : nodes) node.async_exec(cmd, [](std::error_code, reply) {});
}

void clear_waiter(std::vector<client>& nodes, const std::string& key, const std::string& id,
                  bool awaited) {
  command cmd{"HDEL", waiter_notes_key(key), id};
  if (awaited) {
    (void)exec_all(nodes, cmd);
    return;
  }
  for (auto& node : nodes) node.async_exec(cmd, [](std::error_code, reply) {});
}

void clear_holder(std::vector<client>& nodes, const std::string& key, const std::string& token) {
  // Unawaited: sent before the release on the same connection, it runs before it, and off the
  // path from CMD's end to the next holder's start.
  command cmd{"EVAL", std::string(scripts::holder_note_clear_body), "1", holder_key(key), token};
  for (auto& node : nodes) node.async_exec(cmd, [](std::error_code, reply) {});
}

namespace {

// The node, and on a cluster the master that serves the key and the key's slot.
std::string node_label(const client& node, const std::string& key) {
  if (!node.where().is_cluster()) return node.where().to_string();
  std::error_code ec;
  std::string master = node.node_for(key, ec);
  return (master.empty() ? node.where().to_string() : master) + " (slot " +
         std::to_string(hash_slot(key)) + ")";
}

}  // namespace

std::string lock_view::failures() const {
  std::string why;
  for (const auto& n : nodes) {
    if (n.ec) why += (why.empty() ? "" : "; ") + n.node + ": " + n.message;
  }
  return why;
}

std::vector<other_kind> other_kinds_held(std::vector<client>& nodes, const std::string& key) {
  std::vector<other_kind> out;
  if (nodes.size() != 1) return out;  // read-write locks and semaphores live on one node
  auto look = [&](const char* kind, const semaphore_view& v) {
    if (!v.answered()) {
      out.push_back({.kind = kind, .holders = 0, .answered = false});
    } else if (!v.holders.empty()) {
      out.push_back({kind, v.holders.size(), v.fence, v.waiters.size()});
    }
  };
  const auto queue = read_queue::yes;
  look("read-write lock",
       inspect_semaphore(nodes[0], key, shared_mutex_keys_for(key), true, queue));
  look("semaphore", inspect_semaphore(nodes[0], key, false, queue));
  look("fair semaphore", inspect_semaphore(nodes[0], key, true, queue));
  return out;
}

std::optional<std::string> marked_kind(std::string_view value) {
  value = mark_part(value);
  if (value == read_write_lock_mark) return "a read-write lock";
  auto mark = parse_semaphore_mark(value);
  if (!mark) return value.starts_with(semaphore_mark_prefix) ? std::optional("a semaphore")
                                                             : std::nullopt;
  return "a semaphore of " + std::to_string(mark->limit) +
         (mark->limit == 1 ? " permit (" : " permits (") + (mark->fair ? "fair)" : "unfair)");
}

std::string held_as(std::string_view value) {
  if (auto kind = marked_kind(value)) return *kind;
  bool count = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
  return count ? "a latch or a lock" : "a lock";
}

lock_view inspect_lock(std::vector<client>& given, const std::string& key, read_queue queue,
                       int copies) {
  lock_view view;
  view.key = key;
  // In copies, the one cluster client is a node per copy, each copy under its own key (as the
  // library's mutex sees it).
  const bool in_copies = copies > 1 && given.size() == 1;
  std::vector<client> nodes = in_copies ? std::vector<client>(static_cast<std::size_t>(copies),
                                                              given.front())
                                        : given;
  std::vector<std::string> lock_keys;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    lock_keys.push_back(in_copies ? lock_copy_key(key, static_cast<int>(i), copies) : key);
  }
  view.quorum = nodes.size() / 2 + 1;
  const bool with_queue = queue == read_queue::yes;
  std::vector<command> cmds;
  for (const auto& lock_key : lock_keys) {
    const auto keys = lock_keys_for(lock_key);
    command cmd{"GET", lock_key};
    cmd.then({"PTTL", lock_key}).then({"GET", keys.fence}).then({"GET", holder_key(lock_key)});
    if (with_queue) {
      cmd.then({"ZRANGE", keys.waiters, "0", "-1"})
          .then({"HGETALL", keys.waiter_info})
          .then({"TIME"})
          .then({"HGETALL", waiter_notes_key(lock_key)});  // in the lock key's slot
    }
    cmds.push_back(std::move(cmd));
  }
  const std::size_t expected = with_queue ? 8 : 4;
  std::map<std::string, std::string> notes;  // waiter id -> note, from any node
  auto replies = exec_each(nodes, cmds);
  std::map<std::string, std::size_t> votes;
  std::vector<std::vector<waiter_view>> queues;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    node_view n;
    n.node = node_label(nodes[i], lock_keys[i]);
    if (in_copies) n.node += " copy " + std::to_string(i);
    const auto& r = replies[i];
    const auto& e = r.value.elements();
    if (r.ec || !r.value.is_array() || e.size() != expected) {
      n.ec = r.ec ? r.ec : std::error_code(errc::protocol_error);
      n.message = with_remedy(n.ec, r.value.is_error() ? r.value.str() : n.ec.message());
    } else if (const reply* wrong = first_error(e)) {
      // WRONGTYPE: the key exists but is not a lock.
      n.ec = error_from_reply(*wrong);
      n.message = with_remedy(n.ec, wrong->str());
    } else {
      ++view.reachable;
      if (e[0].is_string()) {
        n.token = e[0].str();
        ++votes[*n.token];
      }
      n.pttl_ms = e[1].integer();
      // A count below 2^40 is no token: a plain INCR made the counter again after it expired
      // (a lock's first try as a transaction), and the next grant starts it from the clock.
      if (e[2].is_string()) n.fence = static_cast<std::uint64_t>(to_number(e[2].str()).value_or(0));
      if (n.fence < (std::uint64_t{1} << 40)) n.fence = 0;
      if (e[3].is_string()) n.holder = decode_holder(e[3].str());
      view.fence = std::max(view.fence, n.fence);
      if (with_queue) {
        // "<deadline ms> <channel> <ttl ms> <round>": the waiter accepts a handoff.
        queues.push_back(live_waiters(e[4], hash_of(e[5]), server_ms(e[6]),
                                      [](waiter_view& w, const std::vector<std::string_view>& f) {
                                        w.takes_handoff = f.size() >= 4;
                                      }));
        n.waiters = queues.back().size();
        notes.merge(hash_of(e[7]));
      }
    }
    view.nodes.push_back(std::move(n));
  }
  view.waiters = merge_queues(queues);
  if (in_copies && with_queue) {  // the CLI notes its waiters once, beside the name's own key
    std::error_code ec;
    reply all = given.front().exec(command{"HGETALL", waiter_notes_key(key)}, ec);
    if (!ec && all.is_array()) notes = hash_of(all);
  }
  add_notes(view.waiters, notes);
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
    // A key without a TTL (PTTL -1) never expires: the longest of all.
    auto longer = [](long long a, long long b) {
      return (a == -1 ? LLONG_MAX : a) > (b == -1 ? LLONG_MAX : b);
    };
    std::sort(pttls.begin(), pttls.end(), longer);
    std::size_t idx = std::min(view.quorum, pttls.size()) - 1;
    view.pttl_ms = pttls[idx];
    // The CLI notes the holder once, beside the name's own key (publish_holder on the client).
    if (in_copies) {
      std::error_code ec;
      reply note = given.front().exec(command{"GET", holder_key(key)}, ec);
      if (!ec && note.is_string()) {
        auto h = decode_holder(note.str());
        if (h && h->token == *view.token) view.holder = h;
      }
    }
  }
  return view;
}

semaphore_view inspect_semaphore(client& node, const std::string& key, bool fair,
                                 read_queue queue) {
  return inspect_semaphore(node, key, semaphore_keys_for(key, fair), fair, queue);
}

semaphore_view inspect_semaphore(client& node, const std::string& key,
                                 const semaphore_keys& keys, bool fair, read_queue queue) {
  semaphore_view view;
  view.key = key;
  view.fair = fair;
  view.node = node_label(node, key);
  // A fair semaphore's waiters sit in its expiry set too, told apart from holders by their info
  // entry, so it reads the info even when the queue is not wanted.
  const bool with_queue = queue == read_queue::yes, with_info = with_queue || fair;
  command cmd{"TIME"};
  cmd.then({"ZRANGE", keys.expiries, "0", "-1", "WITHSCORES"})
      .then({"HGETALL", keys.weights})
      .then({"GET", keys.fence});
  if (with_info) cmd.then({"HGETALL", keys.waiter_info});
  if (with_queue) {
    cmd.then({"ZRANGE", keys.waiters, "0", "-1"}).then({"HGETALL", waiter_notes_key(key)});
  }
  // A solo holder lives in the name's key alone (name_mark.lua).
  cmd.then({"GET", keys.name}).then({"PTTL", keys.name});
  const std::size_t expected = 6 + (with_info ? 1 : 0) + (with_queue ? 2 : 0);
  std::error_code ec;
  reply r = node.exec(cmd, ec);
  const auto& e = r.elements();
  if (ec || !r.is_array() || e.size() != expected) {
    view.ec = ec ? ec : std::error_code(errc::protocol_error);
    view.message = with_remedy(view.ec, r.is_error() ? r.str() : view.ec.message());
    return view;
  }
  // A name's key of another type is no solo holder: its WRONGTYPE is no error here.
  const reply& name_value = e[expected - 2];
  if (const reply* wrong = first_error(std::span<const reply>(e).first(expected - 2))) {
    view.ec = error_from_reply(*wrong);
    view.message = with_remedy(view.ec, wrong->str());
    return view;
  }
  const long long now = server_ms(e[0]);
  const auto weights = hash_of(e[2]);
  if (name_value.is_string()) {
    const bool rw = keys.expiries == shared_mutex_keys_for(key).expiries;
    auto solo = parse_solo(name_value.str());
    auto mark = solo ? parse_semaphore_mark(solo->mark) : std::nullopt;
    if (solo && (rw ? solo->mark == read_write_lock_mark : mark && mark->fair == fair) &&
        e[expected - 1].is_integer() && e[expected - 1].integer() > 0) {
      view.holders.push_back({std::string(solo->token), solo->permits, e[expected - 1].integer()});
      view.in_use += solo->permits;
    }
  }
  if (e[3].is_string()) view.fence = static_cast<std::uint64_t>(to_number(e[3].str()).value_or(0));
  const auto info = with_info ? hash_of(e[4]) : std::map<std::string, std::string>{};
  // Holders: unexpired entries without waiter info (a grant deletes it). An expired one is gone
  // though the next script has yet to remove it: its permits are free.
  for (const auto& [token, score] : pairs(e[1])) {
    auto expiry = to_double(score);
    if (!expiry || *expiry <= static_cast<double>(now) || info.contains(token)) continue;
    auto weight = weights.find(token);
    long long permits = weight == weights.end() ? 1 : to_number(weight->second).value_or(1);
    view.holders.push_back({token, permits, static_cast<long long>(*expiry) - now});
    view.in_use += permits;
  }
  if (with_queue) {
    // "<deadline ms>[ <channel>[ woken]]": " woken" until the waiter's next attempt; or
    // "<deadline ms> <channel> h<permits>:<ttl ms>:<attempt>:<limit>" (unfair; "f..." fair): a
    // release may make it a holder (sem_release.lua).
    view.waiters = live_waiters(e[5], info, now,
                                [](waiter_view& w, const std::vector<std::string_view>& f) {
                                  w.woken = f.size() >= 3 && f.back() == "woken";
                                  w.takes_handoff = f.size() >= 3 && (f[2].starts_with('h') ||
                                                                      f[2].starts_with('f'));
                                });
    add_notes(view.waiters, hash_of(e[6]));
  }
  return view;
}

}  // namespace dlock::cli
