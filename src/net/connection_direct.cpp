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
//
// Callers that come while another holds the socket join it, a session: each appends its request
// to the session's FIFO and writes it (or leaves it to the joiner writing at that moment, who
// sends all that queued in one go), then sleeps. One of them at a time reads: the replies, in
// FIFO order, wake their callers, and a reader whose own reply came wakes the next caller to
// read in its place. So many threads share one connection and Redis reads their requests in
// batches, as it reads the async path's, instead of one request per read from a connection per
// thread; and nobody wakes the I/O thread. The session ends when the FIFO empties, or the I/O
// thread wants the socket (no one joins then), or it fails: a missed deadline (the reader waits
// until the earliest of the FIFO's), a reset or bytes that are not RESP fail every request
// written, as on the async path, and the socket goes back to the I/O thread as `broken`.
#include <linux/futex.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

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

// A caller in a session: its request's replies, and whether it is done or must read next.
struct connection::direct_waiter {
  // unsent: the session failed while its bytes still waited in the outbox; nothing of it
  // went out, and the caller goes to the I/O thread (try_exchange_direct returns false).
  enum : std::uint32_t { waiting, done, lead, unsent };
  std::size_t expected = 1;
  clock::time_point deadline;
  std::vector<reply> got;  // a pipelined request's (expected > 1)
  reply out;
  std::error_code ec;
  bool demoted = false;  // a READONLY among its replies (Sentinel)
  bool in_outbox = false;  // its bytes wait in session_outbox_; guarded by session_mutex_
  std::atomic<std::uint32_t> state{waiting};
};

namespace {

// Raw futex calls on a waiter's state: the wake-up may come after the waiter saw its new state
// and returned (its frame gone). FUTEX_WAKE only looks the address up, which makes that
// harmless; std::atomic::notify_one promises nothing of the kind.
void sleep_while(std::atomic<std::uint32_t>& state, std::uint32_t value) {
  static_assert(sizeof(state) == sizeof(std::uint32_t));
  while (state.load(std::memory_order_acquire) == value) {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&state), FUTEX_WAIT_PRIVATE, value,
              nullptr, nullptr, 0);
  }
}

void wake_all(const std::vector<std::atomic<std::uint32_t>*>& states) {
  for (auto* s : states) {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(s), FUTEX_WAKE_PRIVATE, 1, nullptr,
              nullptr, 0);
  }
}

// How long the session's reader waits for the socket at most before it looks at the deadlines
// again: a caller may join meanwhile due sooner than the reader's wait ends (another timeout, or
// a deadline computed a moment before another's), and then times out at most this late.
constexpr auto reader_recheck = std::chrono::milliseconds(10);

enum class write_result { sent, nothing_sent, lost };

// Writes all of `payload` on `fd` by `deadline`; `code` says why when it did not. While the
// socket takes nothing, every reader_recheck `give_up()` may end the write early as a timeout: a
// session's writer is the only one who could notice another caller's deadline meanwhile (it may
// be the session's reader too), and a session failed elsewhere needs its socket back.
template <class GiveUp>
write_result write_all(int fd, std::string_view payload, clock::time_point deadline, errc& code,
                       GiveUp give_up) {
  std::size_t sent = 0;
  while (sent < payload.size()) {
    ssize_t n = ::send(fd, payload.data() + sent, payload.size() - sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      code = errc::connection_lost;
      return write_result::lost;
    }
    auto now = clock::now();
    if (wait_for(fd, POLLOUT, deadline - now > reader_recheck ? now + reader_recheck : deadline)) {
      continue;
    }
    if (clock::now() >= deadline || give_up()) {
      code = errc::timeout;
      return sent == 0 ? write_result::nothing_sent : write_result::lost;
    }
  }
  return write_result::sent;
}

}  // namespace

