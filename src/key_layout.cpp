// SPDX-License-Identifier: Apache-2.0
// The key layout (see dlock/key_layout.hpp for its rules and why they hold).
//
// Why a name that has no hash tag but contains '}' gets a tag of its own in front. Appending
// anything to such a name cannot give every companion key the same slot. Without a '{', or when
// the first '{' is directly followed by '}' ("a{}b"), Redis hashes the whole key, suffix
// included. Only a tag decides the slot whatever follows, and a tag must start at the key's
// first '{'. So these names get "{F}" in front, where F hashes to the name's slot, and "}}" at
// the end. The end cannot be a single '}': a name that ends in '{' would then end in "{}",
// which is the form of a tagged name.
#include "dlock/key_layout.hpp"

#include "key_layout_internal.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <stdexcept>
#include <utility>
#include <vector>

namespace dlock {
namespace {

// Every companion suffix, each written once; none may contain '}'.
constexpr std::string_view fence_suffix = ":fence", waiters_suffix = ":waiters",
                           waiter_info_suffix = ":waiter-info", tickets_suffix = ":tickets";
constexpr std::string_view holder_suffix = ":holder", waiter_notes_suffix = ":waiter-notes",
                           high_fence_suffix = ":high-fence",
                           election_suffix = ":election", latch_suffix = ":latch";
constexpr std::string_view sem_holders = ":sem:holders", sem_weights = ":sem:weights",
                           sem_fence = ":sem:fence", sem_waiters = ":sem:waiters",
                           sem_waiter_info = ":sem:waiter-info", sem_tickets = ":sem:tickets";
// The fair ticket counter keeps the name it had when the tickets were also the fence.
constexpr std::string_view fair_timeouts = ":fairsem:timeouts", fair_owners = ":fairsem:owners",
                           fair_weights = ":fairsem:weights", fair_fence = ":fairsem:fence",
                           fair_waiter_info = ":fairsem:waiter-info",
                           fair_tickets = ":fairsem:counter";
constexpr std::string_view rw_timeouts = ":rw:timeouts", rw_owners = ":rw:owners",
                           rw_weights = ":rw:weights", rw_fence = ":rw:fence",
                           rw_waiter_info = ":rw:waiter-info", rw_tickets = ":rw:counter";
constexpr std::array<std::string_view, 27> suffixes{
    fence_suffix,      waiters_suffix,   waiter_info_suffix, tickets_suffix, holder_suffix,
    high_fence_suffix, sem_holders,      sem_weights,        sem_fence,      sem_waiters,
    sem_waiter_info,   sem_tickets,      fair_timeouts,      fair_owners,    fair_weights,
    fair_fence,        fair_waiter_info, fair_tickets,       election_suffix,
    latch_suffix,      rw_timeouts,      rw_owners,          rw_weights,     rw_fence,
    rw_waiter_info,    rw_tickets,       waiter_notes_suffix};

constexpr std::array<std::uint16_t, 256> crc_table = [] {
  std::array<std::uint16_t, 256> table{};
  for (unsigned i = 0; i < 256; ++i) {
    unsigned crc = i << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
    table[i] = static_cast<std::uint16_t>(crc);
  }
  return table;
}();

std::uint16_t crc16(std::string_view data) noexcept {
  unsigned crc = 0;
  for (unsigned char c : data) crc = (crc << 8) ^ crc_table[((crc >> 8) ^ c) & 0xff];
  return static_cast<std::uint16_t>(crc);
}

// The hash tag's position in `key`, or npos when the whole key is hashed.
std::size_t tag_open(std::string_view key) noexcept {
  auto open = key.find('{');
  if (open == std::string_view::npos) return open;
  auto close = key.find('}', open + 1);
  return close == std::string_view::npos || close == open + 1 ? std::string_view::npos : open;
}

std::string four_chars(unsigned f) {
  std::string tag(4, '@');
  for (int i = 0; i < 4; ++i) tag[i] = static_cast<char>(0x40 | ((f >> (12 - 4 * i)) & 15));
  return tag;
}


// E(key) from the header: ends with '}', hashes to key's slot, and differs for different keys.
// Appended piecewise: GCC 12's -Wrestrict misfires on `"{" + std::string(...)` at -O2.
std::string encode(std::string_view key) {
  std::string out;
  if (tag_open(key) != std::string_view::npos) return out.append(key).append("{}");
  if (!key.empty() && key.find('}') == std::string_view::npos) {
    return out.append("{").append(key).append("}");
  }
  return out.append("{").append(detail::tag_for_slot(hash_slot(key))).append("}").append(key).append("}}");
}

std::string companion(std::string_view key, std::string_view suffix) {
  return encode(key).append(suffix);
}

}  // namespace

namespace detail {

// The first four characters of '@'..'O' (0x40..0x4F, so no braces) that hash to `slot`. There
// always is one. The low nibbles give 16 free bits, and the CRC is linear in them. Over all
// 65536 choices, the low 14 bits of the CRC take every value (tests/unit/key_layout_test.cpp
// checks this), so every slot has four tags. The table is built on first use.
std::string tag_for_slot(std::uint16_t slot) {
  static const std::vector<std::uint32_t> first = [] {
    std::vector<std::uint32_t> table(16384, 0x10000);
    for (unsigned f = 0x10000; f-- > 0;) table[hash_slot(four_chars(f))] = f;
    return table;
  }();
  if (first[slot] > 0xffff) throw std::logic_error("dlock: no hash tag for a slot");  // unreachable
  return four_chars(first[slot]);
}

std::vector<std::vector<std::size_t>> slot_groups(const std::vector<std::string>& keys) {
  std::vector<std::pair<std::uint16_t, std::size_t>> by_slot;
  for (std::size_t i = 0; i < keys.size(); ++i) by_slot.emplace_back(hash_slot(keys[i]), i);
  std::sort(by_slot.begin(), by_slot.end());
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < by_slot.size(); ++i) {
    if (i == 0 || by_slot[i].first != by_slot[i - 1].first) groups.emplace_back();
    groups.back().push_back(by_slot[i].second);
  }
  return groups;
}

}  // namespace detail

