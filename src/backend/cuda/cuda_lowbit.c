/* Low-bit weights in device memory (cuda_lowbit.h): the FP8 and 4-bit layers' weights, uploaded once per
 * layer from the CPU backend's KILN_PREP_LOWBIT_W blob. */
#include "cuda_lowbit.h"
#include <stdlib.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)

/* A parsed blob is of format fmt (tensor: FP8 with one scale per tensor) */
static bool blob_fmt(const kiln_lowbit_blob *L, kiln__qfmt fmt, bool tensor)
{
    return L->fmt == fmt && L->tensor == (fmt == KILN_QF_FP8 && tensor);
}

bool cu_lowbit_blob_is(const void *blob, size_t size, kiln__qfmt fmt, bool tensor)
{
    kiln_lowbit_blob L;
    return kiln__lowbit_blob_parse(blob, size, &L) && blob_fmt(&L, fmt, tensor);
}

static void lowbit_w_free(void *p)
{
    cu_lowbit_w *w = p;
    if (w->dev && w->own)
        *w->own -= w->L.total;
    cudaFree(w->dev);
    free(w);
}

static kiln_status upload(cu_be *b, cu_lowbit_w *w, const void *blob, size_t size, kiln__qfmt fmt, bool tensor,
                          int64_t N, int64_t K, int64_t rs)
{
    kiln_lowbit_blob L;
    const uint8_t *payload = kiln__lowbit_blob_parse(blob, size, &L);
    if (!payload || !blob_fmt(&L, fmt, tensor) || L.rows != N || L.k != K ||
        (rs > 1 && (fmt != KILN_QF_FP8 || L.trans || K % rs)))
        return cu_err(b, KILN_ERR_PARSE, "a %s weight blob that does not fit its layer",
                      fmt == KILN_QF_FP8 ? "FP8" : "4-bit");
    uint8_t *perm = NULL;
    if (rs > 1) {   /* filters KCRS -> KRSC: element (n, c, p) to (n, p, c) */
        if (!(perm = malloc(L.total)))
            return cu_err(b, KILN_ERR_NOMEM, "out of memory");
        memcpy(perm, payload, L.total);
        int64_t C = K / rs;
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t p = 0; p < rs; p++)
                    perm[n * K + p * C + c] = payload[n * K + c * rs + p];
        payload = perm;
    }
    if (w->dev) {
        *w->own -= w->L.total;
        cudaFree(w->dev);
        w->dev = NULL;
    }
    kiln_status st = cu_check(b, cudaMalloc((void **)&w->dev, L.total), "allocating a low-bit weight");
    if (st == KILN_OK) {
        w->L = L;
        *w->own += L.total;
        memcpy(&w->ts, payload + L.off_t, sizeof w->ts);
        st = cu_check(b, cudaMemcpyAsync(w->dev, payload, L.total, cudaMemcpyHostToDevice, b->stream),
                      "copying a low-bit weight");
    }
    if (st == KILN_OK)
        st = cu_check(b, cudaStreamSynchronize(b->stream), "copying a low-bit weight");
    free(perm);
    return st;
}

kiln_status cu_lowbit_weight(cu_be *b, const kiln_kctx *ctx, int slot, kiln__qfmt fmt, bool tensor, int64_t N,
                             int64_t K, int64_t rs, cu_lowbit_w **out)
{
    int64_t key[1] = {slot};
    cu_lowbit_w *w = cu_state_get(b, ctx->node, key, 1);
    const kiln_tensor *W = IN(1);
    const void *src = ctx->prepared ? ctx->prepared : W ? W->data : NULL;
    unsigned long gen = cu_weights_gen();
    if (w && w->dev && w->src == src && w->gen == gen) {
        *out = w;
        return KILN_OK;
    }
    if (b->capturing)
        return cu_not_in_capture(b, "copying a low-bit weight");
    if (!src)
        return cu_kerr(b, (kiln_kctx *)ctx, KILN_ERR_UNSUPPORTED, "no packed low-bit weight and no float32 weight");
    if (!w) {
        if (!(w = calloc(1, sizeof *w)))
            return cu_err(b, KILN_ERR_NOMEM, "out of memory");
        w->own = &b->own_weight_bytes;
        kiln_status pst = cu_state_put(b, ctx->node, key, 1, w, lowbit_w_free);
        if (pst != KILN_OK) {
            free(w);
            return pst;
        }
    }
    w->src = NULL;
    kiln_status st;
    if (ctx->prepared) {
        st = upload(b, w, ctx->prepared, ctx->prepared_size, fmt, tensor, N, K, rs);
    } else {
        if (W->dtype != KILN_DT_FLOAT32 || (W->flags & KILN_TENSOR_ON_DEVICE))
            return cu_kerr(b, (kiln_kctx *)ctx, KILN_ERR_DTYPE, "a low-bit layer needs its float32 weight on the host");
        void *blob = NULL;
        size_t size = 0;
        st = b->host->lowbit_prep(ctx->node, ctx->n_in, ctx->in, &blob, &size);
        if (st == KILN_OK)
            st = upload(b, w, blob, size, fmt, tensor, N, K, rs);
        b->host->free_blob(blob);
    }
    if (st != KILN_OK)
        return st;
    w->src = src;
    w->gen = gen;
    *out = w;
    return KILN_OK;
}
