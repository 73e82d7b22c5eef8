// SPDX-License-Identifier: Apache-2.0
#include "fault/scenario.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dlock::fault {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

std::string clock_file(const std::string& dir, int node) {
  return dir + "/clock-" + std::to_string(node);
}

std::string client_clock_file(const std::string& dir, int process) {
  return dir + "/client-clock-" + std::to_string(process);
}

// libfaketime's relative offset in seconds: "+0.800", "-1.600".
std::string faketime_offset(std::chrono::milliseconds offset) {
  char text[32];
  auto ms = offset.count();
  std::snprintf(text, sizeof text, "%c%lld.%03lld\n", ms < 0 ? '-' : '+', std::llabs(ms) / 1000,
                std::llabs(ms) % 1000);
  return text;
}

// The environment a worker runs in under libfaketime: the clock read anew from `file` at every
// call (the file holds an offset), and only the wall clock moved unless `monotonic`.
std::vector<std::string> faketime_env(const std::string& file, bool monotonic) {
  if (::access(DLOCK_LIBFAKETIME, R_OK) != 0) {
    throw std::runtime_error(std::string("libfaketime is missing (") + DLOCK_LIBFAKETIME +
                             "): scripts/bootstrap installs Debian's libfaketime");
  }
  const char* asan = std::getenv("ASAN_OPTIONS");
  std::vector<std::string> env{
      "/usr/bin/env", "-u", "FAKETIME",  // the file alone sets the offset
      std::string("LD_PRELOAD=") + DLOCK_LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE=" + file,
      "FAKETIME_NO_CACHE=1",
      // A sanitized worker: its runtime must let a preloaded library come first.
      std::string("ASAN_OPTIONS=verify_asan_link_order=0") + (asan && *asan ? ":" : "") +
          (asan ? asan : "")};
  if (!monotonic) env.push_back("DONT_FAKE_MONOTONIC=1");
  return env;
}

void write_atomically(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path + ".tmp");
    out << text;
  }
  std::rename((path + ".tmp").c_str(),
              path.c_str());  // the shim never sees half a file
}

}  // namespace

scenario::scenario(std::string name, scenario_options options)
    : name_(std::move(name)), options_(std::move(options)) {
  char tmpl[] = "/tmp/dlock-fault-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  test::server_options node_options;
  node_options.persistence = options_.persistence;
  if (options_.netns) {
    if (options_.sentinel || options_.proxied || !options_.shimmed.empty()) {
      throw std::invalid_argument("a netns scenario has no sentinels, proxies or clock shims");
    }
    lab_ = std::make_unique<netns_lab>();
  }
  // A node or the resource in a member of its own, with netns.
  auto placed = [this](test::server_options o, std::vector<int>* members) {
    if (!lab_) return o;
    int m = lab_->add_member();
    if (members) members->push_back(m);
    o.launcher = lab_->launcher(m);
    o.address = lab_->address(m);
    return o;
  };
  if (options_.sentinel) {
    if (options_.nodes != 1 || options_.proxied || !options_.shimmed.empty()) {
      throw std::invalid_argument("a sentinel scenario has one node, unproxied, unshimmed");
    }
    sentinels_ = std::make_unique<test::sentinel_group>(test::sentinel_group_options{
        .down_after = 5000ms,  // the faults decide when to fail over (SENTINEL FAILOVER)
        .data_extra = options_.persistence
                          ? std::vector<std::string>{"--appendonly", "yes", "--appendfsync", "always"}
                          : std::vector<std::string>{},
        .replicate_via =
            [this](unsigned short master) {
              replication_link_ = std::make_unique<tcp_proxy>(master);
              return replication_link_->port();
            },
        // Long: else the sentinels re-point the replica past the proxy after this.
        .failover_timeout = 60s});
    sentinels_->wait_ready();
  }
  // Shimmed nodes start first, while this process has no other threads to race with setenv.
  for (int i = 0; i < (sentinels_ ? 0 : options_.nodes); ++i) {
    bool shimmed =
        std::find(options_.shimmed.begin(), options_.shimmed.end(), i) != options_.shimmed.end();
    if (shimmed) {
      write_atomically(clock_file(dir_, i), "0 1\n");
      ::setenv("LD_PRELOAD", DLOCK_CLOCK_SHIM, 1);
      ::setenv("DLOCK_FAULT_CLOCK", clock_file(dir_, i).c_str(), 1);
    }
    nodes_.push_back(std::make_unique<test::redis_server>(placed(node_options, &node_members_)));
    if (shimmed) {
      ::unsetenv("LD_PRELOAD");
      ::unsetenv("DLOCK_FAULT_CLOCK");
    }
  }
  resource_ = std::make_unique<test::redis_server>(placed({}, nullptr));
  if (lab_) resource_member_ = lab_->members() - 1;
  for (int p = 0; lab_ && p < options_.processes; ++p) {
    worker_members_.push_back(lab_->add_member());
  }
  if (options_.proxied) {
    proxies_.resize(static_cast<std::size_t>(options_.processes));
    for (auto& row : proxies_) {
      for (auto& n : nodes_) row.push_back(std::make_unique<tcp_proxy>(n->port()));
    }
  }
}

