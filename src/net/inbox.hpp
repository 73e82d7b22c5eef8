// SPDX-License-Identifier: Apache-2.0
// net/inbox.hpp: where waiters of this process are woken. Private.
//   inbox             one pub/sub channel per client (dlock:wake:<random>), subscribed on a
//                     connection of its own; a release publishes the token of the waiter it
//                     wakes (or "<token> <fence> <attempt>" when it handed that waiter the
//                     lock), and the inbox calls that waiter's listener. A cluster client has
//                     one per slot it waits in, sharded: "s:{tag}dlock:wake:<random>" hashes to
//                     the slot, is SSUBSCRIBEd on the slot's master, and the scripts SPUBLISH
//                     to it, so that a wake-up costs that node only, and PUBLISH's count (local
//                     to the node that runs the script) means what release.lua takes it for
//   shard_subscribers a cluster client's subscriber connections, one per master, shared by the
//                     slot inboxes whose slots it serves (a waiter in every slot still costs
//                     one connection per master, not one per slot)
//   wake_waiter       the waiting side of one acquisition, lock's or semaphore's: listens on the
//                     inboxes of its nodes, subscribes the missing ones, and sleeps between two
//                     attempts until the backstop delay ends or a wake-up cuts it short
// All members run on the I/O thread.
#pragma once

#include <asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "net/cluster.hpp"
#include "net/connection.hpp"

namespace dlock::detail {

class inbox;

// Thread-safe (the client's destructor closes it from any thread); the rest runs on the I/O
// thread.
class shard_subscribers : public std::enable_shared_from_this<shard_subscribers> {
 public:
  shard_subscribers(std::shared_ptr<cluster_router> router, client_options options);
  // The subscriber connection to `master` (made on first use; null when it cannot be: the TLS
  // files are unreadable), which passes `channel`'s messages, the end of its subscription and
  // the connection's drops to `box` from now on.
  std::shared_ptr<connection> attach(const host_port& master, const std::string& channel,
                                     std::weak_ptr<inbox> box);
  // `channel` speaks for nothing on `master`'s connection any more (its slot moved).
  void detach(const host_port& master, const std::string& channel);
  void close();

 private:
  struct subscriber {
    std::shared_ptr<connection> conn;
    std::unordered_map<std::string, std::weak_ptr<inbox>> by_channel;
  };
  // The inboxes a connection's drop concerns, or the one a message names (under mu_).
  std::vector<std::shared_ptr<inbox>> receivers(const std::shared_ptr<subscriber>& sub,
                                                const reply* message) const;

  std::shared_ptr<cluster_router> router_;
  client_options options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<subscriber>> by_master_;  // host_port text
};

class inbox : public std::enable_shared_from_this<inbox> {
 public:
  inbox(endpoint where, client_options options);
  // Sharded: the waits of a redis-cluster:// client in `slot`. Subscribes on the master that
  // `router` says serves the slot, and moves when the slot does (Redis then ends the
  // subscription: an unasked "sunsubscribe").
  inbox(std::shared_ptr<cluster_router> router, std::shared_ptr<shard_subscribers> subscribers,
        std::uint16_t slot, client_options options);

  const std::string& channel() const noexcept { return channel_; }
  // True once SUBSCRIBE is confirmed on the current socket; false again after it drops.
  bool subscribed() const noexcept { return subscribed_; }
  // Subscribes if needed; `done` runs when confirmed or failed. After a failure, calls within
  // a backoff (250 ms, doubling to 10 s) fail at once with the same error.
  void subscribe(unique_function<void(std::error_code)> done);

  // `on_wake` runs for each message naming `token`, with what followed the token ("" for a
  // plain wake-up, "<fence> <round>" for a handoff), and once with "" for every waiter when
  // a confirmed subscription drops (a message may have been lost then: try again).
  void listen(const std::string& token, std::function<void(std::string_view)> on_wake);
  // Also ends the watches (watch_key) named `token`.
  void forget(const std::string& token);
  // After an acquisition that queued here gave up (forget() came first): a message naming
  // `token` that arrives before `until` (a handoff or a wake-up) runs `give_back` instead of
  // being dropped. An attempt that ran after the give-up's cleanup (it had timed out on its
  // way) may have queued the token again, and a release then hands it a lock or permits nobody
  // will use or release (without this they would be held by nobody for a TTL), or wakes it
  // instead of a live waiter. `give_back` must be idempotent: every such message runs it.
  void remember_gave_up(const std::string& token, clock::time_point until,
                        std::function<void()> give_back);
  // Calls `on_change` once, when `key` is next deleted, overwritten, extended or expires, or at
  // once when `changed_already` (may be null: never) says the value the watch read (a GET's
  // reply) shows a change that came first. For a waiter behind a holder of another library
  // (node-redlock, redsync...), whose release publishes nothing, and for a kept-alive lease
  // whose key someone else deletes. Redis's client-side caching does it: `requests` (the
  // node's request connection) turns CLIENT TRACKING on, redirected to this inbox's connection
  // (OPTIN NOLOOP), and GETs the key under CLIENT CACHING yes; the key's next change sends this
  // inbox an invalidation. One-shot, as tracking is. NOLOOP: a change `requests` itself makes
  // (a renewal of ours) sends nothing, but ends the tracking, so the caller watches again after
  // it. `watcher` names the watch for forget(). Nothing where the node cannot (can_track(),
  // not subscribed, servers before Redis 6, users the ACL denies it): the caller polls.
  void watch_key(connection& requests, const std::string& key, const std::string& watcher,
                 std::function<bool(const reply&)> changed_already,
                 std::function<void()> on_change);
  // Whether watch_key may work here: not sharded, not under Sentinel (the request connection
  // may reach another node than this one for a while), not refused by the node.
  bool can_track() const noexcept;
  // Closes the subscriber connection (the client's last copy is gone); a later subscribe()
  // connects again. Sharded: shard_subscribers closes the shared ones.
  void close();

