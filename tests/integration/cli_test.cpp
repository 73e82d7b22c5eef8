// SPDX-License-Identifier: Apache-2.0
// The `dlock` binary against real redis-servers: what issue 7 says it must show. Every test
// runs the built CLI as a child process (DLOCK_CLI_PATH) and checks exit statuses, output and
// the servers' state; every wait is bounded.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <future>
#include <optional>
#include <filesystem>
#include <set>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dlock/key_layout.hpp"
#include "dlock/mutex.hpp"
#include "dlock/semaphore.hpp"
#include "dlock/shared_mutex.hpp"
#include "support/commandstats.hpp"
#include "support/dlock_cli.hpp"
#include "support/loopback.hpp"
#include "support/promtool.hpp"
#include "support/redis_server.hpp"
#include "support/redis_cluster.hpp"
#include "support/sentinel_group.hpp"
#include "support/test_keys.hpp"
#include "support/checks.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
namespace fs = std::filesystem;

// Creates the empty file `p`: what a test's CMD waits for before it exits.
void touch(const fs::path& p) { std::ofstream{p}; }

// One `dlock ...` process; stdout and stderr go to files (stderr to `stderr_fd` if one is
// given), stdin is /dev/null. A holder's CMD is `exec sleep 100000`: it holds until the test
// ends it (or the destructor does), never for a time that a slow run could outlast.
class cli_process {
 public:
  cli_process(const fs::path& dir, std::vector<std::string> args, std::vector<std::string> env = {},
              int stderr_fd = -1) {
    static int counter = 0;
    auto n = std::to_string(++counter);
    out_ = dir / ("out." + n);
    err_ = dir / ("err." + n);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (stderr_fd >= 0) {
      posix_spawn_file_actions_adddup2(&fa, stderr_fd, 2);
    } else {
      posix_spawn_file_actions_addopen(&fa, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    }
    pid_ = spawn_cli(std::move(args), env, fa);
    posix_spawn_file_actions_destroy(&fa);
    if (pid_ < 0) throw std::runtime_error("cannot start " DLOCK_CLI_PATH);
  }
  // A dlock still running (a holder the test did not end, a test that failed midway) is ended
  // as a user would end it: SIGTERM, which it forwards to CMD before it releases (SIGCONT in
  // case it is stopped, or the TERM would wait); SIGKILL only if it does not end in time (its
  // guard then ends CMD), so that no CMD is left behind either way.
  ~cli_process() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    ::kill(pid_, SIGCONT);
    auto until = steady::now() + test::scaled(10s);
    for (;;) {
      pid_t r = ::waitpid(pid_, nullptr, WNOHANG);
      if (r == pid_ || r < 0) return;
      if (steady::now() >= until) break;
      std::this_thread::sleep_for(5ms);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  cli_process(const cli_process&) = delete;
  cli_process& operator=(const cli_process&) = delete;

  pid_t pid() const { return pid_; }
  // Never once it has been waited for: kill(-1, sig) would reach every process we may signal.
  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Sends SIGTERM, as a user ending it would, and returns wait(limit).
  int terminate(std::chrono::milliseconds limit = 20s) {
    signal(SIGTERM);
    return wait(limit);
  }
  // The exit status if it has ended (then as wait() gives it), else nullopt.
  std::optional<int> try_wait() {
    if (pid_ <= 0) return status_;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
    pid_ = -1;
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return status_;
  }
  // The exit status, 128 + signal, or -1 when it did not end within scaled(limit) (it is then
  // killed).
  int wait(std::chrono::milliseconds limit = 20s) {
    auto until = steady::now() + test::scaled(limit);
    for (;;) {
      if (auto s = try_wait()) return *s;
      if (steady::now() >= until) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
        status_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(5ms);
    }
  }
  std::string out() const { return read_file(out_); }
  std::string err() const { return read_file(err_); }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  fs::path out_, err_;
};

struct cli_result {
  int status;
  std::string out, err;
  std::chrono::milliseconds took;
};

// The state letter of a process (R, S, T for stopped, Z ...), or 0 when there is none.
// /proc/<pid>/<what>, or "" once the process is gone: read() fails with ESRCH when it exits
// between open and read, which std::ifstream turns into an exception (seen in CI).
std::string read_proc(pid_t pid, const char* what) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + what;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

char process_state(pid_t pid) {
  std::string text = read_proc(pid, "stat");
  auto close = text.rfind(')');
  if (text.empty() || close == std::string::npos || close + 2 >= text.size()) return 0;
  return text[close + 2];
}

// The CPU time `pid` has used (user + system, from /proc/<pid>/stat), or -1s when unreadable.
std::chrono::milliseconds cpu_time(pid_t pid) {
  std::string text = read_proc(pid, "stat");
  auto close = text.rfind(')');
  if (close == std::string::npos) return -1s;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  for (int i = 3; i < 14; ++i) rest >> field;  // fields 3 (state) to 13
  long long utime = -1, stime = -1;
  if (!(rest >> utime >> stime)) return -1s;
  return std::chrono::milliseconds((utime + stime) * 1000 / ::sysconf(_SC_CLK_TCK));
}

// A process that exists and is not a zombie (an orphan's zombie may wait for a busy init).
bool running(pid_t pid) {
  char state = process_state(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

// Processes that a test's CMD starts and dlock should end: if dlock fails to (the bug a test
// looks for), they are killed when the test ends, so a failing test leaves nothing behind.
// Each is held by a pidfd taken when it is added, so a PID reused by then by another process
// (the machine's, not the test's) is never signalled: pidfd_send_signal reaches the process
// the pidfd was opened for, or nothing.
class strays {
 public:
  strays() = default;
  strays(const strays&) = delete;
  strays& operator=(const strays&) = delete;
  ~strays() {
    for (int fd : pidfds_) {
      ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
      ::close(fd);
    }
  }
  pid_t add(pid_t p) {
    if (p <= 1) return p;
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, p, 0));
    if (fd >= 0) pidfds_.push_back(fd);
    return p;
  }

 private:
  std::vector<int> pidfds_;
};

// Live processes of process group `pgid`.
std::vector<pid_t> group_members(pid_t pgid) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    auto name = e.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    // read_proc: a process that exits while it is read must not throw (seen under load).
    std::string text = read_proc(static_cast<pid_t>(std::stol(name)), "stat");
    auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 2));
    char state;
    long ppid, pgrp;
    if (!(rest >> state >> ppid >> pgrp)) continue;
    if (pgrp == pgid && state != 'Z' && state != 'X') out.push_back(std::stoi(name));
  }
  return out;
}

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dlock-cli-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  cli_result run(std::vector<std::string> args, std::vector<std::string> env = {},
                 std::chrono::milliseconds limit = 20s) {
    auto start = steady::now();
    cli_process p{dir_, std::move(args), std::move(env)};
    int status = p.wait(limit);
    return {status, p.out(), p.err(),
            std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - start)};
  }
  std::unique_ptr<cli_process> start(std::vector<std::string> args, std::vector<std::string> env = {},
                                     int stderr_fd = -1) {
    return std::make_unique<cli_process>(dir_, std::move(args), std::move(env), stderr_fd);
  }
  // Starts `dlock args... sh -c "<script>; exec sleep 100000"`: its CMD runs `script`, then
  // holds until the test ends it.
  std::unique_ptr<cli_process> start_sleeping(std::vector<std::string> args,
                                              const std::string& script) {
    args.insert(args.end(), {"sh", "-c", script + "; exec sleep 100000"});
    return start(std::move(args));
  }
  // start_sleeping() with `touch <marker>` as the script, and waits until its CMD runs; nullptr
  // (and a failure) if it never does.
  std::unique_ptr<cli_process> start_holder(std::vector<std::string> args,
                                            const std::string& marker = "m") {
    auto p = start_sleeping(std::move(args), "touch " + path(marker));
    if (eventually([&] { return fs::exists(path(marker)); })) return p;
    ADD_FAILURE() << "the holder's CMD never ran: " << p->err();
    return nullptr;
  }

  bool exists(const std::string& key, redis_server* s = nullptr) {
    return test::raw_command((s ? s : &server_)->port(), "EXISTS " + key).rfind(":1", 0) == 0;
  }
  long long pttl(const std::string& key) {
    auto r = test::raw_command(server_.port(), "PTTL " + key);
    return r.size() > 1 ? std::stoll(r.substr(1)) : -3;
  }
  pid_t read_pid(const fs::path& file) {
    pid_t pid = 0;
    EXPECT_TRUE(eventually([&] {
      std::ifstream in(file);
      return static_cast<bool>(in >> pid) && pid > 0;
    })) << file;
    return pid;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // The members of the sorted set `key`, in order (a waiter queue, a fair semaphore's owners).
  std::vector<std::string> queued(const std::string& key) {
    std::error_code ec;
    auto r = client(server_.url()).exec(command{"ZRANGE", key, "0", "-1"}, ec);
    std::vector<std::string> out;
    for (const auto& e : r.elements()) out.push_back(e.str());
    return out;
  }
  // Runs `dlock args...` with stderr on a pseudo-terminal; returns its status and what it wrote
  // there.
  std::pair<int, std::string> run_on_terminal(std::vector<std::string> args);

  redis_server server_;
  fs::path dir_;
};

std::pair<int, std::string> CliTest::run_on_terminal(std::vector<std::string> args) {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
    ADD_FAILURE() << "no pseudo-terminal: " << std::strerror(errno);
    return {-1, ""};
  }
  std::string terminal = ::ptsname(master);
  {
    // Raw: no "\n" -> "\r\n" on the way out, so the test sees exactly what dlock wrote.
    int slave = ::open(terminal.c_str(), O_RDWR | O_NOCTTY);
    termios mode{};
    ::tcgetattr(slave, &mode);
    ::cfmakeraw(&mode);
    ::tcsetattr(slave, TCSANOW, &mode);
    ::close(slave);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, terminal.c_str(), O_RDWR | O_NOCTTY, 0);
  pid_t pid = spawn_cli(std::move(args), {"TERM=xterm"}, fa);
  posix_spawn_file_actions_destroy(&fa);
  if (pid < 0) {
    ::close(master);
    ADD_FAILURE() << "cannot start " DLOCK_CLI_PATH;
    return {-1, ""};
  }
  // Drain the terminal while it runs (its buffer is small), then what is left after it exits.
  std::string written;
  int status = -1;
  auto until = steady::now() + test::scaled(20s);
  for (bool exited = false; !exited;) {
    exited = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!exited && steady::now() >= until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      exited = true;
    }
    for (;;) {
      pollfd p{master, POLLIN, 0};
      if (::poll(&p, 1, exited ? 0 : 20) <= 0 || !(p.revents & POLLIN)) break;
      char buf[4096];
      auto n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;
      written.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(master);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), written};
}

// One line on stderr, "dlock: ...", as the issue asks of every usage error.
void expect_one_line_message(const cli_result& r) {
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("dlock: ", 0), 0u) << r.err;
}

// --quarantine: a node that started just now may have forgotten locks, so a first run waits
// out the rest of the quarantine (-n: exits 75 at once), for every client, with or without it.
TEST_F(CliTest, QuarantineKeepsANewlyStartedNodeFromGranting) {
  redis_server fresh;
  const std::string key = test_key();
  auto once = run({"-r", fresh.url(), "--quarantine", "30s", "run", "-n", key, "--", "true"});
  EXPECT_EQ(once.status, 75) << once.err;
  EXPECT_EQ(run({"-r", fresh.url(), "run", "-n", key, "--", "true"}).status, 75)
      << "a run without --quarantine ignored the node's quarantine";
  EXPECT_EQ(run({"-r", fresh.url(), "--quarantine", "-1s", "run", key, "--", "true"}).status, 64);
}

// A redis-sentinel:// URL, in -r and in $DLOCK_REDIS (whose commas also separate URLs): the lock
// is taken on the master that the sentinels name.
TEST_F(CliTest, ClusterSeedsPutTheLockOnTheMasterOfItsSlot) {
  test::redis_cluster cluster;
  const std::string key = test_key();
  int owner = cluster.owner_of(hash_slot(key));
  const std::string ran = path("ran");
  auto seed = [&](int i) { return "redis://127.0.0.1:" + std::to_string(cluster.node(i).port()); };
  // Seeds that are not the key's master: the lock still lands on it.
  auto r = run({"--cluster", "-r", seed((owner + 1) % 3), "-r", seed((owner + 2) % 3), "run", key,
                "--", "sh", "-c",
                "redis-cli -p " + std::to_string(cluster.node(owner).port()) + " EXISTS " + key +
                    " > " + ran});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(ran), "1\n") << "the lock was not on the slot's master";
  // status names the master that serves the key, and the slot.
  auto status = run({"--cluster", "-r", seed((owner + 1) % 3), "status", "--json", key});
  EXPECT_EQ(status.status, 0) << status.err;
  EXPECT_NE(status.out.find("127.0.0.1:" + std::to_string(cluster.node(owner).port()) +
                            " (slot " + std::to_string(hash_slot(key)) + ")"),
            std::string::npos)
      << status.out;
  auto url = run({"-r", cluster.seed_url(), "run", "-n", key, "--", "true"});
  EXPECT_EQ(url.status, 0) << url.err;
  // Three copies on three masters: held by quorum.
  const std::string copy = lock_copy_key(key, 0, 3);
  auto copies = run({"--cluster", "-r", seed(0), "--copies", "3", "run", key, "--", "sh", "-c",
                     "redis-cli -p " +
                         std::to_string(cluster.node(cluster.owner_of(hash_slot(copy))).port()) +
                         " EXISTS '" + copy + "' > " + ran});
  EXPECT_EQ(copies.status, 0) << copies.err;
  EXPECT_EQ(read_file(ran), "1\n") << "copy 0 was not on its slot's master";
  {
    // status reads each copy as a node of its own, on the master of the copy's slot.
    client lib{cluster.seeds_url()};
    mutex held{lib, key, {.ttl = 10s, .copies = 3}};
    auto l = held.acquire();
    auto st = run({"--cluster", "-r", seed(0), "--copies", "3", "status", "--json", key});
    EXPECT_EQ(st.status, 0) << st.err;
    EXPECT_NE(st.out.find("\"held\":true"), std::string::npos) << st.out;
    EXPECT_NE(st.out.find("\"token\":\"" + l.value() + "\""), std::string::npos) << st.out;
    for (int i = 0; i < 3; ++i) {
      auto slot = hash_slot(lock_copy_key(key, i, 3));
      auto label = "127.0.0.1:" + std::to_string(cluster.node(cluster.owner_of(slot)).port()) +
                   " (slot " + std::to_string(slot) + ") copy " + std::to_string(i);
      EXPECT_NE(st.out.find(label), std::string::npos) << label << " missing in " << st.out;
    }
  }
  // doctor inspects each master of the map, and names the cluster's own settings.
  auto doctor = run({"--cluster", "-r", seed(0), "--copies", "3", "doctor"});
  EXPECT_EQ(doctor.status, 1) << doctor.out << doctor.err;
  EXPECT_NE(doctor.out.find("cluster_coverage"), std::string::npos) << doctor.out;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(doctor.out.find("127.0.0.1:" + std::to_string(cluster.node(i).port())),
              std::string::npos)
        << doctor.out;
  }
  EXPECT_EQ(run({"--cluster", "-r", seed(0), "--copies", "2", "run", "-n", key, "--", "true"})
                .status,
            64);
  auto bad = run({"--cluster", "-r", "redis://127.0.0.1:1/2", "run", "-n", key, "--", "true"});
  EXPECT_EQ(bad.status, 64) << bad.err;
  EXPECT_NE(bad.err.find("database 0"), std::string::npos) << bad.err;
}

TEST_F(CliTest, SentinelUrlsReachTheMaster) {
  test::sentinel_group group{{.sentinels = 2}};
  group.wait_ready();
  const std::string key = test_key();
  const std::string ran = path("ran");
  auto r = run({"-r", group.url(), "run", key, "--", "sh", "-c",
                "redis-cli -p " + std::to_string(group.node(0).port()) + " EXISTS " + key +
                    " > " + ran});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(ran), "1\n") << "the lock was not on the master";
  auto env = run({"run", "-n", key, "--", "true"},
                 {"DLOCK_REDIS=" + group.url() + "," + server_.url()});
  EXPECT_EQ(env.status, 0) << env.err;  // a Redlock over the sentinels' master and one node
  // The sentinels' own password comes from the environment, and CMD does not see it.
  test::sentinel_group locked{{.sentinels = 1, .sentinel_extra = {"requirepass s3cret-sentinel"}}};
  const std::string locked_url = "redis-sentinel://127.0.0.1:" +
                                 std::to_string(locked.sentinel(0).port()) + "/" + locked.name();
  const std::string seen = path("seen");
  EXPECT_NE(run({"-r", locked_url, "run", "-n", key, "--", "true"}).status, 0);
  auto logged_in = run({"-r", locked_url, "run", "-n", key, "--", "sh", "-c",
                        "env > " + seen},
                       {"DLOCK_SENTINEL_PASSWORD=s3cret-sentinel"});
  EXPECT_EQ(logged_in.status, 0) << logged_in.err;
  EXPECT_EQ(read_file(seen).find("s3cret-sentinel"), std::string::npos) << "CMD saw it";
  auto unknown = run({"-r", "redis-sentinel://127.0.0.1:" +
                                std::to_string(group.sentinel(0).port()) + "/nosuch",
                      "run", "-n", key, "--", "true"});
  EXPECT_NE(unknown.status, 0);
  EXPECT_NE(unknown.err.find("no master named 'nosuch'"), std::string::npos) << unknown.err;
}

