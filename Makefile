# The two commands a newcomer needs (see README.md), plus the benchmark.
#   make demo   install what is missing, build (release), run the demo on throwaway redis-servers
#   make test   install what is missing, build (debug + ASan/UBSan, -Werror), run the whole suite,
#               then the simulator's sweep of SIM_SEEDS schedules in a release build (build/sim),
#               then install dlock (static and shared) and build a consumer against each
#               (scripts/check-install), then the unit and integration tests under
#               ThreadSanitizer (build/tsan), then each fuzzer for FUZZ_SECONDS (scripts/fuzz, clang)
#   make bench  install what is missing, build (release), run the benchmarks
#   make package  Debian packages dlock and libdlock-dev in build/package (cmake/Packaging.cmake)
#   make docs   the API reference from the public headers (Doxygen) in build/docs/html
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all bootstrap debug release demo test sim bench package docs clean

all: release

bootstrap:
	@scripts/bootstrap

debug: bootstrap
	@cmake -S . -B build/debug -DCMAKE_BUILD_TYPE=Debug -DDLOCK_SANITIZE=ON -DDLOCK_WERROR=ON >/dev/null
	@cmake --build build/debug -j $(JOBS)

release: bootstrap
	@cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DDLOCK_WERROR=ON -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_INTEGRATION_TESTS=OFF >/dev/null
	@cmake --build build/release -j $(JOBS)

# The demo needs only the `dlock` binary: build that target alone.
demo: bootstrap
	@cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DDLOCK_WERROR=ON -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_INTEGRATION_TESTS=OFF >/dev/null
	@cmake --build build/release -j $(JOBS) --target dlock-cli
	@build/release/tools/dlock-cli/dlock demo

# After the suite, scripts/check-install installs the library as a user would (static, then
# shared, then the Debian packages) and builds, links and runs a consumer through find_package
# and pkg-config; `make docs` must pass without a warning. Then the
# unit and integration tests build once more with ThreadSanitizer in
# build/tsan (target dlock_tests: no fault suite, soak run, fuzz replays or examples) and run
# there; a race fails its test. tests/tsan.supp lists the reports that are not dlock's, and
# atexit_sleep_ms=0 spares each test process TSan's 1 s wait at exit. Then the libFuzzer
# targets build with clang in build/fuzz and run briefly each (scripts/fuzz; FUZZ_SECONDS per
# target).
FUZZ_SECONDS ?= 25
TSAN_TEST_OPTIONS = suppressions=$(CURDIR)/tests/tsan.supp atexit_sleep_ms=0
test: debug
	@cd build/debug && ctest --output-on-failure -j $(JOBS) --timeout 300 $(CTEST_ARGS)
	@$(MAKE) --no-print-directory sim
	@JOBS=$(JOBS) scripts/check-install build/debug/tests/run_with_redis
	@$(MAKE) --no-print-directory docs
	@cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DDLOCK_SANITIZE=thread -DDLOCK_WERROR=ON -DDLOCK_BUILD_EXAMPLES=OFF >/dev/null
	@cmake --build build/tsan -j $(JOBS) --target dlock_tests
	@cd build/tsan && TSAN_OPTIONS="$(TSAN_TEST_OPTIONS)" ctest --output-on-failure -j $(JOBS) --timeout 300 -L 'unit|integration' -LE 'fault|soak' -E '^fuzz\.' $(CTEST_ARGS)
	@JOBS=$(JOBS) scripts/fuzz $(FUZZ_SECONDS)

# The simulator's sweep (tests/sim, docs/guarantees.md) at scale: SIM_SEEDS seeded schedules,
# a sixth per configuration family, in a release build without sanitizers (the suite above
# runs a shorter sweep under ASan/UBSan). About 66 s for 100,000 on 2 cores; a failing seed
# prints its trace, and DLOCK_SIM_SEED=<n> replays it (tests/sim/sim_explore_test.cpp).
SIM_SEEDS ?= 100000
sim: bootstrap
	@cmake -S . -B build/sim -DCMAKE_BUILD_TYPE=Release -DDLOCK_WERROR=ON -DDLOCK_BUILD_EXAMPLES=OFF -DDLOCK_BUILD_INTEGRATION_TESTS=OFF >/dev/null
	@cmake --build build/sim -j $(JOBS) --target sim_explore_test
	@cd build/sim && { DLOCK_SIM_SEEDS=$(SIM_SEEDS) ctest -V -j $(JOBS) --timeout 900 -R '^SimExplore\.' >sweep.log 2>&1; status=$$?; \
	  grep -E 'schedules in|Test +#|tests passed|Total Test time' sweep.log; \
	  [ $$status -eq 0 ] || { tail -n 400 sweep.log; echo "sim: the sweep failed; build/sim/sweep.log has it all"; exit 1; }; }

# Benchmarks (docs/benchmarks.md): micro-benchmarks briefly, then lock_bench, which starts its
# own redis-servers and runs dlock, the redis-benchmark ceiling and the npm peers in one run
# (about 3-4 minutes), then gnuplot draws docs/benchmarks-*.png. BENCH_ARGS go to lock_bench.
BENCH_ARGS ?= --callgrind
bench: bootstrap
	@cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DDLOCK_WERROR=ON -DDLOCK_BUILD_BENCH=ON -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_INTEGRATION_TESTS=OFF -DDLOCK_BUILD_EXAMPLES=ON >/dev/null
	@cmake --build build/bench -j $(JOBS) --target dlock_micro_bench lock_bench
	@cd bench/peers && { timeout 300 npm ci --no-audit --no-fund >/dev/null 2>&1 || timeout 300 npm install --no-audit --no-fund >/dev/null 2>&1 || echo "bench: npm install failed in bench/peers; lock_bench will skip the peers"; }
	@timeout 120 build/bench/bench/dlock_micro_bench --benchmark_min_time=0.05 --benchmark_out=bench/results/micro.json --benchmark_out_format=json
	@timeout 900 build/bench/bench/lock_bench $(BENCH_ARGS)
	@gnuplot -e "results='bench/results'; docs='docs'" bench/plot.gp || echo "bench: gnuplot failed; no PNGs"

# The packages are built from a static libdlock, configured for /usr, in Release.
package: bootstrap
	@cmake -S . -B build/package -DCMAKE_BUILD_TYPE=Release -DDLOCK_WERROR=ON -DBUILD_SHARED_LIBS=OFF -DCMAKE_INSTALL_PREFIX=/usr -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_INTEGRATION_TESTS=OFF -DDLOCK_BUILD_EXAMPLES=OFF >/dev/null
	@cmake --build build/package -j $(JOBS)
	@cd build/package && cpack -G DEB >/dev/null && ls -1 $(CURDIR)/build/package/*.deb

# Undocumented public names and broken references are errors (docs/Doxyfile).
docs: bootstrap
	@doxygen docs/Doxyfile && echo "docs: build/docs/html/index.html"

clean:
	rm -rf build
