// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/election.hpp: leader election over one Redis node or N independent ones (Redlock).
/// - election_options:  the leadership's lock options and its keep-alive
/// - leader_info:       who leads: the term, the leader's value, its lease's owner id
/// - election_event:    one change an observer sees: a term began (elected) or ended, or
///                      changes may have gone unseen (missed)
/// - election:          campaign (blocking or async) until leader, resign, leader() (who leads
///                      now), observe() (each change, in term order, without polling)
/// - observation:       an observe() running; stops when destroyed
///
/// Leadership is a dlock::mutex lease on the election's name, kept alive by the watchdog from
/// the moment campaign() returns: its fencing token is the term, strictly increasing across
/// leaders, so a resource that checks it (dlock/fencing.hpp) refuses a deposed leader's late
/// writes; its lost() fires when leadership is lost. Each leader writes its term and value to
/// the election's record (key_layout.hpp: election_record_key), a short stream that lives as
/// long as its lease, and publishes it; observers subscribe and read the record.
///
/// Thread-safety: an election may be shared by the threads of a process; each campaign returns
/// its own lease. On a Redis Cluster the lock key and the record share the name's slot, and
/// observers subscribe on that slot's master.
///
/// |           | campaign()                   | resign(lease)               | lease lost / expired   |
/// |-----------|------------------------------|-----------------------------|------------------------|
/// | Candidate | waits; Leader (a lease)      | -                           | -                      |
/// | Leader    | waits like any candidate (1) | Candidate; observers: ended | lost() fires; ended(2) |
/// (1) Not reentrant: a second campaign of the same process waits for the first lease's end.
/// (2) Observers learn it when the lease's key expires on the servers, or at the next term.
/// An observer that could not hear the nodes says `missed` where it cannot vouch for the record.
/// A campaign that loses its lease between the grant and its announcement campaigns again.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/detail/async.hpp"
#include "dlock/detail/deadline.hpp"
#include "dlock/error.hpp"
#include "dlock/export.hpp"
#include "dlock/lease.hpp"
#include "dlock/mutex.hpp"
#include "dlock/options.hpp"
#include "dlock/watchdog.hpp"

namespace dlock {

namespace detail {
class election_watch;
struct campaign_context;
}

/// The knobs of an election: the leadership lock's options (its TTL bounds how long a crashed
/// leader blocks the next one) and how its lease is kept alive. An aggregate.
struct election_options {
  lock_options lock{};            ///< copies must stay 0; fair works on a single node
  keep_alive_options keep_alive{};  ///< started on each lease campaign() returns
};

/// Who leads an election.
struct leader_info {
  std::uint64_t term = 0;  ///< the leadership's fencing token; 0: nobody leads
  std::string value{};     ///< what the leader gave its election object (host, address ...)
  std::string owner{};     ///< the leadership lease's owner id (lease::value())
  explicit operator bool() const noexcept { return term != 0; }  ///< somebody leads
};

/// One change of leadership, as observe() reports it.
struct election_event {
  /// What changed.
  enum class change {
    elected,  ///< term `term` began; `value` is its leader's
    ended,    ///< term `term` ended: its leader resigned, or its lease is gone
    /// Changes after term `term` (0: after the observation began) may have gone unseen: the
    /// terms missed, if any, lie between it and the next term reported. `value` is empty.
    missed,
  };
  change what = change::elected;  ///< began, ended, or changes missed
  std::uint64_t term = 0;         ///< the term that began or ended (missed: the last reported)
  std::string value{};            ///< its leader's value
};

/// A running observe(): the callback runs until stop() or destruction. Move-only.
class DLOCK_EXPORT observation {
 public:
  observation() noexcept = default;
  observation(observation&&) noexcept = default;  ///< takes over; `other` is left empty
  observation& operator=(observation&& other) noexcept;  ///< stops this one, takes over other
  observation(const observation&) = delete;
  observation& operator=(const observation&) = delete;
  ~observation();  ///< stop()s
  /// Ends the observation. From a thread other than dlock's I/O thread it waits for a callback
  /// running at that moment; afterwards (and from within a callback) no callback starts.
  void stop() noexcept;
  explicit operator bool() const noexcept { return watch_ != nullptr; }  ///< not stopped

 private:
  friend class election;
  explicit observation(std::shared_ptr<detail::election_watch> w) noexcept
      : watch_(std::move(w)) {}
  std::shared_ptr<detail::election_watch> watch_;
};

/// A leader election among the processes that campaign on one name, over one Redis node or N
/// independent ones. election.hpp has its states and what threads may share.
class DLOCK_EXPORT election {
 public:
  using clock = std::chrono::steady_clock;  ///< the clock of deadlines

  /// The election `name` (its lock key is options.lock.key_prefix + name) as seen by a
  /// candidate whose leadership shows `value` to observers (at most 64 KiB; may be empty).
  /// Throws std::system_error(errc::invalid_argument), before any I/O, for what dlock::mutex
  /// refuses, a value over 64 KiB, copies, and reentrant.
  election(client node, std::string name, std::string value, election_options options = {});
  /// The same over N independent nodes (Redlock): leadership needs a majority.
  election(std::vector<client> nodes, std::string name, std::string value,
           election_options options = {});
  ~election();
  election(const election&) = delete;
  election& operator=(const election&) = delete;

