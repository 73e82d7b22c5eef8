// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/key_layout.hpp: the Redis keys dlock keeps for a lock or a semaphore name.
/// - hash_slot:          the Redis Cluster slot of a key
/// - lock_keys:          a lock's own key (its name, unchanged) and its companion keys
/// - lock_copy_key:      the keys of a cluster lock's copies (lock_options::copies)
/// - semaphore_keys:     a semaphore's keys, for either variant (it has no key of its own);
///                       shared_mutex_keys_for: a read-write lock's, the same set under :rw:
/// - high_fence_key:     where dlock::fenced_set keeps the highest token of a data key
/// - holder_key:         the `dlock` CLI's note of who holds a lock
/// - waiter_notes_key:   the `dlock` CLI's notes of who waits for a name
/// - election_record_key: a leader election's record of its terms (dlock::election)
/// - latch_channel:      the Pub/Sub channel on which a latch's opening is published
/// - is_companion_key:   whether a key is one of those companions (no lock may use one)
/// - node_identity_key, node_quarantine_key, node_fence_floor_key: a node's own keys
///                       (client_options::restart_quarantine)
///
/// Pure functions; thread-safe.
///
/// Every companion key is E(name) + a fixed suffix (":fence", ":waiters", ":sem:holders" ...).
/// No suffix contains '}', and E(name) always ends with '}':
/// ```text
///   E(name) = name + "{}"               when the name has a hash tag ("a{b}c" keeps its tag b);
///           = "{" + name + "}"          when it has none and contains no '}' (most names);
///           = "{" + F + "}" + name + "}}"  otherwise ("a}b", "a{}b", the empty name), where F is
///                                       the first four characters of '@'..'O' that hash to
///                                       the name's slot.
/// ```
/// This gives three properties:
/// - One slot. Every key of a lock or a semaphore hashes to its name's slot. One script can
///   then touch them all, and Redis Cluster accepts that script.
/// - No sharing. The last '}' of a companion key is the end of E(name), and E can be undone.
///   So two different (name, suffix) pairs never give the same key, across locks, semaphores,
///   fenced_set and the CLI. (Before this layout, "x" and "{x}" shared {x}:waiters, and
///   releasing "x" could hand "{x}" to its waiter.)
/// - Compatible. A plain name keeps the keys of earlier versions ({orders:42}:fence). A lock's
///   own key is its name, the way other Redis lock libraries store it. A name with a hash tag
///   gets new companions (orders:{42}{}:fence instead of orders:{42}:fence).
///
/// A lock name that is itself a companion key, such as "{x}:fence", is refused. So a lock's key
/// never equals a companion key either.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dlock/export.hpp"

