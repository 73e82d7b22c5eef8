// SPDX-License-Identifier: Apache-2.0
// dlock/detail/async.hpp: glue between completion tokens and dlock's type-erased async core.
//   initiate<Sig>(token, io_executor, start)  runs start(unique_function<Sig>) and returns what
//       the token asks for; the erased handler completes on the handler's associated executor
//   initiate_stoppable<Sig>(token, io_executor, start)  the same for a wait, which start(handler,
//       std::stop_token) ends when the handler's cancellation slot (Asio per-operation
//       cancellation: bind_cancellation_slot, awaitable operators) emits any cancellation type
//   wait<T>(start)  the sync facade: blocks the calling thread until start's handler ran
// Not API.
#pragma once

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/dispatch.hpp>
#include <asio/execution.hpp>
#include <asio/io_context.hpp>
#include <asio/prefer.hpp>

#include <future>
#include <memory>
#include <stop_token>
#include <system_error>
#include <tuple>
#include <utility>

#include "dlock/detail/unique_function.hpp"
#include "dlock/error.hpp"
#include "dlock/export.hpp"

namespace dlock::detail {

using io_executor = asio::io_context::executor_type;

// True in a child process that fork() made after dlock started its I/O thread: the child has
// no such thread, and its sockets are the parent's. Every call there fails with
// errc::forked_process (async ones throw it), before touching a socket.
DLOCK_EXPORT bool in_forked_child() noexcept;

template <class Signature, class Token, class Start>
auto initiate(Token&& token, io_executor io_ex, Start start) {
  if (in_forked_child()) throw std::system_error(make_error_code(errc::forked_process));
  return asio::async_initiate<Token, Signature>(
      [io_ex, start = std::move(start)](auto handler) mutable {
        auto ex = asio::prefer(asio::get_associated_executor(handler, io_ex),
                               asio::execution::outstanding_work.tracked);
        start(unique_function<Signature>(
            [h = std::move(handler), ex = std::move(ex)](auto&&... args) mutable {
              asio::dispatch(ex, [h = std::move(h),
                                  t = std::make_tuple(std::forward<decltype(args)>(args)...)]() mutable {
                std::apply(std::move(h), std::move(t));
              });
            }));
      },
      token);
}

// The slot's handler stops the wait through a stop_source; the completion clears the slot on
// the handler's own executor, where the signal is emitted (Asio's rule: a slot is not shared
// between threads), before the handler runs.
template <class Signature, class Token, class Start>
auto initiate_stoppable(Token&& token, io_executor io_ex, Start start) {
  if (in_forked_child()) throw std::system_error(make_error_code(errc::forked_process));
  return asio::async_initiate<Token, Signature>(
      [io_ex, start = std::move(start)](auto handler) mutable {
        auto ex = asio::prefer(asio::get_associated_executor(handler, io_ex),
                               asio::execution::outstanding_work.tracked);
        auto slot = asio::get_associated_cancellation_slot(handler);
        std::stop_token stop;
        if (slot.is_connected()) {
          auto source = std::make_shared<std::stop_source>();
          stop = source->get_token();
          slot.assign([source](asio::cancellation_type type) {
            if (type != asio::cancellation_type::none) source->request_stop();
          });
        }
        start(unique_function<Signature>(
                  [h = std::move(handler), ex = std::move(ex), slot](auto&&... args) mutable {
                    asio::dispatch(ex, [h = std::move(h), slot,
                                        t = std::make_tuple(std::forward<decltype(args)>(args)...)]() mutable {
                      if (slot.is_connected()) slot.clear();
                      std::apply(std::move(h), std::move(t));
                    });
                  }),
              std::move(stop));
      },
      token);
}

// True on the I/O thread of a dlock runtime, where a blocking call would deadlock.
DLOCK_EXPORT bool on_io_thread() noexcept;

// Runs start(handler) and blocks until handler(ec, value) is called; returns value, sets ec.
// (A mutex + condition variable on this frame instead of the promise measured no faster: the
// handler must notify under the lock, for the frame's lifetime, so the waiter wakes only to
// block on that lock once more; libstdc++'s future waits on a bare futex.)
template <class T, class Start>
T wait(std::error_code& ec, Start&& start) {
  if (on_io_thread()) {
    ec = errc::would_block_io_thread;
    return T{};
  }
  if (in_forked_child()) {
    ec = errc::forked_process;
    return T{};
  }
  std::promise<std::pair<std::error_code, T>> done;
  auto result = done.get_future();
  std::forward<Start>(start)(unique_function<void(std::error_code, T)>(
      [&done](std::error_code e, T v) { done.set_value({e, std::move(v)}); }));
  auto [e, v] = result.get();
  ec = e;
  return std::move(v);
}

}  // namespace dlock::detail
