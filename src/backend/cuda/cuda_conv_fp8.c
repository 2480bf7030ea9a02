/* FP8 convolutions (Hopper): a Conv / FusedConv the builder marked FP8 (kiln_wq / kiln_aq "fp8", one weight
 * scale per tensor, the calibrated activation scale; docs/PRECISION.md) runs as one cuDNN graph
 * (cuda_conv_graph.c): y = act(s * conv(q(x), W8) + bias + residual) with
 *   - q(x): the input quantized to E4M3 with the activation scale (cu_fp8_act: the FP8 GEMMs' pass, kept
 *     for a second FP8 layer reading the same data), channels-last;
 *   - W8: the CPU backend's KILN_PREP_LOWBIT_W blob (the engine's bytes: E4M3 [K][C][R][S] and its FP32
 *     tensor scale), uploaded once channels-last (KRSC);
 *   - s: activation scale x weight tensor scale (a float32 scalar in device memory, per layer);
 * the output in the storage the FP8 GEMMs use (FP16 by default), channels-last. What the CPU emulation
 * computes (cpu/lowbit.c): the same E4M3 values, summed in float32 in another order. A configuration no
 * engine takes with its epilogue runs the convolution and scale alone, then kiln's epilogue kernel.
 * kiln's own implicit GEMM (kernels_conv_fp8.cu) takes the same operands, and a 1x1 layer is also a cuBLASLt FP8
 * GEMM (cuda_conv_gemm.c; its feed by a quantization pass after it); each layer runs the fastest, timed at its
 * first run. */
#include "cuda_internal.h"
#include "cuda_lowbit.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)
#define W_SLOT 62   /* the state slot of the layer's packed filter */
#define S_SLOT 63   /* its scale */
#define I_SLOT 64   /* 1 / its feed's scale */
#define T_SLOT 65   /* the kernel chosen for it */
#define R_SLOT 66   /* its E4M3-held residual's scale */

bool cu_fp8_conv_accepts(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    if (n_in < 2 || !in[0] || !in[1] || in[0]->ndim != 4 || in[1]->ndim != 4 || in[1]->dtype != KILN_DT_FLOAT32 ||
        !b->conv_graph)
        return false;
    /* cuDNN's FP8 convolutions: one group, channels-last, channels in 16-byte multiples */
    if (b->host->attr_i(n, "group", 1) != 1 || in[0]->dims[1] % 16 || in[1]->dims[0] % 16)
        return false;
    return cu_conv_accepts(b, n, n_in, in);
}

/* A float32 scalar v of the layer in device memory (state slot `slot`); not made while capturing a CUDA graph. */
static kiln_status layer_scale(cu_be *b, const kiln_kctx *ctx, int slot, float v, const float **out)
{
    KILN_TRY(cu_layer_scalar(b, ctx, slot, v, out));
    return *out ? KILN_OK : cu_not_in_capture(b, "setting an FP8 scale");
}

/* Runs the graph of key k (everything fused, with its feed), else everything but the feed, else the convolution
 * and scale alone and kiln's epilogue; *done false when no engine takes any, *fed whether the feed was written. */
static kiln_status run_graph(cu_be *b, cu_cg_key *k, const void *const *ptr, kiln_tensor *y, const kiln_tensor *bias,
                             const kiln_tensor *res, bool relu, bool *done, bool *fed)
{
    *done = *fed = false;
    for (int v = k->feed ? 0 : 1; v < 3 && !*done; v++) {
        cu_cg_key kv = *k;
        kv.feed = v == 0;
        if (v == 2) {
            if (!k->bias && !k->res && !k->relu)
                break;
            kv.bias = kv.res = kv.relu = kv.bias_ty = 0;
        }
        const void *p[CU_CG_OPERANDS] = {ptr[0], ptr[1], kv.bias ? ptr[2] : NULL, kv.res ? ptr[3] : NULL, ptr[4],
                                         ptr[5], kv.feed ? ptr[6] : NULL, kv.feed ? ptr[7] : NULL};
        cu_cg *g = NULL;
        KILN_TRY(cu_cg_get(b, &kv, p, &g));
        if (!g)
            continue;
        KILN_TRY(cu_cg_run(b, g, p));
        *done = true;
        *fed = kv.feed;
        if (v == 2)
            KILN_TRY(cu_check(b, cuk_epilogue(cu_fdt(cu_sdt(y)), y->data, cu_numel(y), y->dims[1], 1,
                                              bias ? bias->data : NULL, res ? res->data : NULL,
                                              relu ? CUK_RELU : CUK_IDENTITY, 0, 0, b->stream),
                              "FP8 conv epilogue"));
    }
    return KILN_OK;
}

