// SPDX-License-Identifier: Apache-2.0
// resp/reply_reader.hpp: incremental RESP2 decoding with hiredis's reader. Private.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <system_error>

#include "dlock/reply.hpp"

struct redisReader;

namespace dlock::detail {

class reply_reader {
 public:
  reply_reader();
  ~reply_reader();
  reply_reader(const reply_reader&) = delete;
  reply_reader& operator=(const reply_reader&) = delete;

  // Appends bytes received from the server.
  void feed(std::string_view bytes);
  // The next complete reply, nullopt when more bytes are needed; sets ec
  // (errc::protocol_error) when the stream is not RESP or announces an array of more than
  // 2^24 elements, after which the reader is unusable (feed() ignores further bytes).
  std::optional<reply> next(std::error_code& ec);

 private:
  redisReader* reader_;
};

}  // namespace dlock::detail
