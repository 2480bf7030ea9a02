/* The fast quantized kernels on the INT8 GEMM core (qgemm.h): QLinearMatMul, MatMulInteger and
 * com.microsoft QGemm (A as rows, B as panels), QLinearConv and ConvInteger (weights as rows,
 * the image as panels packed strip by strip: an implicit im2col). Registered over the scalar
 * references by x86/qgemm_vnni.c. Cases they do not cover (batched B, non-scalar
 * activation scales, 3-D+ convolutions, 16-bit outputs, huge K) and every malformed input go to
 * the reference kernel, which reports errors.
 *
 * Constant weights are packed by kiln__qprep_conv / kiln__qprep_matmul (kiln_kernel_prep_fn,
 * registered in prep.c's registry): the kernel reads the layer's ctx->prepared blob when
 * kiln__prep_check accepts it for these dims, and otherwise packs the weights into a temporary
 * blob with the same function. Which layers the kernels take is decided by one set of checks
 * (qmm_operands_ok, qconv_operands_ok), asked by the kernels at run time and by the prepare functions
 * on the node's constants: weights are packed only for layers the fast kernel will take, so a layer it
 * refuses keeps its weights for the reference kernel. A layer it leaves to the reference only at run
 * time (a condition on a computed input) whose weights an engine stored only packed runs the reference
 * on the weights read back from the blob (fallback). */
#include "qgemm.h"
#include "cpu_kernels.h"
#include "prep.h"
#include "conv.h"
#include <math.h>

/* ---- prepared blobs (prep.h layouts KILN_PREP_QGEMM_B / KILN_PREP_QCONV_W): the weights as s8
 * panels or rows, then their int32 sums at a 64-byte offset. The same bytes on every host
 * (kiln__prep_alloc_any: these kernels are registered for every host, on the VNNI tile or the
 * portable one), so a blob replaces the weights input (an engine stores only the packed copy;
 * these kernels never read the weights' data then, and for a case they leave to the reference
 * kernel the weights are unpacked for it: fallback). ---- */

static int64_t al64(int64_t x) { return (x + 63) & ~(int64_t)63; }

typedef struct qprep {
    const uint8_t *data;
    const int32_t *sums;
} qprep;

static int64_t prep_data_bytes(uint32_t layout, int64_t K, int64_t N, int64_t groups)
{
    return layout == KILN_PREP_QGEMM_B ? kiln__qgemm_panel_bytes(K, N) : N * groups * kiln__qgemm_kp(K);
}
static uint64_t prep_payload(uint32_t layout, int64_t K, int64_t N, int64_t groups)
{
    return (uint64_t)(al64(prep_data_bytes(layout, K, N, groups)) + (int64_t)sizeof(int32_t) * N * groups);
}

static kiln_status prep_new(uint32_t layout, int wi, int64_t K, int64_t N, int64_t groups, void **blob,
                            size_t *size, qprep *q)
{
    int64_t dims[3] = {K, N, groups};
    uint8_t *p = kiln__prep_alloc_any(layout, 1u << wi, KILN_DT_INT8, 3, dims, prep_payload(layout, K, N, groups),
                                      blob, size);
    if (!p)
        return kiln__err(KILN_ERR_NOMEM, "out of memory (packed INT8 weights)");
    q->data = p;
    q->sums = (const int32_t *)(p + al64(prep_data_bytes(layout, K, N, groups)));
    return KILN_OK;
}

static bool is_q8(const kiln_tensor *t) { return t && (t->dtype == KILN_DT_UINT8 || t->dtype == KILN_DT_INT8); }


/* The layer's prepared weights when valid for these dims, else packed now into *own (weights
 * input wi; an error when an engine stored them only in a packed form that does not fit). */
static kiln_status get_prep(kiln_kctx *ctx, kiln_kernel_prep_fn fn, int wi, uint32_t layout, int64_t K, int64_t N,
                            int64_t groups, void **own, qprep *q)
{
    *own = NULL;
    int64_t dims[3] = {K, N, groups};
    const uint8_t *p = kiln__prep_check(ctx, layout, KILN_DT_INT8, 3, dims, prep_payload(layout, K, N, groups));
    if (p) {
        q->data = p;
        q->sums = (const int32_t *)(p + al64(prep_data_bytes(layout, K, N, groups)));
        return KILN_OK;
    }
    if (kiln__prep_dropped(kiln__kin(ctx, wi)))
        return kiln__prep_missing(ctx, wi);
    size_t sz = 0;
    KILN_TRY(fn(ctx->node, ctx->n_in, ctx->in, own, &sz));
    if (!*own || sz != KILN_PREP_HDR_BYTES + prep_payload(layout, K, N, groups)) {
        kiln__free(*own);
        *own = NULL;
        return kiln__kerr(ctx, KILN_ERR_INTERNAL, "weight packing failed");
    }
    p = (const uint8_t *)*own + KILN_PREP_HDR_BYTES;
    q->data = p;
    q->sums = (const int32_t *)(p + al64(prep_data_bytes(layout, K, N, groups)));
    return KILN_OK;
}

static bool is_mm(kiln_op op)
{
    return op == KILN_OP_QLinearMatMul || op == KILN_OP_MatMulInteger || op == KILN_OP_QGemm;
}
/* The weights input of a quantized layer */
static int w_index(kiln_op op) { return op == KILN_OP_MatMulInteger || op == KILN_OP_ConvInteger ? 1 : 3; }

/* The weights w (a tensor an engine stored only packed: dtype and dims, no data) read back from ctx's blob into *out
 * (kiln__tensor_alloc'd): the inverse of kiln__qprep_matmul's panels (element (k, n) of op(B) at panel n / NR, 4 k
 * a lane) or kiln__qprep_conv's rows (kp bytes a output channel), u8 values flipped back. *ok false (out untouched)
 * when the blob is not that layout for these weights. */
static kiln_status unpack_weights(const kiln_kctx *ctx, const kiln_tensor *w, kiln_tensor *out, bool *ok)
{
    const kiln_node *n = ctx->node;
    bool mm = is_mm(n->op), tb = n->op == KILN_OP_QGemm && kiln__attr_i(n, "transB", 0) != 0;
    int64_t G = mm ? 1 : kiln__attr_i(n, "group", 1), K = 0, N = 0;
    *ok = false;
    if (!is_q8(w) || (mm && w->ndim != 2) || (!mm && (w->ndim < 3 || G < 1 || w->dims[0] <= 0 || w->dims[0] % G)))
        return KILN_OK;
    K = mm ? w->dims[tb ? 1 : 0] : kiln_tensor_numel(w) / w->dims[0];
    N = mm ? w->dims[tb ? 0 : 1] : w->dims[0] / G;
    uint32_t layout = mm ? KILN_PREP_QGEMM_B : KILN_PREP_QCONV_W;
    int64_t dims[3] = {K, N, G}, kp = kiln__qgemm_kp(K);
    const uint8_t *p = K > 0 && N > 0 ? kiln__prep_check(ctx, layout, KILN_DT_INT8, 3, dims,
                                                         prep_payload(layout, K, N, G)) : NULL;
    if (!p)
        return KILN_OK;
    KILN_TRY(kiln__tensor_alloc(out, w->dtype, w->ndim, w->dims));
    uint8_t *d = out->data, x = w->dtype == KILN_DT_UINT8 ? 0x80 : 0;
    for (int64_t k = 0; mm && k < K; k++)
        for (int64_t j = 0; j < N; j++)
            d[tb ? j * K + k : k * N + j] =
                p[(j / KILN_QGEMM_NR) * kp * KILN_QGEMM_NR + (k >> 2) * (4 * KILN_QGEMM_NR) + (j % KILN_QGEMM_NR) * 4 +
                  (k & 3)] ^ x;
    for (int64_t m = 0; !mm && m < N * G; m++)
        for (int64_t k = 0; k < K; k++)
            d[m * K + k] = p[m * kp + k] ^ x;
    *ok = true;
    return KILN_OK;
}

