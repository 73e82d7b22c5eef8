// SPDX-License-Identifier: Apache-2.0
// tests/fault/history.hpp: what the holders saw, and the two checkers that judge it without
// trusting dlock.
//   stamp            CLOCK_MONOTONIC nanoseconds, read by the system call so that libfaketime
//                    cannot move them (Debian's does not intercept syscall()): one real clock
//                    for every process on the machine, so stamps of different worker processes
//                    compare directly
//   interval         one holding of a lock or permit, [acquired, last moment the holder
//                    believed it still held], as the holder itself recorded it
//   write_record     one write to the fenced resource: token, when sent, when answered, verdict
//   report           a worker's intervals, writes and counters; saved to / loaded from a file
//   count_overlaps   the overlap detector: holdings that began while `limit` others were held
//                    (weighed: a read-write lock's writer counts as all of its readers)
//   check_writes     the fenced resource's audit: accepted, rejected (stale), wrongly accepted
//   longest_recovery liveness after a partition heals: how long until each lock is held again
//   first_overlap_window  the holdings that show the first overlap, for a failing run's log
// Plain values and pure functions; a report is filled by one thread at a time (workers lock).
#pragma once

#include <cstdint>
#include <ctime>
#include <map>
#include <string>
#include <vector>

namespace dlock::fault {

using stamp = std::int64_t;
stamp now_stamp();
// Clock `id` (CLOCK_MONOTONIC, CLOCK_REALTIME ...) in nanoseconds, read as now_stamp() reads it:
// by the system call, past libfaketime.
stamp real_clock(clockid_t id);

struct interval {
  std::string lock;  // the lock's name within its scenario
  int limit = 1;     // holders allowed at once: 1 for a mutex, L for a semaphore
  stamp start = 0, end = 0;
  std::uint64_t token = 0;
  // How much of the limit the holding takes: 1, or for a read-write lock's writer all of it
  // (limit = max_readers, a reader 1).
  int weight = 1;
};

struct write_record {
  std::string resource;
  std::uint64_t token = 0;
  stamp sent = 0, answered = 0;
  bool accepted = false;
};

struct report {
  std::vector<interval> intervals;
  std::vector<write_record> writes;
  std::map<std::string, long long> counters;  // "acquired.<lock>", "lost", "error.<op>.<errc>"

  void merge(const report& other);
  bool save(const std::string& path) const;
  // Appends what `path` holds; false if it cannot be read.
  bool load(const std::string& path);
};

// Sorted by start per lock, an interval overlaps when, at its start, the intervals of the same
// lock still believed held (end > start) weigh so much that its own weight passes the limit
// (for weights of 1: `limit` of them were held). Touching ends (end == start) do not count.
std::size_t count_overlaps(const std::vector<interval>& intervals);
// Per lock name.
std::map<std::string, std::size_t> count_overlaps_by_lock(const std::vector<interval>& intervals);

struct fence_audit {
  std::size_t accepted = 0;
  std::size_t rejected = 0;  // stale writes refused by the resource
  // Accepted writes with a token lower than one accepted before they were sent: the resource let a
  // stale holder through. "Before" means that write's answer arrived before this one was sent, so
  // the order is certain whatever the concurrency.
  std::size_t wrongly_accepted = 0;
};
fence_audit check_writes(const std::vector<write_record>& writes);

// A heal, and when the next fault began (or the run ended): a holding after that is no
// recovery from this heal.
struct heal_window {
  stamp healed = 0, next_fault = 0;
};
// Liveness after healing, for each of `locks`: the longest time from a heal to the lock's next
// holding (0 when a holding spanned the heal). A window of at least `bound` with no holding in it
// makes it -1 (the lock did not come back); a shorter one without a holding proves nothing and
// is left out.
std::map<std::string, stamp> longest_recovery(const std::vector<interval>& intervals,
                                              const std::vector<std::string>& locks,
                                              const std::vector<heal_window>& heals, stamp bound);

// The shortest stretch of the history that shows the first overlap count_overlaps finds, as
// lines "lock [start, end] token" relative to the earliest start; "" when there is none.
std::string first_overlap_window(const std::vector<interval>& intervals);

}  // namespace dlock::fault