// --replication-guard on a master without replicas: nothing can confirm the grant, so CMD never
// runs, and the message says why.
TEST_F(CliTest, ReplicationGuardWithoutReplicasRefusesAndSaysWhy) {
  const std::string ran = path("ran");
  auto r = run({"-r", server_.url(), "--replication-guard", "run", "-n", test_key(), "--", "touch",
                ran});
  EXPECT_NE(r.status, 0);
  EXPECT_FALSE(fs::exists(ran)) << "CMD ran without a confirmed grant";
  EXPECT_NE(r.err.find("replica"), std::string::npos) << r.err;
}

// A replication guard's miss is an outage to the command: within -w it waits for a replica to
// confirm, as for nodes that do not answer, instead of exiting 69 at once (loops then spun).
TEST_F(CliTest, AReplicationGuardMissWaitsWithinTheWaitForAReplica) {
  redis_server master{{.extra = {"--repl-diskless-sync-delay", "0"}}};
  const std::string key = test_key(), ran = path("ran");
  auto waiting = start({"-r", master.url(), "--replication-guard", "run", "-q", "-w", "60", key,
                        "--", "touch", ran});
  std::this_thread::sleep_for(test::scaled(1500ms));
  EXPECT_FALSE(waiting->try_wait()) << "gave up at once: " << waiting->err();
  EXPECT_FALSE(fs::exists(ran)) << "CMD ran without a confirmed grant";
  redis_server replica{{.extra = {"--replicaof", "127.0.0.1", std::to_string(master.port())}}};
  EXPECT_EQ(waiting->wait(test::scaled(30s)), 0) << waiting->err();
  EXPECT_TRUE(fs::exists(ran));
  EXPECT_FALSE(exists(key, &master)) << "released after CMD";
}

// Without -w, waiters whose grants the replicas never confirm give up after the outage grace
// (twice --request-timeout), also when they take turns at the unconfirmed grant: within the
// library's wait the other's grant is contention, which must not restart the grace.
TEST_F(CliTest, ReplicationGuardMissesEndTheWaitOfTwoRunsWithoutW) {
  redis_server master{{.extra = {"--repl-diskless-sync-delay", "0"}}};
  redis_server replica{{.extra = {"--replicaof", "127.0.0.1", std::to_string(master.port())}}};
  ASSERT_TRUE(eventually([&] {
    return test::raw_command(master.port(), "INFO replication").find("state=online") !=
           std::string::npos;
  }, test::scaled(10s))) << "the replica never synced";
  replica.pause();  // connected, acknowledges nothing: every WAIT times out
  const std::string key = test_key();
  auto a = start({"-r", master.url(), "--replication-guard", "run", "-q", key, "--", "true"});
  auto b = start({"-r", master.url(), "--replication-guard", "run", "-q", key, "--", "true"});
  EXPECT_EQ(a->wait(test::scaled(15s)), 69) << a->err();
  EXPECT_EQ(b->wait(test::scaled(15s)), 69) << b->err();
  replica.resume();
}

// A run that gives up leaves no waiter note behind: the note's removal is awaited before dlock
// exits (an unawaited write was dropped at exit, and the notes piled up).
TEST_F(CliTest, ARunThatGivesUpLeavesNoWaiterNote) {
  const std::string key = test_key();
  auto holder = start_holder({"-r", server_.url(), "run", key, "--"});
  ASSERT_TRUE(holder);
  for (int i = 0; i < 3; ++i) {
    auto r = run({"-r", server_.url(), "run", "-q", "-w", "1", key, "--", "true"});
    EXPECT_EQ(r.status, 75) << r.err;
  }
  EXPECT_EQ(test::raw_command(server_.port(), "HLEN " + waiter_notes_key(key)), ":0\r\n");
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
}

// ... and ends with 69 once -w is over, not sooner.
TEST_F(CliTest, AReplicationGuardMissGivesUpWhenTheWaitIsOver) {
  auto r = run({"-r", server_.url(), "--replication-guard", "run", "-q", "-w", "1.5",
                test_key(), "--", "true"});
  EXPECT_EQ(r.status, 69) << r.err;
  EXPECT_GE(r.took, 1400ms) << r.err;
  EXPECT_NE(r.err.find("replica"), std::string::npos) << r.err;
}

TEST_F(CliTest, TwoNonblockingRunsAtOnceOneRunsTheOtherExits75AtOnce) {
  const std::string key = test_key(), ran = path("ran"), go = path("go");
  // The winner holds the lock until the test lets it go, after the loser has exited: a loser
  // that waited for the winner would never exit.
  const std::string script =
      "echo $$ >> " + ran + "; while [ ! -e " + go + " ]; do sleep 0.02; done";
  auto t0 = steady::now();
  auto a = start({"-r", server_.url(), "run", "-n", key, "--", "sh", "-c", script});
  auto b = start({"-r", server_.url(), "run", "-n", key, "--", "sh", "-c", script});
  std::optional<int> first;
  ASSERT_TRUE(eventually([&] { return (first = a->try_wait()) || (first = b->try_wait()); }))
      << "the loser waited for the winner";
  auto loser_took = steady::now() - t0;
  EXPECT_EQ(*first, 75) << a->err() << b->err();
  EXPECT_LT(loser_took, test::scaled(1500ms)) << "the loser must exit at once";
  touch(go);
  int sa = a->wait(), sb = b->wait();
  EXPECT_EQ(std::min(sa, sb), 0);
  EXPECT_EQ(std::max(sa, sb), 75);
  EXPECT_EQ(lines(read_file(ran)), 1u) << "exactly one CMD ran";
  // -E replaces 75, like flock's -E.
  auto holder = start_holder({"-r", server_.url(), "run", key, "--"});
  ASSERT_TRUE(holder);
  EXPECT_EQ(run({"-r", server_.url(), "run", "-n", "-E", "9", key, "--", "true"}).status, 9);
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
}

// The same cron job on two hosts whose clocks differ by 500 ms: with --min-hold the quick job
// keeps the lock for 2 s after it took it, so the late host finds it held and does not run the
// job again; the lock then expires by itself and the next schedule runs.
TEST_F(CliTest, MinHoldRunsAJobOnceAcrossHostsStartedApart) {
  const std::string key = test_key(), ran = path("ran");
  const std::vector<std::string> job{"-r", server_.url(), "run", "-n", "--min-hold", "2s", key,
                                     "--", "sh", "-c", "echo $$ >> " + ran};
  auto t0 = steady::now();
  auto first = start(job);
  // The late host starts 500 ms after the first, and after the first host's quick job ran.
  ASSERT_TRUE(eventually([&] { return lines(read_file(ran)) == 1; })) << first->err();
  std::this_thread::sleep_until(t0 + 500ms);
  auto second = run(job);
  EXPECT_EQ(first->wait(), 0) << first->err();
  EXPECT_EQ(second.status, 75) << second.err;
  EXPECT_EQ(lines(read_file(ran)), 1u) << "the job ran once per host, not once per schedule";
  // Held until 2 s after the first run took it, and no longer.
  auto left = pttl(key);
  EXPECT_GT(left, 0) << "the lock was released when the job ended";
  EXPECT_LE(left, 2000) << "kept for the TTL (10 s), not for --min-hold";
  ASSERT_TRUE(eventually([&] { return !exists(key); }, 3s));
  auto next = run(job);
  EXPECT_EQ(next.status, 0) << next.err;
  EXPECT_EQ(lines(read_file(ran)), 2u);
  // A job that outlasts --min-hold releases at its end, as without it.
  auto slow = run({"-r", server_.url(), "run", "--min-hold", "100ms", key, "--", "sleep", "0.3"});
  EXPECT_EQ(slow.status, 0) << slow.err;
  EXPECT_FALSE(exists(key));
}

TEST_F(CliTest, RunExitsWithCmdStatusAndReleasesAtOnce) {
  const std::string key = test_key();
  auto r = run({"-r", server_.url(), "run", key, "--", "sh", "-c", "exit 7"});
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_FALSE(exists(key)) << "released, not left to expire (TTL 10 s)";
  auto second = run({"-r", server_.url(), "run", "-n", key, "--", "true"});
  EXPECT_EQ(second.status, 0) << second.err;
  EXPECT_LT(second.took, test::scaled(5s));
  // A CMD ended by a signal reports 128 + N, as a shell does.
  EXPECT_EQ(run({"-r", server_.url(), "run", key, "--", "sh", "-c", "kill -KILL $$"}).status,
            128 + SIGKILL);
  EXPECT_FALSE(exists(key));
  auto missing = run({"-r", server_.url(), "run", key, "--", "no-such-command-dlock-test"});
  EXPECT_EQ(missing.status, 127);
  expect_one_line_message(missing);
}

TEST_F(CliTest, SigtermToDlockReachesCmdThenTheLockIsFreeAndNoProcessIsLeft) {
  strays left;
  const std::string key = test_key();
  // CMD runs a child of its own (sleep) and waits; TERM must reach both.
  const std::string script = "echo $$ > " + path("pid") + "; trap 'echo term > " + path("got") +
                             "; exit 3' TERM; sleep 100000 & echo $! > " + path("child") +
                             "; wait";
  auto d = start({"-r", server_.url(), "run", key, "--", "sh", "-c", script});
  pid_t cmd = left.add(read_pid(path("pid")));
  left.add(read_pid(path("child")));
  ASSERT_GT(cmd, 0);
  ASSERT_TRUE(eventually([&] { return group_members(cmd).size() >= 2; })) << "sh and sleep";
  EXPECT_TRUE(exists(key));
  EXPECT_EQ(d->terminate(), 3) << d->err();  // CMD's own status: it handled the TERM
  EXPECT_EQ(read_file(path("got")), "term\n");
  EXPECT_FALSE(exists(key)) << "released as soon as CMD exited";
  EXPECT_TRUE(eventually([&] { return group_members(cmd).empty(); }, 3s))
      << "left behind: " << group_members(cmd).size();
  EXPECT_FALSE(running(cmd));
}

TEST_F(CliTest, SignalWhileWaitingEndsTheWait) {
  const std::string key = test_key();
  auto holder = start_holder({"-r", server_.url(), "run", key, "--"});
  ASSERT_TRUE(holder);
  auto waiter = start({"-r", server_.url(), "run", key, "--", "touch", path("never")});
  ASSERT_TRUE(eventually([&] { return queued(lock_keys_for(key).waiters).size() == 1; }))
      << "the waiter never queued: " << waiter->err();
  auto t0 = steady::now();
  waiter->signal(SIGINT);
  EXPECT_EQ(waiter->wait(), 128 + SIGINT);
  EXPECT_LT(steady::now() - t0, test::scaled(2s));
  EXPECT_FALSE(fs::exists(path("never")));
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
}

// A waiting `dlock run` waits as a library waiter does: it queues on the node, and the holder's
// release hands it the lock in the same script (its token then reads "<id>.h<round>"). Before
// the engine it polled with one-attempt rounds, never queued, and raced every other waiter.
TEST_F(CliTest, AWaitingRunQueuesAndIsHandedTheLockOnRelease) {
  const std::string key = test_key();
  auto holder = start_holder({"-r", server_.url(), "run", key, "--"});
  ASSERT_TRUE(holder);
  auto waiter = start({"-r", server_.url(), "run", "-w", "10s", key, "--", "sh", "-c",
                       "echo $DLOCK_TOKEN > " + path("token")});
  EXPECT_TRUE(eventually([&] {
    return test::raw_command(server_.port(), "ZCARD {" + key + "}:waiters").rfind(":1", 0) == 0;
  }, 5s)) << "the waiting run never joined the waiter queue";
  std::string queued = test::raw_command(server_.port(), "ZRANGE {" + key + "}:waiters 0 0");
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
  EXPECT_EQ(waiter->wait(), 0) << waiter->err();
  // The release hands the lock to the queued waiter: "<id>.h<round>". A round of that waiter
  // in flight at that moment takes the handed-over key over as "<id>.<round>" (acquire.lua),
  // which is the handoff all the same; any other value would be someone else's.
  std::string token = read_file(path("token"));
  auto id = token.substr(0, token.rfind('.'));
  EXPECT_FALSE(id.empty()) << token;
  EXPECT_NE(queued.find(id), std::string::npos) << "not the queued waiter's: " << token;
}

TEST_F(CliTest, KillDashNineOfDlockFreesTheLockWithinTheTtl) {
  strays left;
  const std::string key = test_key();
  auto d = start_sleeping({"-r", server_.url(), "run", "--ttl", "1s", key, "--"},
                          "echo $$ > " + path("pid"));
  pid_t cmd = left.add(read_pid(path("pid")));
  ASSERT_TRUE(exists(key));
  d->signal(SIGKILL);
  EXPECT_EQ(d->wait(), 128 + SIGKILL);
  auto t0 = steady::now();
  ASSERT_TRUE(eventually([&] { return !exists(key); }, 5s));
  // The TTL, plus time to see it (scaled: the look itself may be slow on a busy host).
  EXPECT_LE(steady::now() - t0, 1s + test::scaled(200ms))
      << "the key must expire within its 1 s TTL";
  // CMD does not run on unwatched: its guard kills it when dlock dies.
  EXPECT_TRUE(eventually([&] { return !running(cmd); }, 3s));
  auto next = run({"-r", server_.url(), "run", "-n", key, "--", "true"});
  EXPECT_EQ(next.status, 0) << next.err;
}

TEST_F(CliTest, LeaseLostWhileCmdRunsStopsCmdAndExits71) {
  const std::string key = test_key();
  // CMD ignores SIGTERM, so only the SIGKILL after --lost-grace stops it.
  auto d = start({"-r", server_.url(), "run", "--ttl", "1s", "--lost-grace", "300ms", key, "--",
                  "sh", "-c", "echo $$ > " + path("pid") + "; trap '' TERM; while :; do sleep 0.1; done"});
  pid_t cmd = read_pid(path("pid"));
  ASSERT_TRUE(exists(key));
  auto t0 = steady::now();
  server_.restart();  // kill -9 and start again without persistence: the key is gone
  EXPECT_EQ(d->wait(15s), 71) << d->err();
  EXPECT_LT(steady::now() - t0, test::scaled(5s));
  EXPECT_NE(d->err().find("lost the lock"), std::string::npos) << d->err();
  EXPECT_FALSE(running(cmd));
  EXPECT_TRUE(eventually([&] { return group_members(cmd).empty(); }, 3s));
}

TEST_F(CliTest, ThreeNodesWorkWithOneDownAndExit69WithTwoDown) {
  redis_server second, third;
  const std::string key = test_key();
  std::vector<std::string> env{"DLOCK_REDIS=" + server_.url() + "," + second.url() + "," + third.url()};
  third.kill();
  auto one_down = run({"run", "-n", key, "--", "sh", "-c", "echo $DLOCK_FENCE"}, env);
  EXPECT_EQ(one_down.status, 0) << one_down.err;
  EXPECT_FALSE(exists(key)) << "released on the live nodes";
  second.kill();
  auto t0 = steady::now();
  auto two_down = run({"-r", server_.url(), "-r", second.url(), "-r", third.url(), "run", "-n", key,
                       "--", "touch", path("never")});
  EXPECT_EQ(two_down.status, 69) << two_down.err;
  expect_one_line_message(two_down);
  EXPECT_NE(two_down.err.find("quorum"), std::string::npos) << two_down.err;
  // Waiting without -w does not hang on an outage: it is waited out for 2 x
  // --request-timeout, then 69.
  auto waiting =
      run({"--request-timeout", "200ms", "run", key, "--", "touch", path("never")}, env);
  EXPECT_EQ(waiting.status, 69) << waiting.err;
  EXPECT_LT(steady::now() - t0, test::scaled(8s));
  EXPECT_FALSE(fs::exists(path("never")));
}

TEST_F(CliTest, FenceStrictlyIncreasesAcrossRunsAndCmdSeesItsEnvironment) {
  const std::string key = test_key();
  std::uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    auto r = run({"-r", server_.url(), "run", key, "--", "sh", "-c",
                  "echo \"$DLOCK_KEY $DLOCK_TOKEN $DLOCK_FENCE\"; ls -l /proc/$$/fd | grep -c socket: || true"});
    ASSERT_EQ(r.status, 0) << r.err;
    std::istringstream in(r.out);
    std::string k, token;
    std::uint64_t fence = 0;
    int sockets = -1;
    ASSERT_TRUE(in >> k >> token >> fence >> sockets) << r.out;
    EXPECT_EQ(k, key);
    EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), 32u) << token;  // "<id>.<round>"
    EXPECT_GT(fence, last);
    EXPECT_EQ(sockets, 0) << "CMD inherited dlock's connections to Redis";
    last = fence;
  }
  auto status = run({"-r", server_.url(), "status", "--json", key});
  EXPECT_EQ(status.status, 0);
  EXPECT_NE(status.out.find("\"held\":false"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\"fence\":" + std::to_string(last)), std::string::npos) << status.out;
}