std::uint16_t hash_slot(std::string_view key) noexcept {
  auto open = tag_open(key);
  if (open != std::string_view::npos) {
    auto close = key.find('}', open + 1);
    key = key.substr(open + 1, close - open - 1);
  }
  return crc16(key) & 0x3fff;
}

lock_keys lock_keys_for(std::string_view key) {
  std::string base = encode(key);
  auto with = [&](std::string_view suffix) { return base + std::string(suffix); };
  return {std::string(key), with(fence_suffix), with(waiters_suffix), with(waiter_info_suffix),
          with(tickets_suffix)};
}

semaphore_keys semaphore_keys_for(std::string_view key, bool fair) {
  std::string base = encode(key);
  auto with = [&](std::string_view suffix) { return base + std::string(suffix); };
  semaphore_keys keys;
  if (fair) {
    keys.expiries = with(fair_timeouts);
    keys.owners = with(fair_owners);
    keys.weights = with(fair_weights);
    keys.fence = with(fair_fence);
    keys.waiters = keys.owners;
    keys.waiter_info = with(fair_waiter_info);
    keys.tickets = with(fair_tickets);
  } else {
    keys.expiries = with(sem_holders);
    keys.weights = with(sem_weights);
    keys.fence = with(sem_fence);
    keys.waiters = with(sem_waiters);
    keys.waiter_info = with(sem_waiter_info);
    keys.tickets = with(sem_tickets);
  }
  keys.name = std::string(key);  // its holders' mark (semaphore_mark)
  return keys;
}

std::string semaphore_mark(std::int64_t limit, bool fair) {
  return std::string(semaphore_mark_prefix) + std::to_string(limit) + (fair ? " fair" : " unfair");
}

