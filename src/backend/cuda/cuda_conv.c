/* Conv and FusedConv (act(Conv(X, W, B) + R)). FP16 / BF16 ones with one group first try cuDNN's
 * graph API with the epilogue fused (cuda_conv_graph.c); the rest, and those no engine takes, go
 * through cuDNN 9's legacy convolution API (cudnnConvolutionForward), docs/CUDA.md. 1-D
 * convolutions run as 2-D ones of height 1. Per node and input shape the descriptors and the
 * algorithm (cudnnFindConvolutionForwardAlgorithm: timed once, FMA math unless TF32 is allowed)
 * are kept. Float32 bias + ReLU (+ residual) go through cudnnConvolutionBiasActivationForward;
 * other activations through kiln's epilogue kernel. */
#include "cuda_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)

typedef struct conv_state {
    cudnnTensorDescriptor_t x, y, bias;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnActivationDescriptor_t relu;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    int64_t ydims[4];
    bool no_fused;   /* cudnnConvolutionBiasActivationForward refused the algorithm */
    bool nhwc;       /* x, y channels-last; the filter KRSC in w_nhwc */
    void *w_nhwc;    /* the weight transposed KCRS -> KRSC (own device memory) */
    const void *w_src;
    unsigned long w_gen;
    bool graph_ok;   /* half, one group: try cuDNN's graph API (cuda_conv_graph.c) first */
    cu_cg_key gkey;  /* its configuration without the fused parts */
    bool gemm_fit;   /* half, channels-last, 1x1 stride 1 unpadded: also a cuBLASLt GEMM (cuda_conv_gemm.c) */
    int gemm_pick;   /* which runs it: 0 not timed yet, 1 the GEMM, 2 cuDNN */
} conv_state;

static void conv_state_free(void *p)
{
    conv_state *s = p;
    if (s->x) cudnnDestroyTensorDescriptor(s->x);
    if (s->y) cudnnDestroyTensorDescriptor(s->y);
    if (s->bias) cudnnDestroyTensorDescriptor(s->bias);
    if (s->w) cudnnDestroyFilterDescriptor(s->w);
    if (s->conv) cudnnDestroyConvolutionDescriptor(s->conv);
    if (s->relu) cudnnDestroyActivationDescriptor(s->relu);
    if (s->w_nhwc) cudaFree(s->w_nhwc);
    free(s);
}

/* x / w viewed as 4-D (a 1-D conv gets height 1) */
static void as4d(const kiln_tensor *t, int64_t *d)
{
    if (t->ndim == 3) {
        d[0] = t->dims[0];
        d[1] = t->dims[1];
        d[2] = 1;
        d[3] = t->dims[2];
    } else {
        memcpy(d, t->dims, 4 * sizeof(int64_t));
    }
}

static bool fits_int(const int64_t *d, int n)
{
    for (int i = 0; i < n; i++)
        if (d[i] < 0 || d[i] > 0x7fffffff)
            return false;
    return true;
}

/* Geometry of the conv as 2-D (1-D: height 1, no padding, stride 1 on it). */
kiln_status cu_conv_geom(cu_be *b, const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w, cu_geom *g2)
{
    int64_t k[3];
    for (int i = 0; i < x->ndim - 2; i++)
        k[i] = w->dims[2 + i];
    const int64_t *ks;
    int nk = b->host->attr_ints(ctx->node, "kernel_shape", &ks);
    if (nk >= 0 && (nk != x->ndim - 2 || memcmp(ks, k, sizeof(int64_t) * (size_t)nk)))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "kernel_shape disagrees with W");
    cu_geom g;
    KILN_TRY(cu_geometry(b, ctx, x, k, false, &g));
    if (x->ndim == 3) {
        *g2 = (cu_geom){.nsp = 2, .k = {1, g.k[0]}, .s = {1, g.s[0]}, .d = {1, g.d[0]}, .pb = {0, g.pb[0]},
                        .pe = {0, g.pe[0]}, .out = {1, g.out[0]}};
    } else {
        *g2 = g;
    }
    return KILN_OK;
}