/* The reference kernel, for a layer the fast one leaves to it; weights an engine stored only packed (their input
 * dropped) are unpacked for it from the layer's blob. */
static kiln_status fallback(kiln_kctx *ctx)
{
    /* QLinearConvAdd's convolution (kiln__qconv_add runs it through these kernels): QLinearConv's reference */
    kiln_op op = ctx->node->op == KILN_OP_QLinearConvAdd ? KILN_OP_QLinearConv : ctx->node->op;
    kiln_kernel_fn f = kiln__cpu_ref_kernel(op);
    if (!f)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "no reference kernel");
    int wi = w_index(op);
    const kiln_tensor *w = kiln__kin(ctx, wi);
    kiln_tensor wu = {0};
    bool ok = false;
    if (kiln__prep_dropped(w) && ctx->n_in <= 16)
        KILN_TRY(unpack_weights(ctx, w, &wu, &ok));
    if (!ok)
        return f(ctx);   /* weights at hand (or none to unpack: the reference reports it) */
    kiln_status st = kiln__krun_with(ctx, f, wi, &wu, -1, NULL);
    kiln__tensor_release(&wu);
    return st;
}

static bool is_scalar(const kiln_tensor *t) { return t && kiln_tensor_numel(t) == 1; }
static bool float_scale(const kiln_tensor *t)
{
    return t && (t->dtype == KILN_DT_FLOAT32 || t->dtype == KILN_DT_FLOAT16 || t->dtype == KILN_DT_BFLOAT16 ||
                 t->dtype == KILN_DT_FLOAT64);
}
/* finite and > 0 */
static bool good_scales(const kiln_tensor *t)
{
    int64_t n = kiln_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = kiln__get_f64(t->dtype, t->data, i);
        if (!(v > 0) || !isfinite(v) || !isfinite((float)v) || (float)v == 0.0f)
            return false;
    }
    return true;
}
static int32_t zp_at(const kiln_tensor *z, int64_t i)
{
    return z ? (int32_t)kiln__get_i64(z->dtype, z->data, kiln_tensor_numel(z) == 1 ? 0 : i) : 0;
}

/* ---- matmul-like: Y[.., M, N] = A[.., M, K] x B[K, N] ---- */

typedef struct qmm_args {
    const kiln_tensor *a, *az, *b, *bz;
    bool trans_a;                /* QGemm transA: A is [K, M] */
    bool trans_b;
    const kiln_tensor *bias;     /* int32 [N] / [1, N], or NULL */
    kiln_dtype odt;              /* INT32 (MatMulInteger), FLOAT32, UINT8, INT8 */
    bool integer;                /* MatMulInteger: int32 output, no scales */
    const kiln_tensor *as, *bs, *ys, *yz;
    float alpha;
} qmm_args;

/* The output types the fast kernels write: int32 for ConvInteger / MatMulInteger, else uint8, int8, float32 */
/* The output's quantization as the fast kernels take it: none for a float32 output, else a positive finite scalar
 * float32 scale (required at run time) and a scalar zero point of the output's type */
static bool out_quant_ok(const kiln_tensor *ys, const kiln_tensor *yz, kiln_dtype odt, bool run)
{
    if (odt == KILN_DT_FLOAT32)
        return true;
    if ((ys || run) && (!float_scale(ys) || !is_scalar(ys) || !good_scales(ys)))
        return false;
    return !yz || (is_scalar(yz) && yz->dtype == odt);
}

static bool out_ok(bool integer, kiln_dtype odt)
{
    return integer ? odt == KILN_DT_INT32 : odt == KILN_DT_UINT8 || odt == KILN_DT_INT8 || odt == KILN_DT_FLOAT32;
}

/* Input i of a node: in[i] (the kernel's inputs, or at build time the node's constants), NULL when absent */
static const kiln_tensor *in_at(const kiln_tensor *const *in, int n_in, int i) { return i < n_in ? in[i] : NULL; }

/* Whether node n has input i, at build time (a computed input is not in the constants) */
static bool has_input(const kiln_node *n, int n_in, const kiln_tensor *const *in, int i)
{
    return in_at(in, n_in, i) || (n->in && i < n->n_in && n->in[i] >= 0);
}

/* A matmul-like node's operands and output type from in[0..n_in) (run time: its inputs; build time, build: its
 * constants, an output type that depends on the computed A taken as uint8) */
static void qmm_args_of(const kiln_node *n, const kiln_tensor *const *in, int n_in, bool build, qmm_args *q)
{
    const kiln_tensor *t[9];
    for (int i = 0; i < 9; i++)
        t[i] = in_at(in, n_in, i);
    if (n->op == KILN_OP_MatMulInteger) {
        *q = (qmm_args){.a = t[0], .b = t[1], .az = t[2], .bz = t[3], .odt = KILN_DT_INT32, .integer = true,
                        .alpha = 1};
        return;
    }
    bool gemm = n->op == KILN_OP_QGemm;   /* QGemm: C (int32 bias) at 6, y_scale / y_zero_point at 7, 8 */
    *q = (qmm_args){.a = t[0], .as = t[1], .az = t[2], .b = t[3], .bs = t[4], .bz = t[5], .bias = t[gemm ? 6 : 8],
                    .ys = t[gemm ? 7 : 6], .yz = t[gemm ? 8 : 7], .alpha = 1};
    kiln_dtype a_dt = t[0] ? t[0]->dtype : KILN_DT_UINT8;
    if (gemm) {   /* no y_scale: float32 output */
        bool ys = build ? has_input(n, n_in, in, 7) : t[7] != NULL;
        q->odt = !ys ? KILN_DT_FLOAT32 : q->yz ? q->yz->dtype : a_dt;
        q->trans_a = kiln__attr_i(n, "transA", 0) != 0, q->trans_b = kiln__attr_i(n, "transB", 0) != 0;
        q->alpha = kiln__attr_f(n, "alpha", 1.0f);
    } else {   /* QLinearMatMul: the y_zero_point's type, float32 with kiln_out_float */
        q->odt = kiln__attr_i(n, "kiln_out_float", 0) ? KILN_DT_FLOAT32 : q->yz ? q->yz->dtype : a_dt;
    }
}

