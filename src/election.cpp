// SPDX-License-Identifier: Apache-2.0
// dlock::election: leadership is a mutex lease; what observers see is the election's record.
//
// Why a record and not just the lock key: the lock's value is an owner id that the scripts
// compare, so the leader's value lives beside it, in a stream whose entry ids are the terms
// ("<term>-0" elected, "<term>-1" resigned). Ids that are terms let an observer of N nodes merge
// the nodes' records, and let it resume after a drop from the last id it reported. A leader
// announces only while its lock key still holds its own value (elect_announce.lua), so an
// entry never comes from a deposed leader, and terms, being fencing tokens, only grow.
#include "dlock/election.hpp"

#include <algorithm>
#include <climits>

#include "access.hpp"
#include "algo/deadline_rule.hpp"
#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "dlock/key_layout.hpp"
#include "election_record.hpp"
#include "lock_core.hpp"
#include "option_checks.hpp"
#include "script.hpp"

namespace dlock {
namespace detail {
namespace {

using steady = std::chrono::steady_clock;
constexpr std::size_t max_value_bytes = 64 * 1024;

std::vector<client> checked_nodes(std::vector<client> nodes, const election_options& o,
                                  const std::string& value) {
  if (o.lock.copies > 1) reject_argument("an election does not take copies");
  if (!o.lock.reentrant.empty()) reject_argument("an election is not reentrant");
  if (value.size() > max_value_bytes) reject_argument("an election's value is over 64 KiB");
  return nodes;
}

}  // namespace

// What a campaign needs after the election object may be gone (async_campaign's callbacks).
struct campaign_context {
  std::shared_ptr<lock_core> core;
  std::vector<client> nodes;
  std::string record;
  std::string value;
  keep_alive_options keep_alive;

  std::chrono::milliseconds node_timeout() const {
    return effective_node_timeout(core->options().node_timeout, core->options().ttl,
                                  nodes.front().options().request_timeout);
  }

  // elect_announce.lua on every node. Done: success as soon as one node recorded it (observers
  // merge the nodes' records; the others' answers are not awaited, so a hung node does not hold
  // the campaign up) and the lease still holds; else, once all answered, the first node error,
  // or lease_lost when they all said the lease is not (or no longer) the leader's. Each node
  // gets the node timeout, or less where `answer_by` (a bounded campaign's deadline) is sooner.
  void announce(const lease& leadership, std::string_view event,
                unique_function<void(std::error_code)> done,
                steady::time_point answer_by = steady::time_point::max()) const {
    struct tally {
      std::size_t pending;
      std::size_t recorded = 0;
      std::error_code first_error;
      unique_function<void(std::error_code)> done;
    };
    auto t = std::make_shared<tally>(tally{nodes.size(), 0, {}, std::move(done)});
    std::string term = std::to_string(leadership.fencing_token());
    auto timeout = node_timeout();
    if (answer_by != steady::time_point::max()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(answer_by - steady::now());
      timeout = std::clamp(left, std::chrono::milliseconds(1), timeout);
    }
    for (auto node : nodes) {
      run_script(node, elect_announce_script, {core->key(), record},
                 {leadership.value(), term, value, event}, timeout,
                 [t](std::error_code ec, reply r) {
                   if (!ec && r.is_error()) ec = error_from_reply(r);
                   bool was_recorded = t->recorded > 0;
                   if (ec) {
                     if (!t->first_error) t->first_error = ec;
                   } else if (r.is_integer() && r.integer() == 1) {
                     ++t->recorded;
                   }
                   --t->pending;
                   if (was_recorded) return;  // told already
                   if (t->recorded > 0) return t->done({});
                   if (t->pending > 0) return;
                   t->done(t->first_error ? t->first_error : std::error_code(errc::lease_lost));
                 });
    }
  }