bool cu_conv_accepts(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    if (n_in < 2 || !in[0] || !in[1] || (in[0]->ndim != 4 && in[0]->ndim != 3) || in[1]->ndim != in[0]->ndim)
        return false;
    const kiln_tensor *x = in[0], *w = in[1];
    int64_t group = b->host->attr_i(n, "group", 1);
    if (group < 1 || x->dims[1] != w->dims[1] * group || w->dims[0] % group)
        return false;
    kiln_kctx ctx = {.node = n, .n_in = n_in, .in = in};
    cu_geom g;
    if (cu_conv_geom(b, &ctx, x, w, &g) != KILN_OK)
        return false;
    for (int i = 0; i < 2; i++)
        if (g.pb[i] != g.pe[i])
            return false;   /* cuDNN pads symmetrically */
    if (n_in > 2 && in[2] && cu_numel(in[2]) != w->dims[0])
        return false;
    int64_t ny = x->dims[0] * w->dims[0] * g.out[0] * g.out[1];
    if (n_in > 3 && in[3] && cu_numel(in[3]) != ny)
        return false;   /* residual of the output's shape only (broadcasts run on the host) */
    int64_t xd[4], wd[4];
    as4d(x, xd);
    as4d(w, wd);
    return fits_int(xd, 4) && fits_int(wd, 4);
}

