// SPDX-License-Identifier: Apache-2.0
#include "dlock/fencing.hpp"

#include "dlock/key_layout.hpp"
#include "script.hpp"

namespace dlock {

bool fenced_set(client& redis, std::string_view key, std::string_view value, std::uint64_t token,
                std::error_code& ec) {
  std::string data_key(key);
  std::string high_key = high_fence_key(data_key);
  std::string token_text = std::to_string(token);
  reply r = detail::wait<reply>(ec, [&](auto handler) {
    detail::run_script(redis, detail::fenced_set_script, {data_key, high_key}, {token_text, value},
                       redis.options().request_timeout, std::move(handler));
  });
  return !ec && r.is_integer() && r.integer() == 1;
}

}  // namespace dlock
