#include "dlock/client.hpp"

#include "net/connection.hpp"

namespace dlock {

client::client(std::string_view url, client_options options)
    : client(parse_endpoint(url), std::move(options)) {}

client::client(endpoint where, client_options options)
    : conn_(std::make_shared<detail::connection>(std::move(where), std::move(options))) {}

const endpoint& client::where() const noexcept { return conn_->where(); }
const client_options& client::options() const noexcept { return conn_->options(); }
detail::io_executor client::get_executor() const noexcept { return conn_->executor(); }

void client::start_exec(command cmd, std::chrono::milliseconds timeout,
                        detail::unique_function<void(std::error_code, reply)> handler) {
  std::size_t count = cmd.size();
  conn_->submit(std::string(cmd.bytes()), count, detail::clock::now() + timeout,
                std::move(handler));
}

reply client::exec(command cmd, std::error_code& ec) {
  return detail::wait<reply>(ec, [&](auto handler) {
    start_exec(std::move(cmd), options().request_timeout, std::move(handler));
  });
}

reply client::exec(command cmd) {
  std::error_code ec;
  reply r = exec(std::move(cmd), ec);
  if (ec) throw std::system_error(ec, r.is_error() ? r.str() : where().to_string());
  return r;
}

void client::disconnect() { conn_->close(errc::cancelled); }

std::error_code error_from_reply(const reply& r) noexcept {
  if (!r.is_error()) return {};
  std::string_view text = r.str();
  auto starts = [&](std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; };
  if (starts("WRONGTYPE")) return errc::wrong_type;
  if (starts("NOPERM")) return errc::no_permission;
  if (starts("NOAUTH") || starts("WRONGPASS")) return errc::auth_failed;
  if (starts("READONLY")) return errc::read_only;
  if (starts("OOM")) return errc::out_of_memory;
  if (starts("ERR AUTH") || starts("ERR invalid password") || starts("ERR Client sent AUTH"))
    return errc::auth_failed;
  if (starts("NOSCRIPT") || starts("ERR Error running script") || starts("ERR user_script") ||
      starts("ERR Error compiling script"))
    return errc::script_error;
  return errc::server_error;
}

}  // namespace dlock
