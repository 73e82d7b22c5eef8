// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/prometheus.hpp: a ready observer that counts in Prometheus' terms.
/// - prometheus_options:  whether the metrics carry the key as a label
/// - prometheus_metrics:  counters and histograms of every dlock event, rendered in the text
///                        exposition format (version 0.0.4), or written to a file for
///                        node_exporter's textfile collector
///
/// Install it with set_observer; the metrics count from then on:
/// ```
/// auto metrics = std::make_shared<dlock::prometheus_metrics>();
/// dlock::set_observer(metrics);
/// // ... serve metrics->render() on /metrics, or metrics->write_textfile(path) now and then
/// ```
/// Thread-safe: events may arrive on any thread while render() runs on another.
///
/// The metrics (`primitive` is lock or semaphore; `result` is "ok" or an errc's name, see
/// to_string(errc); with key_label, the first ten also carry `key`; every series starts with
/// the constant_labels):
/// | metric                                         | what it counts                              |
/// |------------------------------------------------|---------------------------------------------|
/// | dlock_acquisitions_total{primitive,result}     | counter: acquisitions ended                 |
/// | dlock_acquire_attempts_total{primitive}        | counter: rounds they made                   |
/// | dlock_acquire_wait_seconds{primitive,result}   | histogram: call to outcome                  |
/// | dlock_handoffs_total{primitive}                | counter: granted by a handoff               |
/// | dlock_releases_total{primitive,result}         | counter: releases ended                     |
/// | dlock_hold_seconds{primitive}                  | histogram: grant to the release's outcome   |
/// | dlock_renewals_total{primitive,result}         | counter: keep-alive renewals                |
/// | dlock_renewal_lag_seconds{primitive}           | histogram: lateness of renewals             |
/// | dlock_renewal_duration_seconds{primitive}      | histogram: send to verdict                  |
/// | dlock_leases_lost_total{primitive,reason}      | counter: leases lost                        |
/// | dlock_node_requests_total{node,result}         | counter: requests per node                  |
/// | dlock_node_request_duration_seconds{node}      | histogram: submission to reply              |
/// | dlock_node_connection_events_total{node,event} | counter: connected, connect_failed, dropped |
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "dlock/export.hpp"
#include "dlock/observer.hpp"

namespace dlock {

/// How prometheus_metrics labels what it counts.
struct prometheus_options {
  /// Adds a `key` label to the per-lock metrics. Each key is then a series of its own, so
  /// leave it off when a process uses many keys (Prometheus keeps every series it ever saw);
  /// the `dlock` command turns it on, as one run uses one key.
  bool key_label = false;
  /// Labels every series carries first, as (name, value): for several processes whose files
  /// share one textfile directory (node_exporter refuses a series that two files both have).
  /// A name must match [a-zA-Z_][a-zA-Z0-9_]*, not start with "__", appear once, and not be
  /// one of dlock's own labels (primitive, result, reason, node, event, le; key with
  /// key_label): the constructor throws std::system_error(errc::invalid_argument) otherwise.
  std::vector<std::pair<std::string, std::string>> constant_labels{};
};

/// Counters and histograms of dlock's events; see the file comment for the list.
class DLOCK_EXPORT prometheus_metrics final : public observer {
 public:
  /// Starts with nothing counted.
  explicit prometheus_metrics(prometheus_options options = {});
  ~prometheus_metrics() override;
  prometheus_metrics(const prometheus_metrics&) = delete;
  prometheus_metrics& operator=(const prometheus_metrics&) = delete;

  /// Everything counted so far, in the text exposition format: # HELP and # TYPE lines, then
  /// one line per series; families and series in a stable (sorted) order. Label values are
  /// escaped, and bytes that are not UTF-8 become U+FFFD.
  std::string render() const;

  /// Writes render(), then `extra` (more lines in the same format, such as the caller's own
  /// gauges), to `path` the way node_exporter's textfile collector needs it: into a
  /// temporary file in the same directory, flushed to disk, then renamed over `path`, so that
  /// a scrape never reads half a file. Returns the error of the step that failed (and
  /// removes the temporary file); `path` is then unchanged.
  std::error_code write_textfile(const std::string& path, std::string_view extra = {}) const;

  /// The caller's own gauge in the same format, for write_textfile's `extra`: its # HELP and
  /// # TYPE lines and one series with the constant_labels, then `labels`, escaped as render()
  /// escapes them. `name` and the label names must be valid Prometheus names, and `labels`
  /// must not repeat a constant one (not checked).
  std::string gauge_text(std::string_view name, std::string_view help, double value,
                         const std::vector<std::pair<std::string, std::string>>& labels = {}) const;

  /// @name observer
  /// Count the events; called by dlock once installed with set_observer.
  /// @{
  void on_acquire(const acquire_event& e) override;
  void on_release(const release_event& e) override;
  void on_renewal(const renewal_event& e) override;
  void on_lease_lost(const lease_lost_event& e) override;
  void on_node_request(const node_request_event& e) override;
  void on_connection(const connection_event& e) override;
  /// @}

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace dlock
