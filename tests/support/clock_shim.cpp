// SPDX-License-Identifier: Apache-2.0
// clock_shim: the tests' one LD_PRELOAD library that moves a process's wall clock. Three ways,
// each set by an environment variable read at load time:
//   DLOCK_FROZEN_CLOCK=<file>          the file's first 8 bytes are the wall time in microseconds
//                                      since the epoch (a host-order int64); the process sees
//                                      exactly that time, standing still, until the file changes
//                                      (it is mapped, so a write shows at the next reading). The
//                                      simulator's differential test (tests/sim/sim_node_diff_test)
//                                      runs redis-server under it: server and simulated node see
//                                      one clock, and time jumps without sleeping.
//   DLOCK_FAULT_CLOCK=<file>           the file holds "<offset ms> <rate>" ("5000 1", "0 1.5"),
//                                      re-read at most once a millisecond, so a test can make a
//                                      live redis-server's clock jump (raise the offset) or run
//                                      fast (rate > 1). Wall time seen: real + offset + the skew
//                                      accumulated by rates, each applying from the moment it was
//                                      first read (changing the rate does not jump the clock).
//                                      The fault suite (tests/fault: fault_kit_test, scenario).
//   DLOCK_CLOCK_OFFSET_MS=<signed ms>  a fixed offset (tests/integration/semaphore_test's
//                                      clock-skewed semaphore_worker).
// If several are set, the first of them in this order whose file is usable wins; with none
// (or none usable) the real clock shows through. Only CLOCK_REALTIME(_COARSE), gettimeofday and
// time move; monotonic clocks (Redis's timers) are untouched. Redis 7 expires keys by the wall
// clock, so a forward jump expires its keys at once.
//
// Tests find it at DLOCK_CLOCK_SHIM, its absolute path, defined at compile time (CMake:
// $<TARGET_FILE:clock_shim>). It is preloaded into redis-server, whose jemalloc must not see us,
// and into sanitized programs: built without sanitizers and without allocation, thread-safe
// (the moving clock through one spin lock). Run sanitized programs under it with
// ASAN_OPTIONS=verify_asan_link_order=0. (MACHINE-NOTES.md: libfaketime hangs redis-server, a
// small shim of our own works.)
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

using clock_gettime_fn = int (*)(clockid_t, struct timespec*);
using gettimeofday_fn = int (*)(struct timeval*, void*);

constexpr long long ns_per_s = 1'000'000'000;

enum class mode { real, frozen, file, offset };

// The environment's choice, fixed once read (config()).
struct settings {
  clock_gettime_fn real_clock_gettime = nullptr;
  gettimeofday_fn real_gettimeofday = nullptr;
  mode how = mode::real;
  const std::int64_t* frozen_micros = nullptr;  // DLOCK_FROZEN_CLOCK, mapped
  char clock_file[512] = {};                    // DLOCK_FAULT_CLOCK
  long long offset_ns = 0;                      // DLOCK_CLOCK_OFFSET_MS
};

// DLOCK_FAULT_CLOCK's moving state, under `busy`.
std::atomic_flag busy = ATOMIC_FLAG_INIT;
long long file_offset_ns = 0;  // from the file
double rate = 1.0;             // from the file
long long skew_ns = 0;         // skew accumulated under earlier rates
long long rate_since_ns = 0;   // real wall time when `rate` took effect
long long last_read_mono_ns = -1'000'000'000;

long long to_ns(const timespec& ts) { return ts.tv_sec * ns_per_s + ts.tv_nsec; }

// Splits ns since the epoch into whole units and a non-negative remainder (floor division).
void split(long long ns, long long per_unit, long long& whole, long long& rest) {
  whole = ns / per_unit;
  rest = ns % per_unit;
  if (rest < 0) {
    rest += per_unit;
    whole -= 1;
  }
}

const std::int64_t* map_frozen(const char* path) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* p = ::mmap(nullptr, sizeof(std::int64_t), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<const std::int64_t*>(p);
}

// Read once, at load time (init below) or at an earlier clock reading; a function-local static,
// so concurrent first readers wait for one initialization (no allocation: a guard variable).
const settings& config() {
  static const settings s = []() noexcept {
    settings out;
    out.real_clock_gettime = reinterpret_cast<clock_gettime_fn>(dlsym(RTLD_NEXT, "clock_gettime"));
    out.real_gettimeofday = reinterpret_cast<gettimeofday_fn>(dlsym(RTLD_NEXT, "gettimeofday"));
    if (const char* path = std::getenv("DLOCK_FROZEN_CLOCK")) {
      out.frozen_micros = map_frozen(path);
      if (out.frozen_micros) {
        out.how = mode::frozen;
        return out;
      }
    }
    if (const char* path = std::getenv("DLOCK_FAULT_CLOCK");
        path && std::strlen(path) < sizeof out.clock_file) {
      std::strcpy(out.clock_file, path);
      timespec now{};
      out.real_clock_gettime(CLOCK_REALTIME, &now);
      rate_since_ns = to_ns(now);  // before any reader: they all pass through this guard
      out.how = mode::file;
      return out;
    }
    if (const char* text = std::getenv("DLOCK_CLOCK_OFFSET_MS")) {
      out.offset_ns = std::atoll(text) * 1'000'000;
      out.how = mode::offset;
    }
    return out;
  }();
  return s;
}

