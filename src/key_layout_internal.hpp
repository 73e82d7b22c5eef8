// key_layout_internal.hpp: what key_layout.cpp shares with the rest of the library. Private.
//   tag_for_slot  a hash tag of four characters ('@'..'O', no braces) that hashes to a slot:
//                 for keys and sharded channels that must land in a given Redis Cluster slot
#pragma once

#include <cstdint>
#include <string>

namespace dlock::detail {

std::string tag_for_slot(std::uint16_t slot);

}  // namespace dlock::detail
