// fault_clock_shim: an LD_PRELOAD library that moves a *running* process's wall clock.
//   DLOCK_FAULT_CLOCK=<file>  the file holds "<offset ms> <rate>" ("5000 1", "0 1.5"); it is
//                             re-read at most once a millisecond, so a test can make a live
//                             redis-server's clock jump (raise the offset) or run fast (rate > 1)
// Wall time seen by the process: real + offset + accumulated rate skew, where a rate applies
// from the moment it was first read (so changing the rate does not jump the clock). Only
// CLOCK_REALTIME(_COARSE), gettimeofday and time move; monotonic clocks are untouched. Redis 7
// expires keys by the wall clock, so a forward jump expires its keys at once.
// tests/support/clock_shim reads a fixed offset once at start-up; this one is for faults that
// happen while the server runs. Built without sanitizers and without allocation (jemalloc in
// redis-server must not see us), thread-safe through one spin lock.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace {

using clock_gettime_fn = int (*)(clockid_t, struct timespec*);
using gettimeofday_fn = int (*)(struct timeval*, void*);

clock_gettime_fn real_clock_gettime = nullptr;
gettimeofday_fn real_gettimeofday = nullptr;
char clock_file[512];

std::atomic_flag busy = ATOMIC_FLAG_INIT;
long long offset_ns = 0;      // from the file
double rate = 1.0;            // from the file
long long skew_ns = 0;        // skew accumulated under earlier rates
long long rate_since_ns = 0;  // real wall time when `rate` took effect
long long last_read_mono_ns = -1'000'000'000;

long long to_ns(const timespec& ts) { return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec; }

clock_gettime_fn resolve_clock_gettime() {
  if (!real_clock_gettime) {
    real_clock_gettime = reinterpret_cast<clock_gettime_fn>(dlsym(RTLD_NEXT, "clock_gettime"));
  }
  return real_clock_gettime;
}

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
void refresh(long long real_ns) {
  if (clock_file[0] == '\0') return;
  timespec mono{};
  resolve_clock_gettime()(CLOCK_MONOTONIC_COARSE, &mono);
  long long mono_ns = to_ns(mono);
  if (mono_ns - last_read_mono_ns < 1'000'000) return;
  last_read_mono_ns = mono_ns;
  int fd = ::open(clock_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[64];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return;
  buf[n] = '\0';
  long long new_offset_ms = 0;
  double new_rate = 1.0;
  if (!parse(buf, new_offset_ms, new_rate)) return;
  offset_ns = new_offset_ms * 1'000'000;
  if (new_rate != rate) {
    skew_ns += static_cast<long long>((rate - 1.0) * static_cast<double>(real_ns - rate_since_ns));
    rate = new_rate;
    rate_since_ns = real_ns;
  }
}

long long fake_ns(long long real_ns) {
  while (busy.test_and_set(std::memory_order_acquire)) {
  }
  refresh(real_ns);
  long long skew =
      skew_ns + static_cast<long long>((rate - 1.0) * static_cast<double>(real_ns - rate_since_ns));
  long long out = real_ns + offset_ns + skew;
  busy.clear(std::memory_order_release);
  return out;
}

__attribute__((constructor)) void init() {
  resolve_clock_gettime();
  real_gettimeofday = reinterpret_cast<gettimeofday_fn>(dlsym(RTLD_NEXT, "gettimeofday"));
  if (const char* path = std::getenv("DLOCK_FAULT_CLOCK");
      path && std::strlen(path) < sizeof clock_file) {
    std::strcpy(clock_file, path);
  }
  timespec now{};
  real_clock_gettime(CLOCK_REALTIME, &now);
  rate_since_ns = to_ns(now);
}

}  // namespace

extern "C" int clock_gettime(clockid_t id, struct timespec* ts) noexcept {
  int rc = resolve_clock_gettime()(id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    long long ns = fake_ns(to_ns(*ts));
    ts->tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    ts->tv_nsec = static_cast<long>(ns % 1'000'000'000);
  }
  return rc;
}

extern "C" int gettimeofday(struct timeval* tv, void* tz) noexcept {
  if (!real_gettimeofday) {
    real_gettimeofday = reinterpret_cast<gettimeofday_fn>(dlsym(RTLD_NEXT, "gettimeofday"));
  }
  int rc = real_gettimeofday(tv, tz);
  if (rc == 0) {  // tv is declared nonnull
    long long ns = fake_ns(tv->tv_sec * 1'000'000'000LL + tv->tv_usec * 1000LL);
    tv->tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    tv->tv_usec = static_cast<suseconds_t>((ns % 1'000'000'000) / 1000);
  }
  return rc;
}

extern "C" time_t time(time_t* out) noexcept {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}
