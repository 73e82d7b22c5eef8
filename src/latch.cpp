// SPDX-License-Identifier: Apache-2.0
// dlock::latch: a count in one key (latch.lua), and waits that subscribe to its channel.
//
// A wait reads the count after each confirmed subscription and each message, so an opening
// published before the SUBSCRIBE took effect is still seen; and once more when the key would
// expire, which is how a latch abandoned while waited for is told apart from an open one.
#include "dlock/latch.hpp"

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <system_error>

#include "access.hpp"
#include "algo/deadline_rule.hpp"
#include "algo/retry.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/options.hpp"
#include "net/subscriber.hpp"
#include "option_checks.hpp"
#include "script.hpp"

namespace dlock {
namespace detail {
namespace {

using steady = std::chrono::steady_clock;
constexpr std::int64_t max_latch_count = std::int64_t{1} << 53;  // exact in Lua's doubles

// One wait: until the count reads 0, the key is gone, or the deadline passes.
class latch_wait : public std::enable_shared_from_this<latch_wait> {
 public:
  latch_wait(client node, std::string key, std::string channel, steady::time_point deadline,
             unique_function<void(std::error_code)> done)
      : node_(std::move(node)),
        key_(std::move(key)),
        channel_(std::move(channel)),
        rule_(deadline),
        done_(std::move(done)),
        timer_(node_.get_executor()) {
    rule_.begin(steady::now());
  }

  // `stop` ends the wait with cancelled (on the I/O thread, where the rest of it runs).
  void start(std::stop_token stop = {}) {
    std::weak_ptr<latch_wait> weak = shared_from_this();
    if (stop.stop_possible()) {
      on_stop_.emplace(std::move(stop), [weak, ex = node_.get_executor()] {
        asio::post(ex, [weak] {
          if (auto self = weak.lock()) self->finish(errc::cancelled);
        });
      });
    }
    // The message itself says it opened: a latch with a TTL shorter than a round trip may be
    // gone by the time a read comes, and must not look abandoned then.
    subscriber_ = std::make_shared<channel_subscriber>(
        access::subscription_site_of(node_), channel_, [weak](std::string_view payload) {
          auto self = weak.lock();
          if (!self) return;
          if (payload == "open") return self->finish({});
          self->read();
        });
    self_ = shared_from_this();  // until finish(): timers and the subscriber hold it weakly
    subscriber_->start();
    asio::post(node_.get_executor(), [self = shared_from_this()] {
      self->read();  // without waiting for the subscription (an ACL may refuse it)
      self->arm_timer();
    });
  }

 private:
  // The next wake-up without news: the deadline, or the key's expiry if sooner.
  void arm_timer() {
    if (finished_) return;
    // A node that refuses SUBSCRIBE (an ACL) wakes nobody: look four times a second instead.
    if (subscriber_->refused() && (expires_in_ < 0 || expires_in_ > 250)) expires_in_ = 250;
    auto at = rule_.deadline();
    if (expires_in_ >= 0) at = std::min(at, steady::now() + std::chrono::milliseconds(expires_in_ + 2));
    if (at == steady::time_point::max()) return;
    timer_.expires_at(at);
    timer_.async_wait([weak = weak_from_this()](std::error_code ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      if (self->rule_.passed(steady::now())) return self->on_deadline();
      self->read();
    });
  }

  // The deadline passed (deadline_rule): the wait ends, except that a first read still out is
  // awaited until the rule gives up on it, so that a short wait still finds an open latch open.
  // (A wait that began past its deadline, -w 0, is one whole look and has no deadline.)
  void on_deadline() {
    auto grace_end = rule_.gives_up_at();
    if (!answered_ && reading_ && steady::now() < grace_end) {
      timer_.expires_at(grace_end);
      timer_.async_wait([weak = weak_from_this()](std::error_code ec) {
        if (auto self = weak.lock(); self && !ec) self->on_deadline();
      });
      return;
    }
    finish(errc::timeout);
  }

  // After an answer that did not end the wait: the next look, if the rule allows one.
  void look_again() {
    if (!rule_.another_look(steady::now())) return finish(errc::timeout);
    arm_timer();
  }

  void read() {
    if (finished_) return;
    if (reading_) {
      read_again_ = true;
      return;
    }
    reading_ = true;
    command cmd{"GET", key_};
    cmd.then({"PTTL", key_});
    access::start_exec(node_, std::move(cmd), node_.options().request_timeout,
                       [self = shared_from_this()](std::error_code ec, reply r) {
                         self->reading_ = false;
                         self->on_read(ec, r);
                         if (std::exchange(self->read_again_, false)) self->read();
                       });
  }

