// SPDX-License-Identifier: Apache-2.0
// The semaphore's attempts. One node, one script per attempt, and one owner token for all
// attempts: an attempt whose reply was lost cannot leave a ghost permit that competes with us,
// because the next attempt's script finds the token and treats it as ours, and giving up
// removes it.
#include "algo/semaphore_protocol.hpp"

#include <algorithm>
#include <utility>

namespace dlock::detail {

semaphore_reply parse_semaphore_reply(const reply& r, bool fair, std::error_code& ec) {
  ec.clear();
  const auto& e = r.elements();
  std::size_t expected = fair ? 3 : 2;
  // Fair, not granted: a fourth element 1 says the name's own key holds another kind of lock.
  bool name_held = fair && e.size() == 4;
  bool shape = r.is_array() && (e.size() == expected || name_held);
  for (std::size_t i = 0; shape && i < e.size(); ++i) shape = e[i].is_integer();
  if (!shape || (e[0].integer() != 0 && e[0].integer() != 1)) {
    ec = errc::protocol_error;
    return {};
  }
  semaphore_reply out;
  out.granted = e[0].integer() == 1;
  if (name_held && (out.granted || e[3].integer() != 1)) {
    ec = errc::protocol_error;
    return {};
  }
  out.name_held = name_held;
  if (fair) {
    out.ticket = e[1].integer();
    out.queued = !out.granted && out.ticket != 0;
  } else if (out.granted) {
    out.ticket = e[1].integer();
  } else {
    out.next_expiry_ms = std::max<std::int64_t>(e[1].integer(), 0);
  }
  return out;
}

// One node; a fair waiter's place lives queue_ttl.
pacing semaphore_protocol::pace() const noexcept {
  auto place = waiter_entry_ttl(target_.retry_delay);
  if (target_.fair) place = std::max(place, target_.queue_ttl);
  return pacing_of(target_, 1, 0, place);
}

std::string solo_value(std::string_view mark, std::string_view token, std::string_view permits) {
  std::string v;
  v.reserve(mark.size() + token.size() + permits.size() + 2);
  return v.append(mark).append(" ").append(token).append(" ").append(permits);
}

std::array<plain_command, 6> solo_commands(std::span<const std::string_view> keys,
                                           std::span<const std::string_view> args,
                                           std::size_t& size) noexcept {
  std::array<plain_command, 6> out{};
  out[0] = {{"MULTI"}, 1};
  out[1] = {{"SET", keys[0], args[0], "NX", "PX", args[1]}, 6};
  out[2] = keys.size() > 3 ? plain_command{{"EXISTS", keys[2], keys[3]}, 3}
                           : plain_command{{"EXISTS", keys[2]}, 2};
  out[3] = {{"INCR", keys[1]}, 2};
  out[4] = {{"MGET", node_quarantine_key, node_fence_floor_key}, 3};
  out[5] = {{"EXEC"}, 1};
  size = out.size();
  return out;
}

// MULTI's OK and four QUEUED, then EXEC's {SET's, EXISTS's, INCR's, MGET's}: granted only where
// the SET was ours, nobody was in line, and the token and the node's state read as the lock's
// (read_unqueued_answer). Where MULTI itself was refused (an ACL without +multi, a renamed
// command), the four ran on their own and EXEC was refused: the SET's own answer says whether
// the name now holds our value, which the script then settles; where EXEC aborted (a command
// refused as it was queued), nothing ran; where EXEC was unknown (renamed), the transaction
// is still open and nothing ran yet: the connection ends its socket after this request
// (connection::leaves_a_transaction_open), which drops it.
unqueued_answer read_solo_answer(const reply& r) noexcept {
  unqueued_answer a;
  const auto& e = r.elements();
  if (!r.is_array() || e.size() != 6) {
    a.unknown = true;
    a.never = refused_for_good(r);
    return a;
  }
  bool never = std::any_of(e.begin(), e.end(), refused_for_good);
  a.never = never;
  const auto& exec = e[5];
  if (e[0].is_error()) {
    a.wrote = e[1].is_string();
    a.unknown = !e[1].is_string() && !e[1].is_nil() && !e[1].is_error();
    return a;
  }
  if (!exec.is_array()) {
    // EXECABORT: nothing ran. Any other answer (EXEC refused after MULTI was not): unknown.
    a.unknown = !(exec.is_error() && exec.str().rfind("EXECABORT", 0) == 0);
    return a;
  }
  const auto& ran = exec.elements();
  if (ran.size() != 4) {
    a.unknown = true;
    return a;
  }
  a = read_unqueued_answer(reply::make_array({ran[0], ran[2], ran[3]}));
  a.never = a.never || never;
  a.granted = a.granted && ran[1].is_integer() && ran[1].integer() == 0;
  return a;
}

std::array<plain_command, 6> plain_commands_of(const script& s,
                                               std::span<const std::string_view> keys,
                                               std::span<const std::string_view> args,
                                               std::size_t& size) noexcept {
  if (&s == &sem_solo_commands) return solo_commands(keys, args, size);
  std::array<plain_command, 6> out{};
  auto lock = unqueued_commands(keys[0], keys[1], args[0], args[1]);
  std::copy(lock.begin(), lock.end(), out.begin());
  size = lock.size();
  return out;
}

void semaphore_protocol::begin(wait_loop& loop, steady::time_point,
                               const std::vector<std::string>& channels) {
  if (loop.attempt_index() == 0 && solo_first_ && !solo_refused_) {
    solo_in_flight_ = true;
    channels_ = channels;
    const auto& k = target_.keys;
    // The line: the fair variant's owners, the unfair one's waiters and their entries.
    script_keys keys = target_.fair ? script_keys{k.name, k.fence, k.owners}
                                    : script_keys{k.name, k.fence, k.waiters, k.waiter_info};
    loop.emit(0, sem_solo_commands, std::move(keys),
              {solo_value(target_.name_mark, loop.id(), permits_), target_.ttl_text},
              purpose::attempt);
    return;
  }
  emit_script(loop, channels);
}

void semaphore_protocol::emit_script(wait_loop& loop, const std::vector<std::string>& channels) {
  std::string attempt = std::to_string(loop.attempt_index());
  bool last = loop.last_attempt();
  std::string channel = !last && !channels.empty() ? channels[0] : std::string();
  if (!channel.empty()) loop.mark_queued();
  const auto& limit = target_.limit_text;
  const auto& ttl = target_.ttl_text;
  const auto& k = target_.keys;
  if (target_.fair) {
    // Queued (queue_ms > 0) even without a channel: its ticket keeps its place in the queue.
    auto queue_ms = last ? milliseconds::zero() : target_.queue_ttl;
    // "<channel> <attempt>": sem_release.lua may make this token a holder (see on_handoff).
    if (!channel.empty() && target_.accepts_handoff()) channel.append(" ").append(attempt);
    script_keys keys{k.owners, k.expiries, k.weights, k.tickets, k.waiter_info, k.fence};
    if (!k.name.empty()) keys.push_back(k.name);  // the holders' mark (name_mark.lua)
    loop.emit(0, sem_fair_acquire_script, std::move(keys),
              {loop.id(), limit, permits_, ttl, std::to_string(queue_ms.count()), channel,
               target_.name_mark},
              purpose::attempt);
  } else {
    std::string waiter;
    if (!channel.empty()) {
      waiter = std::to_string(waiter_entry_ttl(target_.retry_delay).count()) + " " + channel;
      // "<attempt>": sem_release.lua may make this token a holder (see on_handoff).
      if (target_.accepts_handoff()) waiter.append(" ").append(attempt);
    }
    script_keys keys{k.expiries, k.weights, k.fence, k.waiters, k.waiter_info, k.tickets};
    if (!k.name.empty()) keys.push_back(k.name);  // the holders' mark (name_mark.lua)
    loop.emit(0, sem_acquire_script, std::move(keys),
              {loop.id(), limit, permits_, ttl, waiter, target_.name_mark}, purpose::attempt);
  }
}

void semaphore_protocol::on_answer(wait_loop& loop, purpose, std::size_t, steady::time_point now,
                                   std::error_code ec, const reply& r) {
  semaphore_reply parsed;
  if (std::exchange(solo_in_flight_, false) && (!ec || r.is_error())) {
    // Anything but a clean grant is for the acquire script to settle, at once: it adopts the
    // value we may have set (adopt_solo), queues us, or waits out a quarantine; and a give-up
    // must remove what it leaves.
    auto a = read_solo_answer(r);
    if (a.never) solo_refused_ = true;
    if (!a.granted) {
      if (a.wrote || a.unknown) attempt_lost_ = true;
      return emit_script(loop, std::exchange(channels_, {}));
    }
    ec.clear();
    parsed.granted = true;
    parsed.ticket = a.fence;
  } else if (!ec) {
    parsed = parse_semaphore_reply(r, target_.fair, ec);
  }
  auto& votes = loop.votes();
  if (ec) {
    votes.failed(0, ec, r.is_error() ? r.str() : std::string());
  } else if (parsed.granted) {
    votes.granted(0, parsed.ticket);
  } else {
    votes.taken(0, parsed.next_expiry_ms);
    // Another kind of lock holds the name: its release wakes nobody here; watch its key.
    if (parsed.name_held) loop.note_foreign_holder(0);
  }
  if (ec) {
    // The script may have run before the answer was lost: the next attempt (same token) finds
    // what it left, and giving up must remove it (also after later attempts that neither were
    // granted nor queued: in quarantine they leave a held permit be).
    attempt_lost_ = true;
    return loop.attempt_over(now, {ec, {}, 0, {}, true});
  }
  if (parsed.granted) {
    auto valid_until = votes.valid_until();
    // Granted: the granting script dequeued us, so no entry is left to remove, unless the
    // caller stopped meanwhile and the give-up gives the permit back.
    if (now < valid_until) {
      return loop.attempt_over(
          now, {{}, loop.id(), static_cast<std::uint64_t>(parsed.ticket), valid_until, true});
    }
    // Granted too late to be of use. The entry is ours: a retry renews it, giving up drops it
    // (also after a later attempt that a quarantine refused, which leaves it be).
    attempt_lost_ = true;
    return loop.attempt_over(now, {errc::lease_expired, {}, 0, {}, true});
  }
  loop.attempt_over(now, {errc::not_acquired, {}, 0, {}, parsed.queued});
}

// An earlier attempt may have queued us although the last one did not. Leave no permit or
// queue place behind (the outcome waits for the answer, so that a caller who retries at once
// does not meet our own leftover). A wake-up we got and will not use is handed on to the next
// waiter by the same script. Between attempts (`ended` null) it always goes out.
void semaphore_protocol::give_up(wait_loop& loop, const attempt_verdict* ended) {
  if (ended && !ended->leftovers && !loop.queued() && !attempt_lost_) return;
  loop.emit(0, sem_release_script, semaphore_release_keys(target_.keys),
            {loop.id(), target_.limit_text, target_.variant_text, target_.name_mark},
            purpose::final_cleanup);
}

// A release made our token a holder (sem_release.lua) for the attempt r that wrote the entry
// it used. The token is the same in every attempt, so an attempt that runs after the handoff
// finds itself holding and is granted again (with a fence of its own), harmlessly; but one
// still in flight must not be left behind: it could run after our release and take a permit
// nobody holds. So with an attempt in flight the handoff waits for its answer: "not granted"
// proves it ran before the release, and the handoff stands; "granted" supersedes it; an error
// (it may yet run) makes the message a mere wake-up, and the next attempt finds the permit.
// One that cannot be taken (born expired, or no longer wanted) has no release of its own: one
// that ran late could take back a permit a later attempt won. The next attempt finds itself
// holding and takes the permit over with a new validity, or the give-up's cleanup removes it.
acquire_protocol::handoff_timing semaphore_protocol::timing_of_handoff(const wait_loop& loop,
                                                                       std::size_t) const {
  return loop.in_flight() ? handoff_timing::defer : handoff_timing::take;
}

std::string semaphore_protocol::handoff_token(const wait_loop& loop, std::size_t) const {
  return loop.id();
}

// sem_release.lua for the token: gives back a permit a release handed over, or leaves the
// queue.
void semaphore_protocol::give_back_script(const wait_loop& loop,
                                          acquisition::late_handoff_give_back& plan) const {
  auto keys = semaphore_release_keys(target_.keys);
  plan.code = &sem_release_script;
  plan.keys.assign(keys.begin(), keys.end());
  plan.args = {loop.id(), target_.limit_text, target_.variant_text, target_.name_mark};
}

std::string_view semaphore_protocol::holder_key(std::size_t) const noexcept {
  return target_.keys.name;
}

std::uint16_t semaphore_protocol::slot(std::size_t) const noexcept {
  return hash_slot(target_.keys.expiries);
}

}  // namespace dlock::detail
