// SPDX-License-Identifier: Apache-2.0
#include "net/inbox.hpp"

#include <algorithm>

#include "key_layout_internal.hpp"
#include "token.hpp"

namespace dlock::detail {

inbox::inbox(endpoint where, client_options options)
    : conn_(std::make_shared<connection>(std::move(where), options)),
      options_(std::move(options)),
      channel_("dlock:wake:" + random_token()) {
  // Under Sentinel the request connection may reach another node than this one for a while,
  // where the redirect id would name a stranger's connection.
  tracking_possible_ = !conn_->where().is_sentinel();
}

inbox::inbox(std::shared_ptr<cluster_router> router, std::shared_ptr<shard_subscribers> subscribers,
             std::uint16_t slot, client_options options)
    : router_(std::move(router)),
      subscribers_(std::move(subscribers)),
      slot_(slot),
      options_(std::move(options)),
      channel_("s:{" + tag_for_slot(slot) + "}dlock:wake:" + random_token()) {}

void inbox::install_handlers() {
  if (handlers_installed_ || subscribers_) return;  // sharded: shard_subscribers dispatches
  // Weak: the connection must not keep its inbox alive (the inbox owns the connection).
  std::weak_ptr<inbox> weak = shared_from_this();
  conn_->set_push_handlers(
      [weak](const reply& r) {
        if (auto self = weak.lock()) self->on_message(r);
      },
      [weak] {
        if (auto self = weak.lock()) self->on_drop();
      });
  handlers_installed_ = true;
}

bool inbox::connect_to_slot_owner() {
  auto owner = router_->known_owner(slot_);
  if (!owner) return false;
  if (conn_ && master_ == owner) return true;
  if (master_) subscribers_->detach(*master_, channel_);
  conn_.reset();
  master_.reset();
  conn_ = subscribers_->attach(*owner, channel_, weak_from_this());
  if (!conn_) return false;  // the TLS files cannot be loaded now: as if the owner were unknown
  master_ = owner;
  return true;
}

void inbox::subscribe(unique_function<void(std::error_code)> done) {
  if (subscribed_) return done({});
  // A node that is down or refuses SUBSCRIBE (ACL) is asked again only after a backoff of its
  // own, so that waiters who ask at every attempt do not turn into a SUBSCRIBE storm.
  if (!subscribing_ && clock::now() < retry_after_) return done(last_error_);
  if (!subscribing_ && router_ && !connect_to_slot_owner()) {
    // The router is reading the slot map; try again after the backoff.
    last_error_ = errc::node_unreachable;
    retry_after_ = clock::now() + backoff_;
    return done(last_error_);
  }
  waiting_for_subscription_.push_back(std::move(done));
  if (subscribing_) return;
  subscribing_ = true;
  install_handlers();
  // With tracking: CLIENT ID first (watch_key redirects invalidations to this connection), and
  // __redis__:invalidate, the channel they come on, as Redis's documentation asks. Either may
  // be refused (an ACL, an old server) without harm: wake-ups still work, foreign holders are
  // polled.
  bool with_tracking = tracking_possible_ && !router_;
  std::string payload = subscribe_payload(channel_, router_ != nullptr);
  if (with_tracking) {
    payload = std::string(command{"CLIENT", "ID"}.bytes()) + payload +
              subscribe_payload("__redis__:invalidate");
  }
  conn_->submit(std::move(payload), with_tracking ? 3 : 1,
                clock::now() + conn_->options().request_timeout,
                [self = shared_from_this(), with_tracking](std::error_code ec, reply r) {
                  self->subscribing_ = false;
                  self->tracking_id_.reset();
                  if (!ec && with_tracking) {
                    auto steps = r.elements();  // a copy: r takes the confirmation below
                    if (steps.size() == 3 && steps[0].is_integer()) {
                      self->tracking_id_ = steps[0].integer();
                    }
                    r = steps.size() == 3 ? std::move(steps[1]) : reply{};
                    if (r.is_error()) ec = error_from_reply(r);
                  }
                  bool confirmed = r.is_array() && !r.elements().empty() &&
                                   r.elements()[0].str() ==
                                       (self->router_ ? "ssubscribe" : "subscribe");
                  if (!ec && !confirmed) ec = errc::protocol_error;
                  // MOVED: the slot's master is another now; the router reads the map again.
                  if (ec && self->router_) self->router_->refresh();
                  self->subscribed_ = !ec;
                  if (ec) {
                    self->last_error_ = ec;
                    self->retry_after_ = clock::now() + self->backoff_;
                    self->backoff_ = std::min(2 * self->backoff_, max_subscribe_backoff);
                  } else {
                    self->backoff_ = min_subscribe_backoff;
                  }
                  for (auto& h : std::exchange(self->waiting_for_subscription_, {})) h(ec);
                });
}

void inbox::listen(const std::string& token, std::function<void(std::string_view)> on_wake) {
  listeners_[token] = std::move(on_wake);
}

void inbox::forget(const std::string& token) {
  listeners_.erase(token);
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    std::erase_if(it->second, [&](const watch& w) { return w.watcher == token; });
    it = it->second.empty() ? watchers_.erase(it) : std::next(it);
  }
}

