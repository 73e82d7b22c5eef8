// SPDX-License-Identifier: Apache-2.0
// Every embedded script's SHA1 matches what the server computes for the same bytes.
#include <gtest/gtest.h>

#include "dlock/client.hpp"
#include "script.hpp"
#include "semaphore_core.hpp"
#include "support/redis_server.hpp"

namespace dlock {
namespace {

TEST(ScriptsTest, EmbeddedSha1MatchesScriptLoad) {
  test::redis_server server;
  client c{server.url()};
  for (const auto* s : {&detail::acquire_script, &detail::release_script, &detail::extend_script,
                        &detail::fence_raise_script, &detail::fenced_set_script, &detail::leave_script}) {
    EXPECT_EQ(c.exec({"SCRIPT", "LOAD", s->body}).str(), s->sha1);
  }
  for (const auto* s : {&detail::sem_acquire_script, &detail::sem_fair_acquire_script,
                        &detail::sem_release_script, &detail::sem_refresh_script}) {
    EXPECT_EQ(c.exec({"SCRIPT", "LOAD", s->body}).str(), s->sha1);
  }
}

}  // namespace
}  // namespace dlock
