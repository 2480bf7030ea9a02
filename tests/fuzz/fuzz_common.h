/* Shared pieces of kiln's libFuzzer harnesses (tests/fuzz/fuzz_*.c): a quiet library set-up,
 * small synthetic inputs for a graph, and a run of a graph under a work budget, so that a model
 * asking for legitimately huge work is skipped instead of being reported as a timeout. */
#ifndef KILN_FUZZ_COMMON_H
#define KILN_FUZZ_COMMON_H
#include "engine/engine.h"
#include <stddef.h>
#include <stdint.h>

/* Largest tensor a fuzzed run may allocate (imports keep kiln's default limit, so memory
 * amplification while parsing is still reported by libFuzzer's -malloc_limit_mb). */
#define FUZZ_RUN_MAX_TENSOR_BYTES ((size_t)16 << 20)
/* Largest synthetic input, in elements. */
#define FUZZ_MAX_INPUT_ELEMS ((int64_t)1 << 18)
/* Estimated element operations one run may do (see node_work in fuzz_common.c). */
#define FUZZ_WORK_BUDGET 3e8
#define FUZZ_MAX_INPUTS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Once per process: silences kiln's log and creates a scratch directory holding small files that
 * external-data locations may name. Returns that directory. KILN_FUZZ_VERBOSE=1 in the environment
 * keeps kiln's log on stderr and prints each step's status (fuzz_note). */
const char *fuzz_init(void);

/* With KILN_FUZZ_VERBOSE set in the environment: prints "what: status: last error" (triage). */
void fuzz_note(const char *what, kiln_status st);

/* Synthetic inputs for g: shapes from the first profile of e (when e is non-NULL and names the
 * input) or from the declared dims, unknown dims set to 1, deterministic small values. false:
 * some input has no usable shape, an unsupported dtype or too many elements (nothing allocated). */
bool fuzz_make_inputs(const kiln_graph *g, const struct kiln_engine *e, kiln_tensor *ins);
void fuzz_free_inputs(const kiln_graph *g, kiln_tensor *ins);

/* Runs g once on ins, single-threaded, with the tensor-size cap and the work budget; validates
 * the inputs as the public run API does first. KILN_ERR_LIMIT when the budget would be exceeded. */
kiln_status fuzz_run_budgeted(const kiln_graph *g, const kiln_tensor *ins);

/* Runs engine e once through an execution context (one thread, the tensor-size cap) on ins,
 * inputs of e->g from fuzz_make_inputs(e->g, e, ins). Call only after fuzz_run_budgeted accepted
 * the same inputs: the context run is not budgeted. */
void fuzz_run_context(kiln_engine_t e, const kiln_tensor *ins);

/* A file path whose content is data (a memfd, rewritten on each call), for readers that only
 * take paths. */
const char *fuzz_memfile(const uint8_t *data, size_t size);

#endif
