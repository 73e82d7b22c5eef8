// SPDX-License-Identifier: Apache-2.0
// The direct path of a connection (see net/connection.hpp, `driver_`).
//
// Blocking calls take a shorter road when they can (try_exchange_direct): on a plain connection
// with nothing under way, the calling thread writes its request and reads the reply itself,
// instead of posting to the I/O thread (a wake-up), which writes, waits in epoll for the reply
// (a second) and completes a promise the caller sleeps on (a third). The I/O thread and callers
// therefore take turns on the socket, by an atomic `driver_` (see the header); to make that
// possible, a plain request/reply connection keeps no read armed while nothing is in flight,
// and arms one when it writes. A server closing an idle connection (restart, CLIENT KILL,
// timeout) used to show at once through that read; now whoever writes next on an idle socket
// first polls it: readable means EOF, a reset or bytes nobody asked for, and the connection is
// failed before anything is written, so the request goes out on a fresh one. A caller never
// closes the socket itself: whatever went wrong is handed back to the I/O thread (`broken`),
// which fails the connection exactly as the async path would, and the I/O thread never closes
// a socket a caller is using (the fd number could be reused under it) but defers that close
// until the caller hands back.
#include <poll.h>
#include <sys/socket.h>

#include <asio/post.hpp>
#include <algorithm>
#include <cerrno>
#include <ctime>
#include <vector>

#include "net/connection.hpp"
#include "net/socket_link.hpp"