  void on_read(std::error_code ec, const reply& r) {
    if (finished_) return;
    answered_ = true;
    if (!ec && (!r.is_array() || r.elements().size() != 2)) ec = errc::protocol_error;
    if (!ec && r.elements()[0].is_error()) ec = error_from_reply(r.elements()[0]);
    if (ec) {
      // Nodes down, timeouts: the subscriber reconnects and reads again; so does the timer.
      // So does a Redis Cluster slot without a master: its replica is promoted within the
      // failover (seen: a wait that gave up with cluster_error while the replica took over).
      if (!is_retryable(ec) && ec != errc::cluster_error) return finish(ec);
      // Less and less often while the node stays silent (250 ms, doubling to 4 s): it is read
      // at once when it takes the subscription again. An answer that refused (a cluster in
      // change) is read again at the first pace.
      expires_in_ = is_silence(ec) ? 250LL << std::min(failed_reads_++, 4) : 250LL;
      return look_again();
    }
    failed_reads_ = 0;
    const auto& count = r.elements()[0];
    if (count.is_nil()) return finish(errc::not_found);
    // A string that is no count is not a latch (count_down says so too), not one still counting.
    std::int64_t left = -1;
    const auto& text = count.str();
    auto [end, parse_error] = std::from_chars(text.data(), text.data() + text.size(), left);
    if (parse_error != std::errc{} || end != text.data() + text.size() || left < 0) {
      return finish(errc::wrong_type);
    }
    if (left == 0) return finish({});
    expires_in_ = r.elements()[1].is_integer() ? r.elements()[1].integer() : -1;
    look_again();
  }

  void finish(std::error_code ec) {
    if (std::exchange(finished_, true)) return;
    on_stop_.reset();
    timer_.cancel();
    subscriber_->stop();
    auto keep = std::exchange(self_, nullptr);  // destroyed after the handler, not during it
    done_(ec);
  }

  client node_;
  std::string key_, channel_;
  deadline_rule rule_;
  unique_function<void(std::error_code)> done_;
  asio::steady_timer timer_;
  std::shared_ptr<channel_subscriber> subscriber_;
  std::shared_ptr<latch_wait> self_;
  long long expires_in_ = -1;  // the key's PTTL at the last read
  int failed_reads_ = 0;       // in a row
  bool reading_ = false, read_again_ = false, finished_ = false;
  bool answered_ = false;  // a read has come back
  std::optional<std::stop_callback<std::function<void()>>> on_stop_;
};

reply run_latch(client& node, const std::string& key, const std::string& channel,
                std::string_view op, std::int64_t n, std::chrono::milliseconds ttl,
                std::error_code& ec) {
  std::string n_text = std::to_string(n), ttl_text = std::to_string(ttl.count());
  reply r = wait<reply>(ec, [&](auto handler) {
    run_script(node, latch_script, {key}, {op, n_text, ttl_text, channel},
               node.options().request_timeout, std::move(handler));
  });
  if (!ec && r.is_error()) ec = error_from_reply(r);
  if (!ec && !r.is_integer()) ec = errc::protocol_error;
  return r;
}

}  // namespace
}  // namespace detail

latch::latch(client node, std::string name, latch_options options)
    : node_(std::move(node)), key_(options.key_prefix + name), options_(std::move(options)) {
  using detail::reject_argument;
  if (name.empty()) reject_argument("the latch name is empty");
  if (key_.size() > max_key_bytes) reject_argument("the latch key is longer than dlock::max_key_bytes");
  if (is_companion_key(key_)) reject_argument("the latch key is one of dlock's companion keys");
  if (options_.ttl < std::chrono::milliseconds(1) || options_.ttl > max_ttl) {
    reject_argument("TTL must be 1 ms to 30 days");
  }
  channel_ = latch_channel(key_);
}

bool latch::try_set_count(std::int64_t count, std::error_code& ec) {
  if (count < 1 || count > detail::max_latch_count) {
    ec = errc::invalid_argument;
    return false;
  }
  auto r = detail::run_latch(node_, key_, channel_, "set", count, options_.ttl, ec);
  return !ec && r.integer() == 1;
}

std::int64_t latch::count_down(std::int64_t n, std::error_code& ec) {
  if (n < 1 || n > detail::max_latch_count) {
    ec = errc::invalid_argument;
    return -1;
  }
  auto r = detail::run_latch(node_, key_, channel_, "down", n, options_.ttl, ec);
  if (ec) return -1;
  if (r.integer() < 0) ec = errc::not_found;
  return r.integer();
}

std::int64_t latch::count(std::error_code& ec) {
  reply r = node_.exec({"GET", key_}, ec);
  if (!ec && r.is_error()) ec = error_from_reply(r);
  if (ec) return -1;
  if (r.is_nil()) {
    ec = errc::not_found;
    return -1;
  }
  if (!r.is_string()) {
    ec = errc::protocol_error;
    return -1;
  }
  try {
    return std::stoll(r.str());
  } catch (const std::exception&) {
    ec = errc::wrong_type;  // not a latch's count
    return -1;
  }
}

bool latch::wait_until(clock::time_point deadline, std::error_code& ec) {
  detail::wait<int>(ec, [&](detail::unique_function<void(std::error_code, int)> h) {
    start_wait(deadline, [h = std::move(h)](std::error_code e) mutable { h(e, 0); });
  });
  return !ec;
}

void latch::wait() {
  std::error_code ec;
  wait(ec);
  if (ec) throw std::system_error(ec, "dlock: cannot wait for the latch " + key_);
}

bool latch::wait_or_throw(clock::time_point deadline) {
  std::error_code ec;
  if (wait_until(deadline, ec)) return true;
  if (ec != errc::timeout && !detail::is_retryable(ec)) {
    throw std::system_error(ec, "dlock: cannot wait for the latch " + key_);
  }
  return false;
}

void latch::start_wait(clock::time_point deadline, detail::unique_function<void(std::error_code)> h,
                       std::stop_token stop) {
  std::make_shared<detail::latch_wait>(node_, key_, channel_, deadline, std::move(h))
      ->start(std::move(stop));
}

}  // namespace dlock
