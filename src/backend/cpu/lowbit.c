/* Layers with FP8 / NVFP4 / MXFP4 / INT4 weights on the CPU (lowbit.h). */
#include "lowbit.h"
#include "epilogue.h"
#include "gemm.h"
#include "prep.h"
#include "../lowbit_blob.h"
#include "scratch.h"
#include <math.h>

static int64_t w_block_floats = (int64_t)1 << 18;   /* dequantized filters per convolution block (1 MiB) */
#define SPAN 256                            /* floats dequantized at a time by the B packer */

static _Thread_local int active;   /* this thread is inside kiln__run_lowbit: nested kernels run fp32 */

enum { AQ_NONE, AQ_FP8, AQ_FP16 };

/* What a layer's attributes ask for. */
typedef struct lb_attrs {
    kiln__qfmt fmt;
    int aq;
    float ascale;
} lb_attrs;

static bool is_conv(kiln_op op) { return op == KILN_OP_Conv || op == KILN_OP_FusedConv; }
static bool is_gemm(kiln_op op) { return op == KILN_OP_Gemm || op == KILN_OP_FusedGemm; }
static bool is_mm(kiln_op op) { return op == KILN_OP_MatMul || op == KILN_OP_FusedMatMul; }
static bool is_gather(kiln_op op) { return op == KILN_OP_Gather; }

/* The input holding the weight: a Gather's table (input 0), a layer's weights (input 1). */
static int w_input(const kiln_node *n) { return is_gather(n->op) ? 0 : 1; }

bool kiln__lowbit_node(const kiln_node *n)
{
    return n && (is_conv(n->op) || is_gemm(n->op) || is_mm(n->op) || is_gather(n->op)) && kiln__attr(n, KILN_ATTR_WQ);
}

bool kiln__lowbit_layer(const kiln_kctx *ctx)
{
    return !active && kiln__lowbit_node(ctx->node);
}

static kiln_status read_attrs(const kiln_node *n, lb_attrs *a)
{
    const char *w = kiln__attr_s(n, KILN_ATTR_WQ, NULL), *q = kiln__attr_s(n, KILN_ATTR_AQ, "");
    if (!kiln__lowbit_parse(w, &a->fmt))
        return kiln__err(KILN_ERR_INVALID_ARG, "%s node '%s': unknown weight format '%s'", n->op_type, n->name,
                         w ? w : "(not a string)");
    a->aq = !strcmp(q, "fp8") ? AQ_FP8 : !strcmp(q, "fp16") ? AQ_FP16 : !q[0] ? AQ_NONE : -1;
    a->ascale = kiln__attr_f(n, KILN_ATTR_AQ_SCALE, NAN);
    if (a->aq < 0)
        return kiln__err(KILN_ERR_INVALID_ARG, "%s node '%s': unknown activation format '%s'", n->op_type, n->name, q);
    if (a->aq == AQ_FP8 && !(a->ascale > 0 && isfinite(a->ascale)))
        return kiln__err(KILN_ERR_INVALID_ARG, "%s node '%s': FP8 activations need a finite scale > 0", n->op_type,
                         n->name);
    return KILN_OK;
}

/* The weight (dims, ndim) of node n as a rows x k matrix, rows = output channels (a Gather's table: its
 * rows); trans when the tensor is [k, rows] (MatMul, Gemm without transB). False for shapes the layers
 * do not take. */
static bool w_view(const kiln_node *n, int ndim, const int64_t *dims, int64_t *rows, int64_t *k, bool *trans)
{
    if (ndim > KILN_MAX_DIMS)
        return false;
    if (is_conv(n->op)) {
        if (ndim < 3)
            return false;
        *rows = dims[0];
        *k = kiln__shape_numel(ndim - 1, dims + 1);
        *trans = false;
    } else if (is_gather(n->op)) {   /* an embedding table [rows, k], gathered along axis 0 */
        if (ndim != 2)
            return false;
        *rows = dims[0];
        *k = dims[1];
        *trans = false;
    } else {
        if (ndim != 2)
            return false;
        bool tb = is_gemm(n->op) && kiln__attr_i(n, "transB", 0);
        *rows = tb ? dims[0] : dims[1];
        *k = tb ? dims[1] : dims[0];
        *trans = !tb;
    }
    return *rows > 0 && *k > 0;
}

