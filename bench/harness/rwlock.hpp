// SPDX-License-Identifier: Apache-2.0
// harness/rwlock.hpp: the read-write lock under a mixed load, measured.
//   run_rwlock_mix  `workers` threads on one name, each drawing a read (`read_percent` %) or a
//                   write per cycle, holding it ~`t.hold`: through a dlock::shared_mutex
//                   (readers share), and, for comparison, through a dlock::mutex that takes
//                   every cycle exclusively. Figures: cycles/s (and reads/s, writes/s), the
//                   most readers seen holding at once, the wait p50/p99 of readers and of
//                   writers, and overlaps (a writer seen beside anyone: must be 0)
#pragma once

#include "harness/measure.hpp"

namespace dlock::bench {

row run_rwlock_mix(client node, int workers, int read_percent, bool exclusive_only,
                   const timing& t);

}  // namespace dlock::bench
