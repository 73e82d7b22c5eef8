// SPDX-License-Identifier: Apache-2.0
// The simulated node against a real redis-server: the same random sequences of script calls and
// plain commands go to both, and every reply, every delivered pub/sub message and, after each
// step, the whole keyspace (type, value, PTTL) must be equal.
//
// Both sides see one clock. The server runs under tests/support/clock_shim with a frozen wall
// clock (DLOCK_FROZEN_CLOCK) whose time the test writes, and the node's set_time gets the same
// value before each step. So time-dependent values (PTTLs, deadlines in waiter entries, expiry
// scores) compare exactly, not within a tolerance, and the clock can land exactly on a
// deadline, where Redis's "now > deadline" and "deadline <= now" rules differ. Steps never sleep.
//
// Each sequence is one seed; a failure prints it with the steps so far. Environment:
//   DLOCK_SIM_DIFF_SEED=<n>       run that one sequence (replaying a failure)
//   DLOCK_SIM_DIFF_SEQUENCES=<n>  how many sequences (default 150, ~15 s), seeds 1..n
//   DLOCK_SIM_DIFF_TRACE=1        print every sequence's steps and the server's replies
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "algo/lock_protocol.hpp"
#include "algo/semaphore_protocol.hpp"
#include "dlock/client.hpp"
#include "dlock/detail/scripts.hpp"
#include "dlock/key_layout.hpp"
#include "sim_node.hpp"
#include "support/redis_server.hpp"

namespace dlock::sim {
namespace {

namespace scripts = dlock::detail::scripts;

// clock_shim's DLOCK_FROZEN_CLOCK file: the server reads it, the test writes it.
class frozen_clock {
 public:
  frozen_clock() : path_("/tmp/dlock-sim-clock-" + std::to_string(::getpid())) {
    int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::ftruncate(fd, sizeof(std::int64_t)) != 0) throw std::runtime_error("clock file");
    void* p = ::mmap(nullptr, sizeof(std::int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("clock mmap");
    micros_ = static_cast<std::int64_t*>(p);
    set_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count());
  }
  ~frozen_clock() {
    ::munmap(micros_, sizeof(std::int64_t));
    ::unlink(path_.c_str());
  }
  void set_ms(std::int64_t ms) { __atomic_store_n(micros_, ms * 1000, __ATOMIC_RELEASE); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::int64_t* micros_ = nullptr;
};

// A pub/sub connection to the real server (hiredis: dlock's client refuses SUBSCRIBE).
class subscriber {
 public:
  subscriber(unsigned short port, connection_id id, const std::vector<std::string>& channels)
      : id_(id), context_(redisConnect("127.0.0.1", port)) {
    if (!context_ || context_->err) throw std::runtime_error("subscriber: cannot connect");
    for (const auto& channel : channels) {
      freeReplyObject(redisCommand(context_, "SUBSCRIBE %b", channel.data(), channel.size()));
    }
  }
  ~subscriber() { redisFree(context_); }
  subscriber(const subscriber&) = delete;
  subscriber& operator=(const subscriber&) = delete;

  connection_id id() const { return id_; }
  // Everything delivered so far: a PING's answer comes after every message sent before it.
  std::vector<message> drain() {
    std::vector<message> out;
    redisAppendCommand(context_, "PING");
    while (true) {
      void* raw = nullptr;
      if (redisGetReply(context_, &raw) != REDIS_OK) throw std::runtime_error("subscriber lost");
      auto* r = static_cast<redisReply*>(raw);
      std::string kind = r->element[0]->str;
      if (kind == "message") {
        out.push_back({id_, std::string(r->element[1]->str, r->element[1]->len),
                       std::string(r->element[2]->str, r->element[2]->len)});
      }
      freeReplyObject(r);
      if (kind == "pong") return out;
    }
  }