/* FP8 weights have one FP32 scale per row (output channel), amax / 448 of the row: each row is a
 * 1 x k matrix of numfmt's per-tensor FP8 format, its scale stored where the block formats keep
 * their block scales (docs/PRECISION.md, "FP8 layers") -- unless the layer asks for one scale for
 * the whole tensor (KILN_ATTR_WQ_TENSOR: what the CUDA FP8 GEMM computes). */
static bool per_row(const kiln__qlayout *L, bool tensor) { return L->fmt == KILN_QF_FP8 && !tensor; }

/* Quantizes the float32 weight w (rows x k view, transposed when trans) into payload p, laid out as B
 * (../lowbit_blob.h: elements, scales at off_s (FP8: the row scales), tensor scale at off_t). */
static kiln_status quantize(const kiln__qlayout *L, const kiln_lowbit_blob *B, const float *w, bool trans, uint8_t *p)
{
    bool tensor = B->tensor;
    uint64_t off_s = B->off_s, off_t = B->off_t;
    memset(p, 0, (size_t)B->total);
    const float *src = w;
    float *tmp = NULL;
    if (trans) {
        tmp = kiln__malloc(sizeof(float) * (size_t)(L->rows * L->k));
        if (!tmp)
            return kiln__err(KILN_ERR_NOMEM, "out of memory quantizing weights");
        for (int64_t r = 0; r < L->rows; r++)
            for (int64_t i = 0; i < L->k; i++)
                tmp[r * L->k + i] = w[i * L->rows + r];
        src = tmp;
    }
    float ts = 1.0f;
    kiln_status st = KILN_OK;
    if (per_row(L, tensor)) {
        kiln__qlayout row;
        st = kiln__lowbit_layout(&row, L->fmt, 1, L->k);
        for (int64_t r = 0; st == KILN_OK && r < L->rows; r++) {
            float rs = 1.0f;
            st = kiln__qpack(&row, src + r * L->k, p + r * L->row_bytes, NULL, &rs);
            memcpy(p + off_s + sizeof(float) * (size_t)r, &rs, sizeof rs);
        }
    } else {
        st = kiln__qpack(L, src, p, p + off_s, &ts);
    }
    memcpy(p + off_t, &ts, sizeof ts);
    kiln__free(tmp);
    return st;
}

/* A layer's quantized weight: the blob's payload, or quantized now (own). */
typedef struct qw {
    kiln__qlayout L;
    const uint8_t *data;
    const void *scales;
    float ts;
    const float *row_scale;   /* FP8: one scale per row, else NULL */
    bool trans, f16;   /* f16: dequantized values rounded to FP16 (weight-only layers) */
    bool tensor;       /* FP8 with one scale for the whole tensor (KILN_ATTR_WQ_TENSOR) */
    kiln_lowbit_blob B;   /* the payload's layout */
    uint8_t *own;
} qw;

static kiln_status qw_layout(const kiln_node *n, kiln__qfmt fmt, const kiln_tensor *w, qw *q, int64_t dims[4])
{
    int64_t rows, k;
    if (!w || !w_view(n, w->ndim, w->dims, &rows, &k, &q->trans))
        return kiln__err(KILN_ERR_SHAPE, "%s node '%s': weights of this shape cannot be stored in %s", n->op_type,
                         n->name, kiln__lowbit_name(fmt));
    KILN_TRY(kiln__lowbit_layout(&q->L, fmt, rows, k));
    q->tensor = fmt == KILN_QF_FP8 && kiln__attr_i(n, KILN_ATTR_WQ_TENSOR, 0) != 0;
    if (!kiln__lowbit_blob_layout(fmt, rows, k, q->trans, q->tensor, &q->B))
        return kiln__err(KILN_ERR_SHAPE, "%s node '%s': a %lld x %lld weight is too large for %s", n->op_type, n->name,
                         (long long)rows, (long long)k, kiln__lowbit_name(fmt));
    /* the blob format (../lowbit_blob.h) holds what numfmt packs: its elements and its block scales */
    if (q->B.data_bytes != q->L.data_bytes || q->B.off_s + (per_row(&q->L, q->tensor) ? 0 : q->L.scale_bytes) > q->B.off_t)
        return kiln__err(KILN_ERR_INTERNAL, "%s node '%s': the %s blob layout disagrees with numfmt's", n->op_type,
                         n->name, kiln__lowbit_name(fmt));
    kiln__lowbit_blob_dims(&q->B, dims);
    return KILN_OK;
}

