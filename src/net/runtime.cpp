#include "net/runtime.hpp"

#include "dlock/detail/async.hpp"

namespace dlock::detail {
namespace {
thread_local bool this_thread_runs_io = false;
}

bool on_io_thread() noexcept { return this_thread_runs_io; }

runtime::runtime() : work_(io_.get_executor()) {
  thread_ = std::thread([this] {
    this_thread_runs_io = true;
    io_.run();
  });
  thread_.detach();
}

runtime& runtime::shared() {
  static runtime* instance = new runtime();  // see the header: deliberately never destroyed
  return *instance;
}

}  // namespace dlock::detail
