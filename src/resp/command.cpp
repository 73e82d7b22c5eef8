// Formats commands as RESP multibulks (the wire format hiredis's formatter also produces).
#include <charconv>
#include <cctype>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "dlock/client.hpp"

namespace dlock {
namespace {

bool equals_nocase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
  }
  return true;
}

// Commands that do not answer exactly once (pub/sub, MONITOR, replication, CLIENT REPLY): on a
// shared pipelined connection they would shift every later reply onto the wrong request.
template <class Range>
bool breaks_reply_pairing(const Range& args) {
  auto it = args.begin();
  std::string_view verb(it->data(), it->size());
  for (std::string_view v : {"subscribe", "psubscribe", "ssubscribe", "unsubscribe",
                             "punsubscribe", "sunsubscribe", "monitor", "sync", "psync"}) {
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
  for (std::string_view v : {"select", "reset", "auth", "hello", "multi", "exec", "discard",
                             "watch", "unwatch", "readonly", "readwrite", "asking", "quit"}) {
    if (equals_nocase(verb, v)) return true;
  }
  if (equals_nocase(verb, "client") && args.size() > 1) {
    ++it;
    std::string_view sub(it->data(), it->size());
    for (std::string_view v : {"tracking", "caching", "setname", "setinfo", "no-evict",
                               "no-touch"}) {
      if (equals_nocase(sub, v)) return true;
    }
  }
  return false;
}

// "<type><decimal>\r\n"
void append_header(std::string& out, char type, std::size_t n) {
  char buf[24];
  buf[0] = type;
  auto [end, ec] = std::to_chars(buf + 1, buf + sizeof(buf) - 2, n);
  (void)ec;  // 20 digits always fit
  *end++ = '\r';
  *end++ = '\n';
  out.append(buf, static_cast<std::size_t>(end - buf));
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
  // RESP multibulk, written directly: hiredis's redisFormatCommandArgv prints each length
  // with sprintf, which was a third of a lock cycle's client CPU (callgrind). The bytes are
  // the same as hiredis's; tests/unit/command_test.cpp checks that against hiredis itself.
  std::size_t size = 16;
  for (const auto& a : args) size += a.size() + 24;
  out.reserve(out.size() + size);
  append_header(out, '*', args.size());
  for (const auto& a : args) {
    append_header(out, '$', a.size());
    out.append(a.data(), a.size());
    out.append("\r\n", 2);
  }
}

}  // namespace

command::command(std::initializer_list<std::string_view> args) { then(args); }
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
