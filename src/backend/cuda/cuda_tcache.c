/* The module's timed choices (device tactics, src/core/devtac.h; docs/CUDA.md "Tactics in the engine"): what
 * each decision made by timing chose -- the cuDNN engine configuration of a fused convolution graph, the FP8
 * convolution's kernel, cuBLASLt or cuDNN for a 1x1 convolution -- recorded per backend instance under the
 * signature of the GPU and library versions (mod_describe's text). Seeded from an engine's DEVICE_TACTICS section
 * (kiln_devmod.tactics_import) and from a timing-cache file (KILN_CUDA_TIMING_CACHE=FILE: read when the instance is
 * created, written back, merged with what the file holds then, when it is destroyed if it timed something); the
 * choices the instance used or timed are handed out for the engine (tactics_export), not the rest of a file's. A
 * recorded choice replaces timing every candidate at the first run (a fused convolution times up to 16 cuDNN plans,
 * each finalized first: most of the ~50 s a `kiln verify --device cuda` of PP-OCRv4 det spent before its first
 * result on the H200). */
#include "cuda_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cu_tc {
    kiln_devtac *t;   /* every choice known: the file's, the engine's, this instance's */
    kiln_devtac *used;   /* the ones this instance used or timed, in that order: what tactics_export hands out */
    char *path;       /* KILN_CUDA_TIMING_CACHE, or NULL */
    bool dirty;       /* timed something the file does not hold */
    int timed;        /* choices this instance timed */
};

void cu_tc_open(cu_be *b, const char *signature)
{
    struct cu_tc *c = calloc(1, sizeof *c);
    if (!c || !(c->t = kiln__devtac_new(signature)) || !(c->used = kiln__devtac_new(signature))) {
        if (c)
            kiln__devtac_free(c->t);
        free(c);
        return;   /* no record: every choice is timed, as without one */
    }
    const char *path = getenv("KILN_CUDA_TIMING_CACHE");
    if (path && path[0] && (c->path = strdup(path)) && kiln__devtac_load(c->t, path) < 0) {
        FILE *f = fopen(path, "rb");
        if (f) {   /* there but not ours */
            fclose(f);
            fprintf(stderr, "kiln cuda: the timing cache %s is not this GPU's or these libraries' (%s): not read\n",
                    path, kiln__devtac_signature(c->t));
        }
    }
    b->tc = c;
}

int cu_tc_get(const cu_be *b, char kind, const void *key, size_t n)
{
    int c = b->tc ? kiln__devtac_get(b->tc->t, kind, key, n) : -1;
    if (c >= 0)
        kiln__devtac_put(b->tc->used, kind, key, n, c);
    return c;
}

void cu_tc_put(cu_be *b, char kind, const void *key, size_t n, int choice)
{
    if (!b->tc)
        return;
    b->tc->timed++;
    kiln__devtac_put(b->tc->used, kind, key, n, choice);
    if (kiln__devtac_put(b->tc->t, kind, key, n, choice))
        b->tc->dirty = true;
}

int cu_tc_import(cu_be *b, const char *text, size_t n)
{
    return b->tc ? kiln__devtac_parse(b->tc->t, text, n) : -1;
}

kiln_status cu_tc_export(cu_be *b, char **text, size_t *n)
{
    *text = NULL;
    *n = 0;
    if (!b->tc || kiln__devtac_count(b->tc->used) == 0)
        return KILN_OK;
    *text = kiln__devtac_text(b->tc->used, n);
    return *text ? KILN_OK : cu_err(b, KILN_ERR_NOMEM, "out of memory");
}

int cu_tc_timed(const cu_be *b) { return b->tc ? b->tc->timed : 0; }

void cu_tc_close(cu_be *b)
{
    struct cu_tc *c = b->tc;
    if (!c)
        return;
    if (c->path && c->dirty && !kiln__devtac_save(c->t, c->path))
        fprintf(stderr, "kiln cuda: could not write the timing cache %s\n", c->path);
    kiln__devtac_free(c->t);
    kiln__devtac_free(c->used);
    free(c->path);
    free(c);
    b->tc = NULL;
}
