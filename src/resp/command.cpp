// Formats commands with hiredis's formatter, so the wire bytes are hiredis's own.
#include <hiredis/hiredis.h>

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
  std::vector<const char*> argv;
  std::vector<std::size_t> argvlen;
  argv.reserve(args.size());
  argvlen.reserve(args.size());
  for (const auto& a : args) {
    argv.push_back(a.data());
    argvlen.push_back(a.size());
  }
  char* formatted = nullptr;
  long long len = redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), argv.data(),
                                         argvlen.data());
  if (len < 0 || formatted == nullptr) throw std::bad_alloc();
  out.append(formatted, static_cast<std::size_t>(len));
  redisFreeCommand(formatted);
}

}  // namespace

command::command(std::initializer_list<std::string_view> args) { then(args); }
command::command(std::span<const std::string> args) { then(args); }
command::command(std::span<const std::string_view> args) {
  append_formatted(bytes_, args);
  ++count_;
}

command& command::then(std::initializer_list<std::string_view> args) {
  append_formatted(bytes_, args);
  ++count_;
  return *this;
}

command& command::then(std::span<const std::string> args) {
  append_formatted(bytes_, args);
  ++count_;
  return *this;
}

}  // namespace dlock
