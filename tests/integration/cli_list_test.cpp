// SPDX-License-Identifier: Apache-2.0
// `dlock list [PATTERN]` (tools/dlock-cli/list.cpp) against real redis-servers: each kind of
// name with its holders, waiters and expiry, held through the library; user data never listed;
// PATTERN and the bounds; the JSON form parsed; a node that does not answer or refuses the
// user fails the list (69, 77) instead of shortening it; a Redis Cluster walked master by
// master. The built CLI runs as a child process (DLOCK_CLI_PATH); every wait is bounded.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "dlock/election.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/latch.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "dlock/shared_mutex.hpp"
#include "support/checks.hpp"
#include "support/dlock_cli.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/test_keys.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct cli_result {
  int status = -1;
  std::string out, err;
};

// Runs `dlock args...` with stdin from /dev/null and without our DLOCK_* environment; -1 when it
// does not end within scaled(20 s) (it is killed then).
cli_result run_dlock(std::vector<std::string> args) {
  char tmpl[] = "/tmp/dlock-list-test-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp");
  const fs::path dir = tmpl, out = dir / "out", err = dir / "err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = spawn_cli(std::move(args), {}, fa);
  posix_spawn_file_actions_destroy(&fa);
  if (pid < 0) throw std::runtime_error("cannot start " DLOCK_CLI_PATH);
  cli_result r;
  const auto until = steady::now() + test::scaled(20s);
  for (int status = 0;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (steady::now() >= until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  r.out = read_file(out);
  r.err = read_file(err);
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return r;
}

// ---- a small JSON reader: --json must parse, and the tests read its fields
// ----

struct json;
using json_object = std::map<std::string, json>;
using json_array = std::vector<json>;
struct json {
  std::variant<std::nullptr_t, bool, double, std::string, json_array, json_object> v;
  bool is_null() const { return std::holds_alternative<std::nullptr_t>(v); }
  const json_object& object() const { return std::get<json_object>(v); }
  const json_array& array() const { return std::get<json_array>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  double number() const { return std::get<double>(v); }
  bool boolean() const { return std::get<bool>(v); }
  const json& operator[](const std::string& k) const { return object().at(k); }
  bool has(const std::string& k) const { return object().contains(k); }
};

class json_reader {
 public:
  explicit json_reader(std::string_view text) : s_(text) {}
  // The one value the text holds; throws std::runtime_error on anything else.
  json document() {
    json value = read();
    skip();
    if (at_ != s_.size()) fail("text after the value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw std::runtime_error("JSON: " + why + " at " + std::to_string(at_));
  }
  void skip() {
    while (at_ < s_.size() && std::string_view(" \t\r\n").find(s_[at_]) != std::string_view::npos)
      ++at_;
  }
  bool take(char c) {
    skip();
    if (at_ < s_.size() && s_[at_] == c) return ++at_, true;
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }
  bool word(std::string_view w) {
    if (s_.substr(at_, w.size()) != w) return false;
    at_ += w.size();
    return true;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (at_ < s_.size() && s_[at_] != '"') {
      char c = s_[at_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) fail("cut escape");
      char e = s_[at_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
          if (at_ + 4 > s_.size()) fail("cut \\u");
          unsigned cp = std::stoul(std::string(s_.substr(at_, 4)), nullptr, 16);
          at_ += 4;
          out += static_cast<char>(cp < 0x80 ? cp : '?');
          break;
        }
        default:
          fail("bad escape");
      }
    }
    if (at_ >= s_.size()) fail("unterminated string");
    ++at_;
    return out;
  }
  json read() {
    skip();
    if (at_ >= s_.size()) fail("no value");
    char c = s_[at_];
    if (c == '{') {
      ++at_;
      json_object o;
      if (take('}')) return {o};
      do {
        std::string k = string();
        expect(':');
        o.emplace(k, read());
      } while (take(','));
      expect('}');
      return {o};
    }
    if (c == '[') {
      ++at_;
      json_array a;
      if (take(']')) return {a};
      do a.push_back(read());
      while (take(','));
      expect(']');
      return {a};
    }
    if (c == '"') return {string()};
    if (word("null")) return {nullptr};
    if (word("true")) return {true};
    if (word("false")) return {false};
    std::size_t used = 0;
    double d = 0;
    try {
      d = std::stod(std::string(s_.substr(at_, 40)), &used);
    } catch (const std::exception&) {
      fail("bad value");
    }
    at_ += used;
    return {d};
  }
  std::string_view s_;
  std::size_t at_ = 0;
};

json parse_json(const std::string& text) { return json_reader(text).document(); }

// The entry of `name` and `kind` in a parsed list, or null.
const json* entry_of(const json& list, const std::string& name, const std::string& kind) {
  for (const auto& e : list.array()) {
    if (e["name"].str() == name && e["kind"].str() == kind) return &e;
  }
  return nullptr;
}

// The text line that starts with `name` and a space, or "".
std::string line_of(const std::string& out, const std::string& name) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(name + " ")) return line;
  }
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class CliListTest : public ::testing::Test {
 protected:
  std::string raw(const std::string& cmd) { return test::raw_command(server_.port(), cmd); }
  std::size_t queued(const std::string& zset) {
    auto r = raw("ZCARD " + zset);
    return r.size() > 1 && r[0] == ':' ? std::stoul(r.substr(1)) : 0;
  }
  // Everything this test names starts with it.
  std::string prefix() const { return test_key(""); }
  redis_server server_;
};