/* What the fast kernels ask of everything but A (B, the zero points, the bias, the scales, the output's
 * quantization) for a B of K x N. run: at run time, where the scales the output needs must be there; at build
 * time an input not given (computed) is left to the run. */
static bool qmm_operands_ok(const qmm_args *q, int64_t K, int64_t N, bool run)
{
    const kiln_tensor *b = q->b;
    if (!is_q8(b) || b->ndim != 2 || K <= 0 || N <= 0 || K > KILN_QGEMM_MAX_K || !out_ok(q->integer, q->odt))
        return false;
    if ((q->az && !is_scalar(q->az)) ||
        (q->bz && (q->bz->dtype != b->dtype || (!is_scalar(q->bz) && kiln_tensor_numel(q->bz) != N) ||
                   q->bz->ndim > 1)))
        return false;
    if (q->bias && (q->bias->dtype != KILN_DT_INT32 || kiln_tensor_numel(q->bias) != N || q->bias->ndim < 1 ||
                    q->bias->dims[q->bias->ndim - 1] != N))
        return false;
    if (q->integer)
        return true;
    if ((q->as || run) && (!float_scale(q->as) || !is_scalar(q->as) || !good_scales(q->as)))
        return false;
    if ((q->bs || run) && (!float_scale(q->bs) || q->bs->ndim > 1 ||
                           (!is_scalar(q->bs) && kiln_tensor_numel(q->bs) != N) || !good_scales(q->bs)))
        return false;
    return out_quant_ok(q->ys, q->yz, q->odt, run);
}

/* Shapes this fast path covers; false: use the reference. */
static bool qmm_covered(const qmm_args *q, int64_t *M, int64_t *N, int64_t *K)
{
    const kiln_tensor *a = q->a, *b = q->b;
    if (!is_q8(a) || !is_q8(b) || b->ndim != 2 || a->ndim < 1 || (q->trans_a && a->ndim != 2))
        return false;
    *K = a->dims[q->trans_a ? 0 : a->ndim - 1];
    *N = b->dims[q->trans_b ? 0 : 1];
    if (b->dims[q->trans_b ? 1 : 0] != *K || *K <= 0 || (q->az && q->az->dtype != a->dtype))
        return false;
    *M = kiln_tensor_numel(a) / *K;
    return qmm_operands_ok(q, *K, *N, true);
}

/* op(A)'s rows [r0, r1) packed for the GEMM (kiln__qpack_rows), on the layer's threads */
typedef struct qrows_job {
    const uint8_t *src;
    int64_t K, kp;
    int64_t mt;   /* transA: A is [K, mt], row r of op(A) its column r; 0: A's rows are op(A)'s */
    bool flip;
    uint8_t *dst;
    int32_t *sum;
} qrows_job;

/* The same rows from A's columns (kiln__qpack_rows' layout: kp bytes a row, zero padded; u8 sums), read along A's
 * rows */
static void qrows_trans(const qrows_job *j, int64_t r0, int64_t r1)
{
    uint8_t x = j->flip ? 0x80 : 0;
    for (int64_t k = 0; k < j->K; k++) {
        const uint8_t *s = j->src + k * j->mt;
        for (int64_t r = r0; r < r1; r++)
            j->dst[r * j->kp + k] = s[r] ^ x;
    }
    for (int64_t r = r0; r < r1; r++) {
        uint8_t *d = j->dst + r * j->kp;
        memset(d + j->K, 0, (size_t)(j->kp - j->K));
        int32_t s = 0;
        for (int64_t k = 0; j->sum && k < j->K; k++)
            s += d[k];
        if (j->sum)
            j->sum[r] = s;
    }
}

static void qrows_task(void *ctx, int64_t r0, int64_t r1)
{
    const qrows_job *j = ctx;
    if (j->mt) {
        qrows_trans(j, r0, r1);
        return;
    }
    kiln__qpack_rows(j->src + r0 * j->K, j->K, r1 - r0, j->K, j->flip, false, j->dst + r0 * j->kp,
                     j->sum ? j->sum + r0 : NULL);
}

static kiln_status qmm_run(kiln_kctx *ctx, const qmm_args *q)
{
    int64_t M, N, K;
    if (!qmm_covered(q, &M, &N, &K))
        return fallback(ctx);
    const kiln_tensor *a = q->a, *b = q->b;
    int64_t odims[KILN_MAX_DIMS];
    int ond = a->ndim;
    for (int d = 0; d < a->ndim - 1; d++)
        odims[d] = a->dims[d];
    if (q->trans_a)
        odims[0] = M;
    odims[ond - 1] = N;
    KILN_TRY(kiln__kout_uninit(ctx, 0, q->odt, ond, odims));
    if (M == 0)
        return KILN_OK;
    void *own = NULL;
    qprep h = {0};
    KILN_TRY(get_prep(ctx, kiln__qprep_matmul, w_index(ctx->node->op), KILN_PREP_QGEMM_B, K, N, 1, &own, &h));
    kiln_qepi e;
    float *sbuf = NULL;
    float as = q->as ? (float)kiln__get_f64(q->as->dtype, q->as->data, 0) : 1.0f;
    kiln_status st = kiln__qepi_setup(ctx, &e, q->odt, false, N, as, q->bs, q->alpha, q->ys, q->yz, &sbuf);
    int64_t kp = kiln__qgemm_kp(K);
    uint8_t *ap = NULL;
    int32_t *asum = NULL, *bzp = NULL;
    if (st == KILN_OK) {
        e.bias = q->bias ? q->bias->data : NULL;
        bool a_flip = a->dtype == KILN_DT_INT8, b_flip = b->dtype == KILN_DT_UINT8;
        /* stored-domain zero points: A on the u8 side (+128 when s8), B on the s8 side (-128 when u8) */
        int32_t za = zp_at(q->az, 0) + (a_flip ? 128 : 0);
        bool bz_nonzero = b_flip;
        for (int64_t j = 0; q->bz && j < kiln_tensor_numel(q->bz); j++)
            bz_nonzero |= zp_at(q->bz, j) != 0;
        /* A is read in place where it is already the rows the tiles take (u8, K a multiple of 4, no row sums for
         * B's zero points), else packed on the layer's threads (it ran on the calling thread alone: ~4% of
         * BERT-base int8's samples, its s8 activations flipped to u8, with the other thread waiting; on both threads:
         * BERT-base int8 1/1.037, bench/env_ab 40 pairs) */
        const bool a_direct = !a_flip && !bz_nonzero && kp == K && !q->trans_a;
        ap = a_direct ? NULL : kiln__malloc((size_t)(M * kp));
        asum = bz_nonzero ? kiln__malloc(sizeof(int32_t) * (size_t)M) : NULL;
        bzp = bz_nonzero ? kiln__malloc(sizeof(int32_t) * (size_t)N) : NULL;
        if ((!a_direct && !ap) || (bz_nonzero && (!asum || !bzp))) {
            st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        } else {
            for (int64_t j = 0; bzp && j < N; j++)
                bzp[j] = zp_at(q->bz, j) - (b_flip ? 128 : 0);
            if (!a_direct) {
                qrows_job rj = {.src = a->data, .K = K, .kp = kp, .mt = q->trans_a ? M : 0, .flip = a_flip,
                                .dst = ap, .sum = asum};
                kiln__parallel_for(ctx->pool, ctx->nthreads, M, 1 + 16384 / (K + 1), qrows_task, &rj);
            }
            kiln_qgemm g = {.M = M, .N = N, .K = K, .a = a_direct ? (const uint8_t *)a->data : ap, .lda = kp,
                            .a_s8 = false, .a_sum = asum, .a_zp0 = za,
                            .b = h.data, .b_sum = za ? h.sums : NULL, .b_zp = bzp,
                            .c = ctx->out[0]->data, .ldc = N, .epi = e};
            st = kiln__qgemm(ctx->pool, ctx->nthreads, &g);
        }
    }
    kiln__free(ap);
    kiln__free(asum);
    kiln__free(bzp);
    kiln__free(sbuf);
    kiln__free(own);
    return st;
}

