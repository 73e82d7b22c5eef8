// SPDX-License-Identifier: Apache-2.0
// dlock: a distributed flock(1) on Redis, built on the dlock library.
//   dlock [-r URL]... [--password-file F] [--tls-ca F ...] [--request-timeout D] [-v] COMMAND ...
//   run, acquire, release, extend, status, list, demo (see each file, and `dlock COMMAND --help`)
// main() parses, runs the one chosen command and turns what went wrong into an exit status.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "run_metrics.hpp"
#include "dlock/error.hpp"
#include "process.hpp"

namespace {

constexpr const char* footer = R"(Nodes: one URL is a single-instance lock, several (3, 5 ...) a Redlock over independent
masters. URLs come from -r (repeatable), else $DLOCK_REDIS (comma-separated), else
redis://127.0.0.1:6379. The password comes from --password-file or $DLOCK_PASSWORD, so it
need not appear in argv. rediss:// URLs speak TLS and always verify the server's certificate
(--tls-ca for a private CA, --tls-cert/--tls-key for mutual TLS).
redis-sentinel://s1:26379,s2:26379,s3:26379/mymaster is the master a majority of those
sentinels name, followed across failovers; the sentinels' own credentials, if they have any,
come from $DLOCK_SENTINEL_USER and $DLOCK_SENTINEL_PASSWORD.
redis-cluster://n1:7000,n2:7000 (or --cluster with -r seeds) is one Redis Cluster: each lock
lives on the master of its key's slot, found from the seeds and followed through MOVED/ASK.
Durations: seconds as for flock (60, 2.5), or with a unit: 500ms, 30s, 5m, 1h, 1d, 1m30s.

Exit status:
  CMD's own    run: CMD ran (128 + N when a signal N ended it)
  0            acquire/release/extend/status/latch succeeded; doctor found nothing to warn about
  1            doctor: warnings (one line each, with the fix); leader: nobody leads; latch set:
               it exists already; latch down/wait: there is no such latch; list: stopped at
               --limit or --max-keys (the list says so)
  64           usage error (bad option, duration, URL, TTL)
  65           the name is held as another kind: a semaphore (or one of another limit or
               fairness) where a lock was asked for, a lock where a semaphore or latch was
  69           no quorum of Redis nodes reachable, or they refused (auth, ACL, wrong type);
               status: could not tell whether KEY is held; list: a node or a name could not
               be read (the list is incomplete)
  70           internal error
  71           the lease was lost while CMD ran, or CMD's end was learned only past the
               lease's last safe moment, or the release found it gone; release/extend:
               TOKEN no longer holds KEY
  75           not acquired: held by another (-n, or -w ran out); latch wait: not open
               within -w; change with -E
  77           status, list: the nodes refused the credentials or the ACL user's rights
  128 + N      interrupted by signal N while waiting)";

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// Edits (insert, delete, replace) between a and b: how far a typo is from a subcommand.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A parse error, with where to look: the chosen subcommand's help, or for a word that is no
// subcommand but close to one, that one ("did you mean").
std::string parse_error_text(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  std::string text = one_line(e.what());
  auto chosen = app.get_subcommands();
  if (!chosen.empty()) return text + " (see dlock " + chosen.front()->get_name() + " --help)";
  for (int i = 1; i < argc; ++i) {
    std::string_view word = argv[i];
    if (word.empty() || word[0] == '-') continue;
    std::string best;
    std::size_t best_distance = 3;  // two edits at most: a typo, not another word
    for (const CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) {
      if (sub->get_group().empty()) continue;  // hidden (demo-worker)
      std::size_t d = edit_distance(word, sub->get_name());
      if (d > 0 && d < best_distance) {
        best = sub->get_name();
        best_distance = d;
      }
    }
    if (!best.empty()) {
      return "unknown command '" + std::string(word) + "': did you mean '" + best +
             "'? (see dlock --help)";
    }
  }
  return text + " (see dlock --help)";
}

// The name the chosen command works on (its KEY or NAME, in it or in its own subcommand: latch
// set NAME), or "" for one without (doctor, demo).
std::string name_argument(const CLI::App& app) {
  for (const char* positional : {"KEY", "NAME"}) {
    const CLI::Option* o = app.get_option_no_throw(positional);
    if (o && o->count() > 0) return o->as<std::string>();
  }
  for (const CLI::App* sub : app.get_subcommands()) {
    if (auto name = name_argument(*sub); !name.empty()) return name;
  }
  return {};
}

