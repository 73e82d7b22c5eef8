// SPDX-License-Identifier: Apache-2.0
// algo/cluster_routing.hpp: where a request goes in a Redis Cluster, without sockets.
//   slot_map        which master serves each of the 16384 slots, read from CLUSTER SHARDS (7.0)
//                   or CLUSTER SLOTS; patched by MOVED between two reads
//   redirect        a MOVED or ASK error reply, parsed
//   retry_later     the replies that mean "not now, the cluster is changing" (TRYAGAIN,
//                   CLUSTERDOWN, LOADING): the command did not run
//   command_slot    the slot a formatted command is routed by (its first key)
// Pure values; not thread-safe (net/cluster.cpp guards its copy).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/endpoint.hpp"
#include "dlock/reply.hpp"

namespace dlock::detail {

inline constexpr std::size_t cluster_slots = 16384;

class slot_map {
 public:
  // From CLUSTER SHARDS: each shard's slot ranges and its master's address (`endpoint`, else
  // `ip`; `tls-port` when `tls`, else `port`). Null with `why` set when the reply is not one.
  static std::optional<slot_map> from_shards(const reply& r, bool tls, std::string& why);
  // From CLUSTER SLOTS (before 7.0): [start, end, [ip, port, id], replicas...] per range.
  static std::optional<slot_map> from_slots(const reply& r, std::string& why);

  // The master serving `slot`, or null when no node does.
  const host_port* owner(std::uint16_t slot) const noexcept;
  // After MOVED: `slot` is served by `node` now.
  void set_owner(std::uint16_t slot, const host_port& node);
  // Every master that serves a slot (and those MOVED named), in the order first seen.
  const std::vector<host_port>& masters() const noexcept { return masters_; }
  // How many slots no node serves.
  std::size_t uncovered() const noexcept;

 private:
  std::size_t index_of(const host_port& node);
  static constexpr std::uint16_t none = 0xffff;
  std::vector<host_port> masters_;
  std::array<std::uint16_t, cluster_slots> owner_{};  // index into masters_, or none
  slot_map() { owner_.fill(none); }
};

struct redirect {
  bool ask = false;  // ASK: this once, ASKING first; MOVED: from now on
  std::uint16_t slot = 0;
  host_port to;
};
// "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381" ([::1]:6381 and ":6381" too: an
// empty host is the node that answered, `from`). Null for any other reply.
std::optional<redirect> parse_redirect(const reply& r, const host_port& from);

// TRYAGAIN (a multi-key command while its slot migrates), CLUSTERDOWN (the cluster is failing
// over or lost coverage), LOADING: the command did not run, and may later.
bool is_retry_later(const reply& r) noexcept;

// The slot of the first key of the first command in `resp` (a command's bytes) that has one:
// argument 1 for most commands, the first of numkeys for EVAL/EVALSHA/FCALL (and _RO), the
// channel for SPUBLISH; null for commands without a key (PING, INFO, SCRIPT LOAD ...), which
// any master may serve.
std::optional<std::uint16_t> command_slot(std::string_view resp);

}  // namespace dlock::detail
