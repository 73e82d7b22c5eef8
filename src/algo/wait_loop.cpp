// SPDX-License-Identifier: Apache-2.0
// The wait loop: what every acquisition does whatever it acquires. The protocol sends an
// attempt's requests and judges their answers; the loop decides what follows.
//
// Waiting. An attempt that may be followed by another queues the waiter under the wake
// channels the driver passes; a release publishes to the first live waiter, which cuts the
// driver's sleep short. The sleep stays as the backstop for anything lost on the way, and is
// jittered, or shortened to the holder's expiry when a vote says when that is.
//
// Giving up leaves nothing behind: the protocol's give-up script leaves the queues and gives
// back what the wait won late, and the outcome waits for its answers (final_cleanup), so that
// a caller who retries at once never meets our own leftovers. What a failed attempt gives back
// is awaited where the protocol asks for it (the lock's cleanup), or only sent (a lock set's,
// whose next attempt writes a value of its own).
#include "algo/wait_loop.hpp"

#include <algorithm>
#include <charconv>

#include "algo/retry.hpp"

namespace dlock::detail {

wait_loop::wait_loop(std::unique_ptr<acquire_protocol> protocol, std::string id,
                     steady::time_point deadline, int attempts, std::uint64_t seed)
    : protocol_(std::move(protocol)),
      id_(std::move(id)),
      rule_(deadline),
      attempts_(std::max(attempts, 1)),
      random_state_(seed) {}

// The node's last vote (the attempt in flight's, else the last attempt's) timed out or lost its
// connection: the connection was closed, so a request to it now waits for a fresh connect and
// a whole node timeout if the node still does not answer.
bool wait_loop::lost_touch_with(std::size_t node) const noexcept {
  const node_results& votes = round_ ? round_->votes.votes() : last_votes_;
  if (node >= votes.size() || votes[node].outcome != node_result::vote::failed) return false;
  return votes[node].error == errc::timeout || votes[node].error == errc::connection_lost;
}

// A cleanup is awaited (a failed round's before the next, a give-up's before the outcome) so
// that what follows meets none of it; but never past the caller's deadline, nor, on a single
// node, on one that stopped answering (try_lock() would take two node timeouts). Not on a
// Redlock: there the awaited cleanup of a timed-out node also paces the rounds, and without it
// two waiters that each win a different node wake each other into a livelock. Not awaited, a
// cleanup still goes out, after our earlier requests to that node (one connection, FIFO), and
// can delete only the values it names.
std::optional<purpose> wait_loop::awaited_cleanup(std::size_t node, purpose what) const noexcept {
  if (rule_.passed(now_) || (protocol_->pace().nodes == 1 && lost_touch_with(node))) {
    return std::nullopt;
  }
  return what;
}

std::uint64_t wait_loop::emit(std::size_t node, const script& code, script_keys keys,
                              script_args args, std::optional<purpose> awaited_for) {
  if (awaited_for == purpose::cleanup || awaited_for == purpose::final_cleanup) {
    awaited_for = awaited_cleanup(node, *awaited_for);
  }
  auto pace = protocol_->pace();
  std::uint64_t rid = next_request_++;
  if (out_.empty()) out_.reserve(pace.nodes);
  // Filled in place: a request holds its keys and arguments inline, a few hundred bytes that
  // a temporary would copy once more.
  auto& r = out_.emplace_back();
  r.id = rid;
  r.node = node;
  r.code = &code;
  r.keys = keys;
  r.args = std::move(args);
  r.timeout = pace.node_timeout;
  if (awaited_for) {
    awaited_.push_back(pending{rid, *awaited_for, node, static_cast<std::size_t>(made_)});
    if (*awaited_for == purpose::final_cleanup) ++final_cleanup_left_;
  }
  return rid;
}

// The pending entry for `rid`, removed; nullopt for a stale or fire-and-forget answer.
std::optional<wait_loop::pending> wait_loop::claim(std::uint64_t rid) {
  auto it =
      std::find_if(awaited_.begin(), awaited_.end(), [&](const pending& p) { return p.id == rid; });
  if (it == awaited_.end()) return std::nullopt;
  pending p = *it;
  awaited_.erase(it);
  return p;
}

void wait_loop::abandon_attempt_requests() {
  for (const auto& p : awaited_) {
    if (p.what == purpose::attempt && p.attempt == round_->index + 1) abandoned_.push_back(p.id);
  }
}

// An attempt after which none could start before the deadline is the last: next_sleep ends a
// sleep last_attempt_lead before the deadline at the latest.
bool wait_loop::queues_next(steady::time_point now) const noexcept {
  return made_ + 1 < attempts_ && (!rule_.bounded() ||
                                   now + acquisition::last_attempt_lead < rule_.deadline());
}

steady::duration wait_loop::retry_delay_after(const node_results& votes) {
  auto pace = protocol_->pace();
  steady::duration delay = jittered_delay(pace.retry_delay, next_random(random_state_));
  // While another owner holds it with less time left than our delay, wake up at its expiry.
  for (const auto& v : votes) {
    if (v.outcome == node_result::vote::taken && v.holder_ttl_ms >= pace.holder_ttl_floor) {
      delay = std::min<steady::duration>(delay, milliseconds(v.holder_ttl_ms + 1));
    }
  }
  // retry_delay 0 polls every millisecond, not back to back.
  return std::max<steady::duration>(delay, milliseconds(1));
}

// After a failed attempt: the error that ends a wait without a deadline all the same (a full
// node, a TTL shorter than a round trip: endless_wait_rule), or none. A wait with a deadline
// rides those out until it.
std::error_code wait_loop::ends_for_good(steady::time_point now, std::error_code ec,
                                         const node_results& votes) {
  auto why = endless_.gives_up_on(ec, votes, now);
  return rule_.bounded() ? std::error_code() : why;
}

// The sleep before the next attempt, or nullopt to give up. A backstop that would end past the
// deadline is cut to end last_attempt_lead before it, for one last attempt: meanwhile a release
// may wake the waiter (or hand it the lock), and the driver cuts a sleep short once an attempt
// that could not queue can (its inboxes subscribed). Giving up instead would end
// try_lock_for(2s) after one round whenever retry_delay is above 2 s.
std::optional<steady::duration> wait_loop::next_sleep(steady::time_point now,
                                                      steady::duration delay,
                                                      std::error_code ec) const {
  if (!is_retryable(ec) || made_ >= attempts_) return std::nullopt;
  if (!rule_.bounded() || now + delay < rule_.deadline()) return delay;
  auto until_last = rule_.deadline() - now - acquisition::last_attempt_lead;
  if (until_last <= steady::duration::zero()) return std::nullopt;
  return until_last;
}

void wait_loop::begin_attempt(steady::time_point now, const std::vector<std::string>& channels) {
  now_ = now;
  if (finished_ || round_) return;  // a driver bug; nothing sensible to do
  sleep_.reset();
  if (made_ > 0 && !rule_.another_look(now)) {
    // A sleep that ended at the deadline (a late timer): no attempt starts after it.
    return give_up(last_error_, last_votes_, nullptr);
  }
  last_ = !queues_next(now);
  ++made_;
  auto pace = protocol_->pace();
  round_started_.push_back(now);  // a handoff names the attempt whose queue entry it used
  foreign_holders_.clear();
  round_.emplace(attempt_state{static_cast<std::size_t>(made_ - 1),
                               quorum_round(pace.nodes, now, pace.ttl, pace.drift_factor)});
  const auto& names = *pace.node_names;
  for (std::size_t i = 0; i < pace.nodes && i < names.size(); ++i) {
    round_->votes.votes()[i].node = names[i];
  }
  protocol_->begin(*this, now, channels);
}

void wait_loop::on_reply(std::uint64_t request_id, steady::time_point now, std::error_code ec,
                         const reply& r) {
  now_ = now;
  auto p = claim(request_id);
  if (!p) return;
  if (p->what == purpose::final_cleanup) {
    if (--final_cleanup_left_ == 0 && after_cleanup_) {
      result_ = std::move(after_cleanup_);
      after_cleanup_.reset();
    }
    return;
  }
  if (finished_) {
    if (p->what == purpose::attempt && granted_attempt_ > 0 && p->attempt == granted_attempt_) {
      protocol_->on_late_answer(*this, p->node, ec, r);
    }
    return;
  }
  if (!round_) return;                          // a handoff came first
  if (p->attempt != round_->index + 1) return;  // an earlier attempt's straggler
  protocol_->on_answer(*this, p->what, p->node, now, ec, r);
}

void wait_loop::attempt_over(steady::time_point now, attempt_verdict v) {
  auto deferred = std::exchange(deferred_handoff_, std::nullopt);
  attempt_state done = std::move(*round_);
  round_.reset();
  node_results& votes = done.votes.votes();
  if (!v.ec && !stopped_) {
    // The votes go to the outcome, not copied: after a grant nothing judges the nodes by them.
    last_votes_.clear();
    granted_attempt_ = done.index + 1;
    return finish_granted(std::move(v.token), v.fence, v.valid_until, std::move(votes));
  }
  last_votes_ = votes;  // what the give-up's cleanups judge the nodes by
  if (v.ec) last_error_ = v.ec;
  if (stopped_) return give_up(*stopped_, std::move(votes), &v);
  // The attempt found the node taken, so it ran before the release that sent the deferred
  // handoff: the handoff stands.
  if (deferred && !votes.empty() && votes[0].outcome == node_result::vote::taken &&
      accept_handoff(now, deferred->first, deferred->second)) {
    return;
  }
  if (auto why = ends_for_good(now, v.ec, votes)) return give_up(why, std::move(votes), &v);
  auto delay = next_sleep(now, retry_delay_after(votes), v.ec);
  if (!delay) return give_up(v.ec, std::move(votes), &v);
  sleep_ = delay;
}

// A handoff message's payload is "<fence> <attempt>" (release.lua, sem_release.lua): the
// release handed us the lock or permit when it ran, after that attempt began (the attempt wrote
// the queue entry the release used), so the lease's validity counts from the attempt's start
// whatever delayed the message. The protocol says whether an attempt begun since may have run
// after the release and undone the handoff.
bool wait_loop::on_handoff(steady::time_point now, std::string_view grant) {
  now_ = now;
  if (finished_) return true;
  if (!protocol_->pace().accepts_handoff) return false;
  std::uint64_t fence = 0;
  std::size_t r = 0;
  auto space = grant.find(' ');
  if (space == std::string_view::npos) return false;
  auto parse = [](std::string_view text, auto& value) {
    auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
    return err == std::errc() && end == text.data() + text.size();
  };
  if (!parse(grant.substr(0, space), fence) || !parse(grant.substr(space + 1), r) ||
      r >= round_started_.size()) {
    return false;
  }
  switch (protocol_->timing_of_handoff(*this, r)) {
    case acquire_protocol::handoff_timing::take:
      return accept_handoff(now, fence, r);
    case acquire_protocol::handoff_timing::defer:
      deferred_handoff_.emplace(fence, r);
      return false;
    case acquire_protocol::handoff_timing::wake_only:
      break;
  }
  return false;
}

bool wait_loop::accept_handoff(steady::time_point now, std::uint64_t fence, std::size_t r) {
  auto pace = protocol_->pace();
  auto valid_until = round_started_[r] + pace.ttl - drift_allowance(pace.ttl, pace.drift_factor);
  // Born expired (queued longer than the TTL before the release), or no longer wanted.
  if (now >= valid_until || stopped_) {
    protocol_->refuse_handoff(*this, r);
    return false;
  }
  finish_handed_over(protocol_->handoff_token(*this, r), fence, valid_until);
  return true;
}

acquisition::late_handoff_give_back wait_loop::give_back_plan() const {
  acquisition::late_handoff_give_back plan;
  protocol_->give_back_script(*this, plan);
  auto pace = protocol_->pace();
  plan.timeout = pace.node_timeout;
  plan.window =
      std::max<steady::duration>(std::chrono::seconds(10), pace.place_ttl + pace.node_timeout);
  return plan;
}

// A deadline already due makes this one whole attempt (deadline_rule).
void wait_loop::on_start(steady::time_point now) {
  if (made_ == 0 && rule_.begin(now)) attempts_ = 1;
}

void wait_loop::on_deadline(steady::time_point now) {
  now_ = now;
  if (now < gives_up_at()) return;
  // Whatever is still awaited has missed the deadline: it counts as timed out, and its answer,
  // when it comes, is ignored (stale). What that ends (the attempt, the give-up's cleanup) sends
  // its cleanups without awaiting them, since the deadline has passed.
  for (const auto& p : awaited_) {
    if (p.what != purpose::cleanup && p.what != purpose::final_cleanup) {
      abandoned_.push_back(p.id);
    }
  }
  auto timed_out = awaited_;  // on_reply changes awaited_
  for (const auto& p : timed_out) on_reply(p.id, now, errc::timeout, {});
}

bool wait_loop::wants_fallback(std::uint64_t request_id) const noexcept {
  return std::find(abandoned_.begin(), abandoned_.end(), request_id) == abandoned_.end();
}

void wait_loop::stop(steady::time_point now, std::error_code why) {
  now_ = now;
  if (finished_ || stopped_) return;
  stopped_ = why;
  if (round_) return;  // the attempt in flight concludes first
  sleep_.reset();
  give_up(why, last_votes_, nullptr);
}

std::vector<acquisition::foreign_holder> wait_loop::take_foreign_holders() {
  std::vector<acquisition::foreign_holder> out;
  for (auto node : std::exchange(foreign_holders_, {})) {
    out.push_back({node, protocol_->holder_key(node)});
  }
  return out;
}

void wait_loop::give_up(std::error_code ec, node_results votes, const attempt_verdict* ended) {
  protocol_->give_up(*this, ended);
  finish_failed(ec, std::move(votes));
}

void wait_loop::finish_granted(std::string token, std::uint64_t fence,
                               steady::time_point valid_until, node_results votes) {
  finished_ = true;
  sleep_.reset();
  protocol_->on_granted(*this);
  result_ = acquisition::outcome{{}, std::move(token), fence, valid_until, std::move(votes)};
}

// Granted by a release's handoff (release.lua, sem_release.lua): the one node's vote.
void wait_loop::finish_handed_over(std::string token, std::uint64_t fence,
                                   steady::time_point valid_until) {
  node_results votes(1);
  const auto& names = *protocol_->pace().node_names;
  if (!names.empty()) votes[0].node = names[0];
  votes[0].outcome = node_result::vote::granted;
  finish_granted(std::move(token), fence, valid_until, std::move(votes));
  result_->handoff = true;
}

void wait_loop::finish_failed(std::error_code ec, node_results votes) {
  finished_ = true;
  sleep_.reset();
  acquisition::outcome failed{ec, {}, 0, {}, std::move(votes)};
  if (final_cleanup_left_ > 0) {
    after_cleanup_ = std::move(failed);
  } else {
    result_ = std::move(failed);
  }
}

}  // namespace dlock::detail
