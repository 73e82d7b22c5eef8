// Formats commands with hiredis's formatter, so the wire bytes are hiredis's own.
#include <hiredis/hiredis.h>

#include <stdexcept>
#include <vector>

#include "dlock/client.hpp"

namespace dlock {
namespace {

template <class Range>
void append_formatted(std::string& out, const Range& args) {
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
