// SPDX-License-Identifier: Apache-2.0
#include "run_metrics.hpp"

#include <cstdio>

#include "cli.hpp"

namespace dlock::cli {
namespace {

// The labels the command adds itself; the library refuses its own and malformed names.
constexpr const char* command_labels[] = {"key", "command"};

const run_metrics* current = nullptr;  // the run's, while it exists (one thread: the CLI's)

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

metric_labels parse_metrics_labels(const std::vector<std::string>& given) {
  metric_labels out;
  for (const auto& item : given) {
    auto eq = item.find('=');
    if (eq == std::string::npos) {
      throw usage_error("--metrics-label takes NAME=VALUE, not '" + item + "'");
    }
    std::string name = item.substr(0, eq);
    for (const char* own : command_labels) {
      if (name == own) {
        throw usage_error("--metrics-label " + name + "=...: dlock sets the " + name +
                          " label itself; pick another name");
      }
    }
    out.emplace_back(std::move(name), item.substr(eq + 1));
  }
  return out;
}

void note_lock_held() {
  if (current) current->write_held();
}

run_metrics::run_metrics(std::string path, std::string command, const std::string& name,
                         metric_labels labels)
    : path_(std::move(path)), command_(std::move(command)) {
  // With a name, every series carries it (the node series too, which have no key of their
  // own); without one, the per-key series carry theirs.
  prometheus_options options{.key_label = name.empty()};
  if (!name.empty()) options.constant_labels.emplace_back("key", name);
  for (auto& label : labels) options.constant_labels.push_back(std::move(label));
  metrics_ = std::make_shared<prometheus_metrics>(std::move(options));
  set_observer(metrics_);
  current = this;
}

run_metrics::~run_metrics() {
  if (current == this) current = nullptr;
}

void run_metrics::write(int exit_status) const {
  const metric_labels labels{{"command", command_}};
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  write_file(
      metrics_->gauge_text("dlock_cli_running", "1 while the dlock command runs, 0 once it ended.",
                           0, labels) +
      metrics_->gauge_text("dlock_cli_exit_status", "The exit status of the dlock command.",
                           exit_status, labels) +
      metrics_->gauge_text("dlock_cli_end_timestamp_seconds",
                           "When the dlock command ended, in Unix time.", unix_now(), labels) +
      metrics_->gauge_text("dlock_cli_duration_seconds", "How long the dlock command ran.", took,
                           labels));
}

void run_metrics::write_held() const {
  const metric_labels labels{{"command", command_}};
  write_file(
      metrics_->gauge_text("dlock_cli_running", "1 while the dlock command runs, 0 once it ended.",
                           1, labels) +
      metrics_->gauge_text("dlock_cli_held_since_timestamp_seconds",
                           "When the running dlock command took its lock, in Unix time.",
                           unix_now(), labels));
}

void run_metrics::write_file(const std::string& gauges) const {
  if (auto ec = metrics_->write_textfile(path_, gauges)) {
    say("cannot write the metrics file %s: %s", path_.c_str(), ec.message().c_str());
  }
}

}  // namespace dlock::cli
