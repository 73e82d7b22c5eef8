// SPDX-License-Identifier: Apache-2.0
// tools/dlock-cli/lock_view.hpp: reading and annotating a lock or a semaphore, for the CLI.
//   exec_all       one command to every node at once; waits for all replies (each bounded by
//                  the client's request timeout)
//   holder_info    who holds a lock: host, pid, command, since when; kept in holder_key(K)
//                  ({K}:holder) by the CLI beside the lock (the library only names the key)
//   publish_holder / clear_holder  write and remove it
//   waiter_view    one entry of the waiter queue the library keeps for wake-ups and handoffs
//   lock_view      what the nodes say about a lock: token, PTTL, fence counter, holder, waiters
//   inspect_lock   reads a lock_view (GET, PTTL, GET of the fence and holder keys, and with
//                  read_queue::yes the queue, on every node)
//   semaphore_view / inspect_semaphore  the same for a semaphore on its one node: holders,
//                  permits in use, waiters, fence
// Holder info is advisory: it is shown only when its token matches the lock's current value.
// The views read only: nothing here runs a script or writes a key the library keeps (one
// pipeline of plain reads per node, so a script may run between two of them; the view is
// advisory). The notes are the CLI's own keys (clear_holder's script, lua/holder_note_clear.lua).
// How long a waiter has waited is not stored: its ticket carries no time and each poll renews
// its entry. Blocking calls; call them from the main thread, never from dlock's I/O thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <string>
#include <system_error>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/key_layout.hpp"