 private:
  connection_id id_;
  redisContext* context_;
};

struct script_ref {
  const char* name;
  std::string_view body;
  std::string_view sha1;
};
const script_ref acquire{"acquire", scripts::acquire_body, scripts::acquire_sha1};
const script_ref release{"release", scripts::release_body, scripts::release_sha1};
const script_ref leave{"leave", scripts::leave_body, scripts::leave_sha1};
const script_ref extend{"extend", scripts::extend_body, scripts::extend_sha1};
const script_ref fence_raise{"fence_raise", scripts::fence_raise_body, scripts::fence_raise_sha1};
const script_ref fenced_set{"fenced_set", scripts::fenced_set_body, scripts::fenced_set_sha1};
const script_ref sem_acquire{"sem_acquire", scripts::sem_acquire_body, scripts::sem_acquire_sha1};
const script_ref sem_fair_acquire{"sem_fair_acquire", scripts::sem_fair_acquire_body,
                                  scripts::sem_fair_acquire_sha1};
const script_ref sem_refresh{"sem_refresh", scripts::sem_refresh_body, scripts::sem_refresh_sha1};
const script_ref sem_release{"sem_release", scripts::sem_release_body, scripts::sem_release_sha1};

// One step: a script call (EVALSHA, then EVAL on NOSCRIPT, as dlock sends it) or a command.
struct step {
  std::int64_t advance_ms = 0;
  const script_ref* script = nullptr;
  std::vector<std::string> keys;
  std::vector<std::string> args;  // or the command's argv
  std::vector<std::string> then;  // a second command, or empty
  // Or plain commands, one after the other: acquire_unqueued's (lock_protocol.hpp), or those
  // of the semaphore's solo grant (semaphore_protocol.hpp).
  std::vector<std::vector<std::string>> unqueued;

  std::string describe() const {
    std::ostringstream out;
    out << "+" << advance_ms << "ms " << (script ? script->name : "");
    if (script) out << " KEYS";
    for (const auto& k : keys) out << " " << k;
    if (script) out << " ARGV";
    for (const auto& a : args) out << " '" << a << "'";
    if (!then.empty()) out << ", then";
    for (const auto& a : then) out << " '" << a << "'";
    for (const auto& command : unqueued) {
      out << ";";
      for (const auto& a : command) out << " " << a;
    }
    return out.str();
  }
};

// The universe the steps draw from: few names, so that calls collide on the same keys.
class step_generator {
 public:
  explicit step_generator(std::uint64_t seed) : random_(seed) {}

  step next() {
    step s;
    // Mostly small steps, so that waiters are still live when a release comes; sometimes a jump
    // onto or just past a TTL (the universe's TTLs are 50, 100, 1000 and 30000 ms).
    s.advance_ms = below(10) < 7 ? pick<std::int64_t>({0, 0, 1, 2, 5, 10})
                                 : pick<std::int64_t>({49, 50, 99, 100, 101, 300, 1000, 2500});
    switch (below(28)) {
      case 0: case 1: case 2: case 3: case 4: lock_acquire(s); break;
      case 26: case 27: unqueued_acquire(s); break;
      case 25: solo_acquire(s); break;
      case 5: case 6: case 7: case 8: lock_release(s); break;
      case 9: script(s, leave, {lock().waiters, lock().waiter_info}, {id()}); break;
      case 10: {  // extend, or settle under a successor value (lease::release_after)
        std::string successor = below(3) == 0 ? owner() + ":settled" : "";
        script(s, extend, {lock().key}, {owner(), ttl(), successor});
        break;
      }
      case 11: script(s, fence_raise, {lock().fence}, {std::to_string(below(6)), ttl()}); break;
      case 12: {
        std::string data = pick<std::string>({"d1", "d2"});
        script(s, fenced_set, {data, high_fence_key(data)},
               {std::to_string(below(6)), "v" + std::to_string(below(9))});
        break;
      }
      case 13: case 14: case 15: semaphore_acquire(s); break;
      case 16: case 17: case 18: {
        bool fair = below(2) == 0;
        const auto& k = semaphore(fair);
        std::size_t limit = 1 + below(3);
        script(s, sem_release, {k.expiries, k.weights, k.waiters, k.waiter_info, k.fence, k.tickets},
               {token(), std::to_string(limit), fair ? "fair" : ""});
        maybe_marked(s, k, limit, fair);
        break;
      }
      case 19: {
        bool fair = below(2) == 0;
        const auto& k = semaphore(fair);
        std::vector<std::string> keys{k.expiries, k.weights};
        if (fair) keys.insert(keys.end(), {k.owners, k.waiter_info});
        std::string successor = below(3) == 0 ? token() + ":settled" : "";
        script(s, sem_refresh, keys, {token(), ttl(), successor});
        break;
      }
      case 20: s.args = {"DEL", any_key()}; break;
      case 21: s.args = {"PEXPIRE", any_key(), pick<std::string>({"0", "1", "100", "5000"})}; break;
      case 22: wrong_type(s); break;
      case 23: s.args = {"SCRIPT", "FLUSH"}; break;
      default:
        s.args = {pick<std::string>({"GET", "PTTL", "TYPE", "ZRANGE", "HGETALL"}), any_key()};
        if (s.args[0] == "ZRANGE") s.args.insert(s.args.end(), {"0", "-1", "WITHSCORES"});
    }
    return s;
  }