/* The kernels: cuDNN's graph, kiln's implicit GEMM on mma.sync, cuBLASLt (1x1 layers), kiln's on wgmma in each tile
 * configuration (HOW_WG + cfg, kernels_conv_fp8_wg.cu), and for 1x1 stride-1 layers with TMA copies (HOW_TMA + cfg,
 * kernels_conv_fp8_tma.cu) */
enum { HOW_CUDNN, HOW_KILN, HOW_GEMM, HOW_WG, HOW_TMA = HOW_WG + 7, HOW_N = HOW_TMA + 3 };
static const char *const how_name[HOW_N] = {"cuDNN",          "kiln",            "GEMM",          "wgmma 64x64",
                                            "wgmma 128x64",   "wgmma 128x128",   "wgmma 256x128", "wgmma 64x64 r",
                                            "wgmma 128x64 r", "wgmma 128x128 r", "TMA 64x64",     "TMA 128x64",
                                            "TMA 128x128"};

/* Which kernels an FP8 convolution may run (a mask of 1 << HOW_*): KILN_CUDA_FP8_CONV=kiln (kiln's implicit GEMM on
 * mma.sync, kernels_conv_fp8.cu), =cudnn (cuDNN's graph), =gemm (cuBLASLt, 1x1 layers; the others cuDNN's graph),
 * =wg (kiln's on wgmma, its fastest tile), =wg0 .. =wg6 (one configuration), =tma / =tma0 .. =tma2 (the same for the
 * TMA kernel, 1x1 stride-1 layers; cuDNN's graph for the others); unset or =all: every one (the TMA kernel too since
 * session 22: byte for byte the wgmma kernels' outputs on the H200, timed beside them). Where several may run, the fastest is timed on the layer's own operands at its first run (a tactic, like
 * cuDNN's own candidates). Read per call: an A/B switch. */
static unsigned fp8_conv_mode(void)
{
    const char *e = getenv("KILN_CUDA_FP8_CONV");
    unsigned wg = ((1u << HOW_TMA) - 1) & ~((1u << HOW_WG) - 1), tma = ((1u << HOW_N) - 1) & ~((1u << HOW_TMA) - 1);
    if (!e || !e[0] || !strcmp(e, "all"))
        return (1u << HOW_N) - 1;
    if (!strcmp(e, "kiln"))
        return 1u << HOW_KILN;
    if (!strcmp(e, "gemm"))
        return 1u << HOW_GEMM;
    if (!strcmp(e, "wg"))
        return wg;
    if (!strncmp(e, "wg", 2) && e[2] >= '0' && e[2] < '0' + HOW_TMA - HOW_WG && !e[3])
        return 1u << (HOW_WG + e[2] - '0');
    if (!strcmp(e, "tma"))
        return tma;
    if (!strncmp(e, "tma", 3) && e[3] >= '0' && e[3] < '0' + HOW_N - HOW_TMA && !e[4])
        return 1u << (HOW_TMA + e[3] - '0');
    return 1u << HOW_CUDNN;
}

/* One FP8 convolution's operands (ptr: x, w, bias, residual, y, scale, 1 / feed scale, feed, as cuDNN's graph) */
typedef struct fp8_call {
    cu_cg_key k;
    const void *ptr[CU_CG_OPERANDS];
    cuk_conv_desc d;
    kiln_tensor *y;
    const kiln_tensor *bias, *res;
    bool relu;
    kiln_dtype sdt;
    const kiln_kctx *ctx;
    bool gemm_fit;            /* a 1x1 layer cuda_conv_gemm.c runs */
    float fs;                 /* the feed's scale (ptr[7] set) */
    bool store;               /* the output held only as E4M3 (ptr[7] = y's own bytes; kiln's kernel) */
    const uint8_t *resq;      /* the residual held as E4M3 (ptr[3] NULL; kiln's kernel), its scale rs (device) */
    const float *rs;
} fp8_call;

