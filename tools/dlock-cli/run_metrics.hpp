// SPDX-License-Identifier: Apache-2.0
// tools/dlock-cli/run_metrics.hpp: --metrics-file, the metrics of one `dlock` run for
// node_exporter's textfile collector.
//   run_metrics  installs a dlock::prometheus_metrics for the whole run, every series labelled
//                with the name the command works on (key="NAME") and the --metrics-label
//                pairs, so that several jobs' files in one textfile directory never share a
//                series; write() puts its counts and the run's own gauges (exit status, end
//                time, duration) in the file, atomically
//                and, once `run` holds the lock, a first file that says so (running, held
//                since), for an alert on a lock held past its expected time
//   note_lock_held  tells the run's metrics, if any, that the lock is held (run.cpp)
//   parse_metrics_labels  --metrics-label K=V into pairs; usage_error for a bad one
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dlock/prometheus.hpp"

namespace dlock::cli {

using metric_labels = std::vector<std::pair<std::string, std::string>>;

// Each "NAME=VALUE" as a pair. Throws usage_error for one without '=' or naming a label the
// command sets (key, command); the constructor below refuses what Prometheus would not take
// (prometheus_options::constant_labels: std::system_error, errc::invalid_argument).
metric_labels parse_metrics_labels(const std::vector<std::string>& given);

// Writes the metrics file of this run, if there is one, with the lock held since now.
void note_lock_held();

class run_metrics {
 public:
  // `command`: the subcommand's name; `name`: the lock's (or semaphore's, election's, latch's)
  // name, empty for a command without one (doctor, demo); `labels`: from
  // parse_metrics_labels. The run's only instance: note_lock_held() reaches it.
  run_metrics(std::string path, std::string command, const std::string& name,
              metric_labels labels);
  ~run_metrics();
  run_metrics(const run_metrics&) = delete;
  run_metrics& operator=(const run_metrics&) = delete;
  // Writes the file with the command ended; on failure says why on stderr and leaves the exit
  // status alone (the command's outcome matters more than its metrics).
  void write(int exit_status) const;
  // Writes the file with the command running and the lock held since now.
  void write_held() const;

 private:
  void write_file(const std::string& gauges) const;

  std::string path_, command_;
  std::shared_ptr<prometheus_metrics> metrics_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace dlock::cli
