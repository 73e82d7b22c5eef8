// SPDX-License-Identifier: Apache-2.0
// prometheus_metrics (dlock/prometheus.hpp): counts events into labelled series under one
// mutex, and renders them in the text exposition format.
//
// A series is keyed by its rendered label set (`primitive="lock",result="ok"`), so that
// rendering is a walk over sorted maps. The lock is taken only when an event comes, and only
// while the process has this observer installed; an event is a few map lookups.
#include "dlock/prometheus.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <vector>

#include "dlock/error.hpp"

namespace dlock {
namespace {

using seconds = std::chrono::duration<double>;

// Upper bounds in seconds. Node requests on a LAN take well under a millisecond, renewals are
// late by milliseconds unless something stalls, and waits for a lock go up to minutes.
constexpr std::array<double, 14> request_bounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                1,      2.5};
constexpr std::array<double, 12> wait_bounds{0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
                                             1,     5,     10,   30,   60,  300};
constexpr std::array<double, 10> lag_bounds{0.001, 0.005, 0.01, 0.025, 0.05,
                                            0.1,   0.25,  0.5,  1,     5};
// Holds last from a critical section's milliseconds to a batch job's hours.
constexpr std::array<double, 13> hold_bounds{0.001, 0.01, 0.1, 0.5,  1,    5,    10,
                                             30,    60,   300, 900,  3600, 14400};

// A label value as the exposition format wants it: valid UTF-8 (an invalid byte becomes
// U+FFFD), with backslash, double quote and newline escaped.
void append_label_value(std::string& out, std::string_view v) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  std::size_t n = v.size();
  for (std::size_t i = 0; i < n;) {
    unsigned char c = p[i];
    if (c < 0x80) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // The length of a well-formed sequence starting with c, and the range of its second byte
    // (which rules out overlong forms, surrogates and code points above U+10FFFF).
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    bool ok = len != 0 && i + len <= n && p[i + 1] >= lo && p[i + 1] <= hi;
    for (std::size_t k = 2; ok && k < len; ++k) ok = p[i + k] >= 0x80 && p[i + k] <= 0xBF;
    if (!ok) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(v.data() + i, len);
    i += len;
  }
}

void append_number(std::string& out, double v) {
  char buf[32];
  auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  out.append(buf, end);
}

// Builds a series' label set: labels{}.add("primitive", "lock").add("result", "ok").text.
struct labels {
  std::string text;
  labels&& add(std::string_view name, std::string_view value) && {
    if (!text.empty()) text += ',';
    text += name;
    text += "=\"";
    append_label_value(text, value);
    text += '"';
    return std::move(*this);
  }
};

// "ok", an errc's name, or "<category>:<value>" for errors of other categories.
std::string result_label(std::error_code ec) {
  if (!ec) return "ok";
  if (ec.category() == category()) return std::string(to_string(static_cast<errc>(ec.value())));
  return std::string(ec.category().name()) + ":" + std::to_string(ec.value());
}

struct counter_family {
  const char* name;
  const char* help;
  std::map<std::string, std::uint64_t> series;

  void add(std::string label_set, std::uint64_t n = 1) { series[std::move(label_set)] += n; }

  void render(std::string& out) const {
    if (series.empty()) return;
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n";
    for (const auto& [label_set, value] : series) {
      out += name;
      out += '{' + label_set + "} " + std::to_string(value) + '\n';
    }
  }
};

struct histogram_family {
  struct series_state {
    std::vector<std::uint64_t> in_bucket;  // per bound, not cumulative; last: above all
    double sum = 0;
    std::uint64_t count = 0;
  };
  const char* name;
  const char* help;
  std::span<const double> bounds;
  std::map<std::string, series_state> series;

  void observe(std::string label_set, std::chrono::steady_clock::duration d) {
    double v = std::chrono::duration_cast<seconds>(d).count();
    auto& s = series[std::move(label_set)];
    if (s.in_bucket.empty()) s.in_bucket.assign(bounds.size() + 1, 0);
    std::size_t i = 0;
    while (i < bounds.size() && v > bounds[i]) ++i;
    ++s.in_bucket[i];
    s.sum += v;
    ++s.count;
  }

