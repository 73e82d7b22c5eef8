// SPDX-License-Identifier: Apache-2.0
// The engines' inline containers: a request's arguments (script_args) and the per-node and
// per-attempt bookkeeping (small_vector) keep every value through copies and moves, inline or
// spilled to the heap.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "algo/request.hpp"
#include "algo/small_vector.hpp"

namespace dlock::detail {
namespace {

std::vector<std::string> strings_of(const script_args& args) {
  return {args.begin(), args.end()};
}

TEST(ScriptArgsTest, KeepsEachArgumentInlineAndAfterSpilling) {
  script_args small{"id.0", "", "30000", "fair"};
  EXPECT_EQ(small, (std::vector<std::string>{"id.0", "", "30000", "fair"}));
  EXPECT_EQ(small.size(), 4u);
  EXPECT_EQ(small.back(), "fair");
  EXPECT_THROW((void)small.at(4), std::out_of_range);

  // Past the inline bytes (an election's value): the earlier arguments move along.
  std::string big(script_args::inline_bytes, 'v');
  script_args spilled{"id.0", "30000"};
  spilled.push_back(big);
  spilled.push_back("after");
  EXPECT_EQ(spilled, (std::vector<std::string>{"id.0", "30000", big, "after"}));

  // Exactly filling the inline bytes does not spill, and the next one does.
  script_args edge{std::string(script_args::inline_bytes - 1, 'a')};
  edge.push_back("b");
  edge.push_back("c");
  std::string almost(script_args::inline_bytes - 1, 'a');
  EXPECT_EQ(edge, (std::vector<std::string>{almost, "b", "c"}));
}

TEST(ScriptArgsTest, CopiesAndMovesKeepTheValues) {
  std::string big(500, 'x');
  for (const auto& values : {std::vector<std::string>{"a", "bb", ""},
                             std::vector<std::string>{"a", big, "c"}}) {
    script_args original(values);
    script_args copy = original;
    script_args moved = std::move(original);
    EXPECT_EQ(strings_of(copy), values);
    EXPECT_EQ(strings_of(moved), values);
    script_args assigned;
    assigned = copy;
    EXPECT_EQ(strings_of(assigned), values);
  }
}

TEST(ScriptArgsTest, RefusesMoreThanItsCapacity) {
  script_args args;
  for (std::size_t i = 0; i < script_args::capacity; ++i) args.push_back(std::to_string(i));
  EXPECT_THROW(args.push_back("one too many"), std::logic_error);
  EXPECT_EQ(args.size(), script_args::capacity);
}

TEST(SmallVectorTest, PushEraseAndCopyInlineAndSpilled) {
  for (std::size_t count : {std::size_t{3}, std::size_t{4}, std::size_t{11}}) {
    small_vector<std::uint64_t, 4> v;
    std::vector<std::uint64_t> model;
    for (std::uint64_t i = 0; i < count; ++i) {
      v.push_back(i * 10);
      model.push_back(i * 10);
    }
    ASSERT_EQ(std::vector<std::uint64_t>(v.begin(), v.end()), model) << count;
    // Erase the second entry, then the last, keeping the order.
    v.erase(v.begin() + 1);
    model.erase(model.begin() + 1);
    v.erase(v.end() - 1);
    model.erase(model.end() - 1);
    ASSERT_EQ(std::vector<std::uint64_t>(v.begin(), v.end()), model) << count;
    auto copy = v;
    v.push_back(99);
    EXPECT_EQ(std::vector<std::uint64_t>(copy.begin(), copy.end()), model) << "a copy is its own";
    model.push_back(99);
    EXPECT_EQ(std::vector<std::uint64_t>(v.begin(), v.end()), model) << count;
    EXPECT_EQ(v[v.size() - 1], 99u);
    v.clear();
    EXPECT_TRUE(v.empty());
  }
  small_vector<std::int64_t, 5> filled(7, -1);
  EXPECT_EQ(std::vector<std::int64_t>(filled.begin(), filled.end()),
            std::vector<std::int64_t>(7, -1));
}

}  // namespace
}  // namespace dlock::detail
