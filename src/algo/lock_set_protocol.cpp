// SPDX-License-Identifier: Apache-2.0
// A lock set's attempts. Each writes its own value "<id>.<index>" to every key (the id is
// drawn afresh for each acquisition), so that the give-back of a failed attempt, which is not
// awaited and may run late, can never delete what a later attempt, or another acquisition,
// took; a failed attempt that lands after its give-back leaves its keys to their TTL. The groups are taken in the same global order by every client (ascending slot), and an
// attempt never waits while holding part of the set: overlapping sets cannot deadlock.
#include "algo/lock_set_protocol.hpp"

#include <algorithm>

#include "algo/lease_upkeep.hpp"

namespace dlock::detail {

// A holder's remaining life of 0 still shortens the sleep: a set never queues, so nobody goes
// ahead of it at that key's expiry.
pacing lock_set_protocol::pace() const noexcept {
  return pacing_of(target_, 1, 0, milliseconds(0));
}

void lock_set_protocol::begin(wait_loop& loop, steady::time_point,
                              const std::vector<std::string>&) {
  attempt_ = attempt_state{loop.id() + "." + std::to_string(loop.attempt_index())};
  attempt_.fences.assign(target_.groups.size(), 0);
  take_next_group(loop);
}

void lock_set_protocol::take_next_group(wait_loop& loop) {
  const auto& keys = target_.groups[attempt_.next_group].script_keys;
  loop.emit(0, acquire_all_script, script_keys::viewing(keys),
            {attempt_.value, target_.ttl_text}, purpose::attempt);
}

void lock_set_protocol::on_answer(wait_loop& loop, purpose what, std::size_t,
                                  steady::time_point now, std::error_code ec, const reply& r) {
  if (what == purpose::attempt) return on_group(loop, now, ec, r);
  if (what == purpose::step) return on_fence(loop, now, ec, r);
}

// {1, fence}: the group is ours; {0, i, PTTL}: name i is held (i = 0: the node is quarantined).
void lock_set_protocol::on_group(wait_loop& loop, steady::time_point now, std::error_code ec,
                                 const reply& r) {
  if (!ec && r.is_error()) ec = error_from_reply(r);
  const auto& e = r.elements();
  if (!ec && (!r.is_array() || e.size() < 2 || !e[0].is_integer() || !e[1].is_integer())) {
    ec = errc::protocol_error;
  }
  // A timeout may have taken the group's keys, an error midway part of them (a script is not
  // rolled back): they are given back with those taken before.
  if (ec) {
    loop.votes().failed(0, ec, r.is_error() ? r.str() : std::string());
    return fail(loop, now, ec, attempt_.next_group + 1);
  }
  if (e[0].integer() != 1) {
    loop.votes().taken(0, e.size() == 3 && e[2].is_integer() ? e[2].integer() : -1);
    return fail(loop, now, errc::not_acquired, attempt_.next_group);
  }
  auto fence = static_cast<std::uint64_t>(e[1].integer());
  attempt_.fences[attempt_.next_group++] = fence;
  attempt_.top_fence = std::max(attempt_.top_fence, fence);
  if (attempt_.next_group < target_.groups.size()) {
    // Stopped meanwhile: what was taken goes back now rather than after the other groups.
    if (loop.stopping()) return fail(loop, now, errc::cancelled, attempt_.next_group);
    return take_next_group(loop);
  }
  raise_fences(loop, now);
}

// One token for the set: each group drew its own, so the counters of the groups that drew less
// are raised to the highest (fence_raise.lua), which every name's next token will exceed.
// Nobody draws on these names meanwhile: the set holds them.
void lock_set_protocol::raise_fences(wait_loop& loop, steady::time_point now) {
  std::string top = std::to_string(attempt_.top_fence);
  for (std::size_t g = 0; g < target_.groups.size(); ++g) {
    if (attempt_.fences[g] == attempt_.top_fence) continue;
    for (auto i : target_.groups[g].members) {
      ++attempt_.fences_outstanding;
      loop.emit(0, fence_raise_script, {target_.names[i].fence}, {top, target_.ttl_text},
                purpose::step);
    }
  }
  if (attempt_.fences_outstanding == 0) grant(loop, now);
}

void lock_set_protocol::on_fence(wait_loop& loop, steady::time_point now, std::error_code ec,
                                 const reply& r) {
  if (!ec && r.is_error()) ec = error_from_reply(r);
  if (!ec && !r.is_integer()) ec = errc::protocol_error;
  if (ec && !attempt_.fence_error) attempt_.fence_error = ec;
  if (--attempt_.fences_outstanding > 0) return;
  if (attempt_.fence_error) {
    loop.votes().failed(0, attempt_.fence_error, {});
    return fail(loop, now, attempt_.fence_error, target_.groups.size());
  }
  grant(loop, now);
}

void lock_set_protocol::grant(wait_loop& loop, steady::time_point now) {
  auto& votes = loop.votes();
  if (now >= votes.valid_until()) {
    votes.failed(0, errc::lease_expired, {});
    return fail(loop, now, errc::lease_expired, target_.groups.size());
  }
  votes.granted(0, static_cast<std::int64_t>(attempt_.top_fence));
  attempt_verdict v;
  v.token = attempt_.value;
  v.fence = attempt_.top_fence;
  v.valid_until = votes.valid_until();
  v.leftovers = true;
  loop.attempt_over(now, std::move(v));
}

void lock_set_protocol::fail(wait_loop& loop, steady::time_point now, std::error_code ec,
                             std::size_t taken) {
  release_groups(loop, attempt_.value, taken, std::nullopt);
  loop.attempt_over(now, attempt_verdict{ec});
}

// Won after the caller stopped waiting: give it back before the outcome.
void lock_set_protocol::give_up(wait_loop& loop, const attempt_verdict* ended) {
  if (ended && ended->leftovers) {
    release_groups(loop, ended->token, target_.groups.size(), purpose::final_cleanup);
  }
}

void lock_set_protocol::release_groups(wait_loop& loop, const std::string& value,
                                       std::size_t groups, std::optional<purpose> awaited_for) {
  set_release release(target_, value, groups);
  for (auto& r : release.take_requests()) {
    loop.emit(0, *r.code, r.keys, std::move(r.args), awaited_for);
  }
}

std::string_view lock_set_protocol::holder_key(std::size_t) const noexcept {
  return target_.names.front().key;
}

std::uint16_t lock_set_protocol::slot(std::size_t) const noexcept {
  return hash_slot(target_.names[target_.groups.front().members.front()].key);
}

}  // namespace dlock::detail