  // After the grant: the announcement, and a lease that still holds once it is made (on N
  // nodes one node can record a term whose lease has lost its quorum meanwhile).
  void announce_leadership(const lease& leadership, unique_function<void(std::error_code)> done,
                           steady::time_point answer_by = steady::time_point::max()) const {
    announce(leadership, "elected",
             [&leadership, done = std::move(done)](std::error_code ec) mutable {
               if (!ec && (leadership.lost().stop_requested() ||
                           leadership.remaining() == std::chrono::milliseconds(0))) {
                 ec = errc::lease_lost;
               }
               done(ec);
             },
             answer_by);
  }

  std::error_code announce_blocking(const lease& leadership, std::string_view event) const {
    std::error_code ec;
    wait<int>(ec, [&](unique_function<void(std::error_code, int)> h) {
      announce(leadership, event, [h = std::move(h)](std::error_code e) mutable { h(e, 0); });
    });
    return ec;
  }
};

namespace {

// A campaign whose announcement failed tries again when that may heal: the nodes, or a race
// lost between the grant and the announcement (lease_lost: another candidate leads now).
bool campaign_again(std::error_code ec) {
  return is_retryable(ec) || ec == errc::lease_lost;
}

// One campaign, sync or async, on the I/O thread: the lock's acquisition (until the deadline,
// under the caller's wait_control), then renewals and the announcement, and again while an
// announcement's failure may heal and the deadline (deadline_rule) and the stop allow.
// Renewals start before the announcement, so that a slow node cannot let the lease run out
// meanwhile. An announcement that no node took gives the lease back first: a leader nobody can
// see would not be one. A bounded campaign's announcement is answered by the rule's
// gives_up_at(); one whose deadline was already due is one whole attempt, as try_campaign().
class campaign_run : public std::enable_shared_from_this<campaign_run> {
 public:
  using handler_type = unique_function<void(std::error_code, lease)>;

  campaign_run(std::shared_ptr<campaign_context> ctx, steady::time_point deadline,
               wait_control control, handler_type handler)
      : ctx_(std::move(ctx)),
        deadline_(deadline),
        rule_(deadline),
        control_(std::move(control)),
        handler_(std::move(handler)) {}

  void start() {
    rule_.begin(steady::now());
    acquire();
  }

 private:
  // The acquisition applies the same rule to the same deadline (one whole attempt when due).
  void acquire() {
    ctx_->core->start_acquire(
        deadline_, INT_MAX,
        [self = shared_from_this()](std::error_code ec, lease l) {
          self->on_granted(ec, std::move(l));
        },
        nullptr, control_);
  }

  void on_granted(std::error_code ec, lease granted) {
    if (ec) return finish(ec, {});
    held_ = std::move(granted);
    held_.keep_alive(ctx_->keep_alive);
    ctx_->announce_leadership(
        held_, [self = shared_from_this()](std::error_code ec) { self->on_announced(ec); },
        rule_.gives_up_at());
  }

  // A stop that came meanwhile gives the leadership back: the caller no longer waits for it.
  void on_announced(std::error_code ec) {
    if (!ec && control_.stop.stop_requested()) ec = errc::cancelled;
    if (!ec) return finish({}, std::move(held_));
    held_.async_release([self = shared_from_this(), ec](std::error_code) {
      if (ec == errc::cancelled || !campaign_again(ec)) return self->finish(ec, {});
      // Stopped meanwhile: no other campaign, which would end only after a round.
      if (self->control_.stop.stop_requested()) return self->finish(errc::cancelled, {});
      if (!self->rule_.another_look(steady::now())) return self->finish(ec, {});
      self->acquire();
    });
  }

  void finish(std::error_code ec, lease l) { std::exchange(handler_, {})(ec, std::move(l)); }

