/* FP8 layers on the GPU (docs/CUDA.md, "FP8"): a MatMul / FusedMatMul / Gemm / FusedGemm that the builder marked
 * fp8 (kiln_wq "fp8", kiln_aq "fp8" with its calibrated kiln_aq_scale; PRECISION.md) runs as one cuBLASLt FP8
 * GEMM: E4M3 activations and weights, each with its per-tensor scale (the weight's in device memory, the
 * activation's folded into alpha; the builder marks a --device cuda build's FP8 layers kiln_wq_tensor so the CPU
 * emulates and bias-corrects them with that per-tensor weight scale), FP32 accumulation, the output in FP16 by
 * default (KILN_CUDA_FP8_OUT=fp32|fp16|bf16; a half activation's storage or KILN_CUDA_ACT win), bias / ReLU in
 * cuBLASLt's epilogue where it has one. The weight is the CPU backend's KILN_PREP_LOWBIT_W blob with one scale
 * per tensor (backend/lowbit_blob.h: E4M3 bytes [N, K], the "TN" layout cuBLASLt's FP8 kernels need, and
 * s = amax / 448): the engine's, or the host service lowbit_prep's packing of the float32 weight for a graph run
 * without an engine; copied to the device once per layer (cuda_lowbit.c), the only copy of the weight the layer
 * keeps there. The activation is quantized into a scratch buffer per run with the same rounding (round to
 * nearest even, saturating), so the GPU computes what the CPU emulates up to the order of the sums. Shapes
 * cuBLASLt's FP8 kernels do not take (K or N not a multiple of 16, Gemm's transA, a batched weight) are not
 * accepted: such a layer falls back to the CPU, visibly (counted; an error with --strict-device). */
#include "cuda_gemm.h"
#include "cuda_lowbit.h"
#include <math.h>
#include <stdlib.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)
#define FP8_SLOT 60   /* the state slot of a layer's packed weight */
#define DS_SLOT 67    /* 1 / the scale of its E4M3 output written by cuBLASLt (lt_gelu_wanted) */
#define NO_LT_SLOT 68 /* cuBLASLt refused that GEMM */

bool cu_fp8_layer(const cu_be *b, const kiln_node *n, float *ascale)
{
    if (!n || (!cu_wgemm_op(n->op) && n->op != KILN_OP_Conv && n->op != KILN_OP_FusedConv))
        return false;
    const char *wq = b->host->attr_s(n, "kiln_wq", NULL), *aq = b->host->attr_s(n, "kiln_aq", NULL);
    float s = b->host->attr_f(n, "kiln_aq_scale", NAN);
    if (!wq || !aq || strcmp(wq, "fp8") || strcmp(aq, "fp8") || !(s > 0 && isfinite(s)))
        return false;
    /* one weight scale per tensor is what this GEMM computes: a layer built with one per output channel
     * (a CPU engine's FP8, docs/PRECISION.md) is not this precision, so it stays on the CPU (counted) */
    if (b->host->attr_i(n, "kiln_wq_tensor", 0) != 1)
        return false;
    if (ascale)
        *ascale = s;
    return true;
}

/* K, N of the layer and whether its weight is [K, N] (trans: MatMul, Gemm without transB); false when
 * the FP8 GEMM cannot take the operands. */
static bool fp8_dims(const cu_be *b, const kiln_node *n, const kiln_tensor *a, const kiln_tensor *w, int64_t *K,
                     int64_t *N, bool *trans)
{
    if (!w || w->dtype != KILN_DT_FLOAT32 || !cu_wgemm_dims(b, n, a, w, K, N, trans))
        return false;
    /* cuBLASLt's FP8 kernels: leading dimensions of 16 bytes, sizes multiples of 16 */
    return *K % 16 == 0 && *N % 16 == 0;
}

bool cu_fp8_accepts(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    if (n->op == KILN_OP_Conv || n->op == KILN_OP_FusedConv)
        return cu_fp8_conv_accepts(b, n, n_in, in);
    int64_t K, N;
    bool trans;
    return n_in >= 2 && fp8_dims(b, n, in[0], in[1], &K, &N, &trans);
}

/* The engine's blob fits this layer: FP8 with one scale per tensor (checked again against the operands when it
 * runs) */
bool cu_fp8_reads_blob(const cu_be *b, const kiln_node *n, const void *blob, size_t size)
{
    return cu_fp8_layer(b, n, NULL) && cu_lowbit_blob_is(blob, size, KILN_QF_FP8, true);
}

