/* libFuzzer harness: calibration cache parsing (src/quant/calib_cache.c). The header must name
 * kiln's model/data hashes and method to be accepted, so the harness expects fixed ones (the
 * seeds use them). Property checked on every accepted cache: writing it back and reading that
 * again gives the same table (names, scales, amax, header), i.e. the format round-trips. */
#include "fuzz_common.h"
#include "quant/quant.h"
#include <math.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MODEL_HASH 0x0123456789abcdefull
#define FUZZ_DATA_HASH 0xfedcba9876543210ull
#define FUZZ_METHOD "minmax"

static bool same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

static void check_round_trip(const kiln_calib_table *t)
{
    static char path[4096];
    if (!path[0])
        snprintf(path, sizeof path, "%s/calib.%d.cache", fuzz_init(), (int)getpid());   /* per process: parallel workers share the directory */
    if (kiln__calib_cache_write(path, t) != KILN_OK)
        abort();   /* anything the parser accepts must be writable */
    kiln_calib_table u = {0};
    bool exists = false;
    if (kiln__calib_cache_read(path, FUZZ_MODEL_HASH, false, 0, FUZZ_METHOD, &u, &exists) != KILN_OK ||
        !exists)
        abort();   /* ... and what kiln writes it must read back */
    if (u.n != t->n || u.rows != t->rows || u.model_hash != t->model_hash || u.data_hash != t->data_hash ||
        strcmp(u.method, t->method))
        abort();
    for (int i = 0; i < t->n; i++)
        if (strcmp(u.name[i], t->name[i]) || !same_float(u.scale[i], t->scale[i]) ||
            !same_float(u.amax[i], t->amax[i]))
            abort();
    kiln__calib_table_free(&u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    /* data_known false: caches written without the data (kiln calibrate --calib-cache on reuse) */
    bool data_known = size > 0 && (data[size - 1] & 1);
    kiln_calib_table t = {0};
    kiln_status st =
        kiln__calib_cache_parse("fuzz.cache", text, size, FUZZ_MODEL_HASH, data_known, FUZZ_DATA_HASH, FUZZ_METHOD, &t);
    fuzz_note("parse", st);
    if (st == KILN_OK) {
        if (t.n < 0 || (t.n && (!t.name || !t.scale || !t.amax)))
            abort();
        check_round_trip(&t);
        kiln__calib_table_free(&t);
    }
    free(text);
    kiln_clear_last_error();
    return 0;
}
