// SPDX-License-Identifier: Apache-2.0
// The connection's life: idle -> connecting (resolve, connect, [TLS handshake], AUTH/SELECT)
// -> ready -> idle.
//
// Requests wait in `pending_` until written, then sit in `inflight_` until their replies come
// back in order; RESP has no request ids, so order is the only thing that pairs a reply with
// its request. That is why a written request that misses its deadline closes the connection:
// its reply may still arrive, and dropping the request from the queue would hand that reply to
// the next one. Closing fails every in-flight request (outcome unknown), and queued requests,
// never written, go out on a fresh connection.
//
// Blocking calls may do their round trip on the caller's thread instead (the direct path, in
// net/connection_direct.cpp); that is why a plain connection arms its read only while requests
// are in flight, and why the socket changes hands through `driver_` (see the header).
//
// TLS (rediss://) puts an asio::ssl::stream over the socket. OpenSSL checks the chain against
// the CA, and the host name as well because we ask it to (SSL_set1_host, or the address for an
// IP literal): hiredis and redis-cli leave the name out, so there any certificate the CA ever
// issued, for any host, could impersonate the server. In TLS 1.3 the server judges our client
// certificate only after our side of the handshake has finished, so a refusal shows at the
// first read. A TLS connection therefore counts as ready only once the server has answered
// (the AUTH/SELECT replies, or a PING sent for that purpose): a refused certificate stays a
// failed connect, with the requests unsent and errc::tls_error, not a lost connection.
#include "net/connection.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <asio/connect.hpp>
#include <asio/dispatch.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/ssl.hpp>
#include <asio/write.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <vector>

#include "dlock/detail/scripts.hpp"
#include "dlock/key_layout.hpp"
#include "net/runtime.hpp"
#include "net/sentinel.hpp"
#include "observe.hpp"
#include "net/socket_link.hpp"

namespace dlock::detail {
namespace {

[[noreturn]] void throw_tls(const std::string& what, std::error_code ec) {
  throw std::system_error(errc::tls_error, what + ": " + ec.message());
}

// One context per connection, loaded once: the files are read here, never on the I/O thread.
std::shared_ptr<asio::ssl::context> make_tls_context(const tls_options& o) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  ctx->set_verify_mode(asio::ssl::verify_peer);
  // An encrypted key would make OpenSSL prompt on the terminal; fail to load it instead.
  ctx->set_password_callback(
      [](std::size_t, asio::ssl::context::password_purpose) { return std::string(); });
  std::error_code ec;
  if (o.ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
    if (ec) throw_tls("cannot load the system's CA certificates", ec);
  } else {
    ctx->load_verify_file(o.ca_file, ec);
    if (ec) throw_tls("cannot load TLS CA file " + o.ca_file, ec);
  }
  if (o.cert_file.empty()) {
    if (!o.key_file.empty()) {
      throw std::system_error(errc::invalid_argument, "tls.key_file given without tls.cert_file");
    }
    return ctx;
  }
  ctx->use_certificate_chain_file(o.cert_file, ec);
  if (ec) throw_tls("cannot load TLS certificate " + o.cert_file, ec);
  const std::string& key = o.key_file.empty() ? o.cert_file : o.key_file;
  ctx->use_private_key_file(key, asio::ssl::context::pem, ec);
  if (ec) throw_tls("cannot load TLS private key " + key + " (it must be unencrypted PEM)", ec);
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ERR_clear_error();
    throw std::system_error(
        errc::tls_error, "TLS private key " + key + " does not match certificate " + o.cert_file);
  }
  return ctx;
}

bool is_ip_literal(const std::string& name) {
  std::error_code ec;
  asio::ip::make_address(name, ec);
  return !ec;
}

// What to add to OpenSSL's reason so the user knows what to change.
const char* tls_hint(std::error_code ec) {
  if (ec == asio::ssl::error::stream_truncated) {
    return " (the server closed the connection during the TLS handshake)";
  }
  if (ec.category() != asio::error::get_ssl_category()) return "";
  switch (ERR_GET_REASON(static_cast<unsigned long>(ec.value()))) {
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
      return " (the port does not speak TLS? use redis:// for a plain port)";
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
      return " (the server requires a client certificate: set tls.cert_file and tls.key_file)";
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
      return " (the server refused our client certificate)";
    default:
      return "";
  }
}

// How soon a connect that found no master is tried again.
constexpr auto master_retry_delay = std::chrono::milliseconds(100);