scenario::~scenario() {
  workers_.clear();  // SIGCONT + SIGKILL
  proxies_.clear();
  for (auto& n : nodes_) n->resume();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

tcp_proxy& scenario::proxy(int process, int node) {
  return *proxies_.at(static_cast<std::size_t>(process)).at(static_cast<std::size_t>(node));
}

void scenario::set_clock(int node, std::chrono::milliseconds offset, double rate) {
  std::ostringstream text;
  text << offset.count() << ' ' << rate << '\n';
  write_atomically(clock_file(dir_, node), text.str());
}

int scenario::holder_of(const std::string& lock, std::chrono::milliseconds left) {
  std::string key = "fault:" + name_ + ":" + lock + ":holder";
  if (left.count() > 0 && holder_left(lock) < left) return -1;
  std::string reply = test::raw_command(resource_->host(), resource_->port(), "GET " + key);
  // "$5\r\n12345\r\n", or "$-1\r\n" when nobody announced a holding lately.
  auto first = reply.find("\r\n");
  if (reply.empty() || reply[0] != '$' || first == std::string::npos) return -1;
  pid_t pid = std::atoi(reply.c_str() + first + 2);
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i] && workers_[i]->pid() == pid) return static_cast<int>(i);
  }
  return -1;
}

std::chrono::milliseconds scenario::holder_left(const std::string& lock) {
  std::string key = "fault:" + name_ + ":" + lock + ":holder";
  // ":1234\r\n"
  std::string pttl = test::raw_command(resource_->host(), resource_->port(), "PTTL " + key);
  if (pttl.size() < 2 || pttl[0] != ':') return -1ms;
  return std::max(std::chrono::milliseconds(std::atoll(pttl.c_str() + 1)), -1ms);
}

void scenario::jump_client_clock(int process, std::chrono::milliseconds offset) {
  if (!options_.faked_client_clocks) throw std::logic_error("no faked_client_clocks");
  write_atomically(client_clock_file(dir_, process), faketime_offset(offset));
}

void scenario::pause_worker(int process) {
  workers_.at(static_cast<std::size_t>(process))->signal(SIGSTOP);
  worker_paused_.at(static_cast<std::size_t>(process)) = true;
}

void scenario::resume_worker(int process) {
  workers_.at(static_cast<std::size_t>(process))->signal(SIGCONT);
  worker_paused_.at(static_cast<std::size_t>(process)) = false;
}

bool scenario::running() const { return steady::now() < end_; }

void scenario::sleep(std::chrono::milliseconds d) const {
  std::this_thread::sleep_until(std::min(steady::now() + d, end_));
}

std::vector<std::string> scenario::urls_for(int process) const {
  std::vector<std::string> urls;
  if (sentinels_) urls.push_back(sentinels_->url());
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    urls.push_back(options_.proxied ? proxies_[static_cast<std::size_t>(process)][i]->url()
                                    : nodes_[i]->url());
  }
  return urls;
}

