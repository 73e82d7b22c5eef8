# The two commands a newcomer needs (see README.md), plus the benchmark.
#   make demo   install what is missing, build (release), run the demo on throwaway redis-servers
#   make test   install what is missing, build (debug + ASan/UBSan, -Werror), run the whole suite
#   make bench  install what is missing, build (release), run the benchmarks
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all bootstrap debug release demo test bench clean

all: release

bootstrap:
	@scripts/bootstrap

debug: bootstrap
	@cmake -S . -B build/debug -DCMAKE_BUILD_TYPE=Debug -DDLOCK_SANITIZE=ON -DDLOCK_WERROR=ON >/dev/null
	@cmake --build build/debug -j $(JOBS)

release: bootstrap
	@cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DDLOCK_WERROR=ON -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_INTEGRATION_TESTS=OFF >/dev/null
	@cmake --build build/release -j $(JOBS)

demo: release
	@build/release/examples/counter_demo

test: debug
	@cd build/debug && ctest --output-on-failure -j $(JOBS) --timeout 300 $(CTEST_ARGS)

clean:
	rm -rf build