/* The output's storage: KILN_CUDA_ACT's, a half input's, else KILN_CUDA_FP8_OUT's (FP16 by default). */
kiln_dtype cu_fp8_out_sdt(const cu_be *b, const kiln_tensor *a)
{
    if (b->force_act != KILN_DT_UNDEFINED)
        return b->force_act;
    if (a->flags & KILN_TENSOR_DEV_HALF)
        return cu_sdt(a);
    return b->fp8_out;
}

static void kept_drop(cu_be *b, int i)
{
    cu_tmp_free(b, &b->fp8_kept[i].q);   /* used in stream order only */
    memset(&b->fp8_kept[i], 0, sizeof b->fp8_kept[i]);
}

void cu_fp8_forget(cu_be *b)
{
    for (int i = 0; i < CU_FP8_KEPT; i++)
        kept_drop(b, i);
    /* the held outputs stay: their bytes are their tensors' own, which writes outside the layers (weights uploaded
     * at their first use, inputs) do not touch; a stale entry is only ever matched by a tensor that carries
     * KILN_TENSOR_DEV_E4M3, which only a storing producer sets, replacing the entry of its bytes */
    b->fp8_pin = b->fp8_new = 0;
}

/* Entry e (kept or stored) dropped when one of the layer's outputs overlaps its source; true if so. */
static bool overlapped(const struct cu_fp8_kept *e, const kiln_kctx *ctx)
{
    const char *lo = e->src, *hi = lo + e->bytes;
    const kiln_tensor *x = IN(0);
    for (int i = 0; i < ctx->n_out; i++) {
        const kiln_tensor *t = ctx->out[i];
        if (i == 0 && t && x && kiln__op_is_view(ctx->node->op) && t->data == x->data && t->nbytes == x->nbytes)
            continue;   /* the same bytes under new dims (copy_as): nothing written */
        if (t && t->data && t->nbytes && (const char *)t->data < hi && (const char *)t->data + t->nbytes > lo)
            return true;
    }
    return false;
}

void cu_fp8_store(cu_be *b, kiln_tensor *y, float s)
{
    int k = 0;
    for (int i = 0; i < CU_FP8_STORED; i++) {   /* the entry of these bytes, else a free one, else the oldest */
        const struct cu_fp8_kept *e = &b->fp8_stored[i], *o = &b->fp8_stored[k];
        if (e->valid && e->src == y->data) {
            k = i;
            break;
        }
        if ((!e->valid && o->valid) || (e->valid == o->valid && e->used < o->used))
            k = i;
    }
    struct cu_fp8_kept *e = &b->fp8_stored[k];
    memset(e, 0, sizeof *e);
    b->fp8_held++;
    e->valid = e->fresh = e->feed = true;
    e->src = y->data;
    e->bytes = y->nbytes;
    e->scale = s;
    e->fdt = cu_fdt(cu_sdt(y));
    e->used = ++b->fp8_clock;
    e->q.dtype = KILN_DT_UINT8;
    e->q.ndim = 1;
    e->q.dims[0] = cu_numel(y);
    e->q.nbytes = (size_t)cu_numel(y);
    e->q.data = y->data;
    y->flags |= KILN_TENSOR_DEV_E4M3;
}

/* The held entry of t's bytes (marked used), or NULL */
static struct cu_fp8_kept *stored_entry(cu_be *b, const kiln_tensor *t)
{
    for (int i = 0; i < CU_FP8_STORED; i++) {
        struct cu_fp8_kept *e = &b->fp8_stored[i];
        if (e->valid && !e->fresh && e->src == t->data && e->q.nbytes == (size_t)cu_numel(t)) {
            e->used = ++b->fp8_clock;
            return e;
        }
    }
    return NULL;
}

const uint8_t *cu_fp8_stored(cu_be *b, const kiln_tensor *t, float *s)
{
    const struct cu_fp8_kept *e = stored_entry(b, t);
    if (!e)
        return NULL;
    *s = e->scale;
    return e->q.data;
}

