// SPDX-License-Identifier: Apache-2.0
// dlock_bench_stamp LABEL FILE [SLEEP_MS]: the CMD of the command handoff benchmark
// (harness/cli_handoff.hpp). Sleeps SLEEP_MS, then appends "LABEL <CLOCK_MONOTONIC ns>" to FILE
// and exits: a holder's last act, or a waiter's first. Plain C calls, so that its own start and
// end cost little beside what is measured.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: dlock_bench_stamp LABEL FILE [SLEEP_MS]\n");
    return 64;
  }
  if (argc > 3) {
    long ms = std::strtol(argv[3], nullptr, 10);
    timespec pause{ms / 1000, (ms % 1000) * 1'000'000};
    ::nanosleep(&pause, nullptr);
  }
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  char line[96];
  int n = std::snprintf(line, sizeof line, "%s %lld\n", argv[1],
                        static_cast<long long>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec);
  int fd = ::open(argv[2], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, line, static_cast<std::size_t>(n)) != n) return 1;
  ::close(fd);
  return 0;
}