// Each kind, held through the library, shows with its holders, waiters and expiry; the JSON form
// says the same; user data and a counter nobody waits on are not listed.
TEST_F(CliListTest, ListsEachKindWithItsHoldersWaitersAndExpiry) {
  const std::string p = prefix();
  const std::string lock_name = p + "lock", rw_name = p + "rw", sem_name = p + "sem",
                    latch_name = p + "latch", idle_latch = p + "idle-latch",
                    elect_name = p + "elect";
  client node{server_.url()};
  mutex lock{node, lock_name, {.ttl = 30s}};
  lease held = lock.acquire();
  mutex second{node, lock_name, {.ttl = 30s}};
  auto waiter = std::async(std::launch::async, [&] {
    std::error_code ec;
    return second.acquire_until(steady::now() + test::scaled(20s), ec);
  });
  ASSERT_TRUE(eventually([&] { return queued(lock_keys_for(lock_name).waiters) == 1; }));

  shared_mutex rw{node, rw_name, {.ttl = 30s}};
  lease reader1 = rw.acquire_shared(), reader2 = rw.acquire_shared();
  semaphore sem{node, sem_name, 3, {.ttl = 30s}};
  lease permit1 = sem.acquire(), permit2 = sem.acquire();
  latch counting{node, latch_name}, idle{node, idle_latch};
  std::error_code ec;
  ASSERT_TRUE(counting.try_set_count(2, ec)) << ec.message();
  ASSERT_TRUE(idle.try_set_count(5, ec)) << ec.message();
  auto latch_waiter = std::async(std::launch::async, [&] {
    std::error_code ec;
    return counting.wait_for(test::scaled(20s), ec);
  });
  ASSERT_TRUE(eventually([&] {
    return raw("PUBSUB NUMSUB " + latch_channel(latch_name)).find(":1\r\n") != std::string::npos;
  }));
  election elect{node, elect_name, "host-a:8080", {.lock = {.ttl = 30s}}};
  lease leading = elect.campaign();
  // User data under the same prefix: a string, a counter with a TTL, a random token with a TTL (as
  // another program's cache or session would be), a hash.
  ASSERT_EQ(raw("SET " + p + "user-string hello").rfind("+OK", 0), 0u);
  ASSERT_EQ(raw("SET " + p + "user-counter 5 PX 60000").rfind("+OK", 0), 0u);
  ASSERT_EQ(raw("SET " + p + "user-token 6f9c2a1d7e PX 60000").rfind("+OK", 0), 0u);
  ASSERT_EQ(raw("HSET " + p + "user-hash a b").rfind(":1", 0), 0u);

  auto text = run_dlock({"-r", server_.url(), "list", p + "*"});
  EXPECT_EQ(text.status, 0) << text.out << text.err;
  auto line = line_of(text.out, lock_name);
  EXPECT_TRUE(contains(line, " lock ")) << text.out;
  EXPECT_TRUE(contains(line, "held by owner " + held.value())) << line;
  EXPECT_TRUE(contains(line, "expires in ")) << line;
  EXPECT_TRUE(contains(line, "1 waiter")) << line;
  line = line_of(text.out, rw_name);
  EXPECT_TRUE(contains(line, "read-write lock  held by 2 readers, the first expires in "))
      << text.out;
  line = line_of(text.out, sem_name);
  EXPECT_TRUE(contains(line, " semaphore ")) << text.out;
  // The limit shows once the holders mark the name (semaphore_mark); the count always does.
  EXPECT_TRUE(contains(line, "2 of 3 permits held by 2 holders") ||
              contains(line, "2 permits held by 2 holders"))
      << line;
  EXPECT_TRUE(contains(line, "0 waiters")) << line;
  line = line_of(text.out, latch_name);
  EXPECT_TRUE(contains(line, "latch            count 2, expires in ")) << text.out;
  EXPECT_TRUE(contains(line, "1 waiter")) << line;
  line = line_of(text.out, elect_name);
  EXPECT_TRUE(contains(line, "election         led by term ")) << text.out;
  EXPECT_TRUE(contains(line, "(host-a:8080)")) << line;
  for (const char* user : {"user-string", "user-counter", "user-token", "user-hash"}) {
    EXPECT_FALSE(contains(text.out, p + user)) << user << " listed:\n" << text.out;
  }
  EXPECT_FALSE(contains(text.out, idle_latch)) << "a count nobody waits on is no sure latch";
  // The list only reads: the lock's waiter still queues, and nothing was written.
  EXPECT_EQ(queued(lock_keys_for(lock_name).waiters), 1u);

  auto json_run = run_dlock({"-r", server_.url(), "list", "--json", p + "*"});
  EXPECT_EQ(json_run.status, 0) << json_run.err;
  json list;
  ASSERT_NO_THROW(list = parse_json(json_run.out)) << json_run.out;
  ASSERT_EQ(list.array().size(), 5u) << json_run.out;
  const json* l = entry_of(list, lock_name, "lock");
  ASSERT_TRUE(l) << json_run.out;
  EXPECT_TRUE((*l)["held"].boolean());
  EXPECT_EQ((*l)["token"].str(), held.value());
  EXPECT_EQ((*l)["waiters"].number(), 1);
  EXPECT_GT((*l)["expires_in_ms"].number(), 0);
  EXPECT_LE((*l)["expires_in_ms"].number(), 30000);
  const json* r = entry_of(list, rw_name, "read_write_lock");
  ASSERT_TRUE(r) << json_run.out;
  EXPECT_EQ((*r)["mode"].str(), "read");
  EXPECT_EQ((*r)["holders"].array().size(), 2u);
  const json* s = entry_of(list, sem_name, "semaphore");
  ASSERT_TRUE(s) << json_run.out;
  EXPECT_EQ((*s)["in_use"].number(), 2);
  EXPECT_FALSE((*s)["fair"].boolean());
  EXPECT_TRUE((*s)["limit"].is_null() || (*s)["limit"].number() == 3) << json_run.out;
  const json* lt = entry_of(list, latch_name, "latch");
  ASSERT_TRUE(lt) << json_run.out;
  EXPECT_EQ((*lt)["count"].number(), 2);
  EXPECT_EQ((*lt)["waiters"].number(), 1);
  EXPECT_EQ((*lt)["identified_by"].str(), "waiters");
  const json* e = entry_of(list, elect_name, "election");
  ASSERT_TRUE(e) << json_run.out;
  EXPECT_EQ((*e)["value"].str(), "host-a:8080");
  EXPECT_EQ((*e)["term"].number(), static_cast<double>(leading.fencing_token()));

  // --latches: every count with a TTL, the user's counter too (nothing tells
  // them apart).
  auto latches = run_dlock({"-r", server_.url(), "list", "--latches", p + "*"});
  EXPECT_EQ(latches.status, 0) << latches.err;
  EXPECT_TRUE(contains(line_of(latches.out, idle_latch), "count 5")) << latches.out;
  EXPECT_TRUE(contains(line_of(latches.out, p + "user-counter"), "could be any counter"))
      << latches.out;

  // Released, the lock passes to its waiter; once everything is let go, only what is left shows.
  EXPECT_FALSE(held.release());
  lease handed = waiter.get();
  ASSERT_TRUE(handed);
  EXPECT_FALSE(handed.release());
  EXPECT_FALSE(reader1.release());
  EXPECT_FALSE(reader2.release());
  EXPECT_FALSE(permit1.release());
  EXPECT_FALSE(permit2.release());
  EXPECT_EQ(counting.count_down(2, ec), 0);
  EXPECT_TRUE(latch_waiter.get());
  EXPECT_FALSE(elect.resign(leading));
  auto held_only = run_dlock({"-r", server_.url(), "list", "--held", p + "*"});
  EXPECT_EQ(held_only.status, 0) << held_only.err;
  for (const auto& name : {lock_name, rw_name, sem_name, elect_name}) {
    EXPECT_EQ(line_of(held_only.out, name), "") << held_only.out;
  }
}