bool is_peer_closed(std::error_code ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset;
}

}  // namespace

connection::connection(endpoint where, client_options options)
    : where_(std::move(where)),
      options_(std::move(options)),
      executor_(runtime::shared().get_executor()),
      resolver_(executor_),
      master_retry_timer_(executor_),
      connect_timer_(executor_),
      deadline_timer_(executor_),
      backoff_(options_.reconnect_backoff_min) {
  name_ = where_.to_string();
  if (where_.is_sentinel()) {
    check_sentinel_endpoint(where_);
    sentinel_ = sentinel_resolver::shared_for(where_, options_);
  } else {
    target_ = {where_.host, where_.port};
  }
  if (options_.restart_quarantine < std::chrono::milliseconds::zero()) {
    throw std::system_error(errc::invalid_argument, "restart_quarantine must not be negative");
  }
  check_blocking_connections(options_);
  if (options_.replication_guard.enabled &&
      (options_.replication_guard.replicas < 0 ||
       options_.replication_guard.timeout < std::chrono::milliseconds(1))) {
    throw std::system_error(errc::invalid_argument,
                            "replication_guard: replicas must be 0 or more, timeout 1 ms or more");
  }
  if (!options_.user.empty()) where_.user = options_.user;
  if (!options_.password.empty()) where_.password = options_.password;
  if (where_.tls) {
    if (where_.is_unix() && options_.tls.server_name.empty()) {
      throw std::system_error(errc::invalid_argument,
                              "TLS over a unix socket needs tls.server_name to verify");
    }
    tls_context_ = make_tls_context(options_.tls);
    free_io_thread_openssl_state_at_exit();
  }
}

namespace {

// Shared with the requests that count in it, which may complete after the thread ended.
const std::shared_ptr<std::atomic<std::uint32_t>>& submissions_of_this_thread() {
  thread_local const auto count = std::make_shared<std::atomic<std::uint32_t>>(0);
  return count;
}

}  // namespace

std::uint32_t unfinished_submissions_of_this_thread() noexcept {
  return submissions_of_this_thread()->load(std::memory_order_acquire);
}

void check_blocking_connections(const client_options& options) {
  if (options.blocking_connections < 0 || options.blocking_connections > 16) {
    throw std::system_error(errc::invalid_argument, "blocking_connections must be 0 to 16");
  }
}

void connection::submit(std::string payload, std::size_t replies, clock::time_point deadline,
                        reply_handler handler) {
  // The child of a fork() has no I/O thread to run this, and must not write to the parent's
  // socket (wait() and initiate() refuse before; this covers the library's own waits).
  if (in_forked_child()) return handler(errc::forked_process, {});
  request req{std::move(payload), replies, {}, deadline, std::move(handler), false, true, true};
  in_transit_.fetch_add(1, std::memory_order_seq_cst);
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  if (!on_io_thread()) req.submitter = submission_mark(submissions_of_this_thread());
  asio::dispatch(executor_, [self = shared_from_this(), req = std::move(req)]() mutable {
    self->enqueue(std::move(req));
  });
}

void connection::close(std::error_code reason) {
  if (in_forked_child()) return;  // the socket and the I/O thread are the parent's
  in_transit_.fetch_add(1, std::memory_order_seq_cst);
  asio::dispatch(executor_, [self = shared_from_this(), reason] {
    // Queued requests first: fail() reconnects when it finds any still queued.
    for (auto& req : std::exchange(self->pending_, {})) self->complete(req, reason, {});
    self->fail(reason, false, reason);
    self->in_transit_.fetch_sub(1, std::memory_order_seq_cst);
  });
}

void connection::set_push_handlers(std::function<void(const reply&)> on_push,
                                   std::function<void()> on_drop) {
  on_push_ = std::move(on_push);
  on_drop_ = std::move(on_drop);
}

void connection::enqueue(request req) {
  if (state_ == state::idle && clock::now() < backoff_until_) {
    if (awaiting_master_) {
      // No master a moment ago: wait for the next try, which master_retry_timer_ makes (a
      // connect per request would ask the sentinels at the request rate).
      pending_.push_back(std::move(req));
      if (pending_.back().deadline < deadline_armed_) arm_deadline_timer();
      return;
    }
    // The node failed to connect a moment ago: fail fast rather than wait, so that a lock
    // round skips a dead node at once. A TLS verdict stays one: retrying cannot change it.
    errc code = last_connect_error_ == errc::tls_error ? errc::tls_error : errc::node_unreachable;
    complete(req, code, reply::make_string(reply::kind::error, last_connect_text_));
    return;
  }
  pending_.push_back(std::move(req));
  if (pending_.back().deadline < deadline_armed_) arm_deadline_timer();
  kick();
}