kiln_status kiln__k_qlinearmatmul_fast(kiln_kctx *ctx)
{
    qmm_args q;   /* input 8: kiln's int32 bias (fuse-qdq: MatMul + Add) */
    qmm_args_of(ctx->node, ctx->in, ctx->n_in, false, &q);
    return qmm_run(ctx, &q);
}

kiln_status kiln__k_matmulinteger_fast(kiln_kctx *ctx)
{
    qmm_args q;
    qmm_args_of(ctx->node, ctx->in, ctx->n_in, false, &q);
    return qmm_run(ctx, &q);
}

kiln_status kiln__k_qgemm_fast(kiln_kctx *ctx)
{
    const kiln_tensor *a = kiln__kin(ctx, 0);
    if (!a || a->ndim != 2)
        return fallback(ctx);
    qmm_args q;
    qmm_args_of(ctx->node, ctx->in, ctx->n_in, false, &q);
    return qmm_run(ctx, &q);
}

kiln_status kiln__qprep_matmul(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                               size_t *size)
{
    *blob = NULL;
    *size = 0;
    qmm_args q;
    qmm_args_of(n, consts, n_in, true, &q);
    const kiln_tensor *b = q.b;
    if (!is_q8(b) || b->ndim != 2 || !b->data)
        return KILN_OK; /* nothing to prepare: the kernel packs per run or uses the reference */
    int64_t K = b->dims[q.trans_b ? 1 : 0], N = b->dims[q.trans_b ? 0 : 1];
    if (!qmm_operands_ok(&q, K, N, false))
        return KILN_OK; /* the reference runs it, from the weights as they are */
    qprep h = {0};
    KILN_TRY(prep_new(KILN_PREP_QGEMM_B, w_index(n->op), K, N, 1, blob, size, &h));
    /* B goes to the s8 side: u8 values flip */
    kiln__qpack_panels(b->data, q.trans_b ? 1 : N, q.trans_b ? K : 1, K, N, b->dtype == KILN_DT_UINT8,
                       (uint8_t *)h.data);
    kiln__qpanel_sums(h.data, K, N, true, (int32_t *)h.sums);
    return KILN_OK;
}

/* ---- convolution: Y[n, g*mpg + m, p] = W_g[m, K] x im2col(X[n], g)[K, p] ---- */

typedef struct qconv_pack {
    const kiln_qconv_geom *g;
    const uint8_t *x;      /* image n, channels of group gi */
    uint8_t xor_, pad;     /* flip of X's bytes; the padding value (x's stored zero point) */
    int64_t cpg, ksz, K;
    bool pointwise;        /* 1x1, stride 1, no padding: pixel p of channel c is x[c * isp + p] */
    int64_t isp;
    /* 2-D layers: the image copied with its padding (and x's flip) into stride phases, so that
     * row k of the im2col matrix over "virtual" pixels q = oy * wq + ox (ox < wq, the phase
     * width) is the contiguous run xpad + off[k] + q; columns with ox >= Wo are dropped */
    const uint8_t *xpad;
    const int64_t *off;
} qconv_pack;

/* im2col row k (channel c, tap (ky, kx)) for pixels [j0, j0 + n) into d */
static void im2col_row(const qconv_pack *pc, int64_t k, int64_t j0, int64_t n, uint8_t *d)
{
    const kiln_qconv_geom *g = pc->g;
    int64_t c = k / pc->ksz, t = k % pc->ksz;
    int64_t H = g->nsp == 2 ? g->in[0] : 1, W = g->in[g->nsp - 1], Wo = g->out[g->nsp - 1];
    int64_t ky = g->nsp == 2 ? t / g->k[1] : 0, kx = g->nsp == 2 ? t % g->k[1] : t;
    int64_t sh = g->nsp == 2 ? g->stride[0] : 1, sw = g->stride[g->nsp - 1];
    int64_t oy0 = g->nsp == 2 ? g->pad_b[0] : 0, ox0 = g->pad_b[g->nsp - 1];
    int64_t dh = g->nsp == 2 ? g->dil[0] : 1, dw = g->dil[g->nsp - 1];
    const uint8_t *xc = pc->x + c * H * W;
    for (int64_t p = j0; p < j0 + n;) {
        int64_t oy = p / Wo, ox = p % Wo, run = Wo - ox < j0 + n - p ? Wo - ox : j0 + n - p;
        int64_t iy = oy * sh - oy0 + ky * dh;
        uint8_t *dd = d + (p - j0);
        if (iy < 0 || iy >= H) {
            memset(dd, pc->pad, (size_t)run);
        } else if (sw == 1) { /* padding, one run of consecutive pixels, padding */
            const uint8_t *row = xc + iy * W;
            int64_t ix0 = ox + kx * dw - ox0, a = ix0 < 0 ? -ix0 : 0, e = W - ix0;
            a = a < run ? a : run;
            e = e < a ? a : e > run ? run : e;
            memset(dd, pc->pad, (size_t)a);
            kiln__qconv_bytes(dd + a, row + ix0 + a, e - a, pc->xor_ != 0);
            memset(dd + e, pc->pad, (size_t)(run - e));
        } else {
            const uint8_t *row = xc + iy * W;
            int64_t off = kx * dw - ox0;
            for (int64_t q = 0; q < run; q++) {
                int64_t ix = (ox + q) * sw + off;
                dd[q] = ix >= 0 && ix < W ? row[ix] ^ pc->xor_ : pc->pad;
            }
        }
        p += run;
    }
}

