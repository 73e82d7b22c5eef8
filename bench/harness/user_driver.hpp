// SPDX-License-Identifier: Apache-2.0
// harness/user_driver.hpp: the blocking path as a user writes it (issue 39, part 3).
//   run_user_driver  one dlock::client{url}, made as a user makes it; `rounds` times: N threads,
//                    each looping m.lock(); m.unlock() on its own dlock::mutex{client, "ud:t:<i>"}
//                    for `seconds`, a 1 s pause, N async chains (async_acquire -> the lease's
//                    async_release -> the next) for `seconds`, a 1 s pause. Cycles are counted
//                    as such a program counts them: one shared counter, read when the window
//                    ends; no warm-up, no start barrier, no latency samples. Figures:
//                    threads_cycles_per_s, async_cycles_per_s, ratio (threads / async, all
//                    rounds), per round threads_<r>, async_<r>, ratio_<r>, the client process's
//                    cost per cycle in each phase (threads_/async_switches_per_cycle: voluntary
//                    context switches; threads_/async_cpu_us_per_cycle: CPU time), and the
//                    1-minute load average before and after.
// The setup's switches add one of run_uncontended's habits at a time, to find which of them (if
// any) makes lock_bench's threads/async ratio differ from such a program's.
#pragma once

#include <string>

#include "harness/measure.hpp"

namespace dlock::bench {

struct user_driver_setup {
  std::string url;
  int lockers = 8;
  double seconds = 2.5;
  int rounds = 2;
  bool async_first = false;  // each round starts with the async chains
  bool barrier = false;      // threads wait for one start time 20 ms ahead (run_uncontended's)
  int warm_ms = 0;           // cycles before the window, not counted (run_uncontended's 300)
  bool node_vector = false;  // dlock::mutex{std::vector<client>{client}, ...} as lock_bench
};

// The variant of the plain driver (no switch set), the one the targets judge.
inline constexpr const char* user_driver_variant =
    "one client, threads lock()+unlock() vs async chains";
row run_user_driver(const user_driver_setup& s);

}  // namespace dlock::bench