/* the GEMM, then its feed quantized from the output (the bytes of cuk_fp8_quant, as the other kernels write) */
static kiln_status call_gemm(cu_be *b, const fp8_call *c, bool *done, bool *fed)
{
    cu_conv_gemm_args ga = {.sdt = c->sdt, .fp8 = true, .scale = c->ptr[5], .M = (int64_t)c->d.n * c->d.p * c->d.q,
                            .C = c->d.c, .K = c->d.k, .x = c->ptr[0], .w = c->ptr[1], .res = c->ptr[3],
                            .bias = c->ptr[2], .bias_w = c->bias && (c->bias->flags & KILN_TENSOR_DEV_WEIGHT),
                            .y = (void *)c->ptr[4], .relu = c->relu};
    KILN_TRY(cu_conv_gemm(b, c->ctx, &ga));
    if (c->ptr[7])
        KILN_TRY(cu_check(b, cuk_fp8_quant(cu_fdt(c->sdt), c->ptr[4], (uint8_t *)c->ptr[7], cu_numel(c->y), c->fs,
                                           b->stream), "FP8 conv feed"));
    *done = true;
    *fed = c->ptr[7] != NULL;
    return KILN_OK;
}

static kiln_status call_run(cu_be *b, const fp8_call *c, int how, bool *done, bool *fed)
{
    if (how == HOW_GEMM)
        return call_gemm(b, c, done, fed);
    if (how == HOW_CUDNN) {
        cu_cg_key k = c->k;
        return run_graph(b, &k, c->ptr, c->y, c->bias, c->res, c->relu, done, fed);
    }
    void *y = c->store ? NULL : (void *)c->ptr[4];
    cudaError_t e = how == HOW_KILN
                        ? cuk_conv_fp8(cu_fdt(c->sdt), c->ptr[0], c->ptr[1], c->ptr[5], c->ptr[2], c->ptr[3], y,
                                       c->ptr[6], (uint8_t *)c->ptr[7], c->resq, c->rs, &c->d, b->stream)
                    : how >= HOW_TMA
                        ? cuk_conv_fp8_tma(how - HOW_TMA, cu_fdt(c->sdt), c->ptr[0], c->ptr[1], c->ptr[5], c->ptr[2],
                                           c->ptr[3], y, c->ptr[6], (uint8_t *)c->ptr[7], c->resq, c->rs, &c->d,
                                           b->stream)
                        : cuk_conv_fp8_wg(how - HOW_WG, cu_fdt(c->sdt), c->ptr[0], c->ptr[1], c->ptr[5], c->ptr[2],
                                          c->ptr[3], y, c->ptr[6], (uint8_t *)c->ptr[7], c->resq, c->rs, &c->d,
                                          b->stream);
    kiln_status st = cu_check(b, e, "FP8 conv");
    *done = st == KILN_OK;
    *fed = *done && c->ptr[7];
    return st;
}

typedef struct fp8_timed {
    cu_be *b;
    const fp8_call *c;
    int how;
} fp8_timed;

static bool timed_run(void *arg)
{
    fp8_timed *t = arg;
    bool done = false, fed = false;
    return call_run(t->b, t->c, t->how, &done, &fed) == KILN_OK && done;
}

/* Milliseconds of one run (median of 3 after a warm-up), or < 0 when it does not run. */
static float call_time(cu_be *b, const fp8_call *c, int how)
{
    fp8_timed t = {b, c, how};
    return cu_time_median3(b, timed_run, &t);
}

typedef struct fp8_tactic {
    int how;   /* HOW_* */
} fp8_tactic;

/* The kernel for this layer at these dims: the only one allowed, else the fastest of those allowed, timed now (kept
 * per node and dims) */