bool inbox::can_track() const noexcept {
  return tracking_possible_ && !router_ && !tracking_refused_;
}

void inbox::watch_key(connection& requests, const std::string& key, const std::string& watcher,
                      std::function<bool(const reply&)> changed_already,
                      std::function<void()> on_change) {
  if (!subscribed_ || !tracking_id_ || !can_track()) return;
  auto& watches = watchers_[key];
  std::erase_if(watches, [&](const watch& w) { return w.watcher == watcher; });
  watches.push_back({watcher, std::move(on_change)});
  // Sent again at every watch: the request connection forgets its tracking when it reconnects,
  // and the redirect id changes when this connection does. OPTIN: only the read after CACHING
  // yes is tracked, and nothing else sent on the request connection. PUBSUB NUMSUB first: the
  // redirect id is only ours on the server where this inbox is subscribed, and the request
  // connection may already reach another one (a restart or an address failover this inbox has
  // not noticed yet), where the id may be a stranger's connection.
  command read{"PUBSUB", "NUMSUB", channel_};
  read.then({"CLIENT", "TRACKING", "on", "REDIRECT", std::to_string(*tracking_id_), "OPTIN",
             "NOLOOP"})
      .then({"CLIENT", "CACHING", "yes"})
      .then({"GET", key});
  std::weak_ptr<inbox> weak = weak_from_this();
  std::weak_ptr<connection> via = requests.weak_from_this();
  requests.submit(
      std::string(read.bytes()), 4, clock::now() + requests.options().request_timeout,
      [weak, via, key, watcher, changed_already = std::move(changed_already)](std::error_code ec,
                                                                              reply r) {
        auto self = weak.lock();
        if (!self || ec || !r.is_array() || r.elements().size() != 4) return;
        const auto& steps = r.elements();
        for (std::size_t i = 0; i < 3; ++i) {
          if (!steps[i].is_error()) continue;
          // Not offered here (Redis before 6, an ACL): never asked again. Anything else (the
          // redirect id is gone: this inbox's connection died on the server) passes.
          const auto& text = steps[i].str();
          if (text.rfind("NOPERM", 0) == 0 || text.find("nknown") != std::string::npos) {
            self->tracking_refused_ = true;
          }
          return self->forget_watch(key, watcher);
        }
        // ["channel", count]: 0 means another server than this inbox's; stop tracking there.
        const auto& numsub = steps[0].elements();
        if (numsub.size() != 2 || numsub[1].integer() < 1) {
          if (auto conn = via.lock()) {
            conn->submit(std::string(command{"CLIENT", "TRACKING", "off"}.bytes()), 1,
                         clock::now() + conn->options().request_timeout,
                         [](std::error_code, reply) {});
          }
          return self->forget_watch(key, watcher);
        }
        // Changed before the read: no invalidation will come to say so.
        if (changed_already && changed_already(steps[3])) self->on_invalidated(&key, &watcher);
      });
}

void inbox::forget_watch(const std::string& key, const std::string& watcher) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  std::erase_if(it->second, [&](const watch& w) { return w.watcher == watcher; });
  if (it->second.empty()) watchers_.erase(it);
}

void inbox::on_invalidated(const std::string* key, const std::string* only) {
  std::vector<watch> fired;
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    if (key && it->first != *key) {
      ++it;
      continue;
    }
    auto& watches = it->second;
    for (auto w = watches.begin(); w != watches.end();) {
      if (only && w->watcher != *only) {
        ++w;
        continue;
      }
      fired.push_back(std::move(*w));
      w = watches.erase(w);
    }
    it = watches.empty() ? watchers_.erase(it) : std::next(it);
  }
  for (auto& w : fired) w.on_change();  // may watch again
}