void connection::kick() {
  if (state_ == state::idle && !pending_.empty()) start_connect();
  if (state_ == state::ready) start_write();
}

void connection::start_connect() {
  state_ = state::connecting;
  awaiting_master_ = false;
  master_unknown_ = false;
  ++generation_;
  last_connect_error_.clear();
  last_connect_text_.clear();
  reader_ = std::make_unique<reply_reader>();
  link_ = std::make_shared<socket_link>(executor_);
  connect_timer_.expires_after(options_.connect_timeout);
  connect_timer_.async_wait([self = shared_from_this(), gen = generation_](std::error_code ec) {
    if (ec || gen != self->generation_ || self->state_ != state::connecting) return;
    self->fail(errc::timeout, true, errc::node_unreachable, self->stalled_handshake_text());
  });

  targets_.clear();
  if (sentinel_) {
    if (!std::exchange(watching_master_, true)) sentinel_->watch(weak_from_this());
    sentinel_->resolve([self = shared_from_this(), gen = generation_](const sentinel_verdict& v) {
      if (gen != self->generation_ || self->state_ != state::connecting) return;
      if (v.what == sentinel_verdict::kind::agreed) return self->connect_to(v.master);
      if (v.transient()) return self->fail_awaiting_master(v.text);
      // Nobody to ask, or nobody knows the name: waiting would not help.
      self->master_unknown_ = true;
      self->last_connect_error_ = errc::node_unreachable;
      self->fail(errc::node_unreachable, true, errc::node_unreachable, v.text);
    });
    return;
  }
  if (where_.is_unix()) {
    try {
      targets_.emplace_back(asio::local::stream_protocol::endpoint(where_.socket_path));
    } catch (const std::system_error& e) {
      // A path longer than sun_path: Asio throws, and on the I/O thread that would end the process.
      last_connect_error_ = e.code();
      return fail(e.code(), true, errc::invalid_argument);
    }
    try_endpoint(0);
    return;
  }
  connect_to(target_);
}

void connection::connect_to(host_port target) {
  target_ = std::move(target);
  resolver_.async_resolve(
      target_.host, std::to_string(target_.port),
      [self = shared_from_this(), gen = generation_](std::error_code ec,
                                                     asio::ip::tcp::resolver::results_type results) {
        if (gen != self->generation_) return;
        if (ec) return self->fail(ec, true, errc::node_unreachable);
        for (const auto& r : results) self->targets_.emplace_back(r.endpoint());
        self->try_endpoint(0);
      });
}

// Tries the resolved addresses in order ("localhost" may give ::1 before 127.0.0.1).
void connection::try_endpoint(std::size_t index) {
  if (index >= targets_.size()) {
    return fail(last_connect_error_ ? last_connect_error_ : errc::node_unreachable, true,
                errc::node_unreachable);
  }
  auto& socket = link_->socket;
  std::error_code ignored;
  socket.close(ignored);
  link_->protocol = targets_[index].protocol();
  // Opened close-on-exec in the one call: Asio's open() does not ask for it, and setting it
  // afterwards leaves a moment in which a fork and exec on another thread (`dlock run`'s)
  // hands the Redis connection to the child.
  int fd = ::socket(link_->protocol.family(), link_->protocol.type() | SOCK_CLOEXEC,
                    link_->protocol.protocol());
  if (fd < 0) {
    last_connect_error_ = std::error_code(errno, std::system_category());
    return try_endpoint(index + 1);
  }
  socket.assign(link_->protocol, fd, last_connect_error_);
  if (last_connect_error_) {
    ::close(fd);
    return try_endpoint(index + 1);
  }
  socket.async_connect(targets_[index], [self = shared_from_this(), gen = generation_,
                                         link = link_, index](std::error_code ec) {
    if (gen != self->generation_) return;
    if (ec) {
      self->last_connect_error_ = ec;
      return self->try_endpoint(index + 1);
    }
    self->on_connected();
  });
}

void connection::on_connected() {
  if (!where_.is_unix()) {
    std::error_code ignored;
    link_->socket.set_option(asio::ip::tcp::no_delay(true), ignored);
  }
  if (tls_context_) return start_tls();
  start_session();
}

