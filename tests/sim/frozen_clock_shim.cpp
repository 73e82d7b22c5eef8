// frozen_clock_shim: an LD_PRELOAD library that gives a process a wall clock set from outside.
//   DLOCK_FROZEN_CLOCK=<file>  the file's first 8 bytes are the wall time in microseconds since
//                              the epoch (a host-order int64); the process sees exactly that
//                              time, standing still, until the file changes (it is mapped, so
//                              a write shows at the next reading)
// The differential test runs redis-server under it: the server's TIME, its expiry and the
// simulated node's clock are then one value, so replies and TTLs compare exactly, and time
// can jump by any amount without sleeping. Only CLOCK_REALTIME(_COARSE), gettimeofday and time
// are frozen; monotonic clocks (Redis's timers) run. Built without sanitizers and without
// allocation (redis-server's jemalloc must not see us), like tests/fault/fault_clock_shim.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace {

using clock_gettime_fn = int (*)(clockid_t, struct timespec*);
using gettimeofday_fn = int (*)(struct timeval*, void*);

// The mapped clock, or nullptr when the variable is unset or the file unusable (then the real
// clock shows through). Mapping twice in a race is harmless.
std::int64_t* frozen_micros() {
  static std::atomic<std::int64_t*> mapped{nullptr};
  static std::atomic<bool> tried{false};
  if (std::int64_t* p = mapped.load(std::memory_order_acquire)) return p;
  if (tried.exchange(true)) return mapped.load(std::memory_order_acquire);
  const char* path = std::getenv("DLOCK_FROZEN_CLOCK");
  if (!path) return nullptr;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* p = ::mmap(nullptr, sizeof(std::int64_t), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return nullptr;
  mapped.store(static_cast<std::int64_t*>(p), std::memory_order_release);
  return static_cast<std::int64_t*>(p);
}

bool read_frozen(std::int64_t& micros) {
  std::int64_t* p = frozen_micros();
  if (!p) return false;
  micros = __atomic_load_n(p, __ATOMIC_ACQUIRE);
  return true;
}

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int clock_gettime(clockid_t id, struct timespec* ts) noexcept {
  static const auto real = next<clock_gettime_fn>("clock_gettime");
  std::int64_t micros = 0;
  if ((id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) && read_frozen(micros)) {
    ts->tv_sec = static_cast<time_t>(micros / 1'000'000);
    ts->tv_nsec = static_cast<long>(micros % 1'000'000 * 1000);
    return 0;
  }
  return real(id, ts);
}

extern "C" int gettimeofday(struct timeval* tv, void* tz) noexcept {
  static const auto real = next<gettimeofday_fn>("gettimeofday");
  std::int64_t micros = 0;
  if (!read_frozen(micros)) return real(tv, tz);
  tv->tv_sec = static_cast<time_t>(micros / 1'000'000);
  tv->tv_usec = static_cast<suseconds_t>(micros % 1'000'000);
  return 0;
}

extern "C" time_t time(time_t* out) noexcept {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}