void cu_fp8_wrote(cu_be *b, const kiln_kctx *ctx, kiln_status st)
{
    if (st != KILN_OK) {
        cu_fp8_forget(b);
        return;
    }
    for (int k = 0; k < CU_FP8_KEPT; k++) {
        struct cu_fp8_kept *e = &b->fp8_kept[k];
        if (!e->valid) {
            if (e->q.data)   /* a feed made but not fed */
                kept_drop(b, k);
            continue;
        }
        if (e->fresh)   /* the feed this layer wrote with its output */
            e->fresh = false;
        else if (overlapped(e, ctx))
            kept_drop(b, k);
    }
    for (int k = 0; k < CU_FP8_STORED; k++) {
        struct cu_fp8_kept *e = &b->fp8_stored[k];
        if (e->fresh)
            e->fresh = false;
        else if (e->valid && overlapped(e, ctx))
            memset(e, 0, sizeof *e);
    }
    b->fp8_pin = b->fp8_new = 0;
}

void cu_fp8_unpin(cu_be *b)
{
    if (b->fp8_pin)
        kept_drop(b, b->fp8_pin - 1);
    b->fp8_pin = 0;
}

/* A free entry with numel bytes of scratch (the oldest kept one replaced, never the one the running layer reads):
 * its index, or -1 (out of memory: nothing kept then). */
static int kept_new(cu_be *b, int64_t numel)
{
    int k = -1;
    for (int i = 0; i < CU_FP8_KEPT; i++) {
        const struct cu_fp8_kept *e = &b->fp8_kept[i];
        if (i + 1 == b->fp8_pin || i + 1 == b->fp8_new)
            continue;
        if (k < 0 || (!e->valid && b->fp8_kept[k].valid) ||
            (e->valid == b->fp8_kept[k].valid && e->used < b->fp8_kept[k].used))
            k = i;
    }
    if (k < 0)
        return -1;
    kept_drop(b, k);
    if (cu_tmp(b, &b->fp8_kept[k].q, KILN_DT_UINT8, 1, (const int64_t[]){numel}) != KILN_OK) {
        cu_fp8_forget(b);
        return -1;
    }
    return k;
}

/* Entry k (its scratch queued to be written) becomes the kept quantization of x with scale s; feed: written by
 * x's producer. */
static void kept_set(cu_be *b, int k, const kiln_tensor *x, float s, bool feed)
{
    struct cu_fp8_kept *e = &b->fp8_kept[k];
    e->valid = true;
    e->feed = e->fresh = feed;
    e->src = x->data;
    e->bytes = (size_t)cu_numel(x) * cu_tes(x);
    e->scale = s;
    e->fdt = cu_fdt(cu_sdt(x));
    e->used = ++b->fp8_clock;
}

uint8_t *cu_fp8_feed(cu_be *b, const kiln_kctx *ctx, const kiln_tensor *y, float *scale)
{
    if (!b->fp8_feed || !y || !y->data || !y->nbytes)
        return NULL;
    float s = b->host->attr_f(ctx->node, KILN_ATTR_FP8_FEED, NAN);
    /* channels-last outputs (FP8 convolutions) feed FP8 convolutions, which read them so; an FP8 GEMM reading one
     * gets a relaid copy at another address, so it never takes this feed for its own */
    if (!(s > 0 && isfinite(s)) || cu_fdt(cu_sdt(y)) < 0)
        return NULL;
    int k = kept_new(b, cu_numel(y));
    if (k < 0)
        return NULL;   /* the FP8 layers quantize it themselves */
    b->fp8_new = k + 1;
    *scale = s;
    return b->fp8_kept[k].q.data;
}

void cu_fp8_fed(cu_be *b, const kiln_tensor *y, float scale)
{
    if (b->fp8_new)
        kept_set(b, b->fp8_new - 1, y, scale, true);
}

kiln_status cu_fp8_act(cu_be *b, const kiln_tensor *A, int64_t numel, float s, const kiln_tensor **q)
{
    const int fdt = cu_fdt(cu_sdt(A));
    for (int k = 0; k < CU_FP8_KEPT; k++) {
        struct cu_fp8_kept *e = &b->fp8_kept[k];
        if (e->valid && !e->fresh && e->src == A->data && e->q.nbytes == (size_t)numel && e->scale == s &&
            e->fdt == fdt) {
            b->fp8_fed += e->feed;
            e->used = ++b->fp8_clock;
            b->fp8_pin = k + 1;
            *q = &e->q;
            return KILN_OK;
        }
    }
    const struct cu_fp8_kept *held = A->flags & KILN_TENSOR_DEV_E4M3 ? stored_entry(b, A) : NULL;
    if (held && held->scale == s) {   /* an output held only as E4M3, with this scale */
        b->fp8_fed++;
        *q = &held->q;
        return KILN_OK;
    }
    if (A->flags & KILN_TENSOR_DEV_E4M3)   /* its float bytes were never written */
        return cu_err(b, KILN_ERR_INTERNAL, held ? "an E4M3-held input read with another scale"
                                                 : "an E4M3-held input no longer kept");
    b->fp8_passes++;
    int k = kept_new(b, numel);
    if (k < 0)
        return cu_err(b, KILN_ERR_NOMEM, "out of device memory for FP8 activations");
    kiln_status st = cu_check(b, cuk_fp8_quant(fdt, A->data, b->fp8_kept[k].q.data, numel, s, b->stream),
                              "quantizing activations to FP8");
    if (st != KILN_OK) {
        cu_fp8_forget(b);
        return st;
    }
    kept_set(b, k, A, s, false);
    b->fp8_pin = k + 1;
    *q = &b->fp8_kept[k].q;
    return KILN_OK;
}