// A plain Redis port reads the TLS hello as the start of an inline command and waits for the
// rest: no error ever comes back, only a timeout, which this text explains.
std::string connection::stalled_handshake_text() const {
  if (state_ != state::connecting || !link_ || !link_->tls || link_->tls_established) return {};
  return "no answer to the TLS hello from " + where_.to_string() +
         " within the connect timeout (a plain redis:// port never answers it; or the server is "
         "hung)";
}

std::string connection::tls_peer_name() const {
  if (!options_.tls.server_name.empty()) return options_.tls.server_name;
  return where_.host.substr(0, where_.host.find('%'));  // an IPv6 zone is not in certificates
}

void connection::start_tls() {
  auto& link = *link_;
  link.tls.emplace(link.socket, *tls_context_);
  SSL* ssl = link.tls->native_handle();
  std::string name = tls_peer_name();
  bool ok;
  if (is_ip_literal(name)) {
    // An address must match an IP SAN; SNI cannot carry addresses (RFC 6066).
    ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) == 1;
  } else {
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    ok = SSL_set1_host(ssl, name.c_str()) == 1 && SSL_set_tlsext_host_name(ssl, name.c_str()) == 1;
  }
  if (!ok) {
    ERR_clear_error();
    last_connect_error_ = errc::tls_error;
    return fail(errc::tls_error, true, errc::tls_error,
                "cannot verify TLS certificates against the name '" + name + "'");
  }
  link.tls->async_handshake(
      asio::ssl::stream_base::client,
      [self = shared_from_this(), gen = generation_, link = link_](std::error_code ec) {
        if (gen != self->generation_) return;
        if (ec) return self->fail_tls(ec, "handshake");
        link->tls_established = true;
        self->start_session();
      });
}

void connection::fail_tls(std::error_code ec, const char* stage) {
  std::string text = std::string("TLS ") + stage + " with " + where_.to_string() + " failed: ";
  // After our side of a TLS 1.3 handshake, a server that refuses our client certificate sends
  // an alert and closes; our PING, already in its receive buffer, turns that close into a reset
  // that can overtake the alert. A reset in this one round trip is taken for that refusal.
  bool refused_session = link_->tls_established && is_peer_closed(ec);
  long verify = link_->tls ? SSL_get_verify_result(link_->tls->native_handle()) : X509_V_OK;
  if (verify != X509_V_OK) {
    text += "the server's certificate was rejected: ";
    text += X509_verify_cert_error_string(verify);
    if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
      text += " (it is not issued for '" + tls_peer_name() + "')";
    }
  } else if (refused_session) {
    text += ec.message() + " before the server answered (does it require a client certificate, "
            "or refuse ours?)";
  } else {
    text += ec.message();
    text += tls_hint(ec);
  }
  // OpenSSL's verdicts (certificate, protocol, alerts) and a refused session would be the same
  // on the next try; a reset during the handshake or a timeout is the network's, and may pass.
  bool verdict = verify != X509_V_OK || ec.category() == asio::error::get_ssl_category() ||
                 refused_session;
  std::error_code code = verdict ? std::error_code(errc::tls_error) : errc::node_unreachable;
  last_connect_error_ = code;
  fail(code, true, code, std::move(text));
}

void connection::start_session() {
  connect_backlog_.clear();
  if (!idles_without_read()) ensure_reading();  // TLS records and pushes come unasked
  std::string handshake;
  std::size_t steps = 0;
  if (!where_.password.empty()) {
    command auth = where_.user.empty() ? command{"AUTH", where_.password}
                                       : command{"AUTH", where_.user, where_.password};
    handshake += auth.bytes();
    ++steps;
  }
  if (where_.db != 0) {
    handshake += command{"SELECT", std::to_string(where_.db)}.bytes();
    ++steps;
  }
  // With Sentinel, the node must be the master now: the sentinels' answer may be stale.
  bool role_asked = sentinel_ != nullptr;
  if (role_asked) {
    handshake += command{"ROLE"}.bytes();
    ++steps;
  }
  // On TLS some reply must come back before the connection counts as ready (see the top).
  bool probe = link_->tls && steps == 0;
  if (probe) {
    handshake += command{"PING"}.bytes();
    ++steps;
  }
  if (steps == 0) return check_node();

  send_internal(std::move(handshake), steps, [self = shared_from_this(), gen = generation_, probe,
                                              steps, role_asked](std::error_code, reply r) {
    if (gen != self->generation_) return;
    // Any reply to the probe proves the session was accepted, NOPERM (no +ping) included.
    if (probe) return self->check_node();
    std::vector<reply> replies;
    if (steps == 1) {
      replies.push_back(std::move(r));
    } else {
      replies = r.elements();
    }
    if (replies.size() != steps) return self->fail(errc::protocol_error, true);
    self->check_session(replies, role_asked);
  });
}

