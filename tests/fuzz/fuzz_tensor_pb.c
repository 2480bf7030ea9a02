/* libFuzzer harness: the ONNX TensorProto (.pb) reader, from memory (kiln__onnx_tensor_parse,
 * what kiln_tensor_pb_read calls after reading the file). */
#include "fuzz_common.h"
#include "onnx/onnx_import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    kiln_tensor t;
    char *name = NULL;
    memset(&t, 0, sizeof t);
    kiln_status st = kiln__onnx_tensor_parse(data, size, &t, &name);
    fuzz_note("read", st);
    if (st == KILN_OK) {
        kiln__tensor_release(&t);
        kiln__free(name);
    }
    kiln_clear_last_error();
    return 0;
}
