// dlock::lock_set: acquire_all.lua takes every key or none; the lease's owner releases and
// extends the keys one script each (release.lua, extend.lua, pipelined on the connection), so
// that each name's queued mutex waiter is handed its key as after a mutex's release.
#include "dlock/lock_set.hpp"

#include <algorithm>
#include <thread>

#include "algo/acquisition.hpp"
#include "algo/quorum_round.hpp"
#include "algo/retry.hpp"
#include "dlock/key_layout.hpp"
#include "lease_state.hpp"
#include "option_checks.hpp"
#include "script.hpp"
#include "token.hpp"

namespace dlock {
namespace detail {

class lock_set_core final : public lease_owner,
                            public std::enable_shared_from_this<lock_set_core> {
 public:
  lock_set_core(client node, std::vector<std::string> keys, lock_options options)
      : node_(std::move(node)), keys_(std::move(keys)), options_(std::move(options)) {
    for (const auto& k : keys_) {
      auto companions = lock_keys_for(k);
      script_keys_.push_back(k);
      script_keys_.push_back(companions.fence);
      companions_.push_back(std::move(companions));
    }
    for (const auto& k : keys_) label_ += (label_.empty() ? "" : ",") + k;
    node_timeout_ = effective_node_timeout(options_.node_timeout, options_.ttl,
                                           node_.options().request_timeout);
  }

  const std::vector<std::string>& keys() const noexcept { return keys_; }
  const std::string& key() const noexcept override { return label_; }
  primitive kind() const noexcept override { return primitive::lock; }
  std::chrono::milliseconds default_ttl() const noexcept override { return options_.ttl; }
  std::chrono::milliseconds retry_delay() const noexcept { return options_.retry_delay; }
  io_executor get_executor() const noexcept override { return node_.get_executor(); }

  // One attempt, under a token of its own: the cleanup of a failed attempt is not awaited and
  // may run late (behind an EVAL fallback after NOSCRIPT, or on a connection given up after a
  // timeout), so a token shared with the next attempt could delete the keys that one took.
  // The price: a failed attempt that lands after its cleanup leaves its keys held by nobody
  // until they expire. `wait_hint`: on not_acquired, the PTTL of the key in the way (-1: unknown).
  lease attempt(std::error_code& ec, long long& wait_hint) {
    wait_hint = -1;
    auto state = std::make_shared<lease_state>();
    state->token = random_token() + ".0";
    auto start = steady::now();
    std::vector<std::string> args{state->token, std::to_string(options_.ttl.count())};
    reply r = wait<reply>(ec, [&](auto handler) {
      run_script(node_, acquire_all_script, script_keys_, std::move(args), node_timeout_,
                 std::move(handler));
    });
    if (!ec && r.is_error()) ec = error_from_reply(r);
    const auto& e = r.elements();
    if (!ec && (!r.is_array() || e.size() < 2 || !e[0].is_integer() || !e[1].is_integer())) {
      ec = errc::protocol_error;
    }
    if (ec) {
      // A timeout may have taken the keys, an error midway part of them (a script is not
      // rolled back): give back whatever holds this token. Harmless where nothing does.
      release_keys(state->token, {});
      return {};
    }
    if (e[0].integer() != 1) {
      ec = errc::not_acquired;
      if (e.size() == 3 && e[2].is_integer()) wait_hint = e[2].integer();
      return {};
    }
    state->fence = static_cast<std::uint64_t>(e[1].integer());
    auto until = start + options_.ttl - drift_allowance(options_.ttl, options_.drift_factor);
    if (steady::now() >= until) {
      release_keys(state->token, {});
      ec = errc::lease_expired;
      return {};
    }
    state->set_deadline(until);
    return make_lease(shared_from_this(), std::move(state));
  }

  void start_release(const std::shared_ptr<lease_state>& state, done_handler handler) override {
    if (state->released.exchange(true)) return handler(errc::not_held);
    release_keys(state->token, std::move(handler));
  }

  void start_extend(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override {
    extend_keys(state, ttl, {}, std::move(handler));
  }

  void start_settle(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                    done_handler handler) override {
    extend_keys(state, ttl, settled_token(state->token), std::move(handler));
  }

 private:
  // Each key's release.lua, together: success when every key was still ours, not_held when
  // some were not (gone, or taken after they expired), else the first error. `done` may be
  // empty.
  void release_keys(const std::string& token, done_handler done) {
    struct tally {
      std::size_t pending, wanted;
      std::size_t ours = 0;
      std::error_code first_error;
      done_handler done;
    };
    auto t = std::make_shared<tally>(tally{keys_.size(), keys_.size(), 0, {}, std::move(done)});
    for (const auto& k : companions_) {
      auto keys = lock_release_keys(k);
      run_script(node_, release_script, std::vector<std::string>(keys.begin(), keys.end()),
                 {token}, node_timeout_, [t](std::error_code ec, reply r) {
                   if (!ec && r.is_error()) ec = error_from_reply(r);
                   if (ec && !t->first_error) t->first_error = ec;
                   if (!ec && r.is_integer() && r.integer() == 1) ++t->ours;
                   if (--t->pending > 0 || !t->done) return;
                   if (t->first_error) return t->done(t->first_error);
                   t->done(t->ours == t->wanted ? std::error_code()
                                                       : std::error_code(errc::not_held));
                 });
    }
  }

  // extend.lua on each key: the lease holds only while every key is still its own. A key that
  // answered "not ours" proves the loss, whatever another key's transport error says.
  void extend_keys(const std::shared_ptr<lease_state>& state, std::chrono::milliseconds ttl,
                   const std::string& successor, done_handler handler) {
    if (auto refused = extend_refused(*state, ttl)) return handler(refused);
    struct tally {
      std::size_t pending;
      std::size_t ours = 0, theirs = 0;
      std::error_code first_error;
      done_handler done;
    };
    auto t = std::make_shared<tally>(tally{keys_.size(), 0, 0, {}, std::move(handler)});
    auto start = steady::now();
    auto until = start + ttl - drift_allowance(ttl, options_.drift_factor);
    std::string ttl_ms = std::to_string(ttl.count());
    for (const auto& k : keys_) {
      run_script(node_, extend_script, {k}, {state->token, ttl_ms, successor}, node_timeout_,
                 [self = shared_from_this(), state, t, until](std::error_code ec, reply r) {
                   if (!ec && r.is_error()) ec = error_from_reply(r);
                   if (ec && !t->first_error) t->first_error = ec;
                   if (!ec && r.is_integer()) ++(r.integer() == 1 ? t->ours : t->theirs);
                   if (--t->pending > 0) return;
                   std::error_code verdict;
                   if (t->theirs > 0) {
                     verdict = errc::lease_lost;
                   } else if (t->ours < self->keys_.size()) {
                     verdict = t->first_error ? t->first_error : errc::protocol_error;
                   } else if (state->validity_known && steady::now() >= state->deadline()) {
                     verdict = errc::lease_expired;  // landed after the validity: a gap
                   }
                   t->done(apply_extend(*self, *state, verdict, until));
                 });
    }
  }

  client node_;
  std::vector<std::string> keys_;
  std::vector<lock_keys> companions_;
  std::vector<std::string> script_keys_;  // acquire_all.lua's: key, fence, key, fence ...
  std::string label_;
  lock_options options_;
  std::chrono::milliseconds node_timeout_{};
};

}  // namespace detail

namespace {

std::vector<std::string> checked_keys(const client& node, std::vector<std::string> names,
                                      const lock_options& o) {
  using detail::reject_argument;
  if (names.empty()) reject_argument("a lock set needs at least one name");
  if (names.size() > 1000) reject_argument("a lock set takes at most 1000 names");
  if (node.where().is_cluster()) reject_argument("a lock set does not run on Redis Cluster yet");
  if (o.fair || o.copies > 1 || !o.reentrant.empty()) {
    reject_argument("a lock set takes neither fair, copies nor reentrant");
  }
  // Its grants and extends are not confirmed on replicas (as a mutex's are): refused rather
  // than silently unguarded.
  if (node.options().replication_guard.enabled) {
    reject_argument("a lock set does not take the replication guard yet");
  }
  std::vector<std::string> keys;
  for (const auto& name : names) {
    std::string key = o.key_prefix + name;
    detail::check_shared_options("lock", name, key, o);
    if (is_companion_key(key)) reject_argument("a lock key is one of dlock's companion keys");
    keys.push_back(std::move(key));
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace

lock_set::lock_set(client node, std::vector<std::string> names, lock_options options)
    : core_(std::make_shared<detail::lock_set_core>(
          node, checked_keys(node, std::move(names), options), options)) {}

lock_set::~lock_set() = default;

const std::vector<std::string>& lock_set::keys() const noexcept { return core_->keys(); }

lease lock_set::try_acquire(std::error_code& ec) {
  long long hint = -1;
  return core_->attempt(ec, hint);
}

// The retry policy is the lock's (algo/retry.hpp): jittered retry_delay, cut short to the
// expiry of the key that was in the way.
lease lock_set::acquire_until(clock::time_point deadline, std::error_code& ec) {
  for (;;) {
    long long hint = -1;
    lease l = core_->attempt(ec, hint);
    if (l || !detail::is_retryable(ec)) return l;
    auto now = clock::now();
    if (now >= deadline) return {};
    auto sleep = detail::jittered_delay(core_->retry_delay(), detail::jitter_random());
    if (hint >= 0) sleep = std::min<clock::duration>(sleep, std::chrono::milliseconds(hint + 1));
    sleep = std::max<clock::duration>(sleep, std::chrono::milliseconds(1));  // retry_delay 0
    if (deadline != clock::time_point::max()) sleep = std::min(sleep, deadline - now);
    std::this_thread::sleep_for(sleep);
  }
}

lease lock_all(client node, std::vector<std::string> names, lock_options options) {
  lock_set set{std::move(node), std::move(names), std::move(options)};
  std::error_code ec;
  lease l = set.acquire(ec);
  if (ec) throw std::system_error(ec, "dlock: cannot lock all of the set");
  return l;
}

}  // namespace dlock
