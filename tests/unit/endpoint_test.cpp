// SPDX-License-Identifier: Apache-2.0
// parse_endpoint and endpoint::to_string: the URL forms dlock accepts, the ones it rejects
// before any I/O, and that a printed endpoint never leaks the password.
#include "dlock/endpoint.hpp"

#include <gtest/gtest.h>

#include <string>
#include <system_error>

#include "dlock/error.hpp"

namespace dlock {
namespace {

endpoint parse_ok(std::string_view url) {
  std::error_code ec = errc::timeout;  // must be cleared on success
  endpoint ep = parse_endpoint(url, ec);
  EXPECT_FALSE(ec) << url << ": " << ec.message();
  return ep;
}

TEST(EndpointTest, HostPortAndDb) {
  endpoint ep = parse_ok("redis://cache.example.com:6380/3");
  EXPECT_EQ(ep.host, "cache.example.com");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.db, 3);
  EXPECT_TRUE(ep.user.empty());
  EXPECT_TRUE(ep.password.empty());
  EXPECT_TRUE(ep.socket_path.empty());
  EXPECT_FALSE(ep.is_unix());
  EXPECT_EQ(ep.to_string(), "cache.example.com:6380");
}

TEST(EndpointTest, DefaultsToPort6379AndDb0) {
  endpoint ep = parse_ok("redis://localhost");
  EXPECT_EQ(ep.host, "localhost");
  EXPECT_EQ(ep.port, 6379);
  EXPECT_EQ(ep.db, 0);
  EXPECT_EQ(parse_ok("redis://10.0.0.1/").db, 0);
  EXPECT_EQ(parse_ok("redis://10.0.0.1/15").db, 15);
  EXPECT_EQ(parse_ok("redis://h:1").port, 1);
  EXPECT_EQ(parse_ok("redis://h:65535").port, 65535);
}

TEST(EndpointTest, UserAndPassword) {
  endpoint ep = parse_ok("redis://alice:s3cret@127.0.0.1:7000/2");
  EXPECT_EQ(ep.user, "alice");
  EXPECT_EQ(ep.password, "s3cret");
  EXPECT_EQ(ep.host, "127.0.0.1");
  EXPECT_EQ(ep.port, 7000);
  EXPECT_EQ(ep.db, 2);
}

TEST(EndpointTest, PasswordOnlyForms) {
  endpoint bare = parse_ok("redis://s3cret@127.0.0.1");
  EXPECT_TRUE(bare.user.empty());
  EXPECT_EQ(bare.password, "s3cret");
  endpoint colon = parse_ok("redis://:s3cret@127.0.0.1");
  EXPECT_TRUE(colon.user.empty());
  EXPECT_EQ(colon.password, "s3cret");
}

TEST(EndpointTest, PercentDecodesCredentials) {
  endpoint ep = parse_ok("redis://us%65r%2B1:p%40ss%3Aw%2fo%25rd@host:1234");
  EXPECT_EQ(ep.user, "user+1");
  EXPECT_EQ(ep.password, "p@ss:w/o%rd");
  EXPECT_EQ(ep.host, "host");
  EXPECT_EQ(ep.port, 1234);
  // An escape at the very end of the field.
  EXPECT_EQ(parse_ok("redis://%41@h").password, "A");
}

TEST(EndpointTest, Ipv6Literal) {
  endpoint ep = parse_ok("redis://[::1]:6380");
  EXPECT_EQ(ep.host, "::1");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.to_string(), "[::1]:6380");
  endpoint full = parse_ok("redis://u:p@[fe80::1:2]/4");
  EXPECT_EQ(full.host, "fe80::1:2");
  EXPECT_EQ(full.port, 6379);
  EXPECT_EQ(full.db, 4);
}

TEST(EndpointTest, UnixSocket) {
  endpoint ep = parse_ok("unix:///var/run/redis/redis.sock");
  EXPECT_TRUE(ep.is_unix());
  EXPECT_EQ(ep.socket_path, "/var/run/redis/redis.sock");
  EXPECT_TRUE(ep.host.empty());
  EXPECT_EQ(ep.db, 0);
  EXPECT_EQ(ep.to_string(), "unix:///var/run/redis/redis.sock");

  endpoint with_db = parse_ok("unix:///tmp/r.sock?db=3");
  EXPECT_EQ(with_db.socket_path, "/tmp/r.sock");
  EXPECT_EQ(with_db.db, 3);
}