// ["message" or "smessage", channel, payload]: the payload starts with the token of the waiter
// to wake. ["sunsubscribe", channel, count] unasked: the slot moved to another master.
void inbox::on_message(const reply& r) {
  const auto& e = r.elements();
  if (e.size() != 3) return;
  if (e[0].str() == "sunsubscribe") {
    if (router_) router_->refresh();
    return on_drop();
  }
  // ["message", "__redis__:invalidate", [key, ...]], or nil after a FLUSHDB: watch_key's.
  // Tracking ignores the database: a key of the same name written in another one counts too.
  // Anything else on that channel (a client that PUBLISHes to it) is no invalidation.
  if (e[1].str() == "__redis__:invalidate") {
    if (e[2].is_nil()) return on_invalidated(nullptr, nullptr);
    for (const auto& key : e[2].elements()) {
      if (key.is_string()) on_invalidated(&key.str(), nullptr);
    }
    return;
  }
  std::string_view payload = e[2].str();
  auto space = payload.find(' ');
  std::string_view token = payload.substr(0, space);
  std::string_view rest = space == std::string_view::npos ? "" : payload.substr(space + 1);
  auto it = listeners_.find(std::string(token));
  if (it == listeners_.end()) {
    // A waiter that gave up: a handoff that came before its give-up's cleanup ran is undone
    // by that cleanup; one that came after, or a wake-up, is given back or passed on here
    // (remember_gave_up). The entry stays for its whole window: a late attempt may queue the
    // token again after a give-back, and the give-back is idempotent.
    auto gone = gave_up_.find(std::string(token));
    if (gone == gave_up_.end()) return;
    if (clock::now() >= gone->second.until) {
      gave_up_.erase(gone);
      return;
    }
    auto give_back = gone->second.give_back;  // it may remember another token meanwhile
    give_back();
    return;
  }
  auto wake = it->second;  // the listener may forget itself while running
  wake(rest);
}

// Only the loss of a confirmed subscription can have lost a message; a connect or SUBSCRIBE
// that failed lost nothing, and waking every waiter for it would make them spin while a node
// is down (each attempt fails fast, and each failure would end the next sleep at once).
void inbox::close() {
  if (!subscribers_ && conn_) conn_->close(errc::cancelled);
}

void inbox::remember_gave_up(const std::string& token, clock::time_point until,
                             std::function<void()> give_back) {
  // Bounded by the rate of give-ups over the window: expired entries go whenever the map has
  // doubled since the last sweep, so that a long window costs no scan per give-up.
  if (gave_up_.size() >= std::max<std::size_t>(64, 2 * gave_up_after_sweep_)) {
    auto now = clock::now();
    std::erase_if(gave_up_, [now](const auto& e) { return e.second.until <= now; });
    gave_up_after_sweep_ = gave_up_.size();
  }
  gave_up_[token] = gave_up{until, std::move(give_back)};
}

void inbox::on_drop() {
  tracking_id_.reset();
  bool was_subscribed = std::exchange(subscribed_, false);
  // Their invalidations are lost with the connection: every watch is told now, as if its key
  // had changed, so that its owner looks (a waiter tries again, a kept-alive lease renews) and
  // watches anew. Cleared silently, a lease learned of another's takeover only at its next
  // planned renewal.
  on_invalidated(nullptr, nullptr);
  if (!was_subscribed) return;
  std::vector<std::function<void(std::string_view)>> all;
  for (auto& [token, wake] : listeners_) all.push_back(wake);
  for (auto& wake : all) wake("");
}

shard_subscribers::shard_subscribers(std::shared_ptr<cluster_router> router,
                                     client_options options)
    : router_(std::move(router)), options_(std::move(options)) {}

std::shared_ptr<connection> shard_subscribers::attach(const host_port& master,
                                                      const std::string& channel,
                                                      std::weak_ptr<inbox> box) {
  std::lock_guard lock(mu_);
  auto& sub = by_master_[master.to_string()];
  if (!sub) {
    auto made = std::make_shared<subscriber>();
    try {
      made->conn = std::make_shared<connection>(router_->node_endpoint(master), options_);
    } catch (const std::system_error&) {
      by_master_.erase(master.to_string());
      return nullptr;
    }
    // Weak both: the connection must not keep its subscriber (and so itself) alive, and may
    // outlive the registry (in-flight I/O holds it after close()).
    std::weak_ptr<subscriber> weak = made;
    std::weak_ptr<shard_subscribers> registry = weak_from_this();
    made->conn->set_push_handlers(
        [registry, weak](const reply& r) {
          auto self = registry.lock();
          auto s = weak.lock();
          if (!self || !s) return;
          for (auto& b : self->receivers(s, &r)) b->on_message(r);
        },
        [registry, weak] {
          auto self = registry.lock();
          auto s = weak.lock();
          if (!self || !s) return;
          for (auto& b : self->receivers(s, nullptr)) b->on_drop();
        });
    sub = std::move(made);
  }
  sub->by_channel[channel] = std::move(box);
  return sub->conn;
}

void shard_subscribers::detach(const host_port& master, const std::string& channel) {
  std::lock_guard lock(mu_);
  auto it = by_master_.find(master.to_string());
  if (it != by_master_.end()) it->second->by_channel.erase(channel);
}