  // What the server answered, so that releases often name the holder: a grant, or a handoff
  // (a message "<id> <fence> <round>" means the key now holds "<id>.h<round>").
  void granted(const std::string& key, const std::string& value) { holders_[key] = value; }
  void handed_over(const std::string& payload) {
    std::string id = payload.substr(0, payload.find(' '));
    for (const auto& name : {"l1", "l2"}) {
      holders_[name] = id + ".h" + payload.substr(payload.rfind(' ') + 1);
    }
  }

  static const std::vector<std::string> channels;  // with 1, 2 and 0 subscribers

 private:
  std::size_t below(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(random_); }
  template <class T>
  T pick(std::initializer_list<T> options) { return *(options.begin() + below(options.size())); }

  const lock_keys& lock() {
    static const lock_keys keys[] = {lock_keys_for("l1"), lock_keys_for("l2")};
    return keys[below(2)];
  }
  const semaphore_keys& semaphore(std::optional<bool> fair = std::nullopt) {
    static const semaphore_keys unfair = semaphore_keys_for("s1", false);
    static const semaphore_keys fair_keys = semaphore_keys_for("s1", true);
    return fair.value_or(below(2) == 0) ? fair_keys : unfair;
  }
  std::string id() { return pick<std::string>({"A", "B", "C"}); }
  std::string round() { return std::to_string(1 + below(2)); }
  // Half the time a value an acquire wrote, so that releases and extends often find their key.
  std::string owner() {
    if (!written_.empty() && below(2) == 0) return written_[below(written_.size())];
    return id() + (below(5) == 0 ? ".h" : ".") + round();
  }
  std::string ttl() { return pick<std::string>({"50", "100", "1000", "30000"}); }
  std::string channel() { return channels[below(channels.size())]; }
  std::string token() { return pick<std::string>({"t1", "t2", "t3"}); }

  void script(step& s, const script_ref& which, std::vector<std::string> keys,
              std::vector<std::string> args) {
    s.script = &which;
    s.keys = std::move(keys);
    s.args = std::move(args);
  }

  void lock_acquire(step& s) {
    const auto& k = lock();
    std::string waiter;
    switch (below(3)) {
      case 0: break;
      case 1: waiter = pick<std::string>({"1000", "5000"}) + " " + channel(); break;
      default: waiter = pick<std::string>({"1000", "5000"}) + " " + channel() + " " + ttl() + " " + round();
    }
    std::string value = id() + "." + round();
    written_.push_back(value);
    if (waiter.size() > 20) written_.push_back(value.substr(0, 1) + ".h" + waiter.substr(waiter.rfind(' ') + 1));
    script(s, acquire, {k.key, k.fence, k.waiters, k.waiter_info, k.tickets},
           {value, ttl(), waiter, below(2) ? "fair" : ""});
  }

