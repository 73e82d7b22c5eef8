// SPDX-License-Identifier: Apache-2.0
// net/runtime.hpp: the I/O thread that runs every connection and timer of dlock. Private.
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include <atomic>
#include <thread>

namespace dlock::detail {

// One io_context run by one thread. Connections keep their state on it without locks, since
// only that thread touches it.
class runtime {
 public:
  asio::io_context::executor_type get_executor() noexcept { return io_.get_executor(); }

  // The process-wide runtime, started on first use. It is never destroyed: the last reference
  // to a connection or lease is often dropped by a handler on the I/O thread itself, which could
  // neither join nor destroy the io_context it is running in. At exit its thread is stopped.
  static runtime& shared();

 private:
  runtime();
  // Registered with atexit: stops the I/O thread (waiting up to 1 s) before static
  // destructors run, so that no handler meets a destroyed object.
  void stop_at_exit() noexcept;

  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

// OpenSSL frees a thread's state (error queue, DRBG, ...) when the thread ends, but the I/O
// thread ends only as the process exits, after the leak checker has looked. Whoever makes the
// I/O thread use OpenSSL (a TLS connection, a token drawn there) calls this once: the I/O
// thread then frees its OpenSSL state at exit, before the runtime stops it.
void free_io_thread_openssl_state_at_exit();

}  // namespace dlock::detail