namespace dlock::cli {

struct node_reply {
  std::error_code ec;
  reply value;
};
std::vector<node_reply> exec_all(std::vector<client>& nodes, const command& cmd);
// cmds[i] to nodes[i], all at once.
std::vector<node_reply> exec_each(std::vector<client>& nodes, const std::vector<command>& cmds);

struct holder_info {
  std::string token;
  std::string host;
  long pid = 0;
  std::int64_t since_unix_ms = 0;
  std::string command;  // what runs under the lock, shortened for display
};
// A holder_info for this host and the given pid, since now.
holder_info make_holder_info(std::string token, long pid, std::string command);
std::string encode(const holder_info& h);
std::optional<holder_info> decode_holder(std::string_view text);
// "host pid 42 (`make deploy`) for 12.3 s"
std::string describe(const holder_info& h);

// SET holder_key(K) <info> PX ttl on every node. Waits for the replies unless `wait` is false
// (then the write is fire-and-forget: for refreshes while CMD runs).
void publish_holder(std::vector<client>& nodes, const std::string& key, const holder_info& h,
                    std::chrono::milliseconds ttl, bool wait = true);
// Deletes holder_key(K) on every node where it names `token` (one script per node), without
// waiting for the replies: what is sent next on the connection (the release) runs after it.
void clear_holder(std::vector<client>& nodes, const std::string& key, const std::string& token);

// How long a waiter's note outlives its last renewal (a waiter renews it about once a second).
inline constexpr std::chrono::milliseconds waiter_note_ttl{10'000};
// HSET waiter_notes_key(K) <w.token> <info>, PEXPIRE waiter_note_ttl, on every node, without
// waiting for the replies: a waiting command says who it is, as a holder does.
void publish_waiter(std::vector<client>& nodes, const std::string& key, const holder_info& w);
// HDEL of that field on every node (the wait is over); waits for the replies when `awaited`.
void clear_waiter(std::vector<client>& nodes, const std::string& key, const std::string& id,
                  bool awaited);

// Whether inspect_lock / inspect_semaphore read the waiter queue too (a status does; a waiting
// command that only names the holder does not, so that many waiters do not each read the
// whole queue every second).
enum class read_queue : bool { no, yes };

struct waiter_view {
  std::string id;             // lock: the acquisition id; semaphore: the owner token
  std::size_t nodes = 1;      // lock: how many nodes queue it
  long long expires_in_ms = 0;  // until its entry lapses unless it polls again (server clock)
  bool takes_handoff = false; // a release hands the lock, or the permits, straight to it
  bool woken = false;         // semaphore: a release woke it; its next attempt takes the permit
  std::optional<holder_info> who;  // a waiting `dlock` command's note (publish_waiter)
};

struct node_view {
  std::string node;                 // endpoint::to_string()
  std::error_code ec;               // set when the node did not answer
  std::string message;              // the error, for display
  std::optional<std::string> token; // the lock key's value, if any
  long long pttl_ms = -2;           // PTTL of the lock key (-2: no key)
  std::uint64_t fence = 0;          // the fencing counter on this node
  std::optional<holder_info> holder;
  std::size_t waiters = 0;          // live entries in its queue (with read_queue::yes)
};

struct lock_view {
  std::string key;
  std::vector<node_view> nodes;
  std::size_t quorum = 1;
  std::size_t reachable = 0;
  std::optional<std::string> token;  // the value held on the most nodes
  std::size_t holding = 0;           // how many nodes hold `token`
  long long pttl_ms = -2;            // when fewer than a quorum will still hold it, if held
  std::uint64_t fence = 0;           // the highest counter: the next holder gets more
  std::optional<holder_info> holder; // matching `token`
  // Live waiters in queue order (with read_queue::yes). Across several nodes, ordered by their
  // mean position in the nodes' queues, which agree unless a node missed some attempts.
  std::vector<waiter_view> waiters;

  bool answered() const noexcept { return reachable >= quorum; }
  bool held() const noexcept { return token && holding >= quorum; }
  // Whether the nodes that answered settle it: held, or free even if every silent node held
  // the lock for the owner seen most. Otherwise nobody can tell, and saying "free" would guess.
  bool known() const noexcept { return held() || holding + (nodes.size() - reachable) < quorum; }
  // The errors of the nodes that did not answer, "node: message; ...".
  std::string failures() const;
};

// With `copies` K > 1 and one (cluster) client, the lock kept in K copies (lock_options::copies):
// each copy is a node of the view, named "<master> (slot S) copy i".
lock_view inspect_lock(std::vector<client>& nodes, const std::string& key,
                       read_queue queue = read_queue::no, int copies = 0);

struct permit_holder {
  std::string token;           // the permit lease's value() ($DLOCK_TOKEN under `dlock run`)
  long long permits = 1;
  long long expires_in_ms = 0; // server clock (a holder past its expiry is gone: not listed)
};

// A semaphore's limit is not stored: the caller passes it when it knows it.
struct semaphore_view {
  std::string key;
  bool fair = false;
  std::string node;
  std::error_code ec;                // set when the node did not answer (or a key has the
  std::string message;               // wrong type); then the rest is empty
  std::vector<permit_holder> holders;  // the earliest expiry first
  long long in_use = 0;              // permits the live holders hold
  std::vector<waiter_view> waiters;  // live waiters in ticket order (with read_queue::yes)
  std::uint64_t fence = 0;           // the fencing counter: the next grant gets more

  bool answered() const noexcept { return !ec; }
};

semaphore_view inspect_semaphore(client& node, const std::string& key, bool fair,
                                 read_queue queue = read_queue::no);
// Another kind of dlock object kept under a lock's name (one Redis node): a read-write lock or
// a semaphore, whose holders mark the name's key (a semaphore of an earlier version does not).
// Its holders, when it has any; or that it could not be read.
struct other_kind {
  const char* kind;
  std::size_t holders;
  std::uint64_t fence = 0;  // its own fencing counter, which draws its holders' tokens (0: none)
  std::size_t waiters = 0;  // queued in its own line, not the lock's
  bool answered = true;     // false: its keys could not be read (the counts above mean nothing)
};
std::vector<other_kind> other_kinds_held(std::vector<client>& nodes, const std::string& key);

// The kind whose mark a name's key holds (key_layout.hpp): "a read-write lock", "a semaphore of
// 3 permits (fair)"; nothing for any other value (a lock's owner, another client's token).
std::optional<std::string> marked_kind(std::string_view value);
// What holds a name whose key holds `value`, for a message (name_kinds.lua's held_as): the
// marked kind, "a latch or a lock" for a count (hand-made locks write "1" too), else "a lock".
std::string held_as(std::string_view value);

// The same for the semaphore set kept under `keys` (shared_mutex_keys_for: a read-write lock,
// which is a fair semaphore's set).
semaphore_view inspect_semaphore(client& node, const std::string& key,
                                 const semaphore_keys& keys, bool fair,
                                 read_queue queue = read_queue::no);

}  // namespace dlock::cli