TEST(EndpointTest, UnixSocketPathMustFitSunPath) {
  // sockaddr_un::sun_path is 108 bytes on Linux, including the terminating NUL.
  const std::string longest = "/" + std::string(106, 's');
  EXPECT_EQ(parse_ok("unix://" + longest).socket_path, longest);
  std::error_code ec;
  parse_endpoint("unix://" + longest + "s", ec);
  EXPECT_EQ(ec, errc::invalid_argument);
}

TEST(EndpointTest, RejectsBadUrlsWithInvalidArgument) {
  const char* bad[] = {
      "",
      "localhost:6379",           // no scheme
      "http://localhost:6379",    // bad scheme
      "REDIS://localhost",        // schemes are lower case here
      "redis://",                 // empty host
      "redis://:6379",            // empty host
      "redis://u:p@",             // empty host after credentials
      "redis://u:p@:6379/1",      // empty host after credentials
      "redis://[]:6379",          // empty IPv6 host
      "redis://[::1",             // unterminated IPv6 literal
      "redis://[::1]6379",        // junk after the literal
      "redis://[::1]:",           // empty port
      "redis://localhost:",       // empty port
      "redis://localhost:0",      // port 0
      "redis://localhost:65536",  // port too large
      "redis://localhost:99999999999999999999",
      "redis://localhost:abc",  // port not a number
      "redis://localhost:-1",
      "redis://localhost:+80",
      "redis://localhost:80x",
      "redis://localhost/abc",  // db junk
      "redis://localhost/-1",
      "redis://localhost/65536",
      "redis://localhost/1x",
      "redis://localhost/1/2",  // trailing junk
      "redis://localhost:6379/0?db=1",
      "redis://localhost?db=1",  // a query is only for unix://
      "redis://localhost#frag",
      "redis://local host",
      "redis://%zz@localhost",   // bad percent escape
      "redis://u:%4@localhost",  // truncated escape
      "redis://u:%@localhost",
      "redis://u%g1:p@localhost",
      "unix://",                    // no path
      "unix://relative/path.sock",  // not absolute
      "unix:///tmp/r.sock?db=",
      "unix:///tmp/r.sock?db=x",
      "unix:///tmp/r.sock?db=1&x=2",
      "unix:///tmp/r.sock?foo=1",
      "unix:///tmp/r.sock?db=-3",
  };
  for (const char* url : bad) {
    std::error_code ec;
    parse_endpoint(url, ec);
    EXPECT_EQ(ec, errc::invalid_argument) << "accepted: " << url;
  }
}

TEST(EndpointTest, ThrowingFormThrowsSystemError) {
  try {
    parse_endpoint("redis://localhost:0");
    FAIL() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
  }
  EXPECT_EQ(parse_endpoint("redis://h:7").port, 7);
}

TEST(EndpointTest, ToStringNeverContainsThePassword) {
  const char* urls[] = {
      "redis://alice:hunter2hunter2@cache:6380/1",
      "redis://hunter2hunter2@cache",
      "redis://:hunter2hunter2@[::1]:7000",
      "redis://bob:hunter2hunter2@10.1.2.3",
  };
  for (const char* url : urls) {
    endpoint ep = parse_ok(url);
    ASSERT_EQ(ep.password, "hunter2hunter2") << url;
    EXPECT_EQ(ep.to_string().find("hunter2"), std::string::npos) << ep.to_string();
  }
  endpoint sentinel_ep = parse_ok("redis-sentinel://:hunter2hunter2@s1,s2/mymaster");
  EXPECT_EQ(sentinel_ep.to_string().find("hunter2"), std::string::npos);
  endpoint unix_ep = parse_ok("unix:///tmp/r.sock");
  unix_ep.password = "hunter2hunter2";
  EXPECT_EQ(unix_ep.to_string().find("hunter2"), std::string::npos);
}