bool connection::try_exchange_direct(std::string_view payload, std::size_t replies,
                                     clock::time_point deadline, std::error_code& ec,
                                     reply& out) {
  if (replies == 0 || on_io_thread() || in_forked_child()) return false;
  direct_waiter me;
  me.expected = replies;
  me.deadline = deadline;
  {
    std::unique_lock lock(session_mutex_);
    const bool opener = !session_open_;
    if (opener) {
      if (!open_session(deadline)) return false;
    } else if (driver_.load(std::memory_order_acquire) != driver::direct ||
               in_transit_.load(std::memory_order_seq_cst) != 0 || session_failed_ ||
               clock::now() >= deadline) {
      // The I/O thread wants the socket back, or a submitted request must go first: no new
      // requests join, so that the session ends.
      return false;
    }
    direct_exchanges.fetch_add(1, std::memory_order_relaxed);
    if (opener) {
      // The opener reads, and writes first, outside the lock: a caller that comes meanwhile
      // joins (its bytes wait in the outbox) instead of waiting for the lock past its deadline.
      session_wire_.push_back(&me);
      me.state.store(direct_waiter::lead, std::memory_order_relaxed);
      if (session_writing_) {
        // The last session's writer has not taken the lock back since its last send (all it
        // sent was answered): it writes what the outbox holds before it stops. Writing here
        // too would interleave two threads' bytes.
        session_outbox_.append(payload);
        me.in_outbox = true;
      } else {
        session_writing_ = true;
        lock.unlock();
        errc code{};
        auto result = write_all(direct_fd_, payload, deadline, code,
                                [this] { return writer_should_stop(); });
        lock.lock();
        session_writing_ = false;
        if (result == write_result::nothing_sent && session_wire_.size() == 1) {
          // Nothing went out and nobody joined: the connection is as good as before.
          session_wire_.clear();
          session_open_ = false;
          ec = code;
          out = reply{};
          hand_back(false);
          return true;
        }
        if (result != write_result::sent && !session_failed_) session_failed_ = code;
        // What joiners queued meanwhile (nothing, when the write failed).
        write_outbox(lock, deadline);
      }
    } else {
      // The order on the wire is the order of session_wire_: a joiner queues its bytes with its
      // place, and whoever writes takes all that is queued in one send.
      session_outbox_.append(payload);
      session_wire_.push_back(&me);
      me.in_outbox = true;
      if (!session_writing_) write_outbox(lock, deadline);
      lock.unlock();
      // Until the reader hands over this request's replies, or the reading itself.
      sleep_while(me.state, direct_waiter::waiting);
    }
  }
  if (me.state.load(std::memory_order_acquire) == direct_waiter::lead) lead_session(me);
  if (me.state.load(std::memory_order_acquire) == direct_waiter::unsent) {
    direct_exchanges.fetch_sub(1, std::memory_order_relaxed);
    return false;  // nothing was written: the caller submits it
  }
  ec = me.ec;
  out = std::move(me.out);
  return true;
}

// With session_mutex_ held; unlocks it while it writes. After the first byte went out, a failed
// or late write leaves every request on the wire unknown: the reader fails them all.
void connection::write_outbox(std::unique_lock<std::mutex>& lock, clock::time_point deadline) {
  session_writing_ = true;
  std::string batch;
  while (!session_outbox_.empty() && !session_failed_ && !session_hand_back_) {
    batch.clear();
    batch.swap(session_outbox_);
    for (auto* w : session_wire_) w->in_outbox = false;  // theirs may go out from now on
    lock.unlock();
    errc code{};
    auto result =
        write_all(direct_fd_, batch, deadline, code, [this] { return writer_should_stop(); });
    lock.lock();
    if (result != write_result::sent && !session_failed_) session_failed_ = code;
  }
  session_outbox_.clear();
  session_writing_ = false;
  // The session failed meanwhile: its reader left the socket to this writer to hand back.
  if (std::exchange(session_hand_back_, false)) hand_back(true);
}

// With session_mutex_ unlocked (a writer blocked in send): the session failed elsewhere, or a
// request on its FIFO is past its deadline, which fails the session anyway.
bool connection::writer_should_stop() {
  std::lock_guard guard(session_mutex_);
  if (session_hand_back_ || session_failed_) return true;
  auto now = clock::now();
  return std::any_of(session_wire_.begin(), session_wire_.end(),
                     [now](const direct_waiter* w) { return w->deadline <= now; });
}

