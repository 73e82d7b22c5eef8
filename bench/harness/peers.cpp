// SPDX-License-Identifier: Apache-2.0
// The peers run in node, one process per scenario, against the same servers as dlock and in
// the same run. The script prints one JSON object; this file turns it into a row and adds
// the commands per operation measured on the servers around the run (node's own connection
// set-up, INFO for ioredis's ready check, is administration and is not counted).
#include "harness/peers.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "dlock/mutex.hpp"

namespace dlock::bench {

peers find_peers(const std::string& dir) {
  peers p;
  p.dir = dir;
  namespace fs = std::filesystem;
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    p.why_not = "node is not installed";
  } else if (!fs::exists(fs::path(dir) / "node_modules" / "redlock") ||
             !fs::exists(fs::path(dir) / "node_modules" / "redis-semaphore") ||
             !fs::exists(fs::path(dir) / "node_modules" / "ioredis")) {
    p.why_not = "npm packages missing: run `npm ci` in " + dir + " (make bench does)";
  } else {
    p.usable = true;
  }
  return p;
}

bool parse_flat_json(const std::string& text, std::map<std::string, std::string>& strings,
                     std::map<std::string, double>& numbers) {
  std::size_t i = text.find('{');
  if (i == std::string::npos) return false;
  auto skip = [&] { while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i; };
  auto read_string = [&](std::string& out) {
    if (text[i] != '"') return false;
    for (++i; i < text.size() && text[i] != '"'; ++i) {
      if (text[i] == '\\' && i + 1 < text.size()) ++i;
      out += text[i];
    }
    ++i;
    return true;
  };
  ++i;
  for (;;) {
    skip();
    if (i >= text.size()) return false;
    if (text[i] == '}') return true;
    if (text[i] == ',') { ++i; continue; }
    std::string key;
    if (!read_string(key)) return false;
    skip();
    if (i >= text.size() || text[i] != ':') return false;
    ++i;
    skip();
    if (i < text.size() && text[i] == '"') {
      std::string value;
      read_string(value);
      strings[key] = value;
    } else {
      std::size_t end = text.find_first_of(",}", i);
      std::string value = text.substr(i, end - i);
      while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
      if (value == "null") {
        numbers[key] = std::nan("");
      } else {
        try { numbers[key] = std::stod(value); } catch (const std::exception&) { return false; }
      }
      i = end;
    }
  }
}

std::optional<row> run_peer(const peers& p, const peer_scenario& s,
                            const std::vector<unsigned short>& ports, std::vector<client>& nodes,
                            const timing& t, std::string& error) {
  std::ostringstream port_list;
  for (std::size_t i = 0; i < ports.size(); ++i) port_list << (i ? "," : "") << ports[i];
  std::ostringstream cmd;
  cmd << "cd '" << p.dir << "' && timeout 120 node peer_bench.cjs"
      << " --lib " << s.library << " --scenario " << s.scenario << " --ports " << port_list.str()
      << " --concurrency " << s.concurrency << " --warm-ms " << t.warm.count() << " --measure-ms "
      << t.measure.count() << " --hold-ms " << t.hold.count() << " --retry-ms " << s.retry_ms << " --limit " << s.limit
      << " --key-prefix peer:" << ::getpid() << ":";

  auto before = commandstats(nodes);
  FILE* pipe = ::popen(cmd.str().c_str(), "r");
  if (pipe == nullptr) {
    error = "cannot start node";
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  int status = ::pclose(pipe);
  auto after = commandstats(nodes);
  if (status != 0) {
    error = "node exited with status " + std::to_string(status) + (out.empty() ? "" : ": " + out);
    return std::nullopt;
  }
  std::map<std::string, std::string> strings;
  std::map<std::string, double> numbers;
  if (!parse_flat_json(out, strings, numbers)) {
    error = "unreadable output: " + out;
    return std::nullopt;
  }
  row r{s.scenario, s.library, strings["variant"], static_cast<int>(ports.size()), s.concurrency,
        {}, strings["version"]};
  for (const auto& [k, v] : numbers) {
    if (k != "operations_total") r.figures[k] = v;
  }
  double ops = numbers.count("operations_total") ? numbers["operations_total"] : 0;
  add_server_figures(r, before, after, s.library, ops);
  return r;
}

std::optional<row> run_behind_foreign_holder(const peers& p, unsigned short port, client node,
                                             const lock_options& options,
                                             const std::string& variant, const timing& t,
                                             std::string& error) {
  std::string prefix = "peer:" + std::to_string(::getpid()) + ":";
  std::string out_file = std::filesystem::temp_directory_path() /
                         ("dlock-foreign-" + std::to_string(::getpid()) + ".txt");
  std::filesystem::remove(out_file);
  std::ostringstream cmd;
  cmd << "cd '" << p.dir << "' && timeout 120 node peer_bench.cjs --lib node-redlock"
      << " --scenario holder --ports " << port << " --concurrency 1 --measure-ms "
      << (t.warm + t.measure).count() << " --hold-ms 20 --retry-ms 2"
      << " --key-prefix " << prefix << " --out " << out_file;
  std::atomic<bool> holder_done{false};
  int status = -1;
  std::string printed;
  std::thread foreign([&] {
    if (FILE* pipe = ::popen(cmd.str().c_str(), "r")) {
      char buf[4096];
      while (std::fgets(buf, sizeof buf, pipe) != nullptr) printed += buf;
      status = ::pclose(pipe);
    }
    holder_done = true;
  });
  // One waiter: lock() while node-redlock holds the key; once held, tell node-redlock (INCR
  // <key>:taken), release, and stay away until node-redlock surely holds it again, so that the
  // next lock() again finds it held.
  struct acquisition {
    bench_clock::time_point asked, held;
  };
  std::vector<acquisition> got;
  mutex waiter{node, prefix + "foreign", options};
  while (!holder_done) {
    auto asked = bench_clock::now();
    std::error_code ec;
    auto held = waiter.acquire_until(asked + std::chrono::seconds(2), ec);
    if (!held) continue;
    got.push_back({asked, bench_clock::now()});
    node.exec({"INCR", prefix + "foreign:taken"}, ec);
    held.release();
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
  }
  foreign.join();
  if (status != 0) {
    error = "node exited with status " + std::to_string(status) + ": " + printed;
    return std::nullopt;
  }
  std::vector<bench_clock::time_point> releases;
  std::ifstream in(out_file);
  for (long long ns; in >> ns;) {
    releases.emplace_back(std::chrono::duration_cast<bench_clock::duration>(std::chrono::nanoseconds(ns)));
  }
  std::filesystem::remove(out_file);
  auto measured_from = releases.empty() ? bench_clock::time_point{} : releases.front() + t.warm;
  std::vector<double> after_release_ms;
  for (const auto& a : got) {
    // The last foreign release before the acquisition; it must have come while the waiter
    // was waiting (else the lock was free when asked: no sample).
    auto it = std::upper_bound(releases.begin(), releases.end(), a.held);
    if (it == releases.begin()) continue;
    auto released = *std::prev(it);
    if (released < a.asked || released < measured_from) continue;
    after_release_ms.push_back(std::chrono::duration<double, std::milli>(a.held - released).count());
  }
  auto stats = summarize(after_release_ms);
  row r{"foreign", "dlock", variant + ", behind node-redlock", 1, 1, {}, {}};
  r.figures["p50_ms"] = stats.p50_ms;
  r.figures["p99_ms"] = stats.p99_ms;
  r.figures["samples"] = static_cast<double>(stats.samples);
  r.figures["foreign_releases"] = static_cast<double>(releases.size());
  return r;
}

}  // namespace dlock::bench