static kiln_status choose(cu_be *b, const kiln_kctx *ctx, const fp8_call *c, int *how)
{
    const unsigned all = (1u << HOW_N) - 1, kiln = all & ~((1u << HOW_CUDNN) | (1u << HOW_GEMM));
    unsigned mask = fp8_conv_mode();
    int gmode = cu_conv_gemm_mode();
    bool unset = mask == all;   /* the default, or =all */
    if (!c->gemm_fit || (unset && gmode != 0))   /* cuBLASLt runs 1x1 layers; its own switch (below) */
        mask &= ~(1u << HOW_GEMM);
    /* the TMA kernel: 1x1 stride-1 layers (a GEMM) */
    const cuk_conv_desc *d = &c->d;
    if (d->r != 1 || d->s != 1 || d->sh != 1 || d->sw != 1 || d->ph || d->pw)
        mask &= (1u << HOW_TMA) - 1;
    /* wgmma's FP8 sums keep fewer bits than float32 between its MMAs (cuBLASLt's "fast accumulation" is that same
     * arithmetic): with KILN_CUDA_FP8_FAST_ACCUM=0 only where forced */
    if (unset && b->fp8_fast_accum == 0)
        mask &= (1u << HOW_WG) - 1;
    if (c->store || c->resq)                     /* E4M3 storage: only kiln's kernels read or write it */
        mask = (mask & kiln) ? mask & kiln : 1u << HOW_KILN;
    else if (unset && gmode > 0 && c->gemm_fit)  /* KILN_CUDA_CONV_GEMM=1 */
        mask = 1u << HOW_GEMM;
    if (!mask)                        /* =gemm on a layer cuBLASLt does not run */
        mask = 1u << HOW_CUDNN;
    int first = __builtin_ctz(mask);
    if (!(mask & (mask - 1))) {
        *how = first;
        return KILN_OK;
    }
    int64_t key[9] = {T_SLOT, c->d.n, c->d.c, c->d.h, c->d.w, c->d.k, c->d.p, c->d.q, c->y != NULL};
    fp8_tactic *t = cu_state_get(b, ctx->node, key, 9);
    if (t) {
        *how = t->how;
        return KILN_OK;
    }
    *how = first;
    /* no timing inside a capture (cuDNN's graph, which refuses to plan there too), nor over an output written in
     * place of its residual (each timed run would add it again) */
    if (b->capturing || (c->ptr[3] && c->ptr[3] == c->ptr[4]))
        return KILN_OK;
    /* the timing cache's choice among the same candidates for the same layer geometry and operands */
    const cuk_conv_desc *g = &c->d;
    const int64_t tk[24] = {mask, g->n, g->c, g->h, g->w, g->k, g->r, g->s, g->p, g->q, g->sh, g->sw, g->ph, g->pw,
                            g->dh, g->dw, c->y != NULL, c->ptr[2] != NULL, c->ptr[3] != NULL, c->ptr[7] != NULL,
                            c->store, c->resq != NULL, c->relu, c->sdt};
    int cached = cu_tc_get(b, '8', tk, sizeof tk);
    if (!(t = calloc(1, sizeof *t)))
        return cu_err(b, KILN_ERR_NOMEM, "out of memory");
    if (cached >= 0 && cached < HOW_N && (mask & (1u << cached))) {
        t->how = *how = cached;
        return cu_state_put(b, ctx->node, key, 9, t, free);
    }
    float ms[HOW_N];
    for (int i = 0; i < HOW_N; i++)
        ms[i] = mask & (1u << i) ? call_time(b, c, i) : -1;
    t->how = first;
    for (int i = 0; i < HOW_N; i++)
        if (ms[i] >= 0 && (ms[t->how] < 0 || ms[i] < ms[t->how]))
            t->how = i;
    cu_tc_put(b, '8', tk, sizeof tk, t->how);
    if (b->conv_verbose) {
        fprintf(stderr, "kiln cuda: FP8 conv %s:", ctx->node->name);
        for (int i = 0; i < HOW_N; i++)
            if (ms[i] >= 0)
                fprintf(stderr, " %s %.3f ms,", how_name[i], ms[i]);
        fprintf(stderr, " -> %s\n", how_name[t->how]);
    }
    *how = t->how;
    return cu_state_put(b, ctx->node, key, 9, t, free);
}

/* The residual res held only as E4M3 (cu_fp8_store): its bytes and device scale for kiln's kernel (*resq, *rsp), or,
 * when the output y is written over those bytes in another form (y in its float storage over them, in place), a
 * copy widened to sdt in tmp (*rl) first. */