static cudnnDataType_t dnn_ty(kiln_dtype sdt)
{
    return sdt == KILN_DT_FLOAT16 ? CUDNN_DATA_HALF : sdt == KILN_DT_BFLOAT16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

static kiln_status make_state(cu_be *b, kiln_kctx *ctx, kiln_dtype sdt, bool nhwc, const int64_t *xd,
                              const int64_t *wd, const cu_geom *g, int group, conv_state **out)
{
    if (b->capturing)
        return cu_not_in_capture(b, "choosing a convolution algorithm");
    cudnnDataType_t ty = dnn_ty(sdt);
    bool half = sdt != KILN_DT_FLOAT32;
    /* half operands: tensor cores, FP32 accumulation */
    cudnnMathType_t math = half ? CUDNN_TENSOR_OP_MATH : b->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    conv_state *s = calloc(1, sizeof *s);
    if (!s)
        return cu_err(b, KILN_ERR_NOMEM, "out of memory");
    kiln_status st = KILN_OK;
#define DNN(call) do { if (st == KILN_OK) st = cu_check_dnn(b, (call), #call); } while (0)
    DNN(cudnnCreateTensorDescriptor(&s->x));
    DNN(cudnnCreateTensorDescriptor(&s->y));
    DNN(cudnnCreateTensorDescriptor(&s->bias));
    DNN(cudnnCreateFilterDescriptor(&s->w));
    DNN(cudnnCreateConvolutionDescriptor(&s->conv));
    DNN(cudnnCreateActivationDescriptor(&s->relu));
    cudnnTensorFormat_t fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    s->nhwc = nhwc;
    DNN(cudnnSetTensor4dDescriptor(s->x, fmt, ty, (int)xd[0], (int)xd[1], (int)xd[2],
                                   (int)xd[3]));
    DNN(cudnnSetFilter4dDescriptor(s->w, ty, fmt, (int)wd[0], (int)wd[1], (int)wd[2],
                                   (int)wd[3]));
    DNN(cudnnSetConvolution2dDescriptor(s->conv, (int)g->pb[0], (int)g->pb[1], (int)g->s[0], (int)g->s[1],
                                        (int)g->d[0], (int)g->d[1], CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DNN(cudnnSetConvolutionGroupCount(s->conv, group));
    DNN(cudnnSetConvolutionMathType(s->conv, math));
    int yd[4] = {0};
    DNN(cudnnGetConvolution2dForwardOutputDim(s->conv, s->x, s->w, &yd[0], &yd[1], &yd[2], &yd[3]));
    if (st == KILN_OK && (yd[2] != g->out[0] || yd[3] != g->out[1]))
        st = cu_kerr(b, ctx, KILN_ERR_INTERNAL, "cuDNN output %dx%d, expected %lldx%lld", yd[2], yd[3],
                     (long long)g->out[0], (long long)g->out[1]);
    DNN(cudnnSetTensor4dDescriptor(s->y, fmt, ty, yd[0], yd[1], yd[2], yd[3]));
    DNN(cudnnSetTensor4dDescriptor(s->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, yd[1], 1, 1));
    DNN(cudnnSetActivationDescriptor(s->relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    for (int i = 0; i < 4; i++)
        s->ydims[i] = yd[i];
    s->graph_ok = half && group == 1 && b->conv_graph;
    s->gemm_fit = half && nhwc && cu_conv_gemm_fits(wd, g, group);
    const int64_t yd64[4] = {yd[0], yd[1], yd[2], yd[3]};
    cu_cg_key_init(&s->gkey, (int32_t)ty, nhwc, xd, wd, yd64, g);
    /* the fastest algorithm of an acceptable math type, timed by cuDNN */
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    DNN(cudnnFindConvolutionForwardAlgorithm(b->dnn, s->x, s->w, s->conv, s->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                             perf));
    /* strict FP32: whatever the timing ran with, the descriptor says FMA math (no TF32), and an
     * algorithm that cannot run so is skipped (its workspace query fails) */
    int pick = -1;
    for (int i = 0; st == KILN_OK && i < got && pick < 0; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > ((size_t)2 << 30) ||
            (!b->tf32 && !half && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH))
            continue;
        if (cudnnSetConvolutionMathType(s->conv, b->tf32 || half ? perf[i].mathType : CUDNN_FMA_MATH) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnGetConvolutionForwardWorkspaceSize(b->dnn, s->x, s->w, s->conv, s->y, perf[i].algo, &s->ws) ==
                CUDNN_STATUS_SUCCESS) {
            pick = i;
            s->algo = perf[i].algo;
        }
    }
    if (st == KILN_OK && pick < 0)
        st = cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "cuDNN has no usable algorithm for this convolution");
#undef DNN
    if (st != KILN_OK) {
        conv_state_free(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}

/* The filter in the state's layout: w itself, or (NHWC) its KRSC copy, made again when the weight
 * changed (another pointer, or weights freed since). */
static kiln_status conv_filter(cu_be *b, conv_state *s, const kiln_tensor *w, const void **out)
{
    *out = w->data;
    if (!s->nhwc)
        return KILN_OK;
    unsigned long gen = cu_weights_gen();
    if (s->w_nhwc && s->w_src == w->data && s->w_gen == gen && b->force_act == KILN_DT_UNDEFINED) {
        *out = s->w_nhwc;
        return KILN_OK;
    }
    if (!s->w_nhwc)
        KILN_TRY(cu_check(b, cudaMalloc(&s->w_nhwc, w->nbytes ? w->nbytes : 1), "allocating a filter"));
    /* KCRS -> KRSC is NCHW -> NHWC of the filter as a 4-D tensor */
    kiln_tensor wv = *w, tmp;
    wv.flags &= ~KILN_TENSOR_DEV_NHWC;
    const kiln_tensor *r;
    KILN_TRY(cu_relayout(b, &wv, true, &tmp, &r));
    kiln_status st = cu_check(b, cudaMemcpyAsync(s->w_nhwc, r->data, w->nbytes, cudaMemcpyDeviceToDevice, b->stream),
                              "copying a filter");
    cu_tmp_free(b, &tmp);
    KILN_TRY(st);
    s->w_src = w->data;
    s->w_gen = gen;
    *out = s->w_nhwc;
    return KILN_OK;
}

/* The graph configuration of state s: with what is fused (bias in bias_ty), or the convolution alone. */
static void graph_key(const conv_state *s, bool fuse, bool bias, bool res, bool relu, cudnnDataType_t bias_ty,
                      cu_cg_key *k)
{
    *k = s->gkey;
    k->bias = fuse && bias;
    k->res = fuse && res;
    k->relu = fuse && relu;
    k->bias_ty = k->bias ? (int32_t)bias_ty : 0;
}

/* y = act(conv(x) + bias + res) through cuDNN's graph API, trying in turn: everything fused with the
 * float32 bias, with the bias in the half format, the convolution alone then kiln's epilogue. *done
 * false: no engine takes any of them (the legacy API runs it). Activations other than ReLU are left
 * to the caller. */
static kiln_status conv_graph_run(cu_be *b, kiln_kctx *ctx, conv_state *s, const kiln_tensor *x, const void *wp,
                                  const kiln_tensor *bias, const kiln_tensor *res, kiln_tensor *y, int act, bool *done)
{
    *done = false;
    kiln_dtype sdt = cu_sdt(y);
    cudnnDataType_t ty = (cudnnDataType_t)s->gkey.ty;
    bool relu = act == CUK_RELU, other_act = act != CUK_IDENTITY && !relu;
    kiln_tensor hb;
    memset(&hb, 0, sizeof hb);
    kiln_status st = KILN_OK;
    for (int v = 0; v < 3 && st == KILN_OK && !*done; v++) {
        if (v == 1 && !bias)
            continue;
        cu_cg_key k;
        graph_key(s, v < 2, bias != NULL, res != NULL, relu && !other_act, v == 0 ? CUDNN_DATA_FLOAT : ty, &k);
        const void *bp = bias ? bias->data : NULL;
        if (v == 1) {   /* the bias converted to the half format (K values) */
            const kiln_tensor *o;
            st = cu_as(b, bias, sdt, &hb, &o);
            bp = st == KILN_OK ? o->data : NULL;
        }
        const void *ptr[CU_CG_OPERANDS] = {x->data, wp, bp, res ? res->data : NULL, y->data, NULL};
        cu_cg *g = NULL;
        if (st == KILN_OK)
            st = cu_cg_get(b, &k, ptr, &g);
        if (st == KILN_OK && g)
            st = cu_cg_run(b, g, ptr);
        if (st == KILN_OK && g) {
            *done = true;
            if (v == 2 && (bias || res || relu))   /* convolution alone: kiln's epilogue adds the rest */
                st = cu_check(b, cuk_epilogue(cu_fdt(sdt), y->data, cu_numel(y), s->ydims[1],
                                              s->nhwc ? 1 : s->ydims[2] * s->ydims[3], bias ? bias->data : NULL,
                                              res ? res->data : NULL, relu ? CUK_RELU : CUK_IDENTITY, 0, 0, b->stream),
                              "conv epilogue");
        }
    }
    cu_tmp_free(b, &hb);
    (void)ctx;
    return st;
}

/* An activation the kernels did not fuse (other than ReLU), applied after them to the written output y (N, C,
 * spatial dims: the channel step 1 channels-last, else the spatial size) */
static kiln_status act_after(cu_be *b, kiln_tensor *y, kiln_dtype sdt, bool nhwc, int act, float aa, float ab)
{
    int64_t ny = cu_numel(y);
    if (act == CUK_IDENTITY || act == CUK_RELU || !ny)
        return KILN_OK;
    return cu_check(b, cuk_epilogue(cu_fdt(sdt), y->data, ny, y->dims[1], nhwc ? 1 : ny / (y->dims[0] * y->dims[1]),
                                    NULL, NULL, act, aa, ab, b->stream), "conv activation");
}

/* A 1x1 layer's two ways (the cuDNN graph, the cuBLASLt GEMM) timed on its own operands */
typedef struct conv_timed {
    cu_be *b;
    kiln_kctx *ctx;
    conv_state *s;
    const cu_conv_gemm_args *ga;
    const kiln_tensor *x;
    const void *wp;
    const kiln_tensor *bias, *res;
    kiln_tensor *y;
    int act;
} conv_timed;

static bool timed_gemm(void *arg)
{
    conv_timed *t = arg;
    return cu_conv_gemm(t->b, t->ctx, t->ga) == KILN_OK;
}

static bool timed_graph(void *arg)
{
    conv_timed *t = arg;
    bool done = false;
    return conv_graph_run(t->b, t->ctx, t->s, t->x, t->wp, t->bias, t->res, t->y, t->act, &done) == KILN_OK && done;
}

/* Whether the GEMM runs this 1x1 layer: KILN_CUDA_CONV_GEMM's choice, else the faster way timed at the first run
 * (median of 3 after a warm-up; not inside a capture nor over an output written in place of its residual, when
 * the graph runs it for now) */
static kiln_status gemm_choose(conv_timed *t, bool *use)
{
    cu_be *b = t->b;
    conv_state *s = t->s;
    int mode = cu_conv_gemm_mode();
    *use = mode > 0 || (mode == 0 && s->gemm_pick == 1);
    if (mode || s->gemm_pick || b->capturing || (t->res && t->res->data == t->y->data))
        return KILN_OK;
    const int64_t tk[8] = {t->ga->sdt, t->ga->M, t->ga->C, t->ga->K, t->bias != NULL, t->res != NULL, t->act,
                           s->graph_ok};
    int cached = cu_tc_get(b, 'm', tk, sizeof tk);   /* the timing cache's choice */
    if (cached == 1 || (cached == 2 && s->graph_ok)) {
        s->gemm_pick = cached;
        *use = cached == 1;
        return KILN_OK;
    }
    float tg = cu_time_median3(b, timed_gemm, t), tc = s->graph_ok ? cu_time_median3(b, timed_graph, t) : -1;
    s->gemm_pick = tg >= 0 && (tc < 0 || tg < tc) ? 1 : 2;
    cu_tc_put(b, 'm', tk, sizeof tk, s->gemm_pick);
    if (b->conv_verbose)
        fprintf(stderr, "kiln cuda: 1x1 conv %s: GEMM %.3f ms, cuDNN %.3f ms -> %s\n", t->ctx->node->name, tg, tc,
                s->gemm_pick == 1 ? "GEMM" : "cuDNN");
    *use = s->gemm_pick == 1;
    return KILN_OK;
}

static kiln_status conv_run(cu_be *b, kiln_kctx *ctx, kiln_dtype sdt, bool nhwc, const kiln_tensor *x,
                            const kiln_tensor *w, const kiln_tensor *bias, const kiln_tensor *res)
{
    int act = CUK_IDENTITY;
    float aa = 0, ab = 0;
    if (ctx->node->op == KILN_OP_FusedConv && !cu_fused_act(b, ctx->node, &act, &aa, &ab))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "unknown fused activation");
    int64_t group = b->host->attr_i(ctx->node, "group", 1);
    int64_t xd[4], wd[4];
    as4d(x, xd);
    as4d(w, wd);
    int64_t key[11] = {x->ndim, xd[0], xd[1], xd[2], xd[3], wd[0], wd[1], wd[2], wd[3], sdt, nhwc};
    conv_state *s = cu_state_get(b, ctx->node, key, 11);
    if (!s) {
        cu_geom g;
        KILN_TRY(cu_conv_geom(b, ctx, x, w, &g));
        if (g.pb[0] != g.pe[0] || g.pb[1] != g.pe[1])
            return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "asymmetric padding");
        KILN_TRY(make_state(b, ctx, sdt, nhwc, xd, wd, &g, (int)group, &s));
        KILN_TRY(cu_state_put(b, ctx->node, key, 11, s, conv_state_free));
    }
    const void *wp;
    KILN_TRY(conv_filter(b, s, w, &wp));
    int64_t yd[4] = {s->ydims[0], s->ydims[1], s->ydims[2], s->ydims[3]};
    if (x->ndim == 3)
        KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, 3, (int64_t[]){yd[0], yd[1], yd[3]}));
    else
        KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, 4, yd));
    kiln_tensor *y = ctx->out[0];
    if (nhwc)
        y->flags |= KILN_TENSOR_DEV_NHWC;
    int64_t ny = cu_numel(y);
    if (res && cu_numel(res) != ny)
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "residual must have the output's shape");
    if (s->gemm_fit) {   /* 1x1: a cuBLASLt GEMM where it was the faster */
        cu_conv_gemm_args ga = {.sdt = sdt, .M = yd[0] * yd[2] * yd[3], .C = wd[1], .K = yd[1], .x = x->data,
                                .w = wp, .res = res ? res->data : NULL, .bias = bias ? bias->data : NULL,
                                .bias_w = bias && (bias->flags & KILN_TENSOR_DEV_WEIGHT), .y = y->data,
                                .relu = act == CUK_RELU};
        bool use = false;
        conv_timed t = {b, ctx, s, &ga, x, wp, bias, res, y, act};
        KILN_TRY(gemm_choose(&t, &use));
        if (use) {
            KILN_TRY(cu_conv_gemm(b, ctx, &ga));
            return act_after(b, y, sdt, nhwc, act, aa, ab);
        }
    }
    if (s->graph_ok) {   /* half: convolution and epilogue as one cuDNN graph when an engine takes it */
        bool done = false;
        KILN_TRY(conv_graph_run(b, ctx, s, x, wp, bias, res, y, act, &done));
        if (done)
            return act_after(b, y, sdt, nhwc, act, aa, ab);
    }
    void *ws = NULL;
    if (s->ws)
        KILN_TRY(cu_workspace(b, s->ws, &ws));
    float one = 1.0f, zero = 0.0f;
    if (bias && act == CUK_RELU && !s->no_fused && sdt == KILN_DT_FLOAT32) {
        /* y = relu(conv(x) + 1 * z + bias), z = residual (or y itself with weight 0) */
        float a2 = res ? 1.0f : 0.0f;
        const void *z = res ? res->data : y->data;
        if (!res)   /* z = y is scaled by 0, but 0 * NaN would still be NaN: clear it */
            KILN_TRY(cu_check(b, cudaMemsetAsync(y->data, 0, y->nbytes, b->stream), "clearing"));
        cudnnStatus_t e = cudnnConvolutionBiasActivationForward(b->dnn, &one, s->x, x->data, s->w, wp, s->conv,
                                                                s->algo, ws, s->ws, &a2, s->y, z, s->bias, bias->data,
                                                                s->relu, s->y, y->data);
        if (e != CUDNN_STATUS_NOT_SUPPORTED)
            return cu_check_dnn(b, e, "cudnnConvolutionBiasActivationForward");
        s->no_fused = true;   /* this algorithm has no fused form: convolution, then kiln's epilogue */
    }
    KILN_TRY(cu_check_dnn(b, cudnnConvolutionForward(b->dnn, &one, s->x, x->data, s->w, wp, s->conv, s->algo, ws,
                                                     s->ws, &zero, s->y, y->data), "cudnnConvolutionForward"));
    if (!bias && !res && act == CUK_IDENTITY)
        return KILN_OK;
    /* NHWC: the channel is the innermost index */
    return cu_check(b, cuk_epilogue(cu_fdt(sdt), y->data, ny, yd[1], nhwc ? 1 : yd[2] * yd[3],
                                    bias ? bias->data : NULL, res ? res->data : NULL, act, aa, ab, b->stream),
                    "conv epilogue");
}

