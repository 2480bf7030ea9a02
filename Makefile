# kiln — the two entry points: `make demo` and `make test`. Both bootstrap their dependencies.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all bootstrap build build-asan test test-fast test-asan demo clean

all: build

bootstrap:
	@scripts/bootstrap.sh

build: bootstrap
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

build-asan: bootstrap
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j$(JOBS)

# Everything: unit tests, ONNX conformance suite, models vs ONNX Runtime, mutation test,
# then the unit + conformance + mutation tests again under ASan + UBSan, then a short fuzz run.
test: test-fast test-asan test-fuzz

test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j2

test-asan: build-asan
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j2 -L sanitize

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
	rm -rf $(BUILD) build-asan build-fuzz
