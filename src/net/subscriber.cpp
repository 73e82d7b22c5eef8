// SPDX-License-Identifier: Apache-2.0
#include "net/subscriber.hpp"

#include <asio/post.hpp>

#include <utility>

#include "dlock/key_layout.hpp"
#include "net/cluster.hpp"

namespace dlock::detail {
namespace {
constexpr std::chrono::milliseconds min_backoff{250}, max_backoff{10'000};
}

channel_subscriber::channel_subscriber(subscription_site site, std::string channel,
                                       std::function<void(std::string_view)> on_news,
                                       std::function<void()> on_lost)
    : site_(std::move(site)),
      channel_(std::move(channel)),
      on_news_(std::move(on_news)),
      on_lost_(std::move(on_lost)),
      retry_timer_(site_.executor),
      backoff_(min_backoff) {}

void channel_subscriber::start() {
  asio::post(retry_timer_.get_executor(), [self = shared_from_this()] { self->subscribe(); });
}

void channel_subscriber::stop() {
  stopped_ = true;
  asio::post(retry_timer_.get_executor(), [self = shared_from_this()] {
    self->retry_timer_.cancel();
    if (self->conn_) self->conn_->close(errc::cancelled);
  });
}

// The connection to subscribe on: the node's, or the current master of the channel's slot.
// A connection left behind is closed; its handlers know it is no longer the one.
bool channel_subscriber::connect() {
  endpoint where = site_.where;
  if (auto* router = site_.cluster.get()) {
    auto owner = router->known_owner(hash_slot(channel_), true);  // unknown: a map read starts
    if (!owner) return false;
    if (conn_ && conn_->where().host == owner->host && conn_->where().port == owner->port) {
      return true;
    }
    where = router->node_endpoint(*owner);
  } else if (conn_) {
    return true;
  }
  // Taken out first: closing runs its drop handler at once, which must not see it as current.
  if (auto old = std::exchange(conn_, nullptr)) {
    lost();
    old->close(errc::cancelled);
  }
  try {
    conn_ = std::make_shared<connection>(std::move(where), site_.options);
  } catch (const std::system_error&) {
    return false;  // TLS files that cannot be loaded: the client's own requests say so
  }
  // Weak: the connection and the timer must not keep their subscriber alive.
  std::weak_ptr<channel_subscriber> weak = shared_from_this();
  const connection* mine = conn_.get();
  conn_->set_push_handlers(
      [weak, mine](const reply& r) {
        auto self = weak.lock();
        if (!self || self->stopped_ || self->conn_.get() != mine) return;
        const auto& e = r.elements();
        if (e.size() == 3 && e[0].str() == "message" && e[1].str() == self->channel_) {
          self->on_news_(e[2].str());
        }
      },
      [weak, mine] {
        auto self = weak.lock();
        if (!self || self->conn_.get() != mine) return;
        self->lost();
        self->retry_later();
      });
  return true;
}

void channel_subscriber::subscribe() {
  if (stopped_ || subscribing_) return;
  if (!connect()) return retry_later(/*refresh_map=*/false);  // known_owner started a read
  subscribing_ = true;
  conn_->submit(subscribe_payload(channel_), 1,
                clock::now() + conn_->options().request_timeout,
                [self = shared_from_this()](std::error_code ec, reply r) {
                  self->subscribing_ = false;
                  if (self->stopped_) return;
                  bool confirmed = !ec && r.is_array() && !r.elements().empty() &&
                                   r.elements()[0].str() == "subscribe";
                  self->refused_ = !ec && r.is_error();
                  if (!confirmed) {
                    // Not up, though it never was: what is published meanwhile goes unheard.
                    if (self->on_lost_) self->on_lost_();
                    return self->retry_later();
                  }
                  self->backoff_ = min_backoff;
                  self->subscribed_ = true;
                  self->on_news_("");  // what was published before the subscription
                });
}

void channel_subscriber::lost() {
  if (std::exchange(subscribed_, false) && on_lost_ && !stopped_) on_lost_();
}

// After a drop (the subscription died with the socket) or a failed SUBSCRIBE. A drop during a
// SUBSCRIBE in flight fails that request too, which comes here again: the timer is simply
// set anew.
void channel_subscriber::retry_later(bool refresh_map) {
  if (stopped_) return;
  // On a cluster the slot's master may have failed over: nothing else would tell the router,
  // whose map only its own requests' failures renew, so ask for a fresh one (rate-limited).
  if (site_.cluster && refresh_map) site_.cluster->refresh();
  retry_timer_.expires_after(backoff_);
  backoff_ = std::min(2 * backoff_, max_backoff);
  retry_timer_.async_wait([weak = weak_from_this()](std::error_code ec) {
    auto self = weak.lock();
    if (!ec && self) self->subscribe();
  });
}

}  // namespace dlock::detail
