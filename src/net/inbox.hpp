// net/inbox.hpp: where waiters of this process are woken. Private.
//   inbox  one pub/sub channel per client (dlock:wake:<random>), subscribed on a connection of
//          its own; a release publishes the token of the waiter it hands the lock to, and the
//          inbox calls that waiter's listener
// All members run on the I/O thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "net/connection.hpp"

namespace dlock::detail {

class inbox : public std::enable_shared_from_this<inbox> {
 public:
  inbox(endpoint where, client_options options);

  const std::string& channel() const noexcept { return channel_; }
  // True once SUBSCRIBE is confirmed on the current socket; false again after it drops.
  bool subscribed() const noexcept { return subscribed_; }
  // Subscribes if needed; `done` runs when confirmed or failed.
  void subscribe(unique_function<void(std::error_code)> done);

  // `on_wake` runs for each message naming `token`, and once for every waiter when the
  // subscription drops (a message may have been lost then: the waiter should try again).
  void listen(const std::string& token, std::function<void()> on_wake);
  void forget(const std::string& token);

 private:
  void on_message(const reply& r);
  void on_drop();

  std::shared_ptr<connection> conn_;
  std::string channel_;
  bool handlers_installed_ = false;
  bool subscribed_ = false;
  bool subscribing_ = false;
  std::vector<unique_function<void(std::error_code)>> waiting_for_subscription_;
  std::unordered_map<std::string, std::function<void()>> listeners_;
};

}  // namespace dlock::detail
