// SPDX-License-Identifier: Apache-2.0
// reply_bench: the client-side cost of decoding replies (resp/reply_reader: hiredis's reader,
// then conversion into dlock::reply), for the replies a lock cycle receives.
#include <benchmark/benchmark.h>

#include <string>
#include <string_view>

#include "resp/reply_reader.hpp"

namespace {

void decode_all(benchmark::State& state, std::string_view wire, int replies_per_feed) {
  dlock::detail::reply_reader reader;
  std::error_code ec;
  for (auto _ : state) {
    reader.feed(wire);
    for (int i = 0; i < replies_per_feed; ++i) {
      auto r = reader.next(ec);
      benchmark::DoNotOptimize(r);
    }
  }
  state.SetItemsProcessed(state.iterations() * replies_per_feed);
}

// acquire.lua's grant: {1, fence}.
void bm_decode_acquire_granted(benchmark::State& state) {
  decode_all(state, "*2\r\n:1\r\n:123456\r\n", 1);
}
BENCHMARK(bm_decode_acquire_granted);

// release.lua's answer: an integer.
void bm_decode_release_integer(benchmark::State& state) { decode_all(state, ":1\r\n", 1); }
BENCHMARK(bm_decode_release_integer);

// A bulk string (GET of an owner token), the shape of most non-script replies.
void bm_decode_bulk_token(benchmark::State& state) {
  decode_all(state, "$22\r\nq1x7Zb0Jk9VwE2mT4sLr8A\r\n", 1);
}
BENCHMARK(bm_decode_bulk_token);

// 16 grants arriving in one read, as when 64 lockers share one connection.
void bm_decode_batch16(benchmark::State& state) {
  std::string wire;
  for (int i = 0; i < 16; ++i) wire += "*2\r\n:1\r\n:123456\r\n";
  decode_all(state, wire, 16);
}
BENCHMARK(bm_decode_batch16);

}  // namespace