/* ---- few input channels (a network's stem): kiln's implicit-GEMM kernel (kernels_conv.cu) */

typedef struct smallc_state {
    void *w;          /* the filter as [K][kp] in the half format, zero-padded rows */
    const void *src;  /* of this weight data, */
    unsigned long gen;   /* weights generation */
} smallc_state;

static void smallc_free(void *p)
{
    smallc_state *s = p;
    if (s->w)
        cudaFree(s->w);
    free(s);
}

/* A half 2-D convolution of one group over fewer than 8 input channels, whose reduction (C x R x S) fits the
 * kernel, with offsets that fit its int arithmetic. */
static bool smallc_ok(const cu_be *b, const kiln_kctx *ctx, kiln_dtype sdt)
{
    const kiln_tensor *x = IN(0), *w = IN(1);
    if (!b->conv_smallc || sdt == KILN_DT_FLOAT32 || x->ndim != 4 || x->dims[1] >= 8 ||
        b->host->attr_i(ctx->node, "group", 1) != 1 || w->dims[1] != x->dims[1])
        return false;
    int64_t crs = (w->dims[1] <= 4 ? 4 : w->dims[1]) * w->dims[2] * w->dims[3];   /* <= 4 channels: padded to 4 */
    return (crs + 31) / 32 * 32 <= cuk_conv_smallc_max_kp() && (x->dims[1] <= 4 ? 4 : x->dims[1]) * x->dims[2] * x->dims[3] < ((int64_t)1 << 30) &&
           w->dims[0] < ((int64_t)1 << 30);
}