__attribute__((constructor)) void init() { config(); }

// "<offset ms> <rate>", rate optional with up to 9 decimals; no strtod (locale, allocation).
bool parse(const char* text, long long& offset_ms, double& r) {
  char* end = nullptr;
  offset_ms = std::strtoll(text, &end, 10);
  if (end == text) return false;
  while (*end == ' ' || *end == '\t') ++end;
  r = 1.0;
  if (*end < '0' || *end > '9') return true;
  long long whole = 0, frac = 0, scale = 1;
  for (; *end >= '0' && *end <= '9'; ++end) whole = whole * 10 + (*end - '0');
  if (*end == '.') {
    for (++end; *end >= '0' && *end <= '9' && scale < 1'000'000'000; ++end) {
      frac = frac * 10 + (*end - '0');
      scale *= 10;
    }
  }
  r = static_cast<double>(whole) + static_cast<double>(frac) / static_cast<double>(scale);
  return r > 0;
}

// Called with `busy` held: re-reads the file when a millisecond has passed since the last read.
void refresh(const settings& s, long long real_ns) {
  timespec mono{};
  s.real_clock_gettime(CLOCK_MONOTONIC_COARSE, &mono);
  long long mono_ns = to_ns(mono);
  if (mono_ns - last_read_mono_ns < 1'000'000) return;
  last_read_mono_ns = mono_ns;
  int fd = ::open(s.clock_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[64];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return;
  buf[n] = '\0';
  long long new_offset_ms = 0;
  double new_rate = 1.0;
  if (!parse(buf, new_offset_ms, new_rate)) return;
  file_offset_ns = new_offset_ms * 1'000'000;
  if (new_rate != rate) {
    skew_ns += static_cast<long long>((rate - 1.0) * static_cast<double>(real_ns - rate_since_ns));
    rate = new_rate;
    rate_since_ns = real_ns;
  }
}

// The wall time to show for the real one, in the file and offset modes.
long long moved_ns(const settings& s, long long real_ns) {
  if (s.how == mode::offset) return real_ns + s.offset_ns;
  while (busy.test_and_set(std::memory_order_acquire)) {
  }
  refresh(s, real_ns);
  long long skew =
      skew_ns + static_cast<long long>((rate - 1.0) * static_cast<double>(real_ns - rate_since_ns));
  long long out = real_ns + file_offset_ns + skew;
  busy.clear(std::memory_order_release);
  return out;
}

std::int64_t frozen_micros(const settings& s) {
  return __atomic_load_n(s.frozen_micros, __ATOMIC_ACQUIRE);
}

}  // namespace

extern "C" int clock_gettime(clockid_t id, struct timespec* ts) noexcept {
  const settings& s = config();
  if (s.how == mode::real || (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE)) {
    return s.real_clock_gettime(id, ts);
  }
  long long sec = 0, nsec = 0;
  if (s.how == mode::frozen) {
    split(frozen_micros(s) * 1000, ns_per_s, sec, nsec);
  } else {
    int rc = s.real_clock_gettime(id, ts);
    if (rc != 0) return rc;
    split(moved_ns(s, to_ns(*ts)), ns_per_s, sec, nsec);
  }
  ts->tv_sec = static_cast<time_t>(sec);
  ts->tv_nsec = static_cast<long>(nsec);
  return 0;
}

extern "C" int gettimeofday(struct timeval* tv, void* tz) noexcept {
  const settings& s = config();
  long long sec = 0, usec = 0;
  if (s.how == mode::real) return s.real_gettimeofday(tv, tz);
  if (s.how == mode::frozen) {  // tz untouched
    split(frozen_micros(s), 1'000'000, sec, usec);
  } else {
    int rc = s.real_gettimeofday(tv, tz);
    if (rc != 0) return rc;  // tv is declared nonnull
    split(moved_ns(s, tv->tv_sec * ns_per_s + tv->tv_usec * 1000LL) / 1000, 1'000'000, sec, usec);
  }
  tv->tv_sec = static_cast<time_t>(sec);
  tv->tv_usec = static_cast<suseconds_t>(usec);
  return 0;
}

extern "C" time_t time(time_t* out) noexcept {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}
