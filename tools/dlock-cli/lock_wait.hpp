// SPDX-License-Identifier: Apache-2.0
// tools/dlock-cli/lock_wait.hpp: waiting for a lock the way flock(1) does, for `run`/`acquire`.
//   holder_status who holds what a wait waits for, as its status line says it
//   lock_holder_status / semaphore_holder_status  read it from the nodes
//   wait_options  -n / -w, -q, how long a node outage is waited out, how signals are watched
//   wait_options_for  the part of them the user's flags and the global options set
//   lock_calls    the library calls to make: one attempt (-n), or a wait under wait_control
//   wait_result   acquired (with the lease), conflict, unavailable, failed or interrupted
//   wait_for_lock one of those
// The waiting itself is the library's (mutex::acquire_until with a wait_control): the command
// queues like any library waiter and takes a release's handoff. This file adds what a command
// needs around it: a watcher thread that turns SIGINT/SIGTERM/SIGHUP into a stop request and
// shows the wait's status on stderr (who holds it, since when, how long we waited: on a terminal
// one live line rewritten in place, otherwise one line each time the holder or the state
// changes), the outage grace, and the exit classes: contention (another
// owner holds it: 75) versus unavailability (too few nodes answer for a quorum: 69), which
// dlock::classify_failure tells apart. Blocks the caller.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/error.hpp"
#include "dlock/lease.hpp"
#include "dlock/options.hpp"

namespace dlock::cli {

// What the wait status says about the holder(s). `who` identifies them and what is known of
// them (a lock's token and holder note, a semaphore's holder tokens): when it changes, a wait
// whose stderr is no terminal prints a new line. Empty when nothing holds it (a moment between
// two holders): nothing to report then.
struct holder_status {
  std::string who;
  std::string text;  // "host pid 42 (`make deploy`) for 12.3 s, expires in 8.1 s"
};
// Read from the nodes (lock_view.hpp). Blocking.
holder_status lock_holder_status(std::vector<client>& nodes, const std::string& key,
                                 int copies = 0);
holder_status semaphore_holder_status(client& node, const std::string& key, long long limit);

struct wait_options {
  bool nonblock = false;                           // one attempt only (-n)
  std::optional<std::chrono::milliseconds> wait;   // -w; nullopt: wait for as long as it takes
  std::chrono::milliseconds unavailable_grace{2000};  // node outage tolerated before giving up
  std::size_t node_count = 1;
  // Waits up to `d` for a stop signal or for `wake_fd` to become readable; returns the signal
  // number, or 0. Runs on a watcher thread. Empty: no signals are watched.
  std::function<int(std::chrono::milliseconds d, int wake_fd)> watch;
  // Show the wait's status on stderr once the first attempt failed (-q turns it off).
  bool show_status = true;
  // The current holder, for the status; looked up about once a second. Runs on the watcher
  // thread, so it may block. Empty: "another owner".
  std::function<holder_status()> describe_holder;
  // For a wrong_type whose node said nothing (the semaphore, read-write lock and lock set report
  // no node_results): "'NAME' is held as a semaphore of 3 permits (unfair), not as a lock",
  // read from the names' keys, or nothing when none holds another kind.
  std::function<std::optional<std::string>()> kind_found;
  // While the wait lasts, about once a second: tell who waits under `id`, the id it queues
  // under (wait_progress::waiter_id; publish_waiter); once it is over: take that back
  // (clear_waiter), awaited when `awaited` (dlock then exits: an unawaited write would be
  // dropped, and the note would stay until the hash expires). Empty: no note.
  std::function<void(const std::string& id)> note_waiter;
  std::function<void(const std::string& id, bool awaited)> clear_waiter_note;
  // --replication-guard: a grant the replicas did not confirm (replication_not_confirmed, or
  // its validity ran out while they were asked: lease_expired) is an outage to wait out.
  bool replication_guard = false;
  std::string key;  // for messages
};

struct global_options;  // cli.hpp
struct wait_flags;      // cli.hpp

// What `run` and `acquire` share of a wait for KEY on `node_count` nodes: -n, -w and -q, the
// outage patience and --replication-guard. The caller adds what only it knows (signals, the
// holder's description, waiter notes).
wait_options wait_options_for(const wait_flags& flags, const global_options& g,
                              std::size_t node_count, const std::string& key);

struct lock_calls {
  std::function<lease(std::error_code&, node_results*)> try_once;
  std::function<lease(std::chrono::steady_clock::time_point deadline, std::error_code&,
                      node_results*, const wait_control&)>
      wait_until;
};

enum class wait_outcome { acquired, conflict, unavailable, failed, interrupted };

struct wait_result {
  wait_outcome outcome = wait_outcome::failed;
  lease held;
  std::error_code ec;   // the last attempt's error
  std::string message;  // one line for the user (why not acquired)
  int signal = 0;       // for interrupted
};

wait_result wait_for_lock(const lock_calls& calls, const wait_options& options);

}  // namespace dlock::cli