static kiln_status smallc_weights(cu_be *b, kiln_kctx *ctx, kiln_dtype sdt, const cuk_conv_desc *d, const void **out)
{
    const kiln_tensor *w = IN(1);
    int kp = d->kp;
    /* this path's state slot (100) and what sizes its filter buffer: a node at the address of a freed one
     * must not find that one's state */
    int64_t key[5] = {100, w->dims[0], kp, sdt, d->v4};
    smallc_state *s = cu_state_get(b, ctx->node, key, 5);
    unsigned long gen = cu_weights_gen();
    if (s && s->src == w->data && s->gen == gen) {
        *out = s->w;
        return KILN_OK;
    }
    size_t es = cu_es(sdt), crs = (size_t)(w->dims[1] * w->dims[2] * w->dims[3]), k = (size_t)w->dims[0];
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s)
            return cu_err(b, KILN_ERR_NOMEM, "out of memory");
        kiln_status st = cu_check(b, cudaMalloc(&s->w, k * (size_t)kp * es), "allocating a filter");
        if (st == KILN_OK)
            st = cu_state_put(b, ctx->node, key, 5, s, smallc_free);
        else
            smallc_free(s);
        KILN_TRY(st);
    }
    kiln_tensor tmp;
    memset(&tmp, 0, sizeof tmp);
    const kiln_tensor *wh;
    KILN_TRY(cu_as(b, w, sdt, &tmp, &wh));
    kiln_status st = KILN_OK;
    if (d->v4)   /* reordered (r, s, c < 4) */
        st = cu_check(b, cuk_conv_w_rs4(cu_fdt(sdt), wh->data, s->w, d, b->stream), "reordering a filter");
    else
        st = cu_check(b, cudaMemsetAsync(s->w, 0, k * (size_t)kp * es, b->stream), "clearing a filter");
    if (st == KILN_OK && !d->v4)
        st = cu_check(b, cudaMemcpy2DAsync(s->w, (size_t)kp * es, wh->data, crs * es, crs * es, k,
                                           cudaMemcpyDeviceToDevice, b->stream), "copying a filter");
    cu_tmp_free(b, &tmp);
    KILN_TRY(st);
    s->src = w->data;
    s->gen = gen;
    *out = s->w;
    return KILN_OK;
}