static void qw_point(qw *q, const uint8_t *p)
{
    q->data = p;
    q->scales = p + q->B.off_s;
    q->row_scale = per_row(&q->L, q->tensor) ? (const float *)(const void *)(p + q->B.off_s) : NULL;   /* 64-byte aligned */
    memcpy(&q->ts, p + q->B.off_t, sizeof q->ts);
}

static kiln_status qw_get(const kiln_kctx *ctx, const lb_attrs *a, qw *q)
{
    memset(q, 0, sizeof *q);
    int wi = w_input(ctx->node);
    const kiln_tensor *w = kiln__kin(ctx, wi);
    int64_t dims[4];
    KILN_TRY(qw_layout(ctx->node, a->fmt, w, q, dims));
    q->f16 = a->aq == AQ_FP16;
    uint64_t total = q->B.total;
    const uint8_t *p = kiln__prep_check(ctx, KILN_PREP_LOWBIT_W, kiln__lowbit_blob_dtype(a->fmt), 4, dims, total);
    if (p) {
        qw_point(q, p);
        return KILN_OK;
    }
    if (!w->data || w->dtype != KILN_DT_FLOAT32 || w->nbytes < sizeof(float) * (size_t)kiln_tensor_numel(w))
        return kiln__prep_dropped(w) ? kiln__prep_missing(ctx, wi)
                                     : kiln__kerr(ctx, KILN_ERR_DTYPE, "low-bit layer needs float32 weights");
    if (!(q->own = kiln__malloc((size_t)total)))
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    KILN_TRY(quantize(&q->L, &q->B, w->data, q->trans, q->own));
    qw_point(q, q->own);
    return KILN_OK;
}

kiln_status kiln__lowbit_prep(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                              size_t *size)
{
    *blob = NULL;
    *size = 0;
    lb_attrs a;
    KILN_TRY(read_attrs(n, &a));
    int wi = w_input(n);
    const kiln_tensor *w = consts && n_in > wi ? consts[wi] : NULL;
    if (!w || !w->data || w->dtype != KILN_DT_FLOAT32)
        return KILN_OK;   /* the kernel reports it when it runs */
    qw q;
    int64_t dims[4];
    KILN_TRY(qw_layout(n, a.fmt, w, &q, dims));
    uint8_t *p = kiln__prep_alloc_any(KILN_PREP_LOWBIT_W, 1u << wi, kiln__lowbit_blob_dtype(a.fmt), 4, dims, q.B.total,
                                      blob, size);
    if (!p)
        return kiln__err(KILN_ERR_NOMEM, "out of memory quantizing the weights of node '%s'", n->name);
    kiln_status st = quantize(&q.L, &q.B, w->data, q.trans, p);
    if (st != KILN_OK) {
        kiln__free(*blob);
        *blob = NULL;
        *size = 0;
    }
    return st;
}

/* ---- dequantization and activation rounding ---- */

static void round_f16(float *y, int64_t n)
{
    uint16_t h[SPAN];
    for (int64_t i = 0; i < n; i += SPAN) {
        int64_t c = n - i < SPAN ? n - i : SPAN;
        kiln__f32_to_f16_array(h, y + i, c);
        kiln__f16_to_f32_array(y + i, h, c);
    }
}

/* Row r, elements [k0, k1) of the dequantized weight (k1 - k0 <= SPAN). */
static void dq_span(const qw *q, int64_t r, int64_t k0, int64_t k1, float *y)
{
    kiln__qunpack_span(&q->L, q->data, q->scales, q->row_scale ? q->row_scale[r] : q->ts, r, k0, k1, y);
    if (q->f16)
        round_f16(y, k1 - k0);
}

/* Rows [r0, r1) of the dequantized weight into y (row-major, k per row). */
static void dq_rows(const qw *q, int64_t r0, int64_t r1, float *y)
{
    for (int64_t r = r0; r < r1; r++)
        for (int64_t i = 0; i < q->L.k; i += SPAN)
            dq_span(q, r, i, i + SPAN < q->L.k ? i + SPAN : q->L.k, y + (r - r0) * q->L.k + i);
}

typedef struct aq_job {
    const float *x;
    float *y;
    int aq;
    float s;
} aq_job;