void connection::check_session(const std::vector<reply>& steps, bool role_asked) {
  for (std::size_t i = 0; i + (role_asked ? 1 : 0) < steps.size(); ++i) {
    if (steps[i].is_error()) {
      last_connect_error_ = error_from_reply(steps[i]);
      return fail(last_connect_error_, true, last_connect_error_, steps[i].str());
    }
  }
  if (role_asked) {
    const reply& role = steps.back();
    std::string address = target_.to_string();
    if (role.is_error()) {
      last_connect_error_ = error_from_reply(role);
      std::string text = "ROLE on " + address + " (the master the sentinels named) failed: " +
                         role.str();
      if (last_connect_error_ == errc::no_permission) text += "; Sentinel needs +role";
      return fail(last_connect_error_, true, last_connect_error_, std::move(text));
    }
    if (!role.is_array() || role.elements().empty() || role.elements()[0].str() != "master") {
      std::string said = role.is_array() && !role.elements().empty() ? role.elements()[0].str()
                                                                     : std::string("?");
      return fail_awaiting_master(address + ", which the sentinels named as the master of '" +
                                  where_.master_name + "', is a " + said +
                                  " (a switch under way?)");
    }
  }
  check_node();
}

// The node's identity (client_options::restart_quarantine): INFO server for its run_id and
// uptime, then node_check.lua, which quarantines it if it may have forgotten locks. Both before
// become_ready(), so that nothing queued goes out before the quarantine is in place. A refusal
// of either fails the connect and says what the check needs.
void connection::check_node() {
  if (options_.restart_quarantine <= std::chrono::milliseconds::zero() || on_push_) {
    return become_ready();
  }
  auto refused = [](std::string_view step, const std::error_code& ec, const reply& r) {
    std::string text = "restart_quarantine: the node check's " + std::string(step) +
                       " failed (" + (r.is_error() ? r.str() : ec.message()) + ")";
    if (ec == errc::no_permission) {
      text += "; it needs +info, +eval and ~dlock:node:* (docs/security.md)";
    }
    return text;
  };
  send_internal(command{"INFO", "server"}.bytes(), 1, [self = shared_from_this(),
                                                       gen = generation_, refused](
                                                          std::error_code ec, reply info) {
    if (gen != self->generation_) return;
    if (!ec && !info.is_string()) ec = errc::protocol_error;
    if (ec) {
      self->last_connect_error_ = ec;
      return self->fail(ec, true, ec, refused("INFO server", ec, info));
    }
    auto field = [&](std::string_view name) {
      std::string_view text = info.str();
      auto at = text.find(name);
      if (at == std::string_view::npos) return std::string_view{};
      text.remove_prefix(at + name.size());
      return text.substr(0, text.find_first_of("\r\n"));
    };
    std::string run_id(field("\nrun_id:")), uptime_ms;
    // Whole seconds, counted from the second the server started in: it may read 1 when the
    // server is 48 ms old. One second less is never more than the true uptime.
    long long seconds = 0;
    auto up = field("\nuptime_in_seconds:");
    if (std::from_chars(up.data(), up.data() + up.size(), seconds).ec == std::errc{}) {
      uptime_ms = std::to_string(std::max(seconds - 1, 0LL) * 1000);
    }
    command check{"EVAL",
                  scripts::node_check_body,
                  "3",
                  node_identity_key,
                  node_quarantine_key,
                  node_fence_floor_key,
                  run_id,
                  uptime_ms,
                  std::to_string(self->options_.restart_quarantine.count())};
    self->send_internal(check.bytes(), 1, [self, gen, refused](std::error_code ec, reply r) {
      if (gen != self->generation_) return;
      if (ec) {
        self->last_connect_error_ = ec;
        return self->fail(ec, true, ec, refused("script", ec, r));
      }
      self->become_ready();
    });
  });
}

