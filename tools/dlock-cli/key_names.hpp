// SPDX-License-Identifier: Apache-2.0
// tools/dlock-cli/key_names.hpp: reading dlock's names back from the Redis keys that SCAN finds
// (`dlock list`), the inverse of dlock/key_layout.hpp.
//   key_role           which kind of dlock object a companion suffix belongs to
//   decode_companion   the name and suffix whose companion key a key is: E(name) + suffix undone
//   decode_copy_key    the name, copy and count of a cluster lock's copy key (lock_copy_key)
//   is_node_key        a node's own keys (dlock:node:identity ...), which belong to no name
//   glob_match         Redis's glob (SCAN MATCH, KEYS): *, ?, [a-z], [^a], \x
//   scan_match         a MATCH pattern for SCAN that every key of a name matching a glob matches
//   is_dlock_owner     a lock value that dlock writes: "<32 hex>.<round>", ".h<round>", ":settled"
//   parse_semaphore_mark  the limit and fairness in a semaphore's mark (semaphore_mark)
//   latch_count        the count a latch keeps in its key, if the value is one
//   json_string        a JSON string literal (always valid: stray bytes escaped)
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dlock::cli {

enum class key_role {
  lock,             // a lock's queue (:waiters, :waiter-info, :tickets)
  fence,            // :fence: a lock's counter, and a read-write lock's (one per name)
  holder_note,      // :holder, :waiter-notes: the CLI's notes of who holds and who waits
  semaphore,        // :sem:* (semaphore_options::fair = false)
  fair_semaphore,   // :fairsem:*
  read_write_lock,  // :rw:* (dlock::shared_mutex)
  election,         // :election: an election's record of its terms
  data_fence,       // :high-fence: dlock::fenced_set's guard of a data key, no lock
  latch_channel,    // :latch: a channel, never a key
};

struct companion {
  std::string name;         // the name whose key this is (for a copy's companion, the copy key)
  std::string_view suffix;  // ":fence", ":sem:holders" ...
  key_role role;
};

// The name whose companion key `key` is (E(name) + a known suffix), checked by encoding the name
// again with dlock/key_layout.hpp's functions; nullopt for any other key.
std::optional<companion> decode_companion(std::string_view key);

struct copy_key {
  std::string name;  // the lock's own key
  int copy = 0;      // 0 .. copies-1
  int copies = 0;    // lock_options::copies
};
// The lock whose copy `key` is ("{TTTT}dlock-copy:<i>/<K>:<name>", exactly as lock_copy_key makes
// it); nullopt for any other key.
std::optional<copy_key> decode_copy_key(std::string_view key);

// node_identity_key, node_quarantine_key, node_fence_floor_key.
bool is_node_key(std::string_view key);

// Whether `text` matches the glob `pattern` the way Redis matches keys (stringmatchlen, case
// sensitive): '*' any run, '?' one byte, "[abc]", "[a-z]", "[^a]" a class, '\' escapes.
bool glob_match(std::string_view pattern, std::string_view text);

// A SCAN MATCH pattern that each key of a name `name_pattern` matches (the name itself, its
// companions, its copies and theirs all contain the name): "*" + pattern + "*", or "*" when the
// pattern ends in a lone backslash. A superset: names are filtered with glob_match afterwards.
std::string scan_match(std::string_view name_pattern);

// "<32 lowercase hex>.<round>" or "<32 hex>.h<round>" (a handoff), either with ":settled"
// (lease::release_after): the owner values dlock's scripts write into a lock's key.
bool is_dlock_owner(std::string_view value);

struct semaphore_mark_info {
  long long limit = 0;
  bool fair = false;
};
// "dlock:semaphore <limit> fair|unfair" (semaphore_mark), alone or a solo holder's; nullopt
// for any other value.
std::optional<semaphore_mark_info> parse_semaphore_mark(std::string_view value);

// A solo holder's value, "<mark> <token> <permits>": the one holder of a read-write lock or
// semaphore granted by plain commands, kept in the name's key alone (name_mark.lua).
struct solo_holder {
  std::string_view mark, token;
  long long permits = 0;
};
std::optional<solo_holder> parse_solo(std::string_view value);
// The mark in a value: a solo holder's, or the value itself.
std::string_view mark_part(std::string_view value);

// A latch's count: decimal digits without a sign or leading zeros, at most 2^53 (latch.lua's
// counts). Any counter of another program looks the same.
std::optional<long long> latch_count(std::string_view value);

// `s` as a JSON string, quoted and escaped.
std::string json_string(std::string_view s);

}  // namespace dlock::cli