static void aq_task(void *vctx, int64_t c0, int64_t c1)
{
    const aq_job *j = vctx;
    for (int64_t i = c0 * SPAN; i < c1 * SPAN; i += SPAN) {
        int64_t n = SPAN;
        const float *x = j->x + i;
        float *y = j->y + i;
        if (j->aq == AQ_FP16) {
            uint16_t h[SPAN];
            kiln__f32_to_f16_array(h, x, n);
            kiln__f16_to_f32_array(y, h, n);
        } else {
            uint8_t b[SPAN];
            for (int64_t t = 0; t < n; t++)
                y[t] = x[t] / j->s;
            kiln__f32_to_fp8_array(KILN_DT_FP8E4M3, b, y, n, true);
            kiln__fp8_to_f32_array(KILN_DT_FP8E4M3, y, b, n);
            for (int64_t t = 0; t < n; t++)
                y[t] *= j->s;
        }
    }
}

/* y = aq(x) for count floats (y may be x). */
static void aq_apply(kiln_pool *pool, int nt, int aq, float s, const float *x, float *y, int64_t count)
{
    int64_t whole = count / SPAN;
    aq_job j = {x, y, aq, s};
    kiln__parallel_for(pool, nt, whole, 64, aq_task, &j);
    if (count > whole * SPAN) {   /* the tail through a full-size buffer */
        float t[SPAN] = {0};
        memcpy(t, x + whole * SPAN, sizeof(float) * (size_t)(count - whole * SPAN));
        aq_job tj = {t, t, aq, s};
        aq_task(&tj, 0, 1);
        memcpy(y + whole * SPAN, t, sizeof(float) * (size_t)(count - whole * SPAN));
    }
}

/* ---- MatMul / Gemm: the float32 GEMM with a dequantizing B packer ---- */

typedef struct pk_ctx {
    const qw *q;
} pk_ctx;

/* op(B)(k, j) = weight row j, element k. */
static void packb(void *vctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr, float *dst)
{
    const qw *q = ((const pk_ctx *)vctx)->q;
    float buf[SPAN];
    int64_t np = (nc + nr - 1) / nr;
    for (int64_t p = 0; p < np; p++)
        for (int r = 0; r < nr; r++) {
            int64_t j = j0 + p * nr + r;
            float *d = dst + p * kc * nr + r;
            if (j >= j0 + nc) {
                for (int64_t k = 0; k < kc; k++)
                    d[k * nr] = 0;
                continue;
            }
            for (int64_t k = 0; k < kc; k += SPAN) {
                int64_t c = kc - k < SPAN ? kc - k : SPAN;
                dq_span(q, j, k0 + k, k0 + k + c, buf);
                for (int64_t i = 0; i < c; i++)
                    d[(k + i) * nr] = buf[i];
            }
        }
}

/* True when t (float32) holds n elements laid out as the trailing dims of (ndim, dims). */
static bool trailing(const kiln_tensor *t, int ndim, const int64_t *dims)
{
    if (t->dtype != KILN_DT_FLOAT32 || t->ndim > ndim || kiln_tensor_numel(t) != kiln__shape_numel(ndim, dims))
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] != dims[ndim - t->ndim + d])
            return false;
    return true;
}

