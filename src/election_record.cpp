// SPDX-License-Identifier: Apache-2.0
#include "election_record.hpp"

#include <asio/post.hpp>

#include <algorithm>
#include <charconv>
#include <map>

#include "access.hpp"
#include "algo/quorum_round.hpp"
#include "net/subscriber.hpp"

namespace dlock::detail {
namespace {

// "<term>-<seq>" into an entry's id; false for anything else.
bool parse_id(std::string_view id, record_entry& e) {
  auto dash = id.find('-');
  if (dash == std::string_view::npos) return false;
  auto [p1, e1] = std::from_chars(id.data(), id.data() + dash, e.term);
  auto [p2, e2] = std::from_chars(id.data() + dash + 1, id.data() + id.size(), e.seq);
  return e1 == std::errc{} && e2 == std::errc{} && p1 == id.data() + dash &&
         p2 == id.data() + id.size() && e.term > 0 && (e.seq == 0 || e.seq == 1);
}

record_view parse_view(std::error_code ec, const reply& r) {
  record_view v;
  v.ec = ec;
  if (ec) return v;
  if (!r.is_array() || r.elements().size() != 3) {
    v.ec = errc::protocol_error;
    return v;
  }
  for (const auto& part : r.elements()) {
    if (part.is_error()) {
      v.ec = error_from_reply(part);
      return v;
    }
  }
  const auto& e = r.elements();
  if (e[0].is_string()) v.holder = e[0].str();
  if (e[1].is_integer()) v.pttl = e[1].integer();
  for (const auto& item : e[2].elements()) {
    // [id, [field, value, ...]]; entries that dlock did not write are skipped.
    if (!item.is_array() || item.elements().size() != 2) continue;
    record_entry entry;
    if (!parse_id(item.elements()[0].str(), entry)) continue;
    const auto& fields = item.elements()[1].elements();
    for (std::size_t i = 0; i + 1 < fields.size(); i += 2) {
      if (fields[i].str() == "owner") entry.owner = fields[i + 1].str();
      if (fields[i].str() == "value") entry.value = fields[i + 1].str();
    }
    v.entries.push_back(std::move(entry));
  }
  return v;
}

std::size_t answered(const std::vector<record_view>& views) {
  return static_cast<std::size_t>(
      std::count_if(views.begin(), views.end(), [](const auto& v) { return !v.ec; }));
}

std::size_t holding(const std::vector<record_view>& views, const std::string& owner) {
  return static_cast<std::size_t>(std::count_if(views.begin(), views.end(), [&](const auto& v) {
    return !v.ec && v.holder == owner;
  }));
}

std::error_code not_enough_answers(const std::vector<record_view>& views) {
  for (const auto& v : views) {
    if (v.ec) return answered(views) == 0 ? v.ec : std::error_code(errc::quorum_not_reached);
  }
  return errc::quorum_not_reached;
}

election_event event_of(election_event::change what, const record_entry& e) {
  return election_event{what, e.term, e.value};
}

}  // namespace

void read_records(const std::vector<client>& nodes, const std::string& key,
                  const std::string& record, const std::string& from,
                  std::chrono::milliseconds timeout,
                  unique_function<void(std::vector<record_view>)> done) {
  struct gather {
    std::vector<record_view> views;
    std::size_t pending;
    unique_function<void(std::vector<record_view>)> done;
  };
  auto g = std::make_shared<gather>(
      gather{std::vector<record_view>(nodes.size()), nodes.size(), std::move(done)});
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    command cmd{"GET", key};
    cmd.then({"PTTL", key}).then({"XRANGE", record, from, "+", "COUNT", "32"});
    client node = nodes[i];
    access::start_exec(node, std::move(cmd), timeout, [g, i](std::error_code ec, reply r) {
      g->views[i] = parse_view(ec, r);
      if (--g->pending == 0) g->done(std::move(g->views));
    });
  }
}

// A quorum of nodes holding the owner's key, or enough nodes answering without it that no
// quorum can (the nodes that did not answer might all hold it): the rest is undecided.
enum class held { yes, no, unknown };
held judge_holding(const std::vector<record_view>& views, const std::string& owner) {
  std::size_t quorum = quorum_of(views.size());
  std::size_t holders = holding(views, owner);
  if (holders >= quorum) return held::yes;
  std::size_t without = answered(views) - holders;
  return without >= views.size() - quorum + 1 ? held::no : held::unknown;
}

leader_verdict current_leader(const std::vector<record_view>& views) {
  leader_verdict out;
  if (answered(views) < quorum_of(views.size())) {
    out.ec = not_enough_answers(views);
    return out;
  }
  const record_entry* latest = nullptr;
  for (const auto& v : views) {
    if (v.ec || v.entries.empty()) continue;
    if (!latest || v.entries.back().id() > latest->id()) latest = &v.entries.back();
  }
  if (!latest || latest->seq != 0) return out;
  switch (judge_holding(views, latest->owner)) {
    case held::yes:
      out.leader = leader_info{latest->term, latest->value, latest->owner};
      break;
    case held::no:
      break;
    case held::unknown:
      out.ec = not_enough_answers(views);
      break;
  }
  return out;
}

std::string record_follower::next_from() const {
  if (!last_id_) return "-";
  return std::to_string(last_id_->first) + "-" + std::to_string(last_id_->second);
}

