// SPDX-License-Identifier: Apache-2.0
#include "net/cluster.hpp"

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <system_error>

#include "algo/retry.hpp"
#include "dlock/error.hpp"
#include "net/runtime.hpp"

namespace dlock::detail {
namespace {

constexpr std::string_view asking_payload = "*1\r\n$6\r\nASKING\r\n";

reply error_reply(std::string text) {
  return reply::make_string(reply::kind::error, text);
}

bool is_routing_error(const reply& r, const host_port& from) {
  return r.is_error() && (is_retry_later(r) || parse_redirect(r, from));
}

// The redirect or "retry later" that answers the whole request: the one reply, or every
// element of a pipeline's. A pipeline where only some commands were refused had the others
// run, so it must not be sent again: the caller gets it as it is.
const reply* routing_answer(const reply& r, std::size_t replies, const host_port& from) {
  if (replies <= 1) return is_routing_error(r, from) ? &r : nullptr;
  if (!r.is_array() || r.elements().empty()) return nullptr;
  for (const auto& e : r.elements()) {
    if (!is_routing_error(e, from)) return nullptr;
  }
  return &r.elements().front();
}

}  // namespace

void check_cluster_endpoint(const endpoint& where, const client_options& options) {
  auto refuse = [](const std::string& why) {
    throw std::system_error(errc::invalid_argument, "redis-cluster:// " + why);
  };
  if (where.seeds.empty()) refuse("needs at least one seed node");
  for (const auto& s : where.seeds) {
    if (s.host.empty() || s.port == 0) refuse("has a seed without a host or port");
  }
  if (where.db != 0) refuse("has only database 0");
  if (where.is_unix()) refuse("does not take a unix socket");
  if (options.restart_quarantine.count() != 0) {
    refuse("does not support restart_quarantine yet: the node keys it needs sit in one slot");
  }
  if (options.replication_guard.enabled) refuse("does not support the replication guard yet");
  check_blocking_connections(options);
}

cluster_router::cluster_router(endpoint where, client_options options)
    : where_(std::move(where)),
      options_(std::move(options)),
      name_(where_.to_string()),
      executor_(runtime::shared().get_executor()) {
  check_cluster_endpoint(where_, options_);
  // A TLS file that cannot be loaded fails here, in the client's constructor, as for a single
  // node: the connections to the masters are made later, on the I/O thread.
  if (where_.tls) connection probe(node_endpoint(where_.seeds.front()), options_);
}

const host_port* cluster_router::keyless_target() const {
  if (last_keyed_node_) return &*last_keyed_node_;
  return map_->masters().empty() ? nullptr : &map_->masters().front();
}

void cluster_router::patch(std::uint16_t slot, const host_port& owner) {
  std::lock_guard lock(mu_);
  if (map_) map_->set_owner(slot, owner);
  if (reading_map_) patches_since_read_.emplace_back(slot, owner);
}

endpoint cluster_router::node_endpoint(const host_port& node) const {
  endpoint e = where_;
  e.cluster = false;
  e.seeds.clear();
  e.host = node.host;
  e.port = node.port;
  return e;
}

std::shared_ptr<connection> cluster_router::connection_to(const host_port& node,
                                                          std::string& why) {
  for (auto& [at, conn] : connections_) {
    if (at == node) return conn;
  }
  try {
    auto conn = std::make_shared<connection>(node_endpoint(node), options_);
    connections_.emplace_back(node, conn);
    return conn;
  } catch (const std::system_error& e) {
    // Loading the TLS files failed (the constructor checked them once; they may be gone
    // since): this request fails, the I/O thread goes on.
    why = e.what();
    return nullptr;
  }
}

void cluster_router::submit(std::string payload, std::size_t replies, clock::time_point deadline,
                            reply_handler handler) {
  job j{std::move(payload), replies, deadline, std::move(handler), {}, 0, false};
  j.slot = command_slot(j.payload);
  route(std::move(j));
}

void cluster_router::route(job j) {
  if (shut_down_) return fail(j, errc::cancelled, "the client was destroyed");
  j.tried_at = clock::now();
  std::shared_ptr<connection> conn;
  host_port to;
  std::string why;
  bool stale = false;
  {
    std::unique_lock lock(mu_);
    if (!map_ || (j.slot && !map_->owner(*j.slot) && !j.waited_for_map)) {
      // No map yet, or a slot no node serves in the map we have: wait for a fresh one, but
      // not past the request's deadline.
      j.id = ++last_job_id_;
      auto id = j.id;
      auto deadline = j.deadline;
      waiting_for_map_.push_back(std::move(j));
      lock.unlock();
      expire_wait(id, deadline);
      return refresh(true);
    }
    const host_port* owner = j.slot ? map_->owner(*j.slot) : keyless_target();
    if (!owner) {
      lock.unlock();
      return fail(j, errc::cluster_error,
                  j.slot ? "slot " + std::to_string(*j.slot) + " is served by no node"
                         : "the cluster has no master");
    }
    to = *owner;
    if (j.slot) last_keyed_node_ = to;
    conn = connection_to(to, why);
    stale = clock::now() - map_read_at_ > map_max_age;
  }
  if (stale) refresh();
  if (!conn) return fail(j, errc::tls_error, why);
  send(conn, to, std::move(j), false);
}

void cluster_router::send(const std::shared_ptr<connection>& conn, const host_port& to, job j,
                          bool asking) {
  std::string payload = asking ? std::string(asking_payload) + j.payload : j.payload;
  std::size_t replies = j.replies + (asking ? 1 : 0);
  auto deadline = j.deadline;
  conn->submit(std::move(payload), replies, deadline,
               [self = shared_from_this(), to, j = std::move(j), asking](std::error_code ec,
                                                                          reply r) mutable {
                 self->on_answer(to, std::move(j), asking, ec, std::move(r));
               });
}

void cluster_router::on_answer(const host_port& from, job j, bool asking, std::error_code ec,
                               reply r) {
  if (asking && !ec && r.is_array() && !r.elements().empty()) {
    // Drop ASKING's +OK: the caller gets the replies of its own commands.
    std::vector<reply> own(r.elements().begin() + 1, r.elements().end());
    r = j.replies == 1 ? std::move(own.front()) : reply::make_array(std::move(own));
    ec = r.is_error() ? error_from_reply(r) : std::error_code{};
  }
  // The server's "not here" and "not now" first: TRYAGAIN maps to node_unreachable too.
  const reply* answer = routing_answer(r, j.replies, from);
  if (!answer) {
    if (ec == errc::connection_lost || ec == errc::node_unreachable || ec == errc::timeout) {
      // The master may have failed over: the next requests go by a fresh map. This one may
      // have run (timeout, connection_lost), so it is not resent: its caller decides.
      refresh();
    }
    return std::exchange(j.handler, {})(ec, std::move(r));
  }
  if (is_retry_later(*answer)) {
    ++retried_later_;
    // Another try only while it can come back before the deadline (twice what this one took):
    // the caller is better served by the refusal than by a timeout, which says the command may
    // have run (a lease's script falls back to one key at a time on TRYAGAIN only).
    auto now = clock::now();
    auto reserve = std::max<clock::duration>(2 * (now - j.tried_at), retry_later_delay);
    if (now + retry_later_delay + reserve < j.deadline) return retry_later(std::move(j));
    return std::exchange(j.handler, {})(ec, std::move(r));
  }
  auto moved = parse_redirect(*answer, from);
  // MOVED and ASK both mean the command did not run: sending it elsewhere is safe. Only MOVED
  // counts towards a loop: ASK then TRYAGAIN, again and again, is a migration under way (the
  // deadline bounds it), and a loop through ASK has a MOVED in it.
  if (!moved->ask && ++j.redirects > max_redirects) {
    return fail(j, errc::cluster_error,
                "redirected " + std::to_string(max_redirects) + " times (last: " + answer->str() +
                    "): the nodes disagree on who serves slot " + std::to_string(moved->slot));
  }
  if (moved->ask) {
    ++ask_;
    if (j.replies > 1) {
      return fail(j, errc::cluster_error,
                  "ASK for a pipelined request: its slot is migrating; try again");
    }
    std::shared_ptr<connection> conn;
    std::string why;
    {
      std::lock_guard lock(mu_);
      conn = connection_to(moved->to, why);
    }
    if (!conn) return fail(j, errc::tls_error, why);
    return send(conn, moved->to, std::move(j), true);
  }
  ++moved_;
  patch(moved->slot, moved->to);
  refresh();
  // The slot is the one the node named, whatever ours was (a command whose first key we
  // guessed wrong): resend by the patched map.
  j.slot = moved->slot;
  route(std::move(j));
}

void cluster_router::expire_wait(std::uint64_t id, clock::time_point deadline) {
  auto timer = std::make_shared<asio::steady_timer>(executor_, deadline);
  timer->async_wait([weak = weak_from_this(), timer, id](std::error_code) {
    auto self = weak.lock();
    if (!self) return;
    std::optional<job> expired;
    {
      std::lock_guard lock(self->mu_);
      auto& w = self->waiting_for_map_;
      auto it = std::find_if(w.begin(), w.end(), [&](const job& j) { return j.id == id; });
      if (it == w.end()) return;
      expired = std::move(*it);
      w.erase(it);
    }
    self->fail(*expired, errc::node_unreachable,
               "no slot map from the cluster within the request's deadline");
  });
}

void cluster_router::retry_later(job j) {
  auto timer = std::make_shared<asio::steady_timer>(executor_, retry_later_delay);
  timer->async_wait([self = shared_from_this(), timer, j = std::move(j)](std::error_code) mutable {
    self->route(std::move(j));
  });
}

void cluster_router::fail(job& j, std::error_code ec, std::string text) {
  auto handler = std::exchange(j.handler, {});
  if (!handler) return;
  if (on_io_thread()) return handler(ec, error_reply(std::move(text)));
  // Handlers run on the I/O thread, never inside the caller's submit().
  asio::post(executor_, [h = std::move(handler), ec, text = std::move(text)]() mutable {
    h(ec, error_reply(std::move(text)));
  });
}

void cluster_router::refresh(bool now) {
  auto read = std::make_shared<map_read>();
  {
    std::lock_guard lock(mu_);
    if (reading_map_) {
      // After this read, another: what asked for it may have seen a change the read missed.
      read_again_ = true;
      return;
    }
    if (!now && clock::now() - map_read_at_ < min_map_interval) return;
    reading_map_ = true;
    patches_since_read_.clear();
    // The masters we know first (the seeds may be gone since), then the seeds.
    if (map_) read->candidates = map_->masters();
    for (const auto& s : where_.seeds) {
      if (std::find(read->candidates.begin(), read->candidates.end(), s) ==
          read->candidates.end()) {
        read->candidates.push_back(s);
      }
    }
  }
  asio::post(executor_, [self = shared_from_this(), read] { self->read_map_from(read); });
}

// Asks the candidates in turn for CLUSTER INFO and CLUSTER SHARDS (CLUSTER SLOTS before 7.0).
// A node that says cluster_state:fail may be cut off from the majority with an old view: its
// map is kept only in case no node says ok.
void cluster_router::read_map_from(std::shared_ptr<map_read> read) {
  if (shut_down_) return map_failed(errc::cancelled, "the client was destroyed");
  if (read->next >= read->candidates.size()) {
    if (read->fallback) return install(std::move(*read->fallback));
    std::string text = "no node answered with the cluster's slot map:";
    for (const auto& f : read->failures) text += " " + f + ";";
    text.pop_back();
    bool not_cluster = std::all_of(read->failures.begin(), read->failures.end(), [](auto& f) {
      return f.find("not a cluster node") != std::string::npos;
    });
    // Every seed refused us the same way that waiting cannot cure (a CA that does not sign
    // their certificates, a wrong password, an ACL): that error, not "unreachable".
    const auto& codes = read->codes;
    bool same_incurable =
        !codes.empty() && codes.size() == read->failures.size() &&
        std::all_of(codes.begin(), codes.end(), [&](auto& c) { return c == codes.front(); }) &&
        !is_retryable(codes.front());
    return map_failed(not_cluster      ? std::error_code(errc::cluster_error)
                      : same_incurable ? codes.front()
                                       : std::error_code(errc::node_unreachable),
                      std::move(text));
  }
  host_port node = read->candidates[read->next++];
  std::string why;
  std::shared_ptr<connection> conn;
  {
    std::lock_guard lock(mu_);
    conn = connection_to(node, why);
  }
  auto next_candidate = [self = shared_from_this(), read, node](std::string why,
                                                                std::error_code code = {}) {
    read->failures.push_back(node.to_string() + ": " + why);
    if (code) read->codes.push_back(code);
    self->read_map_from(read);
  };
  if (!conn) return next_candidate(why);
  ++map_reads_;
  auto deadline = clock::now() + options_.request_timeout;
  command ask{"CLUSTER", "INFO"};
  ask.then({"CLUSTER", "SHARDS"});
  conn->submit(ask.bytes(), 2, deadline,
               [self = shared_from_this(), conn, read, next_candidate, deadline](
                   std::error_code ec, reply r) mutable {
                 if (ec || !r.is_array() || r.elements().size() != 2) {
                   return next_candidate(r.is_error() ? r.str() : ec.message(),
                                         ec ? ec : error_from_reply(r));
                 }
                 const reply& info = r.elements()[0];
                 const reply& shards = r.elements()[1];
                 if (info.is_error() &&
                     info.str().find("cluster support disabled") != std::string::npos) {
                   return next_candidate("not a cluster node (" + info.str() + ")");
                 }
                 // An error (an ACL without cluster|info): the state is unknown, the map is used.
                 bool ok = info.is_error() ||
                           info.str().find("cluster_state:ok") != std::string::npos;
                 auto take = [&](slot_map map) {
                   if (ok) return self->install(std::move(map));
                   if (!read->fallback) read->fallback = std::move(map);
                   next_candidate("cluster_state is not ok there");
                 };
                 std::string why;
                 if (!shards.is_error()) {
                   if (auto map = slot_map::from_shards(shards, self->where_.tls, why)) {
                     return take(std::move(*map));
                   }
                   return next_candidate(why);
                 }
                 // Before 7.0 ("Unknown subcommand", or an ACL without cluster|shards):
                 // CLUSTER SLOTS.
                 command slots{"CLUSTER", "SLOTS"};
                 conn->submit(slots.bytes(), 1, deadline,
                              [self, read, next_candidate, ok](std::error_code ec2,
                                                               reply r2) mutable {
                                std::string why2;
                                if (!ec2) {
                                  if (auto map = slot_map::from_slots(r2, why2)) {
                                    if (ok) return self->install(std::move(*map));
                                    if (!read->fallback) read->fallback = std::move(*map);
                                    return next_candidate("cluster_state is not ok there");
                                  }
                                } else {
                                  why2 = r2.is_error() ? r2.str() : ec2.message();
                                }
                                next_candidate(why2, ec2 ? ec2 : error_from_reply(r2));
                              });
               });
}

void cluster_router::install(slot_map map) {
  std::vector<job> ready;
  bool again = false;
  {
    std::lock_guard lock(mu_);
    // A MOVED that came while the map was read may be newer than what the read saw.
    for (const auto& [slot, owner] : patches_since_read_) map.set_owner(slot, owner);
    again = !patches_since_read_.empty() || std::exchange(read_again_, false);
    read_again_ = false;
    patches_since_read_.clear();
    map_ = std::move(map);
    map_read_at_ = clock::now();
    reading_map_ = false;
    ready.swap(waiting_for_map_);
  }
  for (auto& j : ready) {
    j.waited_for_map = true;
    route(std::move(j));
  }
  if (!again) return;
  // Another read, once min_map_interval has passed since this one.
  auto timer = std::make_shared<asio::steady_timer>(executor_, min_map_interval);
  timer->async_wait([weak = weak_from_this(), timer](std::error_code) {
    if (auto self = weak.lock()) self->refresh(true);
  });
}

void cluster_router::map_failed(std::error_code ec, std::string text) {
  std::vector<job> failed;
  {
    std::lock_guard lock(mu_);
    reading_map_ = false;
    read_again_ = false;
    patches_since_read_.clear();
    map_read_at_ = clock::now();
    failed.swap(waiting_for_map_);
  }
  for (auto& j : failed) fail(j, ec, text);
}

bool cluster_router::try_exchange_direct(std::string_view payload, std::size_t replies,
                                         clock::time_point deadline, std::error_code& ec,
                                         reply& out) {
  std::shared_ptr<connection> conn;
  host_port to;
  auto slot = command_slot(payload);
  {
    std::lock_guard lock(mu_);
    if (!map_ || clock::now() - map_read_at_ > map_max_age) return false;
    const host_port* owner = slot ? map_->owner(*slot) : keyless_target();
    if (!owner) return false;
    to = *owner;
    if (slot) last_keyed_node_ = to;
    std::string why;
    conn = connection_to(to, why);
    if (!conn) return false;
  }
  if (!conn->try_exchange_direct(payload, replies, deadline, ec, out)) return false;
  const reply* answer = routing_answer(out, replies, to);
  if (!answer) return true;
  if (auto moved = parse_redirect(*answer, to); moved && !moved->ask) {
    ++moved_;
    patch(moved->slot, moved->to);
  }
  // It did not run: submit() follows the redirect or waits.
  out = reply{};
  ec = {};
  return false;
}

void cluster_router::shut_down() {
  shut_down_ = true;
  close(errc::cancelled);
}

void cluster_router::close(std::error_code reason) {
  std::vector<std::shared_ptr<connection>> conns;
  std::vector<job> waiting;
  {
    std::lock_guard lock(mu_);
    for (auto& [at, conn] : connections_) conns.push_back(conn);
    waiting.swap(waiting_for_map_);
  }
  for (auto& c : conns) c->close(reason);
  for (auto& j : waiting) fail(j, reason, reason.message());
}

std::optional<slot_map> cluster_router::current_map(std::error_code& ec) {
  ec = {};
  {
    std::lock_guard lock(mu_);
    if (map_) return map_;
  }
  // A keyless command waits for the first read of the map. Its own answer does not matter: the
  // master it went to may be down while the map is read well.
  std::error_code ping_ec;
  (void)wait<reply>(ping_ec, [&](auto handler) {
    command ping{"PING"};
    submit(ping.bytes(), 1, clock::now() + options_.request_timeout, std::move(handler));
  });
  std::lock_guard lock(mu_);
  if (!map_) ec = ping_ec ? ping_ec : std::error_code(errc::cluster_error);
  return map_;
}

std::optional<host_port> cluster_router::owner_of(std::uint16_t slot, std::error_code& ec) {
  auto map = current_map(ec);
  if (ec) return std::nullopt;
  if (const auto* owner = map->owner(slot)) return *owner;
  ec = errc::cluster_error;
  return std::nullopt;
}

std::optional<host_port> cluster_router::known_owner(std::uint16_t slot, bool read_now) {
  {
    std::lock_guard lock(mu_);
    if (map_ && map_->owner(slot)) return *map_->owner(slot);
  }
  refresh(read_now);
  return std::nullopt;
}

cluster_router::counters cluster_router::stats() const noexcept {
  return {moved_.load(), ask_.load(), retried_later_.load(), map_reads_.load()};
}

}  // namespace dlock::detail
