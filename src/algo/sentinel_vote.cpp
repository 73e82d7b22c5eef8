// SPDX-License-Identifier: Apache-2.0
#include "algo/sentinel_vote.hpp"

#include <charconv>
#include <cstddef>
#include <vector>

namespace dlock::detail {
namespace {

std::string said(const sentinel_answer& a) {
  switch (a.what) {
    case sentinel_answer::kind::address: return "names " + a.master.to_string();
    case sentinel_answer::kind::unknown_master: return "knows no such master";
    case sentinel_answer::kind::failed: return "failed: " + a.text;
    case sentinel_answer::kind::pending: break;
  }
  return "did not answer";
}

}  // namespace

sentinel_answer read_sentinel_answer(std::error_code ec, const reply& r) {
  sentinel_answer a;
  if (!ec && r.is_nil()) {
    a.what = sentinel_answer::kind::unknown_master;
    return a;
  }
  unsigned port = 0;
  if (!ec && r.is_array() && r.elements().size() == 2 && r.elements()[0].is_string() &&
      !r.elements()[0].str().empty() && r.elements()[1].is_string()) {
    const std::string& text = r.elements()[1].str();
    auto [end, perr] = std::from_chars(text.data(), text.data() + text.size(), port);
    if (perr == std::errc{} && end == text.data() + text.size() && port > 0 && port <= 65535) {
      a.what = sentinel_answer::kind::address;
      a.master = {r.elements()[0].str(), static_cast<unsigned short>(port)};
      return a;
    }
  }
  a.what = sentinel_answer::kind::failed;
  if (r.is_error()) {
    a.text = r.str();
    if (a.text.find("unknown command") != std::string::npos) a.text += " (not a sentinel?)";
  } else if (ec) {
    a.text = ec.message();
  } else {
    a.text = "an answer that is not an address (not a sentinel?)";
  }
  return a;
}

sentinel_verdict decide_master(std::span<const host_port> sentinels,
                               std::span<const sentinel_answer> answers,
                               std::string_view master_name) {
  const std::size_t majority = sentinels.size() / 2 + 1;
  std::vector<std::pair<host_port, std::size_t>> votes;
  std::size_t unknown = 0, silent = 0;
  for (const auto& a : answers) {
    if (a.what == sentinel_answer::kind::unknown_master) ++unknown;
    if (a.what == sentinel_answer::kind::failed || a.what == sentinel_answer::kind::pending) {
      ++silent;
    }
    if (a.what != sentinel_answer::kind::address) continue;
    bool counted = false;
    for (auto& [master, count] : votes) {
      if (master == a.master) {
        ++count;
        counted = true;
      }
    }
    if (!counted) votes.emplace_back(a.master, 1);
  }
  sentinel_verdict v;
  for (const auto& [master, count] : votes) {
    if (count >= majority) {
      v.what = sentinel_verdict::kind::agreed;
      v.master = master;
      return v;
    }
  }
  v.what = unknown >= majority                  ? sentinel_verdict::kind::unknown_master
           : silent == answers.size()           ? sentinel_verdict::kind::unreachable
                                                : sentinel_verdict::kind::no_majority;
  switch (v.what) {
    case sentinel_verdict::kind::unknown_master:
      v.text = "no master named '" + std::string(master_name) + "': ";
      break;
    case sentinel_verdict::kind::unreachable:
      v.text = "no sentinel answered about master '" + std::string(master_name) + "': ";
      break;
    default:
      v.text = "no master of '" + std::string(master_name) + "' named by a majority (" +
               std::to_string(majority) + " of " + std::to_string(sentinels.size()) +
               " sentinels): ";
  }
  for (std::size_t i = 0; i < sentinels.size() && i < answers.size(); ++i) {
    if (i != 0) v.text += "; ";
    v.text += "sentinel " + sentinels[i].to_string() + " " + said(answers[i]);
  }
  return v;
}

}  // namespace dlock::detail