/* An E4M3-stored GELU output written by cuBLASLt's GEMM (cu_be.fp8_lt_gelu): tanh GELU is its epilogue's own; exact
 * GELU becomes that tanh form (|d| <= 8.2e-4 on the H200, bench/cublaslt_fp8.cu), well below the E4M3 step of the
 * stored value, counted (kiln_device_stats.fp8_gelu_tanh); C must be half (cuBLASLt's FP8 kernels with an E4M3 D
 * take an FP16 / BF16 C); not where cuBLASLt refused it before (state NO_LT_SLOT). */
static bool lt_gelu_wanted(cu_be *b, const kiln_kctx *ctx, int act, kiln_dtype sdt)
{
    if (!b->fp8_lt_gelu || sdt == KILN_DT_FLOAT32 || (act != CUK_GELU_TANH && (act != CUK_GELU || b->fp8_lt_gelu < 2)))
        return false;
    return !cu_state_get(b, ctx->node, (const int64_t[]){NO_LT_SLOT}, 1);
}

/* The device float 1 / s that cuBLASLt scales an E4M3 output by (q = e4m3(v / s) on the CPU), kept per layer; NULL
 * while capturing a CUDA graph before it was made, or on failure: the layer then takes kiln's epilogue. */
static const float *out_scale(cu_be *b, const kiln_kctx *ctx, float s)
{
    const float *p = NULL;
    return cu_layer_scalar(b, ctx, DS_SLOT, 1.0f / s, &p) == KILN_OK ? p : NULL;
}