static kiln_status run_gemm(kiln_kctx *ctx, const qw *q, const kiln_tensor *x, bool *handled)
{
    *handled = false;
    kiln_op op = ctx->node->op;
    int64_t K = q->L.k, N = q->L.rows, M, odims[KILN_MAX_DIMS];
    int ond;
    bool ta = false;
    float alpha = 1.0f;
    const kiln_tensor *bias = NULL, *res = NULL;
    if (is_gemm(op)) {
        const kiln_tensor *c = kiln__kin(ctx, 2);
        ta = kiln__attr_i(ctx->node, "transA", 0) != 0;
        alpha = kiln__attr_f(ctx->node, "alpha", 1.0f);
        if (x->ndim != 2 || x->dims[ta ? 0 : 1] != K)
            return KILN_OK;
        M = x->dims[ta ? 1 : 0];
        ond = 2, odims[0] = M, odims[1] = N;
        int64_t cn[2] = {1, N};
        if (c && (kiln__attr_f(ctx->node, "beta", 1.0f) != 1.0f || !trailing(c, 2, cn)))
            return KILN_OK;   /* a 2-D C or a scaled one: the float32 kernel */
        bias = c;
    } else {
        if (x->ndim < 1 || x->dims[x->ndim - 1] != K)
            return KILN_OK;
        M = kiln_tensor_numel(x) / K;
        ond = x->ndim;
        for (int d = 0; d < x->ndim - 1; d++)
            odims[d] = x->dims[d];
        odims[ond - 1] = N;
        if (x->ndim == 1)   /* numpy: a vector operand loses its promoted dimension */
            odims[0] = N;
        if (op == KILN_OP_FusedMatMul) {
            bias = kiln__kin(ctx, 2), res = kiln__kin(ctx, 3);
            if ((bias && !trailing(bias, 1, &N)) || (res && !trailing(res, ond, odims)))
                return KILN_OK;
        }
    }
    kiln_act act = {0};
    if (op == KILN_OP_FusedGemm || op == KILN_OP_FusedMatMul)
        KILN_TRY(kiln__act_from_node(ctx, &act));
    *handled = true;
    KILN_TRY(kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, ond, odims));
    if (M == 0)
        return KILN_OK;
    kiln_epi e = {.bias = bias ? bias->data : NULL, .res = res ? res->data : NULL, .ldr = N, .act = act};
    pk_ctx pk = {q};
    kiln_gemm g = {.M = M, .N = N, .K = K, .alpha = alpha, .trans_a = ta, .A = x->data, .lda = ta ? M : K,
                   .packb = packb, .packb_ctx = &pk, .C = ctx->out[0]->data, .ldc = N, .epi = &e};
    kiln__sgemm_ex(ctx->pool, ctx->nthreads, &g);
    return KILN_OK;
}

/* ---- Conv: the float32 kernel per block of output channels ---- */

/* The runtime hooks of a sub-call: its output goes to a given slice of the layer's output. */
typedef struct slice {
    void *p;
    size_t bytes;
} slice;

static void *slice_place(void *user, const kiln_kctx *c, int i, size_t nbytes, bool *fresh)
{
    (void)c;
    slice *s = user;
    if (i != 0 || nbytes != s->bytes)
        return NULL;
    *fresh = true;
    return s->p;
}

static bool slice_owns(void *user, const void *p)
{
    return p == ((slice *)user)->p;
}

static const kiln_krt slice_rt = {.place = slice_place, .owns = slice_owns};

/* A view of t's elements [off, off + dims) (float32). */
static kiln_tensor view(const kiln_tensor *t, int64_t off, int ndim, const int64_t *dims)
{
    kiln_tensor v = {.dtype = KILN_DT_FLOAT32, .ndim = ndim, .data = (float *)t->data + off};
    for (int d = 0; d < ndim; d++)
        v.dims[d] = dims[d];
    v.nbytes = sizeof(float) * (size_t)kiln__shape_numel(ndim, dims);
    return v;
}

