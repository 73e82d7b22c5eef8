#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints docs/guarantees.md's nemesis matrix from the lines that nemesis_test appended to
fault-results.log (next to the test binary): one row per nemesis, one column per workload, each
cell "holdings / overlaps / longest recovery after a heal", summed over the last K runs of the
row (--last K; default every run in the file), then the totals of each row.

    tests/fault/nemesis_table.py build/debug/tests/fault/fault-results.log --last 2
"""
import argparse
import collections
import re

LINE = re.compile(
    r"nemesis (?P<name>\S+): seed \d+(?: heals (?P<heals>\d+) recovery(?P<recovery>.*?))? \| "
    r"fault \S+: acquisitions=(?P<acq>\d+) \[(?P<acq_by>.*?)\] overlaps=(?P<ov>\d+) "
    r"\[(?P<ov_by>.*?)\] stale_rejected=(?P<refused>\d+) wrong_accepted=(?P<wrong>\d+) "
    r"writes_accepted=(?P<writes>\d+) lost=(?P<lost>\d+).*? lost_updates=(?P<lost_updates>\d+)")
WORKLOADS = [("single", "lock, 1 node"), ("redlock", "Redlock"), ("sem", "semaphore"),
             ("fair", "fair semaphore"), ("rw", "read-write lock"), ("set", "lock set"),
             ("elect", "election"), ("cli", "`dlock run`")]


def pairs(text):
    """"a=3 b=140ms c=none" -> {a: 3, b: 140, c: -1} (none: not held again after a heal)."""
    return {k: -1 if v == "none" else int(v.removesuffix("ms"))
            for k, v in (kv.split("=") for kv in text.split())}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("--last", type=int, default=0)
    args = parser.parse_args()
    runs = collections.OrderedDict()
    for line in open(args.log):
        m = LINE.match(line)
        if m:
            runs.setdefault(m["name"], []).append(m)
    header = ["nemesis", "runs"] + [title for _, title in WORKLOADS] + [
        "fenced writes accepted", "stale writes accepted", "lost updates", "stale writes refused",
        "leases lost", "heals"]
    print("| " + " | ".join(header) + " |")
    print("|---|---:|" + "---:|" * (len(header) - 2))
    for name, found in runs.items():
        found = found[-args.last:] if args.last else found
        holdings, overlaps = collections.Counter(), collections.Counter()
        recovery = {}
        total = collections.Counter()
        for m in found:
            holdings.update(pairs(m["acq_by"]))
            overlaps.update(pairs(m["ov_by"]))
            for lock, took in pairs(m["recovery"] or "").items():
                worst = recovery.get(lock, 0)
                recovery[lock] = -1 if -1 in (worst, took) else max(worst, took)
            for key in ("writes", "wrong", "lost_updates", "refused", "lost", "heals"):
                total[key] += int(m[key] or 0)
        cells = []
        for lock, _ in WORKLOADS:
            if lock not in holdings:
                cells.append("-")
                continue
            took = recovery.get(lock)
            shown = ("-" if took is None else "**never**" if took < 0 else
                     f"{took} ms" if took < 1000 else f"{took / 1000:.1f} s")
            over = overlaps[lock]
            cells.append(f"{holdings[lock]:,} / {'**%d**' % over if over else 0} / {shown}")
        judged = any(m["heals"] for m in found)
        print(f"| `{name}` | {len(found)} | " + " | ".join(cells) +
              f" | {total['writes']:,} | {total['wrong']} | {total['lost_updates']} | "
              f"{total['refused']:,} | {total['lost']} | "
              f"{total['heals'] if judged else '-'} |")


if __name__ == "__main__":
    main()