// PATTERN is a glob over names: names of every form of the key layout match by their name, not by
// their keys; a name outside it is not listed; --limit cuts the list and says so (exit 1).
TEST_F(CliListTest, PatternSelectsNamesAndTheLimitSaysWhatWasLeftOut) {
  const std::string p = prefix();
  client node{server_.url()};
  // Held: found by their own keys too. Released: found only by their fence counters, keys of the
  // two other forms of the layout ("<name>{}:fence", "{FFFF}<name>}}:fence").
  std::vector<std::string> held{p + "a:1", p + "a:2"}, released{p + "a:{tagged}", p + "a:x}y"};
  std::vector<lease> leases;
  for (const auto& name : held) leases.push_back(mutex{node, name, {.ttl = 30s}}.acquire());
  for (const auto& name : released) {
    mutex m{node, name, {.ttl = 30s}};
    EXPECT_FALSE(m.acquire().release());
  }
  leases.push_back(mutex{node, p + "b:1", {.ttl = 30s}}.acquire());
  auto r = run_dlock({"-r", server_.url(), "list", p + "a:*"});
  EXPECT_EQ(r.status, 0) << r.err;
  for (const auto& name : held) {
    EXPECT_TRUE(contains(line_of(r.out, name), "held by owner ")) << name << "\n" << r.out;
  }
  for (const auto& name : released) {
    EXPECT_TRUE(contains(line_of(r.out, name), "lock             free, 0 waiters")) << name << "\n"
                                                                                    << r.out;
  }
  EXPECT_EQ(line_of(r.out, p + "b:1"), "") << r.out;
  std::size_t lines = 0;
  for (char c : r.out) lines += c == '\n';
  EXPECT_EQ(lines, held.size() + released.size()) << r.out;
  auto held_only = run_dlock({"-r", server_.url(), "list", "--held", p + "a:*"});
  EXPECT_EQ(held_only.status, 0) << held_only.err;
  for (const auto& name : released) EXPECT_EQ(line_of(held_only.out, name), "") << held_only.out;
  EXPECT_NE(line_of(held_only.out, p + "a:1"), "") << held_only.out;

  auto one = run_dlock({"-r", server_.url(), "list", p + "a:?"});
  EXPECT_EQ(one.status, 0) << one.err;
  EXPECT_NE(line_of(one.out, p + "a:1"), "");
  EXPECT_NE(line_of(one.out, p + "a:2"), "");
  EXPECT_EQ(line_of(one.out, p + "a:{tagged}"), "") << one.out;

  auto cut = run_dlock({"-r", server_.url(), "list", "--limit", "2", p + "*"});
  EXPECT_EQ(cut.status, 1) << cut.out << cut.err;
  EXPECT_TRUE(contains(cut.out, "more names: narrow the PATTERN or raise --limit")) << cut.out;
  auto cut_json = run_dlock({"-r", server_.url(), "list", "--json", "--limit", "2", p + "*"});
  EXPECT_EQ(cut_json.status, 1) << cut_json.err;
  json cut_list;
  ASSERT_NO_THROW(cut_list = parse_json(cut_json.out)) << cut_json.out;
  ASSERT_EQ(cut_list.array().size(), 3u) << cut_json.out;
  EXPECT_EQ(cut_list.array()[2]["kind"].str(), "truncated") << cut_json.out;
  // Keys enough that one SCAN step (COUNT 1000) cannot finish the walk.
  std::vector<std::string> mset{"MSET"};
  for (int i = 0; i < 2500; ++i) mset.insert(mset.end(), {p + "filler:" + std::to_string(i), "x"});
  node.exec(command{std::span<const std::string>(mset)});
  auto keys = run_dlock({"-r", server_.url(), "list", "--max-keys", "10", p + "*"});
  EXPECT_EQ(keys.status, 1) << keys.out << keys.err;
  EXPECT_TRUE(contains(keys.out, "raise --max-keys")) << keys.out;

  auto none = run_dlock({"-r", server_.url(), "list", p + "nothing:*"});
  EXPECT_EQ(none.status, 0) << none.err;
  EXPECT_TRUE(contains(none.out, "no lock, read-write lock, semaphore, election or latch matches"))
      << none.out;
  auto none_json = run_dlock({"-r", server_.url(), "list", "--json", p + "nothing:*"});
  EXPECT_EQ(none_json.status, 0) << none_json.err;
  EXPECT_EQ(parse_json(none_json.out).array().size(), 0u) << none_json.out;
  for (auto& l : leases) EXPECT_FALSE(l.release());
}

