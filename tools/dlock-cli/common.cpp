// SPDX-License-Identifier: Apache-2.0
// The plumbing every subcommand shares: where the nodes are, how to log in, what to print and
// which exit status an error becomes.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "cli.hpp"
#include "dlock/error.hpp"
#include "dlock/options.hpp"
#include "duration.hpp"
#include "lock_wait.hpp"

namespace dlock::cli {
namespace {

bool verbose_flag = false;

// The credentials dlock was given in its environment, taken out of it by
// take_environment_credentials() before anything is forked.
std::string env_password, env_user, env_sentinel_password, env_sentinel_user;
bool env_taken = false;

// Reads NAME from the environment, then wipes it. unsetenv() only drops the pointer from
// `environ`: the bytes stay in the process's initial environment block, which is what
// /proc/PID/environ shows to every process of the same user (CMD included, through its guard's
// and dlock's pids), and which a fork (the guard) copies. So the value is overwritten in place
// first.
std::string take_from_environment(const char* name) {
  char* value = std::getenv(name);
  if (!value) return {};
  std::string out = value;
  volatile char* p = value;  // not optimised away: the block outlives this function
  while (*p) *p++ = '\0';
  ::unsetenv(name);
  return out;
}

void vsay(const char* format, va_list args) {
  char buf[2048];
  std::vsnprintf(buf, sizeof buf, format, args);
  write_diagnostic(std::string("dlock: ") + buf + "\n");
}

// Where dlock's own lines go: stderr, but never so that a write blocks. A pipe, FIFO or
// terminal is opened anew through /proc/self/fd/2 with O_NONBLOCK: a description of our own,
// since setting O_NONBLOCK on the inherited one would change it for CMD and whoever else
// shares it. If that fails (a FIFO whose reader is gone, a socket), writes wait for nothing:
// poll says whether there is room now. A regular file never blocks for long.
struct diagnostic_target {
  int fd = STDERR_FILENO;
  bool must_poll = false;
};

diagnostic_target open_diagnostic_target() {
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0 || S_ISREG(st.st_mode)) return {};
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    int own = ::open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (own >= 0) return {own, false};
  }
  return {STDERR_FILENO, true};
}

// A URL for messages: the user:password part, if any, is masked.
std::string redact(const std::string& url) {
  auto scheme = url.find("://");
  auto at = url.rfind('@');
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) return url;
  return url.substr(0, scheme + 3) + "***" + url.substr(at);
}

// "URL,URL": a piece without a scheme continues the URL before it, whose own commas they were
// (redis-sentinel://s1,s2/mymaster).
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    auto first = item.find_first_not_of(" \t");
    auto last = item.find_last_not_of(" \t");
    item = first == std::string::npos ? std::string() : item.substr(first, last - first + 1);
    if (!out.empty() && !item.empty() && item.find("://") == std::string::npos &&
        out.back().find("://") != std::string::npos) {
      out.back() += "," + item;
      continue;
    }
    out.push_back(std::move(item));
  }
  if (!text.empty() && text.back() == ',') out.emplace_back();
  return out;
}

// --cluster: "redis://[user:pass@]h1:p1" and "redis://h2:p2" become
// "redis-cluster://[user:pass@]h1:p1,h2:p2" (the first URL's credentials), "rediss://" a
// "rediss-cluster://". A URL that is already redis[s]-cluster:// stays as it is.
std::string cluster_url(const std::vector<std::string>& urls) {
  if (urls.size() == 1 && urls[0].find("-cluster://") != std::string::npos) return urls[0];
  std::string scheme, seeds;
  for (const auto& u : urls) {
    auto sep = u.find("://");
    std::string this_scheme = sep == std::string::npos ? "" : u.substr(0, sep);
    if (this_scheme != "redis" && this_scheme != "rediss") {
      throw usage_error("--cluster takes redis:// or rediss:// seed URLs, not " + redact(u));
    }
    if (!scheme.empty() && this_scheme != scheme) {
      throw usage_error("--cluster: the seeds mix redis:// and rediss://");
    }
    scheme = this_scheme;
    std::string rest = u.substr(sep + 3);
    if (rest.find('/') != std::string::npos) {
      throw usage_error("--cluster: a cluster has only database 0: " + redact(u));
    }
    // The credentials of the first URL serve every node.
    if (!seeds.empty()) {
      if (auto at = rest.rfind('@'); at != std::string::npos) rest = rest.substr(at + 1);
    }
    seeds += (seeds.empty() ? "" : ",") + rest;
  }
  return scheme + "-cluster://" + seeds;
}

std::string read_password_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw usage_error("cannot read --password-file " + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty()) throw usage_error("--password-file " + path + " is empty");
  return text;
}

}  // namespace

