// SPDX-License-Identifier: Apache-2.0
#include "dlock/endpoint.hpp"

#include <sys/un.h>

#include <charconv>

#include "dlock/error.hpp"

namespace dlock {
namespace {

bool parse_number(std::string_view text, int max, int& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && end == text.data() + text.size() && out >= 0 && out <= max;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

// A host name or IPv4 address, or (inside brackets) an IPv6 literal with an optional zone.
// Without this check "redis://host?db=1" or "redis://host#x" would parse as a host name and
// only fail later, at resolve time, as node_unreachable instead of invalid_argument.
bool valid_host(std::string_view host, bool bracketed) {
  if (host.empty()) return false;
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (bracketed) {
    // An IPv6 literal: hex digits, ':' (at least one) and '.' (an embedded IPv4), then an
    // optional non-empty %zone, checked here so that "[f1%0t1h73]" fails now, not at resolve
    // time (and printed unbracketed, it would not parse again).
    auto percent = host.find('%');
    auto address = host.substr(0, percent);
    if (address.find(':') == std::string_view::npos) return false;
    for (char c : address) {
      if (hex_value(c) < 0 && c != ':' && c != '.') return false;
    }
    if (percent == std::string_view::npos) return true;
    auto zone = host.substr(percent + 1);
    if (zone.empty()) return false;
    for (char c : zone) {
      if (!alnum(c) && c != '.' && c != '-' && c != '_' && c != '~' && c != '%') return false;
    }
    return true;
  }
  for (char c : host) {
    if (!alnum(c) && c != '.' && c != '-' && c != '_') return false;
  }
  return true;
}

// host[:port] or [v6]:port; `port` keeps its value when none is given.
bool parse_host_port(std::string_view text, std::string& host, unsigned short& port) {
  std::string_view port_text;
  bool bracketed = !text.empty() && text[0] == '[';
  if (bracketed) {  // [::1]:6379
    auto close = text.find(']');
    if (close == std::string_view::npos) return false;
    host = std::string(text.substr(1, close - 1));
    auto after = text.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return false;
      port_text = after.substr(1);
      if (port_text.empty()) return false;
    }
  } else {
    auto colon = text.find(':');
    host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = text.substr(colon + 1);
      if (port_text.empty()) return false;
    }
  }
  if (!valid_host(host, bracketed)) return false;
  if (port_text.empty()) return true;
  int number = 0;
  if (!parse_number(port_text, 65535, number) || number == 0) return false;
  port = static_cast<unsigned short>(number);
  return true;
}

// What `sentinel monitor NAME` may say, within reason: it goes into commands and error texts.
bool valid_master_name(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

// "?db=N" on unix URLs.
bool parse_query(std::string_view query, endpoint& ep) {
  if (query.empty()) return true;
  if (query.substr(0, 3) != "db=") return false;
  return parse_number(query.substr(3), 65535, ep.db);
}

}  // namespace

std::string host_port::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string endpoint::to_string() const {
  if (is_unix()) return "unix://" + socket_path;
  if (is_sentinel()) {
    std::string text = "redis-sentinel://";
    for (const auto& s : sentinels) {
      if (&s != &sentinels.front()) text += ',';
      text += s.to_string();
    }
    return text + "/" + master_name;
  }
  if (is_cluster()) {
    std::string text = tls ? "rediss-cluster://" : "redis-cluster://";
    for (const auto& s : seeds) {
      if (&s != &seeds.front()) text += ',';
      text += s.to_string();
    }
    return text;
  }
  return host_port{host, port}.to_string();
}

endpoint parse_endpoint(std::string_view url, std::error_code& ec) {
  ec = errc::invalid_argument;
  endpoint ep;
  constexpr std::string_view redis_scheme = "redis://", tls_scheme = "rediss://",
                             unix_scheme = "unix://", sentinel_scheme = "redis-sentinel://",
                             cluster_scheme = "redis-cluster://",
                             tls_cluster_scheme = "rediss-cluster://";

  if (url.substr(0, unix_scheme.size()) == unix_scheme) {
    auto rest = url.substr(unix_scheme.size());
    auto q = rest.find('?');
    ep.socket_path = std::string(rest.substr(0, q));
    if (ep.socket_path.empty() || ep.socket_path[0] != '/') return {};
    if (ep.socket_path.size() >= sizeof(sockaddr_un::sun_path)) return {};  // cannot connect
    if (q != std::string_view::npos && !parse_query(rest.substr(q + 1), ep)) return {};
    ec.clear();
    return ep;
  }
  std::string_view rest;
  bool sentinel = false;
  if (url.substr(0, redis_scheme.size()) == redis_scheme) {
    rest = url.substr(redis_scheme.size());
  } else if (url.substr(0, sentinel_scheme.size()) == sentinel_scheme) {
    rest = url.substr(sentinel_scheme.size());
    sentinel = true;
  } else if (url.substr(0, cluster_scheme.size()) == cluster_scheme) {
    rest = url.substr(cluster_scheme.size());
    ep.cluster = true;
  } else if (url.substr(0, tls_cluster_scheme.size()) == tls_cluster_scheme) {
    rest = url.substr(tls_cluster_scheme.size());
    ep.cluster = ep.tls = true;
  } else if (url.substr(0, tls_scheme.size()) == tls_scheme) {
    rest = url.substr(tls_scheme.size());
    ep.tls = true;
  } else {
    return {};
  }

  // [user[:password]@]
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    auto userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    auto colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      // redis://secret@host is the common "password only" form.
      if (!percent_decode(userinfo, ep.password)) return {};
    } else {
      if (!percent_decode(userinfo.substr(0, colon), ep.user)) return {};
      if (!percent_decode(userinfo.substr(colon + 1), ep.password)) return {};
    }
  }
  // host[:port][/db], for a sentinel URL host[:port][,host[:port]]*/name[/db], for a
  // cluster URL host[:port][,host[:port]]* (a cluster has database 0 only)
  std::string_view hostport = rest, path;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    path = rest.substr(slash + 1);
  }
  auto parse_list = [&](std::vector<host_port>& out, unsigned short default_port) {
    for (std::string_view list = hostport;;) {
      auto comma = list.find(',');
      host_port one{{}, default_port};
      if (!parse_host_port(list.substr(0, comma), one.host, one.port)) return false;
      out.push_back(std::move(one));
      if (comma == std::string_view::npos) return true;
      list.remove_prefix(comma + 1);
    }
  };
  if (ep.cluster) {
    if (!parse_list(ep.seeds, 6379) || hostport.size() != rest.size()) return {};
    ep.port = 0;
  } else if (sentinel) {
    if (!parse_list(ep.sentinels, 26379)) return {};
    auto slash = path.find('/');
    ep.master_name = std::string(path.substr(0, slash));
    if (!valid_master_name(ep.master_name)) return {};
    path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
    ep.port = 0;
  } else if (!parse_host_port(hostport, ep.host, ep.port)) {
    return {};
  }
  if (!path.empty() && !parse_number(path, 65535, ep.db)) return {};
  ec.clear();
  return ep;
}

endpoint parse_endpoint(std::string_view url) {
  std::error_code ec;
  auto ep = parse_endpoint(url, ec);
  if (ec) {
    throw std::system_error(
        ec, "bad Redis URL (want redis[s]://[user:pass@]host:port[/db], unix:///path, "
            "redis-sentinel://[user:pass@]host:port[,host:port...]/master_name[/db] or "
            "redis[s]-cluster://[user:pass@]host:port[,host:port...])");
  }
  return ep;
}

}  // namespace dlock
