// SPDX-License-Identifier: Apache-2.0
#include "dlock/error.hpp"

namespace dlock {
namespace {

class dlock_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "dlock"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::not_acquired: return "held by another owner";
      case errc::quorum_not_reached: return "no quorum: too few nodes answered";
      case errc::lease_expired: return "validity ran out before the operation completed";
      case errc::lease_lost: return "lease lost: the lock is no longer ours on the server";
      case errc::not_held: return "not held";
      case errc::node_unreachable: return "node unreachable";
      case errc::timeout: return "timed out waiting for the server";
      case errc::connection_lost: return "connection lost with the request in flight";
      case errc::protocol_error: return "protocol error: the peer does not speak RESP";
      case errc::auth_failed: return "authentication failed";
      case errc::no_permission: return "no permission (ACL)";
      case errc::wrong_type: return "the key holds a value of another type";
      case errc::read_only: return "the node is a read-only replica";
      case errc::out_of_memory: return "the node is out of memory";
      case errc::script_error: return "Lua script error";
      case errc::server_error: return "server error";
      case errc::invalid_argument: return "invalid argument";
      case errc::would_block_io_thread: return "blocking call on dlock's I/O thread";
      case errc::cancelled: return "cancelled: the wait was stopped or the client shut down";
      case errc::tls_error: return "TLS failure";
      case errc::transaction_aborted: return "transaction aborted: the watched keys kept changing";
      case errc::forked_process:
        return "dlock cannot be used in a child process after fork() (it has no I/O thread and "
               "shares the parent's connections): use it before fork() in the parent, or after "
               "exec()";
      case errc::replication_not_confirmed:
        return "the replication guard: too few replicas acknowledged the write in time, so a "
               "failover could lose it";
      case errc::cluster_error:
        return "Redis Cluster could not route the request: not a cluster node, a slot that no "
               "node serves, or redirects in a loop";
      case errc::not_found:
        return "not found on the server: never created, or expired";
    }
    return "unknown dlock error";
  }
};

}  // namespace

const std::error_category& category() noexcept {
  // Never destroyed: dlock's I/O thread outlives static destruction (see net/runtime.cpp) and
  // may still compare error codes against this category while the process exits.
  static const dlock_category* instance = new dlock_category;
  return *instance;
}

std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), category()}; }

std::string_view to_string(errc e) noexcept {
  switch (e) {
    case errc::not_acquired: return "not_acquired";
    case errc::quorum_not_reached: return "quorum_not_reached";
    case errc::lease_expired: return "lease_expired";
    case errc::lease_lost: return "lease_lost";
    case errc::not_held: return "not_held";
    case errc::node_unreachable: return "node_unreachable";
    case errc::timeout: return "timeout";
    case errc::connection_lost: return "connection_lost";
    case errc::protocol_error: return "protocol_error";
    case errc::auth_failed: return "auth_failed";
    case errc::no_permission: return "no_permission";
    case errc::wrong_type: return "wrong_type";
    case errc::read_only: return "read_only";
    case errc::out_of_memory: return "out_of_memory";
    case errc::script_error: return "script_error";
    case errc::server_error: return "server_error";
    case errc::invalid_argument: return "invalid_argument";
    case errc::would_block_io_thread: return "would_block_io_thread";
    case errc::cancelled: return "cancelled";
    case errc::tls_error: return "tls_error";
    case errc::transaction_aborted: return "transaction_aborted";
    case errc::forked_process: return "forked_process";
    case errc::replication_not_confirmed: return "replication_not_confirmed";
    case errc::cluster_error: return "cluster_error";
    case errc::not_found: return "not_found";
  }
  return "unknown";
}

}  // namespace dlock