// `dlock elect` runs CMD only while leader, with the term in DLOCK_TERM; `dlock leader` names
// the leader, and --watch prints each change; a second candidate waits, or exits 75 with -n.
TEST_F(CliTest, ElectRunsCmdWhileLeaderAndLeaderNamesIt) {
  const std::string name = test_key();
  EXPECT_EQ(run({"-r", server_.url(), "leader", name}).status, 1);  // nobody leads
  auto watch = start({"-r", server_.url(), "leader", "--watch", name});
  auto a = start_sleeping({"-r", server_.url(), "elect", "--value", "alpha", name, "--"},
                          "echo $DLOCK_TERM > " + path("term"));
  ASSERT_TRUE(eventually([&] { return !read_file(path("term")).empty(); }));
  auto term = read_file(path("term"));
  term.pop_back();  // the newline
  auto now = run({"-r", server_.url(), "leader", name});
  EXPECT_EQ(now.status, 0) << now.err;
  EXPECT_EQ(now.out, term + " alpha\n");
  EXPECT_EQ(run({"-r", server_.url(), "elect", "-n", name, "--", "touch", path("never")}).status,
            75);
  a->signal(SIGTERM);  // CMD ends; dlock resigns
  EXPECT_EQ(a->wait(), 128 + SIGTERM);
  auto b = run({"-r", server_.url(), "elect", "--value", "beta", name, "--", "sh", "-c",
                "echo $DLOCK_TERM"});
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_GT(std::stoull(b.out), std::stoull(term));
  ASSERT_TRUE(eventually([&] { return lines(watch->out()) == 4; })) << watch->out();
  watch->signal(SIGINT);
  EXPECT_EQ(watch->wait(), 0);
  b.out.pop_back();
  EXPECT_EQ(watch->out(), "elected " + term + " alpha\nended " + term + " alpha\nelected " +
                              b.out + " beta\nended " + b.out + " beta\n");
  EXPECT_FALSE(fs::exists(path("never")));
}

TEST_F(CliTest, BadInputExits64WithAOneLineMessage) {
  const std::string key = test_key();
  const std::vector<std::vector<std::string>> cases{
      {"--bogus", "status", key},
      {"-r", server_.url(), "run", "--ttl", "5parsecs", key, "--", "true"},
      {"-r", server_.url(), "run", "-w", "-1s", key, "--", "true"},
      {"-r", "foo://bar", "status", key},
      {"-r", "redis://127.0.0.1:99999", "status", key},
      {"-r", server_.url(), "run", "--ttl", "0", key, "--", "true"},
      {"-r", server_.url(), "acquire", "--ttl", "0", key},
      {"-r", server_.url(), "run", key},
      {"-r", server_.url(), "run", "-n", "-w", "1s", key, "--", "true"},
      {"-r", server_.url(), "-r", server_.url(), "status", key},
      {"--request-timeout", "0", "-r", server_.url(), "status", key},
      {"-r", server_.url(), "frobnicate"},
      {},
  };
  for (const auto& args : cases) {
    auto r = run(args);
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    EXPECT_EQ(r.status, 64) << shown << "\n" << r.err;
    expect_one_line_message(r);
  }
  EXPECT_FALSE(exists(key));
  // A bad URL in $DLOCK_REDIS too.
  auto env = run({"status", key}, {"DLOCK_REDIS=redis://127.0.0.1:6379,nonsense"});
  EXPECT_EQ(env.status, 64) << env.err;
  expect_one_line_message(env);
}

