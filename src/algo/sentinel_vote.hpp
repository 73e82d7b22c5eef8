// SPDX-License-Identifier: Apache-2.0
// algo/sentinel_vote.hpp: which master the sentinels agree on. Private; no I/O.
//   sentinel_answer   what one sentinel said to SENTINEL GET-MASTER-ADDR-BY-NAME
//   sentinel_verdict  the master that a majority of the configured sentinels name, or why none
//   read_sentinel_answer  one sentinel's reply, read
//   decide_master     the vote
// A majority of all the sentinels in the URL, not of those that answered: a sentinel cut off
// from the others may still name the old master after a failover, and one answer is no vote.
#pragma once

#include <span>
#include <string>

#include "dlock/endpoint.hpp"
#include "dlock/reply.hpp"

namespace dlock::detail {

struct sentinel_answer {
  enum class kind {
    pending,         // no answer (yet)
    address,         // names `master`
    unknown_master,  // a nil reply: it watches no master of that name
    failed,          // unreachable, timed out, refused (auth, ACL), or not a sentinel
  };
  kind what = kind::pending;
  host_port master;  // for address
  std::string text;  // for failed: why
};

struct sentinel_verdict {
  enum class kind {
    agreed,          // a majority names `master`
    unknown_master,  // a majority knows no master of that name
    unreachable,     // no sentinel answered: nothing to wait for
    no_majority,     // answers, but no majority for one master: a switch may be under way
  };
  kind what = kind::no_majority;
  host_port master;  // for agreed
  std::string text;  // for the others: what each sentinel said, for the error the user sees

  // Worth asking again within a request's deadline: the sentinels may agree in a moment.
  bool transient() const noexcept { return what == kind::no_majority; }
};

// What a sentinel's reply to SENTINEL GET-MASTER-ADDR-BY-NAME (or the request's error) says.
sentinel_answer read_sentinel_answer(std::error_code ec, const reply& r);

// `answers[i]` is what `sentinels[i]` said about `master_name`.
sentinel_verdict decide_master(std::span<const host_port> sentinels,
                               std::span<const sentinel_answer> answers,
                               std::string_view master_name);

}  // namespace dlock::detail
