// SPDX-License-Identifier: Apache-2.0
// The vote is asked afresh on every connect, not cached: a connect usually follows a failure,
// which is when the master may have moved. +switch-master on any sentinel is only a cue to ask
// the majority again; the connections that watch move when it names a master other than theirs.
#include "net/sentinel.hpp"

#include <asio/dispatch.hpp>

#include <map>
#include <mutex>
#include <system_error>

#include "net/connection.hpp"
#include "net/runtime.hpp"

namespace dlock::detail {
namespace {

constexpr std::string_view switch_channel = "+switch-master";
constexpr auto resubscribe_delay = std::chrono::milliseconds(500);
// After a switch announcement, while the sentinels disagree: votes this far apart, this many.
constexpr auto revote_delay = std::chrono::milliseconds(200);

}  // namespace

client_options sentinel_options(const client_options& o) {
  client_options s;
  s.connect_timeout = o.connect_timeout;
  s.request_timeout = o.request_timeout;
  s.reconnect_backoff_min = std::chrono::milliseconds(10);
  s.reconnect_backoff_max = std::chrono::milliseconds(200);
  s.user = o.sentinel_user;
  s.password = o.sentinel_password;
  return s;
}

void check_sentinel_endpoint(const endpoint& where) {
  auto reject = [](const std::string& why) {
    throw std::system_error(errc::invalid_argument, "redis-sentinel endpoint: " + why);
  };
  if (where.sentinels.empty()) reject("no sentinels");
  if (where.tls) reject("TLS is not supported with Sentinel");
  if (where.is_unix() || !where.host.empty()) reject("a host or socket beside the sentinels");
  for (unsigned char c : where.master_name) {
    if (c <= ' ' || c == 0x7f) reject("a master name with spaces or control characters");
  }
  for (std::size_t i = 0; i < where.sentinels.size(); ++i) {
    const auto& s = where.sentinels[i];
    if (s.host.empty() || s.port == 0) reject("a sentinel without host or port");
    for (std::size_t j = 0; j < i; ++j) {
      if (where.sentinels[j] == s) reject("sentinel " + s.host + " listed twice");
    }
  }
}

std::shared_ptr<sentinel_resolver> sentinel_resolver::shared_for(const endpoint& where,
                                                                 const client_options& options) {
  static std::mutex mutex;
  static auto* resolvers = new std::map<std::string, std::weak_ptr<sentinel_resolver>>;
  std::string key = where.to_string() + '\n' + options.sentinel_user + '\n' +
                    options.sentinel_password;
  std::lock_guard lock(mutex);
  for (auto it = resolvers->begin(); it != resolvers->end();) {  // forget the dead ones
    it = it->second.expired() ? resolvers->erase(it) : std::next(it);
  }
  auto& slot = (*resolvers)[key];
  auto resolver = slot.lock();
  if (!resolver) {
    resolver = std::make_shared<sentinel_resolver>(where, options);
    slot = resolver;
  }
  return resolver;
}

sentinel_resolver::sentinel_resolver(const endpoint& where, const client_options& options)
    : where_(where),
      timeout_(options.connect_timeout),
      addresses_(where.sentinels),
      revote_timer_(runtime::shared().get_executor()) {
  auto s_options = sentinel_options(options);
  for (const auto& address : where.sentinels) {
    endpoint e;
    e.host = address.host;
    e.port = address.port;
    sentinels_.push_back({address, std::make_shared<connection>(e, s_options),
                          std::make_shared<connection>(e, s_options),
                          std::make_unique<asio::steady_timer>(runtime::shared().get_executor())});
  }
  ask_command_ = command{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", where.master_name}.bytes();
}

sentinel_resolver::~sentinel_resolver() {
  for (auto& s : sentinels_) {
    s.ask->close(errc::cancelled);
    s.subscriber->close(errc::cancelled);
  }
}

void sentinel_resolver::resolve(verdict_handler done) {
  waiting_.push_back(std::move(done));
  follow();
  if (!asking_) start_round();
}

void sentinel_resolver::follow() {
  if (std::exchange(following_, true)) return;
  for (std::size_t i = 0; i < sentinels_.size(); ++i) subscribe(i);
}

void sentinel_resolver::watch(std::weak_ptr<connection> c) {
  std::erase_if(watchers_, [](const auto& w) { return w.expired(); });
  watchers_.push_back(std::move(c));
}

void sentinel_resolver::start_round() {
  asking_ = true;
  revote_ = false;
  ++round_;
  answers_.assign(sentinels_.size(), {});
  // Within the connect timeout, so that the vote (and what each sentinel said) comes back
  // before the connect that asked for it times out.
  auto deadline = clock::now() + timeout_ * 3 / 4;
  for (std::size_t i = 0; i < sentinels_.size(); ++i) {
    sentinels_[i].ask->submit(ask_command_, 1, deadline,
                              [self = shared_from_this(), i, round = round_](std::error_code ec,
                                                                             reply r) {
                                self->on_answer(i, round, read_sentinel_answer(ec, r));
                              });
  }
}

void sentinel_resolver::on_answer(std::size_t i, std::size_t round, sentinel_answer answer) {
  if (round != round_ || !asking_) return;  // the round was decided without this answer
  answers_[i] = std::move(answer);
  auto v = decide_master(addresses_, answers_, where_.master_name);
  bool all_in = true;
  for (const auto& a : answers_) all_in &= a.what != sentinel_answer::kind::pending;
  // A majority's answer cannot change: no need to wait for a hung sentinel.
  if (v.what != sentinel_verdict::kind::agreed && v.what != sentinel_verdict::kind::unknown_master &&
      !all_in) {
    return;
  }
  asking_ = false;
  deliver(v);
}

// Every vote that agrees moves every connection that is elsewhere, whoever asked: the request
// connection, the inbox and the guard of a client must not end up on two different nodes.
void sentinel_resolver::deliver(const sentinel_verdict& v) {
  for (auto& done : std::exchange(waiting_, {})) done(v);
  if (v.what == sentinel_verdict::kind::agreed) {
    if (!revote_) switch_votes_left_ = 0;  // else this round predates the cue: keep the budget
    auto watchers = watchers_;  // master_moved runs handlers, which may add watchers
    for (const auto& w : watchers) {
      if (auto c = w.lock()) c->master_moved(v.master);
    }
  } else if (switch_votes_left_ > 0) {
    // A switch was announced and the sentinels do not agree yet: ask again shortly.
    --switch_votes_left_;
    revote_timer_.expires_after(revote_delay);
    revote_timer_.async_wait([weak = weak_from_this()](std::error_code ec) {
      auto self = weak.lock();
      if (!ec && self) self->revote();
    });
  }
  if (revote_) revote();  // a cue came while this round was under way: its answers are older
}

// A vote for no one in particular: its deliver() moves the watchers.
void sentinel_resolver::revote() {
  if (asking_) {
    revote_ = true;
    return;
  }
  start_round();
}

void sentinel_resolver::subscribe(std::size_t i) {
  std::weak_ptr<sentinel_resolver> weak = shared_from_this();
  sentinels_[i].subscriber->set_push_handlers(
      [weak](const reply& r) {
        if (auto self = weak.lock()) self->on_switch(r);
      },
      [weak, i] {
        if (auto self = weak.lock()) self->resubscribe_later(i);
      });
  send_subscribe(i);
}

void sentinel_resolver::send_subscribe(std::size_t i) {
  sentinels_[i].subscriber->submit(
      subscribe_payload(switch_channel), 1, clock::now() + timeout_,
      [weak = weak_from_this(), i](std::error_code ec, reply) {
        auto self = weak.lock();
        if (!self) return;
        if (ec) return self->resubscribe_later(i);
        // Subscribed again after a drop: a switch may have been announced meanwhile.
        if (std::exchange(self->sentinels_[i].dropped, false)) self->revote();
      });
}

// The subscription died with its connection (or never started): subscribe again a little
// later, so that a sentinel that is down costs one connect attempt per delay.
void sentinel_resolver::resubscribe_later(std::size_t i) {
  sentinels_[i].dropped = true;
  auto& timer = *sentinels_[i].resubscribe;
  if (timer.expiry() > clock::now()) return;  // already armed
  timer.expires_after(resubscribe_delay);
  timer.async_wait([weak = weak_from_this(), i](std::error_code ec) {
    auto self = weak.lock();
    if (!ec && self) self->send_subscribe(i);
  });
}

// "<name> <old-ip> <old-port> <new-ip> <new-port>" on +switch-master: a cue to vote again
// (and, while the sentinels still disagree, again, for a few seconds).
void sentinel_resolver::on_switch(const reply& message) {
  const auto& parts = message.elements();
  if (parts.size() != 3 || parts[1].str() != switch_channel) return;
  std::string_view text = parts[2].str();
  if (text.substr(0, text.find(' ')) != where_.master_name) return;
  switch_votes_left_ = max_switch_votes;
  revote();
}

}  // namespace dlock::detail
