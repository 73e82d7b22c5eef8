// SPDX-License-Identifier: Apache-2.0
#include "script.hpp"

#include <algorithm>
#include <array>
#include <iterator>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "access.hpp"
#include "algo/lock_protocol.hpp"
#include "algo/semaphore_protocol.hpp"
#include "dlock/detail/async.hpp"

namespace dlock::detail {
namespace {

// The words of a script call, handed to `emit` as one request's commands.
template <class Keys, class Args, class Emit>
decltype(auto) with_script_words(std::string_view verb, std::string_view body_or_sha,
                                 const Keys& keys, const Args& args, Emit&& emit) {
  std::string nkeys = std::to_string(keys.size());
  // On the stack for dlock's own scripts (at most 12 words): one allocation less per call.
  std::array<std::string_view, 16> small;
  std::vector<std::string_view> large;
  std::size_t n = 3 + keys.size() + args.size();
  std::string_view* argv = small.data();
  if (n > small.size()) {
    large.resize(n);
    argv = large.data();
  }
  auto* out = argv;
  *out++ = verb;
  *out++ = body_or_sha;
  *out++ = nkeys;
  out = std::copy(keys.begin(), keys.end(), out);
  std::copy(args.begin(), args.end(), out);
  std::span<const std::string_view> words(argv, n);
  return emit(std::span<const std::span<const std::string_view>>(&words, 1));
}

// The words of a request of plain commands as they go out (plain_commands_of: the lock's
// acquire_unqueued, the semaphore's solo grant), in one write.
template <class Keys, class Args, class Emit>
decltype(auto) with_plain_words(const script& s, const Keys& keys, const Args& args,
                                Emit&& emit) {
  std::array<std::string_view, 4> key_words{};
  std::array<std::string_view, 4> arg_words{};
  std::size_t nk = 0, na = 0;
  for (const auto& k : keys) if (nk < key_words.size()) key_words[nk++] = k;
  for (const auto& a : args) if (na < arg_words.size()) arg_words[na++] = a;
  std::size_t size = 0;
  auto steps = plain_commands_of(s, {key_words.data(), nk}, {arg_words.data(), na}, size);
  std::array<std::span<const std::string_view>, steps.size()> words;
  for (std::size_t i = 0; i < size; ++i) words[i] = steps[i].view();
  return emit(std::span<const std::span<const std::string_view>>(words.data(), size));
}

// The first try of a request: EVALSHA, or the plain commands.
template <class Keys, class Args, class Emit>
decltype(auto) with_request_words(const script& s, const Keys& keys, const Args& args,
                                  Emit&& emit) {
  if (s.as_commands) return with_plain_words(s, keys, args, emit);
  return with_script_words("EVALSHA", s.sha1, keys, args, emit);
}

command new_command(std::span<const std::span<const std::string_view>> commands) {
  return access::library_command(commands);
}

template <class Keys, class Args>
command script_command(std::string_view verb, std::string_view body_or_sha, const Keys& keys,
                       const Args& args) {
  return with_script_words(verb, body_or_sha, keys, args, new_command);
}

template <class Keys, class Args>
command request_command(const script& s, const Keys& keys, const Args& args) {
  return with_request_words(s, keys, args, new_command);
}

// What is left of a request's timeout for its EVAL fallback, rounded up: truncated, a 1 ms
// node_timeout (the default below a 20 ms TTL) would leave 0 after EVALSHA's round trip, and a
// node with an empty script cache would never get the script.
std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
}

bool is_noscript(const reply& r) {
  return r.is_error() && r.str().compare(0, 8, "NOSCRIPT") == 0;
}

}  // namespace

void run_script(client& node, const script& s, std::initializer_list<std::string_view> keys,
                std::initializer_list<std::string_view> args, std::chrono::milliseconds timeout,
                unique_function<void(std::error_code, reply)> handler) {
  // The caller's views die with this call, so the rare EVAL fallback needs copies.
  run_script(node, s, std::vector<std::string>(keys.begin(), keys.end()),
             std::vector<std::string>(args.begin(), args.end()), timeout, std::move(handler));
}

