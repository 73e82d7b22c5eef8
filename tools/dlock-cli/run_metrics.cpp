#include "run_metrics.hpp"

#include <cstdio>

#include "cli.hpp"

namespace dlock::cli {

run_metrics::run_metrics(std::string path)
    : path_(std::move(path)),
      metrics_(std::make_shared<prometheus_metrics>(prometheus_options{.key_label = true})) {
  set_observer(metrics_);
}

void run_metrics::write(const std::string& command, int exit_status) const {
  using namespace std::chrono;
  double took = duration<double>(steady_clock::now() - started_).count();
  double now = duration<double>(system_clock::now().time_since_epoch()).count();
  // The command names are CLI11's, plain words: no label escaping needed.
  std::string labels = "{command=\"" + command + "\"}";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "# HELP dlock_cli_exit_status The exit status of the dlock command.\n"
                "# TYPE dlock_cli_exit_status gauge\n"
                "dlock_cli_exit_status%s %d\n"
                "# HELP dlock_cli_end_timestamp_seconds When the dlock command ended, in Unix time.\n"
                "# TYPE dlock_cli_end_timestamp_seconds gauge\n"
                "dlock_cli_end_timestamp_seconds%s %.3f\n"
                "# HELP dlock_cli_duration_seconds How long the dlock command ran.\n"
                "# TYPE dlock_cli_duration_seconds gauge\n"
                "dlock_cli_duration_seconds%s %.6f\n",
                labels.c_str(), exit_status, labels.c_str(), now, labels.c_str(), took);
  if (auto ec = metrics_->write_textfile(path_, buf)) {
    say("cannot write the metrics file %s: %s", path_.c_str(), ec.message().c_str());
  }
}

}  // namespace dlock::cli
