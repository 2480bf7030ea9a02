# kiln — the two entry points: `make demo` and `make test`. Both bootstrap their dependencies.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all bootstrap build build-asan build-tsan test test-fast test-asan test-tsan test-gpu demo clean

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
# tests under ThreadSanitizer, then the fuzz reproducers and a short fuzz run of every harness.
test: test-fast test-asan test-tsan test-fuzz

test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j2

test-asan: build-asan
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j2 -L sanitize

# On a machine with an NVIDIA GPU (docs/CUDA.md): the CUDA backend's per-layer and model checks
# against the CPU; fails (rather than skips) when the module or the GPU is missing.
test-gpu: build
	@$(BUILD)/test_gpu --require-gpu

test-tsan: build-tsan
	@cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --output-on-failure -j2 -L tsan

# ---- fuzzing (docs/FUZZING.md): libFuzzer harnesses built by clang into build-fuzz/ ----
FUZZ_SECONDS ?= 300
FUZZ_CI_SECONDS ?= 10
.PHONY: build-fuzz fuzz-corpus fuzz test-fuzz

build-fuzz: bootstrap
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j$(JOBS)

fuzz-corpus: build-fuzz
	@tests/fuzz/make_corpus.sh

# every harness for FUZZ_SECONDS, one after another, growing build-fuzz/corpus/
fuzz: fuzz-corpus
	@tests/fuzz/run.sh $(FUZZ_SECONDS)

# CI: replay tests/fuzz/regress/, then every harness for FUZZ_CI_SECONDS with a fixed seed
test-fuzz: fuzz-corpus
	@cd build-fuzz && ctest --output-on-failure -L fuzz
	@FUZZ_SEED=1 tests/fuzz/run.sh $(FUZZ_CI_SECONDS)
# ---- end fuzzing ----

demo: build
	@scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz
