// SPDX-License-Identifier: Apache-2.0
// harness/report.hpp: what lock_bench writes.
//   add_ratios       every dlock and peer figure as a ratio to the ceiling of the same run
//   judge_targets    issue 8's targets, each as measured ratio + met/missed
//   write_json       bench/results/latest.json: the machine, the rows, the verdicts
//   markdown         the same as Markdown tables (bench/results/latest.md)
//   server_cost_markdown, user_driver_markdown  one of those tables alone (lock_bench's modes)
//   write_plot_data  whitespace-separated columns for bench/plot.gp (gnuplot)
#pragma once

#include <string>
#include <vector>

#include "harness/measure.hpp"

namespace dlock::bench {

struct run_info {
  std::string started;       // UTC, ISO 8601
  std::string cpu;           // /proc/cpuinfo model name
  int cores = 0;             // nproc
  double load_before = 0;    // 1-minute load average when the run began
  double load_after = 0;     // and when it ended (other people's work shows here)
  std::string redis_version;
  std::string command;       // how this run was started
  double measure_s = 0;
};

struct verdict {
  std::string target;     // the wording, short
  std::string measured;   // the figures and the ratio
  std::string status;     // "met", "missed", "n/a"
};

void add_ratios(std::vector<row>& rows);
std::vector<verdict> judge_targets(const std::vector<row>& rows);

void write_json(const std::string& path, const run_info& info, const std::vector<row>& rows,
                const std::vector<verdict>& verdicts);
std::string markdown(const run_info& info, const std::vector<row>& rows,
                     const std::vector<verdict>& verdicts);
std::string server_cost_markdown(const std::vector<row>& rows);
std::string user_driver_markdown(const std::vector<row>& rows);
void write_plot_data(const std::string& dir, const std::vector<row>& rows);

}  // namespace dlock::bench
