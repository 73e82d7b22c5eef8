#include "net/runtime.hpp"

#include <asio/error.hpp>
#include <asio/ssl/error.hpp>

#include <chrono>
#include <cstdlib>

#include "dlock/detail/async.hpp"

namespace dlock::detail {
namespace {
thread_local bool this_thread_runs_io = false;
}

bool on_io_thread() noexcept { return this_thread_runs_io; }

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
    this_thread_runs_io = true;
    io_.run();
    stopped_.store(true);
  });
  thread_.detach();
  std::atexit([] { shared().stop_at_exit(); });
}

void runtime::stop_at_exit() noexcept {
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

}  // namespace dlock::detail
