/* libFuzzer harness: engine loading from memory (kiln_engine_load_buffer), then, when it loads,
 * one budgeted run on synthetic inputs at the first profile's opt shapes and one run through an
 * execution context (which adopts the engine's stored memory plan). Section checksums and the
 * header's file size are repaired first, so mutations reach the section parsers; seeds are
 * engines built by `kiln build` (tests/fuzz/make_corpus.sh). */
#include "fuzz_common.h"
#include "runtime/model.h"
#include <stdlib.h>
#include <xxhash.h>

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

static void wr64(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

/* Header: magic[8] version hbytes ver[16] tkind tarch nsections pad table(u64) fsize(u64);
 * section entry (32 bytes): kind pad off(u64) size(u64) xxh3-64(u64). See docs/ENGINE_FORMAT.md. */
static void repair(uint8_t *b, size_t len)
{
    if (len < KILN_ENGINE_HEADER_BYTES)
        return;
    wr64(b + 56, len);
    uint32_t ns = (uint32_t)b[40] | (uint32_t)b[41] << 8 | (uint32_t)b[42] << 16 | (uint32_t)b[43] << 24;
    uint64_t table = rd64(b + 48);
    for (uint32_t i = 0; i < ns && i < 16 && table <= len && (len - table) / 32 > i; i++) {
        uint8_t *ent = b + table + 32 * i;
        uint64_t off = rd64(ent + 8), sz = rd64(ent + 16);
        if (off > len || sz > len - off)
            continue;
        wr64(ent + 24, (uint64_t)XXH3_64bits(b + off, (size_t)sz));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    uint8_t *b = malloc(size + 1);
    if (!b)
        return 0;
    memcpy(b, data, size);
    repair(b, size);
    kiln_engine_t e = NULL;
    kiln_status st = kiln_engine_load_buffer(b, size, &e);
    fuzz_note("load", st);
    if (st == KILN_OK) {
        kiln_tensor ins[FUZZ_MAX_INPUTS];
        if (fuzz_make_inputs(e->g, e, ins)) {
            const char *names[FUZZ_MAX_INPUTS];
            for (int i = 0; i < e->g->n_inputs; i++)
                names[i] = e->g->values[e->g->inputs[i]].name;
            /* the context run does the same work as the budgeted one: only after it fits */
            if (kiln__engine_check_profiles(e, e->g->n_inputs, names, ins) == KILN_OK &&
                fuzz_run_budgeted(e->g, ins) == KILN_OK)
                fuzz_run_context(e, ins);
            fuzz_free_inputs(e->g, ins);
        }
        kiln_engine_free(e);
    }
    free(b);
    kiln_clear_last_error();
    return 0;
}
