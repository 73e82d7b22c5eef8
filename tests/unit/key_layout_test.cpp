// SPDX-License-Identifier: Apache-2.0
// The key layout without a server. Checked: hash_slot against Redis Cluster's documented
// examples, the keys that plain names keep, and, with rapidcheck and over every short name of a
// brace-heavy alphabet, the properties: each key is in its name's slot, no two names share a
// key, and a companion key is recognized exactly.
#include "dlock/key_layout.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <rapidcheck/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "dlock/detail/scripts.hpp"
#include "key_layout_internal.hpp"

namespace dlock {
namespace {

// Every key that dlock keeps for `name`, other than a lock's own key (the name itself).
std::vector<std::string> companions(const std::string& name) {
  auto l = lock_keys_for(name);
  auto u = semaphore_keys_for(name, false), f = semaphore_keys_for(name, true);
  return {l.fence,   l.waiters, l.waiter_info, l.tickets, u.expiries,           u.weights,
          u.fence,   u.waiters, u.waiter_info, u.tickets, f.expiries,           f.owners,
          f.weights, f.fence,   f.waiter_info, f.tickets, high_fence_key(name), holder_key(name),
          election_record_key(name), latch_channel(name)};
}

const std::string brace_alphabet = "{}xa:";

// Every string over brace_alphabet of length 0..max_length.
std::vector<std::string> all_names(std::size_t max_length) {
  std::vector<std::string> names{""};
  for (std::size_t begin = 0; names.back().size() < max_length;) {
    std::size_t end = names.size();
    for (std::size_t i = begin; i < end; ++i) {
      for (char c : brace_alphabet) names.push_back(names[i] + c);
    }
    begin = end;
  }
  return names;
}

// Names biased toward braces and short strings, where collisions would hide, and now and then
// any byte.
rc::Gen<std::string> names() {
  return rc::gen::container<std::string>(rc::gen::weightedOneOf<char>(
      {{8, rc::gen::elementOf(brace_alphabet)}, {1, rc::gen::arbitrary<char>()}}));
}

TEST(KeyLayoutTest, HashSlotAgreesWithRedisClusterExamples) {
  EXPECT_EQ(hash_slot("123456789"), 0x31c3 & 0x3fff);  // the CRC16/XMODEM check value
  EXPECT_EQ(hash_slot("somekey"), 11058);
  EXPECT_EQ(hash_slot("foo{hash_tag}"), 2515);
  EXPECT_EQ(hash_slot("{user1000}.following"), hash_slot("user1000"));
  EXPECT_EQ(hash_slot("foo{}{bar}"), hash_slot(std::string_view("foo{}{bar}")));  // whole key
  EXPECT_NE(hash_slot("foo{}{bar}"), hash_slot("bar"));
  EXPECT_EQ(hash_slot("foo{{bar}}zap"), hash_slot("{bar"));
  EXPECT_EQ(hash_slot("foo{bar}{zap}"), hash_slot("bar"));
  EXPECT_EQ(hash_slot(""), 0);
}

// The encoding of names that have no tag but contain '}' relies on this. The CRC with no start
// state is linear in the 16 free bits of four characters of '@'..'O' (plus a constant). So if
// their CRCs cover every slot here, they do after any fixed prefix too.
TEST(KeyLayoutTest, FourCharacterTagsReachEverySlot) {
  std::set<std::uint16_t> slots;
  for (unsigned f = 0; f < 0x10000; ++f) {
    std::string tag(4, '@');
    for (int i = 0; i < 4; ++i) tag[i] = static_cast<char>(0x40 | ((f >> (12 - 4 * i)) & 15));
    slots.insert(hash_slot(tag));
  }
  EXPECT_EQ(slots.size(), 16384u);
}

TEST(KeyLayoutTest, PlainNamesKeepTheKeysOfEarlierVersions) {
  auto l = lock_keys_for("orders:42");
  EXPECT_EQ(l.key, "orders:42");
  EXPECT_EQ(l.fence, "{orders:42}:fence");
  EXPECT_EQ(l.waiters, "{orders:42}:waiters");
  EXPECT_EQ(l.waiter_info, "{orders:42}:waiter-info");
  EXPECT_EQ(l.tickets, "{orders:42}:tickets");
  auto u = semaphore_keys_for("jobs", false);
  EXPECT_EQ(u.expiries, "{jobs}:sem:holders");
  EXPECT_EQ(u.owners, "");
  EXPECT_EQ(u.weights, "{jobs}:sem:weights");
  EXPECT_EQ(u.fence, "{jobs}:sem:fence");
  EXPECT_EQ(u.waiters, "{jobs}:sem:waiters");
  EXPECT_EQ(u.waiter_info, "{jobs}:sem:waiter-info");
  EXPECT_EQ(u.tickets, "{jobs}:sem:tickets");
  auto f = semaphore_keys_for("jobs", true);
  EXPECT_EQ(f.expiries, "{jobs}:fairsem:timeouts");
  EXPECT_EQ(f.owners, "{jobs}:fairsem:owners");
  EXPECT_EQ(f.weights, "{jobs}:fairsem:weights");
  EXPECT_EQ(f.fence, "{jobs}:fairsem:fence");
  EXPECT_EQ(f.waiters, f.owners);
  EXPECT_EQ(f.waiter_info, "{jobs}:fairsem:waiter-info");
  EXPECT_EQ(f.tickets, "{jobs}:fairsem:counter");
  EXPECT_EQ(high_fence_key("count"), "{count}:high-fence");
  EXPECT_EQ(holder_key("orders:42"), "{orders:42}:holder");
}

TEST(KeyLayoutTest, TaggedNamesKeepTheirTagAndMarkIt) {
  EXPECT_EQ(lock_keys_for("app:{jobs}:x").fence, "app:{jobs}:x{}:fence");
  EXPECT_EQ(semaphore_keys_for("{x}", true).owners, "{x}{}:fairsem:owners");
  // The two names of the review no longer share anything.
  EXPECT_EQ(lock_keys_for("x").waiters, "{x}:waiters");
  EXPECT_EQ(lock_keys_for("{x}").waiters, "{x}{}:waiters");
}

TEST(KeyLayoutTest, NamesWithAStrayBraceGetAHashTagInFront) {
  for (std::string name : {"a}b", "}{x", "a{}b", "}", "{}", "", "{}{x}"}) {
    auto fence = lock_keys_for(name).fence;
    ASSERT_EQ(fence.size(), 6 + name.size() + 2 + 6) << name;
    EXPECT_EQ(fence.substr(6), name + "}}:fence");
    EXPECT_EQ(fence.front(), '{');
    EXPECT_EQ(fence[5], '}');
    EXPECT_EQ(hash_slot(fence), hash_slot(name)) << name;
  }
  // The tag in front must be the one for the name's slot.
  auto fence = lock_keys_for("a}b").fence;
  EXPECT_TRUE(is_companion_key(fence));
  fence[1] = fence[1] == '@' ? 'A' : '@';
  EXPECT_FALSE(is_companion_key(fence));
  // Names with no '}' at all are wrapped, as always; "{{x}}" has the tag "{x".
  EXPECT_EQ(lock_keys_for("{").fence, "{{}:fence");
  EXPECT_EQ(lock_keys_for("{{x}}").fence, "{{x}}{}:fence");
}

TEST(KeyLayoutTest, ReviewExamplesAreInTheirSlotAndDistinct) {
  std::map<std::string, std::string> owner;
  for (std::string name : {"x", "{x}", "a}b", "}{x", "a{}b", "{}", "{", "}", "{{x}}", "{x}:sem"}) {
    for (const auto& key : companions(name)) {
      EXPECT_EQ(hash_slot(key), hash_slot(name)) << key << " of " << name;
      EXPECT_TRUE(is_companion_key(key)) << key;
      auto [it, inserted] = owner.emplace(key, name);
      // The fair variant's waiters key is its owners key: the same name may repeat a key.
      EXPECT_TRUE(inserted || it->second == name) << key << ": " << name << " and " << it->second;
    }
    EXPECT_FALSE(is_companion_key(name)) << name;
  }
}

// A lock set's order across slots: every key once, groups by ascending slot, one slot each.
RC_GTEST_PROP(KeyLayoutProperty, SlotGroupsPartitionTheKeysInSlotOrder,
              (std::vector<std::string> keys)) {
  keys.push_back("{t}a");
  keys.push_back("{t}b");  // two that share a slot
  auto groups = detail::slot_groups(keys);
  std::vector<std::size_t> seen;
  std::optional<std::uint16_t> previous;
  for (const auto& group : groups) {
    RC_ASSERT(!group.empty());
    auto slot = hash_slot(keys[group.front()]);
    if (previous) RC_ASSERT(*previous < slot);
    previous = slot;
    for (std::size_t i = 0; i < group.size(); ++i) {
      RC_ASSERT(hash_slot(keys[group[i]]) == slot);
      if (i > 0) RC_ASSERT(group[i - 1] < group[i]);
      seen.push_back(group[i]);
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<std::size_t> all(keys.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  RC_ASSERT(seen == all);
}

RC_GTEST_PROP(KeyLayoutProperty, EveryKeyIsInTheNamesSlot, ()) {
  auto name = *names();
  for (const auto& key : companions(name)) RC_ASSERT(hash_slot(key) == hash_slot(name));
}

RC_GTEST_PROP(KeyLayoutProperty, TwoNamesNeverShareAKey, ()) {
  auto a = *names();
  auto b = *names().as("another name");
  RC_PRE(a != b);
  auto of_a = companions(a);
  std::set<std::string> keys(of_a.begin(), of_a.end());
  for (const auto& key : companions(b)) RC_ASSERT(keys.count(key) == 0u);
}

// The suffixes that follow E(name), read off the keys of a plain name ("{x}:fence" ...).
const std::set<std::string>& all_suffixes() {
  static const std::set<std::string> suffixes = [] {
    std::set<std::string> out;
    for (const auto& key : companions("x")) out.insert(key.substr(3));
    return out;
  }();
  return suffixes;
}

// True when `key` is a companion key of some name, found without is_companion_key's decoding:
// E(name) holds the name at offset 0, 1 or 6 and adds at most two characters after it, so
// every name that could have made `key` is one of these substrings.
bool companion_by_search(const std::string& key) {
  const auto& suffixes = all_suffixes();
  for (std::size_t from : {0, 1, 6}) {
    for (std::size_t n = 0; from + n <= key.size(); ++n) {
      auto rest = std::string_view(key).substr(from + n);
      bool fits = false;
      for (std::size_t added : {1, 2}) {
        fits = fits || (rest.size() >= added && suffixes.count(std::string(rest.substr(added))));
      }
      if (!fits) continue;
      for (const auto& k : companions(key.substr(from, n))) {
        if (k == key) return true;
      }
    }
  }
  return false;
}

RC_GTEST_PROP(KeyLayoutProperty, CompanionKeysAreRecognizedExactly, ()) {
  auto name = *rc::gen::resize(12, names());
  auto keys = companions(name);
  auto key = *rc::gen::elementOf(keys);
  RC_ASSERT(is_companion_key(key));
  // One edit away from a companion key: recognized exactly when it still is one.
  auto at = *rc::gen::inRange<std::size_t>(0, key.size());
  auto c = *rc::gen::elementOf(std::string("{}xa:@AO"));
  switch (*rc::gen::inRange(0, 3)) {
    case 0:
      key.insert(key.begin() + static_cast<std::ptrdiff_t>(at), c);
      break;
    case 1:
      key.erase(at, 1);
      break;
    default:
      key[at] = c;
      break;
  }
  RC_ASSERT(is_companion_key(key) == companion_by_search(key));
}

// Exhaustive where collisions would hide: all 19531 names of length 0..6 over "{}xa:".
TEST(KeyLayoutTest, NoTwoShortNamesShareAKeyAndEachKeyIsInItsSlot) {
  std::unordered_map<std::string, std::string> owner;
  owner.reserve(20000 * 20);
  for (const auto& name : all_names(6)) {
    auto slot = hash_slot(name);
    for (const auto& key : companions(name)) {
      ASSERT_EQ(hash_slot(key), slot) << key << " of " << name;
      auto [it, inserted] = owner.emplace(key, name);
      ASSERT_TRUE(inserted || it->second == name) << key << ": " << name << " and " << it->second;
    }
  }
  // is_companion_key is exact: every string "<0..6 characters><suffix>" is recognized if and
  // only if it is one of the keys above (a base E(name) of at most 6 characters comes from a
  // name of at most 4).
  for (const auto& base : all_names(6)) {
    for (const auto& suffix : all_suffixes()) {
      auto key = base + suffix;
      ASSERT_EQ(is_companion_key(key), owner.count(key) == 1) << key;
    }
  }
}

}  // namespace
}  // namespace dlock

namespace dlock {
namespace {

// The scripts name the node's keys in Lua (src/lua/include/node_state.lua, node_check.lua gets
// them as KEYS): the names must be key_layout.hpp's, and every include must have been pasted.
TEST(KeyLayoutTest, TheScriptsReadTheNodesKeysByTheNamesKeyLayoutGives) {
  for (auto body : {detail::scripts::acquire_body, detail::scripts::sem_acquire_body,
                    detail::scripts::sem_fair_acquire_body, detail::scripts::release_body}) {
    EXPECT_NE(body.find("'" + std::string(node_quarantine_key) + "'"), std::string_view::npos);
    EXPECT_NE(body.find("'" + std::string(node_fence_floor_key) + "'"), std::string_view::npos);
    EXPECT_EQ(body.find("#include"), std::string_view::npos) << body.substr(0, 200);
  }
  EXPECT_TRUE(is_companion_key(node_identity_key));
  EXPECT_TRUE(is_companion_key(node_quarantine_key));
  EXPECT_TRUE(is_companion_key(node_fence_floor_key));
}


// redis-cli --cluster create's split of the slots over n masters (clusterManagerCommandCreate).
std::vector<std::pair<int, int>> redis_cli_ranges(int n) {
  std::vector<std::pair<int, int>> ranges;
  double per = 16384.0 / n, cursor = 0;
  int first = 0;
  for (int i = 0; i < n; ++i) {
    int last = static_cast<int>(std::lround(cursor + per - 1));
    if (last > 16383 || i == n - 1) last = 16383;
    ranges.emplace_back(first, last);
    first = last + 1;
    cursor += per;
  }
  return ranges;
}

// The second review found copies 0..K-1 spaced 16384/K apart sharing a master at the range
// boundaries (slot 0: 0, 5461, 10922 with 3 masters). Now every name's copies land on distinct
// masters of redis-cli's split, for every slot of the name.
TEST(KeyLayoutTest, CopiesLandOnDistinctMastersOfAnEvenSplit) {
  for (int copies : {3, 5, 7}) {
    auto ranges = redis_cli_ranges(copies);
    for (int slot = 0; slot < 16384; ++slot) {
      std::string name = "{" + detail::tag_for_slot(static_cast<std::uint16_t>(slot)) + "}x";
      std::set<int> masters;
      for (int i = 0; i < copies; ++i) {
        auto copy = lock_copy_key(name, i, copies);
        int s = hash_slot(copy);
        for (std::size_t m = 0; m < ranges.size(); ++m) {
          if (s >= ranges[m].first && s <= ranges[m].second) masters.insert(static_cast<int>(m));
        }
        ASSERT_EQ(hash_slot(lock_keys_for(copy).fence), s);  // its companions follow it
      }
      ASSERT_EQ(masters.size(), static_cast<std::size_t>(copies)) << "slot " << slot;
    }
  }
}

TEST(KeyLayoutTest, CopyKeysAreCompanionsAndNoOtherName) {
  EXPECT_TRUE(is_companion_key(lock_copy_key("orders", 1, 3)));
  EXPECT_TRUE(is_companion_key(lock_copy_key("a}b{", 0, 5)));
  EXPECT_FALSE(is_companion_key("{ABCD}dlock-copy:1/3:orders"));  // not its tag
  EXPECT_FALSE(is_companion_key("{ABCD}dlock-copy:x/3:orders"));
  EXPECT_NE(lock_copy_key("orders", 0, 3), lock_copy_key("orders", 0, 5));
  EXPECT_NE(lock_copy_key("orders", 0, 3), lock_copy_key("orders", 1, 3));
}

}  // namespace
}  // namespace dlock
