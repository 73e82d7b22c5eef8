// SPDX-License-Identifier: Apache-2.0
// tools/dlock-cli/cli.hpp: what the subcommands of `dlock` share.
//   exit_status       the documented exit codes (sysexits.h names where one fits)
//   usage_error       bad input found after parsing; main() prints it on one line, exits 64
//   global_options    -r/--redis, credentials, --request-timeout, -v, resolved by make_clients()
//   subcommand        one subcommand: its CLI11 app and the function that runs it
//   add_*_command     one per subcommand file (run.cpp, acquire.cpp, ...)
//   say / say_verbose one "dlock: ..." line on stderr
//   wait_flags        -w / -n / -E / -q of `run` and `acquire`, added by add_wait_flags
//   outage_patience   how long a wait rides out nodes that do not answer
//   duration_option   a CLI11 option that takes 60 (seconds), 2.5, 500ms, 5m, 1h, 1m30s
// Single-threaded by design: the CLI parses, then runs one command on the main thread.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dlock/client.hpp"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace dlock::cli {

enum exit_status : int {
  exit_ok = 0,
  exit_usage = 64,        // EX_USAGE: bad option, duration, URL, TTL ...
  exit_data = 65,         // EX_DATAERR: the name is held as another kind (a semaphore, not a lock)
  exit_unavailable = 69,  // EX_UNAVAILABLE: no quorum of Redis nodes reachable (or they refuse)
  exit_software = 70,     // EX_SOFTWARE: an internal error of dlock
  exit_lease_lost = 71,   // the lease was lost while CMD ran (or a token no longer holds the lock)
  exit_conflict = 75,     // EX_TEMPFAIL: not acquired within the wait (-n, -w); see -E
  exit_no_permission = 77,  // EX_NOPERM: status: the nodes refused the credentials or the ACL
};

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct global_options {
  std::vector<std::string> urls;  // -r/--redis, else $DLOCK_REDIS (comma-separated), else default
  std::string password_file;      // --password-file; else $DLOCK_PASSWORD
  std::string user;               // --user; else $DLOCK_USER
  dlock::tls_options tls;         // --tls-ca, --tls-cert, --tls-key, --tls-server-name
  std::chrono::milliseconds request_timeout{1000};  // --request-timeout: connect and per request
  std::chrono::milliseconds quarantine{0};  // --quarantine: client_options::restart_quarantine
  bool replication_guard = false;           // --replication-guard: client_options::replication_guard
  bool cluster = false;  // --cluster: the URLs are seed nodes of one Redis Cluster
  int copies = 0;        // --copies: lock_options::copies (a cluster lock in K copies)
  bool verbose = false;
};

inline constexpr const char* default_url = "redis://127.0.0.1:6379";

// The URLs to use, after -r, $DLOCK_REDIS and the default; with --cluster, one
// redis[s]-cluster:// URL of them all. Throws usage_error for an empty list entry, and with
// --cluster for a URL that is not redis:// or rediss:// host:port (or mixes the two, or has a db).
std::vector<std::string> resolve_urls(const global_options& g);
// Takes $DLOCK_PASSWORD and $DLOCK_USER (and $DLOCK_SENTINEL_PASSWORD, $DLOCK_SENTINEL_USER,
// the sentinels' own) out of the environment (their bytes overwritten in
// place, so /proc/PID/environ no longer shows them, then unset) and keeps them for
// make_clients(). main() calls it first; later calls do nothing.
void take_environment_credentials();
// One client per URL, with the credentials and timeout applied. Throws usage_error for a bad URL
// or an unreadable password file. Starts no I/O.
std::vector<client> make_clients(const global_options& g);

struct subcommand {
  CLI::App* app;
  std::function<int()> execute;
};