TEST(EndpointTest, SentinelUrls) {
  endpoint ep = parse_ok("redis-sentinel://alice:pw@s1.example:26380,10.0.0.2,[::1]:26381/mymaster/3");
  EXPECT_TRUE(ep.is_sentinel());
  EXPECT_FALSE(ep.is_unix());
  ASSERT_EQ(ep.sentinels.size(), 3u);
  EXPECT_EQ(ep.sentinels[0], (host_port{"s1.example", 26380}));
  EXPECT_EQ(ep.sentinels[1], (host_port{"10.0.0.2", 26379}));  // Sentinel's default port
  EXPECT_EQ(ep.sentinels[2], (host_port{"::1", 26381}));
  EXPECT_EQ(ep.master_name, "mymaster");
  EXPECT_EQ(ep.db, 3);
  EXPECT_EQ(ep.user, "alice");  // the master's credentials
  EXPECT_EQ(ep.password, "pw");
  EXPECT_TRUE(ep.host.empty());
  EXPECT_EQ(ep.to_string(), "redis-sentinel://s1.example:26380,10.0.0.2:26379,[::1]:26381/mymaster");
  EXPECT_EQ(parse_ok("redis-sentinel://s1/my-master.v2_a").master_name, "my-master.v2_a");
  EXPECT_EQ(parse_ok("redis-sentinel://s1/m").db, 0);
  EXPECT_FALSE(parse_ok("redis://h").is_sentinel());
}

TEST(EndpointTest, BadSentinelUrls) {
  const char* urls[] = {
      "redis-sentinel://s1:26379",            // no master name
      "redis-sentinel://s1:26379/",           // an empty one
      "redis-sentinel:///mymaster",           // no sentinel
      "redis-sentinel://s1,,s2/mymaster",     // an empty one among them
      "redis-sentinel://s1,/mymaster",
      "redis-sentinel://s1:0/mymaster",       // port out of range
      "redis-sentinel://s1:70000/mymaster",
      "redis-sentinel://s1/my master",        // a name Sentinel commands cannot carry
      "redis-sentinel://s1/m\r\nFLUSHALL",
      "redis-sentinel://s1/mymaster/x",       // db not a number
      "redis-sentinel://s1/mymaster/1/2",     // trailing junk
      "rediss-sentinel://s1/mymaster",        // no TLS for Sentinel
  };
  for (const char* url : urls) {
    std::error_code ec;
    parse_endpoint(url, ec);
    EXPECT_EQ(ec, errc::invalid_argument) << url;
  }
}

TEST(EndpointTest, ClusterUrls) {
  endpoint ep = parse_ok("redis-cluster://alice:pw@n1.example:7000,10.0.0.2,[::1]:7002");
  EXPECT_TRUE(ep.is_cluster());
  EXPECT_FALSE(ep.is_sentinel());
  EXPECT_FALSE(ep.tls);
  ASSERT_EQ(ep.seeds.size(), 3u);
  EXPECT_EQ(ep.seeds[0], (host_port{"n1.example", 7000}));
  EXPECT_EQ(ep.seeds[1], (host_port{"10.0.0.2", 6379}));  // Redis's default port
  EXPECT_EQ(ep.seeds[2], (host_port{"::1", 7002}));
  EXPECT_EQ(ep.user, "alice");  // every node's credentials
  EXPECT_EQ(ep.password, "pw");
  EXPECT_TRUE(ep.host.empty());
  EXPECT_EQ(ep.to_string(), "redis-cluster://n1.example:7000,10.0.0.2:6379,[::1]:7002");
  EXPECT_EQ(ep.seeds[2].to_string(), "[::1]:7002");
  EXPECT_EQ(ep.seeds[1].to_string(), "10.0.0.2:6379");
  EXPECT_EQ(ep.to_string().find("pw"), std::string::npos);
  endpoint secure = parse_ok("rediss-cluster://n1:7000");
  EXPECT_TRUE(secure.is_cluster());
  EXPECT_TRUE(secure.tls);
  EXPECT_EQ(secure.to_string(), "rediss-cluster://n1:7000");
  EXPECT_FALSE(parse_ok("redis://h").is_cluster());
}

TEST(EndpointTest, BadClusterUrls) {
  const char* urls[] = {
      "redis-cluster://",           // no seed
      "redis-cluster://n1,,n2",     // an empty one among them
      "redis-cluster://n1,",
      "redis-cluster://n1:0",       // port out of range
      "redis-cluster://n1/1",       // a cluster has database 0 only
      "redis-cluster://n1/",
      "redis-cluster://n1?db=1",
  };
  for (const char* url : urls) {
    std::error_code ec;
    parse_endpoint(url, ec);
    EXPECT_EQ(ec, errc::invalid_argument) << url;
  }
}

}  // namespace
}  // namespace dlock
