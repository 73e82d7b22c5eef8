# SPDX-License-Identifier: Apache-2.0
# The two commands a newcomer needs (see README.md), the tiers of tests, and the benchmark.
#   make demo   install what is missing, build (release), run the demo on throwaway redis-servers
#   make check  the inner loop (<= 2 min after an incremental build): unit tests, the single-node
#               integration tests of the public contract, a few hundred simulated schedules
#   make test   the README's test command (<= 12 min from a clean clone on 2 cores): install what
#               is missing, build once (debug + ASan/UBSan, -Werror), run every test that can find
#               a bug in the library (unit, integration with Sentinel and Cluster, the CLI, the
#               fault suite, a short soak), then the simulator's sweep of TEST_SIM_SEEDS schedules
#   make ci     what CI runs (.ci/run; <= 35 min): `make test`, then the install and package
#               checks (scripts/check-install), the API reference, the unit and integration
#               tests under ThreadSanitizer (build/tsan), and each fuzzer for FUZZ_SECONDS
#   make bench  install what is missing, build (release), run the benchmarks
#   make package  Debian packages dlock and libdlock-dev in build/release (cmake/Packaging.cmake)
#   make docs   the API reference from the public headers (Doxygen) in build/docs/html
# Each tier records its stages' times (scripts/stage) and prints them at the end.
JOBS ?= $(shell nproc)
# Tests at once: most of a test's time is spent waiting on servers and child processes, not on a
# core, and every bound a test waits for scales with the build (tests/support/checks.hpp).
TEST_JOBS ?= $(shell echo $$(( $(JOBS) * 3 )))
CTEST_ARGS ?=
STAGE = @scripts/stage

.PHONY: all bootstrap debug release demo check test ci sim sweep nemesis nemesis-run tsan fuzz bench package docs clean

all: release

bootstrap:
	@scripts/bootstrap

# One debug configuration (ASan + UBSan) for every tier; one release configuration (static, for
# /usr) for the demo, the release build and the Debian packages.
DEBUG_CONFIG = cmake -S . -B build/debug -DCMAKE_BUILD_TYPE=Debug -DDLOCK_SANITIZE=ON -DDLOCK_WERROR=ON >/dev/null
RELEASE_CONFIG = cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DDLOCK_WERROR=ON -DBUILD_SHARED_LIBS=OFF \
	-DCMAKE_INSTALL_PREFIX=/usr -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_INTEGRATION_TESTS=OFF \
	-DDLOCK_BUILD_EXAMPLES=OFF >/dev/null

debug: bootstrap
	$(STAGE) "build (debug, ASan+UBSan)" -- sh -c '$(DEBUG_CONFIG) && cmake --build build/debug -j $(JOBS)'

release: bootstrap
	@$(RELEASE_CONFIG)
	@cmake --build build/release -j $(JOBS)

# The demo needs only the `dlock` binary: build that target alone.
demo: bootstrap
	@$(RELEASE_CONFIG)
	@cmake --build build/release -j $(JOBS) --target dlock-cli
	@build/release/tools/dlock-cli/dlock demo

# The inner loop: no Sentinel group, Redis Cluster, CLI, fault or soak run, 300 schedules.
CHECK_SKIP = ^(Cli|cli\.|Cluster|Sentinel|Memory|Tls|Quarantine|ReplicationGuard|SimNodeDiff|example\.)
check:
	@scripts/stage begin check
	@$(MAKE) --no-print-directory debug
	$(STAGE) "ctest: unit, single-node integration, sim" -- sh -c 'cd build/debug && DLOCK_SIM_SEEDS=300 ctest --output-on-failure -j $(TEST_JOBS) --timeout 300 -L "unit|integration|sim" -LE sweep -E "$(CHECK_SKIP)" $(CTEST_ARGS)'
	@scripts/stage report

# The README's test command: everything that can find a bug in the library, built once.
test:
	@scripts/stage begin test
	@$(MAKE) --no-print-directory debug
	$(STAGE) "ctest: unit, integration, fault, soak, sim" -- sh -c 'cd build/debug && ctest --output-on-failure -j $(TEST_JOBS) --timeout 300 -LE "sweep|nemesis" $(CTEST_ARGS)'
	@$(MAKE) --no-print-directory sweep SIM_SEEDS=$(TEST_SIM_SEEDS)
	@scripts/stage report

# What CI runs (.ci/run): `make test` first, then what checks the build and the packaging rather
# than the library's behaviour, and the slow sanitizer and the fuzzers.
# scripts/check-install installs the library as a user would (static, then shared, then the
# Debian packages) and builds, links and runs a consumer (a shared library and an executable on
# it, -Wall -Wextra -Werror) through find_package and pkg-config, and the examples;
# `make docs` must pass without a warning.
ci:
	@scripts/stage begin ci
	@DLOCK_STAGE_WITHIN=ci $(MAKE) --no-print-directory test
	@$(MAKE) --no-print-directory nemesis-run
	$(STAGE) "install and package checks" -- env JOBS=$(JOBS) scripts/check-install build/debug/tests/run_with_redis
	$(STAGE) "API reference (doxygen)" -- $(MAKE) --no-print-directory docs
	@$(MAKE) --no-print-directory tsan
	$(STAGE) "fuzzers (FUZZ_SECONDS=$(FUZZ_SECONDS) each)" -- env JOBS=$(JOBS) scripts/fuzz $(FUZZ_SECONDS)
	@scripts/stage report