  /// Waits until this candidate leads, then returns the leadership's lease, kept alive by the
  /// watchdog (options.keep_alive). Blocks; retries through contention and nodes that are down.
  /// Fails (empty lease, ec) only for what ends mutex::acquire() (auth, ACL, wrong type; lasting
  /// out_of_memory or lease_expired).
  lease campaign(std::error_code& ec);
  lease campaign();  ///< as above; throws std::system_error on failure
  /// The same until `deadline` (steady_clock) passes: then not_acquired (or the last error).
  lease campaign_until(clock::time_point deadline, std::error_code& ec);
  /// The same, ended early by `control` (cancelled), which also hears of each failed round.
  lease campaign_until(clock::time_point deadline, const wait_control& control,
                       std::error_code& ec);
  /// One attempt, no waiting: the leadership's lease, or an empty one with not_acquired when
  /// another candidate leads (or the error). Blocks for one round trip.
  lease try_campaign(std::error_code& ec);
  /// One attempt: an empty lease when another candidate leads (or the nodes did not answer in
  /// time); throws std::system_error for errors that retrying cannot cure.
  lease try_campaign();
  /// Campaigns until leading or `d` has passed: an empty lease when the time ran out; throws
  /// like try_campaign().
  template <class Rep, class Period>
  lease try_campaign_for(const std::chrono::duration<Rep, Period>& d) {
    return campaign_or_throw(detail::deadline_after(d));
  }
  /// As above, until `tp` (of any clock, converted once on entry). A wait or deadline too far
  /// to count (over 100 years: duration::max(), time_point::max()) campaigns as campaign() does.
  template <class Clock, class Duration>
  lease try_campaign_until(const std::chrono::time_point<Clock, Duration>& tp) {
    return campaign_or_throw(detail::deadline_at(tp));
  }
  /// Asynchronous campaign(): signature void(std::error_code, lease). It campaigns until it
  /// leads or meets what ends campaign(), even when the election object is gone.
  /// Asio's per-operation cancellation ends it with errc::cancelled, nothing held; emit the
  /// signal on the handler's executor, as Asio requires (mutex::async_acquire).
  template <class CompletionToken>
  auto async_campaign(CompletionToken&& token) {
    return detail::initiate_stoppable<void(std::error_code, lease)>(
        std::forward<CompletionToken>(token), lock_.get_executor(),
        [this](detail::unique_function<void(std::error_code, lease)> h, std::stop_token stop) {
          start_campaign(clock::time_point::max(),
                         wait_control{.stop = std::move(stop), .on_retry = {}}, std::move(h));
        });
  }

  /// Gives up the leadership `leadership` holds (a lease of this election): records the end of
  /// its term for observers, then releases the lease, which passes leadership to a waiting
  /// candidate at once. Blocks up to twice the node timeout (two round trips). Returns what
  /// release() returns; the lease is empty afterwards. On dlock's I/O thread it cannot record
  /// the end and only releases (see lease::release). Destroying the lease without resign()
  /// releases it too; observers then learn of the end when the key's expiry was due (within
  /// a TTL) or from the next term, whichever comes first.
  std::error_code resign(lease& leadership) noexcept;

  /// Who leads now, read from the nodes (a quorum of them must answer); an empty leader_info
  /// when nobody does. Blocks up to the client's request timeout.
  leader_info leader(std::error_code& ec) const;
  leader_info leader() const;  ///< as above; throws std::system_error on failure

  /// Calls `on_change` for each change of leadership, in term order, each term's `elected`
  /// before its `ended`: first the current leader's `elected` (if any), then as they happen.
  /// A new term or a resignation comes through Pub/Sub within about a round trip; a leader that
  /// vanished (crashed, paused, cut off) is seen when its lease's key expires on the servers:
  /// the observer reads each node once at the time the key would expire (so about once per
  /// renewal interval while a leader lives), never in a polling loop. A node that does not
  /// answer is read again after a backoff (250 ms, doubling to 4 s while it stays silent);
  /// news from the others still comes at once. A term is ended only by reads made after it
  /// began (never by a node read, in parallel, just before the new leader's key reached it).
  /// After a connection drop the observer catches up from the record, which keeps the last 16
  /// entries and expires with each leader's key. Every change is reported, or else a `missed`
  /// event stands where changes may have gone unseen, before the next change: when more than
  /// 16 happened meanwhile; when the record no longer reaches back to the last change reported
  /// after the observer could not hear a majority of the nodes (its subscriptions dropped: the
  /// terms of leaders that crashed meanwhile leave no trace); or when a change it heard of was
  /// gone before it could read it (its process was paused past the record's life). It can
  /// follow a break in which nothing happened (the observer cannot tell); leader() gives the
  /// state to resynchronise from. A change recorded only on nodes that stayed silent until a
  /// later term was read is skipped. `on_change` runs on dlock's I/O thread: it must not block.
  observation observe(std::function<void(const election_event&)> on_change);

  const std::string& key() const noexcept { return lock_.key(); }  ///< the lock's key
  const std::string& value() const noexcept;  ///< this candidate's value

 private:
  // Every campaign, sync or async: runs on dlock's I/O thread; `handler` gets the leadership.
  void start_campaign(clock::time_point deadline, const wait_control& control,
                      detail::unique_function<void(std::error_code, lease)> handler);
  lease campaign_or_throw(clock::time_point deadline);

  mutex lock_;
  // The nodes, the record, the value and the keep-alive: what campaigns in flight share.
  std::shared_ptr<detail::campaign_context> context_;
};

}  // namespace dlock