/* kiln_qpackb_fn: the strip's im2col rows four at a time, interleaved into panels */
static void qconv_packb(void *arg, int64_t j0, int64_t n, uint8_t *dst, int32_t *sum)
{
    const qconv_pack *pc = arg;
    int64_t kp = kiln__qgemm_kp(pc->K), np = (n + KILN_QGEMM_NR - 1) / KILN_QGEMM_NR;
    uint8_t rows[4][KILN_QGEMM_STRIP];
    static const uint8_t zero[KILN_QGEMM_STRIP];
    for (int64_t k0 = 0; pc->xpad && k0 < kp; k0 += 4) { /* rows read in place (xpad has slack) */
        const uint8_t *r[4];
        for (int i = 0; i < 4; i++)
            r[i] = k0 + i < pc->K ? pc->xpad + pc->off[k0 + i] + j0 : zero;
        kiln__qpack_group4p(r, np, kp, k0, 0, dst);
    }
    for (int64_t k0 = 0; !pc->xpad && k0 < kp; k0 += 4) {
        if (pc->pointwise && n == KILN_QGEMM_STRIP && k0 + 4 <= pc->K) { /* im2col is the image itself */
            kiln__qpack_group4(pc->x + k0 * pc->isp + j0, pc->isp, np, kp, k0, pc->xor_, dst);
            continue;
        }
        for (int r = 0; r < 4; r++) {
            if (k0 + r < pc->K)
                im2col_row(pc, k0 + r, j0, n, rows[r]);
            else
                memset(rows[r], 0, sizeof rows[r]);
            memset(rows[r] + n, 0, (size_t)(KILN_QGEMM_STRIP - n));
        }
        kiln__qpack_group4(&rows[0][0], KILN_QGEMM_STRIP, np, kp, k0, 0, dst);
    }
    if (sum)
        kiln__qpanel_sums(dst, pc->K, np * KILN_QGEMM_NR, false, sum);
}

/* ---- depthwise (one input and one output channel per group), 1-D / 2-D: direct int32 rows ---- */

typedef struct qdw_job {
    const kiln_qconv_geom *g;
    const uint8_t *x, *w;
    bool x_s8, w_s8;
    int32_t zx;
    const kiln_tensor *wz;
    const kiln_qepi *e;
    uint8_t *y;
    size_t osz;
    bool vec;
    bool f32;              /* the planes through the float32 rows (kiln__qdw_plane_f32, with p's band) */
    kiln_conv2d p;         /* the geometry (qdw_view) */
    kiln_status st;
} qdw_job;

/* The 2-D view of a 1-D or 2-D depthwise geometry (band fields zero), both row paths' */
static void qdw_view(const kiln_qconv_geom *g, kiln_conv2d *p)
{
    bool d2 = g->nsp == 2;
    int L = g->nsp - 1;
    memset(p, 0, sizeof *p);
    p->H = d2 ? g->in[0] : 1, p->W = g->in[L], p->Ho = d2 ? g->out[0] : 1, p->Wo = g->out[L];
    p->kh = d2 ? g->k[0] : 1, p->kw = g->k[L], p->sh = d2 ? g->stride[0] : 1, p->sw = g->stride[L];
    p->ph = d2 ? g->pad_b[0] : 0, p->pw = g->pad_b[L], p->dh = d2 ? g->dil[0] : 1, p->dw = g->dil[L];
}

/* Whether the float32 rows (kiln__qdw_plane_f32) take p's layer, with the float32 depthwise kernel's band
 * (kiln__conv_dw_plan): not past KILN_QDW_F32_MAX_TAPS taps (no longer exact), strides other than 1 and 2 (no row
 * kernel), or where the plan has no band. */
static bool qdw_f32_plan(int nsp, kiln_conv2d *p)
{
    if (nsp > 2 || p->kh * p->kw > KILN_QDW_F32_MAX_TAPS || (p->sw != 1 && p->sw != 2))
        return false;
    kiln__conv_dw_plan(p);
    return p->band_rows > 0;
}

static void qdw_f32_task(qdw_job *j, int64_t p0, int64_t p1)
{
    const kiln_qconv_geom *g = j->g;
    const kiln_conv2d *p = &j->p;
    int64_t ksz = p->kh * p->kw;
    float *buf = kiln__malloc(sizeof(float) * (size_t)(p->band_rows * p->Wp + p->band * p->Wo + ksz));
    if (!buf) {
        j->st = KILN_ERR_NOMEM;
        return;
    }
    float *frow = buf + p->band_rows * p->Wp, *wk = frow + p->band * p->Wo;
    for (int64_t pl = p0; pl < p1; pl++) {
        int64_t c = pl % g->C;
        const uint8_t *wp = j->w + c * ksz;
        int32_t zw = zp_at(j->wz, c);
        for (int64_t t = 0; t < ksz; t++)
            wk[t] = (float)((j->w_s8 ? (int32_t)(int8_t)wp[t] : (int32_t)wp[t]) - zw);
        kiln__qdw_plane_f32(p, j->x + pl * p->H * p->W, j->x_s8, j->zx, wk, buf, frow, j->e, c,
                            j->y + (size_t)(pl * p->Ho * p->Wo) * j->osz, j->osz);
    }
    kiln__free(buf);
}

static void qdw_task(void *arg, int64_t p0, int64_t p1)
{
    qdw_job *j = arg;
    if (j->f32) {
        qdw_f32_task(j, p0, p1);
        return;
    }
    const kiln_qconv_geom *g = j->g;
    const kiln_conv2d *p = &j->p;
    int64_t H = p->H, W = p->W, Ho = p->Ho, Wo = p->Wo, kh = p->kh, kw = p->kw, sh = p->sh, sw = p->sw;
    int64_t ph = p->ph, pw = p->pw, dh = p->dh, dw = p->dw;
    int32_t *acc = kiln__malloc(sizeof(int32_t) * (size_t)Wo);
    uint8_t *gath = kiln__malloc((size_t)Wo);
    if (!acc || !gath) {
        j->st = KILN_ERR_NOMEM;
        kiln__free(acc);
        kiln__free(gath);
        return;
    }
    for (int64_t pl = p0; pl < p1; pl++) {
        int64_t c = pl % g->C;
        const uint8_t *xp = j->x + pl * H * W, *wp = j->w + c * kh * kw;
        int32_t zw = zp_at(j->wz, c);
        uint8_t *yp = j->y + (size_t)(pl * Ho * Wo) * j->osz;
        for (int64_t oy = 0; oy < Ho; oy++) {
            memset(acc, 0, sizeof(int32_t) * (size_t)Wo);
            for (int64_t ky = 0; ky < kh; ky++) {
                int64_t iy = oy * sh - ph + ky * dh;
                if (iy < 0 || iy >= H)
                    continue; /* padding: x - zx = 0 */
                const uint8_t *row = xp + iy * W;
                for (int64_t kx = 0; kx < kw; kx++) {
                    int32_t wv = (j->w_s8 ? (int32_t)(int8_t)wp[ky * kw + kx] : (int32_t)wp[ky * kw + kx]) - zw;
                    int64_t off = kx * dw - pw, a = 0, b = Wo;
                    while (a < b && a * sw + off < 0) /* valid ox: 0 <= ox*sw + off < W */
                        a++;
                    while (b > a && (b - 1) * sw + off >= W)
                        b--;
                    if (a >= b)
                        continue;
                    const uint8_t *src = row + a * sw + off;
                    if (sw != 1) { /* gather the strided pixels */
                        for (int64_t q = 0; q < b - a; q++)
                            gath[q] = src[q * sw];
                        src = gath;
                    }
                    if (j->vec) {
                        kiln__qdw_row_vnni(acc + a, src, j->x_s8, b - a, j->zx, wv);
                    } else {
                        for (int64_t q = 0; q < b - a; q++)
                            acc[a + q] += ((j->x_s8 ? (int32_t)(int8_t)src[q] : (int32_t)src[q]) - j->zx) * wv;
                    }
                }
            }
            uint8_t *yr = yp + (size_t)(oy * Wo) * j->osz;
            if (j->vec)
                kiln__qepi_row_vnni(j->e, acc, Wo, c, yr);
            else
                for (int64_t q = 0; q < Wo; q++)
                    kiln__qepi_store(j->e, yr, 0, c, q, acc[q]);
        }
    }
    kiln__free(acc);
    kiln__free(gath);
}

