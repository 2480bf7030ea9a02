# kiln — the two entry points: `make demo` and `make test`. Both bootstrap their dependencies.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all bootstrap build build-asan build-tsan test test-fast test-asan test-tsan demo clean

all: build

bootstrap:
	@scripts/bootstrap.sh

build: bootstrap
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

build-asan: bootstrap
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j$(JOBS)

# the tests labelled tsan (tests/CMakeLists.txt): only these are built under ThreadSanitizer
TSAN_TESTS = test_threads test_engine test_control

build-tsan: bootstrap
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TSAN=ON >/dev/null
	@cmake --build build-tsan -j$(JOBS) --target $(TSAN_TESTS)

# Everything: unit tests, ONNX conformance suite, models vs ONNX Runtime, mutation test,
# then the unit + conformance + mutation tests again under ASan + UBSan, then the concurrency
# tests under ThreadSanitizer.
test: test-fast test-asan test-tsan

test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j2

test-asan: build-asan
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j2 -L sanitize

test-tsan: build-tsan
	@cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --output-on-failure -j2 -L tsan

demo: build
	@scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-tsan