// A node that does not answer, or refuses the ACL user, makes the list incomplete: it is named, the
// exit is 69 (77 for the refusal), and no "nothing matches" is claimed.
TEST_F(CliListTest, ANodeThatCannotBeAskedFailsTheListInsteadOfShorteningIt) {
  const std::string dead = "redis://127.0.0.1:" + std::to_string(test::free_port());
  auto down = run_dlock({"--request-timeout", "200ms", "-r", dead, "list"});
  EXPECT_EQ(down.status, 69) << down.out << down.err;
  EXPECT_FALSE(contains(down.out, "matches")) << down.out;
  EXPECT_TRUE(contains(down.err, "the list is incomplete")) << down.err;
  auto down_json = run_dlock({"--request-timeout", "200ms", "-r", dead, "list", "--json"});
  EXPECT_EQ(down_json.status, 69) << down_json.err;
  // Not an empty array: the node that could not be asked is in it.
  json errors;
  ASSERT_NO_THROW(errors = parse_json(down_json.out)) << down_json.out;
  ASSERT_EQ(errors.array().size(), 1u) << down_json.out;
  EXPECT_EQ(errors.array()[0]["kind"].str(), "error");
  EXPECT_EQ(errors.array()[0]["node"].str(), dead.substr(8));

  // A Redlock set with one node down: what the others hold is listed, and still exit 69.
  redis_server second;
  const std::string name = prefix() + "redlock";
  std::vector<client> pair{client{server_.url()}, client{second.url()}};
  lease held = mutex{pair, name, {.ttl = 30s}}.acquire();
  auto partial = run_dlock({"--request-timeout", "200ms", "-r", server_.url(), "-r", second.url(),
                            "-r", dead, "list", prefix() + "*"});
  EXPECT_EQ(partial.status, 69) << partial.out << partial.err;
  EXPECT_TRUE(contains(line_of(partial.out, name), "held by owner " + held.value())) << partial.out;
  EXPECT_TRUE(contains(partial.err, dead.substr(8))) << partial.err;

  // An ACL user that may connect but not SCAN: 77 (EX_NOPERM), not an empty list.
  ASSERT_EQ(raw("ACL SETUSER peeker on >peek ~* &* +@connection").rfind("+OK", 0), 0u);
  auto refused =
      run_dlock({"-r", "redis://peeker:peek@127.0.0.1:" + std::to_string(server_.port()), "list"});
  EXPECT_EQ(refused.status, 77) << refused.out << refused.err;
  EXPECT_FALSE(contains(refused.out, "matches")) << refused.out;
  EXPECT_FALSE(held.release());
}