/* ---- 2-D convolutions: padded image split into stride phases, tap offsets, virtual-pixel output ---- */

typedef struct qconv_padded {
    kiln_conv_phases ph;     /* the stride phases (qgemm.h) */
    uint8_t *xpad;           /* [phase][cpg][hq][wq], then slack */
    int64_t *off;            /* per k = (c, ky, kx): its plane and the tap's shift within it */
    uint8_t *y;              /* mpg x (Ho * wq) outputs before the dropped columns go */
    size_t xbytes;
    const uint8_t *x;        /* while filling: the group's input planes, x's flip, the padding */
    uint8_t xr, pad;
} qconv_padded;

static void padded_free(qconv_padded *p)
{
    kiln__free(p->xpad);
    kiln__free(p->off);
    kiln__free(p->y);
    memset(p, 0, sizeof *p);
}

/* Tap (ky, kx) of output (oy, ox) reads padded (oy*sh + ty, ox*sw + tx), ty = ky*dh, tx = kx*dw:
 * phase (ty % sh, tx % sw), row oy + ty / sh, column ox + tx / sw of that phase's plane. */
bool kiln__conv_phases_init(const kiln_qconv_geom *g, int64_t cpg, kiln_conv_phases *p, int64_t *off)
{
    int64_t kh = g->k[0], kw = g->k[1];
    memset(p, 0, sizeof *p);
    p->sh = g->stride[0], p->sw = g->stride[1];
    if (p->sh * p->sw > 16)
        return false;
    p->wq = g->out[1] + (kw - 1) * g->dil[1] / p->sw;
    p->hq = g->out[0] + (kh - 1) * g->dil[0] / p->sh;
    p->plane = p->hq * p->wq;
    for (int64_t c = 0, k = 0; c < cpg; c++)
        for (int64_t ky = 0; ky < kh; ky++)
            for (int64_t kx = 0; kx < kw; kx++) {
                int64_t ty = ky * g->dil[0], tx = kx * g->dil[1], ph = (ty % p->sh) * p->sw + tx % p->sw;
                p->used[ph] = true;
                off[k++] = (ph * cpg + c) * p->plane + ty / p->sh * p->wq + tx / p->sw;
            }
    return true;
}

typedef struct phase_job {
    const kiln_conv_phases *p;
    const kiln_qconv_geom *g;
    int64_t cpg;
    const kiln_phase_fill *f;
} phase_job;

/* channels [c0, c1): their planes of every phase cleared, the real pixels of the used ones copied */
static void phase_task(void *arg, int64_t c0, int64_t c1)
{
    const phase_job *j = arg;
    const kiln_conv_phases *p = j->p;
    const kiln_qconv_geom *g = j->g;
    int64_t H = g->in[0], W = g->in[1], pt = g->pad_b[0], pl = g->pad_b[1], sh = p->sh, sw = p->sw;
    for (int64_t qy = 0; qy < sh; qy++)
        for (int64_t qx = 0; qx < sw; qx++) {
            int64_t ph = qy * sw + qx;
            for (int64_t c = c0; c < c1; c++)
                j->f->clear(j->f->ctx, (ph * j->cpg + c) * p->plane, p->plane);
            if (!p->used[ph])
                continue;
            /* columns x with 0 <= x*sw + qx - pl < W */
            int64_t a = pl > qx ? (pl - qx + sw - 1) / sw : 0, b = (W + pl - qx + sw - 1) / sw;
            b = b < p->wq ? b : p->wq;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t y = 0; y < p->hq && a < b; y++) {
                    int64_t iy = y * sh + qy - pt;
                    if (iy < 0 || iy >= H)
                        continue;
                    j->f->copy(j->f->ctx, (ph * j->cpg + c) * p->plane + y * p->wq + a,
                               (c * H + iy) * W + a * sw + qx - pl, b - a, sw);
                }
        }
}

void kiln__conv_phases_fill(const kiln_conv_phases *p, const kiln_qconv_geom *g, int64_t cpg, const kiln_phase_fill *f,
                            kiln_pool *pool, int nthreads)
{
    int64_t planes = p->sh * p->sw * cpg * p->plane;
    f->clear(f->ctx, planes, kiln__conv_phases_elems(p, cpg, KILN_QGEMM_STRIP) - planes); /* the slack */
    phase_job j = {p, g, cpg, f};
    kiln__parallel_for(pool, nthreads, cpg, 1 + 32768 / (p->sh * p->sw * p->plane + 1), phase_task, &j);
}

static kiln_status padded_init(const kiln_kctx *ctx, const kiln_qconv_geom *g, int64_t cpg, int64_t mpg, size_t osz,
                               qconv_padded *p)
{
    int64_t kh = g->k[0], kw = g->k[1];
    memset(p, 0, sizeof *p);
    p->off = kiln__malloc(sizeof(int64_t) * (size_t)(cpg * kh * kw));
    if (!p->off) {
        padded_free(p);
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (padded image)");
    }
    if (!kiln__conv_phases_init(g, cpg, &p->ph, p->off)) { /* the caller checked the strides */
        padded_free(p);
        return kiln__kerr(ctx, KILN_ERR_INTERNAL, "too many stride phases");
    }
    /* slack: a strip reads 48 columns past any run start */
    p->xbytes = (size_t)kiln__conv_phases_elems(&p->ph, cpg, KILN_QGEMM_STRIP);
    p->xpad = kiln__malloc(p->xbytes);
    p->y = kiln__malloc((size_t)(mpg * g->out[0] * p->ph.wq) * osz);
    if (!p->xpad || !p->y) {
        padded_free(p);
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (padded image)");
    }
    return KILN_OK;
}

static void padded_clear(void *arg, int64_t dst_off, int64_t n)
{
    const qconv_padded *p = arg;
    memset(p->xpad + dst_off, p->pad, (size_t)n);
}

/* bytes (flipped as x's) */
static void padded_copy(void *arg, int64_t dst_off, int64_t src_off, int64_t n, int64_t sw)
{
    const qconv_padded *p = arg;
    uint8_t *d = p->xpad + dst_off;
    const uint8_t *s = p->x + src_off;
    if (sw == 1) {
        kiln__qconv_bytes(d, s, n, p->xr != 0);
    } else {
        for (int64_t q = 0; q < n; q++)
            d[q] = s[q * sw] ^ p->xr;
    }
}

