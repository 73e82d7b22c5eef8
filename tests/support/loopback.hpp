// SPDX-License-Identifier: Apache-2.0
// tests/support/loopback.hpp: loopback_address, the address of a port on 127.0.0.1, for the
// sockets the tests open themselves (fake peers, proxies, raw connections).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

namespace dlock::test {

// 127.0.0.1:`port`; port 0 lets bind() pick a free one.
inline sockaddr_in loopback_address(unsigned short port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return addr;
}

}  // namespace dlock::test
