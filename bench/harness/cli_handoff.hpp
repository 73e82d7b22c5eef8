// SPDX-License-Identifier: Apache-2.0
// harness/cli_handoff.hpp: the handoff through the command, from one `dlock run`'s CMD to the
// next's (issue 36, part 5), measured with the built `dlock` binary.
//   run_cli_handoff  `samples` times: a holder `dlock run K` whose CMD (dlock_bench_stamp,
//                    bench/cli_stamp.cpp) sleeps, then stamps CLOCK_MONOTONIC as its last act;
//                    a waiter `dlock run -w 10 K`, started once the holder holds and seen in
//                    K's queue before that CMD ends, whose CMD stamps as its first act.
//                    Figures: handoff p50/p99/max = next start - end; the floor = the same
//                    stamp program spawned directly (posix_spawn to its stamp, p50), what any
//                    command pays to start one; the handoff p50 in floors; samples,
//                    `unqueued` (a waiter not seen in the queue before that end, or a run that
//                    failed: not counted) and `overlaps` (the next CMD began before the end:
//                    must be 0).
//                    `busy_threads` threads spin beside it all (2 on 2 cores: a busy machine).
#pragma once

#include <string>

#include "harness/measure.hpp"

namespace dlock::bench {

struct cli_handoff_setup {
  std::string dlock;  // the `dlock` binary
  std::string stamp;  // dlock_bench_stamp
  std::string url;    // the one Redis node
  int samples = 30;
  int busy_threads = 0;
};

row run_cli_handoff(client node, const cli_handoff_setup& s);

}  // namespace dlock::bench
