// SPDX-License-Identifier: Apache-2.0
// quorum_round_bench: the client-side cost of the sans-io Redlock round (algo/quorum_round):
// construct, record every node's vote, decide, judge validity and plan the fence.
#include <benchmark/benchmark.h>

#include <chrono>

#include "algo/quorum_round.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::detail::quorum_round;

// Every node grants with the same fence: the common, uncontended round (N = range(0)).
void bm_round_all_granted(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto start = dlock::detail::steady::now();
  for (auto _ : state) {
    quorum_round round(n, start, 10s, 0.01);
    for (std::size_t i = 0; i < n && !round.decided(); ++i) round.granted(i, 42);
    benchmark::DoNotOptimize(round.valid_until());
    auto plan = dlock::detail::plan_fence(round);
    benchmark::DoNotOptimize(plan.fence);
  }
}
BENCHMARK(bm_round_all_granted)->Arg(1)->Arg(3)->Arg(5);

// Another owner holds it everywhere: the contended round that fails with not_acquired.
void bm_round_all_taken(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto start = dlock::detail::steady::now();
  for (auto _ : state) {
    quorum_round round(n, start, 10s, 0.01);
    for (std::size_t i = 0; i < n && !round.decided(); ++i) round.taken(i, 9000);
    auto ec = round.failure();
    benchmark::DoNotOptimize(ec);
  }
}
BENCHMARK(bm_round_all_taken)->Arg(1)->Arg(3)->Arg(5);

// Granting nodes disagree on the fence, so plan_fence must pick nodes to raise.
void bm_round_split_fences(benchmark::State& state) {
  auto start = dlock::detail::steady::now();
  for (auto _ : state) {
    quorum_round round(5, start, 10s, 0.01);
    round.granted(0, 40);
    round.granted(1, 41);
    round.granted(2, 42);
    auto plan = dlock::detail::plan_fence(round);
    benchmark::DoNotOptimize(plan.to_raise.data());
  }
}
BENCHMARK(bm_round_split_fences);

}  // namespace