static kiln_status conv_smallc(cu_be *b, kiln_kctx *ctx, kiln_dtype sdt, bool nhwc)
{
    const kiln_tensor *x = IN(0), *w = IN(1);
    int act = CUK_IDENTITY;
    float aa = 0, ab = 0;
    if (ctx->node->op == KILN_OP_FusedConv && !cu_fused_act(b, ctx->node, &act, &aa, &ab))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "unknown fused activation");
    cu_geom g;
    KILN_TRY(cu_conv_geom(b, ctx, x, w, &g));
    int64_t crs = w->dims[1] * w->dims[2] * w->dims[3];
    cuk_conv_desc d = {.n = (int)x->dims[0], .c = (int)x->dims[1], .h = (int)x->dims[2], .w = (int)x->dims[3],
                       .k = (int)w->dims[0], .r = (int)w->dims[2], .s = (int)w->dims[3], .p = (int)g.out[0],
                       .q = (int)g.out[1], .sh = (int)g.s[0], .sw = (int)g.s[1], .ph = (int)g.pb[0], .pw = (int)g.pb[1],
                       .dh = (int)g.d[0], .dw = (int)g.d[1], .y_nhwc = nhwc, .relu = act == CUK_RELU,
                       .v4 = x->dims[1] <= 4};
    if (d.v4)   /* each tap's <= 4 channels as one 8-byte load from a channels-last copy padded to 4 */
        crs = 4 * w->dims[2] * w->dims[3];
    d.kp = (int)((crs + 31) / 32 * 32);
    cu_conv_x_strides(x, &d);
    const void *wp = NULL;
    KILN_TRY(smallc_weights(b, ctx, sdt, &d, &wp));
    int64_t yd[4] = {x->dims[0], w->dims[0], g.out[0], g.out[1]};
    KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, 4, yd));
    kiln_tensor *y = ctx->out[0];
    if (nhwc)
        y->flags |= KILN_TENSOR_DEV_NHWC;
    kiln_tensor tmp[4];
    memset(tmp, 0, sizeof tmp);
    const kiln_tensor *bias = NULL, *res = NULL;
    const void *xp = x->data;
    kiln_status st = KILN_OK;
    if (d.v4) {
        st = cu_tmp(b, &tmp[3], sdt, 4, (int64_t[]){x->dims[0], x->dims[2], x->dims[3], 4});
        if (st == KILN_OK)
            st = cu_check(b, cuk_conv_to_nhwc4(cu_fdt(cu_sdt(x)), cu_fdt(sdt), x->data, tmp[3].data, &d, b->stream),
                          "small-channel conv input");
        xp = tmp[3].data;
    }
    if (st == KILN_OK)
        st = cu_as(b, IN(2), KILN_DT_FLOAT32, &tmp[0], &bias);
    if (st == KILN_OK && ctx->node->op == KILN_OP_FusedConv && IN(3)) {
        st = cu_as(b, IN(3), sdt, &tmp[1], &res);
        if (st == KILN_OK)
            st = cu_relayout(b, res, nhwc, &tmp[2], &res);
        if (st == KILN_OK && cu_numel(res) != cu_numel(y))
            st = cu_kerr(b, ctx, KILN_ERR_SHAPE, "residual must have the output's shape");
    }
    if (st == KILN_OK)
        st = cu_check(b, cuk_conv_smallc(cu_fdt(cu_sdt(x)), cu_fdt(sdt), xp, wp, bias ? bias->data : NULL,
                                         res ? res->data : NULL, y->data, &d, b->stream), "small-channel conv");
    if (st == KILN_OK)
        st = act_after(b, y, sdt, nhwc, act, aa, ab);
    for (int i = 0; i < 4; i++)
        cu_tmp_free(b, &tmp[i]);
    return st;
}

