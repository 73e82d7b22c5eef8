// SPDX-License-Identifier: Apache-2.0
#include "dlock/reply.hpp"

#include "dlock/error.hpp"

namespace dlock {

reply reply::make_integer(std::int64_t v) {
  reply r;
  r.kind_ = kind::integer;
  r.integer_ = v;
  return r;
}

reply reply::make_string(kind k, std::string_view text) {
  reply r;
  r.kind_ = k;
  r.text_ = text;
  return r;
}

reply reply::make_array(std::vector<reply> elements) {
  reply r;
  r.kind_ = kind::array;
  r.elements_ = std::move(elements);
  return r;
}

std::string reply::to_string() const {
  switch (kind_) {
    case kind::nil: return "(nil)";
    case kind::integer: return "(integer) " + std::to_string(integer_);
    case kind::string: return '"' + text_ + '"';
    case kind::status: return text_;
    case kind::error: return "(error) " + text_;
    case kind::array: {
      std::string out = "[";
      for (std::size_t i = 0; i < elements_.size(); ++i) {
        if (i) out += ", ";
        out += elements_[i].to_string();
      }
      return out + "]";
    }
  }
  return {};
}

std::error_code error_from_reply(const reply& r) noexcept {
  if (!r.is_error()) return {};
  std::string_view text = r.str();
  auto starts = [&](std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; };
  if (starts("WRONGTYPE")) return errc::wrong_type;
  // From inside a script Redis 7 says "ERR The user executing the script can't run this
  // command ..." (or "... access at least one of the keys ...", "... publish to the channel ...").
  if (starts("NOPERM") || starts("ERR The user executing the script can't"))
    return errc::no_permission;
  // A server that needs a password refuses a client that sent none with NOAUTH, or, when the
  // first command is a long one (a script with its keys), with "ERR Protocol error:
  // unauthenticated multibulk length" (or "... bulk length") before closing the connection.
  if (starts("NOAUTH") || starts("WRONGPASS") || starts("ERR Protocol error: unauthenticated"))
    return errc::auth_failed;
  if (starts("READONLY")) return errc::read_only;
  // A node restarting with persistence refuses every command while it loads its AOF/RDB: the
  // command did not run and the node will serve again, as after a refused connect. As
  // server_error it would stop lock() and acquire_until() (not retryable) and make the
  // Lockable calls throw during a routine restart.
  if (starts("LOADING")) return errc::node_unreachable;
  // Redis Cluster, while it fails over or loses a master (CLUSTERDOWN), or while a multi-key
  // command's slot migrates (TRYAGAIN): the command did not run and may later.
  if (starts("CLUSTERDOWN") || starts("TRYAGAIN")) return errc::node_unreachable;
  // A script whose slot began migrating: a key it deleted (or emptied) now belongs to the
  // importing node, so touching it again failed midway. dlock's scripts make every write that
  // matters before they tell anyone (release.lua), so the retry a migration needs is safe.
  if (starts("ERR Script attempted to access a non local key") ||
      starts("ERR Lua script attempted to access a non local key")) {  // the latter: Redis 6
    return errc::node_unreachable;
  }
  // A server at maxclients answers this to a new connection and closes it: an outage of that
  // node that ends when a client leaves, not a verdict on the command.
  if (starts("ERR max number of clients reached")) return errc::node_unreachable;
  if (starts("OOM")) return errc::out_of_memory;
  if (starts("ERR AUTH") || starts("ERR invalid password") || starts("ERR Client sent AUTH"))
    return errc::auth_failed;
  if (starts("NOSCRIPT") || starts("ERR Error running script") || starts("ERR user_script") ||
      starts("ERR Error compiling script"))
    return errc::script_error;
  return errc::server_error;
}

}  // namespace dlock
