// SPDX-License-Identifier: Apache-2.0
// election_record.hpp: reading and following an election's record (dlock/election.hpp). Private.
//   record_entry     one entry of the record: a term that began (elected) or ended (resigned)
//   record_view      one node's answer to a read: the lock key's value and PTTL, the entries
//   read_records     reads every node at once (GET, PTTL, XRANGE in one round trip each)
//   current_leader   who leads, by the views of a quorum of nodes
//   record_follower  sans-io: turns successive reads (and what the subscriptions heard) into
//                    the events observers get, in term order, says when changes may have been
//                    missed, and when to read again although no news came
//   election_watch   an observe() at work: a subscriber per node, reads, the callback
#pragma once

#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/election.hpp"

namespace dlock::detail {

class channel_subscriber;

struct record_entry {
  std::uint64_t term = 0;
  int seq = 0;  // 0: elected, 1: resigned (the id is "<term>-<seq>")
  std::string owner, value;
  std::pair<std::uint64_t, int> id() const noexcept { return {term, seq}; }
};

struct record_view {
  std::error_code ec;                 // the node did not answer (or answered an error)
  std::optional<std::string> holder;  // the lock key's value; none when it is free
  long long pttl = -2;                // the lock key's PTTL
  std::vector<record_entry> entries;  // ascending ids, from the read's start
};

// `from`: XRANGE's inclusive start, "-" for the whole record. `done` gets one view per node,
// on the I/O thread.
void read_records(const std::vector<client>& nodes, const std::string& key,
                  const std::string& record, const std::string& from,
                  std::chrono::milliseconds timeout,
                  unique_function<void(std::vector<record_view>)> done);

struct leader_verdict {
  leader_info leader;
  std::error_code ec;  // fewer than a quorum answered
};
// The latest entry of all views, when it is an election whose owner holds the lock key on a
// quorum of the nodes.
leader_verdict current_leader(const std::vector<record_view>& views);

class record_follower {
 public:
  explicit record_follower(std::size_t nodes) : nodes_(nodes), listening_(nodes, true) {}
  // The start of the next read: "-" before anything was seen, else the last id taken.
  std::string next_from() const;
  // A read goes out (its XRANGE starts at next_from()): it is the one to confirm the ids heard
  // so far, and that nothing went unheard while too few subscriptions were up.
  std::string start_read();
  // One read's views: the events to report, in order. The first read that a quorum answers
  // reports only the current leader's elected, if there is one.
  std::vector<election_event> on_read(const std::vector<record_view>& views);
  // The subscriptions: one confirmed, one lost (news published on its node may now go
  // unheard), and a message, which names the id of an entry just recorded on its node.
  void on_subscribed(std::size_t node);
  void on_unsubscribed(std::size_t node);
  void on_heard(std::size_t node, std::string_view id);
  // When to read again without news: as the current leader's key expires (its PTTL on the
  // nodes that hold it); at once when views read before a term began left it undecided; after
  // a backoff (250 ms doubling to 4 s, while nodes stay silent) when too few nodes answered to
  // judge, or one did not answer at all; none: no leader, and every node answered.
  std::optional<std::chrono::milliseconds> recheck_after() const noexcept { return recheck_; }

 private:
  using entry_id = std::pair<std::uint64_t, int>;
  struct heard_id {
    std::size_t node;
    entry_id id;
  };
  bool lost_news(const std::vector<record_view>& views);
  void report_missed(std::vector<election_event>& out);
  void trim_heard();
  std::uint64_t last_term() const noexcept;

  std::size_t nodes_;
  bool judged_once_ = false;
  std::optional<entry_id> last_id_;
  std::optional<record_entry> open_;  // the term that began and has not been seen to end
  std::uint64_t ended_through_ = 0;   // the latest term seen to end: its entries are old news
  void end_open() {
    ended_through_ = std::max(ended_through_, open_->term);
    open_.reset();
  }
  // What may have been missed: the subscriptions up, a time when too few were (deaf_), and
  // the ids heard that the next read (verifying_) must find on the node that announced them.
  std::vector<bool> listening_;
  bool deaf_ = false, checking_continuity_ = false;
  std::vector<heard_id> heard_, verifying_;
  bool missed_ = false;           // changes were missed; reported before the next change
  bool missed_reported_ = false;  // the last event reported says so already
  int silent_reads_ = 0;          // reads in a row that a node did not answer
  std::optional<std::chrono::milliseconds> recheck_;
};

class election_watch : public std::enable_shared_from_this<election_watch> {
 public:
  election_watch(std::vector<client> nodes, std::string key, std::string record,
                 std::chrono::milliseconds timeout,
                 std::function<void(const election_event&)> on_change);
  void start();
  void stop() noexcept;

 private:
  void read();  // I/O thread, as everything below
  void on_news(std::size_t node, std::string_view payload);
  void on_views(const std::vector<record_view>& views);

  std::vector<client> nodes_;
  std::string key_, record_;
  std::chrono::milliseconds timeout_;
  std::function<void(const election_event&)> on_change_;
  std::vector<std::shared_ptr<channel_subscriber>> subscribers_;
  record_follower follower_;
  asio::steady_timer recheck_timer_;
  bool reading_ = false;
  bool read_again_ = false;  // news came during a read
  // Held while the callback runs: stop() from another thread waits for it; recursive, so that
  // a callback may stop its own observation.
  std::recursive_mutex deliver_mutex_;
  bool stopped_ = false;  // under deliver_mutex_
};

}  // namespace dlock::detail
