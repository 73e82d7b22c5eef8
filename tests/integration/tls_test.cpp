// SPDX-License-Identifier: Apache-2.0
// rediss:// against real TLS redis-server processes, with throwaway certificates made by the
// `openssl` command for each run: the right certificate works (commands, locks, wake-ups, mutual
// TLS); a trusted certificate for another host name, an untrusted one and a missing or untrusted
// client certificate are refused with errc::tls_error and OpenSSL's reason; a plain client on a
// TLS port and a TLS client on a plain port get a clear error quickly; secrets stay out of errors.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/error.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/mutex.hpp"
#include "support/checks.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// Runs a shell command line, its output into <dir>/openssl.log; at most 30 s.
bool sh(const std::string& dir, const std::string& line) {
  test::child_process p({"/bin/sh", "-c", "{ " + line + "; } >>" + dir + "/openssl.log 2>&1"});
  return p.wait(30s) == 0;
}

// A throwaway PKI: a CA; "server" (DNS:localhost, IP:127.0.0.1) and "other" (another host
// name and address) signed by it; "client" for mutual TLS signed by it; "untrusted",
// self-signed for localhost. P-256 keys: quick to make and quiet.
class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dlock-tls-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    ASSERT_TRUE(sh(dir_, "cd " + dir_ + " && openssl req -x509 " + key +
                             " -keyout ca.key -out ca.crt -days 2 -subj /CN=dlock-test-ca"))
        << log();
    sign("server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1", 1);
    sign("other", "/CN=redis.other.test", "subjectAltName=DNS:redis.other.test,IP:10.11.12.13", 2);
    sign("client", "/CN=dlock-client", "extendedKeyUsage=clientAuth", 3);
    ASSERT_TRUE(sh(dir_, "cd " + dir_ + " && openssl req -x509 " + key +
                             " -keyout untrusted.key -out untrusted.crt -days 2 -subj /CN=localhost"
                             " -addext subjectAltName=DNS:localhost,IP:127.0.0.1"))
        << log();
  }

  static void TearDownTestSuite() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  static void sign(const std::string& name, const std::string& subject, const std::string& ext,
                   int serial) {
    std::ofstream(dir_ + "/" + name + ".ext") << ext << "\n";
    ASSERT_TRUE(sh(dir_, "cd " + dir_ +
                             " && openssl req -new -newkey ec -pkeyopt "
                             "ec_paramgen_curve:prime256v1 -nodes -keyout " +
                             name + ".key -out " + name + ".csr -subj " + subject +
                             " && openssl x509 -req -in " + name +
                             ".csr -CA ca.crt -CAkey ca.key -set_serial " + std::to_string(serial) +
                             " -days 2 -extfile " + name + ".ext -out " + name + ".crt"))
        << log();
  }

  static std::string log() {
    std::ifstream in(dir_ + "/openssl.log");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  static std::string file(const std::string& name) { return dir_ + "/" + name; }

  // A TLS-only server presenting `cert`; with `auth_clients` it demands a client certificate.
  static server_options tls_server(const std::string& cert, bool auth_clients = false) {
    server_options o;
    o.tls = {"--tls-cert-file",    file(cert + ".crt"),        "--tls-key-file",
             file(cert + ".key"),  "--tls-ca-cert-file",       file("ca.crt"),
             "--tls-auth-clients", auth_clients ? "yes" : "no"};
    return o;
  }

  // Timeouts far above the bounds the tests put on a refusal, which must come without them.
  static client_options patient() {
    client_options o;
    o.connect_timeout = test::scaled(4s);
    o.request_timeout = test::scaled(6s);
    return o;
  }

  static client_options trusting_ca() {
    client_options o = patient();
    o.tls.ca_file = file("ca.crt");
    return o;
  }

  static std::string rediss(const std::string& host, unsigned short port) {
    return "rediss://" + host + ":" + std::to_string(port);
  }

  // One PING: its error code, the reply's text (the reason, for errors) and the time taken.
  struct ping_result {
    std::error_code ec;
    std::string text;
    milliseconds took;
  };
  static ping_result ping(client& c) {
    auto t0 = steady::now();
    auto f = std::async(std::launch::async, [&] {
      std::error_code ec;
      reply r = c.exec({"PING"}, ec);
      return std::make_pair(ec, r.str());
    });
    if (f.wait_for(test::scaled(10s)) != std::future_status::ready) {
      ADD_FAILURE() << "PING did not complete within " << test::scaled(10s).count() << " ms";
      std::terminate();  // the future's destructor would wait forever
    }
    auto [ec, text] = f.get();
    return {ec, text, std::chrono::duration_cast<milliseconds>(steady::now() - t0)};
  }

  static std::string dir_;
};