// On a Redis Cluster every master is walked: names on different masters are all listed, a lock in
// copies once, with its copies, and each is read on the master of its slot.
TEST(CliListClusterTest, ListsTheNamesOfEveryMaster) {
  test::redis_cluster cluster;
  const std::string p = test_key("");
  client node{cluster.seeds_url()};
  // One name on each master: the first of p + "n<i>" whose slot that master serves.
  std::vector<std::string> names(static_cast<std::size_t>(cluster.masters()));
  for (int i = 0, found = 0; found < cluster.masters(); ++i) {
    std::string name = p + "n" + std::to_string(i);
    auto& slot_name = names.at(static_cast<std::size_t>(cluster.owner_of(hash_slot(name))));
    if (slot_name.empty()) {
      slot_name = name;
      ++found;
    }
  }
  std::vector<lease> leases;
  for (const auto& name : names) leases.push_back(mutex{node, name, {.ttl = 30s}}.acquire());
  const std::string sem_name = p + "sem", copied = p + "copied";
  semaphore sem{node, sem_name, 2, {.ttl = 30s}};
  lease permit = sem.acquire();
  lease copies = mutex{node, copied, {.ttl = 30s, .copies = 3}}.acquire();

  auto r =
      run_dlock({"--cluster", "-r", "redis://127.0.0.1:" + std::to_string(cluster.node(0).port()),
                 "list", "--json", p + "*"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  json list;
  ASSERT_NO_THROW(list = parse_json(r.out)) << r.out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const json* e = entry_of(list, names[i], "lock");
    ASSERT_TRUE(e) << names[i] << " (master " << i << ") missing: " << r.out;
    EXPECT_EQ((*e)["token"].str(), leases[i].value());
  }
  const json* s = entry_of(list, sem_name, "semaphore");
  ASSERT_TRUE(s) << r.out;
  EXPECT_EQ((*s)["in_use"].number(), 1);
  const json* c = entry_of(list, copied, "lock");
  ASSERT_TRUE(c) << r.out;
  EXPECT_EQ((*c)["copies"].number(), 3);
  EXPECT_EQ((*c)["holding"].number(), 3);
  EXPECT_EQ((*c)["token"].str(), copies.value());
  EXPECT_EQ(list.array().size(), names.size() + 2) << r.out;

  // A master that does not answer: its slots cannot be listed, so the list fails.
  cluster.node(cluster.owner_of(hash_slot(names[0]))).kill();
  auto partial =
      run_dlock({"--request-timeout", "300ms", "--cluster", "-r",
                 "redis://127.0.0.1:" + std::to_string(cluster.node(1).port()), "-r",
                 "redis://127.0.0.1:" + std::to_string(cluster.node(2).port()), "list", p + "*"});
  EXPECT_EQ(partial.status, 69) << partial.out << partial.err;
  EXPECT_TRUE(contains(partial.err, "the list is incomplete")) << partial.err;
}

}  // namespace
}  // namespace dlock::test