// Sends one request of the connect phase; the queue waits until become_ready(). A write whose
// completion has not run yet (its reply may come first) is left to finish: this one follows
// from its completion, so that two writes never overlap on the socket.
void connection::send_internal(std::string payload, std::size_t replies, reply_handler handler) {
  inflight_.push_back(request{{}, replies, {}, clock::now() + options_.connect_timeout,
                              std::move(handler), true});
  ensure_reading();
  if (writing_) {
    connect_backlog_ += payload;
    return;
  }
  write_connect_phase(std::move(payload));
}

void connection::write_connect_phase(std::string payload) {
  writing_ = true;
  link_->write_buf = std::move(payload);
  link_->async_write_all([self = shared_from_this(), gen = generation_,
                          link = link_](std::error_code ec, std::size_t) {
    if (gen != self->generation_) return;
    self->writing_ = false;
    if (ec) {
      if (link->tls) return self->fail_tls(ec, "session");
      return self->fail(errc::node_unreachable, true, errc::node_unreachable);
    }
    if (!self->connect_backlog_.empty()) {
      return self->write_connect_phase(std::exchange(self->connect_backlog_, {}));
    }
    // The replies may have overtaken this completion: become_ready() then found the write
    // still under way and left the queue for us.
    self->start_write();
  });
}

void connection::become_ready() {
  state_ = state::ready;
  master_wait_text_.clear();
  report(connection_event::change::connected, {});
  connect_timer_.cancel();
  backoff_ = options_.reconnect_backoff_min;
  last_connect_error_.clear();
  last_connect_text_.clear();
  start_write();
}