TEST_F(CliTest, AcquireStatusExtendRelease) {
  const std::string key = test_key();
  // 30 s: under ThreadSanitizer each run of the command takes a second or two, and the key
  // must outlive the five runs below.
  auto a = run({"-r", server_.url(), "acquire", "--ttl", "30s", key});
  ASSERT_EQ(a.status, 0) << a.err;
  std::istringstream in(a.out);
  std::string token;
  std::uint64_t fence = 0;
  ASSERT_TRUE(in >> token >> fence) << a.out;
  EXPECT_GT(pttl(key), 28'000);
  EXPECT_LE(pttl(key), 30'000);

  auto st = run({"-r", server_.url(), "status", "--json", key});
  EXPECT_EQ(st.status, 0);
  EXPECT_NE(st.out.find("\"held\":true"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("\"token\":\"" + token + "\""), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("\"fence\":" + std::to_string(fence)), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("\"command\":\"dlock acquire\""), std::string::npos) << st.out;
  auto text = run({"-r", server_.url(), "status", key});
  EXPECT_NE(text.out.find(key + ": held by "), std::string::npos) << text.out;

  EXPECT_EQ(run({"-r", server_.url(), "acquire", "-n", key}).status, 75);
  EXPECT_EQ(run({"-r", server_.url(), "release", key, "not-the-token"}).status, 71);
  EXPECT_TRUE(exists(key)) << "a wrong token never deletes the holder's key";

  EXPECT_EQ(run({"-r", server_.url(), "extend", key, token, "--ttl", "60s"}).status, 0);
  EXPECT_GT(pttl(key), 50'000);
  EXPECT_EQ(run({"-r", server_.url(), "release", key, token}).status, 0);
  EXPECT_FALSE(exists(key));
  auto again = run({"-r", server_.url(), "release", key, token});
  EXPECT_EQ(again.status, 71);
  expect_one_line_message(again);
  EXPECT_EQ(run({"-r", server_.url(), "extend", key, token}).status, 71);
  auto free = run({"-r", server_.url(), "status", key});
  EXPECT_EQ(free.status, 0);
  EXPECT_EQ(free.out.rfind(key + ": free", 0), 0u) << free.out;
}

TEST_F(CliTest, PasswordFromEnvironmentOrFileNeverOnlyArgv) {
  redis_server secured{{.extra = {"--requirepass", "s3cret"}}};
  const std::string key = test_key();
  auto none = run({"-r", secured.url(), "status", key});
  EXPECT_EQ(none.status, 77) << none.err;  // EX_NOPERM: status could not tell, for want of it
  auto env = run({"-r", secured.url(), "status", key}, {"DLOCK_PASSWORD=s3cret"});
  EXPECT_EQ(env.status, 0) << env.err;
  {
    std::ofstream f(path("password"));
    f << "s3cret\n";
  }
  auto file = run({"-r", secured.url(), "--password-file", path("password"), "run", key, "--", "true"});
  EXPECT_EQ(file.status, 0) << file.err;
  auto missing = run({"-r", secured.url(), "--password-file", path("nope"), "status", key});
  EXPECT_EQ(missing.status, 64);
  expect_one_line_message(missing);
}

// Not on a terminal (cron, a log file), a wait shows who holds the lock as one line per change
// of holder, not one per second: 4 s behind two holders in turn, two lines. -q says nothing.
TEST_F(CliTest, WaitNotOnATerminalPrintsALineWhenTheHolderChanges) {
  const std::string key = test_key();
  // The first holds until the test lets it go (the file "go").
  auto first = start({"-r", server_.url(), "run", key, "--", "sh", "-c",
                      "touch " + path("m") + "; while [ ! -e " + path("go") +
                          " ]; do sleep 0.05; done"});
  ASSERT_TRUE(eventually([&] { return fs::exists(path("m")); }));
  // The second queues first, so the first's release hands it the lock.
  auto second = start({"-r", server_.url(), "run", "-w", "20s", key, "--", "sleep", "100000"});
  ASSERT_TRUE(eventually([&] { return queued(lock_keys_for(key).waiters).size() == 1; }, 5s));
  const pid_t first_pid = first->pid(), second_pid = second->pid();
  // About 2 s behind the first holder, then the rest of the 4 s behind the second: the first
  // lets go once the wait has named it, and not before 2 s.
  auto waiting_since = steady::now();
  auto waiting = start({"-r", server_.url(), "run", "-w", "4s", key, "--", "true"});
  ASSERT_TRUE(eventually([&] {
    return waiting->err().find("pid " + std::to_string(first_pid) + " (") != std::string::npos;
  })) << waiting->err();
  std::this_thread::sleep_until(waiting_since + 2s);
  touch(path("go"));
  const int status = waiting->wait();
  const cli_result r{status, waiting->out(), waiting->err(), {}};
  EXPECT_EQ(r.status, 75) << r.err;
  EXPECT_EQ(first->wait(), 0) << first->err();
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  // The second holder's note lands just after its lock, so one look may fall in between and
  // print a line of its own ("another owner"); every other line names a new holder.
  std::vector<std::string> named;
  std::istringstream err(r.err);
  for (std::string line; std::getline(err, line);) {
    EXPECT_EQ(line.rfind("dlock: waiting for '" + key + "': held by ", 0), 0u) << r.err;
    if (line.find("held by another owner") == std::string::npos) named.push_back(line);
  }
  EXPECT_LE(lines(r.err), 3u) << "one line per holder, not one per second:\n" << r.err;
  ASSERT_EQ(named.size(), 2u) << "one line per holder, not one per second:\n" << r.err;
  EXPECT_NE(named[0].find("pid " + std::to_string(first_pid) + " (`sh -c touch"), std::string::npos)
      << r.err;
  EXPECT_NE(named[1].find("pid " + std::to_string(second_pid) + " (`sleep 100000`)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(named[1].find(", expires in "), std::string::npos) << r.err;
  EXPECT_NE(named[1].find("; waited "), std::string::npos) << r.err;

  // 2.5 s behind one holder: one line, not three.
  auto one = run({"-r", server_.url(), "run", "-w", "2500ms", key, "--", "true"});
  EXPECT_EQ(one.status, 75) << one.err;
  EXPECT_EQ(lines(one.err), 1u) << one.err;
  EXPECT_NE(one.err.find("pid " + std::to_string(second_pid) + " (`sleep 100000`)"),
            std::string::npos)
      << one.err;

  auto quiet = run({"-r", server_.url(), "run", "-q", "-w", "1500ms", key, "--", "true"});
  EXPECT_EQ(quiet.status, 75);
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(second->terminate(), 128 + SIGTERM);
}

// On a terminal the wait is one live line, rewritten in place (\r, clear to the end of the line)
// and ended with a newline when the wait ends. stderr is a pseudo-terminal here, in raw mode so
// that the bytes arrive as written.
TEST_F(CliTest, WaitOnATerminalRewritesOneLiveLine) {
  const std::string key = test_key();
  auto holder = start_holder({"-r", server_.url(), "run", key, "--"});
  ASSERT_TRUE(holder);
  auto [status, err] = run_on_terminal({"-r", server_.url(), "acquire", "-w", "2500ms", key});
  EXPECT_EQ(status, 75) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(err.back(), '\n') << err;
  std::size_t rewrites = 0;
  for (auto at = err.find("\r\x1b[K"); at != std::string::npos; at = err.find("\r\x1b[K", at + 1)) {
    ++rewrites;
  }
  EXPECT_GE(rewrites, 2u) << "rewritten as the wait goes on: " << err;
  auto last = err.substr(err.rfind('\r') + 4);
  EXPECT_EQ(last.rfind("dlock: waiting for '" + key + "': held by ", 0), 0u) << err;
  EXPECT_NE(last.find("pid " + std::to_string(holder->pid())), std::string::npos) << err;
  EXPECT_NE(last.find("; waited 2."), std::string::npos) << err;
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
}

// `dlock status` shows the waiter queue the library keeps for wake-ups and handoffs.
TEST_F(CliTest, StatusOfALockShowsItsQueuedWaiters) {
  const std::string key = test_key();
  auto holder = start_holder({"-r", server_.url(), "run", key, "--"});
  ASSERT_TRUE(holder);
  auto waiter = start({"-r", server_.url(), "run", "-q", "-w", "20s", key, "--", "true"});
  std::vector<std::string> ids;
  ASSERT_TRUE(
      eventually([&] { return (ids = queued(lock_keys_for(key).waiters)).size() == 1; }, 5s));

  auto text = run({"-r", server_.url(), "status", key});
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find(key + ": held by "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 waiter"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1. " + ids[0]), std::string::npos) << text.out;
  auto json = run({"-r", server_.url(), "status", "--json", key});
  EXPECT_EQ(json.status, 0) << json.err;
  EXPECT_NE(json.out.find("\"waiters\":[{\"id\":\"" + ids[0] + "\",\"position\":1,"),
            std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"takes_handoff\":true"), std::string::npos) << json.out;

  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
  EXPECT_EQ(waiter->wait(), 0) << waiter->err();
  auto after = run({"-r", server_.url(), "status", "--json", key});
  EXPECT_NE(after.out.find("\"waiters\":[]"), std::string::npos) << after.out;
}

// `dlock status --semaphore LIMIT` shows the permits in use against the limit, the holders and
// the queue; the same for a fair semaphore with --fair.
TEST_F(CliTest, StatusOfASemaphoreShowsHoldersPermitsAndWaiters) {
  const std::string key = test_key("sem");
  const std::vector<std::string> holder{"-r", server_.url(), "run", "--semaphore", "2", key, "--"};
  auto a = start_sleeping(holder, "echo $DLOCK_TOKEN > " + path("a"));
  auto b = start_sleeping(holder, "echo $DLOCK_TOKEN > " + path("b"));
  std::string token_a, token_b;
  ASSERT_TRUE(eventually([&] {
    token_a = read_file(path("a")), token_b = read_file(path("b"));
    return token_a.size() == 33 && token_b.size() == 33;
  })) << a->err() << b->err();
  token_a.pop_back(), token_b.pop_back();
  auto waiter = start({"-r", server_.url(), "run", "-q", "-w", "20s", "--semaphore", "2", key,
                       "--", "true"});
  std::vector<std::string> ids;
  ASSERT_TRUE(eventually([&] {
    return (ids = queued(semaphore_keys_for(key, false).waiters)).size() == 1;
  }, 5s));

  auto text = run({"-r", server_.url(), "status", "--semaphore", "2", key});
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_EQ(text.out.rfind(key + ": semaphore, 2 of 2 permits in use", 0), 0u) << text.out;
  EXPECT_NE(text.out.find(token_a), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(token_b), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1. " + ids[0]), std::string::npos) << text.out;
  // An unfair waiter that waits for wake-ups takes a handoff (sem_release.lua).
  // (After its id, a waiting run's note may already say who it is: StatusIdentifiesWaiters...)
  auto line_of = [](const std::string& out, const std::string& start) {
    auto at = out.find(start);
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_NE(line_of(text.out, "1. " + ids[0] + "  ").find("takes a handoff, "), std::string::npos)
      << text.out;
  auto json = run({"-r", server_.url(), "status", "--json", "--semaphore", "2", key});
  EXPECT_EQ(json.status, 0) << json.err;
  for (const auto* part : {"\"type\":\"semaphore\"", "\"fair\":false", "\"limit\":2",
                           "\"in_use\":2", "\"free\":0"}) {
    EXPECT_NE(json.out.find(part), std::string::npos) << part << " in " << json.out;
  }
  for (const auto& token : {token_a, token_b}) {
    EXPECT_NE(json.out.find("{\"token\":\"" + token + "\",\"permits\":1,"), std::string::npos)
        << json.out;
  }
  EXPECT_NE(json.out.find("\"takes_handoff\":true,"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"waiters\":[{\"token\":\"" + ids[0] + "\",\"position\":1,"),
            std::string::npos) << json.out;
  // Status only reads: the waiter still queues, the holders still hold.
  EXPECT_EQ(queued(semaphore_keys_for(key, false).waiters), ids);
  EXPECT_EQ(a->terminate(), 128 + SIGTERM);
  EXPECT_EQ(waiter->wait(), 0) << waiter->err();
  EXPECT_EQ(b->terminate(), 128 + SIGTERM);
  auto free = run({"-r", server_.url(), "status", "--semaphore", "2", key});
  EXPECT_EQ(free.out.rfind(key + ": semaphore, 0 of 2 permits in use", 0), 0u) << free.out;

  // A fair semaphore (the library's fair = true) keeps holders and waiters in one queue.
  const std::string fair_key = test_key("fair");
  semaphore fair{client(server_.url()), fair_key, 1, {.ttl = 20s, .fair = true}};
  lease held = fair.acquire();
  // Status only reads: no script runs and the server counts no change.
  auto changes = [&] {
    auto info = test::raw_command(server_.port(), "INFO persistence");
    auto at = info.find("rdb_changes_since_last_save:");
    return at == std::string::npos ? -1 : std::stoll(info.substr(at + 28));
  };
  client observer{server_.url()};
  const auto changes_before = changes(), scripts_before = test::scripts_run(observer);
  ASSERT_GE(changes_before, 0);
  EXPECT_EQ(run({"-r", server_.url(), "status", "--semaphore", "1", "--fair", fair_key}).status, 0);
  EXPECT_EQ(run({"-r", server_.url(), "status", fair_key}).status, 0);
  EXPECT_EQ(changes(), changes_before);
  EXPECT_EQ(test::scripts_run(observer), scripts_before);
  auto queued_waiter = std::async(std::launch::async, [&] { return fair.try_acquire_for(10s); });
  ASSERT_TRUE(eventually(
      [&] { return queued(semaphore_keys_for(fair_key, true).owners).size() == 2; }, 5s));
  auto fair_json =
      run({"-r", server_.url(), "status", "--json", "--semaphore", "1", "--fair", fair_key});
  EXPECT_EQ(fair_json.status, 0) << fair_json.err;
  EXPECT_NE(fair_json.out.find("\"fair\":true"), std::string::npos) << fair_json.out;
  EXPECT_NE(fair_json.out.find("\"holders\":[{\"token\":\"" + held.value() + "\""),
            std::string::npos)
      << fair_json.out;
  EXPECT_NE(fair_json.out.find("\"waiters\":[{\"token\":"), std::string::npos) << fair_json.out;
  EXPECT_EQ(fair_json.out.find("\"waiters\":[{\"token\":\"" + held.value()), std::string::npos)
      << "the holder is no waiter: " << fair_json.out;
  // A fair waiter that waits for wake-ups takes a handoff too (once it is subscribed).
  EXPECT_TRUE(eventually([&] {
    fair_json =
        run({"-r", server_.url(), "status", "--json", "--semaphore", "1", "--fair", fair_key});
    return fair_json.out.find("\"takes_handoff\":true,") != std::string::npos;
  }, 5s)) << fair_json.out;
  EXPECT_FALSE(held.release());
  EXPECT_TRUE(queued_waiter.get());
  // A semaphore lives on one node; --fair alone is a usage error.
  redis_server other;
  auto two_nodes = run({"-r", server_.url(), "-r", other.url(), "status", "--semaphore", "2", key});
  EXPECT_EQ(two_nodes.status, 64);
  expect_one_line_message(two_nodes);
  auto fair_alone = run({"-r", server_.url(), "status", "--fair", key});
  EXPECT_EQ(fair_alone.status, 64);
  expect_one_line_message(fair_alone);
}

TEST_F(CliTest, SemaphoreRunsUpToLimitCmdsAtOnce) {
  const std::string key = test_key("sem");
  const std::vector<std::string> holder{"-r", server_.url(), "run", "--semaphore", "2", key, "--"};
  auto a = start_sleeping(holder, "touch " + path("m1"));
  auto b = start_sleeping(holder, "touch " + path("m2"));
  ASSERT_TRUE(eventually([&] { return fs::exists(path("m1")) && fs::exists(path("m2")); }))
      << a->err() << b->err();
  auto third = run({"-r", server_.url(), "run", "-n", "--semaphore", "2", key, "--", "true"});
  EXPECT_EQ(third.status, 75) << third.err;
  EXPECT_EQ(a->terminate(), 128 + SIGTERM);
  auto now_free = run({"-r", server_.url(), "run", "-n", "--semaphore", "2", key, "--", "true"});
  EXPECT_EQ(now_free.status, 0) << now_free.err;
  EXPECT_EQ(b->terminate(), 128 + SIGTERM);
  // A semaphore lives on one node; a limit below 1 is a usage error.
  redis_server other;
  auto two_nodes = run({"-r", server_.url(), "-r", other.url(), "run", "--semaphore", "2", key, "--", "true"});
  EXPECT_EQ(two_nodes.status, 64);
  expect_one_line_message(two_nodes);
  EXPECT_EQ(run({"-r", server_.url(), "run", "--semaphore", "0", key, "--", "true"}).status, 64);
}

TEST_F(CliTest, ReadersRunTogetherAndAWriterRunsAlone) {
  const std::string key = test_key("rw");
  const std::vector<std::string> reader{"-r", server_.url(), "run", "--read", key, "--"};
  auto a = start_sleeping(reader, "touch " + path("r1"));
  auto b = start_sleeping(reader, "touch " + path("r2"));
  ASSERT_TRUE(eventually([&] { return fs::exists(path("r1")) && fs::exists(path("r2")); }))
      << a->err() << b->err();
  auto writer_now = run({"-r", server_.url(), "run", "-n", "--write", key, "--", "true"});
  EXPECT_EQ(writer_now.status, 75) << writer_now.err;
  // A writer that waits keeps later readers out, and runs once both readers are gone.
  auto writer = start_sleeping({"-r", server_.url(), "run", "-w", "20s", "--write", key, "--"},
                               "touch " + path("w"));
  client node{server_.url()};
  ASSERT_TRUE(eventually([&] {
    return node.exec({"HLEN", shared_mutex_keys_for(key).weights}).integer() == 1;
  })) << writer->err();
  auto late_reader = run({"-r", server_.url(), "run", "-n", "--read", key, "--", "true"});
  EXPECT_EQ(late_reader.status, 75) << late_reader.err;
  EXPECT_EQ(a->terminate(), 128 + SIGTERM);
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(fs::exists(path("w"))) << "the writer ran beside a reader";
  EXPECT_EQ(b->terminate(), 128 + SIGTERM);
  ASSERT_TRUE(eventually([&] { return fs::exists(path("w")); })) << writer->err();
  EXPECT_EQ(writer->terminate(), 128 + SIGTERM);
  auto both = run({"-r", server_.url(), "run", "--read", "--write", key, "--", "true"});
  EXPECT_EQ(both.status, 64);
  redis_server other;
  auto two_nodes = run({"-r", server_.url(), "-r", other.url(), "run", "--read", key, "--", "true"});
  EXPECT_EQ(two_nodes.status, 64);
  expect_one_line_message(two_nodes);
}

// dlock latch: the coordinator sets the count, workers count down, a waiter waits for zero.
TEST_F(CliTest, LatchSetDownAndWaitFromTheShell) {
  const std::string name = test_key("batch");
  auto set = run({"-r", server_.url(), "latch", "set", name, "2"});
  EXPECT_EQ(set.status, 0) << set.err;
  auto again = run({"-r", server_.url(), "latch", "set", name, "5"});
  EXPECT_EQ(again.status, 1) << "an existing latch is left as it is";
  auto waiter = start({"-r", server_.url(), "latch", "wait", name});
  auto timed = run({"-r", server_.url(), "latch", "wait", "-w", "200ms", name});
  EXPECT_EQ(timed.status, 75);
  auto first = run({"-r", server_.url(), "latch", "down", name});
  EXPECT_EQ(first.status, 0) << first.err;
  EXPECT_EQ(first.out, "1\n");
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(waiter->try_wait()) << "opened at 1";
  auto last = run({"-r", server_.url(), "latch", "down", name});
  EXPECT_EQ(last.out, "0\n");
  EXPECT_EQ(waiter->wait(), 0) << waiter->err();
  auto missing = run({"-r", server_.url(), "latch", "down", test_key("none")});
  EXPECT_EQ(missing.status, 1);
  expect_one_line_message(missing);
  auto zero = run({"-r", server_.url(), "latch", "set", name + "x", "0"});
  EXPECT_EQ(zero.status, 64);
  client node{server_.url()};
  auto ttl = run({"-r", server_.url(), "latch", "set", "--ttl", "30s", name + "t", "1"});
  EXPECT_EQ(ttl.status, 0) << ttl.err;
  auto left = node.exec({"PTTL", name + "t"}).integer();
  EXPECT_GT(left, 20'000);
  EXPECT_LE(left, 30'000);
}

// run --also: KEY and every --also are held together, or the run waits (or, -n, exits 75)
// holding none of them; a set waiting for a name that a run holds is interrupted cleanly.
TEST_F(CliTest, RunAlsoHoldsSeveralLocksAllOrNone) {
  const std::string a = test_key("a"), b = test_key("b"), c = test_key("c");
  client node{server_.url()};
  auto both = run({"-r", server_.url(), "run", "--also", b, a, "--", "sh", "-c",
                   "redis-cli -p " + std::to_string(server_.port()) + " mget " + a + " " + b});
  ASSERT_EQ(both.status, 0) << both.err;
  std::istringstream lines(both.out);
  std::string value_a, value_b;
  std::getline(lines, value_a);
  std::getline(lines, value_b);
  EXPECT_FALSE(value_a.empty()) << both.out;
  EXPECT_EQ(value_a, value_b) << "both keys hold the run's owner value while CMD runs";
  EXPECT_EQ(node.exec({"EXISTS", a, b}).integer(), 0) << "released after CMD";
  // A 10 min TTL: the holder's renewals (every third of it) never count as the set's tries below.
  auto holder = start_holder({"-r", server_.url(), "run", "--ttl", "10m", c, "--"}, "c");
  ASSERT_TRUE(holder);
  auto refused = run({"-r", server_.url(), "run", "-n", "--also", c, a, "--", "true"});
  EXPECT_EQ(refused.status, 75) << refused.err;
  EXPECT_EQ(node.exec({"EXISTS", a}).integer(), 0) << "part of the set was kept";
  // A set waits by polling (every 50 ms or less): a few more scripts show it waiting, refused
  // each time.
  const auto scripts_before = test::scripts_run(node);
  auto waiting = start({"-r", server_.url(), "run", "--also", c, a, "--", "touch", path("set")});
  ASSERT_TRUE(eventually([&] { return test::scripts_run(node) >= scripts_before + 5; }))
      << waiting->err();
  EXPECT_FALSE(fs::exists(path("set")));
  EXPECT_EQ(waiting->terminate(), 128 + SIGTERM) << "a waiting set ends on a signal";
  EXPECT_EQ(node.exec({"EXISTS", a}).integer(), 0);
  auto later = start({"-r", server_.url(), "run", "--also", c, a, "--", "touch", path("set")});
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
  EXPECT_EQ(later->wait(), 0) << later->err();
  EXPECT_TRUE(fs::exists(path("set")));
  auto mixed = run({"-r", server_.url(), "run", "--read", "--also", c, a, "--", "true"});
  EXPECT_EQ(mixed.status, 64);
  redis_server other;
  auto two_nodes =
      run({"-r", server_.url(), "-r", other.url(), "run", "--also", c, a, "--", "true"});
  EXPECT_EQ(two_nodes.status, 64);
  expect_one_line_message(two_nodes);
}

}  // namespace
}  // namespace dlock::test

namespace dlock::test {
namespace {

TEST_F(CliTest, DoctorWarnsAboutAWeakDeploymentAndPassesASoundOne) {
  // One node without persistence: too few nodes, and a restart forgets the locks.
  auto weak = run({"-r", server_.url(), "doctor"});
  EXPECT_EQ(weak.status, 1) << weak.out << weak.err;
  EXPECT_NE(weak.out.find("too_few_nodes"), std::string::npos) << weak.out;
  EXPECT_NE(weak.out.find("forgets_on_restart"), std::string::npos) << weak.out;
  // Three independent nodes with an fsync'd AOF: nothing to say.
  test::server_options durable{.persistence = true};
  redis_server a{durable}, b{durable}, c{durable};
  auto sound = run({"-r", a.url(), "-r", b.url(), "-r", c.url(), "doctor"});
  EXPECT_EQ(sound.status, 0) << sound.out << sound.err;
  // A node that cannot be inspected.
  auto down = run({"--request-timeout", "200ms", "-r",
                   "redis://127.0.0.1:" + std::to_string(test::free_port()),
                   "doctor"});
  EXPECT_EQ(down.status, 69) << down.out << down.err;
}

// --metrics-file: the counts of the run, in a file that promtool accepts, for a run that took
// the lock and one that found it held.
TEST_F(CliTest, MetricsFileCountsTheRunForTheTextfileCollector) {
  const std::string key = test_key(), file = path("job.prom");
  auto ok = run({"-r", server_.url(), "--metrics-file", file, "run", key, "--", "true"});
  ASSERT_EQ(ok.status, 0) << ok.err;
  std::string text = read_file(file);
  SCOPED_TRACE(text);
  auto [status, out] = test::promtool_check(text);
  EXPECT_EQ(status, 0) << out;
  std::string labels = "key=\"" + key + "\",primitive=\"lock\"";
  EXPECT_EQ(test::metric_value(text, "dlock_acquisitions_total{" + labels + ",result=\"ok\"}"), 1);
  EXPECT_EQ(test::metric_value(text, "dlock_releases_total{" + labels + ",result=\"ok\"}"), 1);
  const std::string cli = "{key=\"" + key + "\",command=\"run\"}";
  EXPECT_EQ(test::metric_value(text, "dlock_cli_exit_status" + cli), 0);
  EXPECT_GT(test::metric_value(text, "dlock_cli_end_timestamp_seconds" + cli), 1.7e9);
  EXPECT_EQ(test::metric_value(text, "dlock_cli_running" + cli), 0);
  EXPECT_EQ(test::metric_value(text, "dlock_hold_seconds_count{" + labels + "}"), 1);

  auto holder = start({"-r", server_.url(), "run", key, "--", "sleep", "100000"});
  ASSERT_TRUE(eventually([&] { return exists(key); }));
  auto refused = run({"-r", server_.url(), "--metrics-file", file, "run", "-n", key, "--", "true"});
  EXPECT_EQ(refused.status, 75) << refused.err;
  text = read_file(file);
  EXPECT_EQ(test::metric_value(text, "dlock_acquisitions_total{" + labels + ",result=\"not_acquired\"}"), 1);
  EXPECT_EQ(test::metric_value(text, "dlock_acquisitions_total{" + labels + ",result=\"ok\"}"), -1)
      << "each run writes its own counts";
  EXPECT_EQ(test::metric_value(text, "dlock_cli_exit_status" + cli), 75);
  std::tie(status, out) = test::promtool_check(text);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(holder->terminate(10s), 128 + SIGTERM);
}

// The series of one metrics file, without their values: "name{labels}" per line.
std::set<std::string> series_of(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    out.insert(line.substr(0, line.rfind(' ')));
  }
  return out;
}

// Two jobs' files in one textfile directory (issue 36): node_exporter refuses a series that
// two files both have, and the node series had no key, so two jobs on one node collided. Each
// series now carries the name (and --metrics-label's); while `run` holds the lock the file
// says so, for the shipped alert on a lock held too long.
TEST_F(CliTest, MetricsFilesOfTwoJobsNeverShareASeries) {
  strays left;
  const std::string backup = test_key("backup"), report = test_key("report");
  const std::string a = path("backup.prom"), b = path("report.prom"), c = path("again.prom");
  ASSERT_EQ(run({"-r", server_.url(), "--metrics-file", a, "run", backup, "true"}).status, 0);
  ASSERT_EQ(run({"-r", server_.url(), "--metrics-file", b, "run", report, "true"}).status, 0);
  // The same name twice on one host, told apart by a label of the user's.
  ASSERT_EQ(run({"-r", server_.url(), "--metrics-file", c, "--metrics-label", "job=again", "run",
                 backup, "true"})
                .status,
            0);
  const std::string ta = read_file(a), tb = read_file(b), tc = read_file(c);
  for (const auto* text : {&ta, &tb, &tc}) {
    auto [status, out] = test::promtool_check(*text);
    EXPECT_EQ(status, 0) << out << *text;
  }
  auto sa = series_of(ta), sb = series_of(tb), sc = series_of(tc);
  ASSERT_FALSE(sa.empty());
  for (const auto& s : sa) {
    EXPECT_FALSE(sb.contains(s)) << s;
    EXPECT_FALSE(sc.contains(s)) << s;
  }
  EXPECT_NE(tc.find("dlock_node_requests_total{key=\"" + backup + "\",job=\"again\",node="),
            std::string::npos)
      << tc;

  // While the lock is held: running, and since when.
  const std::string held = path("held.prom");
  auto holder =
      start_holder({"-r", server_.url(), "--metrics-file", held, "run", report}, "holding");
  ASSERT_TRUE(holder);
  const std::string during = read_file(held);
  const std::string cli = "{key=\"" + report + "\",command=\"run\"}";
  EXPECT_EQ(test::metric_value(during, "dlock_cli_running" + cli), 1) << during;
  EXPECT_GT(test::metric_value(during, "dlock_cli_held_since_timestamp_seconds" + cli), 1.7e9);
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
  EXPECT_EQ(test::metric_value(read_file(held), "dlock_cli_running" + cli), 0);

  for (const auto& bad : {"job", "key=x", "command=x", "__x=1", "9x=1", "node=x"}) {
    auto r = run({"-r", server_.url(), "--metrics-file", path("bad.prom"), "--metrics-label",
                  bad, "run", backup, "touch", path("never")});
    EXPECT_EQ(r.status, 64) << bad << ": " << r.err;
    expect_one_line_message(r);
  }
  auto twice = run({"-r", server_.url(), "--metrics-file", path("bad.prom"), "--metrics-label",
                    "job=a", "--metrics-label", "job=b", "run", backup, "touch", path("never")});
  EXPECT_EQ(twice.status, 64) << twice.err;
  EXPECT_FALSE(fs::exists(path("never")));
}

// The shipped alert rules (docs/prometheus) load, and their unit tests pass: each alert fires
// on the series a stuck, a vanished, a struggling and a lease-losing job leave.
TEST_F(CliTest, ShippedAlertRulesPassPromtool) {
  const std::string tool = test::promtool_path();
  ASSERT_FALSE(tool.empty());
  const std::string dir = std::string(DLOCK_SOURCE_DIR) + "/docs/prometheus";
  for (const char* check : {"check rules dlock-alerts.yml", "test rules dlock-alerts-test.yml"}) {
    auto r = test::child_process({"/bin/sh", "-c", "cd " + dir + " && " + tool + " " + check});
    EXPECT_EQ(r.wait(60s), 0) << check;
  }
}

}  // namespace
}  // namespace dlock::test

// Too short a TTL, and the keys dlock keeps beside a lock, are usage errors (issue 21).
namespace dlock::test {
namespace {

// A TTL too short to leave any validity after a round is a usage error naming the minimum,
// not a 2 s wait ending in "no quorum".
TEST_F(CliTest, ATtlBelowTheMinimumIsAUsageErrorNamingIt) {
  const std::string key = test_key();
  // run needs 200 ms: its SIGKILL margin is at least 20 ms, so that the guard's reaction fits.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"-r", server_.url(), "run", "--ttl", "1ms", key, "--", "true"}, "200ms"},
      {{"-r", server_.url(), "run", "--ttl", "99ms", key, "--", "true"}, "200ms"},
      {{"-r", server_.url(), "run", "--ttl", "150ms", key, "--", "true"}, "200ms"},
      {{"-r", server_.url(), "acquire", "--ttl", "1ms", key}, "100ms"},
      {{"-r", server_.url(), "extend", "--ttl", "1ms", key, "token"}, "100ms"},
  };
  for (const auto& [args, least] : cases) {
    auto r = run(args);
    EXPECT_EQ(r.status, 64) << args[3] << " " << args[4] << ": " << r.err;
    expect_one_line_message(r);
    EXPECT_NE(r.err.find("at least " + least), std::string::npos) << r.err;
  }
  EXPECT_FALSE(exists(key));
  // 200ms is taken; whether `true` then runs within it depends on the host (a sanitizer build
  // on a loaded host may take longer to start CMD than the lease allows: 71).
  auto least = run({"-r", server_.url(), "run", "--ttl", "200ms", key, "--", "true"});
  EXPECT_NE(least.status, 64) << least.err;
  EXPECT_TRUE(least.status == 0 || least.status == 71) << least.status << ": " << least.err;
  auto acquired = run({"-r", server_.url(), "acquire", "--ttl", "100ms", key});
  EXPECT_EQ(acquired.status, 0) << acquired.err;
}

// A run's holder note goes with its release (one script, sent unawaited before it), and only
// where it names that run: a note another holder wrote meanwhile stays.
TEST_F(CliTest, ARunClearsItsOwnHolderNoteAndNoOtherOne) {
  const std::string key = test_key(), note = holder_key(key);
  auto r = run({"-r", server_.url(), "run", key, "--", "true"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(exists(note)) << "the note outlived the run";
  // A long TTL: the run's own note refresh (every TTL/3) must not rewrite the planted note.
  auto holder = start({"-r", server_.url(), "run", "--ttl", "60s", key, "--", "sh", "-c",
                       "touch " + path("m") + "; while [ ! -e " + path("go") + " ]; do sleep 0.02; done"});
  ASSERT_TRUE(eventually([&] { return fs::exists(path("m")) && exists(note); }));
  test::raw_command(server_.port(), "SET " + note + " \"other-token\\thost\\t1\\t0\\tcmd\"");
  touch(path("go"));
  EXPECT_EQ(holder->wait(), 0) << holder->err();
  EXPECT_FALSE(exists(key));
  EXPECT_TRUE(exists(note)) << "a note that named another holder was deleted";
}

// The keys dlock keeps beside a lock (its fence counter, waiter queue, the CLI's holder note, a
// semaphore's keys ...) are no lock names: run, acquire and status refuse them (64, one line)
// instead of treating them as a lock, and lock zz, whose keys they are, stays held.
TEST_F(CliTest, ALocksCompanionKeysAreNoLockNames) {
  auto holder = start_holder({"-r", server_.url(), "run", "zz", "--"});
  ASSERT_TRUE(holder);
  const auto lock = lock_keys_for("zz");
  const auto sem = semaphore_keys_for("zz", false), fair = semaphore_keys_for("zz", true);
  ASSERT_EQ(lock.fence, "{zz}:fence");
  for (const auto& name :
       {lock.fence, lock.waiters, lock.waiter_info, lock.tickets, holder_key("zz"),
        high_fence_key("zz"), sem.expiries, sem.weights, sem.fence, sem.waiters, sem.waiter_info,
        sem.tickets, fair.expiries, fair.owners, fair.weights, fair.fence, fair.waiter_info,
        fair.tickets}) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"-r", server_.url(), "run", "-n", name, "--", "touch", path("never")},
             {"-r", server_.url(), "acquire", "-n", name},
             {"-r", server_.url(), "status", name}}) {
      auto r = run(args);
      EXPECT_EQ(r.status, 64) << args[2] << " " << name << ": " << r.out << r.err;
      expect_one_line_message(r);
    }
  }
  EXPECT_FALSE(fs::exists(path("never")));
  EXPECT_TRUE(exists("zz"));
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
}

}  // namespace
}  // namespace dlock::test

// `dlock run` never lets work go on without the lock (issue 21): what kills dlock ends CMD's
// whole tree, leftovers of CMD keep the lock or are ended, signals are forwarded, durations
// saturate, and an outage stops CMD before the lease's validity ends.
namespace dlock::test {
namespace {

// Runs `dlock args...` with stderr a pipe whose reader has gone (a closed log pipe): every
// write there fails with EPIPE. Returns the exit status (-1 when it did not end within
// scaled(limit)).
int run_with_stderr_closed(std::vector<std::string> args, std::chrono::milliseconds limit = 20s) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -1;
  ::close(fds[0]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  pid_t pid = spawn_cli(std::move(args), {}, fa);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (pid < 0) return -1;
  int status = 0;
  auto until = steady::now() + test::scaled(limit);
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (steady::now() >= until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// kill -9 of dlock ends everything CMD started within a second, not CMD alone: a grandchild,
// one that left CMD's process group (setsid), and the same with --foreground, where CMD shares
// dlock's process group. The TTL (30 s) is far off: nothing waits for it.
TEST_F(CliTest, KillDashNineOfDlockEndsEverythingCmdStarted) {
  strays left;
  for (bool foreground : {false, true}) {
    SCOPED_TRACE(foreground ? "--foreground" : "CMD in its own process group");
    const std::string tag = foreground ? "fg." : "own.";
    std::vector<std::string> args{"-r", server_.url(), "run", "--ttl", "30s"};
    if (foreground) args.push_back("--foreground");
    args.insert(args.end(), {test_key(tag), "--", "sh", "-c",
                             "sleep 1000 & echo $! > " + path(tag + "child") +
                                 "; setsid sleep 1000 & echo $! > " + path(tag + "escaped") +
                                 "; echo $$ > " + path(tag + "cmd") + "; wait"});
    auto d = start(args);
    pid_t cmd = left.add(read_pid(path(tag + "cmd")));
    pid_t child = left.add(read_pid(path(tag + "child")));
    pid_t escaped = left.add(read_pid(path(tag + "escaped")));
    ASSERT_TRUE(running(cmd) && running(child) && running(escaped)) << d->err();
    d->signal(SIGKILL);
    EXPECT_EQ(d->wait(), 128 + SIGKILL);
    EXPECT_TRUE(eventually([&] { return !running(cmd) && !running(child) && !running(escaped); },
                           1s))
        << "still running: cmd " << running(cmd) << ", grandchild " << running(child)
        << ", setsid grandchild " << running(escaped);
  }
}

// CMD exits 4 and leaves a background child. By default the lock stays held, and renewed past
// its TTL, until that child ends too (as flock's lock stays with a process that inherited the
// descriptor); dlock then exits with CMD's status. --orphans kill ends such children (SIGTERM,
// SIGKILL after --lost-grace for one that ignores it) before the release.
TEST_F(CliTest, ABackgroundChildOfCmdKeepsTheLockOrIsEndedBeforeTheRelease) {
  strays left;
  const std::string key = test_key();
  // The child runs until the test lets it go (the file "go").
  auto d = start({"-r", server_.url(), "run", "--ttl", "1s", key, "--", "sh", "-c",
                  "while [ ! -e " + path("go") + " ]; do sleep 0.05; done & echo $! > " +
                      path("child") + "; exit 4"});
  pid_t child = left.add(read_pid(path("child")));
  std::this_thread::sleep_for(1500ms);  // sh is gone; the child runs on past the 1 s TTL
  EXPECT_TRUE(running(child));
  EXPECT_FALSE(d->try_wait().has_value()) << "dlock left while CMD's child ran: " << d->err();
  EXPECT_TRUE(exists(key)) << "the lock was let go while CMD's child ran";
  touch(path("go"));
  EXPECT_EQ(d->wait(), 4) << d->err();
  EXPECT_FALSE(running(child));
  // Released once the child ended. On a machine so loaded that the release's request timed out
  // (its node timeout is a tenth of the 1 s TTL), dlock says so, and the key expires by its TTL.
  if (d->err().find("releasing '" + key + "' failed") == std::string::npos) {
    EXPECT_FALSE(exists(key)) << "released once the child ended: " << d->err();
  } else {
    EXPECT_TRUE(test::eventually([&] { return !exists(key); }, 2s)) << d->err();
  }

  auto t0 = steady::now();
  auto k = run({"-r", server_.url(), "run", "--orphans", "kill", "--lost-grace", "500ms", key,
                "--", "sh", "-c",
                "sleep 30 & echo $! > " + path("plain") + "; (trap '' TERM; exec sleep 30) & echo $! > " +
                    path("stubborn") + "; exit 4"});
  // Not added to `left`: run() has returned, so they should be dead, and a pidfd opened now
  // could name a process that took over the PID.
  pid_t plain = read_pid(path("plain"));
  pid_t stubborn = read_pid(path("stubborn"));
  EXPECT_EQ(k.status, 4) << k.err;
  // Well under the children's own 30 s even when scaled: not a wait for them to end.
  EXPECT_LT(steady::now() - t0, std::min(test::scaled(10s), std::chrono::milliseconds(20s)));
  EXPECT_FALSE(running(plain)) << "dlock exited before CMD's child";
  EXPECT_FALSE(running(stubborn)) << "a child that ignores SIGTERM outlived dlock";
  EXPECT_FALSE(exists(key));
}

// The Redis credentials dlock reads from its environment are not CMD's business: not in its
// environment, nor in /proc/PID/environ of its parent (the guard, a fork of dlock) or of dlock
// itself, which show the initial environment block to every process of the same user.
TEST_F(CliTest, CmdDoesNotSeeTheRedisCredentials) {
  redis_server secured{{.extra = {"--requirepass", "s3cret"}}};
  const std::string key = test_key();
  auto r = run({"-r", secured.url(), "run", key, "--", "sh", "-c",
                "env; echo ---; tr '\\0' '\\n' < /proc/$PPID/environ; echo ---; "
                "tr '\\0' '\\n' < /proc/$(awk '{print $4}' /proc/$PPID/stat)/environ"},
               {"DLOCK_PASSWORD=s3cret", "DLOCK_USER=default"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto cmd_env = r.out.substr(0, r.out.find("---"));
  EXPECT_EQ(cmd_env.find("DLOCK_USER="), std::string::npos) << r.out;
  EXPECT_EQ(cmd_env.find("DLOCK_PASSWORD="), std::string::npos) << r.out;
  EXPECT_NE(cmd_env.find("DLOCK_KEY=" + key + "\n"), std::string::npos) << r.out;
  // Both blocks were read (the names stay, their values are wiped), and no value is left.
  auto guard_env = r.out.find("---"), dlock_env = r.out.find("---", guard_env + 3);
  ASSERT_NE(dlock_env, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DLOCK_PASSWORD=", guard_env), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DLOCK_PASSWORD=", dlock_env), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("s3cret"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("DLOCK_USER=default"), std::string::npos) << r.out;
}

// Signals whose default would end dlock without a release are forwarded to CMD: its traps see
// SIGUSR1, SIGUSR2, SIGALRM, SIGHUP and SIGWINCH and it runs on; SIGQUIT ends it through its
// trap (exit 5), and dlock exits with that status, the lock released at once.
TEST_F(CliTest, SignalsAreForwardedToCmdAndTheLockIsReleasedOnTheWayOut) {
  strays left;
  const std::string key = test_key(), got = path("got");
  std::string script = "echo $$ > " + path("cmd") + ";";
  for (const char* s : {"USR1", "USR2", "ALRM", "HUP", "WINCH"}) {
    script += std::string(" trap 'echo ") + s + " >> " + got + "' " + s + ";";
  }
  script += " trap 'echo QUIT >> " + got + "; exit 5' QUIT; while :; do sleep 0.05; done";
  auto d = start({"-r", server_.url(), "run", key, "--", "sh", "-c", script});
  pid_t cmd = left.add(read_pid(path("cmd")));
  std::string expected;
  for (auto [sig, name] : {std::pair{SIGUSR1, "USR1"}, std::pair{SIGUSR2, "USR2"},
                           std::pair{SIGALRM, "ALRM"}, std::pair{SIGHUP, "HUP"},
                           std::pair{SIGWINCH, "WINCH"}}) {
    d->signal(sig);
    expected += std::string(name) + "\n";
    ASSERT_TRUE(eventually([&] { return read_file(got) == expected; }, 5s))
        << name << " did not reach CMD: " << read_file(got) << d->err();
    ASSERT_FALSE(d->try_wait().has_value()) << name << " ended dlock: " << d->err();
  }
  EXPECT_TRUE(exists(key));
  d->signal(SIGQUIT);
  EXPECT_EQ(d->wait(), 5) << d->err();
  EXPECT_EQ(read_file(got), expected + "QUIT\n");
  EXPECT_FALSE(exists(key)) << "released at once, not left to expire";
  EXPECT_FALSE(running(cmd));

  // While waiting for the lock, the same signals end the wait cleanly: nothing held, no CMD.
  auto holder = start_holder({"-r", server_.url(), "run", key, "--"});
  ASSERT_TRUE(holder);
  auto waiter = start({"-v", "-r", server_.url(), "run", "-q", key, "--", "touch", path("never")});
  ASSERT_TRUE(eventually([&] { return queued(lock_keys_for(key).waiters).size() == 1; }, 5s));
  waiter->signal(SIGUSR1);
  EXPECT_EQ(waiter->wait(), 128 + SIGUSR1);
  EXPECT_NE(waiter->err().find("interrupted by signal " + std::to_string(SIGUSR1)),
            std::string::npos)
      << waiter->err();
  EXPECT_FALSE(fs::exists(path("never")));
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
}

// With -v and stderr a pipe nobody reads any more, dlock's lines fail to write (EPIPE); that
// must not end dlock by SIGPIPE with the lock held: CMD runs, the lock is released, and dlock
// exits with CMD's status.
TEST_F(CliTest, AClosedStderrDoesNotKillDlock) {
  const std::string key = test_key();
  int status = run_with_stderr_closed(
      {"-v", "-r", server_.url(), "run", key, "--", "sh", "-c", "touch " + path("ran") + "; exit 3"});
  EXPECT_EQ(status, 3);
  EXPECT_TRUE(fs::exists(path("ran")));
  EXPECT_FALSE(exists(key)) << "left held";
}

// Ctrl-Z (SIGTSTP) stops CMD's group and dlock together, so CMD never runs while dlock cannot
// renew; SIGCONT (fg) resumes both while the lease is still valid. Stopped past the validity,
// CMD is not resumed: it is killed where it stopped, and dlock exits 71.
TEST_F(CliTest, SigtstpStopsCmdWithDlockAndAnExpiredStopNeverResumesCmd) {
  strays left;
  const std::string key = test_key(), ticks = path("ticks");
  // The lease must outlive the first stop, with renewals every third of it on a busy machine,
  // and expire during the second: 3 s in a plain build, longer where processes run slower.
  const auto ttl = std::to_string(test::scaled(3s).count()) + "ms";
  // CMD ticks in one process: a shell that forks `sleep` (dash vforks) waits for its stopped
  // child in state D, never T, though nothing of the tree runs.
  auto d = start({"-v", "-r", server_.url(), "run", "--ttl", ttl, key, "--", "perl", "-e",
                  "open my $p, '>', shift; print $p \"$$\\n\"; close $p; open my $t, '>>', "
                  "shift; select $t; $| = 1; while (1) { print \"\\n\"; "
                  "select undef, undef, undef, 0.05 }",
                  path("cmd"), ticks});
  pid_t cmd = left.add(read_pid(path("cmd")));
  ASSERT_TRUE(eventually([&] { return fs::exists(ticks); }));
  auto both_stopped = [&] { return process_state(cmd) == 'T' && process_state(d->pid()) == 'T'; };
  // On a failure: the states seen (CMD's, dlock's) and dlock's own account (-v), once let go on.
  auto stopped_or_say_why = [&] {
    std::string seen;
    auto note_states = [&] {
      const std::string now{process_state(cmd) ? process_state(cmd) : '-',
                            process_state(d->pid()) ? process_state(d->pid()) : '-'};
      if (seen.size() < 2 || seen.compare(seen.size() - 2, 2, now) != 0) seen += " " + now;
      return both_stopped();
    };
    if (eventually(note_states)) return true;
    d->signal(SIGCONT);
    const int status = d->wait();
    ADD_FAILURE() << "states (cmd, dlock):" << seen << "; dlock exited " << status << ": "
                  << d->err();
    return false;
  };
  d->signal(SIGTSTP);
  ASSERT_TRUE(stopped_or_say_why());
  d->signal(SIGCONT);
  ASSERT_TRUE(
      eventually([&] { return process_state(cmd) != 'T' && process_state(d->pid()) != 'T'; }))
      << "cmd " << process_state(cmd) << ", dlock " << process_state(d->pid());
  auto size = fs::file_size(ticks);
  EXPECT_TRUE(eventually([&] { return fs::file_size(ticks) > size; })) << "CMD runs again";
  EXPECT_TRUE(exists(key));

  d->signal(SIGTSTP);
  ASSERT_TRUE(stopped_or_say_why());
  size = fs::file_size(ticks);
  // Past the TTL: the key leaves Redis no sooner than the lease's validity ends.
  ASSERT_TRUE(eventually([&] { return !exists(key); })) << "the key outlived its TTL";
  d->signal(SIGCONT);
  EXPECT_EQ(d->wait(), 71) << d->err();
  EXPECT_FALSE(running(cmd));
  EXPECT_EQ(fs::file_size(ticks), size) << "CMD ran again after the lease had expired";
}

// Durations past what the clocks hold (2562048h just passes int64 nanoseconds; the other is the
// largest int64, in seconds) mean "forever", not "already over": -w waits, --request-timeout
// lets a run through, and --lost-grace gives CMD its SIGTERM and time to act on it. --min-hold
// past the longest TTL is a usage error.
TEST_F(CliTest, HugeDurationsMeanForeverNotAlreadyOver) {
  strays left;
  const std::string key = test_key();
  auto holder = start_holder({"-r", server_.url(), "run", key, "--"});
  ASSERT_TRUE(holder);
  for (const char* forever : {"2562048h", "9223372036854775807"}) {
    const auto before = queued(lock_keys_for(key).waiters);
    auto waiter = start({"-r", server_.url(), "run", "-q", "-w", forever, key, "--", "touch",
                         path("never")});
    // It waits (queued, a waiter that is not one seen before), and goes on waiting.
    EXPECT_TRUE(eventually([&] {
      for (const auto& id : queued(lock_keys_for(key).waiters)) {
        if (std::find(before.begin(), before.end(), id) == before.end()) return true;
      }
      return false;
    })) << forever << ": " << waiter->err();
    std::this_thread::sleep_for(1s);
    EXPECT_FALSE(waiter->try_wait().has_value()) << forever << ": " << waiter->err();
    EXPECT_EQ(waiter->terminate(), 128 + SIGTERM) << forever;
  }
  EXPECT_FALSE(fs::exists(path("never")));
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);

  auto patient =
      run({"--request-timeout", "2562048h", "-r", server_.url(), "run", key, "--", "true"});
  EXPECT_EQ(patient.status, 0) << patient.err;
  auto hold = run({"-r", server_.url(), "run", "--min-hold", "2562048h", key, "--", "true"});
  EXPECT_EQ(hold.status, 64) << hold.err;
  expect_one_line_message(hold);

  auto d = start({"-r", server_.url(), "run", "--ttl", "1s", "--lost-grace", "2562048h", key,
                  "--", "sh", "-c",
                  "echo $$ > " + path("cmd") + "; trap 'echo term > " + path("got") +
                      "' TERM; while :; do sleep 0.1; done"});
  pid_t cmd = left.add(read_pid(path("cmd")));
  server_.restart();  // the key is gone: the lease is lost
  EXPECT_EQ(d->wait(15s), 71) << d->err();
  EXPECT_EQ(read_file(path("got")), "term\n") << "SIGKILL came before CMD could act on SIGTERM";
  EXPECT_FALSE(running(cmd));
}

// A node that hangs (SIGSTOP) stops the renewals. CMD, which ignores SIGTERM, gets SIGTERM
// --lost-grace (capped at TTL/3) before the lease's validity ends and SIGKILL before it ends,
// so it never runs once another client could take the lock: the key expires on the server no
// later than TTL after the hang began. The TTL is 6 s so that the margin (250 ms plus the
// drift allowance, 62 ms) is wide enough for a loaded host.
TEST_F(CliTest, ANodeOutageStopsCmdBeforeTheLeasesValidityEnds) {
  strays left;
  const std::string key = test_key(), got = path("got");
  auto d = start({"-r", server_.url(), "run", "--ttl", "6s", "--lost-grace", "2s", key, "--",
                  "sh", "-c",
                  "echo $$ > " + path("cmd") + "; trap 'echo term >> " + got +
                      "' TERM; while :; do sleep 0.1; done"});
  pid_t cmd = left.add(read_pid(path("cmd")));
  ASSERT_TRUE(exists(key));
  auto hung_at = steady::now();
  server_.pause();
  std::optional<steady::duration> died_after;
  eventually([&] {
    if (running(cmd)) return false;
    died_after = steady::now() - hung_at;
    return true;
  }, 10s);
  server_.resume();
  ASSERT_TRUE(died_after.has_value()) << "CMD still runs";
  EXPECT_LT(*died_after, 6s) << "CMD outlived the lease";
  EXPECT_EQ(read_file(got), "term\n") << "SIGTERM first, with time to act on it";
  EXPECT_EQ(d->wait(), 71) << d->err();
  EXPECT_NE(d->err().find("stopped"), std::string::npos) << d->err();
}

// A dlock that lives but cannot act (SIGSTOP, which it cannot catch; Ctrl-Z on --foreground
// is the same) does not keep CMD running past the lease: the guard keeps the lease's timeline on
// its own clock and SIGKILLs CMD's tree at the last safe moment. CMD ticks into a file; a second
// `dlock run -n`, once it gets the lock, sees whether the ticks go on while it holds it. On
// SIGCONT dlock exits 71.
TEST_F(CliTest, AStoppedDlockStillEndsCmdBeforeTheLeaseEnds) {
  strays left;
  const std::string key = test_key(), ticks = path("ticks");
  auto d = start({"-r", server_.url(), "run", "--ttl", "1s", key, "--", "sh", "-c",
                  "echo $$ > " + path("cmd") + "; while :; do echo >> " + ticks +
                      "; sleep 0.05; done"});
  pid_t cmd = left.add(read_pid(path("cmd")));
  ASSERT_TRUE(eventually([&] { return fs::exists(ticks); }));
  d->signal(SIGSTOP);
  ASSERT_TRUE(eventually([&] { return process_state(d->pid()) == 'T'; }, 3s));
  // The second holder measures CMD's ticks over 300 ms while it holds the lock.
  std::optional<cli_result> second;
  eventually([&] {
    second = run({"-r", server_.url(), "run", "-n", key, "--", "sh", "-c",
                  "a=$(wc -c < " + ticks + "); sleep 0.3; b=$(wc -c < " + ticks + "); echo $a $b"});
    return second->status == 0;
  }, 10s);
  EXPECT_FALSE(running(cmd)) << "CMD runs on while dlock is stopped";
  ASSERT_TRUE(second && second->status == 0) << "the key never expired";
  std::istringstream counts(second->out);
  long before = -1, after = -2;
  counts >> before >> after;
  EXPECT_EQ(before, after) << "CMD ran while another held the lock";
  d->signal(SIGCONT);
  EXPECT_EQ(d->wait(), 71) << d->err();
}

// dlock's diagnostics never block it: with -v and stderr a FIFO that nobody reads (CMD fills it
// up), a lost lease still stops CMD at once and dlock exits 71; the lines that do not fit are
// dropped. (It used to block in the "SIGTERM to ..." line, before sending the signal.)
TEST_F(CliTest, AStalledStderrDoesNotDelayEndingCmd) {
  strays left;
  const std::string key = test_key(), fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // never reads
  ASSERT_GE(reader, 0);
  int writer = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(writer, 0);
  auto d = start({"-v", "-r", server_.url(), "run", "--ttl", "1s", key, "--", "sh", "-c",
                  "echo $$ > " + path("cmd") + "; head -c 200000 /dev/zero >&2 & "
                  "while :; do sleep 0.05; done"},
                 {}, writer);
  ::close(writer);
  pid_t cmd = left.add(read_pid(path("cmd")));
  {
    // Full once a write of a whole page (PIPE_BUF: all or nothing, never merged into a page
    // begun) finds no free page, as CMD's writes do; the pages the probe adds while it is not
    // full just help CMD fill it.
    int probe = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT_GE(probe, 0);
    EXPECT_TRUE(eventually([&] {
      static const char zeros[PIPE_BUF] = {};
      return ::write(probe, zeros, sizeof zeros) < 0 && errno == EAGAIN;
    })) << "the FIFO never filled up";
    ::close(probe);
  }
  test::raw_command(server_.port(), "DEL " + key);  // the lease is lost
  // The FIFO stays full until CMD is gone: that is what is tested.
  EXPECT_TRUE(eventually([&] { return !running(cmd); }, 10s)) << "CMD still runs";
  // Then it is drained while dlock ends, so nothing dlock writes on its way out (a sanitizer's
  // report, say) can block it; what was written shows if it fails.
  std::string tail;
  std::optional<int> status;
  for (auto until = steady::now() + test::scaled(10s);
       !(status = d->try_wait()) && steady::now() < until;) {
    char buf[65536];
    ssize_t n = ::read(reader, buf, sizeof buf);
    if (n <= 0) {
      std::this_thread::sleep_for(5ms);
      continue;
    }
    tail.append(buf, static_cast<std::size_t>(n));
    if (tail.size() > 8192) tail.erase(0, tail.size() - 8192);  // CMD's zeros come first
  }
  ::close(reader);
  ASSERT_TRUE(status.has_value()) << "dlock did not end in time after CMD; it wrote: " << tail;
  EXPECT_EQ(*status, 71) << tail;
}

// The guard killed on its own (kill -9 of its pid): CMD dies with it, and what CMD started,
// also what left its process group, comes to dlock (a subreaper), which kills it before the
// release. The guard's name is not matched by `pgrep dlock`.
TEST_F(CliTest, KillDashNineOfTheGuardEndsWhatCmdStartedBeforeTheRelease) {
  strays left;
  const std::string key = test_key();
  auto d = start({"-r", server_.url(), "run", "--ttl", "30s", key, "--", "sh", "-c",
                  "setsid sleep 1000 & echo $! > " + path("escaped") + "; echo $PPID > " +
                      path("guard") + "; echo $$ > " + path("cmd") + "; wait"});
  pid_t cmd = left.add(read_pid(path("cmd")));
  pid_t escaped = left.add(read_pid(path("escaped")));
  pid_t guard = read_pid(path("guard"));
  ASSERT_TRUE(running(escaped)) << d->err();
  ASSERT_GT(guard, 1);
  ASSERT_NE(guard, d->pid());
  ASSERT_NE(guard, ::getpid());
  auto comm = read_proc(guard, "comm");
  EXPECT_EQ(comm.find("dlock"), std::string::npos) << comm;
  ASSERT_TRUE(running(guard));
  ::kill(guard, SIGKILL);
  EXPECT_EQ(d->wait(), 70) << d->err();
  EXPECT_FALSE(running(escaped)) << "the setsid grandchild outlived dlock";
  EXPECT_FALSE(running(cmd));
  EXPECT_FALSE(exists(key)) << "released once nothing was left";
}

// The guard killed long after CMD exited (--orphans wait keeps the lock for a setsid child):
// the child, now dlock's orphan, is ended before the release, and dlock signals no process
// group by CMD's old number, which may name another group by then. (Not watched fail: that
// needs the number reused; strace showed the old kill(-CMD, SIGKILL).)
TEST_F(CliTest, KillDashNineOfTheGuardAfterCmdExitedEndsItsOrphans) {
  strays left;
  const std::string key = test_key();
  auto d = start({"-r", server_.url(), "run", "--ttl", "30s", key, "--", "sh", "-c",
                  "setsid sleep 100000 & echo $! > " + path("escaped") + "; echo $PPID > " +
                      path("guard") + "; echo $$ > " + path("cmd") + "; exit 0"});
  pid_t escaped = left.add(read_pid(path("escaped")));
  pid_t cmd = read_pid(path("cmd"));
  pid_t guard = read_pid(path("guard"));
  ASSERT_TRUE(eventually([&] { return !running(cmd); })) << "CMD did not exit";
  ASSERT_TRUE(running(escaped)) << d->err();
  ASSERT_GT(guard, 1);
  ASSERT_NE(guard, d->pid());
  ASSERT_TRUE(running(guard));
  ::kill(guard, SIGKILL);
  EXPECT_EQ(d->wait(), 70) << d->err();
  EXPECT_FALSE(running(escaped)) << "the setsid child outlived dlock";
  EXPECT_FALSE(exists(key)) << "released once nothing was left";
}

// dlock sleeps while CMD runs: with --semaphore (no holder note to refresh) and once the lease
// is lost (CMD ignores SIGTERM, so the SIGKILL is --lost-grace away) its loop used to spin
// (78 % of a CPU), taking CPU from the guard. Over about 2 s it uses a small share of a CPU;
// the bound is generous for a sanitizer build on a loaded host.
TEST_F(CliTest, DlockSleepsWhileCmdRuns) {
  strays left;
  const std::string key = test_key();
  auto cpu_over = [](pid_t pid, std::chrono::milliseconds span) {
    auto before = cpu_time(pid);
    std::this_thread::sleep_for(span);
    return cpu_time(pid) - before;
  };
  auto s =
      start_sleeping({"-r", server_.url(), "run", "--semaphore", "1", "--ttl", "1s", key, "--"},
                     "echo $$ > " + path("cmd1"));
  left.add(read_pid(path("cmd1")));
  EXPECT_LT(cpu_over(s->pid(), 2s), 400ms) << "with --semaphore";
  EXPECT_EQ(s->terminate(), 128 + SIGTERM) << s->err();

  const std::string lock = test_key("lost");
  // Renewals every 2 s; once one finds the key gone, SIGKILL comes at the last safe moment,
  // at least 3.5 s later.
  auto d = start({"-v", "-r", server_.url(), "run", "--ttl", "6s", "--lost-grace", "5s", lock,
                  "--", "sh", "-c",
                  "trap '' TERM; echo $$ > " + path("cmd2") + "; while :; do sleep 0.1; done"});
  pid_t cmd = left.add(read_pid(path("cmd2")));
  ASSERT_TRUE(running(cmd));
  // dlock has heard from the guard that CMD runs: a loss before that ends it otherwise (the
  // guard is killed, no SIGTERM; seen once under heavy load, the guard's word 2 s late).
  ASSERT_TRUE(eventually([&] { return d->err().find("running `") != std::string::npos; }))
      << d->err();
  test::raw_command(server_.port(), "DEL " + lock);
  ASSERT_TRUE(eventually([&] { return d->err().find("SIGTERM to") != std::string::npos; }))
      << d->err();
  EXPECT_LT(cpu_over(d->pid(), 1500ms), 300ms) << "after the lease was lost";
  EXPECT_EQ(d->wait(), 71) << d->err();
}

// A stopped guard (kill -STOP) cannot end CMD's tree, and the lease is then lost (DEL): dlock
// SIGKILLs the guard itself shortly after it ordered the tree killed (a stopped process dies of
// SIGKILL), CMD dies with it (PR_SET_PDEATHSIG) and dlock ends the rest. CMD's ticks stop
// within the TTL of the loss, and dlock exits 71. (It used to wait for the guard's resumption.)
TEST_F(CliTest, AStoppedGuardDoesNotKeepCmdRunningAfterTheLeaseIsLost) {
  strays left;
  const std::string key = test_key(), ticks = path("ticks");
  auto d = start({"-v", "-r", server_.url(), "run", "--ttl", "3s", key, "--", "sh", "-c",
                  "echo $PPID > " + path("guard") + "; echo $$ > " + path("cmd") +
                      "; while :; do echo >> " + ticks + "; sleep 0.05; done"});
  pid_t cmd = left.add(read_pid(path("cmd")));
  pid_t guard = read_pid(path("guard"));
  ASSERT_GT(guard, 1);
  ASSERT_NE(guard, d->pid());
  ASSERT_TRUE(running(guard));
  left.add(guard);  // a stopped guard left by a failure is killed at the end
  ::kill(guard, SIGSTOP);
  ASSERT_TRUE(eventually([&] { return process_state(guard) == 'T'; }, 3s));
  auto lost_at = steady::now();
  test::raw_command(server_.port(), "DEL " + key);
  ASSERT_TRUE(eventually([&] { return !running(cmd); }, 5s))
      << "CMD runs on under a stopped guard; dlock said: " << d->err();
  EXPECT_LT(steady::now() - lost_at, 3s) << "CMD outlived the lease's validity";
  auto a = fs::file_size(ticks);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(fs::file_size(ticks), a) << "CMD still ticks";
  EXPECT_EQ(d->wait(5s), 71) << d->err();
  EXPECT_FALSE(running(guard));
}

// SIGABRT, SIGTRAP and SIGSYS sent to dlock (kill, not a fault of its own) are forwarded to
// CMD like SIGTERM, and the lock is released on the way out, not left for its TTL.
TEST_F(CliTest, AbrtTrapAndSysFromKillAreForwardedAndTheLockReleased) {
  strays left;
  for (int sig : {SIGABRT, SIGTRAP, SIGSYS}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string key = test_key(std::to_string(sig));
    const std::string cmd_file = path("cmd" + std::to_string(sig));
    auto d = start_sleeping({"-r", server_.url(), "run", "--ttl", "30s", key, "--"},
                            "ulimit -c 0; echo $$ > " + cmd_file);
    pid_t cmd = left.add(read_pid(cmd_file));
    ASSERT_TRUE(running(cmd));
    d->signal(sig);
    EXPECT_EQ(d->wait(), 128 + sig) << d->err();
    EXPECT_FALSE(exists(key)) << "left held for its TTL";
    EXPECT_FALSE(running(cmd));
  }
}

// flock's habits (issue 36): a bare duration is seconds; -w/--wait/--timeout are one option;
// --nb/--nonblock/--nonblocking, -s/--shared, -x/-e/--exclusive are flock's spellings; every
// word after the name is the command's, and -c STRING runs STRING with $SHELL -c. Options
// put after the name, and the request deadline given as --timeout, are refused with where
// they go.
TEST_F(CliTest, FlockHabitsSecondsTheCommandAfterTheNameAndFlocksSpellings) {
  strays left;
  const std::string key = test_key(), url = server_.url();
  auto holder = start_holder({"-r", url, "run", key, "--"}, "held");
  ASSERT_TRUE(holder);
  // `-w 1` waits a second, as flock's does (it gave up after 1 ms); so does --timeout.
  for (const char* wait : {"-w", "--wait", "--timeout"}) {
    auto r = run({"-r", url, "run", "-q", wait, "1", key, "--", "touch", path("never")});
    EXPECT_EQ(r.status, 75) << wait << ": " << r.err;
    EXPECT_GE(r.took, 1s) << wait;
  }
  auto decimal = run({"-r", url, "run", "-q", "-w", "0.3", key, "--", "touch", path("never")});
  EXPECT_EQ(decimal.status, 75) << decimal.err;
  EXPECT_GE(decimal.took, 300ms);
  for (const char* nonblock : {"-n", "--nb", "--nonblock", "--nonblocking"}) {
    auto r = run({"-r", url, "run", nonblock, "-E", "9", key, "touch", path("never")});
    EXPECT_EQ(r.status, 9) << nonblock << ": " << r.err;
  }
  auto exclusive = run({"-r", url, "run", "-x", "-n", key, "touch", path("never")});
  EXPECT_EQ(exclusive.status, 75) << exclusive.err;
  EXPECT_FALSE(fs::exists(path("never")));
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);

  // Every word after the name is CMD's, ours included; `--` before CMD is optional.
  auto words = run({"-r", url, "run", key, "printf", "%s|", "-n", "-w", "5", "--", "x"});
  EXPECT_EQ(words.status, 0) << words.err;
  EXPECT_EQ(words.out, "-n|-w|5|--|x|");
  auto dashed = run({"-r", url, "run", key, "--", "printf", "%s|", "-w", "5"});
  EXPECT_EQ(dashed.status, 0) << dashed.err;
  EXPECT_EQ(dashed.out, "-w|5|");
  // -c STRING in flock's place, run by $SHELL -c (here a shell that says it is the one).
  const std::string shell_path = path("shell");
  {
    std::ofstream script(shell_path);
    script << "#!/bin/sh\necho \"my shell $1\"\nexec /bin/sh \"$@\"\n";
  }
  fs::permissions(shell_path, fs::perms::owner_all);
  auto shell = run({"-r", url, "run", key, "-c", "echo \"hi $DLOCK_KEY\""}, {"SHELL=" + shell_path});
  EXPECT_EQ(shell.status, 0) << shell.err;
  EXPECT_EQ(shell.out, "my shell -c\nhi " + key + "\n");
  auto command = run({"-r", url, "run", key, "--command", "exit 3"}, {"SHELL="});
  EXPECT_EQ(command.status, 3) << command.err;  // no $SHELL: /bin/sh
  for (const char* flag : {"-x", "-e", "--exclusive"}) {
    auto r = run({"-r", url, "run", flag, "-n", key, "true"});
    EXPECT_EQ(r.status, 0) << flag << ": " << r.err;
  }

  // Refused with exit 64 and where things go; nothing runs, nothing is held.
  struct refusal {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<refusal> refusals{
      {{"-r", url, "run", key, "-w", "5", "touch", path("never")}, "options go before NAME"},
      {{"-r", url, "run", key, "-c"}, "exactly one command string"},
      {{"-r", url, "run", key, "-c", "touch " + path("never"), "extra"}, "exactly one command"},
      {{"-r", url, "run", key}, "no command to run"},
      {{"-r", url, "run", key, "--"}, "no command to run"},
      {{"-r", url, "elect", key}, "dlock elect [OPTIONS] NAME"},
      {{"-r", url, "run", "-w", "1m30", key, "touch", path("never")}, "longest first"},
      {{"-r", url, "run", "-w", "5sec", key, "touch", path("never")}, "seconds (60, 2.5)"},
      {{"-r", url, "run", "-x", "--read", key, "touch", path("never")}, "excludes"},
      {{"-r", url, "run", "-s", "-x", key, "touch", path("never")}, "excludes"},
      {{"--timeout", "5", "-r", url, "status", key}, "--request-timeout"},
      {{"-r", url, "status", "--timeout", "5", key}, "--request-timeout"},
  };
  for (const auto& [args, says] : refusals) {
    auto r = run(args);
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    EXPECT_EQ(r.status, 64) << shown << "\n" << r.err;
    expect_one_line_message(r);
    EXPECT_NE(r.err.find(says), std::string::npos) << shown << "\n" << r.err;
  }
  EXPECT_FALSE(fs::exists(path("never")));
  EXPECT_FALSE(exists(key));
}

// util-linux's own flock cases (tests/ts/flock/flock), with dlock in flock's place: a shared
// holder lets another shared run in, keeps out an exclusive one (--nonblock with flock's
// --conflict-exit-code, here -E), and one that waits (--timeout) runs as soon as the shared
// holder ends. Not ported: --no-fork and the file-descriptor form, which dlock does not have
// (the man page's FLOCK COMPATIBILITY). Beyond flock, one name is one lock (issue 36): the
// writer, a lock set naming it and another client's SET NX are kept out as well.
TEST_F(CliTest, UtilLinuxFlockCasesAgainstASharedHolder) {
  strays left;
  const std::string key = test_key(), url = server_.url();
  auto holder = start_holder({"-r", url, "run", "--shared", key, "--"}, "locking");
  ASSERT_TRUE(holder);
  auto never = [&] { return std::vector<std::string>{"touch", path("never")}; };
  auto with = [&](std::vector<std::string> args, std::vector<std::string> cmd) {
    args.insert(args.begin(), {"-r", url, "run"});
    args.push_back(key);
    args.insert(args.end(), cmd.begin(), cmd.end());
    return args;
  };
  // non-block (exclusive is the default), exclusive
  for (auto args : {std::vector<std::string>{"--nonblock", "-E", "123"},
                    std::vector<std::string>{"--nonblock", "--exclusive", "-E", "123"},
                    // beyond flock
                    std::vector<std::string>{"--write", "--nonblock", "-E", "123"},
                    std::vector<std::string>{"--nonblock", "-E", "123", "--also", key + "-b"}}) {
    auto r = run(with(args, never()));
    EXPECT_EQ(r.status, 123) << args[0] << ": " << r.err;
  }
  EXPECT_EQ(test::raw_command(server_.port(), "SET " + key + " theirs NX PX 60000").rfind("$-1", 0), 0u)
      << "another client's SET NX took a name a shared run holds";
  // shared
  auto shared = run(with({"--shared"}, {"echo", "Have shared lock"}));
  EXPECT_EQ(shared.status, 0) << shared.err;
  EXPECT_EQ(shared.out, "Have shared lock\n");
  // timeout: waits while the shared holder holds, runs once it ended
  auto waiter = start(with({"--timeout", "30", "-E", "5"}, {"touch", path("after")}));
  ASSERT_TRUE(eventually([&] { return !queued(lock_keys_for(key).waiters).empty(); }))
      << "the exclusive run did not wait in line";
  EXPECT_FALSE(fs::exists(path("after"))) << "an exclusive run ran beside a shared one";
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
  EXPECT_EQ(waiter->wait(), 0) << waiter->err();
  EXPECT_TRUE(fs::exists(path("after")));
  EXPECT_FALSE(fs::exists(path("never")));
  EXPECT_FALSE(exists(key));
}

// `status` never reports a guess as a fact (issue 36): a node that does not answer, a refused
// ACL user, or a minority holding a key that the silent nodes may complete to a quorum give
// "unknown" (JSON "held": null) and a non-zero exit, 77 for permissions; never "free".
TEST_F(CliTest, StatusSaysUnknownWhenTheNodesCannotTell) {
  const std::string key = test_key();
  // A port bound but not listening: refused, and no server another test starts can take it.
  int held_port = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at = loopback_address(0);
  socklen_t at_len = sizeof at;
  ASSERT_EQ(::bind(held_port, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  ASSERT_EQ(::getsockname(held_port, reinterpret_cast<sockaddr*>(&at), &at_len), 0);
  struct closer { int fd; ~closer() { ::close(fd); } } close_held{held_port};
  const std::string dead = "redis://127.0.0.1:" + std::to_string(ntohs(at.sin_port));
  auto down = run({"--request-timeout", "200ms", "-r", dead, "status", key});
  EXPECT_EQ(down.status, 69) << down.out << down.err;
  EXPECT_EQ(down.out.find("free"), std::string::npos) << down.out;
  EXPECT_EQ(down.out.rfind(key + ": unknown", 0), 0u) << down.out;
  EXPECT_NE(down.err.find("could not tell"), std::string::npos) << down.err;
  auto down_json = run({"--request-timeout", "200ms", "-r", dead, "status", "--json", key});
  EXPECT_EQ(down_json.status, 69) << down_json.err;
  EXPECT_NE(down_json.out.find("\"held\":null"), std::string::npos) << down_json.out;
  EXPECT_NE(down_json.out.find("\"error\":"), std::string::npos) << down_json.out;
  auto semaphore = run({"--request-timeout", "200ms", "-r", dead, "status", "--json",
                        "--semaphore", "3", key});
  EXPECT_EQ(semaphore.status, 69) << semaphore.err;
  EXPECT_NE(semaphore.out.find("\"in_use\":null"), std::string::npos) << semaphore.out;

  // An ACL user that may connect but not read: 77 (EX_NOPERM), not "free".
  ASSERT_EQ(test::raw_command(server_.port(), "ACL SETUSER peeker on >peek ~* &* +@connection")
                .rfind("+OK", 0),
            0u);
  auto refused = run({"-r", server_.url(), "--user", "peeker", "status", key},
                     {"DLOCK_PASSWORD=peek"});
  EXPECT_EQ(refused.status, 77) << refused.out << refused.err;
  EXPECT_EQ(refused.out.find("free"), std::string::npos) << refused.out;

  // Three nodes, one down, and one of the two that answer holds a key: with the silent node
  // that is a quorum, so nobody can tell (it said "free (a stale or partial key ...)").
  redis_server second, third;
  ASSERT_EQ(test::raw_command(server_.port(), "SET " + key + " sometoken PX 60000").rfind("+OK", 0),
            0u);
  third.kill();
  auto partial = run({"--request-timeout", "200ms", "-r", server_.url(), "-r", second.url(), "-r",
                      third.url(), "status", key});
  EXPECT_EQ(partial.status, 69) << partial.out << partial.err;
  EXPECT_EQ(partial.out.rfind(key + ": unknown", 0), 0u) << partial.out;
  // Both answering nodes free: free, whatever the silent one holds.
  ASSERT_EQ(test::raw_command(server_.port(), "DEL " + key).rfind(":1", 0), 0u);
  auto settled = run({"--request-timeout", "200ms", "-r", server_.url(), "-r", second.url(), "-r",
                   third.url(), "status", key});
  EXPECT_EQ(settled.status, 0) << settled.out << settled.err;
  EXPECT_EQ(settled.out.rfind(key + ": free", 0), 0u) << settled.out;
}

// A wait is the user's patience (issue 36): with -w and no node answering, dlock retries until
// the wait is over, then exits 69 (it gave up after twice the request timeout).
TEST_F(CliTest, AWaitRidesOutAnOutageForAllOfItsTime) {
  const std::string dead = "redis://127.0.0.1:" + std::to_string(test::free_port());
  auto r = run({"--request-timeout", "100ms", "-r", dead, "run", "-q", "-w", "1.5", test_key(),
                "touch", path("never")});
  EXPECT_EQ(r.status, 69) << r.err;
  EXPECT_GE(r.took, 1500ms) << r.err;
  EXPECT_FALSE(fs::exists(path("never")));
}

// A whole holder frozen past its TTL (dlock, the guard and CMD stopped together, as a paused VM
// or a cgroup freezer does), thawed CMD first: CMD ends after the lease's validity, the guard
// reaps it before its deadline check, and dlock learns of the end only then. Exit 71, never
// CMD's 0, in every mode (issue 36; all exited 0).
TEST_F(CliTest, AHolderFrozenPastItsTtlNeverExitsZero) {
  strays left;
  const std::string ttl = std::to_string(test::scaled(1s).count()) + "ms";
  const std::string other = test_key("other");
  const std::vector<std::vector<std::string>> modes{
      {"run"}, {"run", "--read"}, {"run", "--write"}, {"run", "--semaphore", "1"},
      {"run", "--also", other}, {"elect"}};
  int n = 0;
  for (const auto& mode : modes) {
    const std::string key = test_key(std::to_string(++n)), tag = std::to_string(n);
    const std::string pids = path(tag + "pids"), go = path(tag + "go");
    std::vector<std::string> args{"-r", server_.url()};
    args.insert(args.end(), mode.begin(), mode.end());
    args.insert(args.end(), {"--ttl", ttl, key, "--", "perl", "-e",
                             "open my $p, '>', shift; print $p \"$$ \", getppid(), \"\\n\"; "
                             "close $p; select undef, undef, undef, 0.02 until -e $ARGV[0]",
                             pids, go});
    auto d = start(args);
    pid_t cmd = 0, guard = 0;
    ASSERT_TRUE(eventually([&] {
      std::ifstream in(pids);
      return static_cast<bool>(in >> cmd >> guard) && guard > 0;
    })) << d->err();
    left.add(cmd);
    // Frozen together, dlock first so that it cannot act on the others' stop.
    for (pid_t p : {d->pid(), guard, cmd}) ::kill(p, SIGSTOP);
    // Past the TTL: another holder takes the name (a writer, where the frozen one reads).
    std::vector<std::string> second{"-r", server_.url()};
    if (mode == std::vector<std::string>{"run", "--read"}) {
      second.insert(second.end(), {"run", "--write"});
    } else {
      second.insert(second.end(), mode.begin(), mode.end());
    }
    second.insert(second.end(), {"-n", key, "--", "true"});
    EXPECT_TRUE(eventually([&] { return run(second).status == 0; })) << tag;
    // Thawed CMD first: it finishes (its status would be 0), and the guard reaps it.
    touch(go);
    ::kill(cmd, SIGCONT);
    EXPECT_TRUE(eventually([&] { return process_state(cmd) == 'Z'; })) << tag;
    ::kill(guard, SIGCONT);
    EXPECT_TRUE(eventually([&] { return !running(guard); })) << tag;
    ::kill(d->pid(), SIGCONT);
    EXPECT_EQ(d->wait(), 71) << tag << ": " << d->err();
  }
}

// The release finds the lease gone (deleted on the server while CMD ran): exit 71, not CMD's 0.
TEST_F(CliTest, AReleaseThatFindsTheLeaseGoneExits71) {
  const std::string key = test_key();
  auto d = start({"-r", server_.url(), "run", "--ttl", "60s", key, "--", "sh", "-c",
                  "touch " + path("started") + "; while [ ! -e " + path("go") +
                      " ]; do sleep 0.02; done"});
  ASSERT_TRUE(eventually([&] { return fs::exists(path("started")); })) << d->err();
  ASSERT_EQ(test::raw_command(server_.port(), "DEL " + key).rfind(":1", 0), 0u);
  touch(path("go"));
  EXPECT_EQ(d->wait(), 71) << d->err();

  // The same with --min-hold, whose keeping of the lock found it gone (it exited 0).
  const std::string kept = test_key("kept");
  auto m = start({"-r", server_.url(), "run", "--ttl", "60s", "--min-hold", "1h", kept, "--",
                  "sh", "-c",
                  "touch " + path("started2") + "; while [ ! -e " + path("go2") +
                      " ]; do sleep 0.02; done"});
  ASSERT_TRUE(eventually([&] { return fs::exists(path("started2")); })) << m->err();
  ASSERT_EQ(test::raw_command(server_.port(), "DEL " + kept).rfind(":1", 0), 0u);
  touch(path("go2"));
  EXPECT_EQ(m->wait(), 71) << m->err();
  EXPECT_FALSE(exists(kept)) << "kept a lock it had lost";
}

// status tells of a read-write lock or a semaphore held under the name rather than call the name
// free (issue 36): a read-write lock holds the name (its mark), a semaphore is a kind apart.
TEST_F(CliTest, StatusShowsOtherKindsHeldUnderTheName) {
  strays left;
  const std::string key = test_key();
  auto reader = start_holder({"-r", server_.url(), "run", "--read", key}, "reading");
  ASSERT_TRUE(reader);
  auto text = run({"-r", server_.url(), "status", key});
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_EQ(text.out.rfind(key + ": held as a read-write lock, its mark expires in", 0), 0u)
      << text.out;
  EXPECT_NE(text.out.find("held as a read-write lock by 1 holder, nobody waiting in its line\n"),
            std::string::npos)
      << text.out;
  auto json = run({"-r", server_.url(), "status", "--json", key});
  EXPECT_NE(json.out.find("\"other_kinds\":[{\"kind\":\"read-write lock\",\"holders\":1,\"fence\":"),
            std::string::npos)
      << json.out;
  EXPECT_EQ(reader->terminate(), 128 + SIGTERM);
  auto after = run({"-r", server_.url(), "status", key});
  EXPECT_EQ(after.out.rfind(key + ": free\n", 0), 0u) << after.out;
}

// A free name's first semaphore or read-write lock holder lives in the name's key alone (the
// solo grant, semaphore_protocol.hpp): status and list find it there.
TEST_F(CliTest, StatusAndListShowASoloHolder) {
  const std::string key = test_key();
  client c{server_.url()};
  semaphore sem{c, key, 2};
  ASSERT_FALSE(sem.acquire().release());  // starts the fence counter: the next grant is solo
  lease held = sem.acquire();
  ASSERT_EQ(c.exec({"GET", key}).str(), semaphore_mark(2, false) + " " + held.value() + " 1");
  auto text = run({"-r", server_.url(), "status", "--semaphore", "2", key});
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_EQ(text.out.rfind(key + ": semaphore, 1 of 2 permits in use", 0), 0u) << text.out;
  EXPECT_NE(text.out.find(held.value()), std::string::npos) << text.out;
  auto plain = run({"-r", server_.url(), "status", key});
  EXPECT_NE(plain.out.find("held as a semaphore of 2 permits (unfair)"), std::string::npos)
      << plain.out;
  // The fence line is the semaphore's counter, which drew the holder's token, not the lock's
  // (which it never touched: "none" would be about the wrong counter).
  EXPECT_NE(plain.out.find("    its fence counter " +
                           std::to_string(held.fencing_token()) + " "),
            std::string::npos)
      << plain.out;
  auto listed = run({"-r", server_.url(), "list", key});
  EXPECT_EQ(listed.status, 0) << listed.err;
  EXPECT_NE(listed.out.find("1 of 2 permits held by 1 holder"), std::string::npos) << listed.out;
  held.release();

  shared_mutex rw{c, key};
  ASSERT_FALSE(rw.acquire_shared().release());
  lease reader = rw.acquire_shared();
  ASSERT_EQ(c.exec({"GET", key}).str().rfind(std::string(read_write_lock_mark) + " ", 0), 0u);
  auto rw_text = run({"-r", server_.url(), "status", key});
  EXPECT_NE(rw_text.out.find("held as a read-write lock by 1 holder, nobody waiting in its line\n"),
            std::string::npos)
      << rw_text.out;
}

// A plain status of a name a semaphore holds counts the semaphore's own line of waiters, and
// says that the queue it lists is the lock's: before, it said "no waiters queued" (the lock's
// empty queue) while a semaphore waiter waited, and "fence counter: none" (the lock's).
TEST_F(CliTest, StatusOfANameASemaphoreHoldsCountsTheSemaphoresWaiters) {
  const std::string key = test_key();
  client c{server_.url()};
  semaphore sem{c, key, 1, {.retry_delay = 5s}};
  lease held = sem.acquire();
  ASSERT_TRUE(held);
  std::error_code waited_ec;
  auto waiting = std::async(std::launch::async, [&] {
    return sem.acquire_until(std::chrono::steady_clock::now() + 20s, waited_ec);
  });
  const auto keys = semaphore_keys_for(key, false);
  ASSERT_TRUE(eventually([&] { return c.exec({"ZCARD", keys.waiters}).integer() == 1; }));
  auto text = run({"-r", server_.url(), "status", key});
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("held as a semaphore by 1 holder, 1 waiter in its line\n"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("  as a lock: no waiters queued\n"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("fence counter: none"), std::string::npos) << text.out;
  auto json = run({"-r", server_.url(), "status", "--json", key});
  // The semaphore's counter, at or above the holder's token (not the lock's: 0).
  const std::string kind = "\"kind\":\"semaphore\",\"holders\":1,\"fence\":";
  auto at = json.out.find(kind);
  ASSERT_NE(at, std::string::npos) << json.out;
  EXPECT_GE(std::stoull(json.out.substr(at + kind.size())), held.fencing_token()) << json.out;
  EXPECT_NE(json.out.find(",\"waiters\":1,\"reachable\":true}", at), std::string::npos) << json.out;
  EXPECT_FALSE(held.release());
  lease next = waiting.get();
  EXPECT_TRUE(next) << waited_ec.message();
}

// One name is one lock, for semaphores too (issue 36): a `--semaphore 3` holder marks the name
// with its limit, so a plain run, a read-write run, `--semaphore 5` and a latch of the name are
// refused (exit 65, naming what holds it) instead of running beside it; status names it.
TEST_F(CliTest, ASemaphoresNameRefusesEveryOtherKindAndLimit) {
  strays left;
  const std::string key = test_key(), url = server_.url();
  auto holder = start_holder({"-r", url, "run", "--semaphore", "3", key}, "holding");
  ASSERT_TRUE(holder);
  for (auto args : {std::vector<std::string>{"-r", url, "run", key},
                    std::vector<std::string>{"-r", url, "run", "-w", "30", key},
                    std::vector<std::string>{"-r", url, "run", "--read", key},
                    std::vector<std::string>{"-r", url, "run", "--semaphore", "5", key},
                    std::vector<std::string>{"-r", url, "run", "--also", key, key + "-b"}}) {
    args.insert(args.end(), {"touch", path("never")});
    auto r = run(args);
    EXPECT_EQ(r.status, 65) << args[3] << ": " << r.err;
    EXPECT_NE(r.err.find("'" + key + "' is held as a semaphore of 3 permits (unfair)"),
              std::string::npos)
        << r.err;
  }
  auto latch = run({"-r", url, "latch", "set", key, "2"});
  EXPECT_EQ(latch.status, 65) << latch.err;
  auto text = run({"-r", url, "status", key});
  EXPECT_EQ(text.out.rfind(key + ": held as a semaphore of 3 permits (unfair), its mark expires", 0),
            0u)
      << text.out;
  auto same = run({"-r", url, "run", "--semaphore", "3", key, "true"});
  EXPECT_EQ(same.status, 0) << same.err;
  EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
  EXPECT_FALSE(fs::exists(path("never")));
  EXPECT_FALSE(exists(key)) << "the mark outlived the last holder";
  auto plain = run({"-r", url, "run", key, "true"});
  EXPECT_EQ(plain.status, 0) << plain.err;
}

// Waiters are identified like holders (issue 36): a waiting run notes its host, pid and command
// under the id it queues with (waiter_notes_key), status shows it beside its place in line (text
// and JSON), and the note goes when the wait ends; for a lock and for a semaphore.
TEST_F(CliTest, StatusIdentifiesWaitersLikeHolders) {
  strays left;
  const std::string url = server_.url();
  for (bool semaphore : {false, true}) {
    SCOPED_TRACE(semaphore ? "semaphore" : "lock");
    const std::string key = test_key() + (semaphore ? ":sem" : ":lock");
    auto mode = [&](std::vector<std::string> args) {
      if (semaphore) args.insert(args.begin() + 3, {"--semaphore", "1"});
      return args;
    };
    auto holder = start_holder(mode({"-r", url, "run", key}), key + "-holding");
    ASSERT_TRUE(holder);
    auto waiter = start(mode({"-r", url, "run", "-q", "-w", "60", key, "echo", "waited-here"}));
    const std::string pid = "pid " + std::to_string(waiter->pid());
    std::string out;
    ASSERT_TRUE(eventually([&] {
      out = run(mode({"-r", url, "status", key})).out;
      return out.find(pid) != std::string::npos;
    })) << out;
    EXPECT_NE(out.find("`echo waited-here`"), std::string::npos) << out;
    EXPECT_NE(out.find("1. "), std::string::npos) << out;
    auto json = run(mode({"-r", url, "status", "--json", key})).out;
    EXPECT_NE(json.find("\"who\":{"), std::string::npos) << json;
    EXPECT_NE(json.find("\"pid\":" + std::to_string(waiter->pid())), std::string::npos) << json;
    EXPECT_EQ(holder->terminate(), 128 + SIGTERM);
    EXPECT_EQ(waiter->wait(), 0) << waiter->err();
    EXPECT_FALSE(exists(waiter_notes_key(key))) << "a waiter's note outlived its wait";
  }
}

// `-v run K true` said in 2 of 3 runs that CMD left processes running when it did not: dlock
// read CMD's end before the guard's word that the tree was empty (issue 36).
TEST_F(CliTest, VerboseNeverSaysCmdLeftProcessesWhenItDidNot) {
  const std::string key = test_key();
  // Before the fix, 2 in 40 runs said it on a quiet machine, 19 in 40 with a busy loop beside
  // them: 30 runs, among the other tests that ctest runs at once, see it most of the time.
  for (int i = 0; i < 30; ++i) {
    auto r = run({"-v", "-r", server_.url(), "run", key, "true"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err.find("left running"), std::string::npos) << i << ": " << r.err;
    EXPECT_EQ(r.err.find("left processes"), std::string::npos) << i << ": " << r.err;
  }
}

// Messages a user can act on (issue 36): a mistyped subcommand gets "did you mean", an unknown
// flag points to its subcommand's help, a missing or refused password and a missing ACL
// permission say what to do, a key without a TTL is called out, and `dlock release KEY
// "$(dlock acquire KEY)"` works (the first word is the token).
TEST_F(CliTest, MessagesSayWhatToDo) {
  const std::string key = test_key();
  auto typo = run({"-r", server_.url(), "stauts", key});
  EXPECT_EQ(typo.status, 64) << typo.err;
  expect_one_line_message(typo);
  EXPECT_NE(typo.err.find("did you mean 'status'"), std::string::npos) << typo.err;
  auto flag = run({"-r", server_.url(), "run", "--bogus", key, "true"});
  EXPECT_EQ(flag.status, 64) << flag.err;
  EXPECT_NE(flag.err.find("dlock run --help"), std::string::npos) << flag.err;

  redis_server secured{{.extra = {"--requirepass", "s3cret"}}};
  auto no_password = run({"-r", secured.url(), "status", key});
  EXPECT_EQ(no_password.status, 77) << no_password.err;
  EXPECT_NE(no_password.err.find("needs a password"), std::string::npos) << no_password.err;
  EXPECT_NE(no_password.err.find("DLOCK_PASSWORD"), std::string::npos) << no_password.err;
  auto wrong = run({"-r", secured.url(), "status", key}, {"DLOCK_PASSWORD=wrong"});
  EXPECT_EQ(wrong.status, 77) << wrong.err;
  EXPECT_NE(wrong.err.find("refused"), std::string::npos) << wrong.err;
  auto waiting = run({"-r", secured.url(), "run", "-n", key, "true"});
  EXPECT_EQ(waiting.status, 69) << waiting.err;
  EXPECT_NE(waiting.err.find("needs a password"), std::string::npos) << waiting.err;
  ASSERT_EQ(test::raw_command(server_.port(), "ACL SETUSER reader on >r ~* &* +@connection +get")
                .rfind("+OK", 0),
            0u);
  auto noperm = run({"-r", server_.url(), "--user", "reader", "run", "-n", key, "true"},
                    {"DLOCK_PASSWORD=r"});
  EXPECT_EQ(noperm.status, 69) << noperm.err;
  EXPECT_NE(noperm.err.find("docs/security.md"), std::string::npos) << noperm.err;

  ASSERT_EQ(test::raw_command(server_.port(), "SET " + key + " forever").rfind("+OK", 0), 0u);
  auto forever = run({"-r", server_.url(), "status", key});
  EXPECT_EQ(forever.status, 0) << forever.err;
  EXPECT_NE(forever.out.find("never expires"), std::string::npos) << forever.out;
  ASSERT_EQ(test::raw_command(server_.port(), "DEL " + key).rfind(":1", 0), 0u);

  auto acquired = run({"-r", server_.url(), "acquire", "--ttl", "60s", key});
  ASSERT_EQ(acquired.status, 0) << acquired.err;
  std::string line = acquired.out.substr(0, acquired.out.find('\n'));
  ASSERT_NE(line.find(' '), std::string::npos) << "TOKEN FENCE: " << line;
  auto extended = run({"-r", server_.url(), "extend", "--ttl", "60s", key, line});
  EXPECT_EQ(extended.status, 0) << extended.err;
  auto released = run({"-r", server_.url(), "release", key, line});
  EXPECT_EQ(released.status, 0) << released.err;
  EXPECT_FALSE(exists(key));
}

// dlock release --force KEY (issue 36): evicts whoever holds KEY, says who it was, hands the
// lock to the waiter at once with a higher fence, and the evicted run learns of it at its next
// renewal and ends its CMD (71). A free KEY is nothing to do; TOKEN and --force are one or
// the other.
TEST_F(CliTest, ForceReleaseEvictsTheHolderSaysWhoAndHandsTheLockOn) {
  strays left;
  const std::string key = test_key();
  const std::string ttl = std::to_string(test::scaled(3s).count()) + "ms";
  auto holder = start_sleeping({"-r", server_.url(), "run", "--ttl", ttl, key},
                               "echo $DLOCK_FENCE > " + path("fence1"));
  ASSERT_TRUE(eventually([&] { return !read_file(path("fence1")).empty(); })) << holder->err();
  auto waiter = start({"-r", server_.url(), "run", "-q", key, "sh", "-c",
                       "echo $DLOCK_FENCE > " + path("fence2")});
  ASSERT_TRUE(eventually([&] { return !queued(lock_keys_for(key).waiters).empty(); }))
      << waiter->err();

  auto forced = run({"-r", server_.url(), "release", "--force", key});
  EXPECT_EQ(forced.status, 0) << forced.err;
  EXPECT_NE(forced.err.find("held by"), std::string::npos) << forced.err;
  EXPECT_NE(forced.err.find("pid " + std::to_string(holder->pid())), std::string::npos)
      << forced.err;
  EXPECT_EQ(waiter->wait(), 0) << waiter->err();
  EXPECT_GT(std::stoull(read_file(path("fence2"))), std::stoull(read_file(path("fence1"))));
  EXPECT_EQ(holder->wait(), 71) << holder->err();

  auto nothing = run({"-r", server_.url(), "release", "--force", key});
  EXPECT_EQ(nothing.status, 0) << nothing.err;
  EXPECT_NE(nothing.err.find("is free"), std::string::npos) << nothing.err;
  EXPECT_EQ(run({"-r", server_.url(), "release", "--force", key, "sometoken"}).status, 64);
  EXPECT_EQ(run({"-r", server_.url(), "release", key}).status, 64);

  // Not a lock: a key without a TTL (an application's), and a read-write lock's holder.
  ASSERT_EQ(test::raw_command(server_.port(), "SET " + key + " app-data").rfind("+OK", 0), 0u);
  auto app_key = run({"-r", server_.url(), "release", "--force", key});
  EXPECT_EQ(app_key.status, 64) << app_key.err;
  EXPECT_NE(app_key.err.find("no TTL"), std::string::npos) << app_key.err;
  EXPECT_TRUE(exists(key)) << "--force deleted an application's key";
  const std::string shared = test_key("shared");
  auto reader = start_holder({"-r", server_.url(), "run", "--read", shared}, "reading");
  ASSERT_TRUE(reader);
  auto rw = run({"-r", server_.url(), "release", "--force", shared});
  EXPECT_EQ(rw.status, 64) << rw.err;
  EXPECT_NE(rw.err.find("read-write lock"), std::string::npos) << rw.err;
  EXPECT_FALSE(reader->try_wait().has_value()) << "the reader was ended";
  EXPECT_TRUE(exists(shared)) << "--force took the readers' mark off the name";
}

}  // namespace
}  // namespace dlock::test