static kiln_status k_conv(cu_be *b, kiln_kctx *ctx)
{
    if (cu_fp8_layer(b, ctx->node, NULL))
        return cu_fp8_conv_run(b, ctx);
    const kiln_tensor *w = IN(1);
    if (!IN(0) || !w || (IN(0)->ndim != 4 && IN(0)->ndim != 3) || w->ndim != IN(0)->ndim)
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "only 1-D and 2-D convolutions");
    /* computed in a FP16 / BF16 weight's format (or the forced activation storage), else float32;
     * half 2-D convolutions channels-last (tensor cores without cuDNN's own transposes) */
    kiln_dtype sdt = w->dtype != KILN_DT_FLOAT32 ? w->dtype
                     : b->force_act != KILN_DT_UNDEFINED ? b->force_act : KILN_DT_FLOAT32;
    bool nhwc = b->nhwc > 0 && sdt != KILN_DT_FLOAT32 && IN(0)->ndim == 4 && IN(0)->dims[0] >= b->nhwc;
    if (smallc_ok(b, ctx, sdt))
        return conv_smallc(b, ctx, sdt, nhwc);
    kiln_tensor tmp[4], lay[4];
    const kiln_tensor *o[4];
    memset(tmp, 0, sizeof tmp);
    memset(lay, 0, sizeof lay);
    kiln_status st = KILN_OK;
    for (int i = 0; i < 4 && st == KILN_OK; i++) {
        const kiln_tensor *t = i == 3 && ctx->node->op != KILN_OP_FusedConv ? NULL : IN(i);
        st = cu_as(b, t, i == 2 ? KILN_DT_FLOAT32 : sdt, &tmp[i], &o[i]);
        if (st == KILN_OK && (i == 0 || i == 3))   /* activations in the convolution's layout */
            st = cu_relayout(b, o[i], nhwc, &lay[i], &o[i]);
    }
    if (st == KILN_OK)
        st = conv_run(b, ctx, sdt, nhwc, o[0], o[1], o[2], o[3]);
    for (int i = 0; i < 4; i++) {
        cu_tmp_free(b, &tmp[i]);
        cu_tmp_free(b, &lay[i]);
    }
    return st;
}

static bool sup_conv(const kiln_bk_query *q)
{
    if (!cu_q_f32(q, 13u))
        return false;
    kiln_dtype w = q->in_dtype && q->n_in > 1 ? q->in_dtype[1] : KILN_DT_FLOAT32;
    return w == KILN_DT_FLOAT32 || w == KILN_DT_FLOAT16 || w == KILN_DT_BFLOAT16 || w == KILN_DT_UNDEFINED;
}

const cu_op cu_ops_conv[] = {
    {KILN_OP_Conv, k_conv, sup_conv, cu_conv_accepts, 0},
    {KILN_OP_FusedConv, k_conv, sup_conv, cu_conv_accepts, 0},
    {KILN_OP_COUNT, NULL, NULL, NULL, 0},
};