  void unqueued_acquire(step& s) {
    const auto& k = lock();
    std::string value = id() + "." + round();
    written_.push_back(value);
    std::string lease_ttl = ttl();  // the commands view it
    for (const auto& command : detail::unqueued_commands(k.key, k.fence, value, lease_ttl)) {
      s.unqueued.emplace_back(command.view().begin(), command.view().end());
    }
  }

  // The semaphore's solo grant: the commands between its MULTI and EXEC, which the simulated
  // world runs as one step on the node (sim_world.cpp, run_plain_command), as a server does.
  void solo_acquire(step& s) {
    bool fair = below(2) == 0;
    const auto& k = semaphore(fair);
    std::string value = semaphore_mark(1 + static_cast<std::ptrdiff_t>(below(3)), fair) + " " +
                        token() + " " + std::to_string(1 + below(2));
    std::string lease_ttl = ttl();  // the commands view these
    std::vector<std::string_view> keys{k.name, k.fence};
    if (fair) {
      keys.push_back(k.owners);
    } else {
      keys.insert(keys.end(), {k.waiters, k.waiter_info});
    }
    std::vector<std::string_view> args{value, lease_ttl};
    std::size_t size = 0;
    auto steps = detail::solo_commands(keys, args, size);
    for (std::size_t i = 0; i < size; ++i) {
      auto words = steps[i].view();
      if (words[0] == "MULTI" || words[0] == "EXEC") continue;
      s.unqueued.emplace_back(words.begin(), words.end());
    }
  }

  void lock_release(step& s) {
    const auto& k = lock();
    if (below(3) == 0) {
      script(s, release, {k.key, k.waiters, k.waiter_info, k.fence}, {id(), "give-up"});
    } else {
      auto held = holders_.find(k.key);
      bool holder = held != holders_.end() && below(3) != 0;
      script(s, release, {k.key, k.waiters, k.waiter_info, k.fence},
             {holder ? held->second : owner()});
    }
  }

  void semaphore_acquire(step& s) {
    bool fair = below(2) == 0;
    const auto& k = semaphore(fair);
    std::size_t limit = 1 + below(3);
    std::string permits = std::to_string(1 + below(limit));
    if (fair) {
      std::string waiter = below(3) ? channel() : "";
      // Some accept a handoff from the release ("<attempt>").
      if (!waiter.empty() && below(2)) waiter += " " + std::to_string(below(3));
      script(s, sem_fair_acquire, {k.owners, k.expiries, k.weights, k.tickets, k.waiter_info, k.fence},
             {token(), std::to_string(limit), permits, ttl(),
              pick<std::string>({"0", "100", "1000"}), waiter});
    } else {
      std::string waiter = below(3) ? pick<std::string>({"1000", "5000"}) + " " + channel() : "";
      // Some accept a handoff from the release ("<attempt>").
      if (!waiter.empty() && below(2)) waiter += " " + std::to_string(below(3));
      script(s, sem_acquire, {k.expiries, k.weights, k.fence, k.waiters, k.waiter_info, k.tickets},
             {token(), std::to_string(limit), permits, ttl(), waiter});
    }
    maybe_marked(s, k, limit, fair);
  }

  // Half the time the holders mark the name (name_mark.lua: the name's key and the mark, last),
  // so that the scripts adopt a solo holder's value (adopt_solo) and mark and unmark the name.
  void maybe_marked(step& s, const semaphore_keys& k, std::size_t limit, bool fair) {
    if (below(2)) return;
    s.keys.push_back(k.name);
    s.args.push_back(semaphore_mark(static_cast<std::ptrdiff_t>(limit), fair));
  }