/* x's cpg planes into the phase planes (padding = x's stored zero point) */
static void padded_fill(qconv_padded *p, const kiln_qconv_geom *g, const uint8_t *x, int64_t cpg, uint8_t xr,
                        uint8_t pad, kiln_pool *pool, int nthreads)
{
    p->x = x, p->xr = xr, p->pad = pad;
    kiln_phase_fill f = {padded_clear, padded_copy, p};
    kiln__conv_phases_fill(&p->ph, g, cpg, &f, pool, nthreads);
}

typedef struct qconv_args {
    const kiln_tensor *x, *xz, *w, *wz, *bias;
    const kiln_tensor *xs, *ws, *ys, *yz;
    kiln_dtype odt;
    bool integer;   /* ConvInteger: int32 output, no scales */
    bool once;      /* QLinearConvAdd with one rounding (kiln_res_once): R added in the GEMM's epilogue */
} qconv_args;

/* A convolution node's operands and output type from in[0..n_in) (run time: its inputs; build time: its constants,
 * an output type that depends on the computed X taken as uint8) */
static void qconv_args_of(const kiln_node *n, const kiln_tensor *const *in, int n_in, qconv_args *q)
{
    const kiln_tensor *t[9];
    for (int i = 0; i < 9; i++)
        t[i] = in_at(in, n_in, i);
    if (n->op == KILN_OP_ConvInteger) {
        *q = (qconv_args){.x = t[0], .w = t[1], .xz = t[2], .wz = t[3], .odt = KILN_DT_INT32, .integer = true};
        return;
    }
    *q = (qconv_args){.x = t[0], .xs = t[1], .xz = t[2], .w = t[3], .ws = t[4], .wz = t[5], .ys = t[6], .yz = t[7],
                      .bias = t[8], .once = kiln__qconv_once(n) != 0};
    /* the y_zero_point's type (else X's), float32 with the internal kiln_out_float attribute */
    q->odt = kiln__attr_i(n, "kiln_out_float", 0) ? KILN_DT_FLOAT32 : q->yz ? q->yz->dtype
                                                 : t[0] ? t[0]->dtype : KILN_DT_UINT8;
}

/* What the fast kernels ask of everything but X (the weights of M output channels, K = C / group * taps, their zero
 * points, the bias, the scales, the output's quantization). run: at run time, where the scales the output needs
 * must be there; at build time an input not given (computed) is left to the run. */
static bool qconv_operands_ok(const qconv_args *q, int64_t M, int64_t K, bool run)
{
    const kiln_tensor *w = q->w;
    if (!is_q8(w) || w->ndim < 3 || w->ndim > 4 || K <= 0 || K > KILN_QGEMM_MAX_K || !out_ok(q->integer, q->odt))
        return false;
    if ((q->xz && !is_scalar(q->xz)) ||
        (q->wz && (q->wz->dtype != w->dtype || (kiln_tensor_numel(q->wz) != 1 && kiln_tensor_numel(q->wz) != M))) ||
        (q->bias && (q->bias->dtype != KILN_DT_INT32 || kiln_tensor_numel(q->bias) != M)))
        return false;
    if (q->integer)
        return true;
    if ((q->xs || run) && (!float_scale(q->xs) || !is_scalar(q->xs) || !good_scales(q->xs)))
        return false;
    if ((q->ws || run) &&
        (!float_scale(q->ws) || (!is_scalar(q->ws) && kiln_tensor_numel(q->ws) != M) || !good_scales(q->ws)))
        return false;
    return out_quant_ok(q->ys, q->yz, q->odt, run);
}