std::vector<std::string> resolve_urls(const global_options& g) {
  std::vector<std::string> urls = g.urls;
  if (urls.empty()) {
    const char* env = std::getenv("DLOCK_REDIS");
    urls = env && *env ? split_commas(env) : std::vector<std::string>{default_url};
  }
  for (const auto& u : urls) {
    if (u.empty()) throw usage_error("empty Redis URL in -r/--redis or $DLOCK_REDIS");
  }
  return g.cluster ? std::vector<std::string>{cluster_url(urls)} : urls;
}

void take_environment_credentials() {
  if (env_taken) return;
  env_taken = true;
  env_password = take_from_environment("DLOCK_PASSWORD");
  env_user = take_from_environment("DLOCK_USER");
  env_sentinel_password = take_from_environment("DLOCK_SENTINEL_PASSWORD");
  env_sentinel_user = take_from_environment("DLOCK_SENTINEL_USER");
}

std::vector<client> make_clients(const global_options& g) {
  if (g.request_timeout < std::chrono::milliseconds(1)) {
    throw usage_error("--request-timeout must be at least 1ms");
  }
  client_options options;
  options.connect_timeout = g.request_timeout;
  options.request_timeout = g.request_timeout;
  options.restart_quarantine = g.quarantine;
  options.replication_guard.enabled = g.replication_guard;
  if (!g.password_file.empty()) {
    options.password = read_password_file(g.password_file);
  } else {
    take_environment_credentials();
    options.password = env_password;
  }
  options.user = g.user;
  if (options.user.empty()) {
    take_environment_credentials();
    options.user = env_user;
  }
  options.sentinel_password = env_sentinel_password;  // redis-sentinel:// URLs only
  options.sentinel_user = env_sentinel_user;
  // Checked here so that a typo is a usage error, not an unreachable node.
  for (const auto& [flag, path] : {std::pair{"--tls-ca", g.tls.ca_file},
                                   std::pair{"--tls-cert", g.tls.cert_file},
                                   std::pair{"--tls-key", g.tls.key_file}}) {
    if (!path.empty() && !std::ifstream(path)) {
      throw usage_error(std::string("cannot read ") + flag + " " + path);
    }
  }
  options.tls = g.tls;
  std::vector<client> nodes;
  std::set<std::string> seen;
  for (const auto& url : resolve_urls(g)) {
    std::error_code ec;
    endpoint where = parse_endpoint(url, ec);
    if (ec) {
      throw usage_error("bad Redis URL '" + redact(url) +
                        "': expected redis://[user:password@]host[:port][/db] or "
                        "unix:///path/to/redis.sock[?db=N]");
    }
    // One node listed twice would vote twice: a "quorum" that one crash can break.
    if (!seen.insert(where.to_string() + "/" + std::to_string(where.db)).second) {
      throw usage_error("Redis node " + where.to_string() + " is listed twice");
    }
    nodes.emplace_back(std::move(where), options);
  }
  return nodes;
}

namespace {

constexpr std::chrono::milliseconds kilo_seconds{1'000'000};

// Both duration_option overloads: `into` is a milliseconds or an optional of one.
template <class Target>
CLI::Option* add_duration_option(CLI::App& app, const std::string& name, Target& into,
                                 const std::string& help) {
  auto* opt = app.add_option_function<std::string>(
      name,
      [&into, name](const std::string& text) {
        auto d = parse_duration(text);
        if (!d) {
          throw CLI::ValidationError(
              name, "bad duration '" + text +
                        "': give seconds (60, 2.5) or a number with a unit (500ms, 30s, 5m, "
                        "1h, 1d), or several longest first (1m30s)");
        }
        // Bare numbers were milliseconds before they became seconds, as for flock: a large one
        // is likely an old script's, so what it now means is said (a unit silences it).
        if (text.find_first_not_of("0123456789") == std::string::npos && *d >= kilo_seconds) {
          say("%s %s means %s: a bare number is seconds, as for flock (write %sms for "
              "milliseconds, or %ss to silence this)",
              name.substr(0, name.find(',')).c_str(), text.c_str(), format_duration(*d).c_str(),
              text.c_str(), text.c_str());
        }
        into = *d;
      },
      help);
  return opt->type_name("DURATION");
}

}  // namespace

CLI::Option* duration_option(CLI::App& app, const std::string& name,
                             std::chrono::milliseconds& into, const std::string& help) {
  return add_duration_option(app, name, into, help);
}

CLI::Option* duration_option(CLI::App& app, const std::string& name,
                             std::optional<std::chrono::milliseconds>& into,
                             const std::string& help) {
  return add_duration_option(app, name, into, help);
}