  void render(std::string& out) const {
    if (series.empty()) return;
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
    for (const auto& [label_set, s] : series) {
      std::string prefix = label_set.empty() ? "{" : "{" + label_set + ",";
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i <= bounds.size(); ++i) {
        cumulative += s.in_bucket[i];
        out += name;
        out += "_bucket" + prefix + "le=\"";
        if (i < bounds.size()) {
          append_number(out, bounds[i]);
        } else {
          out += "+Inf";
        }
        out += "\"} " + std::to_string(cumulative) + '\n';
      }
      out += name;
      out += "_sum{" + label_set + "} ";
      append_number(out, s.sum);
      out += '\n';
      out += name;
      out += "_count{" + label_set + "} " + std::to_string(s.count) + '\n';
    }
  }
};

}  // namespace

struct prometheus_metrics::impl {
  prometheus_options options;
  mutable std::mutex guard;
  counter_family acquisitions{"dlock_acquisitions_total",
                              "Acquisitions of a lock or of semaphore permits that ended, by result.",
                              {}};
  counter_family attempts{"dlock_acquire_attempts_total",
                          "Rounds made by the acquisitions that ended.", {}};
  histogram_family wait{"dlock_acquire_wait_seconds",
                        "Time from an acquisition's call to its outcome.", wait_bounds, {}};
  counter_family handoffs{"dlock_handoffs_total",
                          "Acquisitions granted by a release's handoff to a queued waiter.", {}};
  counter_family releases{"dlock_releases_total", "Releases that ended, by result.", {}};
  histogram_family hold{"dlock_hold_seconds",
                        "Time from a grant to its release's outcome: how long it was held.",
                        hold_bounds, {}};
  counter_family renewals{"dlock_renewals_total",
                          "Keep-alive renewals that ended, by result.", {}};
  histogram_family renewal_lag{"dlock_renewal_lag_seconds",
                               "How late keep-alive renewals went out after their planned time.",
                               lag_bounds, {}};
  histogram_family renewal_duration{"dlock_renewal_duration_seconds",
                                    "Time from sending a keep-alive renewal to its verdict.",
                                    request_bounds, {}};
  counter_family lost{"dlock_leases_lost_total", "Leases lost, by reason.", {}};
  counter_family requests{"dlock_node_requests_total", "Requests to a node that completed, by result.",
                          {}};
  histogram_family request_duration{"dlock_node_request_duration_seconds",
                                    "Time from submitting a request to a node to its completion.",
                                    request_bounds, {}};
  counter_family connections{"dlock_node_connection_events_total",
                             "Connections to a node made, failed and dropped.", {}};

  labels base;  // the constant labels, which every series starts with

  // The labels every per-key metric starts with.
  labels of(std::string_view key, primitive what) const {
    labels l = base;
    if (options.key_label) return std::move(l).add("key", key).add("primitive", to_string(what));
    return std::move(l).add("primitive", to_string(what));
  }
};

namespace {

// A constant label's name: Prometheus' syntax, not reserved, not one of dlock's own.
bool usable_label_name(std::string_view name, bool key_label) {
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (name.empty() || !letter(name[0]) || name.starts_with("__")) return false;
  for (char c : name) {
    if (!letter(c) && !(c >= '0' && c <= '9')) return false;
  }
  for (std::string_view own : {"primitive", "result", "reason", "node", "event", "le"}) {
    if (name == own) return false;
  }
  return !(key_label && name == "key");
}

}  // namespace

prometheus_metrics::prometheus_metrics(prometheus_options options) : impl_(std::make_unique<impl>()) {
  for (std::size_t i = 0; i < options.constant_labels.size(); ++i) {
    const auto& [name, value] = options.constant_labels[i];
    bool repeated = false;
    for (std::size_t j = 0; j < i; ++j) repeated |= options.constant_labels[j].first == name;
    if (!usable_label_name(name, options.key_label) || repeated) {
      throw std::system_error(make_error_code(errc::invalid_argument),
                              "prometheus_options::constant_labels: '" + name +
                                  (repeated ? "' is given twice"
                                            : "' is not a label name dlock can add"));
    }
    std::move(impl_->base).add(name, value);  // adds in place
  }
  impl_->options = std::move(options);
}

prometheus_metrics::~prometheus_metrics() = default;

