// SPDX-License-Identifier: Apache-2.0
#include "election_record.hpp"

#include <asio/post.hpp>

#include <algorithm>
#include <charconv>
#include <map>

#include "access.hpp"
#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "net/subscriber.hpp"

namespace dlock::detail {
namespace {

constexpr std::size_t record_length = 16;  // elect_announce.lua's MAXLEN
constexpr std::size_t max_heard = 64;      // ids awaiting a read; the oldest go first
constexpr std::chrono::milliseconds first_backoff{250}, max_backoff{4000};

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
// quorum can (the nodes that did not answer might all hold it): the rest is undecided. Only the
// views that `counts` accepts can say "without" (a view read before the term began cannot).
enum class held { yes, no, unknown };
template <class Counts>
held judge_holding(const std::vector<record_view>& views, const std::string& owner, Counts counts) {
  std::size_t quorum = quorum_of(views.size());
  if (holding(views, owner) >= quorum) return held::yes;
  auto without =
      static_cast<std::size_t>(std::count_if(views.begin(), views.end(), [&](const auto& v) {
        return !v.ec && v.holder != owner && counts(v);
      }));
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
  switch (judge_holding(views, latest->owner, [](const record_view&) { return true; })) {
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

std::string record_follower::start_read() {
  checking_continuity_ = deaf_;
  if (static_cast<std::size_t>(std::count(listening_.begin(), listening_.end(), true)) >=
      quorum_of(nodes_)) {
    deaf_ = false;  // this read goes out after the subscriptions came back: it covers the time
  }
  verifying_ = std::exchange(heard_, {});
  return next_from();
}

void record_follower::on_subscribed(std::size_t node) {
  if (node < nodes_) listening_[node] = true;
}

// Every term's key is on a quorum of the nodes, and its announcement goes to each of them: with
// a quorum subscribed, one of them hears it. With fewer, a term may begin and end unheard. A
// subscription counts as up until it fails or drops (a node down from the start fails its first
// SUBSCRIBE).
void record_follower::on_unsubscribed(std::size_t node) {
  if (node >= nodes_) return;
  listening_[node] = false;
  if (static_cast<std::size_t>(std::count(listening_.begin(), listening_.end(), true)) <
      quorum_of(nodes_)) {
    deaf_ = true;
  }
}

void record_follower::on_heard(std::size_t node, std::string_view id) {
  record_entry e;
  if (node >= nodes_ || !parse_id(id, e) || (last_id_ && e.id() <= *last_id_)) return;
  heard_.push_back({node, e.id()});
  trim_heard();
}

// At most max_heard ids wait to be checked; one dropped unchecked may have been missed.
void record_follower::trim_heard() {
  if (heard_.size() <= max_heard) return;
  heard_.erase(heard_.begin(), heard_.end() - static_cast<std::ptrdiff_t>(max_heard));
  missed_ = true;
}

std::uint64_t record_follower::last_term() const noexcept {
  return std::max(ended_through_, open_ ? open_->term : 0);
}

// Whether this read shows that changes were missed, which only a read that comes too late can:
// an id heard before it went out is gone from the record of the node that announced it (a
// script records before it publishes, so the entry was there); a record at its full length no
// longer reaches back to the last id taken (trimmed); or news may have gone unheard meanwhile
// and too few nodes' records still hold the last id taken to show what happened in between
// (the record expires with each leader's key: terms of leaders that crashed leave no trace).
bool record_follower::lost_news(const std::vector<record_view>& views) {
  auto reaches_back = [&](const record_view& v) {
    return !v.ec && last_id_ && !v.entries.empty() && v.entries.front().id() == *last_id_;
  };
  bool lost = false;
  for (const auto& h : verifying_) {
    const auto& v = views[h.node];
    if (v.ec) {
      if (!last_id_ || h.id > *last_id_) heard_.push_back(h);  // that node's next answer tells
    } else if (!last_id_ || h.id > *last_id_) {
      lost |= std::none_of(v.entries.begin(), v.entries.end(),
                           [&](const auto& e) { return e.id() == h.id; });
    }
  }
  verifying_.clear();
  trim_heard();
  for (const auto& v : views) {
    if (!v.ec && v.entries.size() >= record_length && !reaches_back(v)) lost = true;
  }
  // A node's record vouches for that node only. A term is recorded on a quorum, so records that
  // reach back on nodes - quorum + 1 of them show every term since: any quorum meets them.
  auto vouching = static_cast<std::size_t>(std::count_if(views.begin(), views.end(), reaches_back));
  if (std::exchange(checking_continuity_, false) && vouching < nodes_ - quorum_of(nodes_) + 1) {
    lost = true;
  }
  return lost;
}

// Once, before the next change: several gaps with nothing reported between them are one.
void record_follower::report_missed(std::vector<election_event>& out) {
  if (!std::exchange(missed_, false) || missed_reported_) return;
  out.push_back(election_event{election_event::change::missed, last_term(), {}});
  missed_reported_ = true;
}

// Entries are taken in id order, merged over the nodes (a node that missed an announcement
// adds nothing, one that has it suffices). A term whose leader's key is gone from too many
// nodes to make a quorum has ended even if no resignation was recorded (the leader crashed,
// was paused or cut off, and its lease expired): reported as ended once, before any later term.
// Only views read after the term began count against it: the nodes are read in parallel, and a
// read that straddles a takeover can find the new leader's entry on one node while the others
// were read before its key reached them. A read sent once the term was known comes after its
// grant, and so does a view that holds its entry (announced after the grant, only where the
// key is the leader's).
// A resignation whose election entry was never seen (trimmed from the record, or on a node that
// did not answer) reports both. A node that did not answer means a read again (after a backoff
// while it stays silent): its entries may be the only copy of a term (one that the later terms
// then leave out of order, and so out).
std::vector<election_event> record_follower::on_read(const std::vector<record_view>& views) {
  using change = election_event::change;
  std::vector<election_event> out;
  const bool judged = answered(views) >= quorum_of(nodes_);
  const bool quiet = !judged_once_;  // before the first judged read, only the state is learned
  const std::optional<std::uint64_t> known_term =
      open_ ? std::optional<std::uint64_t>(open_->term) : std::nullopt;
  if (quiet) {
    verifying_.clear();
    checking_continuity_ = false;
  } else if (judged) {
    missed_ = lost_news(views) || missed_;
  } else {  // too few answers to tell: what this read was to confirm waits for a later one
    heard_.insert(heard_.begin(), verifying_.begin(), verifying_.end());
    verifying_.clear();
    trim_heard();
    deaf_ = deaf_ || std::exchange(checking_continuity_, false);
  }
  std::map<entry_id, const record_entry*> fresh;
  for (const auto& v : views) {
    if (v.ec) continue;
    for (const auto& e : v.entries) {
      if (!last_id_ || e.id() > *last_id_) fresh.emplace(e.id(), &e);
    }
  }
  auto report = [&](change what, const record_entry& e) {
    if (quiet) return;
    out.push_back(event_of(what, e));
    missed_reported_ = false;
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
    if (!ends_open) report_missed(out);  // what was missed came before this term
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
  const bool none_silent = std::none_of(views.begin(), views.end(),
                                        [](const record_view& v) { return is_silence(v.ec); });
  silent_reads_ = none_silent ? 0 : std::min(silent_reads_ + 1, 16);
  // A node down for long is read less and less often; news from the others still comes at
  // once through their subscriptions, and the silent node's own comes when it subscribes again.
  auto backoff = first_backoff;
  for (int i = 1; i < silent_reads_ && backoff < max_backoff; ++i) backoff *= 2;
  backoff = std::min(backoff, max_backoff);
  if (!judged) {
    recheck_ = backoff;
    return out;
  }
  bool stale = false;  // a view read before the open term began, which cannot judge it
  auto newer = [&](const record_view& v) {
    bool after = known_term == open_->term ||
                 (!v.entries.empty() && v.entries.back().id() >= entry_id{open_->term, 0});
    stale = stale || !after;
    return after;
  };
  auto holds = open_ ? judge_holding(views, open_->owner, newer) : held::no;
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
  if (answered(views) < views.size() || holds == held::unknown) {
    recheck_ = std::min(recheck_.value_or(backoff), backoff);
  }
  // Undecided only for views that came too early: the next read's all count.
  if (holds == held::unknown && stale) recheck_ = std::chrono::milliseconds(0);
  if (quiet && !(open_ && holds == held::unknown)) {  // else: judged at a later read
    judged_once_ = true;
    if (open_) out.push_back(event_of(change::elected, *open_));
  }
  if (!quiet) report_missed(out);
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

// Each subscriber reads once subscribed, and at each message; the first read below does not
// wait for them (a node whose ACL refuses SUBSCRIBE still answers reads). The follower hears of
// each: a message names the entry just recorded, and a subscription lost means news may go
// unheard until it is back.
void election_watch::start() {
  std::weak_ptr<election_watch> weak = shared_from_this();
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    subscribers_.push_back(std::make_shared<channel_subscriber>(
        access::subscription_site_of(nodes_[i]), record_,
        [weak, i](std::string_view payload) {
          if (auto self = weak.lock()) self->on_news(i, payload);
        },
        [weak, i] {
          if (auto self = weak.lock()) self->follower_.on_unsubscribed(i);
        }));
  }
  for (auto& s : subscribers_) s->start();
  asio::post(recheck_timer_.get_executor(), [weak] {
    if (auto self = weak.lock()) self->read();
  });
}

void election_watch::on_news(std::size_t node, std::string_view payload) {
  if (payload.empty()) {
    follower_.on_subscribed(node);  // what was published before it was not heard: read
  } else {
    follower_.on_heard(node, payload);
  }
  read();
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
  read_records(nodes_, key_, record_, follower_.start_read(), timeout_,
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
