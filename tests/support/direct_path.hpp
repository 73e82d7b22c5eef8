// SPDX-License-Identifier: Apache-2.0
// tests/support/direct_path.hpp: for tests of a connection's direct path (net/connection.hpp).
//   direct_count  how many direct exchanges this process made (connection.hpp's counter)
//   until_direct  waits until a blocking call on `c` takes the direct path
#pragma once

#include <chrono>
#include <cstdint>
#include <system_error>

#include "dlock/client.hpp"
#include "net/connection.hpp"
#include "support/checks.hpp"

namespace dlock::test {

inline std::uint64_t direct_count() { return detail::direct_exchange_count(); }

// After a request completed on the I/O thread, that thread gives the socket up a moment after
// the handler ran; a blocking call made in between queues. Blocks until a blocking call is
// taken directly (each try is a PING), or gives up after scaled(limit).
inline bool until_direct(client& c,
                         std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  return test::eventually(
      [&] {
        auto before = direct_count();
        std::error_code ec;
        c.exec({"PING"}, ec);
        return !ec && direct_count() > before;
      },
      limit);
}

}  // namespace dlock::test
