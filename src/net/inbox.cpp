#include "net/inbox.hpp"

#include "token.hpp"

namespace dlock::detail {

inbox::inbox(endpoint where, client_options options)
    : conn_(std::make_shared<connection>(std::move(where), std::move(options))),
      channel_("dlock:wake:" + random_token()) {}

void inbox::subscribe(unique_function<void(std::error_code)> done) {
  if (subscribed_) return done({});
  waiting_for_subscription_.push_back(std::move(done));
  if (subscribing_) return;
  subscribing_ = true;
  if (!handlers_installed_) {
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
  // Formatted by hand: dlock::command refuses SUBSCRIBE, which is right for shared connections
  // and does not apply to this one.
  std::string subscribe = "*2\r\n$9\r\nSUBSCRIBE\r\n$" + std::to_string(channel_.size()) + "\r\n" +
                          channel_ + "\r\n";
  conn_->submit(std::move(subscribe), 1,
                clock::now() + conn_->options().request_timeout,
                [self = shared_from_this()](std::error_code ec, reply r) {
                  self->subscribing_ = false;
                  bool confirmed = r.is_array() && !r.elements().empty() &&
                                   r.elements()[0].str() == "subscribe";
                  if (!ec && !confirmed) ec = errc::protocol_error;
                  self->subscribed_ = !ec;
                  for (auto& h : std::exchange(self->waiting_for_subscription_, {})) h(ec);
                });
}

void inbox::listen(const std::string& token, std::function<void()> on_wake) {
  listeners_[token] = std::move(on_wake);
}

void inbox::forget(const std::string& token) { listeners_.erase(token); }

// ["message", channel, payload]: the payload is the token of the waiter to wake.
void inbox::on_message(const reply& r) {
  const auto& e = r.elements();
  if (e.size() != 3) return;
  auto it = listeners_.find(e[2].str());
  if (it == listeners_.end()) return;  // that waiter gave up meanwhile
  auto wake = it->second;  // the listener may forget itself while running
  wake();
}

void inbox::on_drop() {
  subscribed_ = false;
  std::vector<std::function<void()>> all;
  for (auto& [token, wake] : listeners_) all.push_back(wake);
  for (auto& wake : all) wake();
}

}  // namespace dlock::detail
