// The wait loop of `dlock run` and `dlock acquire`.
//
// Each attempt is one lock round (mutex::try_acquire), so between rounds this loop can watch
// for signals, print progress and decide what a failure means. A round fails either because
// another owner holds the key on enough nodes (contention: wait for the release, up to -w) or
// because too few nodes answered to make a quorum at all (a node outage: a restart or a
// network blip heals within seconds, so keep trying for the grace period; a node that stays
// down must not make cron jobs queue up for ever, so then give up with 69). A mixed round
// (some nodes taken, some failed, no quorum either way) counts as contention: the holder's
// release would let us in.
#include "lock_wait.hpp"

#include <algorithm>
#include <random>

#include "cli.hpp"
#include "duration.hpp"

namespace dlock::cli {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

enum class verdict { contention, unavailable, fatal };

verdict classify(std::error_code ec, const node_results& votes, std::size_t n) {
  if (ec == errc::not_acquired) return verdict::contention;
  std::size_t failed = 0, taken = 0;
  for (const auto& v : votes) {
    if (v.outcome == node_result::vote::failed) ++failed;
    if (v.outcome == node_result::vote::taken) ++taken;
  }
  std::size_t quorum = n / 2 + 1;
  if (ec == errc::quorum_not_reached) {
    return taken > 0 && failed <= n - quorum ? verdict::contention : verdict::unavailable;
  }
  switch (static_cast<errc>(ec.value())) {
    case errc::node_unreachable:
    case errc::timeout:
    case errc::connection_lost:
    case errc::lease_expired:
    case errc::out_of_memory:
    case errc::quorum_not_reached:
      if (ec.category() == category()) return verdict::unavailable;
      break;
    default:
      break;
  }
  return verdict::fatal;
}

// Why the nodes failed, for the one-line message: "127.0.0.1:6380: connection refused; ...".
std::string node_failures(const node_results& votes) {
  std::string out;
  for (const auto& v : votes) {
    if (v.outcome != node_result::vote::failed) continue;
    if (!out.empty()) out += "; ";
    out += v.node + ": " + v.message;
  }
  return out;
}

milliseconds next_delay(milliseconds retry_delay, const node_results& votes) {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  long long full = std::max<long long>(retry_delay.count(), 1);
  long long half = std::max<long long>(full / 2, 1);
  milliseconds d{std::uniform_int_distribution<long long>(half, full)(gen)};
  // A holder whose key expires sooner than our delay: wake up right at its expiry.
  for (const auto& v : votes) {
    if (v.outcome == node_result::vote::taken && v.holder_ttl_ms >= 0) {
      d = std::min(d, milliseconds(v.holder_ttl_ms + 1));
    }
  }
  return std::max(d, milliseconds(1));
}

}  // namespace

wait_result wait_for_lock(const attempt_fn& attempt, const wait_options& o) {
  const auto start = steady::now();
  const auto deadline = o.wait ? start + *o.wait : steady::time_point::max();
  // Since when rounds have failed for want of nodes; min() while they do not.
  auto unavailable_since = steady::time_point::min();
  auto next_progress = start + std::chrono::seconds(1);
  wait_result result;
  for (;;) {
    node_results votes;
    std::error_code ec;
    lease l = attempt(ec, &votes);
    if (l) {
      result.outcome = wait_outcome::acquired;
      result.held = std::move(l);
      return result;
    }
    result.ec = ec;
    auto kind = classify(ec, votes, o.node_count);
    auto now = steady::now();
    if (kind == verdict::fatal) {
      result.outcome = ec == errc::invalid_argument ? wait_outcome::failed : wait_outcome::unavailable;
      std::string why = node_failures(votes);
      result.message = "cannot lock '" + o.key + "': " + ec.message() + (why.empty() ? "" : " (" + why + ")");
      return result;
    }
    if (kind == verdict::contention) {
      unavailable_since = steady::time_point::min();
      result.outcome = wait_outcome::conflict;
      result.message = "'" + o.key + "' is held by another owner" +
                       (o.nonblock ? "" : "; gave up after " + seconds_text(now - start));
    } else {
      if (unavailable_since == steady::time_point::min()) unavailable_since = now;
      result.outcome = wait_outcome::unavailable;
      std::string why = node_failures(votes);
      result.message = "no quorum of Redis nodes for '" + o.key + "' (" + std::to_string(o.node_count / 2 + 1) +
                       " of " + std::to_string(o.node_count) + " needed): " +
                       (why.empty() ? ec.message() : why);
      if (now - unavailable_since >= o.unavailable_grace) return result;
    }
    if (o.nonblock) return result;
    auto delay = next_delay(o.retry_delay, votes);
    if (now >= deadline) return result;
    if (now + delay > deadline) delay = std::chrono::ceil<milliseconds>(deadline - now);

    if (verbose() && now >= next_progress) {
      next_progress = now + std::chrono::seconds(1);
      std::string holder = kind == verdict::contention && o.describe_holder ? o.describe_holder() : "";
      if (kind == verdict::contention) {
        say("waiting for '%s': held by %s; waited %s", o.key.c_str(),
            holder.empty() ? "another owner" : holder.c_str(), seconds_text(now - start).c_str());
      } else {
        say("waiting for '%s': %s; waited %s", o.key.c_str(), result.message.c_str(),
            seconds_text(now - start).c_str());
      }
    }
    if (int sig = o.sleep(delay)) {
      result.outcome = wait_outcome::interrupted;
      result.signal = sig;
      result.message = "interrupted by signal " + std::to_string(sig) + " while waiting for '" + o.key + "'";
      return result;
    }
  }
}

}  // namespace dlock::cli