std::vector<std::shared_ptr<inbox>> shard_subscribers::receivers(
    const std::shared_ptr<subscriber>& sub, const reply* message) const {
  std::vector<std::shared_ptr<inbox>> out;
  std::lock_guard lock(mu_);
  if (message) {
    // ["smessage" or "sunsubscribe", channel, ...]
    const auto& e = message->elements();
    if (e.size() < 2) return out;
    auto it = sub->by_channel.find(e[1].str());
    if (it != sub->by_channel.end()) {
      if (auto box = it->second.lock()) out.push_back(std::move(box));
    }
    return out;
  }
  for (auto& [channel, weak] : sub->by_channel) {
    if (auto box = weak.lock()) out.push_back(std::move(box));
  }
  return out;
}

void shard_subscribers::close() {
  std::vector<std::shared_ptr<connection>> conns;
  {
    std::lock_guard lock(mu_);
    for (auto& [master, sub] : by_master_) conns.push_back(sub->conn);
  }
  for (auto& c : conns) c->close(errc::cancelled);
}

}  // namespace dlock::detail

namespace dlock::detail {

wake_waiter::wake_waiter(io_executor ex, std::vector<inbox*> boxes, std::string token,
                         bool enabled)
    : boxes_(std::move(boxes)), token_(std::move(token)), enabled_(enabled), timer_(ex) {}

std::vector<std::string> wake_waiter::begin_attempt(bool queue) {
  in_attempt_ = true;
  wake_pending_ = false;
  std::vector<std::string> channels(boxes_.size());
  queue = queue && enabled_;
  queued_everywhere_ = queue;
  if (!queue) return channels;
  bool any = false;
  for (std::size_t i = 0; i < boxes_.size(); ++i) {
    if (!boxes_[i]->subscribed()) {
      queued_everywhere_ = false;
      continue;
    }
    channels[i] = boxes_[i]->channel();
    any = true;
  }
  if (!any) return channels;
  queued_ = true;
  if (!listening_) {
    listening_ = true;
    // Weak: the inbox outlives any one acquisition and must not keep it alive.
    std::weak_ptr<wake_waiter> weak = shared_from_this();
    for (auto* box : boxes_) {
      box->listen(token_, [weak](std::string_view handoff) {
        if (auto self = weak.lock()) self->on_wake(handoff);
      });
    }
  }
  return channels;
}

void wake_waiter::on_wake(std::string_view handoff) {
  if (done_) return;
  if (!handoff.empty() && on_handoff_) {
    auto take = on_handoff_;  // taking it may finish() this waiter, which drops on_handoff_
    if (take(handoff)) return;
  }
  if (in_attempt_) {
    wake_pending_ = true;  // try again as soon as this attempt fails
  } else {
    timer_.cancel();  // ends the sleep: the timer's handler starts the next attempt
  }
}

void wake_waiter::sleep(std::chrono::steady_clock::duration backstop,
                        unique_function<void()> next) {
  in_attempt_ = false;
  std::vector<inbox*> missing;
  if (enabled_) {
    for (auto* box : boxes_) {
      if (!box->subscribed()) missing.push_back(box);
    }
  }
  // At once when woken during the attempt, or when another waiter's subscription completed
  // while this attempt was out, so that this one can queue now rather than after a whole delay.
  bool now = wake_pending_ || (enabled_ && missing.empty() && !queued_everywhere_);
  timer_.expires_after(now ? std::chrono::steady_clock::duration::zero() : backstop);
  timer_.async_wait([self = shared_from_this(), next = std::move(next)](std::error_code) mutable {
    if (!self->done_) next();
  });
  if (missing.empty() || subscribing_) return;
  // Subscribe the inboxes not yet subscribed; once all have answered and one of them is newly
  // subscribed, try again at once, to queue there. Failures leave the backstop alone: the pace
  // of attempts must not depend on what the inboxes do.
  subscribing_ = true;
  struct progress {
    std::size_t outstanding;
    bool any_subscribed = false;
  };
  auto p = std::make_shared<progress>(progress{missing.size()});
  for (auto* box : missing) {
    box->subscribe([self = shared_from_this(), p](std::error_code ec) {
      if (!ec) p->any_subscribed = true;
      if (--p->outstanding > 0) return;
      self->subscribing_ = false;
      if (p->any_subscribed && !self->done_ && !self->in_attempt_) self->timer_.cancel();
    });
  }
}

void wake_waiter::watch_key(std::size_t node, connection& requests, const std::string& key) {
  if (!listening_ || done_ || node >= boxes_.size()) return;
  std::weak_ptr<wake_waiter> weak = shared_from_this();
  // Gone before the read: wake now.
  auto gone = [](const reply& value) { return value.is_nil(); };
  boxes_[node]->watch_key(requests, key, token_, gone, [weak] {
    if (auto self = weak.lock()) self->on_wake("");
  });
}

void wake_waiter::finish() {
  done_ = true;
  on_handoff_ = nullptr;
  in_attempt_ = false;
  timer_.cancel();
  if (!listening_) return;
  for (auto* box : boxes_) box->forget(token_);
}

}  // namespace dlock::detail