void add_wait_flags(CLI::App& app, wait_flags& into) {
  auto* wait = duration_option(app, "-w,--wait,--timeout", into.wait,
                               "Give up (exit 75) if not acquired within this time, in seconds "
                               "as for flock (or 500ms, 5m ...); nodes that do not answer, or "
                               "replicas that do not confirm (--replication-guard), are "
                               "retried for as long (then exit 69). Default: wait as long as "
                               "it takes");
  auto* nb = app.add_flag("-n,--nb,--nonblock,--nonblocking", into.nonblock,
                          "Fail at once (exit 75) if the lock is held");
  wait->excludes(nb);
  app.add_option("-E,--conflict-exit-code", into.conflict_status,
                 "Exit status when not acquired (default 75)")
      ->check(CLI::Range(0, 255));
  app.add_flag("-q,--quiet", into.quiet,
               "Say nothing while waiting. Otherwise, once the lock is found held, stderr shows "
               "who holds it, for how long, and how long we have waited: on a terminal one line "
               "updated in place, else (cron, a log) one line each time the holder changes");
}

std::string with_remedy(std::error_code ec, std::string message) {
  if (ec == errc::auth_failed && (message.find("NOAUTH") != std::string::npos ||
                                  message.find("unauthenticated") != std::string::npos)) {
    return message + " (needs a password: put it in the URL, redis://:PASSWORD@host:port, or " +
           "in $DLOCK_PASSWORD or --password-file)";
  }
  if (ec == errc::auth_failed) {
    return message + " (the user or password was refused: check --user or $DLOCK_USER, and " +
           "the password in the URL, $DLOCK_PASSWORD or --password-file)";
  }
  if (ec == errc::no_permission) {
    return message + " (the ACL user lacks a permission dlock needs: docs/security.md, \"Least " +
           "privilege\", has the rule that grants it)";
  }
  return message;
}

std::string acquired_token(std::string_view printed) {
  auto first = printed.find_first_not_of(" \t\n");
  if (first == std::string_view::npos) return {};
  printed.remove_prefix(first);
  return std::string(printed.substr(0, printed.find_first_of(" \t\n")));
}

std::chrono::milliseconds outage_patience(const wait_flags& w, const global_options& g) {
  return w.wait ? longest_duration : 2 * g.request_timeout;
}

wait_options wait_options_for(const wait_flags& flags, const global_options& g,
                              std::size_t node_count, const std::string& key) {
  wait_options w;
  w.nonblock = flags.nonblock;
  w.wait = flags.wait;
  w.node_count = node_count;
  w.unavailable_grace = outage_patience(flags, g);
  w.show_status = !flags.quiet;
  w.replication_guard = g.replication_guard;
  w.key = key;
  return w;
}

void check_ttl(std::chrono::milliseconds ttl, const char* option) {
  if (ttl < min_ttl) {
    throw usage_error(std::string(option) + " must be at least " +
                      std::to_string(min_ttl.count()) +
                      "ms: each node gets TTL/10 to answer, and the validity is what is left of "
                      "the TTL after the round and the drift allowance (1% + 2ms)");
  }
  if (ttl > max_ttl) throw usage_error(std::string(option) + " must be at most 30 days");
}

void write_diagnostic(std::string_view text) {
  static const diagnostic_target target = open_diagnostic_target();
  if (target.must_poll) {
    pollfd p{target.fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) != 1 || (p.revents & POLLOUT) == 0) return;
  }
  // One write: a line of at most PIPE_BUF bytes goes into a pipe whole or not at all.
  (void)!::write(target.fd, text.data(), text.size());
}

void set_verbose(bool on) noexcept { verbose_flag = on; }
bool verbose() noexcept { return verbose_flag; }

void say(const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsay(format, args);
  va_end(args);
}

void say_verbose(const char* format, ...) {
  if (!verbose_flag) return;
  va_list args;
  va_start(args, format);
  vsay(format, args);
  va_end(args);
}

bool is_refusal(std::error_code ec) {
  return ec == errc::auth_failed || ec == errc::no_permission;
}

int exit_status_for(std::error_code ec, int conflict_status) {
  if (!ec) return exit_ok;
  if (ec == errc::invalid_argument) return exit_usage;
  if (ec == errc::wrong_type) return exit_data;
  if (ec == errc::not_acquired) return conflict_status;
  if (ec == errc::lease_lost || ec == errc::not_held) return exit_lease_lost;
  if (ec == errc::would_block_io_thread) return exit_software;
  return exit_unavailable;
}

std::string seconds_text(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

std::vector<subcommand> add_all_commands(CLI::App& parent, const global_options& g) {
  return {add_run_command(parent, g),    add_elect_command(parent, g),
          add_leader_command(parent, g), add_latch_command(parent, g),
          add_acquire_command(parent, g),
          add_release_command(parent, g), add_extend_command(parent, g),
          add_status_command(parent, g),  add_list_command(parent, g),
          add_doctor_command(parent, g),
          add_demo_command(parent, g),    add_demo_worker_command(parent, g)};
}

}  // namespace dlock::cli
