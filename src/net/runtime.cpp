// SPDX-License-Identifier: Apache-2.0
#include "net/runtime.hpp"

#include <pthread.h>

#include <openssl/crypto.h>

#include <asio/error.hpp>
#include <asio/post.hpp>
#include <asio/ssl/error.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>

#include "dlock/detail/async.hpp"

namespace dlock::detail {
namespace {
thread_local bool this_thread_runs_io = false;
std::atomic<bool> forked_child{false};
}

bool on_io_thread() noexcept { return this_thread_runs_io; }
bool in_forked_child() noexcept { return forked_child.load(std::memory_order_relaxed); }

runtime::runtime() : work_(io_.get_executor()) {
  // At exit the I/O thread may still be finishing a handler (a read handler re-arms its read
  // right after delivering the last reply) while static destructors run, and asio compares
  // error codes against its error categories, which are function-local statics. Constructing
  // them before registering stop_at_exit makes them die after it has stopped the thread.
  (void)asio::system_category();
  (void)asio::error::get_misc_category();
  (void)asio::error::get_netdb_category();
  (void)asio::error::get_addrinfo_category();
  (void)asio::error::get_ssl_category();
  (void)asio::ssl::error::get_stream_category();
  (void)dlock::category();
  thread_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "dlock-io");  // for top -H, gdb, perf
    this_thread_runs_io = true;
    io_.run();
    stopped_.store(true);
  });
  thread_.detach();
  std::atexit([] { shared().stop_at_exit(); });
  // Only the thread that forks lives on in the child, and the I/O thread is not it.
  ::pthread_atfork(nullptr, nullptr, [] { forked_child.store(true, std::memory_order_relaxed); });
}

void runtime::stop_at_exit() noexcept {
  // A forked child has no I/O thread to stop, and the io_context's lock may be held forever.
  if (in_forked_child()) return;
  io_.stop();
  if (on_io_thread()) return;  // exit() from a handler: the thread cannot wait for itself
  // Bounded, in case a user's handler blocks on the I/O thread.
  for (int i = 0; i < 1000 && !stopped_.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

runtime& runtime::shared() {
  static runtime* instance = new runtime();  // see the header: deliberately never destroyed
  return *instance;
}

// Atexit handlers run in reverse order of registration, and the runtime registered its own
// (stop_at_exit) before any caller of this could run, so this one runs first.
void free_io_thread_openssl_state_at_exit() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit([] {
      if (in_forked_child()) return;
      if (on_io_thread()) return OPENSSL_thread_stop();
      auto done = std::make_shared<std::promise<void>>();
      auto freed = done->get_future();
      asio::post(runtime::shared().get_executor(), [done] {
        OPENSSL_thread_stop();
        done->set_value();
      });
      freed.wait_for(std::chrono::seconds(1));  // bounded: a user's handler may block that thread
    });
  });
}

}  // namespace dlock::detail