static kiln_status held_residual(cu_be *b, const kiln_kctx *ctx, const kiln_tensor *res, const kiln_tensor *y,
                                 bool store, kiln_dtype sdt, kiln_tensor *tmp, const uint8_t **resq, const float **rsp,
                                 const kiln_tensor **rl)
{
    float rs = 0;
    const uint8_t *q = cu_fp8_stored(b, res, &rs);
    if (!q)
        return cu_kerr(b, ctx, KILN_ERR_INTERNAL, "its residual, held only as E4M3, is no longer kept");
    const char *yl = y->data, *rlo = res->data;
    bool over = yl < rlo + res->nbytes && rlo < yl + y->nbytes;
    if (!over || (store && yl == rlo)) {   /* in place as E4M3: each byte read before it is written, same thread */
        *resq = q;
        return layer_scale(b, ctx, R_SLOT, rs, rsp);
    }
    KILN_TRY(cu_tmp(b, tmp, sdt, res->ndim, res->dims));
    tmp->flags |= KILN_TENSOR_DEV_NHWC;
    *rl = tmp;
    return cu_check(b, cuk_fp8_dequant(cu_fdt(sdt), q, tmp->data, cu_numel(res), rs, b->stream),
                    "widening an E4M3-held residual");
}

/* The cuDNN graph's key of an FP8 convolution (channels-last E4M3 x and w, output in sdt) */
static cu_cg_key graph_key(const kiln_tensor *x, const kiln_tensor *w, const int64_t yd[4], const cu_geom *g,
                           kiln_dtype sdt, bool bias, bool res, bool relu)
{
    cu_cg_key k;
    cu_cg_key_init(&k, sdt == KILN_DT_FLOAT16    ? CUDNN_DATA_HALF
                       : sdt == KILN_DT_BFLOAT16 ? CUDNN_DATA_BFLOAT16
                                                 : CUDNN_DATA_FLOAT,
                   true, x->dims, w->dims, yd, g);
    k.fp8 = 1;
    k.bias = bias;
    k.bias_ty = bias ? CUDNN_DATA_FLOAT : 0;
    k.res = res;
    k.relu = relu;
    return k;
}

