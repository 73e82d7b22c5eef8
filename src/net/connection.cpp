// The connection's life: idle -> connecting (resolve, connect, AUTH/SELECT) -> ready -> idle.
//
// Requests wait in `pending_` until written, then sit in `inflight_` until their replies come
// back in order; RESP has no request ids, so order is the only thing that pairs a reply with
// its request. That is why a written request that misses its deadline closes the connection:
// its reply may still arrive, and dropping the request from the queue would hand that reply to
// the next one. Closing fails every in-flight request (outcome unknown), and queued requests,
// never written, go out on a fresh connection.
#include "net/connection.hpp"

#include <asio/connect.hpp>
#include <asio/dispatch.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "net/runtime.hpp"

namespace dlock::detail {

connection::connection(endpoint where, client_options options)
    : where_(std::move(where)),
      options_(std::move(options)),
      executor_(runtime::shared().executor()),
      socket_(executor_),
      resolver_(executor_),
      connect_timer_(executor_),
      deadline_timer_(executor_),
      backoff_(options_.reconnect_backoff_min) {
  if (!options_.user.empty()) where_.user = options_.user;
  if (!options_.password.empty()) where_.password = options_.password;
}

void connection::submit(std::string payload, std::size_t replies, clock::time_point deadline,
                        reply_handler handler) {
  request req{std::move(payload), replies, {}, deadline, std::move(handler), false};
  asio::dispatch(executor_, [self = shared_from_this(), req = std::move(req)]() mutable {
    self->enqueue(std::move(req));
  });
}

void connection::close(std::error_code reason) {
  asio::dispatch(executor_, [self = shared_from_this(), reason] {
    // Queued requests first: fail() reconnects when it finds any still queued.
    for (auto& req : std::exchange(self->pending_, {})) self->complete(req, reason, {});
    self->fail(reason, false, reason);
  });
}

void connection::set_push_handlers(std::function<void(const reply&)> on_push,
                                   std::function<void()> on_drop) {
  on_push_ = std::move(on_push);
  on_drop_ = std::move(on_drop);
}

void connection::enqueue(request req) {
  if (state_ == state::idle && clock::now() < backoff_until_) {
    // The node failed to connect a moment ago: fail fast rather than wait, so that a lock
    // round skips a dead node at once.
    complete(req, errc::node_unreachable, reply::make_string(reply::kind::error,
                                                             last_connect_error_.message()));
    return;
  }
  pending_.push_back(std::move(req));
  if (pending_.back().deadline < deadline_armed_) arm_deadline_timer();
  kick();
}

void connection::kick() {
  if (state_ == state::idle && !pending_.empty()) start_connect();
  if (state_ == state::ready) start_write();
}

void connection::start_connect() {
  state_ = state::connecting;
  ++generation_;
  reader_ = std::make_unique<reply_reader>();
  connect_timer_.expires_after(options_.connect_timeout);
  connect_timer_.async_wait([self = shared_from_this(), gen = generation_](std::error_code ec) {
    if (ec || gen != self->generation_ || self->state_ != state::connecting) return;
    self->fail(errc::timeout, true, errc::node_unreachable);
  });

  targets_.clear();
  if (where_.is_unix()) {
    try {
      targets_.emplace_back(asio::local::stream_protocol::endpoint(where_.socket_path));
    } catch (const std::system_error& e) {
      // A path longer than sun_path: Asio throws, and on the I/O thread that would end the process.
      last_connect_error_ = e.code();
      return fail(e.code(), true, errc::invalid_argument);
    }
    try_endpoint(0);
    return;
  }
  resolver_.async_resolve(
      where_.host, std::to_string(where_.port),
      [self = shared_from_this(), gen = generation_](std::error_code ec,
                                                     asio::ip::tcp::resolver::results_type results) {
        if (gen != self->generation_) return;
        if (ec) return self->fail(ec, true, errc::node_unreachable);
        for (const auto& r : results) self->targets_.emplace_back(r.endpoint());
        self->try_endpoint(0);
      });
}

// Tries the resolved addresses in order ("localhost" may give ::1 before 127.0.0.1).
void connection::try_endpoint(std::size_t index) {
  if (index >= targets_.size()) {
    return fail(last_connect_error_ ? last_connect_error_ : errc::node_unreachable, true,
                errc::node_unreachable);
  }
  std::error_code ignored;
  socket_.close(ignored);
  socket_.open(targets_[index].protocol(), last_connect_error_);
  if (last_connect_error_) return try_endpoint(index + 1);
  socket_.async_connect(targets_[index], [self = shared_from_this(), gen = generation_,
                                          index](std::error_code ec) {
    if (gen != self->generation_) return;
    if (ec) {
      self->last_connect_error_ = ec;
      return self->try_endpoint(index + 1);
    }
    self->on_connected();
  });
}

void connection::on_connected() {
  if (!where_.is_unix()) {
    std::error_code ignored;
    socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  }
  start_read();
  std::string handshake;
  std::size_t steps = 0;
  if (!where_.password.empty()) {
    command auth = where_.user.empty() ? command{"AUTH", where_.password}
                                       : command{"AUTH", where_.user, where_.password};
    handshake += auth.bytes();
    ++steps;
  }
  if (where_.db != 0) {
    handshake += command{"SELECT", std::to_string(where_.db)}.bytes();
    ++steps;
  }
  if (steps == 0) return become_ready();

  request hello{{}, steps, {}, clock::now() + options_.connect_timeout, {}, true};
  hello.handler = [self = shared_from_this(), gen = generation_](std::error_code ec, reply r) {
    if (gen != self->generation_) return;
    if (!ec && r.is_array()) {
      for (const auto& step : r.elements()) {
        if (step.is_error()) {
          ec = error_from_reply(step);
          self->last_connect_error_ = ec;
          break;
        }
      }
    }
    if (ec) return self->fail(ec, true, ec);
    self->become_ready();
  };
  inflight_.push_back(std::move(hello));
  writing_ = true;
  write_buf_ = std::move(handshake);
  asio::async_write(socket_, asio::buffer(write_buf_),
                    [self = shared_from_this(), gen = generation_](std::error_code ec, std::size_t) {
                      if (gen != self->generation_) return;
                      self->writing_ = false;
                      if (ec) self->fail(errc::node_unreachable, true, errc::node_unreachable);
                    });
}

void connection::become_ready() {
  state_ = state::ready;
  connect_timer_.cancel();
  backoff_ = options_.reconnect_backoff_min;
  last_connect_error_.clear();
  start_write();
}

void connection::start_write() {
  if (writing_ || pending_.empty() || state_ != state::ready) return;
  write_buf_.clear();
  while (!pending_.empty()) {
    write_buf_ += pending_.front().payload;
    pending_.front().payload = {};
    inflight_.push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(write_buf_),
                    [self = shared_from_this(), gen = generation_](std::error_code ec, std::size_t) {
                      if (gen != self->generation_) return;
                      self->writing_ = false;
                      if (ec) return self->fail(errc::connection_lost, false);
                      self->start_write();
                    });
}

void connection::start_read() {
  socket_.async_read_some(
      asio::buffer(read_buf_), [self = shared_from_this(), gen = generation_](std::error_code ec,
                                                                              std::size_t n) {
        if (gen != self->generation_) return;
        if (ec) {
          bool connecting = self->state_ == state::connecting;
          return self->fail(errc::connection_lost, connecting, errc::node_unreachable);
        }
        self->reader_->feed({self->read_buf_.data(), n});
        for (;;) {
          std::error_code perr;
          auto r = self->reader_->next(perr);
          // Mid-handshake this is a failed connect: back off and fail the queue instead of
          // reconnecting to the same non-Redis peer in a loop until the requests' deadlines.
          if (perr) return self->fail(errc::protocol_error, self->state_ == state::connecting);
          if (!r) break;
          self->on_reply(std::move(*r));
          if (gen != self->generation_) return;  // a handler closed the connection
        }
        self->start_read();
      });
}

void connection::on_reply(reply r) {
  if (on_push_ && r.is_array() && !r.elements().empty() && r.elements()[0].str() == "message") {
    return on_push_(r);  // out of band: not the answer to any request
  }
  if (inflight_.empty()) {
    // A reply nobody asked for: not a Redis server speaking request/reply RESP2.
    return fail(errc::protocol_error, state_ == state::connecting, errc::protocol_error);
  }
  request& front = inflight_.front();
  if (front.expected == 1) {
    request req = std::move(front);
    inflight_.pop_front();
    std::error_code ec = r.is_error() ? error_from_reply(r) : std::error_code{};
    return complete(req, ec, std::move(r));
  }
  front.got.push_back(std::move(r));
  if (front.got.size() < front.expected) return;
  request req = std::move(front);
  inflight_.pop_front();
  complete(req, {}, reply::make_array(std::move(req.got)));
}

void connection::complete(request& req, std::error_code ec, reply r) {
  if (req.handler) std::exchange(req.handler, {})(ec, std::move(r));
}

void connection::fail(std::error_code inflight_error, bool connect_failed,
                      std::error_code queued_error) {
  ++generation_;
  state_ = state::idle;
  writing_ = false;
  std::error_code ignored;
  socket_.close(ignored);
  resolver_.cancel();
  connect_timer_.cancel();

  auto inflight = std::exchange(inflight_, {});
  std::deque<request> queued;
  if (connect_failed) {
    if (!last_connect_error_) last_connect_error_ = inflight_error;
    backoff_until_ = clock::now() + backoff_;
    backoff_ = std::min(backoff_ * 2, options_.reconnect_backoff_max);
    queued = std::exchange(pending_, {});
  }
  // Handlers may submit again; the queues are already consistent, so that is safe.
  for (auto& req : inflight) complete(req, inflight_error, {});
  for (auto& req : queued) {
    complete(req, queued_error ? queued_error : inflight_error,
             reply::make_string(reply::kind::error, last_connect_error_.message()));
  }
  if (on_drop_) on_drop_();
  if (!connect_failed) kick();  // never-written requests go out on a new connection
}

void connection::arm_deadline_timer() {
  clock::time_point earliest = clock::time_point::max();
  for (const auto& q : {&pending_, &inflight_}) {
    for (const auto& req : *q) earliest = std::min(earliest, req.deadline);
  }
  if (earliest == deadline_armed_) return;
  deadline_armed_ = earliest;
  if (earliest == clock::time_point::max()) {
    deadline_timer_.cancel();
    return;
  }
  deadline_timer_.expires_at(earliest);
  deadline_timer_.async_wait([self = shared_from_this()](std::error_code ec) {
    if (ec) return;
    self->deadline_armed_ = clock::time_point::max();
    self->on_deadline();
  });
}

void connection::on_deadline() {
  auto now = clock::now();
  // Queued requests that missed their deadline were never written: drop them.
  std::deque<request> expired;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->deadline <= now) {
      expired.push_back(std::move(*it));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  bool inflight_expired = false;
  for (const auto& req : inflight_) inflight_expired |= req.deadline <= now;
  for (auto& req : expired) complete(req, errc::timeout, {});
  if (inflight_expired) {
    bool connecting = state_ == state::connecting;
    fail(errc::timeout, connecting, errc::timeout);
  }
  arm_deadline_timer();
}

}  // namespace dlock::detail
