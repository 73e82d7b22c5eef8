// SPDX-License-Identifier: Apache-2.0
// dlock's error model: the category, its messages, and error_from_reply's mapping of Redis
// error replies to errc values.
#include "dlock/error.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "dlock/client.hpp"
#include "dlock/reply.hpp"

namespace dlock {
namespace {

std::error_code map(std::string_view text) {
  return error_from_reply(reply::make_string(reply::kind::error, text));
}

TEST(ErrorTest, MapsRedisErrorPrefixes) {
  // A node loading its AOF after a restart: the command did not run, retrying heals it
  // (tests/fault crash_restart_aof found lock() throwing when this was a server_error).
  EXPECT_EQ(map("LOADING Redis is loading the dataset in memory"), errc::node_unreachable);
  EXPECT_EQ(map("CLUSTERDOWN The cluster is down"), errc::node_unreachable);
  EXPECT_EQ(map("TRYAGAIN Multiple keys request during rehashing of slot"), errc::node_unreachable);
  // A script cut short by its slot's migration (docs/guarantees.md, "Redis Cluster").
  EXPECT_EQ(map("ERR Script attempted to access a non local key in a cluster node script: x"),
            errc::node_unreachable);
  EXPECT_EQ(map("WRONGTYPE Operation against a key holding the wrong kind of value"),
            errc::wrong_type);
  EXPECT_EQ(map("NOPERM this user has no permissions to run the 'set' command"),
            errc::no_permission);
  EXPECT_EQ(map("NOPERM this user has no permissions to access one of the keys used as arguments"),
            errc::no_permission);
  EXPECT_EQ(map("NOAUTH Authentication required."), errc::auth_failed);
  EXPECT_EQ(map("WRONGPASS invalid username-password pair or user is disabled."),
            errc::auth_failed);
  EXPECT_EQ(map("ERR AUTH <password> called without any password configured for the default "
                "user. Are you sure your configuration is correct?"),
            errc::auth_failed);
  EXPECT_EQ(map("ERR invalid password"), errc::auth_failed);  // Redis < 6
  // No password sent, and a first command too long for an unauthenticated client.
  EXPECT_EQ(map("ERR Protocol error: unauthenticated multibulk length"), errc::auth_failed);
  EXPECT_EQ(map("ERR Protocol error: unauthenticated bulk length"), errc::auth_failed);
  EXPECT_EQ(map("READONLY You can't write against a read only replica."), errc::read_only);
  EXPECT_EQ(map("OOM command not allowed when used memory > 'maxmemory'."), errc::out_of_memory);
  EXPECT_EQ(map("NOSCRIPT No matching script. Please use EVAL."), errc::script_error);
  EXPECT_EQ(map("ERR user_script:1: Script attempted to access nonexistent global variable 'x' "
                "script: 1234, on @user_script:1."),
            errc::script_error);
  EXPECT_EQ(map("ERR Error running script (call to f_1234): @user_script:1: oops"),
            errc::script_error);
  EXPECT_EQ(map("ERR Error compiling script (new function): user_script:1: syntax error"),
            errc::script_error);
  EXPECT_EQ(map("ERR value is not an integer or out of range"), errc::server_error);
  EXPECT_EQ(map("ERR unknown command 'FOO', with args beginning with: "), errc::server_error);
  EXPECT_EQ(map("BUSY Redis is busy running a script."), errc::server_error);
  EXPECT_EQ(map(""), errc::server_error);
}

TEST(ErrorTest, PrefixMatchIsCaseSensitiveAndAnchored) {
  // Only the error code at the start counts, not a word that appears later in the text.
  EXPECT_EQ(map("ERR something about WRONGTYPE"), errc::server_error);
  EXPECT_EQ(map("ERR NOPERM"), errc::server_error);
  EXPECT_EQ(map("wrongtype lower case"), errc::server_error);
}

TEST(ErrorTest, NonErrorRepliesMapToNoError) {
  EXPECT_FALSE(error_from_reply(reply::make_string(reply::kind::status, "WRONGTYPE")));
  EXPECT_FALSE(error_from_reply(reply::make_string(reply::kind::string, "NOAUTH")));
  EXPECT_FALSE(error_from_reply(reply::make_integer(1)));
  EXPECT_FALSE(error_from_reply(reply::make_nil()));
  EXPECT_FALSE(
      error_from_reply(reply::make_array({reply::make_string(reply::kind::error, "ERR")})));
}

TEST(ErrorTest, CategoryNameAndMessages) {
  EXPECT_STREQ(category().name(), "dlock");
  EXPECT_EQ(&category(), &make_error_code(errc::timeout).category());
  std::set<std::string> messages;
  const int first = static_cast<int>(errc::not_acquired);
  const int last = static_cast<int>(errc::not_found);
  for (int e = first; e <= last; ++e) {
    std::string msg = category().message(e);
    EXPECT_FALSE(msg.empty()) << e;
    EXPECT_NE(msg, "unknown dlock error") << "errc " << e << " has no message";
    EXPECT_TRUE(messages.insert(msg).second) << "duplicate message: " << msg;
  }
  EXPECT_EQ(messages.size(), static_cast<std::size_t>(last - first + 1));
  EXPECT_FALSE(category().message(0).empty());
  EXPECT_FALSE(category().message(9999).empty());
}

// cancelled is what a stopped or cancelled wait reports, and what a request gets when its
// client shuts down: its message names both.
TEST(ErrorTest, TheCancelledMessageNamesAStoppedWaitAndAShutDown) {
  std::string msg = make_error_code(errc::cancelled).message();
  EXPECT_NE(msg.find("stopped"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shut down"), std::string::npos) << msg;
}

TEST(ErrorTest, ErrcConvertsToErrorCode) {
  std::error_code ec = errc::wrong_type;
  EXPECT_TRUE(ec);
  EXPECT_EQ(ec, errc::wrong_type);
  EXPECT_NE(ec, errc::no_permission);
  EXPECT_EQ(ec.category(), category());
  EXPECT_EQ(ec.value(), static_cast<int>(errc::wrong_type));
  EXPECT_EQ(ec.message(), category().message(ec.value()));
  // Distinct from the generic category's values of the same number.
  EXPECT_NE(ec, std::error_code(ec.value(), std::generic_category()));
}

}  // namespace
}  // namespace dlock
