// tools/dlock-cli/run_metrics.hpp: --metrics-file, the metrics of one `dlock` run for
// node_exporter's textfile collector.
//   run_metrics  installs a dlock::prometheus_metrics (with the key label: a run uses one key)
//                for the whole run; write() puts its counts and the run's own gauges (exit
//                status, end time, duration) in the file, atomically
// The gauges carry the command's name; a cron job that wants one file per job names the file
// after the job.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dlock/prometheus.hpp"

namespace dlock::cli {

class run_metrics {
 public:
  explicit run_metrics(std::string path);
  // Writes the file; on failure says why on stderr and leaves the exit status alone (the
  // command's outcome matters more than its metrics).
  void write(const std::string& command, int exit_status) const;

 private:
  std::string path_;
  std::shared_ptr<prometheus_metrics> metrics_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace dlock::cli