namespace dlock::detail {
namespace {

std::atomic<std::uint64_t> direct_exchanges{0};

// Waits until `fd` has one of `events` (or an error or hang-up) or `deadline` passes; false on
// the deadline. A deadline already passed still gets one look, without waiting.
bool wait_for(int fd, short events, clock::time_point deadline) {
  for (;;) {
    auto left = std::max(deadline - clock::now(), clock::duration::zero());
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    pollfd p{fd, events, 0};
    int rc = ::ppoll(&p, 1, &ts, nullptr);
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // let the send/recv that follows report the error
  }
}

}  // namespace

std::uint64_t direct_exchange_count() noexcept {
  return direct_exchanges.load(std::memory_order_relaxed);
}

bool connection::try_exchange_direct(std::string_view payload, std::size_t replies,
                                     clock::time_point deadline, std::error_code& ec,
                                     reply& out) {
  if (replies == 0 || on_io_thread() || in_forked_child()) return false;
  driver expected = driver::idle;
  if (!driver_.compare_exchange_strong(expected, driver::direct, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
    return false;
  }
  if (in_transit_.load(std::memory_order_seq_cst) != 0) {
    hand_back(false);  // a request submitted before this call (maybe by this thread) goes first
    return false;
  }
  // The I/O thread published these before it gave the socket up; nobody else touches them now.
  const int fd = direct_fd_;
  socket_link& link = *direct_link_;
  reply_reader& reader = *reader_;
  if (spoke_while_idle(fd)) {
    hand_back(true);  // dropped while idle: the I/O thread fails it; submit() reconnects
    return false;
  }
  if (clock::now() >= deadline) {
    hand_back(false);  // let the async path report the timeout, as it always did
    return false;
  }
  direct_exchanges.fetch_add(1, std::memory_order_relaxed);
  // After the first byte went out the request's outcome is unknown on any failure, and a late
  // reply could pair with the next request: the socket must go (see the top).
  auto lost = [&](errc code) {
    ec = code;
    out = reply{};
    hand_back(true);
    return true;
  };

  std::size_t sent = 0;
  while (sent < payload.size()) {
    ssize_t n = ::send(fd, payload.data() + sent, payload.size() - sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return lost(errc::connection_lost);
    if (!wait_for(fd, POLLOUT, deadline)) {
      if (sent != 0) return lost(errc::timeout);
      ec = errc::timeout;  // nothing went out: the connection is as good as before
      out = reply{};
      hand_back(false);
      return true;
    }
  }

  // One reply (the usual case) goes straight to `out`: no vector to allocate per exchange.
  std::vector<reply> got;
  std::size_t received = 0;
  for (;;) {
    std::error_code perr;
    while (received < replies) {
      auto r = reader.next(perr);
      if (perr) return lost(errc::protocol_error);
      if (!r) break;
      if (replies == 1) {
        out = std::move(*r);
      } else {
        if (got.empty()) got.reserve(replies);
        got.push_back(std::move(*r));
      }
      ++received;
    }
    if (received == replies) break;
    if (!wait_for(fd, POLLIN, deadline)) return lost(errc::timeout);
    ssize_t n = ::recv(fd, link.read_buf.data(), link.read_buf.size(), MSG_DONTWAIT);
    if (n > 0) {
      link.heard_back = true;
      reader.feed({link.read_buf.data(), static_cast<std::size_t>(n)});
      continue;
    }
    if (n == 0) return lost(errc::connection_lost);
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    return lost(errc::connection_lost);
  }
  // A reply beyond ours was not asked for: on the async path it fails the connection (after
  // our request completed normally); do the same.
  std::error_code perr;
  bool unasked = reader.next(perr).has_value() || perr;
  // With Sentinel, READONLY means the node was demoted: end the socket, so that the next
  // request votes again, as on the async path (connection::on_reply).
  bool demoted = sentinel_ && replies == 1 && is_demoted_reply(out);
  for (const auto& r : got) demoted |= sentinel_ && is_demoted_reply(r);
  if (replies == 1) {
    ec = out.is_error() ? error_from_reply(out) : std::error_code{};
  } else {
    out = reply::make_array(std::move(got));
    ec = {};
  }
  hand_back(unasked || demoted, true);
  return true;
}

void connection::hand_back(bool broken, bool exchanged) {
  if (!broken) {
    // The first exchange since the socket last joined the I/O thread's reactor asks it to
    // leave (socket_link::leave_reactor); later ones find it out already.
    bool ask_to_leave = exchanged && !direct_used_.exchange(true, std::memory_order_relaxed);
    driver expected = driver::direct;
    if (driver_.compare_exchange_strong(expected, driver::idle, std::memory_order_release,
                                        std::memory_order_relaxed)) {
      if (ask_to_leave) {
        asio::post(executor_, [self = shared_from_this()] { self->leave_reactor(); });
      }
      return;
    }
    // direct_wanted: the I/O thread has work (or a close) waiting for the socket.
  }
  driver_.store(broken ? driver::broken : driver::io, std::memory_order_release);
  asio::post(executor_, [self = shared_from_this()] { self->after_direct(); });
}

bool connection::spoke_while_idle(int fd) noexcept {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, 0);
  } while (rc < 0 && errno == EINTR);
  return rc != 0;  // readable, hung up, in error; or poll itself failed: do not trust it
}

connection::claim connection::claim_socket() {
  driver d = driver_.load(std::memory_order_acquire);
  for (;;) {
    switch (d) {
      case driver::io:
        return claim::io;
      case driver::idle:
        if (driver_.compare_exchange_weak(d, driver::io, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
          return claim::io;
        }
        break;
      case driver::broken:
        if (driver_.compare_exchange_weak(d, driver::io, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
          return claim::broken;
        }
        break;
      case driver::direct:
        if (driver_.compare_exchange_weak(d, driver::direct_wanted, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
          return claim::caller;
        }
        break;
      case driver::direct_wanted:
        return claim::caller;
    }
  }
}

bool connection::take_socket() {
  claim c = claim_socket();
  if (c == claim::caller) return false;  // it posts after_direct() when it hands back
  if (c == claim::broken || deferred_fail_) {
    std::error_code e = deferred_fail_.value_or(errc::connection_lost);
    deferred_fail_.reset();
    fail(e, false, e);  // requests not yet written go out on a fresh connection
    return false;
  }
  return true;
}

void connection::maybe_release() {
  if (state_ != state::ready || writing_ || reading_ || !pending_.empty() || !inflight_.empty() ||
      !idles_without_read() || deferred_fail_) {
    return;
  }
  leave_reactor();
  direct_fd_ = link_->fd();
  direct_link_ = link_.get();
  driver expected = driver::io;
  driver_.compare_exchange_strong(expected, driver::idle, std::memory_order_release,
                                  std::memory_order_relaxed);
}

// On the I/O thread, with nothing of its own armed on the socket: a caller may be using the
// descriptor meanwhile, which leaving the epoll set does not disturb.
void connection::leave_reactor() {
  if (!link_ || state_ != state::ready || writing_ || reading_ || !idles_without_read()) return;
  if (direct_used_.load(std::memory_order_relaxed)) link_->leave_reactor();
}

// Before the I/O thread starts an operation on the socket. False when it failed the connection.
bool connection::rejoin_reactor() {
  if (link_->in_reactor) return true;
  std::error_code ec;
  link_->rejoin_reactor(ec);
  if (ec) {
    fail(errc::connection_lost, false);
    return false;
  }
  direct_used_.store(false, std::memory_order_relaxed);  // the next caller asks to leave again
  return true;
}

void connection::after_direct() {
  if (take_socket()) kick();  // kick() writes what queued up meanwhile, or releases again
}

}  // namespace dlock::detail
