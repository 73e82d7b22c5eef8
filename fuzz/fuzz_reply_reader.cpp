// SPDX-License-Identifier: Apache-2.0
// fuzz_reply_reader: arbitrary bytes from a "server" into resp/reply_reader, as the connection
// feeds it: in reads of any size, taking every complete reply after each read, until the
// stream is found not to be RESP. The first byte picks the read size (0: all at once), so
// replies cut at every possible point are covered.
// Checks: no crash, no sanitizer report, no allocation beyond libFuzzer's limit (an array
// header alone once made hiredis calloc gigabytes: regressions/fuzz_reply_reader/), each input
// fast; a protocol error is final.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "dlock/client.hpp"
#include "dlock/reply.hpp"
#include "resp/reply_reader.hpp"

namespace {

// Reads every part of a reply, as the library's users would.
std::size_t walk(const dlock::reply& r) {
  std::size_t n = r.str().size() + static_cast<std::size_t>(r.integer() & 1);
  (void)dlock::error_from_reply(r);
  for (const auto& e : r.elements()) n += walk(e);
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::size_t step = data[0] % 32;
  std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (step == 0) step = stream.size() + 1;

  dlock::detail::reply_reader reader;
  std::error_code ec;
  for (std::size_t at = 0; at < stream.size(); at += step) {
    reader.feed(stream.substr(at, step));
    while (auto r = reader.next(ec)) {
      walk(*r);
      (void)r->to_string();
    }
    if (ec) {
      // Once the stream is not RESP the reader stays unusable: more bytes change nothing.
      reader.feed("+OK\r\n");
      std::error_code again;
      if (reader.next(again) || !again) std::abort();
      break;
    }
  }
  return 0;
}