std::string TlsTest::dir_;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST_F(TlsTest, ParsesRedissUrls) {
  endpoint ep = parse_endpoint("rediss://localhost");
  EXPECT_TRUE(ep.tls);
  EXPECT_EQ(ep.port, 6379);
  EXPECT_EQ(ep.host, "localhost");
  ep = parse_endpoint("rediss://app:s%3Acret@cache.internal:6380/2");
  EXPECT_TRUE(ep.tls);
  EXPECT_EQ(ep.user, "app");
  EXPECT_EQ(ep.password, "s:cret");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.db, 2);
  EXPECT_FALSE(contains(ep.to_string(), "cret"));
  EXPECT_FALSE(parse_endpoint("redis://localhost").tls);
  std::error_code ec;
  parse_endpoint("redisss://localhost", ec);
  EXPECT_EQ(ec, errc::invalid_argument);
}

TEST_F(TlsTest, TrustedCertificateForTheHostWorks) {
  redis_server server{tls_server("server")};
  client by_name{rediss("localhost", server.port()), trusting_ca()};
  EXPECT_EQ(by_name.exec({"PING"}).str(), "PONG");
  EXPECT_EQ(by_name.exec({"SET", test_key(), "over tls"}).str(), "OK");
  EXPECT_EQ(by_name.exec({"GET", test_key()}).str(), "over tls");
  // An IP literal is checked against the certificate's IP SANs.
  client by_address{rediss("127.0.0.1", server.port()), trusting_ca()};
  EXPECT_EQ(by_address.exec({"GET", test_key()}).str(), "over tls");
  // Larger than one TLS record (16 KiB) both ways, pipelined.
  std::string big(100'000, 'x');
  command cmd{"SET", test_key("big"), big};
  cmd.then({"GET", test_key("big")});
  reply r = by_name.exec(cmd);
  ASSERT_TRUE(r.is_array());
  EXPECT_EQ(r.elements()[1].str(), big);
}

TEST_F(TlsTest, LocksWorkOverTls) {
  redis_server server{tls_server("server")};
  client node{rediss("localhost", server.port()), trusting_ca()};
  mutex a{node, test_key()};
  mutex b{node, test_key()};
  ASSERT_TRUE(a.try_lock()) << a.last_error().message();
  EXPECT_GT(a.current_lease()->fencing_token(), 0u);
  EXPECT_FALSE(b.try_lock());
  EXPECT_EQ(b.last_error(), errc::not_acquired);
  a.unlock();
  EXPECT_FALSE(a.last_error()) << a.last_error().message();

  lease l = b.acquire();
  EXPECT_FALSE(l.extend(5s)) << "extend over TLS";
  EXPECT_FALSE(l.release());
}

// A cluster over TLS (rediss-cluster://; the bus and replication on TLS too): the slot map
// names each master's TLS port, and every request, lock, copy and wake-up goes over it, on the
// master of its slot. A client that does not trust the nodes' CA gets tls_error.
TEST_F(TlsTest, ClusterOverTls) {
  test::redis_cluster cluster{{.tls = {"--tls-cert-file", file("server.crt"), "--tls-key-file",
                                       file("server.key"), "--tls-ca-cert-file", file("ca.crt"),
                                       "--tls-auth-clients", "optional"}}};
  const std::string url = "rediss-cluster://127.0.0.1:" + std::to_string(cluster.tls_port(0));
  client c{url, trusting_ca()}, other{url, trusting_ca()};
  for (int m = 0; m < 3; ++m) {
    auto key = test::key_in_slot(cluster.slots_of(m).at(100), test_key() + ":");
    // A backstop (and a hold) far longer than the bound below: only a wake-up over TLS brings
    // the rival in quickly.
    const auto ttl = test::scaled(60s);
    mutex lock{c, key, {.ttl = ttl}};
    mutex rival{other, key, {.ttl = ttl, .retry_delay = test::scaled(10s)}};
    auto l = lock.acquire();
    EXPECT_EQ(test::raw_command_complete(cluster.node(m).port(), "EXISTS " + key), ":1\r\n")
        << "the lock is not on master " << m;
    steady::time_point released_at;
    std::thread releaser([&] {
      EXPECT_TRUE(eventually([&] {
        return test::raw_command_complete(cluster.node(m).port(),
                                          "ZCARD " + lock_keys_for(key).waiters) == ":1\r\n";
      })) << "the rival never queued (and subscribed)";
      released_at = steady::now();
      EXPECT_FALSE(l.release());
    });
    std::error_code ec;
    auto next = rival.acquire_until(steady::now() + test::scaled(30s), ec);
    releaser.join();
    ASSERT_TRUE(next) << ec.message();
    EXPECT_LT(steady::now() - released_at, test::scaled(1s))
        << "woken by the backstop, not over TLS";
    EXPECT_FALSE(next.release());
  }
  mutex copies{c, test_key(), {.ttl = 10s, .copies = 3}};
  auto held = copies.acquire();
  EXPECT_FALSE(held.extend());
  EXPECT_FALSE(held.release());

  client_options untrusting = trusting_ca();
  untrusting.tls.ca_file = file("untrusted.crt");
  client stranger{url, untrusting};
  std::error_code ec;
  auto refused = stranger.exec({"GET", test_key()}, ec);
  EXPECT_EQ(ec, errc::tls_error) << ec.message() << ": " << refused.to_string();
}

// The waiter's wake-up inbox is a second connection, over TLS as well.
TEST_F(TlsTest, ReleaseWakesAWaiterOverTls) {
  redis_server server{tls_server("server")};
  client node{rediss("localhost", server.port()), trusting_ca()};
  // A hold and a backstop far longer than a wake-up takes, however slow the build.
  mutex holder{node, test_key(), {.ttl = test::scaled(120s)}};
  mutex waiter{node, test_key(), {.retry_delay = test::scaled(12s)}};
  ASSERT_TRUE(holder.try_lock());
  auto acquired = std::async(std::launch::async, [&] {
    bool ok = waiter.try_lock_for(test::scaled(30s));
    auto at = steady::now();
    if (ok) waiter.unlock();
    return std::make_pair(ok, at);
  });
  ASSERT_TRUE(eventually([&] {
    return node.exec({"ZCARD", "{" + test_key() + "}:waiters"}).integer() >= 1;
  })) << "the waiter never queued";
  auto released = steady::now();
  holder.unlock();
  ASSERT_EQ(acquired.wait_for(test::scaled(40s)), std::future_status::ready);
  auto [ok, at] = acquired.get();
  EXPECT_TRUE(ok);
  EXPECT_LT(at - released, test::scaled(2s))
      << "woken by the release, not by its backstop (half a retry_delay at the soonest)";
}

TEST_F(TlsTest, TrustedCertificateForAnotherHostIsRejected) {
  redis_server server{tls_server("other")};
  client by_name{rediss("localhost", server.port()), trusting_ca()};
  auto r = ping(by_name);
  EXPECT_EQ(r.ec, errc::tls_error) << r.ec.message();
  EXPECT_TRUE(contains(r.text, "hostname mismatch")) << r.text;
  EXPECT_TRUE(contains(r.text, "'localhost'")) << r.text;
  // Again at once (during the reconnect backoff, or on a new attempt): the same verdict.
  r = ping(by_name);
  EXPECT_EQ(r.ec, errc::tls_error) << r.ec.message();
  EXPECT_TRUE(contains(r.text, "hostname mismatch")) << r.text;

  client by_address{rediss("127.0.0.1", server.port()), trusting_ca()};
  r = ping(by_address);
  EXPECT_EQ(r.ec, errc::tls_error) << r.ec.message();
  EXPECT_TRUE(contains(r.text, "IP address mismatch")) << r.text;

  // A lock over it fails at once, with the reason in the node's result.
  mutex m{by_name, test_key()};
  std::error_code ec;
  node_results nodes;
  auto t0 = steady::now();
  lease l = m.acquire(&nodes, ec);
  EXPECT_FALSE(l);
  EXPECT_EQ(ec, errc::tls_error) << ec.message();
  EXPECT_LT(steady::now() - t0, test::scaled(1s)) << "a TLS verdict is not retried";
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_TRUE(contains(nodes[0].message, "hostname mismatch")) << nodes[0].message;

  // The name the certificate does carry can be named instead (and is then verified).
  client_options named = trusting_ca();
  named.tls.server_name = "redis.other.test";
  client overridden{rediss("127.0.0.1", server.port()), named};
  EXPECT_EQ(ping(overridden).text, "PONG");
  named.tls.server_name = "10.11.12.13";
  client by_other_address{rediss("localhost", server.port()), named};
  EXPECT_EQ(ping(by_other_address).text, "PONG");
}

TEST_F(TlsTest, UntrustedCertificateIsRejected) {
  redis_server self_signed{tls_server("untrusted")};
  client c{rediss("localhost", self_signed.port()), trusting_ca()};
  auto r = ping(c);
  EXPECT_EQ(r.ec, errc::tls_error) << r.ec.message();
  EXPECT_TRUE(contains(r.text, "self-signed certificate") ||
              contains(r.text, "self signed certificate"))
      << r.text;

  // Without ca_file the system's store is used: it does not know the test CA either.
  redis_server server{tls_server("server")};
  client_options system_store = trusting_ca();
  system_store.tls.ca_file.clear();
  client d{rediss("localhost", server.port()), system_store};
  r = ping(d);
  EXPECT_EQ(r.ec, errc::tls_error) << r.ec.message();
  // (The server sends the CA along with its certificate: OpenSSL builds the chain.)
  EXPECT_TRUE(contains(r.text, "self-signed certificate in certificate chain") ||
              contains(r.text, "unable to get local issuer certificate"))
      << r.text;
}

// With ca_file empty the system store is used, and OpenSSL lets SSL_CERT_FILE replace it (the
// way to give the `dlock` command a private CA).
TEST_F(TlsTest, SystemStoreHonoursSslCertFile) {
  redis_server server{tls_server("server")};
  client_options system_store = trusting_ca();
  system_store.tls.ca_file.clear();
  ASSERT_EQ(::setenv("SSL_CERT_FILE", file("ca.crt").c_str(), 1), 0);
  client c{rediss("localhost", server.port()), system_store};  // the store is read here
  ::unsetenv("SSL_CERT_FILE");
  EXPECT_EQ(ping(c).text, "PONG");
}

TEST_F(TlsTest, MutualTlsWorksWithAClientCertificate) {
  redis_server server{tls_server("server", true)};
  client_options with_cert = trusting_ca();
  with_cert.tls.cert_file = file("client.crt");
  with_cert.tls.key_file = file("client.key");
  client c{rediss("localhost", server.port()), with_cert};
  EXPECT_EQ(ping(c).text, "PONG");
  mutex m{c, test_key()};
  ASSERT_TRUE(m.try_lock()) << m.last_error().message();
  m.unlock();
  EXPECT_FALSE(m.last_error());
}

TEST_F(TlsTest, MutualTlsFailsWithoutAClientCertificate) {
  redis_server server{tls_server("server", true)};
  client c{rediss("localhost", server.port()), trusting_ca()};
  auto r = ping(c);
  EXPECT_EQ(r.ec, errc::tls_error) << r.ec.message() << ": " << r.text;
  EXPECT_TRUE(contains(r.text, "certificate")) << r.text;
  EXPECT_LT(r.took, test::scaled(1500ms));

  // A client certificate the server's CA did not issue is refused too.
  client_options foreign = trusting_ca();
  foreign.tls.cert_file = file("untrusted.crt");
  foreign.tls.key_file = file("untrusted.key");
  client d{rediss("localhost", server.port()), foreign};
  r = ping(d);
  EXPECT_EQ(r.ec, errc::tls_error) << r.ec.message() << ": " << r.text;
  EXPECT_TRUE(contains(r.text, "certificate")) << r.text;
}

TEST_F(TlsTest, PlainClientOnTheTlsPortGetsAClearError) {
  redis_server server{tls_server("server")};
  client plain{"redis://127.0.0.1:" + std::to_string(server.port()), patient()};
  auto r = ping(plain);
  EXPECT_TRUE(r.ec == errc::connection_lost || r.ec == errc::node_unreachable) << r.ec.message();
  EXPECT_TRUE(contains(r.text, "use rediss://")) << r.text;
  EXPECT_LT(r.took, test::scaled(1s))
      << "the server resets the connection: no waiting for a timeout";

  // With a password the reset hits the AUTH of the log-in: a failed connect, same advice.
  client_options with_password = patient();
  with_password.password = "secret";
  client logging_in{"redis://127.0.0.1:" + std::to_string(server.port()), with_password};
  r = ping(logging_in);
  EXPECT_EQ(r.ec, errc::node_unreachable) << r.ec.message();
  EXPECT_TRUE(contains(r.text, "use rediss://")) << r.text;
  EXPECT_LT(r.took, test::scaled(1s));
}

TEST_F(TlsTest, TlsClientOnAPlainPortGetsAClearError) {
  redis_server plain;  // the fixture's plain port
  client_options o = trusting_ca();
  o.connect_timeout = 300ms;  // the plain server waits silently for the rest of a "command"
  client c{rediss("localhost", plain.port()), o};
  auto r = ping(c);
  EXPECT_TRUE(r.ec == errc::node_unreachable || r.ec == errc::timeout || r.ec == errc::tls_error)
      << r.ec.message();
  EXPECT_TRUE(contains(r.text, "TLS")) << r.text;
  EXPECT_TRUE(contains(r.text, "plain redis:// port") || contains(r.text, "does not speak TLS"))
      << r.text;
  EXPECT_LT(r.took, o.connect_timeout + test::scaled(1200ms));
}

// A TLS connection is ready once the server has answered; a user without +ping still connects.
TEST_F(TlsTest, ProbeNeedsNoPingPermission) {
  redis_server server{tls_server("server")};
  client admin{rediss("localhost", server.port()), trusting_ca()};
  admin.exec({"ACL", "SETUSER", "default", "-ping"});
  client c{rediss("localhost", server.port()), trusting_ca()};
  std::error_code ec;
  EXPECT_EQ(c.exec({"SET", test_key(), "1"}, ec).str(), "OK") << ec.message();
  EXPECT_EQ(c.exec({"PING"}, ec).str().rfind("NOPERM", 0), 0u);
  EXPECT_EQ(ec, errc::no_permission);
}

TEST_F(TlsTest, UnloadableFilesFailAtConstruction) {
  auto code_of = [](client_options o) -> std::pair<std::error_code, std::string> {
    try {
      client c{"rediss://localhost:6379", std::move(o)};
    } catch (const std::system_error& e) {
      return {e.code(), e.what()};
    }
    return {};
  };
  client_options missing_ca = trusting_ca();
  missing_ca.tls.ca_file = file("no-such-ca.crt");
  auto [ec, what] = code_of(missing_ca);
  EXPECT_EQ(ec, errc::tls_error);
  EXPECT_TRUE(contains(what, "no-such-ca.crt")) << what;

  client_options mismatched = trusting_ca();
  mismatched.tls.cert_file = file("client.crt");
  mismatched.tls.key_file = file("server.key");
  std::tie(ec, what) = code_of(mismatched);
  EXPECT_EQ(ec, errc::tls_error);
  EXPECT_TRUE(contains(what, "mismatch") || contains(what, "does not match")) << what;

  client_options key_only = trusting_ca();
  key_only.tls.key_file = file("client.key");
  std::tie(ec, what) = code_of(key_only);
  EXPECT_EQ(ec, errc::invalid_argument) << what;

  // Plain endpoints never read the TLS files.
  client plain{"redis://localhost:6379", missing_ca};
}

TEST_F(TlsTest, SecretsStayOutOfErrors) {
  const std::string secret = "s3cr3t-hunter2";
  auto check = [&](const std::string& text) {
    EXPECT_FALSE(contains(text, secret)) << "the password leaked into: " << text;
  };
  // A TLS failure with credentials in the URL and in the options.
  redis_server other{tls_server("other")};
  client_options o = trusting_ca();
  o.password = secret;
  client c{"rediss://app:" + secret + "@localhost:" + std::to_string(other.port()), o};
  check(c.where().to_string());
  auto r = ping(c);
  EXPECT_EQ(r.ec, errc::tls_error);
  check(r.text);
  try {
    c.exec({"PING"});
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    check(e.what());
  }
  mutex m{c, test_key()};
  std::error_code ec;
  node_results nodes;
  (void)m.acquire(&nodes, ec);
  check(ec.message());
  for (const auto& n : nodes) check(n.node + " " + n.message + " " + to_string(n));

  // A refused password over a working TLS session.
  auto args = tls_server("server");
  args.extra = {"--requirepass", "the-right-one"};
  redis_server locked{args};
  client_options wrong = trusting_ca();
  wrong.password = secret;
  client d{rediss("localhost", locked.port()), wrong};
  r = ping(d);
  EXPECT_EQ(r.ec, errc::auth_failed) << r.ec.message();
  EXPECT_TRUE(contains(r.text, "WRONGPASS")) << r.text;
  check(r.text);
}

// The `dlock` command's TLS flags reach the library: with --tls-ca it verifies against the
// private CA and runs CMD under the lock; without it the system store refuses the certificate
// (exit 69, OpenSSL's reason in the message); a CA file that cannot be read is a usage error.
TEST_F(TlsTest, TheCommandLineToolSpeaksTlsWithItsFlags) {
  redis_server server{tls_server("server", /*auth_clients=*/true)};
  std::string url = rediss("localhost", server.port());
  auto dlock = [&](const std::string& flags, const std::string& out) {
    std::string line = std::string(DLOCK_CLI_PATH) + " -r " + url + " --request-timeout 2s " +
                       flags + " run " + test_key() + " -- /bin/sh -c 'echo held' >" + file(out) +
                       " 2>&1";
    test::child_process p({"/bin/sh", "-c", line});
    int status = p.wait(30s);
    std::ifstream in(file(out));
    return std::make_pair(status, std::string(std::istreambuf_iterator<char>(in), {}));
  };
  auto [ok, ok_text] = dlock("--tls-ca " + file("ca.crt") + " --tls-cert " + file("client.crt") +
                                 " --tls-key " + file("client.key"),
                             "cli-ok.txt");
  EXPECT_EQ(ok, 0) << ok_text;
  EXPECT_EQ(ok_text, "held\n");
  auto [untrusted, untrusted_text] = dlock("", "cli-untrusted.txt");
  EXPECT_EQ(untrusted, 69) << untrusted_text;
  EXPECT_NE(untrusted_text.find("certificate"), std::string::npos) << untrusted_text;
  auto [no_cert, no_cert_text] = dlock("--tls-ca " + file("ca.crt"), "cli-no-cert.txt");
  EXPECT_EQ(no_cert, 69) << no_cert_text;
  EXPECT_NE(no_cert_text.find("client certificate"), std::string::npos) << no_cert_text;
  auto [missing, missing_text] = dlock("--tls-ca " + file("nope.crt"), "cli-missing.txt");
  EXPECT_EQ(missing, 64) << missing_text;
  EXPECT_NE(missing_text.find("--tls-ca"), std::string::npos) << missing_text;
}

}  // namespace
}  // namespace dlock::test