// Entries are taken in id order, merged over the nodes (a node that missed an announcement
// adds nothing, one that has it suffices). A term whose leader's key is gone from too many
// nodes to make a quorum has ended even if no resignation was recorded (the leader crashed,
// was paused or cut off, and its lease expired): reported as ended once, before any later term.
// A resignation whose election entry was never seen (trimmed from the record, or on a node that
// did not answer) reports both. A node that did not answer means a read again soon: its entries
// may be the only copy of a term (one that the later terms then leave out of order, and so out).
std::vector<election_event> record_follower::on_read(const std::vector<record_view>& views) {
  using change = election_event::change;
  std::vector<election_event> out;
  std::map<std::pair<std::uint64_t, int>, const record_entry*> fresh;
  for (const auto& v : views) {
    if (v.ec) continue;
    for (const auto& e : v.entries) {
      if (!last_id_ || e.id() > *last_id_) fresh.emplace(e.id(), &e);
    }
  }
  bool quiet = !judged_once_;  // before the first judged read, only the state is learned
  auto report = [&](change what, const record_entry& e) {
    if (!quiet) out.push_back(event_of(what, e));
  };
  for (const auto& [id, e] : fresh) {
    bool ends_open = open_ && open_->term == e->term;
    // A term already over (its key was seen gone, then its resignation arrives): nothing new.
    if (e->term <= ended_through_ && !ends_open) {
      last_id_ = id;
      continue;
    }
    if (open_ && open_->term < e->term) {
      report(change::ended, *open_);
      end_open();
    }
    if (e->seq == 0) {
      open_ = *e;
      report(change::elected, *e);
    } else {
      if (!ends_open) report(change::elected, *e);
      report(change::ended, *e);
      ended_through_ = std::max(ended_through_, e->term);
      open_.reset();
    }
    last_id_ = id;
  }
  recheck_.reset();
  bool all_answered = answered(views) == views.size();
  if (answered(views) < quorum_of(nodes_)) {
    recheck_ = std::chrono::milliseconds(250);
    return out;
  }
  auto holds = open_ ? judge_holding(views, open_->owner) : held::no;
  if (open_ && holds == held::no) {
    report(change::ended, *open_);
    end_open();
  }
  if (open_ && holds == held::yes) {
    long long soonest = -1;
    for (const auto& v : views) {
      if (!v.ec && v.holder == open_->owner && v.pttl >= 0 && (soonest < 0 || v.pttl < soonest)) {
        soonest = v.pttl;
      }
    }
    // +2 ms: the key is gone, not about to go, when the read comes.
    recheck_ = std::chrono::milliseconds(soonest < 0 ? 1000 : soonest + 2);
  }
  if (!all_answered || holds == held::unknown) {
    recheck_ = std::min(recheck_.value_or(std::chrono::milliseconds(250)),
                        std::chrono::milliseconds(250));
  }
  if (quiet && !(open_ && holds == held::unknown)) {  // else: judged at a later read
    judged_once_ = true;
    if (open_) out.push_back(event_of(change::elected, *open_));
  }
  return out;
}

election_watch::election_watch(std::vector<client> nodes, std::string key, std::string record,
                               std::chrono::milliseconds timeout,
                               std::function<void(const election_event&)> on_change)
    : nodes_(std::move(nodes)),
      key_(std::move(key)),
      record_(std::move(record)),
      timeout_(timeout),
      on_change_(std::move(on_change)),
      follower_(nodes_.size()),
      recheck_timer_(nodes_.front().get_executor()) {}

// Each subscriber reads once subscribed; the first read below does not wait for them (a node
// whose ACL refuses SUBSCRIBE still answers reads).
void election_watch::start() {
  std::weak_ptr<election_watch> weak = shared_from_this();
  auto news = [weak](std::string_view) {
    if (auto self = weak.lock()) self->read();
  };
  for (const auto& n : nodes_) {
    subscribers_.push_back(
        std::make_shared<channel_subscriber>(n, record_, news));
  }
  for (auto& s : subscribers_) s->start();
  asio::post(recheck_timer_.get_executor(), [news] { news(""); });
}

void election_watch::stop() noexcept {
  {
    std::lock_guard lock(deliver_mutex_);
    stopped_ = true;
  }
  for (auto& s : subscribers_) s->stop();
  asio::post(recheck_timer_.get_executor(),
             [self = shared_from_this()] { self->recheck_timer_.cancel(); });
}

void election_watch::read() {
  if (reading_) {
    read_again_ = true;
    return;
  }
  reading_ = true;
  read_records(nodes_, key_, record_, follower_.next_from(), timeout_,
               [self = shared_from_this()](std::vector<record_view> views) {
                 self->reading_ = false;
                 self->on_views(views);
                 if (std::exchange(self->read_again_, false)) self->read();
               });
}

void election_watch::on_views(const std::vector<record_view>& views) {
  auto events = follower_.on_read(views);
  {
    std::lock_guard lock(deliver_mutex_);
    if (stopped_) return;
    for (const auto& e : events) {
      if (stopped_) break;  // the callback stopped its own observation
      on_change_(e);
    }
  }
  auto after = follower_.recheck_after();
  // A node that refuses SUBSCRIBE (an ACL) tells us nothing: look every second instead.
  for (const auto& s : subscribers_) {
    if (s->refused()) after = std::min(after.value_or(std::chrono::milliseconds(1000)),
                                       std::chrono::milliseconds(1000));
  }
  if (after) {
    recheck_timer_.expires_after(*after);
    recheck_timer_.async_wait([weak = weak_from_this()](std::error_code ec) {
      auto self = weak.lock();
      if (!ec && self) self->read();
    });
  } else {
    recheck_timer_.cancel();
  }
}

}  // namespace dlock::detail