  // From the subscriber connection: a message or the end of a subscription, and its drop.
  void on_message(const reply& r);
  void on_drop();

 private:
  // Sharded: a connection to the slot's master as the router knows it now (a new one when the
  // slot moved), or null when it knows none yet.
  bool connect_to_slot_owner();
  void install_handlers();
  // An invalidation (watch_key): ends the watches of `key` (every key when null; only the one
  // named `only` when set) and calls them.
  void on_invalidated(const std::string* key, const std::string* only);
  void forget_watch(const std::string& key, const std::string& watcher);

  std::shared_ptr<connection> conn_;
  std::shared_ptr<cluster_router> router_;  // sharded only
  std::shared_ptr<shard_subscribers> subscribers_;  // sharded only
  std::optional<host_port> master_;         // sharded: whose connection conn_ is
  std::uint16_t slot_ = 0;
  client_options options_;
  std::string channel_;
  bool handlers_installed_ = false;
  bool subscribed_ = false;
  bool subscribing_ = false;
  std::vector<unique_function<void(std::error_code)>> waiting_for_subscription_;
  std::unordered_map<std::string, std::function<void(std::string_view)>> listeners_;
  struct gave_up {
    clock::time_point until;
    std::function<void()> give_back;
  };
  std::unordered_map<std::string, gave_up> gave_up_;  // remember_gave_up's
  std::size_t gave_up_after_sweep_ = 0;
  // watch_key's: the subscriber connection's CLIENT ID, read with each SUBSCRIBE (none when
  // the node refused it, or tracking is off here), and the tokens watching each key.
  bool tracking_possible_ = false;
  bool tracking_refused_ = false;
  std::optional<std::int64_t> tracking_id_;
  struct watch {
    std::string watcher;
    std::function<void()> on_change;
  };
  std::unordered_map<std::string, std::vector<watch>> watchers_;  // by key
  // After a failed subscription: no new SUBSCRIBE before retry_after_ (doubling backoff_).
  static constexpr std::chrono::milliseconds min_subscribe_backoff{250};
  static constexpr std::chrono::milliseconds max_subscribe_backoff{10000};
  std::chrono::milliseconds backoff_ = min_subscribe_backoff;
  clock::time_point retry_after_{};
  std::error_code last_error_;
};

// One acquisition's waiting, shared by lock_core and semaphore_core. The caller alternates
// begin_attempt() (then sends its script, queueing under the channels it got) and, when the
// attempt failed and another may follow, sleep(); it calls finish() once, when it is done.
class wake_waiter : public std::enable_shared_from_this<wake_waiter> {
 public:
  // `boxes` holds each node's inbox, in node order; the clients that own them must outlive the
  // calls (the caller's core holds them). With `enabled` false no inbox is touched: sleep() is a
  // plain timer, and begin_attempt() hands out no channel.
  wake_waiter(io_executor ex, std::vector<inbox*> boxes, std::string token, bool enabled);

  // Before an attempt that may queue (`queue`: another attempt would follow a failure): per
  // node, the channel to queue under, or "" where the node cannot wake us (not queueing, or its
  // inbox is not subscribed yet). Listens for the token first: the release may publish before
  // the attempt's reply comes back.
  std::vector<std::string> begin_attempt(bool queue);
  // After a failed attempt: runs `next` (on the I/O thread) after `backstop`, or sooner: at once
  // when woken during the attempt, or when every inbox is subscribed now although the attempt
  // could not queue everywhere; as soon as a wake-up arrives; when the subscriptions this starts
  // for the missing inboxes have answered and one of them succeeded (failures never shorten it).
  void sleep(std::chrono::steady_clock::duration backstop, unique_function<void()> next);
  // Stops listening; a sleep still pending ends without running its `next`.
  void finish();
  // The last attempt found `key` on node `node` held by another client: a change of it wakes
  // this waiter (inbox::watch_key, over `requests`, the node's request connection). Only while
  // listening there.
  void watch_key(std::size_t node, connection& requests, const std::string& key);
  // Where a handoff message goes ("<fence> <attempt>", see release.lua); it returns false when
  // it did not take the lock, and the message then counts as a plain wake-up, as it does
  // without a handler. Runs on the I/O thread, never after finish().
  void on_handoff(std::function<bool(std::string_view)> handler) {
    on_handoff_ = std::move(handler);
  }
  // Some attempt queued on some node: the entry stays there unless that node granted.
  bool queued() const noexcept { return queued_; }

 private:
  void on_wake(std::string_view handoff);

  std::vector<inbox*> boxes_;
  std::function<bool(std::string_view)> on_handoff_;
  std::string token_;
  bool enabled_;
  asio::steady_timer timer_;
  bool queued_ = false;             // some attempt handed out a channel
  bool queued_everywhere_ = false;  // the last attempt handed out a channel for every node
  bool listening_ = false;
  bool subscribing_ = false;
  bool in_attempt_ = false;
  bool wake_pending_ = false;  // woken during the attempt: do not sleep after it
  bool done_ = false;
};

}  // namespace dlock::detail