outcome scenario::run(const std::function<void(scenario&)>& faults) {
  const std::string worker = test::self_dir() + "/fault_worker";
  auto seconds = std::chrono::duration<double>(options_.duration).count();
  for (int p = 0; p < options_.processes; ++p) {
    auto urls = urls_for(p);
    std::string all;
    for (const auto& u : urls) all += (all.empty() ? "" : ",") + u;
    std::vector<std::string> argv{worker,
                                  "--out",
                                  dir_ + "/worker-" + std::to_string(p),
                                  "--resource",
                                  resource_->url(),
                                  "--prefix",
                                  "fault:" + name_,
                                  "--seconds",
                                  std::to_string(seconds),
                                  "--ttl",
                                  std::to_string(options_.ttl.count()),
                                  "--seed",
                                  std::to_string(p),
                                  "--lock",
                                  "mutex:single:1:" + urls[0]};
    if (urls.size() > 1) argv.insert(argv.end(), {"--lock", "mutex:redlock:1:" + all});
    if (options_.semaphore) argv.insert(argv.end(), {"--lock", "semaphore:sem:2:" + urls[0]});
    if (options_.rwlock) argv.insert(argv.end(), {"--lock", "rwlock:rw:0:" + urls[0]});
    if (options_.lockset) argv.insert(argv.end(), {"--lock", "lockset:set:1:" + urls[0]});
    if (options_.mixed_kinds) argv.insert(argv.end(), {"--lock", "mixed_kinds:mix:0:" + urls[0]});
    if (options_.fair_semaphore) {
      argv.insert(argv.end(), {"--lock", "fair_semaphore:fair:2:" + urls[0]});
    }
    if (options_.election) argv.insert(argv.end(), {"--lock", "election:elect:1:" + all});
    if (options_.cli_run) {
      argv.insert(argv.end(), {"--lock", "cli_run:cli:1:" + all, "--cli", DLOCK_CLI_PATH});
    }
    argv.insert(argv.end(), options_.worker_flags.begin(), options_.worker_flags.end());
    if (options_.faked_client_clocks) {
      jump_client_clock(p, 0ms);
      auto env = faketime_env(client_clock_file(dir_, p), options_.fake_monotonic);
      argv.insert(argv.begin(), env.begin(), env.end());
    }
    if (lab_) {
      auto launcher = lab_->launcher(worker_members_[static_cast<std::size_t>(p)]);
      argv.insert(argv.begin(), launcher.begin(), launcher.end());
    }
    workers_.push_back(std::make_unique<test::child_process>(argv));
    worker_paused_.push_back(false);
  }
  end_ = steady::now() + options_.duration;

  faults(*this);

  // Heal: whatever the faults left broken comes back, so the workers can finish.
  if (lab_) lab_->heal();
  for (auto& n : nodes_) {
    if (!n->running()) n->restart();
    n->resume();
  }
  if (sentinels_) {
    for (int i = 0; i < 2; ++i) sentinels_->node(i).resume();
  }
  for (auto& row : proxies_) {
    for (auto& p : row) {
      p->set_latency(0ms, 0ms);
      p->set_mode(tcp_proxy::mode::pass);
    }
  }
  for (std::size_t p = 0; p < workers_.size(); ++p) {
    if (worker_paused_[p]) resume_worker(static_cast<int>(p));
    if (options_.faked_client_clocks) jump_client_clock(static_cast<int>(p), 0ms);
  }

  report all;
  int failed = 0;
  auto give_up = end_ + 30s;
  for (std::size_t p = 0; p < workers_.size(); ++p) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - steady::now());
    int status = workers_[p]->wait(std::max(left, 1000ms));
    if (status != 0) ++failed;
    if (!all.load(dir_ + "/worker-" + std::to_string(p)) && status == 0) ++failed;
  }
  outcome out = judge(all, failed);
  out.lost_updates = lost_updates(all.writes);
  out.line += " lost_updates=" + std::to_string(out.lost_updates);
  std::printf("%s\n", out.line.c_str());
  std::fflush(stdout);
  log_result(out.line);
  return out;
}

std::size_t scenario::lost_updates(const std::vector<write_record>& writes) const {
  std::map<std::string, std::uint64_t> highest_accepted;  // per lock: its register's
  for (const auto& w : writes) {
    if (w.accepted) highest_accepted[w.resource] = std::max(highest_accepted[w.resource], w.token);
  }
  std::size_t lost = 0;
  for (const auto& [lock, token] : highest_accepted) {
    // "$5\r\n12345\r\n": fenced_set stores the writer's token as the value.
    std::string reply = test::raw_command(resource_->host(), resource_->port(),
                                          "GET fault:" + name_ + ":" + lock + ":data");
    auto value = reply.find("\r\n");
    if (reply.empty() || reply[0] != '$' || value == std::string::npos ||
        std::strtoull(reply.c_str() + value + 2, nullptr, 10) < token) {
      ++lost;
    }
  }
  return lost;
}

outcome scenario::judge(const report& r, int failed_workers) const {
  outcome out;
  out.history = r;
  out.failed_workers = failed_workers;
  out.overlaps_by_lock = count_overlaps_by_lock(r.intervals);
  for (const auto& [lock, n] : out.overlaps_by_lock) out.overlaps += n;
  out.fence = check_writes(r.writes);
  for (const auto& [name, value] : r.counters) {
    if (name.rfind("acquired.", 0) == 0) {
      out.acquisitions_by_lock[name.substr(9)] += value;
      out.acquisitions += value;
    } else if (name == "lost") {
      out.lost += value;
    } else if (name.rfind("error.", 0) == 0) {
      out.errors[name.substr(6)] += value;
    }
  }
  std::ostringstream line;
  auto breakdown = [&line](const auto& by_lock) {
    line << " [";
    const char* sep = "";
    for (const auto& [lock, n] : by_lock) {
      line << sep << lock << '=' << n;
      sep = " ";
    }
    line << ']';
  };
  line << "fault " << name_ << ": acquisitions=" << out.acquisitions;
  breakdown(out.acquisitions_by_lock);
  line << " overlaps=" << out.overlaps;
  breakdown(out.overlaps_by_lock);
  line << " stale_rejected=" << out.fence.rejected
       << " wrong_accepted=" << out.fence.wrongly_accepted
       << " writes_accepted=" << out.fence.accepted << " lost=" << out.lost << " errors={";
  const char* sep = "";
  for (const auto& [name, n] : out.errors) {
    line << sep << name << ':' << n;
    sep = " ";
  }
  line << '}';
  if (failed_workers) line << " FAILED_WORKERS=" << failed_workers;
  out.line = line.str();
  return out;
}

void log_result(const std::string& line) {
  int fd = ::open((test::self_dir() + "/fault-results.log").c_str(),
                  O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string text = line + "\n";
  (void)!::write(fd, text.data(),
                 text.size());  // one write: lines of parallel tests stay whole
  ::close(fd);
}

}  // namespace dlock::fault