kiln_status cu_fp8_run(cu_be *b, kiln_kctx *ctx)
{
    const kiln_node *n = ctx->node;
    const kiln_tensor *A = IN(0), *W = IN(1);
    float as = 0;
    int64_t K, N;
    bool trans;
    if (!cu_fp8_layer(b, n, &as) || !fp8_dims(b, n, A, W, &K, &N, &trans))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "operands the FP8 GEMM does not take");
    wgemm_io io;
    KILN_TRY(cu_wgemm_io(b, ctx, K, N, &io));
    const bool gemm = io.gemm;
    const int act = io.act;
    const float aa = io.aa, ab = io.ab;
    const int64_t numel = io.numel, M = io.M;
    const kiln_tensor *R = io.R, *bias = io.bias;
    kiln_dtype sdt = cu_fp8_out_sdt(b, A);
    cu_lowbit_w *w = NULL;
    KILN_TRY(cu_lowbit_weight(b, ctx, FP8_SLOT, KILN_QF_FP8, true, N, K, 1, &w));
    KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, io.nd, io.dims));
    kiln_tensor *y = ctx->out[0];
    y->flags &= ~KILN_TENSOR_DEV_E4M3;
    if (!y->nbytes)
        return KILN_OK;
    /* an activation kiln's epilogue applies (GELU...) takes the bias there (H200, BERT-base FP8 b128: 6.68 / 6.69 ms
     * against 6.70 / 6.72 in cuBLASLt's epilogue); FP8 storage
     * (build/fp8_feed.c): such an output read only by FP8 GEMMs is held only as E4M3 -- the GEMM writes the
     * pre-activation into a scratch, the epilogue only the E4M3 bytes, into the output's own buffer; or, for GELU
     * (fp8_lt_gelu), cuBLASLt's GEMM writes those bytes itself, GELU (its tanh form) in its epilogue */
    bool late = act != CUK_IDENTITY && act != CUK_RELU;
    float ss = b->host->attr_f(n, KILN_ATTR_FP8_STORE, NAN);
    bool store = late && !gemm && b->fp8_feed && ss > 0 && isfinite(ss);
    const float *ds = store && lt_gelu_wanted(b, ctx, act, sdt) ? out_scale(b, ctx, ss) : NULL;
    kiln_tensor rt, bt, pre;   /* the residual in sdt, the bias in float32, the pre-activation of a stored output */
    memset(&rt, 0, sizeof rt);
    memset(&bt, 0, sizeof bt);
    memset(&pre, 0, sizeof pre);
    const kiln_tensor *r2 = NULL, *b2 = NULL;
    cu_part_mark(b, 4, 0, 2);
    const kiln_tensor *xq = NULL;
    kiln_status st = cu_fp8_act(b, A, numel, as, &xq);
    cu_part_mark(b, 4, 1, 2);
    if (st == KILN_OK && R)
        st = cu_as(b, R, sdt, &rt, &r2);
    if (st == KILN_OK && bias)
        st = cu_as(b, bias, KILN_DT_FLOAT32, &bt, &b2);
    if (st == KILN_OK && store)   /* with ds: cuBLASLt's C, never read (beta 0), a buffer apart from the E4M3 D */
        st = cu_tmp(b, &pre, sdt, io.nd, io.dims);
    float alpha = gemm ? b->host->attr_f(n, "alpha", 1.0f) : 1.0f;
    /* B: the blob's E4M3 elements [N, K]; its scale: the blob's FP32 tensor scale, in device memory */
    gemm_args g = {.tb = true, .ty = cu_cuda_ty(sdt), .fp8 = true, .b_scale = (const float *)(w->dev + w->L.off_t),
                   .M = M, .N = N, .K = K, .A = xq ? xq->data : NULL, .B = w->dev, .Y = store ? pre.data : y->data,
                   .C = r2 ? r2->data : NULL, .lda = K, .ldb = K, .ldy = N, .alpha = alpha * as,
                   .beta = r2 ? 1.0f : 0.0f, .bias = b2 && !late ? b2->data : NULL,
                   .bias_w = b2 && (b2->flags & KILN_TENSOR_DEV_WEIGHT),
                   .relu = act == CUK_RELU, .batch = 1, .fast = b->fp8_fast_accum >= 1};
    if (st == KILN_OK && gemm)
        st = cu_gemm_c(b, ctx, IN(2), b->host->attr_f(n, "beta", 1.0f), sdt, y, &g);
    bool done = false;
    if (st == KILN_OK && ds) {
        gemm_args e = g;
        e.Y = y->data;
        e.C = pre.data;
        e.bias = b2 ? b2->data : NULL;
        e.gelu = e.d_e4m3 = true;
        e.d_scale = ds;
        st = cu_gemm_epi(b, ctx, 0, &e);
        done = st == KILN_OK;
        if (done) {
            cu_fp8_store(b, y, ss);
            b->fp8_lt_gelu_n += act == CUK_GELU;
        } else if (st == KILN_ERR_UNSUPPORTED) {   /* no such cuBLASLt kernel: kiln's epilogue from now on */
            st = cu_state_put(b, ctx->node, (const int64_t[]){NO_LT_SLOT}, 1, calloc(1, 1), free);
        }
    }
    if (st == KILN_OK && !done)
        st = cu_gemm_epi(b, ctx, 0, &g);
    const float *eb = late && b2 ? b2->data : NULL;   /* the bias for kiln's epilogue */
    if (st == KILN_OK && !done && store) {
        st = cu_check(b, cuk_epilogue_e4m3(cu_fdt(sdt), pre.data, M * N, N, eb, act, aa, ab, y->data, ss, b->stream),
                      "epilogue (E4M3 storage)");
        if (st == KILN_OK)
            cu_fp8_store(b, y, ss);
    } else if (st == KILN_OK && !done && late) {
        /* the input of the next FP8 layer (BERT's FFN2 reads FFN1's GELU) quantized in the same pass; the GEMM
         * above has read this layer's own quantized input already (stream order) */
        float fs = 0;
        uint8_t *fq = cu_fp8_feed(b, ctx, y, &fs);
        st = cu_check(b, cuk_epilogue_q(cu_fdt(sdt), y->data, M * N, N, 1, eb, NULL, act, aa, ab, fq, fs, b->stream),
                      "epilogue");
        if (st == KILN_OK && fq)
            cu_fp8_fed(b, y, fs);
    }
    cu_part_mark(b, 4, 2, 2);
    cu_tmp_free(b, &rt);   /* used in stream order only */
    cu_tmp_free(b, &bt);
    cu_tmp_free(b, &pre);
    return st;
}
