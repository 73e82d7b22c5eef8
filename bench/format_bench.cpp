// SPDX-License-Identifier: Apache-2.0
// format_bench: the client-side cost of turning a lock command into RESP bytes (dlock::command,
// hiredis's redisFormatCommandArgv underneath), per command a lock cycle sends.
#include <benchmark/benchmark.h>

#include <string>
#include <string_view>
#include <vector>

#include "dlock/client.hpp"
#include "script.hpp"

namespace {

// Shapes of a real cycle: a 22-byte owner token (128 random bits, base64) and a short key.
const std::string key = "bench:orders:42";
const std::string fence_key = "{bench:orders:42}:fence";
const std::string token = "q1x7Zb0Jk9VwE2mT4sLr8A";

// The acquire round's EVALSHA: sha, 2 keys, token and TTL (what lock_core sends per node).
void bm_format_acquire_evalsha(benchmark::State& state) {
  for (auto _ : state) {
    dlock::command cmd{"EVALSHA", dlock::detail::acquire_script.sha1, "2", key, fence_key, token,
                       "10000"};
    benchmark::DoNotOptimize(cmd.bytes().data());
  }
}
BENCHMARK(bm_format_acquire_evalsha);

// The release's EVALSHA, formatted from a span the way script.cpp does it.
void bm_format_release_evalsha_span(benchmark::State& state) {
  for (auto _ : state) {
    std::vector<std::string_view> argv{"EVALSHA", dlock::detail::release_script.sha1, "1", key,
                                       token};
    dlock::command cmd{std::span<const std::string_view>(argv)};
    benchmark::DoNotOptimize(cmd.bytes().data());
  }
}
BENCHMARK(bm_format_release_evalsha_span);

// The plain single-instance command of the classic recipe, for comparison.
void bm_format_set_nx_px(benchmark::State& state) {
  for (auto _ : state) {
    dlock::command cmd{"SET", key, token, "NX", "PX", "10000"};
    benchmark::DoNotOptimize(cmd.bytes().data());
  }
}
BENCHMARK(bm_format_set_nx_px);

// A pipelined request of N commands (then()): the per-command cost when batching.
void bm_format_pipeline(benchmark::State& state) {
  const auto n = state.range(0);
  for (auto _ : state) {
    dlock::command cmd{"SET", key, token, "NX", "PX", "10000"};
    for (int64_t i = 1; i < n; ++i) cmd.then({"SET", key, token, "NX", "PX", "10000"});
    benchmark::DoNotOptimize(cmd.bytes().data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(bm_format_pipeline)->Arg(16);

}  // namespace