namespace dlock {

/// The slot Redis Cluster gives `key`: CRC16 (XMODEM) mod 16384 of its hash tag, or of the
/// whole key when it has no tag. The hash tag is the text between the first '{' and the first
/// '}' after it, if that text is not empty.
DLOCK_EXPORT std::uint16_t hash_slot(std::string_view key) noexcept;

/// A lock's keys: its own key and its companions, which follow E(key).
struct lock_keys {
  std::string key{};        ///< the lock: value = owner "<acquisition id>.<round>", PX = TTL
  std::string fence{};      ///< the fencing counter; expires a TTL after it was set
  std::string waiters{};    ///< the waiter queue: acquisition id -> ticket
  std::string waiter_info{};  ///< acquisition id -> "<deadline ms> <wake channel>[ <ttl ms> <round>]"
  std::string tickets{};    ///< the queue's ticket counter
};

/// The keys of the lock whose key (key_prefix + name) is `key`.
DLOCK_EXPORT lock_keys lock_keys_for(std::string_view key);

/// A semaphore's keys, by variant (semaphore_options::fair); the suffixes follow E(key):
/// |             | unfair           | fair                                              |
/// |-------------|------------------|---------------------------------------------------|
/// | expiries    | :sem:holders     | :fairsem:timeouts (holders' and waiters' expiries) |
/// | owners      | (empty string)   | :fairsem:owners (the queue: token -> ticket)       |
/// | weights     | :sem:weights     | :fairsem:weights                                  |
/// | fence       | :sem:fence       | :fairsem:fence                                    |
/// | waiters     | :sem:waiters     | the owners key again                              |
/// | waiter_info | :sem:waiter-info | :fairsem:waiter-info                              |
/// | tickets     | :sem:tickets     | :fairsem:counter                                  |
struct semaphore_keys {
  std::string expiries{};   ///< sorted set: owner token -> expiry in server ms
  std::string owners{};     ///< sorted set: owner token -> ticket
  std::string weights{};    ///< hash: owner token -> permits, for entries of more than one
  std::string fence{};      ///< fencing counter, drawn at each grant; expires a TTL after set
  std::string waiters{};    ///< who a release wakes, in ticket order
  /// queued waiters: token -> "<deadline ms>[ <channel>[ woken]]", or for one that takes a
  /// handoff "<deadline ms> <channel> h<permits>:<ttl ms>:<attempt>:<limit>" (unfair; the
  /// fair variant's offer starts with "f")
  std::string waiter_info{};
  std::string tickets{};    ///< the counter that hands out the queue's tickets
  /// The name's own key, the one a mutex of the name holds. While readers or a writer hold a
  /// read-write lock, it holds read_write_lock_mark, so that one name is one lock: a mutex, a
  /// lock set or another client's SET NX finds it taken, and no reader or writer is granted
  /// while any other value holds it. While a semaphore's permits are held, it holds
  /// semaphore_mark(limit, fair): a lock of the name, or a semaphore that counts another limit
  /// or fairness, is refused (errc::wrong_type) instead of running beside it. A holder granted
  /// where nobody held or waited (the solo grant: plain commands, one node) is kept in this key
  /// alone, as "<mark> <token> <permits>", until a script that reads the holders adds it to
  /// the sets above and leaves the mark alone.
  std::string name{};
};

/// The keys of the semaphore whose key (key_prefix + name) is `key`.
DLOCK_EXPORT semaphore_keys semaphore_keys_for(std::string_view key, bool fair);

/// What a read-write lock's holders keep in the name's own key (semaphore_keys::name) while
/// they hold: a mutex, a lock set or another client finds the name taken.
inline constexpr std::string_view read_write_lock_mark = "dlock:read-write-lock";

/// What a semaphore's holders keep in the name's own key (semaphore_keys::name) while they
/// hold: this prefix, then "<limit> fair" or "<limit> unfair" (semaphore_mark).
inline constexpr std::string_view semaphore_mark_prefix = "dlock:semaphore ";

/// The mark of a semaphore of `limit` permits, fair or not: "dlock:semaphore 3 fair".
DLOCK_EXPORT std::string semaphore_mark(std::int64_t limit, bool fair);

/// The keys of the read-write lock (dlock::shared_mutex) whose key is `key`: a fair semaphore's
/// set under suffixes of its own (:rw:timeouts, :rw:owners, also the waiters, :rw:weights,
/// :rw:waiter-info, :rw:counter), the name's own key `key`, which its holders mark, and the
/// fencing counter of the mutex of that name (:fence), so that tokens grow across the modes
/// of one name.
DLOCK_EXPORT semaphore_keys shared_mutex_keys_for(std::string_view key);

/// Copy `copy` (0 .. copies-1) of the lock whose key is `key`, for a Redis Cluster lock kept
/// in `copies` copies (lock_options::copies): "{T}dlock-copy:<copy>/<copies>:" + key, where T is
/// a hash tag of a slot in the middle half of the copy-th of `copies` equal shares of the slot
/// space (the name's slot picks where in it). Masters that split the slots evenly, as
/// `redis-cli --cluster create` does, then serve one copy each. Each copy is a lock key of its
/// own, with its own companions; is_companion_key() refuses such keys as lock names.
DLOCK_EXPORT std::string lock_copy_key(std::string_view key, int copy, int copies);

/// Where dlock::fenced_set keeps the highest token that wrote `data_key`.
DLOCK_EXPORT std::string high_fence_key(std::string_view data_key);

/// The `dlock` CLI's advisory note of who holds the lock `lock_key`. Only the CLI writes it.
DLOCK_EXPORT std::string holder_key(std::string_view lock_key);

/// The `dlock` CLI's advisory notes of who waits for the lock, read-write lock or semaphore
/// `lock_key`: a hash, waiter id (wait_progress::waiter_id) -> a note like holder_key's. Only
/// the CLI writes it; each waiter removes its own field when its wait ends, and the hash
/// expires soon after the last waiter stopped renewing it.
DLOCK_EXPORT std::string waiter_notes_key(std::string_view lock_key);

/// The run_id of the Redis process that last checked the node's identity
/// (client_options::restart_quarantine); it never expires. One per node.
inline constexpr std::string_view node_identity_key = "dlock:node:identity";
/// While this key exists, the node grants no lock and no permit, to any client: it restarted,
/// lost its data or was promoted from a replica less than a quarantine ago. One per node;
/// acquire scripts read it (src/lua/acquire.lua and the semaphore scripts name it too).
inline constexpr std::string_view node_quarantine_key = "dlock:node:quarantine";
/// The lowest fencing token the node may draw next, for every counter: set from the server's
/// clock (ms x 1024) when the node's identity changed, because a promoted replica or a restore
/// from disk may hold counters that lag behind tokens already given. It never expires.
inline constexpr std::string_view node_fence_floor_key = "dlock:node:fence-floor";

/// The record of the leader election whose lock key is `lock_key` (dlock::election): a stream
/// of its last terms, entry id "<term>-0" when a leader is elected and "<term>-1" when it
/// resigns, fields owner, value and event. The same name is the Pub/Sub channel on which each
/// entry's id is published. It expires with the leader's lease.
DLOCK_EXPORT std::string election_record_key(std::string_view lock_key);

/// The Pub/Sub channel on which the latch whose key is `latch_key` (dlock::latch) announces
/// that it opened. Named like a companion key, so that it is in the latch's slot.
DLOCK_EXPORT std::string latch_channel(std::string_view latch_key);

/// True when `key` is a companion key of some name: a key that the functions above return,
/// other than a lock's own key (a copy's key from lock_copy_key counts as a companion), or one
/// of the node's own keys above. dlock::mutex refuses such a
/// lock key (errc::invalid_argument).
DLOCK_EXPORT bool is_companion_key(std::string_view key);

}  // namespace dlock