static kiln_status run_conv(kiln_kctx *ctx, kiln_kernel_fn fn, const qw *q, const kiln_tensor *x, bool *handled)
{
    *handled = false;
    const kiln_tensor *w = kiln__kin(ctx, 1), *b = kiln__kin(ctx, 2), *res = kiln__kin(ctx, 3);
    int64_t M = q->L.rows, K = q->L.k;
    int64_t mb = w_block_floats / K < 16 ? 16 : w_block_floats / K;
    if (kiln__attr_i(ctx->node, "group", 1) != 1 || mb >= M || x->ndim != w->ndim || x->ndim < 3 || x->dims[0] < 1 ||
        (b && (b->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(b) != M)) || ctx->n_in > 4 ||
        (res && (res->dtype != KILN_DT_FLOAT32 || res->ndim != x->ndim || res->dims[0] != x->dims[0] ||
                 res->dims[1] != M)))
        return KILN_OK;   /* small or grouped: one dequantized copy */
    float *wb = kiln__scratch(KILN_SCRATCH_LOWBIT_W, sizeof(float) * (size_t)(mb * K));
    if (!wb)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (dequantized filter block)");
    *handled = true;
    int64_t N = x->dims[0], img = kiln_tensor_numel(x) / N, out_sz = -1;
    kiln_tensor *y = ctx->out[0];
    for (int64_t n = 0; n < N; n++)
        for (int64_t m0 = 0; m0 < M; m0 += mb) {
            int64_t m = M - m0 < mb ? M - m0 : mb, d[KILN_MAX_DIMS];
            dq_rows(q, m0, m0 + m, wb);
            memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->ndim);
            d[0] = 1;
            kiln_tensor xi = view(x, n * img, x->ndim, d);
            memcpy(d, w->dims, sizeof(int64_t) * (size_t)w->ndim);
            d[0] = m;
            kiln_tensor wt = view(&(kiln_tensor){.data = wb}, 0, w->ndim, d), bt, rt, o = {0};
            const kiln_tensor *in[4] = {&xi, &wt, NULL, NULL};
            if (b) {
                bt = view(b, m0, 1, &m);
                in[2] = &bt;
            }
            if (res) {
                memcpy(d, res->dims, sizeof(int64_t) * (size_t)res->ndim);
                d[0] = 1, d[1] = m;
                rt = view(res, (n * M + m0) * (kiln_tensor_numel(res) / (N * M)), res->ndim, d);
                in[3] = &rt;
            }
            kiln_tensor *outs[1] = {&o};
            slice s = {0};
            kiln_kctx sub = *ctx;
            sub.in = in;
            sub.out = outs;
            sub.n_out = 1;
            sub.prepared = NULL, sub.prepared_size = 0;
            if (out_sz >= 0) {   /* later blocks write their slice of the output in place */
                s.p = (float *)y->data + (n * M + m0) * out_sz;
                s.bytes = sizeof(float) * (size_t)(m * out_sz);
                sub.rt = &slice_rt, sub.rt_user = &s;
            } else {
                sub.rt = NULL, sub.rt_user = NULL;
            }
            kiln_status st = fn(&sub);
            if (st == KILN_OK && out_sz < 0) {   /* the first block tells the output's shape */
                int64_t od[KILN_MAX_DIMS];
                memcpy(od, o.dims, sizeof(int64_t) * (size_t)o.ndim);
                od[0] = N, od[1] = M;
                out_sz = o.ndim == x->ndim && o.dims[1] == m ? kiln_tensor_numel(&o) / m : -1;
                st = out_sz < 0 ? kiln__kerr(ctx, KILN_ERR_INTERNAL, "unexpected convolution output")
                                : kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, o.ndim, od);
                if (st == KILN_OK)
                    s.p = (float *)y->data + (n * M + m0) * out_sz;
            }
            if (st == KILN_OK && o.data != s.p && o.data)   /* a sub-call that did not use the slice */
                memcpy(s.p ? s.p : (float *)y->data + (n * M + m0) * out_sz, o.data,
                       sizeof(float) * (size_t)(m * out_sz));
            if (o.data != s.p)
                kiln__tensor_release(&o);
            if (st != KILN_OK)
                return st;
        }
    return KILN_OK;
}

/* ---- any layer: the float32 kernel on a dequantized copy of the weight ---- */

static kiln_status dq_tensor(const qw *q, const kiln_tensor *w, kiln_tensor *out)
{
    KILN_TRY(kiln__tensor_alloc(out, KILN_DT_FLOAT32, w->ndim, w->dims));
    int64_t R = q->L.rows, K = q->L.k;
    if (!q->trans) {
        dq_rows(q, 0, R, out->data);
        return KILN_OK;
    }
    float *t = kiln__malloc(sizeof(float) * (size_t)(R * K)), *o = out->data;
    if (!t) {
        kiln__tensor_release(out);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    dq_rows(q, 0, R, t);
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < K; i++)
            o[i * R + r] = t[r * K + i];
    kiln__free(t);
    return KILN_OK;
}

/* x: the rounded activations (input 0), or NULL for the op's own (a Gather's indices are input 1). */
static kiln_status run_whole(kiln_kctx *ctx, kiln_kernel_fn fn, const qw *q, const kiln_tensor *x)
{
    int wi = w_input(ctx->node);
    kiln_tensor wf;
    KILN_TRY(dq_tensor(q, kiln__kin(ctx, wi), &wf));
    kiln_status st = kiln__krun_with(ctx, fn, wi, &wf, x && wi != 0 ? 0 : -1, x);
    kiln__tensor_release(&wf);
    return st;
}

/* ---- Gather: an embedding table's gathered rows dequantized straight from the packed table ---- */

typedef struct gather_job {
    const qw *q;
    const int64_t *ix;   /* the table row of each output row */
    float *y;
} gather_job;

static void gather_task(void *vctx, int64_t u0, int64_t u1)
{
    const gather_job *j = vctx;
    for (int64_t u = u0; u < u1; u++)
        dq_rows(j->q, j->ix[u], j->ix[u] + 1, j->y + u * j->q->L.k);
}