# The unit and integration tests built once more with ThreadSanitizer in build/tsan (target
# dlock_tests: no fault suite, soak run, sweep, fuzz replays or examples) and run there; a race
# fails its test. tests/tsan.supp lists the reports that are not dlock's, and
# atexit_sleep_ms=0 spares each test process TSan's 1 s wait at exit.
TSAN_TEST_OPTIONS = suppressions=$(CURDIR)/tests/tsan.supp atexit_sleep_ms=0
# One test per core: a ThreadSanitizer process keeps its core busy, unlike the ASan suite's.
TSAN_TEST_JOBS ?= $(JOBS)
tsan: bootstrap
	$(STAGE) "build (ThreadSanitizer)" -- sh -c 'cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DDLOCK_SANITIZE=thread -DDLOCK_WERROR=ON -DDLOCK_BUILD_EXAMPLES=OFF >/dev/null && cmake --build build/tsan -j $(JOBS) --target dlock_tests'
	$(STAGE) "ctest under TSan: unit, integration" -- sh -c 'cd build/tsan && TSAN_OPTIONS="$(TSAN_TEST_OPTIONS)" ctest --output-on-failure -j $(TSAN_TEST_JOBS) --timeout 300 -L "unit|integration" -LE "fault|soak|sweep" -E "^fuzz\." $(CTEST_ARGS)'

# The nemesis (tests/fault/nemesis_test.cpp): real partitions, one-way cuts and flapping links
# between network namespaces, paused holders, restarted nodes and clients' clocks jumped
# (libfaketime), as root (the tests skip, saying why, elsewhere). `make ci` runs
# the short mode; `make nemesis NEMESIS_SECONDS=120` runs each schedule that long, and
# DLOCK_NEMESIS_SEED=<n> replays one.
NEMESIS_SECONDS ?= 12
nemesis: bootstrap
	@$(DEBUG_CONFIG)
	@cmake --build build/debug -j $(JOBS) --target dlock_fault_tests fault_worker
	@$(MAKE) --no-print-directory nemesis-run
nemesis-run:
	$(STAGE) "nemesis (network namespaces, $(NEMESIS_SECONDS) s a schedule)" -- sh -c 'cd build/debug && DLOCK_NEMESIS_SECONDS=$(NEMESIS_SECONDS) ctest --output-on-failure --timeout 900 -L nemesis $(CTEST_ARGS)'

# The libFuzzer targets, built with clang in build/fuzz, each run for FUZZ_SECONDS (scripts/fuzz).
FUZZ_SECONDS ?= 25
fuzz: bootstrap
	@JOBS=$(JOBS) scripts/fuzz $(FUZZ_SECONDS)

# The simulator's sweep (tests/sim, docs/guarantees.md) at scale: SIM_SEEDS seeded schedules,
# a sixth per configuration family, in the debug configuration's sim_sweep: the simulator and
# dlock's sans-io engine compiled once more, optimized and without sanitizers (the suite above
# runs a shorter sweep under ASan/UBSan). About 130 s for 100,000 on 2 cores; a failing seed
# prints its trace, and DLOCK_SIM_SEED=<n> replays it (tests/sim/sim_explore_test.cpp).
# `make test` runs TEST_SIM_SEEDS of them, within its budget; `make sim` SIM_SEEDS.
SIM_SEEDS ?= 100000
TEST_SIM_SEEDS ?= 50000
sim: bootstrap
	@$(DEBUG_CONFIG)
	@$(MAKE) --no-print-directory sweep
sweep:
	$(STAGE) "build (simulator sweep, -O2)" -- cmake --build build/debug -j $(JOBS) --target sim_sweep
	$(STAGE) "simulator sweep ($(SIM_SEEDS) schedules)" -- sh -c 'cd build/debug && { DLOCK_SIM_SEEDS=$(SIM_SEEDS) ctest -V -j $(JOBS) --timeout 900 -L sweep >sweep.log 2>&1; status=$$?; \
	  grep -E "schedules in|Test +#|tests passed|Total Test time" sweep.log; \
	  [ $$status -eq 0 ] || { tail -n 400 sweep.log; echo "sim: the sweep failed; build/debug/sweep.log has it all"; exit 1; }; }'

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

# The packages are built from the release configuration: a static libdlock, for /usr.
package: bootstrap
	@$(RELEASE_CONFIG)
	@cmake --build build/release -j $(JOBS)
	@cd build/release && cpack -G DEB >/dev/null && ls -1 $(CURDIR)/build/release/*.deb

# Undocumented public names and broken references are errors (docs/Doxyfile).
docs: bootstrap
	@doxygen docs/Doxyfile && echo "docs: build/docs/html/index.html"

clean:
	rm -rf build
