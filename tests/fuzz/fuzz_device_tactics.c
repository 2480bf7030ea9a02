/* libFuzzer harness: device tactics text (src/core/devtac.c: an engine's DEVICE_TACTICS section, a CUDA timing
 * cache). The text is read under its own signature; what was read, written out and read again, must give the same
 * choices and the same text (the writer's output is always a text the reader takes whole). */
#include "fuzz_common.h"
#include "core/devtac.h"
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    const char *text = (const char *)data;
    char sig[512];
    if (!kiln__devtac_text_signature(text, size, sig, sizeof sig))
        sig[0] = '\0';
    kiln_devtac *a = kiln__devtac_new(sig), *b = kiln__devtac_new(sig);
    if (!a || !b)
        abort();
    int got = kiln__devtac_parse(a, text, size);
    if (got > (int)size)
        abort();
    size_t n1 = 0, n2 = 0;
    char *t1 = kiln__devtac_text(a, &n1);
    if (!t1 || kiln__devtac_parse(b, t1, n1) != kiln__devtac_count(a) || kiln__devtac_count(b) != kiln__devtac_count(a))
        abort();
    char *t2 = kiln__devtac_text(b, &n2);
    if (!t2 || n1 != n2 || memcmp(t1, t2, n1))
        abort();
    free(t1);
    free(t2);
    kiln__devtac_free(a);
    kiln__devtac_free(b);
    return 0;
}