/* y[i..., :] = dq(q(table))[indices[i...], :] for axis 0 (the float32 Gather on the dequantized table
 * otherwise). The indices are checked as the float32 Gather checks them (int32 / int64, negative ones
 * count from the end, out of range an error) before any row is read. */
static kiln_status run_gather(kiln_kctx *ctx, kiln_kernel_fn fn, const lb_attrs *a)
{
    const kiln_tensor *w = kiln__kin(ctx, 0), *ind = kiln__kin(ctx, 1);
    if (!w || !ind)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input data or indices");
    KILN_TRY(kiln__kcheck(ctx, ind, 1));
    if (ind->dtype != KILN_DT_INT64 && ind->dtype != KILN_DT_INT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "indices must be int32 or int64, got %s", kiln_dtype_name(ind->dtype));
    qw q;
    KILN_TRY(qw_get(ctx, a, &q));   /* the table: 2-D (w_view) */
    int axis;
    kiln_status st = kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", 0), w->ndim, &axis);
    if (st == KILN_OK && axis != 0) {
        active++;
        st = run_whole(ctx, fn, &q, NULL);
        active--;
    } else if (st == KILN_OK && ind->ndim + 1 > KILN_MAX_DIMS) {
        st = kiln__kerr(ctx, KILN_ERR_LIMIT, "output rank %d exceeds %d", ind->ndim + 1, KILN_MAX_DIMS);
    } else if (st == KILN_OK) {
        int64_t nidx = kiln_tensor_numel(ind), rows = q.L.rows, K = q.L.k, od[KILN_MAX_DIMS];
        int64_t *ix = kiln__malloc(sizeof(int64_t) * (size_t)(nidx > 0 ? nidx : 1));
        if (!ix)
            st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; st == KILN_OK && i < nidx; i++) {
            int64_t v = ind->dtype == KILN_DT_INT64 ? ((const int64_t *)ind->data)[i] : ((const int32_t *)ind->data)[i];
            ix[i] = v < 0 ? v + rows : v;
            if (ix[i] < 0 || ix[i] >= rows)
                st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "index %lld is out of range for dimension %lld", (long long)v,
                                (long long)rows);
        }
        memcpy(od, ind->dims, sizeof(int64_t) * (size_t)ind->ndim);
        od[ind->ndim] = K;
        if (st == KILN_OK)
            st = kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, ind->ndim + 1, od);
        if (st == KILN_OK && nidx > 0) {
            gather_job j = {&q, ix, ctx->out[0]->data};
            int64_t grain = (1 << 14) / K;
            kiln__parallel_for(ctx->pool, ctx->nthreads, nidx, grain < 1 ? 1 : grain, gather_task, &j);
        }
        kiln__free(ix);
    }
    kiln__free(q.own);
    return st;
}

kiln_status kiln__run_lowbit(kiln_kctx *ctx, kiln_kernel_fn fn)
{
    lb_attrs a;
    KILN_TRY(read_attrs(ctx->node, &a));
    if (is_gather(ctx->node->op))
        return run_gather(ctx, fn, &a);
    const kiln_tensor *x0 = kiln__kin(ctx, 0), *w = kiln__kin(ctx, 1);
    if (!x0 || !w || ctx->n_in < 2)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input X or W");
    KILN_TRY(kiln__kcheck(ctx, x0, 0));
    if (x0->dtype != KILN_DT_FLOAT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "low-bit weights need float32 activations, got %s",
                          kiln_dtype_name(x0->dtype));
    for (int i = 2; i < ctx->n_in; i++)   /* bias, C, residual: read in place by the GEMM path */
        if (ctx->in[i])
            KILN_TRY(kiln__kcheck(ctx, ctx->in[i], i));
    qw q;
    KILN_TRY(qw_get(ctx, &a, &q));
    kiln_tensor x = *x0;
    int64_t nx = kiln_tensor_numel(x0);
    kiln_status st = KILN_OK;
    if (a.aq != AQ_NONE && nx > 0) {
        x.data = kiln__scratch(KILN_SCRATCH_LOWBIT_X, sizeof(float) * (size_t)nx);
        if (!x.data)
            st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (rounded activations)");
        else
            aq_apply(ctx->pool, ctx->nthreads, a.aq, a.ascale, x0->data, x.data, nx);
    }
    bool handled = false;
    active++;
    if (st == KILN_OK && is_conv(ctx->node->op))
        st = run_conv(ctx, fn, &q, &x, &handled);
    else if (st == KILN_OK)
        st = run_gemm(ctx, &q, &x, &handled);
    if (st == KILN_OK && !handled)
        st = run_whole(ctx, fn, &q, &x);
    /* an output the GPU holds only in E4M3 (KILN_ATTR_FP8_STORE): rounded so here too, its readers (residual adds
     * included) see the same values */
    float ss = kiln__attr_f(ctx->node, KILN_ATTR_FP8_STORE, NAN);
    kiln_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (st == KILN_OK && ss > 0 && isfinite(ss) && y && y->data && y->dtype == KILN_DT_FLOAT32)
        aq_apply(ctx->pool, ctx->nthreads, AQ_FP8, ss, y->data, y->data, kiln_tensor_numel(y));
    active--;
    kiln__free(q.own);
    return st;
}

