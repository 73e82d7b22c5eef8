// SPDX-License-Identifier: Apache-2.0
#include "fault/netns_lab.hpp"

#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace dlock::fault {
namespace {

constexpr const char* ip_tool = "/usr/sbin/ip";
constexpr const char* iptables_tool = "/usr/sbin/iptables";

// Runs `argv` to its end; its exit status (127: it could not start). Output is dropped unless
// it fails, when it goes to stderr with the command line.
int run(const std::vector<std::string>& argv, bool quiet_failure = false) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (quiet_failure) posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return 127;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void must(const std::vector<std::string>& argv) {
  if (run(argv) != 0) {
    std::string line;
    for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
    throw std::runtime_error("netns_lab: failed: " + line);
  }
}

bool executable(const char* path) { return ::access(path, X_OK) == 0; }

// What `argv` prints on stdout ("" when it cannot run).
std::string output_of(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  std::string out;
  if (FILE* p = ::popen((line + " 2>/dev/null").c_str(), "r")) {
    char buf[512];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

// A lab's namespace, "dlk<pid>-...": the pid, or 0 for another name.
long lab_pid(const std::string& ns) {
  if (ns.rfind("dlk", 0) != 0) return 0;
  std::size_t i = 3;
  while (i < ns.size() && std::isdigit(static_cast<unsigned char>(ns[i]))) ++i;
  if (i == 3 || i >= ns.size() || ns[i] != '-') return 0;
  return std::atol(ns.c_str() + 3);
}

// Labs whose test process is gone (killed mid-test), or that carry this process's pid (a
// container that reuses pids): their processes are killed (a server orphaned by a crash would
// keep the namespace alive), then the namespaces removed.
void remove_stale_labs() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    auto ns = entry.path().filename().string();
    long pid = lab_pid(ns);
    if (pid <= 0) continue;
    bool alive = ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
    if (alive && pid != ::getpid()) continue;
    std::istringstream pids(output_of({ip_tool, "netns", "pids", ns}));
    for (long p; pids >> p;) ::kill(static_cast<pid_t>(p), SIGKILL);
    run({ip_tool, "netns", "del", ns}, true);
  }
}

}  // namespace

std::string netns_lab::unavailable() {
  if (::geteuid() != 0) return "network namespaces need root (this test runs as uid " +
                               std::to_string(::geteuid()) + ")";
  if (!executable(ip_tool)) return "no /usr/sbin/ip: install iproute2 (scripts/bootstrap)";
  // Everything a lab makes, once, in a namespace of its own: a bridge and a veth pair.
  std::string probe = "dlk" + std::to_string(::getpid()) + "-probe";
  if (run({ip_tool, "netns", "add", probe}, true) != 0) {
    return "this machine refuses `ip netns add` (no CAP_SYS_ADMIN, or no namespace support)";
  }
  std::string why;
  if (run({ip_tool, "-n", probe, "link", "add", "br0", "type", "bridge"}, true) != 0) {
    why = "this machine cannot make a Linux bridge in a namespace (no bridge module?)";
  } else if (run({ip_tool, "-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1"},
                 true) != 0) {
    why = "this machine cannot make a veth pair in a namespace (no veth module?)";
  }
  run({ip_tool, "netns", "del", probe}, true);
  return why;
}

std::string netns_lab::no_iptables() {
  if (!executable(iptables_tool)) {
    return "no /usr/sbin/iptables: install iptables (scripts/bootstrap)";
  }
  std::string probe = "dlk" + std::to_string(::getpid()) + "-probe";
  if (run({ip_tool, "netns", "add", probe}, true) != 0) return "cannot make a namespace";
  bool works = run({ip_tool, "netns", "exec", probe, iptables_tool, "-w", "-A", "INPUT", "-s",
                    "192.0.2.1", "-j", "DROP"},
                   true) == 0;
  run({ip_tool, "netns", "del", probe}, true);
  return works ? "" : "iptables cannot add a rule in a namespace here (no nf_tables/ip_tables?)";
}

netns_lab::netns_lab() {
  remove_stale_labs();
  auto pid = static_cast<unsigned>(::getpid());
  prefix_ = "dlk" + std::to_string(pid);
  // One /24 per lab in 10.250.0.0/15 - 10.253.255.0/24, from the pid, so that parallel tests
  // differ; the next one when this machine already routes it (another lab, a real network).
  for (unsigned i = 0;; ++i) {
    unsigned n = (pid + i) % 1024;
    subnet_ = "10." + std::to_string(250 + n / 256) + "." + std::to_string(n % 256) + ".";
    if (output_of({ip_tool, "-4", "route", "show", subnet_ + "0/24"}).empty()) break;
    if (i == 1023) throw std::runtime_error("netns_lab: every 10.250-253.x.0/24 is routed here");
  }
  bridge_ns_ = name("br");
  host_link_ = prefix_ + "h";
  must({ip_tool, "netns", "add", bridge_ns_});
  try {
    must({ip_tool, "-n", bridge_ns_, "link", "set", "lo", "up"});
    must({ip_tool, "-n", bridge_ns_, "link", "add", "br0", "type", "bridge"});
    must({ip_tool, "-n", bridge_ns_, "link", "set", "br0", "up"});
    // This process's own way in: a veth pair from here to the bridge.
    must({ip_tool, "link", "add", host_link_, "type", "veth", "peer", "name", prefix_ + "bh"});
    must({ip_tool, "link", "set", prefix_ + "bh", "netns", bridge_ns_});
    must({ip_tool, "-n", bridge_ns_, "link", "set", prefix_ + "bh", "master", "br0", "up"});
    must({ip_tool, "addr", "add", subnet_ + "254/24", "dev", host_link_});
    must({ip_tool, "link", "set", host_link_, "up"});
  } catch (...) {
    run({ip_tool, "link", "del", host_link_}, true);
    run({ip_tool, "netns", "del", bridge_ns_}, true);
    throw;
  }
}

