// SPDX-License-Identifier: Apache-2.0
#include "fault/history.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>

namespace dlock::fault {

stamp now_stamp() { return real_clock(CLOCK_MONOTONIC); }

stamp real_clock(clockid_t id) {
  // The system call, not clock_gettime(): a worker under libfaketime sees a moved clock, but
  // its history must be stamped in the machine's real time.
  timespec now{};
  ::syscall(SYS_clock_gettime, id, &now);
  return static_cast<stamp>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

void report::merge(const report& other) {
  intervals.insert(intervals.end(), other.intervals.begin(), other.intervals.end());
  writes.insert(writes.end(), other.writes.begin(), other.writes.end());
  for (const auto& [name, value] : other.counters) counters[name] += value;
}

// One record per line; names never contain spaces (the workers choose them).
//   I <lock> <limit> <start> <end> <token> <weight>
//   W <resource> <token> <sent> <answered> <accepted>
//   C <name> <value>
bool report::save(const std::string& path) const {
  std::ofstream out(path + ".tmp");
  for (const auto& i : intervals) {
    out << "I " << i.lock << ' ' << i.limit << ' ' << i.start << ' ' << i.end << ' ' << i.token
        << ' ' << i.weight << '\n';
  }
  for (const auto& w : writes) {
    out << "W " << w.resource << ' ' << w.token << ' ' << w.sent << ' ' << w.answered << ' '
        << (w.accepted ? 1 : 0) << '\n';
  }
  for (const auto& [name, value] : counters) out << "C " << name << ' ' << value << '\n';
  out.close();
  if (!out) return false;
  // Renamed into place, so a reader never sees half a report.
  return std::rename((path + ".tmp").c_str(), path.c_str()) == 0;
}

bool report::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    char kind = 0;
    fields >> kind;
    if (kind == 'I') {
      interval i;
      fields >> i.lock >> i.limit >> i.start >> i.end >> i.token >> i.weight;
      intervals.push_back(i);
    } else if (kind == 'W') {
      write_record w;
      int accepted = 0;
      fields >> w.resource >> w.token >> w.sent >> w.answered >> accepted;
      w.accepted = accepted != 0;
      writes.push_back(w);
    } else if (kind == 'C') {
      std::string name;
      long long value = 0;
      fields >> name >> value;
      counters[name] += value;
    }
  }
  return true;
}

std::map<std::string, std::size_t> count_overlaps_by_lock(const std::vector<interval>& intervals) {
  std::map<std::string, std::vector<const interval*>> by_lock;
  for (const auto& i : intervals) by_lock[i.lock].push_back(&i);
  std::map<std::string, std::size_t> out;
  for (auto& [lock, list] : by_lock) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->start < b->start; });
    // The intervals begun so far that are still open: end and weight.
    std::vector<std::pair<stamp, long long>> open;
    std::size_t overlaps = 0;
    for (const interval* i : list) {
      open.erase(std::remove_if(open.begin(), open.end(),
                                [&](const auto& o) { return o.first <= i->start; }),
                 open.end());
      long long held = 0;
      for (const auto& o : open) held += o.second;
      if (held + i->weight > i->limit) ++overlaps;
      open.emplace_back(i->end, i->weight);
    }
    out[lock] = overlaps;
  }
  return out;
}

std::size_t count_overlaps(const std::vector<interval>& intervals) {
  std::size_t total = 0;
  for (const auto& [lock, n] : count_overlaps_by_lock(intervals)) total += n;
  return total;
}

fence_audit check_writes(const std::vector<write_record>& writes) {
  fence_audit audit;
  std::map<std::string, std::vector<const write_record*>> accepted;
  for (const auto& w : writes) {
    if (w.accepted) {
      ++audit.accepted;
      accepted[w.resource].push_back(&w);
    } else {
      ++audit.rejected;
    }
  }
  for (auto& [resource, list] : accepted) {
    // By answer time, with the running maximum token: the highest token surely accepted before time
    // t is the prefix maximum over answers before t.
    std::vector<const write_record*> by_answer = list;
    std::sort(by_answer.begin(), by_answer.end(),
              [](auto* a, auto* b) { return a->answered < b->answered; });
    std::vector<stamp> answered;
    std::vector<std::uint64_t> highest;
    for (const auto* w : by_answer) {
      answered.push_back(w->answered);
      highest.push_back(std::max(highest.empty() ? 0 : highest.back(), w->token));
    }
    for (const auto* w : list) {
      auto n = std::lower_bound(answered.begin(), answered.end(), w->sent) - answered.begin();
      if (n > 0 && highest[static_cast<std::size_t>(n - 1)] > w->token) ++audit.wrongly_accepted;
    }
  }
  return audit;
}

std::map<std::string, stamp> longest_recovery(const std::vector<interval>& intervals,
                                              const std::vector<std::string>& locks,
                                              const std::vector<heal_window>& heals, stamp bound) {
  std::map<std::string, std::vector<const interval*>> by_lock;
  for (const auto& i : intervals) by_lock[i.lock].push_back(&i);
  std::map<std::string, stamp> out;
  for (const auto& lock : locks) {
    const auto& list = by_lock[lock];
    stamp longest = 0;
    for (const auto& w : heals) {
      stamp next = -1;
      for (const interval* i : list) {
        if (i->start <= w.healed && i->end >= w.healed) {
          next = 0;  // held across the heal
          break;
        }
        if (i->start >= w.healed && i->start < w.next_fault &&
            (next < 0 || i->start - w.healed < next)) {
          next = i->start - w.healed;
        }
      }
      if (next >= 0) {
        longest = std::max(longest, next);
      } else if (w.next_fault - w.healed >= bound) {
        longest = -1;  // a whole bound passed without a holding
        break;
      }
    }
    out[lock] = longest;
  }
  return out;
}

std::string first_overlap_window(const std::vector<interval>& intervals) {
  std::map<std::string, std::vector<const interval*>> by_lock;
  for (const auto& i : intervals) by_lock[i.lock].push_back(&i);
  for (auto& [lock, list] : by_lock) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->start < b->start; });
    std::vector<const interval*> open;
    for (const interval* i : list) {
      open.erase(std::remove_if(open.begin(), open.end(),
                                [&](const interval* o) { return o->end <= i->start; }),
                 open.end());
      long long held = 0;
      for (const auto* o : open) held += o->weight;
      if (held + i->weight <= i->limit) {
        open.push_back(i);
        continue;
      }
      // The holdings still believed held when i began, and i: nothing else is needed to see it.
      open.push_back(i);
      stamp origin = open.front()->start;
      for (const auto* o : open) origin = std::min(origin, o->start);
      std::ostringstream text;
      for (const auto* o : open) {
        text << lock << " [" << (o->start - origin) / 1000 << " us, " << (o->end - origin) / 1000
             << " us] token " << o->token << " weight " << o->weight << "/" << o->limit << "\n";
      }
      return text.str();
    }
  }
  return {};
}

}  // namespace dlock::fault