/* ---- scalar references (tests) ---- */

void kiln__lowbit_set_block_floats(int64_t floats)
{
    w_block_floats = floats > 0 ? floats : (int64_t)1 << 18;
}

/* FP8: per row, s = amax / 448 over its finite values (1 when that is 0), y = e4m3(x / s) * s. */
static void ref_fp8_rows(const float *w, int64_t rows, int64_t k, bool trans, float *y)
{
    for (int64_t r = 0; r < rows; r++) {
        float amax = 0;
        for (int64_t i = 0; i < k; i++) {
            float v = fabsf(w[trans ? i * rows + r : r * k + i]);
            amax = isfinite(v) && v > amax ? v : amax;
        }
        float s = amax / 448.0f;
        s = s > 0 ? s : 1.0f;   /* an all-zero row, or one whose scale underflows */
        for (int64_t i = 0; i < k; i++) {
            int64_t at = trans ? i * rows + r : r * k + i;
            y[at] = kiln__fp8_to_f32(KILN_DT_FP8E4M3, kiln__f32_to_fp8(KILN_DT_FP8E4M3, w[at] / s, true)) * s;
        }
    }
}

kiln_status kiln__lowbit_ref_weight(const kiln_node *n, const kiln_tensor *w, float *y)
{
    lb_attrs a;
    KILN_TRY(read_attrs(n, &a));
    qw q;
    int64_t dims[4];
    memset(&q, 0, sizeof q);
    KILN_TRY(qw_layout(n, a.fmt, w, &q, dims));
    if (per_row(&q.L, q.tensor)) {
        ref_fp8_rows(w->data, q.L.rows, q.L.k, q.trans, y);
        for (int64_t i = 0; a.aq == AQ_FP16 && i < q.L.rows * q.L.k; i++)   /* FP8 weights with FP16 rounding */
            y[i] = kiln__f16_to_f32(kiln__f32_to_f16(y[i]));
        return KILN_OK;
    }
    uint8_t *p = kiln__malloc((size_t)q.B.total);
    if (!p)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = quantize(&q.L, &q.B, w->data, q.trans, p);
    if (st == KILN_OK) {
        qw_point(&q, p);
        float *t = kiln__malloc(sizeof(float) * (size_t)(q.L.rows * q.L.k));
        if (!t) {
            kiln__free(p);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        kiln__qunpack(&q.L, q.data, q.scales, q.ts, t);
        for (int64_t r = 0; r < q.L.rows; r++)
            for (int64_t i = 0; i < q.L.k; i++) {
                float v = t[r * q.L.k + i];
                y[q.trans ? i * q.L.rows + r : r * q.L.k + i] = a.aq == AQ_FP16 ? kiln__f16_to_f32(kiln__f32_to_f16(v)) : v;
            }
        kiln__free(t);
    }
    kiln__free(p);
    return st;
}

kiln_status kiln__lowbit_ref_act(const kiln_node *n, float *x, int64_t count)
{
    lb_attrs a;
    KILN_TRY(read_attrs(n, &a));
    for (int64_t i = 0; i < count; i++) {
        if (a.aq == AQ_FP16)
            x[i] = kiln__f16_to_f32(kiln__f32_to_f16(x[i]));
        else if (a.aq == AQ_FP8)
            x[i] = kiln__fp8_to_f32(KILN_DT_FP8E4M3, kiln__f32_to_fp8(KILN_DT_FP8E4M3, x[i] / a.ascale, true)) * a.ascale;
    }
    return KILN_OK;
}
