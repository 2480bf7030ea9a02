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
# then the unit + conformance + mutation tests again under ASan + UBSan.
test: test-fast test-asan

test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j2

test-asan: build-asan
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j2 -L sanitize

demo: build
	@scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-asan
