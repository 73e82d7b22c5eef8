// The vote is asked afresh on every connect, not cached: a connect usually follows a failure,
// which is when the master may have moved. +switch-master on any sentinel is only a cue to ask
// the majority again; the connections that watch move when it names a master other than theirs.
#include "net/sentinel.hpp"

#include <asio/dispatch.hpp>

#include <map>
#include <mutex>

#include "net/connection.hpp"
#include "net/runtime.hpp"

namespace dlock::detail {
namespace {

constexpr std::string_view switch_channel = "+switch-master";
constexpr auto resubscribe_delay = std::chrono::milliseconds(500);

client_options sentinel_options(const client_options& o) {
  client_options s;
  s.connect_timeout = o.connect_timeout;
  s.request_timeout = o.connect_timeout;
  s.reconnect_backoff_min = std::chrono::milliseconds(10);
  s.reconnect_backoff_max = std::chrono::milliseconds(200);
  s.user = o.sentinel_user;
  s.password = o.sentinel_password;
  return s;
}

}  // namespace

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
    : where_(where), timeout_(options.connect_timeout), addresses_(where.sentinels) {
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
  if (!following_) {
    following_ = true;
    for (std::size_t i = 0; i < sentinels_.size(); ++i) subscribe(i);
  }
  if (!asking_) start_round();
}

void sentinel_resolver::watch(std::weak_ptr<connection> c) { watchers_.push_back(std::move(c)); }

void sentinel_resolver::start_round() {
  asking_ = true;
  ++round_;
  answers_.assign(sentinels_.size(), {});
  auto deadline = clock::now() + timeout_;
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

void sentinel_resolver::deliver(const sentinel_verdict& v) {
  for (auto& done : std::exchange(waiting_, {})) done(v);
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
        if (self && ec) self->resubscribe_later(i);
      });
}

// The subscription died with its connection (or never started): subscribe again a little
// later, so that a sentinel that is down costs one connect attempt per delay.
void sentinel_resolver::resubscribe_later(std::size_t i) {
  auto& timer = *sentinels_[i].resubscribe;
  if (timer.expiry() > clock::now()) return;  // already armed
  timer.expires_after(resubscribe_delay);
  timer.async_wait([weak = weak_from_this(), i](std::error_code ec) {
    auto self = weak.lock();
    if (!ec && self) self->send_subscribe(i);
  });
}

// "<name> <old-ip> <old-port> <new-ip> <new-port>" on +switch-master.
void sentinel_resolver::on_switch(const reply& message) {
  const auto& parts = message.elements();
  if (parts.size() != 3 || parts[1].str() != switch_channel) return;
  std::string_view text = parts[2].str();
  if (text.substr(0, text.find(' ')) != where_.master_name) return;
  resolve([self = shared_from_this()](const sentinel_verdict& v) {
    if (v.what != sentinel_verdict::kind::agreed) return;  // each connect asks again anyway
    std::erase_if(self->watchers_, [](const auto& w) { return w.expired(); });
    for (const auto& w : self->watchers_) {
      if (auto c = w.lock()) c->master_moved(v.master);
    }
  });
}

}  // namespace dlock::detail