semaphore_keys shared_mutex_keys_for(std::string_view key) {
  std::string base = encode(key);
  auto with = [&](std::string_view suffix) { return base + std::string(suffix); };
  semaphore_keys keys;
  keys.expiries = with(rw_timeouts);
  keys.owners = with(rw_owners);
  keys.weights = with(rw_weights);
  keys.fence = with(fence_suffix);  // one counter for every mode of the name
  keys.waiters = keys.owners;  // as a fair semaphore's: holders and waiters rank in one set
  keys.waiter_info = with(rw_waiter_info);
  keys.tickets = with(rw_tickets);
  keys.name = std::string(key);
  return keys;
}

std::string lock_copy_key(std::string_view key, int copy, int copies) {
  // Copy i in the middle half of the i-th K-th of the slot space, where the name's slot picks
  // the place: masters that split the slots evenly (redis-cli's ranges are off by one here and
  // there) then serve one copy each, whatever the name.
  auto share = 16384u / static_cast<unsigned>(std::max(copies, 1));
  auto offset = share / 4 + hash_slot(key) % std::max(share / 2, 1u);
  auto slot = static_cast<std::uint16_t>(
      (static_cast<unsigned>(std::max(copy, 0)) * share + offset) % 16384);
  std::string out;
  out.append("{").append(detail::tag_for_slot(slot)).append("}dlock-copy:");
  out.append(std::to_string(copy)).append("/").append(std::to_string(copies)).append(":");
  return out.append(key);
}

std::string high_fence_key(std::string_view data_key) {
  return companion(data_key, high_fence_suffix);
}

std::string holder_key(std::string_view lock_key) { return companion(lock_key, holder_suffix); }

std::string waiter_notes_key(std::string_view lock_key) {
  return companion(lock_key, waiter_notes_suffix);
}

std::string election_record_key(std::string_view lock_key) {
  return companion(lock_key, election_suffix);
}

std::string latch_channel(std::string_view latch_key) { return companion(latch_key, latch_suffix); }

// Exact: splits off a suffix, undoes each form of E that could have made the rest, and checks
// that encoding the result gives the rest back.
namespace {

// "{TTTT}dlock-copy:<i>/<K>:<key>", exactly as lock_copy_key makes it.
bool is_copy_key(std::string_view key) {
  constexpr std::string_view marker = "}dlock-copy:";
  if (key.size() < 6 + marker.size() || key[0] != '{' || key.substr(5, marker.size()) != marker) {
    return false;
  }
  std::string_view rest = key.substr(5 + marker.size());
  int copy = 0, copies = 0;
  auto [slash, e1] = std::from_chars(rest.data(), rest.data() + rest.size(), copy);
  if (e1 != std::errc{} || slash == rest.data() + rest.size() || *slash != '/') return false;
  auto [colon, e2] = std::from_chars(slash + 1, rest.data() + rest.size(), copies);
  if (e2 != std::errc{} || colon == rest.data() + rest.size() || *colon != ':') return false;
  std::string_view name = rest.substr(static_cast<std::size_t>(colon + 1 - rest.data()));
  return copy >= 0 && copies > 0 && lock_copy_key(name, copy, copies) == key;
}

}  // namespace

bool is_companion_key(std::string_view key) {
  if (key == node_identity_key || key == node_quarantine_key || key == node_fence_floor_key) {
    return true;
  }
  if (is_copy_key(key)) return true;
  for (auto suffix : suffixes) {
    if (!key.ends_with(suffix)) continue;
    std::string_view base = key.substr(0, key.size() - suffix.size());
    if (!base.ends_with('}')) continue;
    auto encodes = [&](std::string_view name) { return encode(name) == base; };
    if (base.ends_with("{}") && encodes(base.substr(0, base.size() - 2))) return true;
    if (base.size() >= 2 && base.front() == '{' && encodes(base.substr(1, base.size() - 2))) {
      return true;
    }
    if (base.size() >= 8 && base.ends_with("}}") && encodes(base.substr(6, base.size() - 8))) {
      return true;
    }
  }
  return false;
}

}  // namespace dlock