  // A key of the universe given a type the scripts do not expect, for a short while (a key
  // poisoned for good would leave the rest of the sequence with nothing but errors).
  void wrong_type(step& s) {
    const auto& l = lock();
    switch (below(4)) {
      case 0:
        s.args = {"HSET", l.key, "x", "y"};
        s.then = {"PEXPIRE", l.key, "100"};
        break;
      case 1: s.args = {"SET", l.waiters, "junk", "PX", "100"}; break;
      case 2: s.args = {"SET", semaphore().expiries, "junk", "PX", "100"}; break;
      default: s.args = {"SET", l.fence, pick<std::string>({"abc", "7"}), "PX", "1000"};
    }
  }

  std::string any_key() {
    const auto& l = lock();
    const auto& k = semaphore();
    return pick<std::string>({l.key, l.fence, l.waiters, l.waiter_info, l.tickets, k.expiries,
                              k.weights, k.waiter_info, k.fence, k.tickets, "d1"});
  }

  std::mt19937_64 random_;
  std::vector<std::string> written_;  // owner values acquires sent (and their handoff values)
  std::map<std::string, std::string> holders_;  // lock key -> the value last granted
};
const std::vector<std::string> step_generator::channels = {"dlock:wake:one", "dlock:wake:two",
                                                           "dlock:wake:gone"};

std::string render(const std::map<std::string, key_state>& keys) {
  std::ostringstream out;
  for (const auto& [key, state] : keys) {
    out << "  " << key << " " << state.type << " pttl=" << state.pttl << " "
        << state.value.to_string() << "\n";
  }
  return out.str();
}

// What the sequences reached, so that the test fails if the generator stops reaching the paths
// that matter (a differential test of paths never taken proves nothing).
struct coverage {
  int steps = 0;
  int wrong_type = 0;    // a script aborted by WRONGTYPE
  int noscript = 0;      // EVALSHA fell back to EVAL
  int wake_ups = 0;      // a PUBLISH that reached a subscriber
  int handoffs = 0;      // ... carrying a lock ("<id> <fence> <round>")
  int at_deadline = 0;   // a key seen with PTTL 0: the clock exactly on its deadline
};

class SimNodeDiffTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    clock_ = new frozen_clock;
    ::setenv("LD_PRELOAD", DLOCK_CLOCK_SHIM, 1);
    ::setenv("DLOCK_FROZEN_CLOCK", clock_->path().c_str(), 1);
    server_ = new test::redis_server;
    ::unsetenv("LD_PRELOAD");
    ::unsetenv("DLOCK_FROZEN_CLOCK");
    real_ = new client{server_->url()};
    const auto& ch = step_generator::channels;
    subscribers_ = new std::vector<std::unique_ptr<subscriber>>;
    subscribers_->push_back(std::make_unique<subscriber>(server_->port(), 1, std::vector{ch[0], ch[1]}));
    subscribers_->push_back(std::make_unique<subscriber>(server_->port(), 2, std::vector{ch[1]}));
  }
  static void TearDownTestSuite() {
    delete subscribers_;
    delete real_;
    delete server_;
    delete clock_;
  }

  static reply on_server(std::span<const std::string> argv) {
    std::error_code ec;
    reply r = real_->exec(command(argv), ec);
    if (ec && !r.is_error()) throw std::runtime_error("server: " + ec.message());
    return r;
  }

  static void fresh_node(node& sim) {
    on_server(std::vector<std::string>{"FLUSHALL"});
    on_server(std::vector<std::string>{"SCRIPT", "FLUSH"});
    for (auto& s : *subscribers_) s->drain();
    sim.restart(false);
    sim.subscribe(1, step_generator::channels[0]);
    sim.subscribe(1, step_generator::channels[1]);
    sim.subscribe(2, step_generator::channels[1]);
  }

