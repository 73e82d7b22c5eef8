// clock_shim: an LD_PRELOAD library that moves one process's wall clock.
//   DLOCK_CLOCK_OFFSET_MS=<signed ms>  added to CLOCK_REALTIME(_COARSE) in clock_gettime, and to
//                                      gettimeofday and time; monotonic clocks are untouched
// For the clock-skew tests (MACHINE-NOTES.md: libfaketime hangs redis-server, a small shim of
// our own works). Built without sanitizers, so that it can be preloaded into any process; run
// sanitized programs under it with ASAN_OPTIONS=verify_asan_link_order=0.
#include <dlfcn.h>
#include <sys/time.h>
#include <time.h>

#include <cstdlib>

namespace {

long long offset_ms() {
  static const long long offset = [] {
    const char* text = std::getenv("DLOCK_CLOCK_OFFSET_MS");
    return text ? std::atoll(text) : 0LL;
  }();
  return offset;
}

void shift(long long& seconds, long long& sub, long long sub_per_second, long long sub_per_ms) {
  long long total = sub + (offset_ms() % 1000) * sub_per_ms;
  seconds += offset_ms() / 1000 + total / sub_per_second;
  sub = total % sub_per_second;
  if (sub < 0) {
    sub += sub_per_second;
    seconds -= 1;
  }
}

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int clock_gettime(clockid_t id, struct timespec* ts) noexcept {
  static const auto real = next<int (*)(clockid_t, struct timespec*)>("clock_gettime");
  int rc = real(id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    long long s = ts->tv_sec, ns = ts->tv_nsec;
    shift(s, ns, 1'000'000'000, 1'000'000);
    ts->tv_sec = static_cast<time_t>(s);
    ts->tv_nsec = static_cast<long>(ns);
  }
  return rc;
}

extern "C" int gettimeofday(struct timeval* tv, void* tz) noexcept {
  static const auto real = next<int (*)(struct timeval*, void*)>("gettimeofday");
  int rc = real(tv, tz);
  if (rc == 0) {  // tv is declared nonnull
    long long s = tv->tv_sec, us = tv->tv_usec;
    shift(s, us, 1'000'000, 1'000);
    tv->tv_sec = static_cast<time_t>(s);
    tv->tv_usec = static_cast<suseconds_t>(us);
  }
  return rc;
}

extern "C" time_t time(time_t* out) noexcept {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}
