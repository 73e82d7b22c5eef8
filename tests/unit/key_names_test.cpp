// SPDX-License-Identifier: Apache-2.0
// Reading names back from keys (tools/dlock-cli/key_names.hpp, `dlock list`), without a server.
// Checked against the library's own encoder: every companion key of every short name over a
// brace-heavy alphabet (the three forms of E(name)) decodes to that name and the right kind,
// with rapidcheck for longer and odd names; a key the library does not call a companion never
// decodes; copies; Redis's glob; the value forms dlock writes; JSON strings.
#include "key_names.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "dlock/key_layout.hpp"
#include "dlock/shared_mutex.hpp"

namespace dlock::cli {
namespace {

// Every companion key the library makes for `name`, with the kind `dlock list` must read from it.
std::vector<std::pair<std::string, key_role>> companions(const std::string& name) {
  auto l = lock_keys_for(name);
  auto u = semaphore_keys_for(name, false), f = semaphore_keys_for(name, true);
  auto rw = shared_mutex_keys_for(name);
  return {{l.fence, key_role::fence},
          {l.waiters, key_role::lock},
          {l.waiter_info, key_role::lock},
          {l.tickets, key_role::lock},
          {holder_key(name), key_role::holder_note},
          {waiter_notes_key(name), key_role::holder_note},
          {high_fence_key(name), key_role::data_fence},
          {election_record_key(name), key_role::election},
          {latch_channel(name), key_role::latch_channel},
          {u.expiries, key_role::semaphore},
          {u.weights, key_role::semaphore},
          {u.fence, key_role::semaphore},
          {u.waiters, key_role::semaphore},
          {u.waiter_info, key_role::semaphore},
          {u.tickets, key_role::semaphore},
          {f.expiries, key_role::fair_semaphore},
          {f.owners, key_role::fair_semaphore},
          {f.weights, key_role::fair_semaphore},
          {f.fence, key_role::fair_semaphore},
          {f.waiter_info, key_role::fair_semaphore},
          {f.tickets, key_role::fair_semaphore},
          {rw.expiries, key_role::read_write_lock},
          {rw.owners, key_role::read_write_lock},
          {rw.weights, key_role::read_write_lock},
          {rw.fence, key_role::fence},  // one counter for every mode of the name
          {rw.waiter_info, key_role::read_write_lock},
          {rw.tickets, key_role::read_write_lock}};
}

void expect_decodes(const std::string& name) {
  for (const auto& [key, role] : companions(name)) {
    auto c = decode_companion(key);
    ASSERT_TRUE(c) << "'" << key << "' of '" << name << "'";
    EXPECT_EQ(c->name, name) << key;
    EXPECT_EQ(c->role, role) << key;
    EXPECT_TRUE(key.ends_with(c->suffix)) << key;
  }
}

TEST(KeyNamesTest, EachFormOfTheEncodingIsUndone) {
  expect_decodes("orders:42");  // "{orders:42}" + suffix
  expect_decodes("a{b}c");      // tagged: "a{b}c{}" + suffix
  expect_decodes("a}b");        // "{FFFF}a}b}}" + suffix
  expect_decodes("a{}b");       // an empty tag is no tag: the third form too
  expect_decodes("");           // the empty name: the third form
  expect_decodes("x{");         // ends in '{': "}}" keeps it from looking tagged
  expect_decodes("{x}:fence");  // not a lock name, but a semaphore may be called so
  EXPECT_EQ(decode_companion("{orders:42}:fence")->name, "orders:42");
  EXPECT_EQ(decode_companion("orders:{42}{}:sem:holders")->name, "orders:{42}");
}

TEST(KeyNamesTest, EveryShortNameOfABraceHeavyAlphabetDecodes) {
  std::vector<std::string> names{""};
  for (std::size_t begin = 0; names.back().size() < 4;) {
    std::size_t end = names.size();
    for (std::size_t i = begin; i < end; ++i) {
      for (char c : std::string("{}xa:")) names.push_back(names[i] + c);
    }
    begin = end;
  }
  for (const auto& name : names) {
    expect_decodes(name);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(KeyNamesTest, KeysThatAreNoCompanionsDoNotDecode) {
  for (const char* key :
       {"orders:42", "{orders:42}", "{orders:42}:unknown", "{a}b:fence", "x:fence",
        "{x}:fence:more", "a{b}c:fence", "{ABCD}a}b}}:fence", "session:17", ""}) {
    EXPECT_FALSE(decode_companion(key)) << key;
    EXPECT_FALSE(is_companion_key(key)) << key;  // the library agrees
  }
}

rc::Gen<std::string> names() {
  return rc::gen::container<std::string>(rc::gen::weightedOneOf<char>(
      {{8, rc::gen::elementOf(std::string("{}xa:"))}, {1, rc::gen::arbitrary<char>()}}));
}

RC_GTEST_PROP(KeyNamesProperty, EveryCompanionDecodesToItsName, ()) {
  auto name = *rc::gen::resize(16, names());
  for (const auto& [key, role] : companions(name)) {
    auto c = decode_companion(key);
    RC_ASSERT(c.has_value());
    RC_ASSERT(c->name == name);
    RC_ASSERT(c->role == role);
  }
}

// Whatever the key, decoding agrees with the library's is_companion_key (copies and the node's own
// keys aside): a key decodes exactly when the library calls it a companion.
RC_GTEST_PROP(KeyNamesProperty, DecodingAgreesWithTheLibrary, ()) {
  auto name = *rc::gen::resize(12, names());
  auto keys = companions(name);
  std::string key = (*rc::gen::elementOf(keys)).first;
  if (*rc::gen::arbitrary<bool>()) {  // one edit: most such keys are no
                                      // companion
    auto at = *rc::gen::inRange<std::size_t>(0, key.size());
    key.insert(at, 1, *rc::gen::elementOf(std::string("{}xa:@AO")));
  }
  RC_ASSERT(decode_companion(key).has_value() == is_companion_key(key));
}

TEST(KeyNamesTest, CopyKeysGiveTheirLockAndCount) {
  for (const std::string name : {"orders:42", "a{b}c", "a}b", ""}) {
    for (int i = 0; i < 5; ++i) {
      auto c = decode_copy_key(lock_copy_key(name, i, 5));
      ASSERT_TRUE(c) << name;
      EXPECT_EQ(c->name, name);
      EXPECT_EQ(c->copy, i);
      EXPECT_EQ(c->copies, 5);
    }
    // A copy's own companions decode to the copy key, which decodes to the lock.
    auto fence = decode_companion(lock_keys_for(lock_copy_key(name, 1, 3)).fence);
    ASSERT_TRUE(fence);
    EXPECT_EQ(decode_copy_key(fence->name)->name, name);
  }
  EXPECT_FALSE(decode_copy_key("{ABCD}dlock-copy:1/3:x"));  // the tag is not the copy's
  EXPECT_FALSE(decode_copy_key("{ABCD}dlock-copy:x"));
  EXPECT_FALSE(decode_copy_key("orders:42"));
  EXPECT_TRUE(is_node_key(node_identity_key));
  EXPECT_TRUE(is_node_key(node_quarantine_key));
  EXPECT_TRUE(is_node_key(node_fence_floor_key));
  EXPECT_FALSE(is_node_key("dlock:node"));
}

TEST(KeyNamesTest, GlobMatchesAsRedisDoes) {
  EXPECT_TRUE(glob_match("*", "anything"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("jobs:*", "jobs:42"));
  EXPECT_FALSE(glob_match("jobs:*", "myjobs:42"));
  EXPECT_TRUE(glob_match("*:42", "jobs:42"));
  EXPECT_TRUE(glob_match("j?bs:4[0-9]", "jobs:42"));
  EXPECT_FALSE(glob_match("j?bs:4[0-1]", "jobs:42"));
  EXPECT_TRUE(glob_match("h[^e]llo", "hallo"));
  EXPECT_FALSE(glob_match("h[^e]llo", "hello"));
  EXPECT_TRUE(glob_match("h[ae]llo", "hello"));
  EXPECT_TRUE(glob_match("a\\*b", "a*b"));
  EXPECT_FALSE(glob_match("a\\*b", "axb"));
  EXPECT_TRUE(glob_match("a[\\]]b", "a]b"));
  EXPECT_TRUE(glob_match("a[z-a]b", "amb"));  // a reversed range is swapped
  EXPECT_TRUE(glob_match("a**b*", "ab"));
  EXPECT_FALSE(glob_match("abc", "ab"));
  EXPECT_FALSE(glob_match("ab", "abc"));
  EXPECT_TRUE(glob_match("a{b}c", "a{b}c"));  // braces are no glob
}

TEST(KeyNamesTest, ScanMatchCoversEveryKeyOfAMatchingName) {
  EXPECT_EQ(scan_match("*"), "*");
  EXPECT_EQ(scan_match(""), "*");
  EXPECT_EQ(scan_match("a\\"),
            "*");  // a lone backslash would escape the '*' after it
  EXPECT_EQ(scan_match("jobs:*"), "*jobs:*");
  EXPECT_EQ(scan_match("jobs:42"), "*jobs:42*");
  EXPECT_EQ(scan_match("*:42"), "*:42*");
  EXPECT_EQ(scan_match("a\\*"), "*a\\**");  // an escaped '*' is a character
  for (const std::string name : {"jobs:42", "jobs:{7}", "jobs:}x"}) {
    EXPECT_TRUE(glob_match(scan_match("jobs:*"), name));
    for (const auto& [key, role] : companions(name)) {
      EXPECT_TRUE(glob_match(scan_match("jobs:*"), key)) << key;
      EXPECT_TRUE(glob_match(scan_match(name), key)) << key;
    }
    EXPECT_TRUE(glob_match(scan_match("jobs:*"), lock_copy_key(name, 2, 3)));
  }
}

TEST(KeyNamesTest, ValuesDlockWrites) {
  const std::string id = "0123456789abcdef0123456789abcdef";
  EXPECT_TRUE(is_dlock_owner(id + ".1"));
  EXPECT_TRUE(is_dlock_owner(id + ".h12"));
  EXPECT_TRUE(is_dlock_owner(id + ".3:settled"));
  EXPECT_FALSE(is_dlock_owner(id));
  EXPECT_FALSE(is_dlock_owner(id + "."));
  EXPECT_FALSE(is_dlock_owner(id + ".x"));
  EXPECT_FALSE(is_dlock_owner("0123456789ABCDEF0123456789abcdef.1"));
  EXPECT_FALSE(is_dlock_owner(id.substr(1) + ".1"));
  EXPECT_FALSE(is_dlock_owner(read_write_lock_mark));

  auto fair = parse_semaphore_mark(semaphore_mark(3, true));
  ASSERT_TRUE(fair);
  EXPECT_EQ(fair->limit, 3);
  EXPECT_TRUE(fair->fair);
  auto unfair = parse_semaphore_mark(semaphore_mark(1000000, false));
  ASSERT_TRUE(unfair);
  EXPECT_EQ(unfair->limit, 1000000);
  EXPECT_FALSE(unfair->fair);
  EXPECT_FALSE(parse_semaphore_mark("dlock:semaphore 3"));
  EXPECT_FALSE(parse_semaphore_mark("dlock:semaphore x fair"));
  EXPECT_FALSE(parse_semaphore_mark(read_write_lock_mark));

  // A solo holder's value: "<mark> <token> <permits>" (name_mark.lua).
  const std::string held = semaphore_mark(3, true) + " 0af1 2";  // the views point into it
  auto solo = parse_solo(held);
  ASSERT_TRUE(solo);
  EXPECT_EQ(solo->mark, semaphore_mark(3, true));
  EXPECT_EQ(solo->token, "0af1");
  EXPECT_EQ(solo->permits, 2);
  EXPECT_EQ(parse_semaphore_mark(held)->limit, 3);
  const std::string reading = std::string(read_write_lock_mark) + " 0af1 1";
  auto reader = parse_solo(reading);
  ASSERT_TRUE(reader);
  EXPECT_EQ(reader->mark, read_write_lock_mark);
  EXPECT_EQ(mark_part(reading), read_write_lock_mark);
  const std::string mark = semaphore_mark(3, false);
  EXPECT_EQ(mark_part(mark), mark);
  EXPECT_FALSE(parse_solo(semaphore_mark(3, true)));
  EXPECT_FALSE(parse_solo("dlock:semaphore 3 fair 1"));
  EXPECT_FALSE(parse_solo(std::string(read_write_lock_mark) + " 0af1 0"));
  EXPECT_FALSE(parse_solo("0af1.0 x 1"));

  EXPECT_EQ(latch_count("0"), 0);
  EXPECT_EQ(latch_count("10"), 10);
  EXPECT_FALSE(latch_count("010"));
  EXPECT_FALSE(latch_count("-1"));
  EXPECT_FALSE(latch_count("1.5"));
  EXPECT_FALSE(latch_count(""));
  EXPECT_FALSE(latch_count("99999999999999999"));
}

TEST(KeyNamesTest, JsonStringsAreAlwaysValid) {
  EXPECT_EQ(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
  EXPECT_EQ(json_string(std::string("\x01", 1)), "\"\\u0001\"");
  EXPECT_EQ(json_string("caf\xc3\xa9"), "\"caf\xc3\xa9\"");  // UTF-8 as it is
  EXPECT_EQ(json_string("\xff"), "\"\\u00ff\"");             // a stray byte escaped
  EXPECT_EQ(json_string("\xc3"), "\"\\u00c3\"");             // a cut sequence too
  EXPECT_EQ(json_string("\xed\xa0\x80"),
            "\"\\u00ed\\u00a0\\u0080\"");  // no surrogates
}

}  // namespace
}  // namespace dlock::cli