  // The server's keyspace in dump()'s form, in three pipelined round trips.
  static std::map<std::string, key_state> server_dump() {
    reply names = on_server(std::vector<std::string>{"KEYS", "*"});
    std::map<std::string, key_state> out;
    if (names.elements().empty()) return out;
    command types({"TYPE", names.elements()[0].str()});
    types.then({"PTTL", names.elements()[0].str()});
    for (std::size_t i = 1; i < names.elements().size(); ++i) {
      types.then({"TYPE", names.elements()[i].str()}).then({"PTTL", names.elements()[i].str()});
    }
    reply typed = real_->exec(std::move(types));
    std::optional<command> values;
    for (std::size_t i = 0; i < names.elements().size(); ++i) {
      const std::string& key = names.elements()[i].str();
      key_state& state = out[key];
      state.type = typed.elements()[2 * i].str();
      state.pttl = typed.elements()[2 * i + 1].integer();
      std::vector<std::string> read =
          state.type == "string" ? std::vector<std::string>{"GET", key}
          : state.type == "hash" ? std::vector<std::string>{"HGETALL", key}
                                 : std::vector<std::string>{"ZRANGE", key, "0", "-1", "WITHSCORES"};
      if (values) {
        values->then(std::span<const std::string>(read));
      } else {
        values.emplace(std::span<const std::string>(read));
      }
    }
    reply read = real_->exec(std::move(*values));
    for (std::size_t i = 0; i < names.elements().size(); ++i) {
      key_state& state = out[names.elements()[i].str()];
      const reply& value = names.elements().size() == 1 ? read : read.elements()[i];
      state.value = value;
      if (state.type != "hash") continue;
      std::vector<std::pair<std::string, std::string>> pairs;
      for (std::size_t j = 0; j + 1 < value.elements().size(); j += 2) {
        pairs.emplace_back(value.elements()[j].str(), value.elements()[j + 1].str());
      }
      std::sort(pairs.begin(), pairs.end());
      std::vector<reply> sorted;
      for (auto& [f, v] : pairs) {
        sorted.push_back(reply::make_string(reply::kind::string, f));
        sorted.push_back(reply::make_string(reply::kind::string, v));
      }
      state.value = reply::make_array(std::move(sorted));
    }
    return out;
  }

