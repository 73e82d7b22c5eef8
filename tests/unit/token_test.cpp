// SPDX-License-Identifier: Apache-2.0
// Owner tokens: 128 random bits as hex, never repeated, also not across fork().
#include "token.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

namespace dlock::detail {
namespace {

TEST(TokenTest, IsThirtyTwoHexDigitsAndNeverRepeats) {
  std::set<std::string> seen;
  for (int i = 0; i < 20000; ++i) {  // crosses many refills of the per-thread buffer
    auto t = random_token();
    ASSERT_EQ(t.size(), 32u);
    ASSERT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos);
    ASSERT_TRUE(seen.insert(t).second) << "repeated token " << t;
  }
}

TEST(TokenTest, AForkedChildDoesNotRepeatItsParentsNextToken) {
  (void)random_token();  // the parent's buffer now holds its next tokens
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto t = random_token();
    (void)!::write(fds[1], t.data(), t.size());
    ::_exit(0);
  }
  std::string child(32, '\0');
  ASSERT_EQ(::read(fds[0], child.data(), child.size()), 32);
  ::waitpid(pid, nullptr, 0);
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_NE(child, random_token());
}

}  // namespace
}  // namespace dlock::detail
