// SPDX-License-Identifier: Apache-2.0
// key_layout_internal.hpp: what key_layout.cpp shares with the rest of the library. Private.
//   tag_for_slot  a hash tag of four characters ('@'..'O', no braces) that hashes to a slot:
//                 for keys and sharded channels that must land in a given Redis Cluster slot
//   slot_groups   keys grouped by their Redis Cluster slot, in ascending slot order: the
//                 global order in which a lock set takes its slots
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlock::detail {

std::string tag_for_slot(std::uint16_t slot);

// Indices into `keys`, one group per slot, groups by ascending slot, each group's indices
// ascending. The same order for every client, so two sets that share slots meet in the first
// slot they share.
std::vector<std::vector<std::size_t>> slot_groups(const std::vector<std::string>& keys);

}  // namespace dlock::detail