// Runs the chosen command and turns what it threw into an exit status.
int run_command(const dlock::cli::subcommand& c) {
  using namespace dlock::cli;
  try {
    return c.execute();
  } catch (const usage_error& e) {
    say("%s", one_line(e.what()).c_str());
    return exit_usage;
  } catch (const std::system_error& e) {
    say("%s", one_line(e.what()).c_str());
    if (e.code() == dlock::errc::invalid_argument) return exit_usage;
    return e.code().category() == dlock::category() ? exit_unavailable : exit_software;
  } catch (const std::exception& e) {
    say("internal error: %s", one_line(e.what()).c_str());
    return exit_software;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dlock::cli;
  remember_inherited_fds();
  take_environment_credentials();  // before any fork, and for as short a time as can be

  CLI::App app{"dlock: run commands under a distributed lock on Redis (a distributed flock)",
               "dlock"};
  app.footer(footer);
  app.set_version_flag("--version", "dlock " DLOCK_VERSION);
  app.require_subcommand(1);
  global_options g;
  app.add_option("-r,--redis", g.urls, "Redis node URL; repeat for a Redlock over N nodes")
      ->type_name("URL");
  app.add_flag("--cluster", g.cluster,
               "The URLs are seed nodes of one Redis Cluster: each key's lock lives on the "
               "master of its slot (same as one redis-cluster://h1:p1,h2:p2 URL)");
  app.add_option("--copies", g.copies,
                 "With a cluster: keep K copies of each lock (odd, 3 to 15) on K distinct "
                 "masters, taken by quorum, so that one master's failover leaves the holder a "
                 "quorum elsewhere")
      ->type_name("K");
  app.add_option("--password-file", g.password_file,
                 "Read the Redis password from this file (else $DLOCK_PASSWORD)")
      ->type_name("FILE");
  app.add_option("--user", g.user, "Redis ACL user name (else $DLOCK_USER)");
  app.add_option("--tls-ca", g.tls.ca_file,
                 "rediss://: trust the CAs in this PEM file (default: the system's store)")
      ->type_name("FILE");
  app.add_option("--tls-cert", g.tls.cert_file,
                 "rediss://: client certificate (chain) for mutual TLS, PEM")
      ->type_name("FILE");
  app.add_option("--tls-key", g.tls.key_file,
                 "rediss://: the client certificate's unencrypted key, PEM (default: --tls-cert)")
      ->type_name("FILE");
  app.add_option("--tls-server-name", g.tls.server_name,
                 "rediss://: the name the server's certificate must carry, if not the URL's host")
      ->type_name("NAME");
  duration_option(app, "--request-timeout", g.request_timeout,
                  "Deadline of each Redis request, and of connecting (default 1s); without -w, "
                  "a wait rides out a node outage for twice this");
  // flock's --timeout is the wait (-w): given here, before the subcommand, it is refused, not
  // taken for the request deadline that this option once was.
  app.add_option_function<std::string>(
         "--timeout",
         [](const std::string&) {
           throw CLI::ValidationError(
               "--timeout", "it is the wait limit of run and acquire (flock's -w/--timeout), given "
                            "after the subcommand (dlock run --timeout 60 NAME CMD); the "
                            "deadline of each Redis request is --request-timeout");
         })
      ->group("");
  duration_option(app, "--quarantine", g.quarantine,
                  "On connecting, keep a node that restarted without its data, was restored "
                  "from disk or was promoted from a replica out of every grant for this long "
                  "(at least the longest TTL in use; default 0: no check)");
  app.add_flag("--replication-guard", g.replication_guard,
               "Count a grant or an extend only once a majority of the master's replicas "
               "acknowledged it (WAIT); fail it otherwise");
  app.add_flag("-v,--verbose", g.verbose,
               "Tell what happens on stderr (acquired, CMD started and ended, signals "
               "forwarded, released); a wait shows the holder without it (-q hides that)");
  std::string metrics_file;
  app.add_option("--metrics-file", metrics_file,
                 "At the end, write Prometheus metrics of this run to FILE, atomically (for "
                 "node_exporter's textfile collector: name it *.prom)")
      ->type_name("FILE");
  std::vector<std::string> metrics_labels;
  app.add_option("--metrics-label", metrics_labels,
                 "With --metrics-file: add this label to every series (repeatable), so that "
                 "jobs of one name on one host stay apart (the name is a label already)")
      ->type_name("NAME=VALUE")
      ->needs("--metrics-file");

  std::vector<subcommand> commands = add_all_commands(app, g);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    say("%s", parse_error_text(app, e, argc, argv).c_str());
    return exit_usage;
  }
  set_verbose(g.verbose);

  for (auto& c : commands) {
    if (!c.app->parsed()) continue;
    std::optional<run_metrics> metrics;  // set up as part of the command: its errors are its
    int status = run_command({c.app, [&] {
      if (!metrics_file.empty()) {
        metrics.emplace(metrics_file, c.app->get_name(), name_argument(*c.app),
                        parse_metrics_labels(metrics_labels));
      }
      return c.execute();
    }});
    if (metrics) metrics->write(status);
    return status;
  }
  return exit_usage;
}