static kiln_status qconv_run(kiln_kctx *ctx, const qconv_args *q)
{
    const kiln_tensor *x = q->x, *w = q->w;
    if (!is_q8(x) || !is_q8(w) || (q->xz && q->xz->dtype != x->dtype) || x->ndim < 3 || x->ndim > 4 ||
        w->ndim != x->ndim)
        return fallback(ctx);
    kiln_qconv_geom g;
    memset(&g, 0, sizeof g);
    if (kiln__qconv_geom(ctx, x, w, &g) != KILN_OK)
        return fallback(ctx); /* the reference reports it */
    int64_t mpg = g.M / g.group, cpg = g.C / g.group, ksz = 1, osp = 1;
    for (int d = 0; d < g.nsp; d++)
        ksz *= g.k[d], osp *= g.out[d];
    int64_t K = cpg * ksz;
    if (!qconv_operands_ok(q, g.M, K, true))
        return fallback(ctx);
    int64_t odims[KILN_MAX_DIMS] = {g.N, g.M};
    for (int d = 0; d < g.nsp; d++)
        odims[2 + d] = g.out[d];
    if (q->once) {   /* one rounding: the GEMM's epilogue reads R as C's elements; else the reference (which also
                      * reports a malformed one-rounding node, e.g. one with a float output) */
        bool direct = g.group == 1 && q->odt != KILN_DT_FLOAT32 && q->ys;
        for (int d = 0; d < g.nsp; d++)
            direct &= g.k[d] == 1 && g.stride[d] == 1 && g.pad_b[d] == 0 && g.out[d] == g.in[d];
        if (!direct)
            return fallback(ctx);
    }
    KILN_TRY(kiln__kout_uninit(ctx, 0, q->odt, x->ndim, odims));
    if (kiln_tensor_numel(ctx->out[0]) == 0)
        return KILN_OK;
    kiln_qepi e;
    float *sbuf = NULL;
    KILN_TRY(kiln__qepi_setup(ctx, &e, q->odt, true, g.M,
                              q->xs ? (float)kiln__get_f64(q->xs->dtype, q->xs->data, 0) : 1, q->ws, 1.0f, q->ys,
                              q->yz, &sbuf));
    e.bias = q->bias ? q->bias->data : NULL;
    const kiln_tensor *rt = NULL;
    if (q->once) {
        kiln_status rst = kiln__qconv_once_res(ctx, &e, q->odt, x->ndim, odims,
                                               (float)kiln__get_f64(q->ys->dtype, q->ys->data, 0), &rt);
        if (rst != KILN_OK) {
            kiln__free(sbuf);
            return rst;
        }
        e.res_s8 = rt->dtype == KILN_DT_INT8;
    }
    if (cpg == 1 && mpg == 1) { /* depthwise: from the weights (never packed) */
        if (kiln__prep_dropped(w)) {
            kiln__free(sbuf);
            return kiln__prep_missing(ctx, ctx->node->op == KILN_OP_ConvInteger ? 1 : 3);
        }
        qdw_job j = {.g = &g, .x = x->data, .w = w->data, .x_s8 = x->dtype == KILN_DT_INT8,
                     .w_s8 = w->dtype == KILN_DT_INT8, .zx = zp_at(q->xz, 0), .wz = q->wz, .e = &e,
                     .y = ctx->out[0]->data, .osz = kiln_dtype_size(q->odt), .vec = kiln__qgemm_vnni_available(),
                     .st = KILN_OK};
        qdw_view(&g, &j.p);
        j.f32 = j.vec && kiln__cpu_has(KILN_CPU_AVX2_FMA) && qdw_f32_plan(g.nsp, &j.p);
        kiln__parallel_for(ctx->pool, ctx->nthreads, g.N * g.C, 1 + 16384 / (osp * ksz + 1), qdw_task, &j);
        kiln__free(sbuf);
        return j.st == KILN_OK ? KILN_OK : kiln__kerr(ctx, j.st, "out of memory");
    }
    void *own = NULL;
    qprep h = {0};
    kiln_status st = get_prep(ctx, kiln__qprep_conv, ctx->node->op == KILN_OP_ConvInteger ? 1 : 3, KILN_PREP_QCONV_W, K,
                              mpg, g.group, &own, &h);
    int32_t *wzp = NULL;
    if (st == KILN_OK) {
        bool x_flip = x->dtype == KILN_DT_INT8, w_flip = w->dtype == KILN_DT_UINT8;
        int32_t zx = zp_at(q->xz, 0);
        /* stored domain: X on the u8 side, W on the s8 side */
        int32_t zxs = zx + (x_flip ? 128 : 0);
        bool wz_nonzero = w_flip;
        for (int64_t m = 0; q->wz && m < kiln_tensor_numel(q->wz); m++)
            wz_nonzero |= zp_at(q->wz, m) != 0;
        wzp = wz_nonzero ? kiln__malloc(sizeof(int32_t) * (size_t)g.M) : NULL;
        if (wz_nonzero && !wzp)
            st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        for (int64_t m = 0; wzp && m < g.M; m++)
            wzp[m] = zp_at(q->wz, m) - (w_flip ? 128 : 0);
        size_t osz = kiln_dtype_size(q->odt);
        int64_t isp = kiln_tensor_numel(x) / (g.N * g.C);
        bool pointwise = ksz == 1 && osp == isp;
        for (int d = 0; d < g.nsp; d++)
            pointwise &= g.stride[d] == 1 && g.pad_b[d] == 0;
        qconv_padded pd = {0};
        if (st == KILN_OK && !pointwise && g.nsp == 2 && g.stride[0] * g.stride[1] <= 16)
            st = padded_init(ctx, &g, cpg, mpg, osz, &pd);
        int64_t nv = pd.xpad ? g.out[0] * pd.ph.wq : osp; /* GEMM columns: virtual or real pixels */
        for (int64_t n = 0; st == KILN_OK && n < g.N; n++)
            for (int64_t gi = 0; st == KILN_OK && gi < g.group; gi++) {
                qconv_pack pc = {.g = &g, .x = (const uint8_t *)x->data + (n * g.C + gi * cpg) * isp,
                                 .xor_ = x_flip ? 0x80 : 0, .pad = (uint8_t)zxs, .cpg = cpg, .ksz = ksz, .K = K,
                                 .pointwise = pointwise, .isp = isp, .xpad = pd.xpad, .off = pd.off};
                uint8_t *yg = (uint8_t *)ctx->out[0]->data + (size_t)((n * g.M + gi * mpg) * osp) * osz;
                if (pd.xpad)
                    padded_fill(&pd, &g, pc.x, cpg, pc.xor_, pc.pad, ctx->pool, ctx->nthreads);
                kiln_qepi eg = e;
                if (e.scale)
                    eg.scale = e.scale + gi * mpg, eg.mult = e.mult + gi * mpg;
                if (e.bias)
                    eg.bias = e.bias + gi * mpg;
                if (rt) {   /* R's rows of this image and group, as C's (pointwise: no virtual columns) */
                    eg.res = (const uint8_t *)rt->data + (size_t)((n * g.M + gi * mpg) * osp);
                    eg.res_ld = osp;
                }
                kiln_qgemm gm = {.M = mpg, .N = osp, .K = K, .a = h.data + gi * mpg * kiln__qgemm_kp(K),
                                 .lda = kiln__qgemm_kp(K), .a_s8 = true,
                                 .a_sum = zxs ? h.sums + gi * mpg : NULL, .a_zp = wzp ? wzp + gi * mpg : NULL,
                                 .packb_sums = wzp != NULL, .b_zp0 = zxs, .packb = qconv_packb,
                                 .packb_ctx = &pc, .c = pd.xpad ? pd.y : yg, .ldc = nv, .epi = eg};
                gm.N = nv;
                st = kiln__qgemm(ctx->pool, ctx->nthreads, &gm);
                if (st == KILN_OK && pd.xpad) /* keep the real columns */
                    for (int64_t r = 0; r < mpg * g.out[0]; r++)
                        memcpy(yg + (size_t)(r * g.out[1]) * osz, pd.y + (size_t)(r * pd.ph.wq) * osz,
                               (size_t)g.out[1] * osz);
            }
        padded_free(&pd);
    }
    kiln__free(wzp);
    kiln__free(sbuf);
    kiln__free(own);
    return st;
}

kiln_status kiln__k_qlinearconv_fast(kiln_kctx *ctx)
{
    qconv_args q;
    qconv_args_of(ctx->node, ctx->in, ctx->n_in, &q);
    return qconv_run(ctx, &q);
}

kiln_status kiln__k_convinteger_fast(kiln_kctx *ctx)
{
    qconv_args q;
    qconv_args_of(ctx->node, ctx->in, ctx->n_in, &q);
    return qconv_run(ctx, &q);
}

kiln_status kiln__qprep_conv(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob, size_t *size)
{
    *blob = NULL;
    *size = 0;
    qconv_args q;
    qconv_args_of(n, consts, n_in, &q);
    const kiln_tensor *w = q.w;
    int64_t G = kiln__attr_i(n, "group", 1);
    if (!is_q8(w) || !w->data || w->ndim < 3 || G < 1 || w->dims[0] <= 0 || w->dims[0] % G)
        return KILN_OK;
    int64_t M = w->dims[0], K = kiln_tensor_numel(w) / M;
    if (w->dims[1] == 1 && M == G)
        return KILN_OK; /* depthwise runs from the weights directly */
    if (!qconv_operands_ok(&q, M, K, false))
        return KILN_OK; /* the reference runs it, from the weights as they are */
    qprep h = {0};
    KILN_TRY(prep_new(KILN_PREP_QCONV_W, w_index(n->op), K, M / G, G, blob, size, &h));
    kiln__qpack_rows(w->data, K, M, K, w->dtype == KILN_DT_UINT8, true, (uint8_t *)h.data, (int32_t *)h.sums);
    return KILN_OK;
}

const kiln_prep_reg kiln__prep_qgemm[] = {
    {KILN_OP_QLinearConv, kiln__qprep_conv},     {KILN_OP_ConvInteger, kiln__qprep_conv},
    {KILN_OP_QLinearConvAdd, kiln__qprep_conv},
    {KILN_OP_QLinearMatMul, kiln__qprep_matmul}, {KILN_OP_MatMulInteger, kiln__qprep_matmul},
    {KILN_OP_QGemm, kiln__qprep_matmul},         {KILN_OP_COUNT, NULL},
};