void run_script(client& node, const script& s, std::vector<std::string> keys,
                std::vector<std::string> args, std::chrono::milliseconds timeout,
                unique_function<void(std::error_code, reply)> handler) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // Made before the handler below takes the keys and arguments over.
  command first = request_command(s, keys, args);
  access::start_exec(
      node, std::move(first), timeout,
      [node, s, deadline, keys = std::move(keys), args = std::move(args),
       handler = std::move(handler)](std::error_code ec, reply r) mutable {
        if (!is_noscript(r)) return handler(ec, std::move(r));
        auto left = time_left(deadline);
        if (left <= std::chrono::milliseconds::zero()) return handler(errc::timeout, {});
        access::start_exec(node, script_command("EVAL", s.body, keys, args), left,
                           std::move(handler));
      });
}

void run_request(client& node, request r, unique_function<void(std::error_code, reply)> handler) {
  auto deadline = std::chrono::steady_clock::now() + r.timeout;
  const script* s = r.code;
  // Made before the handler below takes the keys and arguments over.
  command first = request_command(*s, r.keys, r.args);
  access::start_exec(
      node, std::move(first), r.timeout,
      [node, s, deadline, keys = std::move(r.keys), args = std::move(r.args), gate = r.gate,
       id = r.id, handler = std::move(handler)](std::error_code ec, reply answer) mutable {
        if (!is_noscript(answer)) return handler(ec, std::move(answer));
        if (gate.wanted && !gate.wanted(gate.owner, id)) return handler(errc::timeout, {});
        auto left = time_left(deadline);
        if (left <= std::chrono::milliseconds::zero()) return handler(errc::timeout, {});
        access::start_exec(node, script_command("EVAL", s->body, keys, args), left,
                           std::move(handler));
      });
}

namespace {

// run_script_direct's body, for keys and arguments in any range of strings.
template <class Keys, class Args>
bool exchange_script_direct(client& node, const script& code, const Keys& keys, const Args& args,
                            std::chrono::milliseconds timeout, std::error_code& ec, reply& out) {
  if (on_io_thread()) return false;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // Written into this thread's reusable command: its buffer was an allocation per request.
  auto* scratch = access::thread_scratch();
  bool sent;
  if (scratch && !std::exchange(scratch->in_use, true)) {
    struct release_scratch {
      access::scratch_command& s;
      ~release_scratch() {
        // A lock set's request over thousands of keys is not kept for the thread's life.
        constexpr std::size_t kept_bytes = 16 * 1024;
        if (s.cmd.bytes().size() > kept_bytes) s.cmd = access::library_command({});
        s.in_use = false;
      }
    } guard{*scratch};
    with_request_words(code, keys, args, [&](auto commands) {
      access::reformat(scratch->cmd, commands);
    });
    sent = access::try_exec_direct_any(node, scratch->cmd, timeout, out, ec);
  } else {
    sent = access::try_exec_direct_any(node, request_command(code, keys, args), timeout, out, ec);
  }
  if (!sent) return false;
  if (!is_noscript(out)) return true;
  auto left = time_left(deadline);
  if (left <= std::chrono::milliseconds::zero()) {
    ec = errc::timeout;
    out = reply{};
    return true;
  }
  command eval = script_command("EVAL", code.body, keys, args);
  if (access::try_exec_direct(node, eval, left, out, ec)) return true;
  // EVALSHA went out, so this call must finish: another thread's request took the connection
  // in between, and EVAL queues behind it.
  out = wait<reply>(ec, [&](auto handler) {
    access::start_exec(node, std::move(eval), left, std::move(handler));
  });
  return true;
}

}  // namespace

bool run_script_direct(client& node, const script& s, const script_keys& keys,
                       std::initializer_list<std::string_view> args,
                       std::chrono::milliseconds timeout, std::error_code& ec, reply& out) {
  return exchange_script_direct(node, s, keys, args, timeout, ec, out);
}

bool run_request_direct(client& node, const request& r, std::error_code& ec, reply& out) {
  return exchange_script_direct(node, *r.code, r.keys, r.args, r.timeout, ec, out);
}

}  // namespace dlock::detail