  std::shared_ptr<campaign_context> ctx_;
  steady::time_point deadline_;  // as the caller gave it, for each acquisition
  deadline_rule rule_;
  wait_control control_;
  handler_type handler_;
  lease held_;  // granted, being announced
};

}  // namespace
}  // namespace detail

election::election(client node, std::string name, std::string value, election_options options)
    : election(std::vector<client>{std::move(node)}, std::move(name), std::move(value),
               std::move(options)) {}

election::election(std::vector<client> nodes, std::string name, std::string value,
                   election_options options)
    : lock_(detail::checked_nodes(nodes, options, value), std::move(name), options.lock) {
  auto core = detail::access::core_of(lock_);
  std::string record = election_record_key(lock_.key());
  core->set_lives_with_lock(record);
  context_ = std::make_shared<detail::campaign_context>(
      detail::campaign_context{std::move(core), std::move(nodes), std::move(record),
                               std::move(value), std::move(options.keep_alive)});
}

const std::string& election::value() const noexcept { return context_->value; }

election::~election() = default;

lease election::campaign(std::error_code& ec) {
  return campaign_until(clock::time_point::max(), {}, ec);
}

lease election::campaign() {
  std::error_code ec;
  lease l = campaign(ec);
  if (ec) throw std::system_error(ec, "dlock: cannot campaign in " + key());
  return l;
}

lease election::campaign_until(clock::time_point deadline, std::error_code& ec) {
  return campaign_until(deadline, {}, ec);
}

lease election::campaign_until(clock::time_point deadline, const wait_control& control,
                               std::error_code& ec) {
  return detail::wait<lease>(ec, [&](detail::unique_function<void(std::error_code, lease)> h) {
    start_campaign(deadline, control, std::move(h));
  });
}

// A deadline already due: one whole attempt (deadline_rule).
lease election::try_campaign(std::error_code& ec) {
  lease won = campaign_until(clock::now(), ec);
  if (ec == errc::lease_lost) ec = errc::not_acquired;  // another candidate won the race
  return won;
}

lease election::try_campaign() {
  std::error_code ec;
  lease l = try_campaign(ec);
  if (ec && !detail::is_retryable(ec)) {
    throw std::system_error(ec, "dlock: cannot campaign in " + key());
  }
  return l;
}

lease election::campaign_or_throw(clock::time_point deadline) {
  std::error_code ec;
  lease l = campaign_until(deadline, ec);
  // A race lost between the grant and the announcement is another candidate's win: empty, as
  // try_campaign() says not_acquired for it.
  if (ec == errc::lease_lost) return l;
  if (detail::throws_from_wait(ec, deadline)) {
    throw std::system_error(ec, "dlock: cannot campaign in " + key());
  }
  return l;
}

void election::start_campaign(clock::time_point deadline, const wait_control& control,
                              detail::unique_function<void(std::error_code, lease)> handler) {
  std::make_shared<detail::campaign_run>(context_, deadline, control, std::move(handler))->start();
}

std::error_code election::resign(lease& leadership) noexcept {
  if (!leadership) return errc::not_held;
  // Before the release, while the key is still ours: afterwards a successor may have been
  // recorded, and our entry would follow its.
  (void)context_->announce_blocking(leadership, "resigned");
  return leadership.release();
}

leader_info election::leader() const {
  std::error_code ec;
  auto info = leader(ec);
  if (ec) throw std::system_error(ec, "dlock: cannot read the leader of " + key());
  return info;
}

leader_info election::leader(std::error_code& ec) const {
  auto views = detail::wait<std::vector<detail::record_view>>(
      ec, [&](detail::unique_function<void(std::error_code, std::vector<detail::record_view>)> h) {
        detail::read_records(context_->nodes, key(), context_->record, "-",
                             context_->node_timeout(),
                             [h = std::move(h)](std::vector<detail::record_view> v) mutable {
                               h({}, std::move(v));
                             });
      });
  if (ec) return {};
  auto verdict = detail::current_leader(views);
  ec = verdict.ec;
  return verdict.leader;
}

observation election::observe(std::function<void(const election_event&)> on_change) {
  auto w = std::make_shared<detail::election_watch>(context_->nodes, key(), context_->record,
                                                    context_->node_timeout(),
                                                    std::move(on_change));
  w->start();
  return observation(std::move(w));
}

observation& observation::operator=(observation&& other) noexcept {
  if (this != &other) {
    stop();
    watch_ = std::move(other.watch_);
  }
  return *this;
}

observation::~observation() { stop(); }

void observation::stop() noexcept {
  if (auto w = std::exchange(watch_, nullptr)) w->stop();
}

}  // namespace dlock