void connection::start_write() {
  if (writing_ || state_ != state::ready) return;
  if (pending_.empty()) return maybe_release();
  if (!take_socket()) return;
  // Nobody has read this socket since its last reply. Not checked on a socket that never
  // answered anything: a server refusing a client ("max number of clients reached") answers
  // and closes at once, and reconnecting for it would loop; the request gets that answer.
  if (inflight_.empty() && !reading_ && idles_without_read() && link_->heard_back &&
      spoke_while_idle(link_->fd())) {
    return fail(errc::connection_lost, false);  // nothing of ours lost: pending_ reconnects
  }
  if (!rejoin_reactor()) return;
  ensure_reading();
  auto& buf = link_->write_buf;
  buf.clear();
  while (!pending_.empty()) {
    buf += pending_.front().payload;
    pending_.front().payload = {};
    if (std::exchange(pending_.front().in_transit, false)) {
      in_transit_.fetch_sub(1, std::memory_order_seq_cst);
    }
    inflight_.push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
  writing_ = true;
  link_->async_write_all([self = shared_from_this(), gen = generation_,
                          link = link_](std::error_code ec, std::size_t) {
    if (gen != self->generation_) return;
    self->writing_ = false;
    if (ec) return self->fail(errc::connection_lost, false);
    self->start_write();
  });
}

void connection::ensure_reading() {
  if (!reading_) start_read();
}

void connection::start_read() {
  if (!rejoin_reactor()) return;
  reading_ = true;
  link_->async_read_some([self = shared_from_this(), gen = generation_,
                          link = link_](std::error_code ec, std::size_t n) {
    // reading_ stays set while the replies are handed out: the socket and reader_ are still
    // in use, so a handler's write must neither arm a second read nor release the socket.
    if (gen != self->generation_) return;
    if (ec) {
      bool connecting = self->state_ == state::connecting;
      if (link->tls && connecting) return self->fail_tls(ec, "session");
      std::string text;
      if (!link->heard_back && !link->tls && is_peer_closed(ec)) {
        // A TLS port resets a plain client at once, before any reply: say so, or all one sees
        // is a lost connection.
        text = self->where_.to_string() + " closed the connection before answering anything (" +
               ec.message() + "): if that port speaks TLS, use rediss://";
      }
      return self->fail(errc::connection_lost, connecting, errc::node_unreachable,
                        std::move(text));
    }
    link->heard_back = true;
    self->reader_->feed({link->read_buf.data(), n});
    for (;;) {
      std::error_code perr;
      auto r = self->reader_->next(perr);
      // Mid-handshake this is a failed connect: back off and fail the queue instead of
      // reconnecting to the same non-Redis peer in a loop until the requests' deadlines.
      if (perr) return self->fail(errc::protocol_error, self->state_ == state::connecting);
      if (!r) break;
      self->on_reply(std::move(*r));
      if (gen != self->generation_) return;  // a handler closed the connection
    }
    // With nothing in flight a plain connection stops reading, so that a caller may take the
    // socket.
    self->reading_ = false;
    if (!self->inflight_.empty() || !self->idles_without_read()) return self->ensure_reading();
    self->maybe_release();
  });
}

// A subscriber's messages, and the end of a sharded subscription that Redis Cluster announces
// when the slot moves (dlock never sends SUNSUBSCRIBE, so it never asks for one).
bool connection::is_push(const reply& r) {
  if (!r.is_array() || r.elements().empty()) return false;
  const auto& kind = r.elements()[0].str();
  return kind == "message" || kind == "smessage" || kind == "sunsubscribe";
}

void connection::on_reply(reply r) {
  if (on_push_ && is_push(r)) return on_push_(r);  // out of band: not the answer to any request
  if (inflight_.empty()) {
    // A reply nobody asked for: not a Redis server speaking request/reply RESP2.
    return fail(errc::protocol_error, state_ == state::connecting, errc::protocol_error);
  }
  // With Sentinel, READONLY means the master we know was demoted: move, rather than send it
  // more writes that it refuses. The socket ends before the request completes, so that what
  // its handler sends next waits for the next master. (Requests still in flight fail with
  // connection_lost.)
  demoted_ = demoted_ || (sentinel_ && is_demoted_reply(r));
  request& front = inflight_.front();
  if (front.expected > 1) {
    if (front.got.empty()) front.got.reserve(front.expected);
    front.got.push_back(std::move(r));
    if (front.got.size() < front.expected) return;
    demoted_ = demoted_ || leaves_a_transaction_open(front.got);
  }
  request req = std::move(front);
  inflight_.pop_front();
  if (std::exchange(demoted_, false) && state_ == state::ready) fail(errc::connection_lost, false);
  if (req.expected > 1) return complete(req, {}, reply::make_array(std::move(req.got)));
  std::error_code ec = r.is_error() ? error_from_reply(r) : std::error_code{};
  complete(req, ec, std::move(r));
}

bool connection::leaves_a_transaction_open(const std::vector<reply>& steps) {
  if (steps.size() < 2) return false;
  const reply& last = steps.back();
  if (!last.is_error() || last.str().rfind("EXECABORT", 0) == 0) return false;
  return std::any_of(steps.begin(), steps.end() - 1, [](const reply& r) {
    return r.is_string() && !r.is_error() && r.str() == "QUEUED";
  });
}

bool connection::is_demoted_reply(const reply& r) {
  return r.is_error() && error_from_reply(r) == errc::read_only;
}

void connection::complete(request& req, std::error_code ec, reply r) {
  if (std::exchange(req.in_transit, false)) in_transit_.fetch_sub(1, std::memory_order_seq_cst);
  if (std::exchange(req.outstanding, false)) outstanding_.fetch_sub(1, std::memory_order_relaxed);
  req.submitter.release();  // before the handler: a thread it wakes may count at once
  if (req.handler) std::exchange(req.handler, {})(ec, std::move(r));
}

void connection::fail(std::error_code inflight_error, bool connect_failed,
                      std::error_code queued_error, std::string text) {
  if (claim_socket() == claim::caller) {
    // A caller's exchange is using the socket (so the connection is ready, with nothing in
    // flight): closing it now could hand its fd number to another socket under the caller.
    // The caller hands back soon; after_direct() then runs this.
    if (!deferred_fail_) deferred_fail_ = inflight_error;
    return;
  }
  deferred_fail_.reset();
  if (connect_failed) {
    report(connection_event::change::connect_failed, inflight_error);
  } else if (state_ == state::ready && inflight_error != errc::cancelled) {  // not our close()
    report(connection_event::change::dropped, inflight_error);
  }
  ++generation_;
  state_ = state::idle;
  writing_ = false;
  reading_ = false;
  if (link_) link_->close();
  resolver_.cancel();
  connect_timer_.cancel();

  auto inflight = std::exchange(inflight_, {});
  std::deque<request> queued;
  if (connect_failed) {
    if (!last_connect_error_) last_connect_error_ = inflight_error;
    last_connect_text_ = text.empty() ? last_connect_error_.message() : text;
    backoff_until_ = clock::now() + backoff_;
    backoff_ = std::min(backoff_ * 2, options_.reconnect_backoff_max);
    // With Sentinel, a master that cannot be reached or is not the master may be moving:
    // queued requests wait for the next try, soon, whatever the backoff.
    std::error_code why = queued_error ? queued_error : inflight_error;
    awaiting_master_ = sentinel_ && !master_unknown_ &&
                       (awaiting_master_ || why == errc::node_unreachable ||
                        why == errc::timeout || why == errc::read_only);
    if (awaiting_master_) {
      master_wait_text_ = last_connect_text_;
      backoff_until_ = std::min(backoff_until_, clock::now() + master_retry_delay);
      master_retry_timer_.expires_at(backoff_until_);
      master_retry_timer_.async_wait([weak = weak_from_this()](std::error_code ec) {
        auto self = weak.lock();
        if (!ec && self && self->state_ == state::idle) self->kick();
      });
    } else {
      master_wait_text_.clear();
      queued = std::exchange(pending_, {});
    }
  }
  // Handlers may submit again; the queues are already consistent, so that is safe.
  for (auto& req : inflight) {
    complete(req, inflight_error,
             text.empty() ? reply{} : reply::make_string(reply::kind::error, text));
  }
  for (auto& req : queued) {
    complete(req, queued_error ? queued_error : inflight_error,
             reply::make_string(reply::kind::error, last_connect_text_));
  }
  if (on_drop_) on_drop_();
  if (!connect_failed) kick();  // never-written requests go out on a new connection
}

void connection::fail_awaiting_master(std::string text) {
  awaiting_master_ = true;
  last_connect_error_ = errc::node_unreachable;
  fail(errc::node_unreachable, true, errc::node_unreachable, std::move(text));
}

void connection::master_moved(const host_port& master) {
  if (state_ == state::idle) {
    // Waiting for a master, and one other than the last tried is named: try it now. (For the
    // same one, the retry timer paces the tries: votes that agree on a master that refuses
    // connections would otherwise kick each other at the round-trip rate.)
    if (awaiting_master_ && !(target_ == master)) kick();
    return;
  }
  if (target_ == master || target_.host.empty()) return;  // not yet told where to go
  if (logging()) {
    log(log_level::warning, name_ + ": the sentinels moved the master to " + master.to_string());
  }
  fail(errc::connection_lost, false);
}

std::string subscribe_payload(std::string_view channel, bool sharded) {
  std::string verb = sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
  return "*2\r\n$" + std::to_string(verb.size()) + "\r\n" + verb + "\r\n$" +
         std::to_string(channel.size()) + "\r\n" + std::string(channel) + "\r\n";
}

void connection::report(connection_event::change what, std::error_code ec) {
  if (logging() && what != connection_event::change::connected) {
    log(log_level::warning, name_ + (what == connection_event::change::dropped
                                         ? ": connection dropped: "
                                         : ": connect failed: ") + ec.message());
  }
  if (auto* o = current_observer()) o->on_connection({name_, what, ec});
}

void connection::arm_deadline_timer() {
  clock::time_point earliest = clock::time_point::max();
  for (const auto& q : {&pending_, &inflight_}) {
    for (const auto& req : *q) earliest = std::min(earliest, req.deadline);
  }
  if (earliest == deadline_armed_) return;
  deadline_armed_ = earliest;
  if (earliest == clock::time_point::max()) {
    deadline_timer_.cancel();
    return;
  }
  deadline_timer_.expires_at(earliest);
  // Weak: an armed timer must not keep a connection that nobody uses any more (and its
  // socket) alive until a deadline that may be a minute away.
  deadline_timer_.async_wait([weak = weak_from_this()](std::error_code ec) {
    auto self = weak.lock();
    if (ec || !self) return;
    self->deadline_armed_ = clock::time_point::max();
    self->on_deadline();
  });
}

void connection::on_deadline() {
  auto now = clock::now();
  // Queued requests that missed their deadline were never written: drop them.
  std::deque<request> expired;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->deadline <= now) {
      expired.push_back(std::move(*it));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  bool inflight_expired = false;
  for (const auto& req : inflight_) inflight_expired |= req.deadline <= now;
  std::string text = stalled_handshake_text();
  for (auto& req : expired) {
    if (!master_wait_text_.empty()) {  // never sent: no master to send it to
      complete(req, errc::node_unreachable,
               reply::make_string(reply::kind::error,
                                  "no master within the request's deadline: " + master_wait_text_));
      continue;
    }
    complete(req, errc::timeout,
             text.empty() ? reply{} : reply::make_string(reply::kind::error, text));
  }
  if (inflight_expired) {
    bool connecting = state_ == state::connecting;
    fail(errc::timeout, connecting, errc::timeout);
  }
  arm_deadline_timer();
}

}  // namespace dlock::detail