netns_lab::~netns_lab() {
  for (const auto& m : members_) {
    run({ip_tool, "netns", "del", m.ns}, true);
    run({ip_tool, "link", "del", m.inside_link}, true);  // set up only halfway: still here
  }
  run({ip_tool, "link", "del", host_link_}, true);
  run({ip_tool, "netns", "del", bridge_ns_}, true);
}

std::string netns_lab::name(const std::string& suffix) const { return prefix_ + "-" + suffix; }

int netns_lab::add_member() {
  int i = members();
  if (i >= 200) throw std::logic_error("netns_lab: at most 200 members");
  member m;
  m.ns = name(std::to_string(i));
  m.inside_link = prefix_ + "m" + std::to_string(i);
  m.bridge_link = prefix_ + "b" + std::to_string(i);
  m.address = subnet_ + std::to_string(i + 1);
  must({ip_tool, "netns", "add", m.ns});
  members_.push_back(m);  // removed by the destructor from here on
  must({ip_tool, "-n", m.ns, "link", "set", "lo", "up"});
  must({ip_tool, "link", "add", m.inside_link, "type", "veth", "peer", "name", m.bridge_link});
  must({ip_tool, "link", "set", m.inside_link, "netns", m.ns});
  must({ip_tool, "link", "set", m.bridge_link, "netns", bridge_ns_});
  must({ip_tool, "-n", bridge_ns_, "link", "set", m.bridge_link, "master", "br0", "up"});
  must({ip_tool, "-n", m.ns, "addr", "add", m.address + "/24", "dev", m.inside_link});
  must({ip_tool, "-n", m.ns, "link", "set", m.inside_link, "up"});
  return i;
}

const std::string& netns_lab::address(int member) const {
  return members_.at(static_cast<std::size_t>(member)).address;
}

std::vector<std::string> netns_lab::launcher(int member) const {
  return {ip_tool, "netns", "exec", members_.at(static_cast<std::size_t>(member)).ns};
}

void netns_lab::enter(int member) const {
  auto path = "/run/netns/" + members_.at(static_cast<std::size_t>(member)).ns;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("netns_lab: cannot enter " + path + ": " + std::strerror(err));
  }
  ::close(fd);
}

void netns_lab::cut(int member) {
  auto& m = members_.at(static_cast<std::size_t>(member));
  must({ip_tool, "-n", bridge_ns_, "link", "set", m.bridge_link, "down"});
  m.cut = true;
  in_force_.push_back("cut " + std::to_string(member));
}

void netns_lab::iptables(int member, const std::vector<std::string>& rule) {
  auto& m = members_.at(static_cast<std::size_t>(member));
  std::vector<std::string> argv{ip_tool, "netns", "exec", m.ns, iptables_tool, "-w"};
  argv.insert(argv.end(), rule.begin(), rule.end());
  must(argv);
  m.filtered = true;
}

void netns_lab::cut_between(int a, int b) {
  iptables(a, {"-A", "INPUT", "-s", address(b), "-j", "DROP"});
  iptables(a, {"-A", "OUTPUT", "-d", address(b), "-j", "DROP"});
  in_force_.push_back("cut " + std::to_string(a) + "<->" + std::to_string(b));
}

void netns_lab::drop_from(int a, int b) {
  iptables(a, {"-A", "INPUT", "-s", address(b), "-j", "DROP"});
  in_force_.push_back("drop " + std::to_string(a) + "<-" + std::to_string(b));
}

void netns_lab::heal() {
  for (auto& m : members_) {
    if (m.cut) must({ip_tool, "-n", bridge_ns_, "link", "set", m.bridge_link, "up"});
    if (m.filtered) must({ip_tool, "netns", "exec", m.ns, iptables_tool, "-w", "-F"});
    m.cut = m.filtered = false;
  }
  in_force_.clear();
}

std::string netns_lab::faults() const {
  std::string out;
  for (const auto& f : in_force_) out += (out.empty() ? "" : "; ") + f;
  return out.empty() ? "none" : out;
}

}  // namespace dlock::fault
