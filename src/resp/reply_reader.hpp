// SPDX-License-Identifier: Apache-2.0
// resp/reply_reader.hpp: incremental RESP2 decoding with hiredis's reader. Private.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <system_error>
#include <vector>

#include "dlock/reply.hpp"

struct redisReader;
struct redisReadTask;

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
  // hiredis parses; these build the dlock::reply as it goes (its object functions), with no
  // redisReply in between. An array's elements gather in its nesting level's list until the
  // last one came; hiredis 0.14 nests at most 8 deep (a deeper reply is refused here too).
  struct level {
    std::vector<reply> elements;
    std::size_t expected = 0;
  };
  static reply_reader& of(const redisReadTask* task) noexcept;
  std::size_t depth_of(const redisReadTask* array) const noexcept;
  void* place(const redisReadTask* task, reply r);
  template <class Build>
  static void* guarded(Build build) noexcept;
  static void* create_string(const redisReadTask* task, char* text, std::size_t length);
  static void* create_array(const redisReadTask* task, int elements);
  static void* create_integer(const redisReadTask* task, long long value);
  static void* create_nil(const redisReadTask* task);
  static void free_object(void* object);

  redisReader* reader_;
  std::array<level, 9> levels_{};
  reply root_;
};

}  // namespace dlock::detail
