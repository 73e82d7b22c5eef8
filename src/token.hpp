// SPDX-License-Identifier: Apache-2.0
// token.hpp: owner tokens. Private.
#pragma once

#include <string>

namespace dlock::detail {

// 128 bits from OpenSSL's CSPRNG as 32 lowercase hex digits: unique across hosts and
// acquisitions, unguessable (unlike time-based ids such as PHP's uniqid()).
std::string random_token();

}  // namespace dlock::detail
