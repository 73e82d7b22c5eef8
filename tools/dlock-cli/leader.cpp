// SPDX-License-Identifier: Apache-2.0
// dlock leader NAME [--watch]: who leads the election NAME (dlock::election, `dlock elect`).
// Prints "<term> <value>" and exits 0, or exits 1 with nothing on stdout when nobody leads;
// 69 when too few nodes answer. With --watch it prints each change as it happens instead,
// "elected <term> <value>" or "ended <term> <value>", the current leader first, until a
// signal (SIGINT, SIGTERM ...) ends it with exit 0. Changes come through Pub/Sub, not polling.
// "missed <term>" says that changes after that term may have gone unseen (the watch could not
// hear the nodes for a while): the terms missed, if any, come before the next line's.
#include <CLI/CLI.hpp>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <deque>
#include <memory>
#include <mutex>

#include "cli.hpp"
#include "dlock/election.hpp"
#include "process.hpp"

namespace dlock::cli {
namespace {

struct leader_options {
  std::string name;
  bool watch = false;
};

// The observer's lines, handed from dlock's I/O thread to the main thread, which prints them
// (stdout may block; the I/O thread must not).
struct line_queue {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::mutex mu;
  std::deque<std::string> lines;
  ~line_queue() {
    if (fd >= 0) ::close(fd);
  }
  void push(std::string line) {
    {
      std::lock_guard lock(mu);
      lines.push_back(std::move(line));
    }
    std::uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
  }
  std::deque<std::string> take() {
    std::uint64_t count;
    (void)!::read(fd, &count, sizeof count);
    std::lock_guard lock(mu);
    return std::exchange(lines, {});
  }
};

int watch_leader(election& e, signal_inbox& signals) {
  auto queue = std::make_shared<line_queue>();
  if (queue->fd < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  auto watching = e.observe([queue](const election_event& ev) {
    using change = election_event::change;
    if (ev.what == change::missed) return queue->push("missed " + std::to_string(ev.term));
    queue->push(std::string(ev.what == change::elected ? "elected " : "ended ") +
                std::to_string(ev.term) + " " + ev.value);
  });
  for (;;) {
    auto got = signals.wait(std::chrono::milliseconds(60'000), {queue->fd});
    for (const auto& line : queue->take()) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    for (const auto& s : got.signals) {
      auto role = role_of(static_cast<int>(s.ssi_signo));
      if (role == signal_role::terminate) return exit_ok;
      if (role == signal_role::stop) ::kill(::getpid(), SIGSTOP);
    }
  }
}

}  // namespace

subcommand add_leader_command(CLI::App& parent, const global_options& g) {
  auto o = std::make_shared<leader_options>();
  auto* app = parent.add_subcommand(
      "leader", "Print who leads the election NAME (\"TERM VALUE\"; exit 1 when nobody does)");
  app->add_flag("--watch", o->watch,
                "Print each change instead (\"elected TERM VALUE\", \"ended TERM VALUE\"), "
                "the current leader first, until interrupted; \"missed TERM\" where changes "
                "after TERM may have gone unseen");
  app->add_option("NAME", o->name, "The election's name (its lock's Redis key)")->required();
  return {app, [&g, o]() -> int {
            std::optional<signal_inbox> signals;  // before the first client (see run.cpp)
            if (o->watch) signals.emplace();
            election e{make_clients(g), o->name, ""};
            if (o->watch) return watch_leader(e, *signals);
            std::error_code ec;
            auto now = e.leader(ec);
            if (ec) {
              say("cannot read the leader of '%s': %s", o->name.c_str(), ec.message().c_str());
              return exit_unavailable;
            }
            if (!now) return 1;
            std::printf("%llu %s\n", static_cast<unsigned long long>(now.term), now.value.c_str());
            return exit_ok;
          }};
}

}  // namespace dlock::cli
