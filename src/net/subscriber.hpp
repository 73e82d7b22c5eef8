// SPDX-License-Identifier: Apache-2.0
// net/subscriber.hpp: a Pub/Sub subscription on a connection of its own. Private.
//   channel_subscriber  SUBSCRIBEs one channel and calls on_news with each message's payload,
//                       and with "" after each confirmed (re)subscription, since messages
//                       published before it were not seen; after a drop or a failed SUBSCRIBE it
//                       tries again after a backoff (250 ms, doubling to 10 s), and calls
//                       on_lost, if given, when a confirmed subscription is lost or a
//                       SUBSCRIBE fails (what is published until the next "" goes unheard). refused() says
//                       the node answered SUBSCRIBE with an error (an ACL): the owner must then
//                       look by itself, more often. For observers that re-read what changed
//                       (dlock::election's, dlock::latch's). On a Redis Cluster it subscribes
//                       on the master of the channel's slot (the channel is named as a key),
//                       looked up again at each (re)subscription; the scripts PUBLISH, which a
//                       cluster passes to every node, so any node would do while that one lives.
// start() and stop() may be called from any thread; on_news runs on the I/O thread, never
// after stop() has returned there (stop() from another thread may race one last call).
#pragma once

#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "dlock/client.hpp"
#include "net/connection.hpp"

namespace dlock::detail {

class cluster_router;

// Where a subscriber subscribes: a node, or the master of the channel's slot on a cluster.
struct subscription_site {
  endpoint where;
  client_options options;
  std::shared_ptr<cluster_router> cluster;  // redis-cluster:// only
  io_executor executor;
};

class channel_subscriber : public std::enable_shared_from_this<channel_subscriber> {
 public:
  channel_subscriber(subscription_site site, std::string channel,
                     std::function<void(std::string_view payload)> on_news,
                     std::function<void()> on_lost = {});
  void start();
  void stop();
  bool refused() const noexcept { return refused_; }

 private:
  void subscribe();  // I/O thread
  bool connect();    // I/O thread: false when there is nowhere to connect to yet
  void lost();       // I/O thread: the confirmed subscription is gone
  void retry_later(bool refresh_map = true);

  subscription_site site_;
  std::shared_ptr<connection> conn_;  // I/O thread, after start()
  std::string channel_;
  std::function<void(std::string_view)> on_news_;
  std::function<void()> on_lost_;
  asio::steady_timer retry_timer_;
  std::chrono::milliseconds backoff_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> refused_{false};
  bool subscribing_ = false;  // I/O thread
  bool subscribed_ = false;   // I/O thread: confirmed, and not lost since
};

}  // namespace dlock::detail