subcommand add_run_command(CLI::App& parent, const global_options& g);
subcommand add_elect_command(CLI::App& parent, const global_options& g);   // run.cpp
subcommand add_leader_command(CLI::App& parent, const global_options& g);
subcommand add_latch_command(CLI::App& parent, const global_options& g);
subcommand add_acquire_command(CLI::App& parent, const global_options& g);
subcommand add_release_command(CLI::App& parent, const global_options& g);
subcommand add_extend_command(CLI::App& parent, const global_options& g);
subcommand add_status_command(CLI::App& parent, const global_options& g);
subcommand add_list_command(CLI::App& parent, const global_options& g);
subcommand add_demo_command(CLI::App& parent, const global_options& g);
subcommand add_demo_worker_command(CLI::App& parent, const global_options& g);
subcommand add_doctor_command(CLI::App& parent, const global_options& g);
// Every subcommand above, in the order `dlock --help` lists them.
std::vector<subcommand> add_all_commands(CLI::App& parent, const global_options& g);

// How long `run` and `acquire` wait for a held lock, and what they exit with when it stays held.
struct wait_flags {
  std::optional<std::chrono::milliseconds> wait;  // -w/--wait/--timeout; none: until acquired
  bool nonblock = false;                          // -n/--nb/--nonblock
  int conflict_status = exit_conflict;            // -E/--conflict-exit-code
  bool quiet = false;  // -q/--quiet: no status line while waiting
};
// Adds -w/--wait/--timeout, -n/--nb/--nonblock/--nonblocking (exclusive with -w),
// -E/--conflict-exit-code and -q/--quiet to `app`: flock's spellings.
void add_wait_flags(CLI::App& app, wait_flags& into);
// How long a wait goes on retrying while no quorum of nodes answers: with -w, all of it (the
// user's patience, then exit 69); without, twice --request-timeout, so that a job with no
// limit does not hang on a dead server.
std::chrono::milliseconds outage_patience(const wait_flags& w, const global_options& g);

// `--name DURATION` stored into `into`; a malformed value fails the parse (exit 64).
CLI::Option* duration_option(CLI::App& app, const std::string& name,
                             std::chrono::milliseconds& into, const std::string& help);
CLI::Option* duration_option(CLI::App& app, const std::string& name,
                             std::optional<std::chrono::milliseconds>& into,
                             const std::string& help);
// The shortest TTL the command takes. A lock round gives each node TTL/10 to answer (the
// library's node timeout), and the validity is the TTL less the round and the drift allowance
// (1 % + 2 ms). At 100 ms that is 10 ms per node and at least 87 ms of validity, renewed every
// 33 ms; below it a round trip that is slow for a moment (a loaded host, a remote node) no
// longer fits, and `--ttl 1` could never take the lock at all.
inline constexpr std::chrono::milliseconds min_ttl{100};
// `message` (a node's error text) with what to do about it, for the errors a user can fix:
// a missing or refused password, an ACL user without a permission. Others unchanged.
std::string with_remedy(std::error_code ec, std::string message);
// The token in what `dlock acquire` printed ("TOKEN FENCE"): its first word, so that
// `dlock release KEY "$(dlock acquire KEY)"` works. A token never holds a space.
std::string acquired_token(std::string_view printed);
// Throws usage_error unless min_ttl <= ttl <= dlock::max_ttl.
void check_ttl(std::chrono::milliseconds ttl, const char* option = "--ttl");

void set_verbose(bool on) noexcept;
bool verbose() noexcept;
// Writes `text` on stderr in one write that never blocks: what cannot be written at once (a
// reader that stalled, a terminal on hold) is dropped, so that a diagnostic never delays what
// dlock must do for the lease.
void write_diagnostic(std::string_view text);
// Prints "dlock: <message>\n" on stderr in one write (write_diagnostic).
void say(const char* format, ...) __attribute__((format(printf, 1, 2)));
// As say(), only with -v.
void say_verbose(const char* format, ...) __attribute__((format(printf, 1, 2)));

// The exit status for a failed lock operation: 64 for invalid_argument, 75 (or the override)
// for not_acquired, 71 for lease_lost / not_held, 69 for everything the nodes caused.
int exit_status_for(std::error_code ec, int conflict_status = exit_conflict);
// The node turned our credentials or our ACL user's rights down (status, list: exit 77, not 69).
bool is_refusal(std::error_code ec);

// A duration in seconds with one decimal, for progress lines ("4.2 s").
std::string seconds_text(std::chrono::steady_clock::duration d);

}  // namespace dlock::cli
