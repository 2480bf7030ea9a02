/* libFuzzer harness: ONNX model import from memory, then (when it imports) one run on small
 * synthetic inputs under a work budget. Seeds: model.onnx files of the ONNX backend suite. */
#include "fuzz_common.h"
#include "runtime/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_init();
    kiln_model_t m = NULL;
    kiln_status st = kiln_model_load_buffer(data, size, dir, &m);
    fuzz_note("import", st);
    if (st == KILN_OK) {
        st = kiln_model_check_supported(m);
        fuzz_note("kernels", st);
        kiln_tensor ins[FUZZ_MAX_INPUTS];
        if (st == KILN_OK && fuzz_make_inputs(m->g, NULL, ins)) {
            fuzz_run_budgeted(m->g, ins);
            fuzz_free_inputs(m->g, ins);
        }
        kiln_model_free(m);
    }
    kiln_clear_last_error();
    return 0;
}
