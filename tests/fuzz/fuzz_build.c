/* libFuzzer harness: the whole build path. ONNX import, a budgeted run on synthetic inputs (a
 * model whose run exceeds the budget stops here), then kiln_build (optimization passes,
 * calibration run, memory plan; no tactic timing), serialization, reload and one run of the
 * reloaded engine through an execution context. Seeds: the same models as fuzz_onnx. */
#include "fuzz_common.h"
#include "runtime/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_init();
    kiln_model_t m = NULL;
    kiln_status st = kiln_model_load_buffer(data, size, dir, &m);
    fuzz_note("import", st);
    kiln_tensor ins[FUZZ_MAX_INPUTS];
    if (st == KILN_OK && kiln_model_check_supported(m) == KILN_OK && fuzz_make_inputs(m->g, NULL, ins)) {
        /* the builder's calibration run does about the work of this run: build unless it
         * hit the budget (a kernel error is fine: calibration then keeps defaults) */
        kiln_status run = fuzz_run_budgeted(m->g, ins);
        if (run != KILN_ERR_LIMIT) {
            kiln_build_options o = {.num_threads = 1, .no_tactics = true};
            kiln_engine_t e = NULL, e2 = NULL;
            void *buf = NULL;
            size_t len = 0;
            size_t old_max = kiln__max_tensor_bytes();
            kiln_set_max_tensor_bytes(FUZZ_RUN_MAX_TENSOR_BYTES);
            st = kiln_build(m, &o, &e);
            fuzz_note("build", st);
            if (st == KILN_OK)
                st = kiln_engine_serialize(e, &buf, &len);
            if (st == KILN_OK)
                st = kiln_engine_load_buffer(buf, len, &e2);
            fuzz_note("serialize + reload", st);
            kiln_set_max_tensor_bytes(old_max);
            kiln_tensor ins2[FUZZ_MAX_INPUTS];
            if (st == KILN_OK && run == KILN_OK && fuzz_make_inputs(e2->g, e2, ins2)) {
                fuzz_run_context(e2, ins2);
                fuzz_free_inputs(e2->g, ins2);
            }
            kiln_engine_free(e2);
            kiln_engine_free(e);
            kiln_free(buf);
        }
        fuzz_free_inputs(m->g, ins);
    }
    kiln_model_free(m);
    kiln_clear_last_error();
    return 0;
}