kiln_status cu_fp8_conv_run(cu_be *b, kiln_kctx *ctx)
{
    const kiln_node *n = ctx->node;
    const kiln_tensor *x = IN(0), *w = IN(1);
    float as = 0;
    if (!cu_fp8_layer(b, n, &as) || !cu_fp8_conv_accepts(b, n, ctx->n_in, ctx->in))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "operands the FP8 convolution does not take");
    bool fused = n->op == KILN_OP_FusedConv;
    int act = CUK_IDENTITY;
    float aa = 0, ab = 0;
    if (fused && !cu_fused_act(b, n, &act, &aa, &ab))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "unknown fused activation");
    const kiln_tensor *bias = IN(2), *res = fused ? IN(3) : NULL;
    cu_geom g;
    KILN_TRY(cu_conv_geom(b, ctx, x, w, &g));
    int64_t K = w->dims[0], C = w->dims[1], RS = w->dims[2] * w->dims[3];
    int64_t yd[4] = {x->dims[0], K, g.out[0], g.out[1]};
    kiln_dtype sdt = cu_fp8_out_sdt(b, x);
    cu_lowbit_w *wq = NULL;
    KILN_TRY(cu_lowbit_weight(b, ctx, W_SLOT, KILN_QF_FP8, true, K, C * RS, RS, &wq));
    const float *sp = NULL;
    KILN_TRY(layer_scale(b, ctx, S_SLOT, as * wq->ts, &sp));
    KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, 4, yd));
    kiln_tensor *y = ctx->out[0];
    y->flags |= KILN_TENSOR_DEV_NHWC;
    y->flags &= ~KILN_TENSOR_DEV_E4M3;
    if (!y->nbytes)
        return KILN_OK;
    /* FP8 storage (build/fp8_feed.c): the output held only as E4M3 with its readers' scale */
    float ss = b->host->attr_f(n, KILN_ATTR_FP8_STORE, NAN);
    bool store = b->fp8_feed && ss > 0 && isfinite(ss) && (act == CUK_IDENTITY || act == CUK_RELU);
    if (res && cu_numel(res) != cu_numel(y))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "residual must have the output's shape");
    kiln_tensor tmp[3], lay[2];
    memset(tmp, 0, sizeof tmp);
    memset(lay, 0, sizeof lay);
    const kiln_tensor *xl = NULL, *rl = NULL, *bl = NULL;
    kiln_status st = cu_relayout(b, x, true, &lay[0], &xl);   /* quantized channels-last */
    bool relaid = st == KILN_OK && xl != x;
    const uint8_t *resq = NULL;   /* a residual held only as E4M3 (its producer's FP8 storage) */
    const float *rsp = NULL;
    if (st == KILN_OK && res && (res->flags & KILN_TENSOR_DEV_E4M3))
        st = held_residual(b, ctx, res, y, store, sdt, &tmp[0], &resq, &rsp, &rl);
    else if (st == KILN_OK && res)
        st = cu_as(b, res, sdt, &tmp[0], &rl);
    if (st == KILN_OK && rl)
        st = cu_relayout(b, rl, true, &lay[1], &rl);
    if (st == KILN_OK && bias)
        st = cu_as(b, bias, KILN_DT_FLOAT32, &tmp[1], &bl);
    cu_part_mark(b, 4, 0, 2);
    const kiln_tensor *xq = NULL;
    if (st == KILN_OK)
        st = cu_fp8_act(b, xl, cu_numel(xl), as, &xq);
    cu_part_mark(b, 4, 1, 2);
    if (st == KILN_OK) {
        cu_cg_key k = graph_key(x, w, yd, &g, sdt, bl != NULL, rl != NULL, act == CUK_RELU);
        /* the next FP8 layer's input written by this graph (build/fp8_feed.c marks the layer) into an entry of its
         * own: the quantized input stays kept for another FP8 layer reading it (a downsampling convolution) */
        float fa = b->host->attr_f(n, KILN_ATTR_FP8_FEED, NAN);
        bool want = !store && b->fp8_feed && fa > 0 && isfinite(fa) && (act == CUK_IDENTITY || act == CUK_RELU);
        float fs = 0;
        const float *ip = NULL;
        uint8_t *fq = want ? cu_fp8_feed(b, ctx, y, &fs) : NULL;
        if (store) {   /* the E4M3 bytes in the output's own buffer (numel of its numel * storage-size bytes) */
            fs = ss;
            fq = y->data;
        }
        if (fq && layer_scale(b, ctx, I_SLOT, 1.0f / fs, &ip) != KILN_OK)
            fq = NULL;
        if (store && !fq)
            st = cu_kerr(b, ctx, KILN_ERR_NOMEM, "no device memory for an FP8 scale");
        k.feed = fq != NULL;
        const void *ptr[CU_CG_OPERANDS] = {xq->data, wq->dev, bl ? bl->data : NULL, rl ? rl->data : NULL,
                                           y->data, sp, ip, fq};
        fp8_call c = {.k = k, .d = {.n = (int)x->dims[0], .c = (int)C, .h = (int)x->dims[2], .w = (int)x->dims[3],
                                    .k = (int)K, .r = (int)w->dims[2], .s = (int)w->dims[3], .p = (int)g.out[0],
                                    .q = (int)g.out[1], .sh = (int)g.s[0], .sw = (int)g.s[1], .ph = (int)g.pb[0],
                                    .pw = (int)g.pb[1], .dh = (int)g.d[0], .dw = (int)g.d[1], .y_nhwc = 1,
                                    .relu = act == CUK_RELU},
                      .y = y, .bias = bl, .res = rl, .relu = act == CUK_RELU, .sdt = sdt, .ctx = ctx,
                      .gemm_fit = cu_conv_gemm_fits(w->dims, &g, 1), .fs = fs, .store = store, .resq = resq,
                      .rs = rsp};
        memcpy(c.ptr, ptr, sizeof c.ptr);
        bool done = false, fed = false;
        int how = HOW_CUDNN;
        if (st == KILN_OK)
            st = choose(b, ctx, &c, &how);
        if (st == KILN_OK)
            st = call_run(b, &c, how, &done, &fed);
        if (st == KILN_OK && !done)
            st = cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "no cuDNN engine runs this FP8 convolution");
        if (st == KILN_OK && store)
            cu_fp8_store(b, y, ss);
        else if (st == KILN_OK && fed)
            cu_fp8_fed(b, y, fs);
        if (relaid)   /* a quantization of a temporary copy (freed below): not to be found again */
            cu_fp8_unpin(b);
    }
    if (st == KILN_OK && act != CUK_IDENTITY && act != CUK_RELU)
        st = cu_check(b, cuk_epilogue(cu_fdt(sdt), y->data, cu_numel(y), K, 1, NULL, NULL, act, aa, ab, b->stream),
                      "FP8 conv activation");
    cu_part_mark(b, 4, 2, 2);
    for (int i = 0; i < 3; i++)
        cu_tmp_free(b, &tmp[i]);
    for (int i = 0; i < 2; i++)
        cu_tmp_free(b, &lay[i]);
    return st;
}
