// SPDX-License-Identifier: Apache-2.0
// Formats commands as RESP multibulks (the wire format hiredis's formatter also produces).
#include <array>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "dlock/client.hpp"

namespace dlock {
namespace {

bool equals_nocase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');  // ASCII: no locale call
    if (c != b[i]) return false;
  }
  return true;
}

// Commands that do not answer exactly once (pub/sub, MONITOR, replication, CLIENT REPLY): on a
// shared pipelined connection they would shift every later reply onto the wrong request.
template <class Range>
bool breaks_reply_pairing(const Range& args) {
  auto it = args.begin();
  std::string_view verb(it->data(), it->size());
  // Arrays of string_view constants: an initializer list of literals here cost a strlen per
  // name on every command (callgrind: 20 per command).
  static constexpr std::array<std::string_view, 9> verbs{
      "subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe",
      "monitor", "sync", "psync"};
  for (std::string_view v : verbs) {
    if (equals_nocase(verb, v)) return true;
  }
  if (equals_nocase(verb, "client") && args.size() > 1) {
    ++it;
    return equals_nocase(std::string_view(it->data(), it->size()), "reply");
  }
  return false;
}

// Commands that change the state of the connection they run on (database, user, protocol,
// name, transaction, tracking, cluster read mode, or the connection itself): on the shared
// connection of a client, every lock and request after them would silently run in another
// database or as another user, or be queued inside someone's MULTI.
template <class Range>
bool changes_connection_state(const Range& args) {
  auto it = args.begin();
  std::string_view verb(it->data(), it->size());
  static constexpr std::array<std::string_view, 13> verbs{
      "select", "reset", "auth", "hello", "multi", "exec", "discard", "watch", "unwatch",
      "readonly", "readwrite", "asking", "quit"};
  for (std::string_view v : verbs) {
    if (equals_nocase(verb, v)) return true;
  }
  if (equals_nocase(verb, "client") && args.size() > 1) {
    ++it;
    std::string_view sub(it->data(), it->size());
    static constexpr std::array<std::string_view, 6> subcommands{
        "tracking", "caching", "setname", "setinfo", "no-evict", "no-touch"};
    for (std::string_view v : subcommands) {
      if (equals_nocase(sub, v)) return true;
    }
  }
  return false;
}

std::size_t decimal_digits(std::size_t n) noexcept {
  if (n < 10) return 1;
  if (n < 100) return 2;
  std::size_t digits = 3;
  for (n /= 1000; n > 0; n /= 10) ++digits;
  return digits;
}

// "<type><decimal>\r\n" at `out`, which has room; returns the end. Nearly every length and
// count a lock writes has one or two digits: written at once, they halved the formatting's
// cost per word (callgrind).
char* write_header(char* out, char type, std::size_t n) noexcept {
  *out++ = type;
  if (n < 10) {
    *out++ = static_cast<char>('0' + n);
  } else if (n < 100) {
    *out++ = static_cast<char>('0' + n / 10);
    *out++ = static_cast<char>('0' + n % 10);
  } else {
    out = std::to_chars(out, out + decimal_digits(n), n).ptr;  // the room was measured
  }
  out[0] = '\r';
  out[1] = '\n';
  return out + 2;
}

// RESP multibulk, written directly: hiredis's redisFormatCommandArgv prints each length with
// sprintf, which was a third of a lock cycle's client CPU (callgrind). The bytes are the same
// as hiredis's; tests/unit/command_test.cpp checks that against hiredis itself. The exact size
// first, then one resize and plain stores: appending piece by piece checked the capacity 3
// times per argument, a sixth of a cycle's formatting.
template <class Range>
std::size_t formatted_size(const Range& args) noexcept {
  std::size_t size = 3 + decimal_digits(args.size());
  for (const auto& a : args) size += 5 + decimal_digits(a.size()) + a.size();
  return size;
}

// Writes `args` at `p`, which has formatted_size(args) bytes of room; returns the end.
template <class Range>
char* write_formatted(char* p, const Range& args) noexcept {
  p = write_header(p, '*', args.size());
  for (const auto& a : args) {
    p = write_header(p, '$', a.size());
    if (a.size() != 0) std::memcpy(p, a.data(), a.size());
    p += a.size();
    p[0] = '\r';
    p[1] = '\n';
    p += 2;
  }
  return p;
}

template <class Range>
void append_formatted(std::string& out, const Range& args) {
  // Redis answers nothing to an empty multibulk, so an empty command would take the reply of
  // the request after it.
  if (args.size() == 0) {
    throw std::system_error(make_error_code(errc::invalid_argument), "empty Redis command");
  }
  if (breaks_reply_pairing(args)) {
    throw std::system_error(make_error_code(errc::invalid_argument),
                            "pub/sub, MONITOR, SYNC and CLIENT REPLY need a connection of their own");
  }
  std::size_t start = out.size();
  out.resize(start + formatted_size(args));
  write_formatted(out.data() + start, args);
}

}  // namespace

command::command(std::initializer_list<std::string_view> args) { then(args); }
command::command(library_words, std::span<const std::span<const std::string_view>> commands) {
  reformat(library_words{}, commands);
}

void command::reformat(library_words, std::span<const std::span<const std::string_view>> commands) {
  std::size_t size = 0;
  for (const auto& words : commands) size += formatted_size(words);
  // Grown (zero-filled) only past the longest request yet, then cut to size, which fills
  // nothing: a reused command is written over without clearing it first.
  if (bytes_.size() < size) bytes_.resize(size);
  char* p = bytes_.data();
  for (const auto& words : commands) p = write_formatted(p, words);
  bytes_.resize(size);
  count_ = commands.size();
  changes_session_ = false;
}
command::command(std::span<const std::string> args) { then(args); }
command::command(std::span<const std::string_view> args) {
  append_formatted(bytes_, args);
  changes_session_ = changes_connection_state(args);
  ++count_;
}

command& command::then(std::initializer_list<std::string_view> args) {
  append_formatted(bytes_, args);
  changes_session_ = changes_session_ || changes_connection_state(args);
  ++count_;
  return *this;
}

command& command::then(std::span<const std::string> args) {
  append_formatted(bytes_, args);
  changes_session_ = changes_session_ || changes_connection_state(args);
  ++count_;
  return *this;
}

}  // namespace dlock