void prometheus_metrics::on_acquire(const acquire_event& e) {
  std::string result = result_label(e.ec);
  std::lock_guard lock(impl_->guard);
  impl_->acquisitions.add(impl_->of(e.key, e.what).add("result", result).text);
  impl_->attempts.add(impl_->of(e.key, e.what).text, static_cast<std::uint64_t>(e.attempts));
  impl_->wait.observe(impl_->of(e.key, e.what).add("result", result).text, e.waited);
  if (e.handoff) impl_->handoffs.add(impl_->of(e.key, e.what).text);
}

void prometheus_metrics::on_release(const release_event& e) {
  std::lock_guard lock(impl_->guard);
  impl_->releases.add(impl_->of(e.key, e.what).add("result", result_label(e.ec)).text);
  if (e.held) impl_->hold.observe(impl_->of(e.key, e.what).text, *e.held);
}

void prometheus_metrics::on_renewal(const renewal_event& e) {
  std::lock_guard lock(impl_->guard);
  impl_->renewals.add(impl_->of(e.key, e.what).add("result", result_label(e.ec)).text);
  impl_->renewal_lag.observe(impl_->of(e.key, e.what).text, e.lag);
  impl_->renewal_duration.observe(impl_->of(e.key, e.what).text, e.took);
}

void prometheus_metrics::on_lease_lost(const lease_lost_event& e) {
  std::lock_guard lock(impl_->guard);
  impl_->lost.add(impl_->of(e.key, e.what).add("reason", result_label(e.reason)).text);
}

void prometheus_metrics::on_node_request(const node_request_event& e) {
  std::string node = labels{impl_->base}.add("node", e.node).text;
  std::string with_result = labels{node}.add("result", result_label(e.ec)).text;
  std::lock_guard lock(impl_->guard);
  impl_->requests.add(std::move(with_result));
  impl_->request_duration.observe(std::move(node), e.latency);
}

void prometheus_metrics::on_connection(const connection_event& e) {
  std::string label_set =
      labels{impl_->base}.add("node", e.node).add("event", to_string(e.what)).text;
  std::lock_guard lock(impl_->guard);
  impl_->connections.add(std::move(label_set));
}

std::string prometheus_metrics::render() const {
  std::string out;
  std::lock_guard lock(impl_->guard);
  impl_->acquisitions.render(out);
  impl_->attempts.render(out);
  impl_->wait.render(out);
  impl_->handoffs.render(out);
  impl_->releases.render(out);
  impl_->hold.render(out);
  impl_->renewals.render(out);
  impl_->renewal_lag.render(out);
  impl_->renewal_duration.render(out);
  impl_->lost.render(out);
  impl_->requests.render(out);
  impl_->request_duration.render(out);
  impl_->connections.render(out);
  return out;
}

std::string prometheus_metrics::gauge_text(
    std::string_view name, std::string_view help, double value,
    const std::vector<std::pair<std::string, std::string>>& more) const {
  labels l = impl_->base;
  for (const auto& [label, label_value] : more) std::move(l).add(label, label_value);
  std::string out = "# HELP ";
  out.append(name).append(" ");
  for (char c : help) {  // HELP text escapes backslash and newline
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out.append("\n# TYPE ").append(name).append(" gauge\n");
  out.append(name);
  if (!l.text.empty()) out += "{" + l.text + "}";
  out += ' ';
  append_number(out, value);
  out += '\n';
  return out;
}

std::error_code prometheus_metrics::write_textfile(const std::string& path,
                                                   std::string_view extra) const {
  std::string text = render();
  text += extra;
  if (!text.empty() && text.back() != '\n') text += '\n';
  // Beside the target, so that rename() stays within one file system; a name that does not
  // end in .prom, which the textfile collector skips.
  std::string temp = path + "." + std::to_string(::getpid()) + ".tmp";
  auto fail = [&](int err) {
    ::unlink(temp.c_str());
    return std::error_code(err, std::generic_category());
  };
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::error_code(errno, std::generic_category());
  std::size_t written = 0;
  while (written < text.size()) {
    ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return fail(err);
    }
    written += static_cast<std::size_t>(n);
  }
  int synced = ::fsync(fd) == 0 ? 0 : errno;
  int closed = ::close(fd) == 0 ? 0 : errno;
  if (synced || closed) return fail(synced ? synced : closed);
  if (::rename(temp.c_str(), path.c_str()) != 0) return fail(errno);
  return {};
}

}  // namespace dlock