  // Runs one seed's sequence; returns false (having reported) at the first difference.
  static bool run_sequence(std::uint64_t seed, int steps) {
    node sim;
    fresh_node(sim);
    step_generator generate(seed);
    std::int64_t now = 1'700'000'000'000 + static_cast<std::int64_t>(seed % 1000) * 7'919;
    std::string trace;
    auto fail = [&](int at, const std::string& what) {
      ADD_FAILURE() << "seed " << seed << " (replay: DLOCK_SIM_DIFF_SEED=" << seed
                    << "), step " << at << ": " << what << "\nsteps:\n" << trace;
      return false;
    };
    for (int i = 0; i < steps; ++i) {
      step s = generate.next();
      now += s.advance_ms;
      clock_->set_ms(now);
      sim.set_time(now);
      trace += "  " + std::to_string(i) + ": " + s.describe() + "\n";

      std::vector<std::pair<reply, reply>> replies;  // (server, sim) for each command sent
      auto both = [&](const std::vector<std::string>& argv) {
        replies.emplace_back(on_server(argv), sim.exec(argv));
        return replies.back().first;
      };
      if (s.script) {
        auto call = [&](std::string_view verb, std::string_view body_or_sha) {
          std::vector<std::string> argv{std::string(verb), std::string(body_or_sha),
                                        std::to_string(s.keys.size())};
          argv.insert(argv.end(), s.keys.begin(), s.keys.end());
          argv.insert(argv.end(), s.args.begin(), s.args.end());
          return both(argv);
        };
        if (call("EVALSHA", s.script->sha1).str().starts_with("NOSCRIPT")) {
          call("EVAL", s.script->body);
        }
      } else if (!s.unqueued.empty()) {
        for (const auto& argv : s.unqueued) both(argv);
      } else {
        both(s.args);
        if (!s.then.empty()) both(s.then);
      }
      ++reached_.steps;
      const reply& answer = replies.back().first;
      if (s.script == &acquire && answer.is_array() && answer.elements()[0].integer() == 1) {
        generate.granted(s.keys[0], s.args[0]);
      }
      if (!s.unqueued.empty() && replies.front().first.is_string()) {
        generate.granted(s.unqueued[0][1], s.unqueued[0][2]);
      }
      for (const auto& [server, simulated] : replies) {
        reached_.wrong_type += server.str().starts_with("WRONGTYPE") ? 1 : 0;
        reached_.noscript += server.str().starts_with("NOSCRIPT") ? 1 : 0;
        trace += "     server " + server.to_string() + "\n";
        if (!same_reply(server, simulated)) {
          return fail(i, "replies differ: server " + server.to_string() + ", sim " +
                             simulated.to_string());
        }
      }

      std::vector<message> simulated = sim.take_messages();
      for (auto& sub : *subscribers_) {
        std::vector<message> got = sub->drain();
        for (const auto& m : got) {
          ++reached_.wake_ups;
          if (std::count(m.payload.begin(), m.payload.end(), ' ') == 2) {
            ++reached_.handoffs;
            generate.handed_over(m.payload);
          }
        }
        std::vector<message> expected;
        for (const auto& m : simulated) {
          if (m.to == sub->id()) expected.push_back(m);
        }
        auto text = [](const std::vector<message>& ms) {
          std::string out;
          for (const auto& m : ms) out += m.channel + " '" + m.payload + "'; ";
          return out;
        };
        if (text(got) != text(expected)) {
          return fail(i, "connection " + std::to_string(sub->id()) + " got " + text(got) +
                             "but the sim delivered " + text(expected));
        }
      }

      auto server_keys = server_dump();
      auto sim_keys = sim.dump();
      for (const auto& [key, state] : server_keys) reached_.at_deadline += state.pttl == 0 ? 1 : 0;
      bool same = server_keys.size() == sim_keys.size();
      for (auto a = server_keys.begin(), b = sim_keys.begin(); same && a != server_keys.end(); ++a, ++b) {
        same = a->first == b->first && a->second.type == b->second.type &&
               a->second.pttl == b->second.pttl && same_reply(a->second.value, b->second.value);
      }
      if (!same) {
        return fail(i, "keyspaces differ:\nserver\n" + render(server_keys) + "sim\n" +
                           render(sim_keys));
      }
    }
    if (std::getenv("DLOCK_SIM_DIFF_TRACE")) std::printf("seed %llu\n%s", static_cast<unsigned long long>(seed), trace.c_str());
    return true;
  }

