/* libFuzzer harness: the .npy reader (kiln_npy_read, through an in-memory file). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    kiln_tensor t;
    kiln_status st = kiln_npy_read(fuzz_memfile(data, size), &t);
    fuzz_note("read", st);
    if (st == KILN_OK)
        kiln_free(t.data);
    kiln_clear_last_error();
    return 0;
}