// With session_mutex_ held.
bool connection::open_session(clock::time_point deadline) {
  driver expected = driver::idle;
  if (!driver_.compare_exchange_strong(expected, driver::direct, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
    return false;
  }
  if (in_transit_.load(std::memory_order_seq_cst) != 0) {
    hand_back(false);  // a request submitted before this call (maybe by this thread) goes first
    return false;
  }
  // The I/O thread published direct_fd_ and direct_link_ before it gave the socket up; callers
  // alone touch them, the reader and reader_ until the session ends.
  if (spoke_while_idle(direct_fd_)) {
    hand_back(true);  // dropped while idle: the I/O thread fails it; submit() reconnects
    return false;
  }
  if (clock::now() >= deadline) {
    hand_back(false);  // let the async path report the timeout, as it always did
    return false;
  }
  session_open_ = true;
  session_failed_.clear();
  return true;
}

// Replies come in the order of session_wire_. Each reader reads until its own request is
// answered, then wakes the next waiter as reader: nobody stays behind reading for others. The
// reader's wait ends at the earliest deadline of the requests written (or after
// reader_recheck): a missed one fails them all, as on the async path (connection::on_deadline).
void connection::lead_session(direct_waiter& me) {
  const int fd = direct_fd_;
  socket_link& link = *direct_link_;
  reply_reader& reader = *reader_;
  std::vector<std::atomic<std::uint32_t>*> woken;
  bool answered = false;
  std::unique_lock lock(session_mutex_);
  for (;;) {
    std::error_code perr;
    bool demoted = false;
    while (!session_wire_.empty() && !demoted) {
      auto r = reader.next(perr);
      if (perr || !r) break;
      direct_waiter& front = *session_wire_.front();
      // With Sentinel, READONLY means the node was demoted: the socket ends after this
      // request, so that the next request votes again (connection::on_reply).
      front.demoted = front.demoted || (sentinel_ && is_demoted_reply(*r));
      if (front.expected > 1) {
        if (front.got.empty()) front.got.reserve(front.expected);
        front.got.push_back(std::move(*r));
        if (front.got.size() < front.expected) continue;
        front.demoted = front.demoted || leaves_a_transaction_open(front.got);
        front.out = reply::make_array(std::move(front.got));
        front.ec = {};
      } else {
        front.ec = r->is_error() ? error_from_reply(*r) : std::error_code{};
        front.out = std::move(*r);
      }
      session_wire_.pop_front();
      demoted = front.demoted;
      if (&front == &me) {
        answered = true;
      } else {
        front.state.store(direct_waiter::done, std::memory_order_release);
        woken.push_back(&front.state);
      }
    }
    if (perr || demoted || session_failed_) {
      fail_session(perr     ? std::error_code(errc::protocol_error)
                   : demoted ? std::error_code(errc::connection_lost)
                             : session_failed_,
                   woken);
    } else if (answered) {
      if (session_wire_.empty()) {
        // A reply beyond the last request was not asked for: on the async path it fails the
        // connection (after the requests completed normally); do the same.
        bool unasked = reader.next(perr).has_value() || perr;
        session_open_ = false;
        hand_back(unasked, true);
      } else {
        session_wire_.front()->state.store(direct_waiter::lead, std::memory_order_release);
        woken.push_back(&session_wire_.front()->state);
      }
    }
    if (!session_open_ || answered) {
      lock.unlock();
      wake_all(woken);
      return;
    }
    auto due = clock::time_point::max();
    for (auto* w : session_wire_) due = std::min(due, w->deadline);
    lock.unlock();
    wake_all(std::exchange(woken, {}));

    auto now = clock::now();
    bool ready = wait_for(fd, POLLIN, due - now > reader_recheck ? now + reader_recheck : due);
    ssize_t n = ready ? ::recv(fd, link.read_buf.data(), link.read_buf.size(), MSG_DONTWAIT) : -1;
    int err = errno;
    lock.lock();
    if (!ready) {
      // A request on the FIFO missed its deadline (maybe one that joined during the wait).
      auto late = clock::now();
      for (auto* w : session_wire_) {
        if (w->deadline <= late) {
          fail_session(errc::timeout, woken);
          break;
        }
      }
    } else if (n > 0) {
      link.heard_back = true;
      reader.feed({link.read_buf.data(), static_cast<std::size_t>(n)});
    } else if (n == 0 || (err != EINTR && err != EAGAIN && err != EWOULDBLOCK)) {
      fail_session(errc::connection_lost, woken);
    }
  }
}

// After the first byte of a request went out its outcome is unknown on any failure, and a late
// reply could pair with the next request: the socket must go (see the top).
void connection::fail_session(std::error_code code,
                              std::vector<std::atomic<std::uint32_t>*>& woken) {
  for (auto* w : session_wire_) {
    w->ec = code;
    w->out = reply{};
    // Requests still in the outbox never went out: unless past their deadline they go to the
    // I/O thread instead, as the async path sends a request not yet written on a fresh socket.
    auto next = w->in_outbox && clock::now() < w->deadline ? direct_waiter::unsent
                                                           : direct_waiter::done;
    // The reader itself is among them when its request was not answered; it needs no wake-up.
    if (w->state.exchange(next, std::memory_order_acq_rel) == direct_waiter::waiting) {
      woken.push_back(&w->state);
    }
  }
  session_wire_.clear();
  session_outbox_.clear();  // theirs only: a writer's batch was taken out of it already
  session_failed_.clear();
  session_open_ = false;
  // A joiner may be writing on the socket outside the lock: it hands back once done.
  if (session_writing_) {
    session_hand_back_ = true;
  } else {
    hand_back(true);
  }
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