  static inline coverage reached_;
  static frozen_clock* clock_;
  static test::redis_server* server_;
  static client* real_;
  static std::vector<std::unique_ptr<subscriber>>* subscribers_;
};
frozen_clock* SimNodeDiffTest::clock_ = nullptr;
test::redis_server* SimNodeDiffTest::server_ = nullptr;
client* SimNodeDiffTest::real_ = nullptr;
std::vector<std::unique_ptr<subscriber>>* SimNodeDiffTest::subscribers_ = nullptr;

TEST_F(SimNodeDiffTest, TheServerSeesTheTestsClock) {
  clock_->set_ms(1'700'000'000'123);
  EXPECT_EQ(on_server(std::vector<std::string>{"TIME"}).to_string(), R"(["1700000000", "123000"])");
}

TEST_F(SimNodeDiffTest, RandomScriptSequencesAgreeWithTheServer) {
  constexpr int steps_per_sequence = 60;
  if (const char* one = std::getenv("DLOCK_SIM_DIFF_SEED")) {
    run_sequence(std::strtoull(one, nullptr, 10), steps_per_sequence);
    return;
  }
  const char* count = std::getenv("DLOCK_SIM_DIFF_SEQUENCES");
  std::uint64_t sequences = count ? std::strtoull(count, nullptr, 10) : 150;
  for (std::uint64_t seed = 1; seed <= sequences; ++seed) {
    if (!run_sequence(seed, steps_per_sequence)) return;
  }
  std::printf("%d steps: %d WRONGTYPE, %d NOSCRIPT, %d wake-ups (%d handoffs), %d keys at "
              "their deadline\n", reached_.steps, reached_.wrong_type, reached_.noscript,
              reached_.wake_ups, reached_.handoffs, reached_.at_deadline);
  if (sequences >= 100) {
    EXPECT_GT(reached_.wrong_type, 0);
    EXPECT_GT(reached_.noscript, 0);
    EXPECT_GT(reached_.handoffs, 0);
    EXPECT_GT(reached_.wake_ups, reached_.handoffs);
    EXPECT_GT(reached_.at_deadline, 0);
  }
}

// Literal scripts for the conversion and error rules that dlock's own scripts do not reach.
TEST_F(SimNodeDiffTest, ConversionsAndErrorsAgreeWithTheServer) {
  node sim;
  fresh_node(sim);
  clock_->set_ms(1'700'000'000'618);
  sim.set_time(1'700'000'000'618);
  on_server(std::vector<std::string>{"HSET", "h", "f", "v"});
  sim.exec({"HSET", "h", "f", "v"});
  for (std::string body : {
           "return 3.99", "return -3.99", "return {1, 2, nil, 3}", "return true", "return false",
           "return {ok='FINE'}", "return {err='raw'}", "return redis.error_reply('boom')",
           "return redis.error_reply('MY boom x')", "return redis.error_reply('-X y')",
           "return redis.status_reply('FINE')", "return {1, {'x', false}, {ok='s'}, {err='e'}}",
           "return nope", "x = 1", "error('x')", "error({err='tbl'})",
           "return redis.call('NOPE')", "return redis.call()", "return redis.call('SET', 'a')",
           "return redis.call('GET', 'h')", "return redis.pcall('GET', 'h')",
           "return redis.call('SET', 'a', {})", "return redis.pcall('SET', 'a', true)",
           "return redis.call('SET', 'a', 0.1)", "return redis.call('GET', 'a')",
           "return redis.call('SET', 'a', 1e20)", "return redis.call('GET', 'a')",
           "return redis.call('SET', 'a', -0)", "return redis.call('GET', 'a')",
           "return redis.call('SET', 'a', 0/-1)", "return redis.call('GET', 'a')",
           "return redis.call('SET', 'a', -12345678901234567)", "return redis.call('GET', 'a')",
           "return redis.call('SET', 'a', 1e17 - 8)", "return redis.call('GET', 'a')",
           "return redis.call('SET', 'a', 1e17)", "return redis.call('GET', 'a')",
           "return redis.call('INCR', 'a')", "return redis.call('SET', 'a', 'x', 'PX', 0)",
           "return redis.call('SET', 'a', 'x', 'PX', 'z')", "return redis.call('ZADD', 'z', 'abc', 'm')",
           "return redis.call('ZADD', 'z', 0.1, 'm')", "return redis.call('ZSCORE', 'z', 'm')",
           "return redis.call('ZADD', 'z', 'XX', 'NX', 1, 'm')", "return redis.call('hset', 'hh', 'a', 1, 'b')",
           "return redis.call('EVAL', 'return 1', 0)", "return redis.call('TIME')[2]",
           "return redis.call('ZINTERSTORE', 'o', 2, 'z', 'nokey', 'WEIGHTS', 0, 1)",
           "return redis.call('ZRANGEBYSCORE', 'z', '(0', '+inf', 'WITHSCORES')",
           "return redis.call('INCR', 'h')", "return tostring(redis.call('GET', 'nokey'))",
           "return 1 +", "return redis.sha1hex", "return {redis.call('PEXPIRE', 'z', -5), redis.call('EXISTS', 'z')}",
       }) {
    std::vector<std::string> argv{"EVAL", body, "0"};
    reply server = on_server(argv);
    reply simulated = sim.exec(argv);
    EXPECT_TRUE(same_reply(server, simulated))
        << body << "\n  server " << server.to_string() << "\n  sim    " << simulated.to_string();
  }
  std::vector<std::string> noscript{"EVALSHA", std::string(40, 'a'), "0"};
  EXPECT_TRUE(same_reply(on_server(noscript), sim.exec(noscript)));
}

}  // namespace
}  // namespace dlock::sim
