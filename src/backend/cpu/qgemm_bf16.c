/* BF16 GEMM (qgemm_bf16.h): packing, the driver on the INT8 GEMM's scheduler (qgemm.h) over the
 * AVX512-BF16 tile (x86/bgemm_bf16.c), the AVX2 one (x86/bgemm_avx2.c) or a portable tile, and
 * the float32 x FP16 / BF16 weight paths of Conv / MatMul / Gemm. */
#include "qgemm_bf16.h"
#include "prep.h"
#include "qgemm.h"
#include "scratch.h"
#include "x86/amx_gemm.h"
#include "../../core/numfmt.h"
#include <stdlib.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t kp2_of(int64_t K) { return (K + 1) & ~(int64_t)1; }

bool kiln__bgemm_available(void)
{
    return kiln__cpu_has(KILN_CPU_AVX512F | KILN_CPU_AVX512BF16);
}

static int isa_cap = 3;

void kiln__bgemm_set_isa_cap(int cap) { isa_cap = cap; }

int kiln__bgemm_isa(void)
{
    static int host = -1;   /* racing first calls store the same value */
    int h = __atomic_load_n(&host, __ATOMIC_RELAXED);
    if (h < 0) {
        h = kiln__cpu_has(KILN_CPU_AMX_BF16) ? 3 : kiln__bgemm_available() ? 2 : kiln__cpu_has(KILN_CPU_AVX2_FMA) ? 1 : 0;
        __atomic_store_n(&host, h, __ATOMIC_RELAXED);
    }
    return h < isa_cap ? h : isa_cap;
}

/* BF16 values of the panels of a K x N B */
static size_t bpanel_values(int64_t K, int64_t N)
{
    return (size_t)((N + 15) / 16 * kp2_of(K) * 16);
}

/* Packs B (element (k, n) at src[k*sk + n*sn]) into the panels at dst (bpanel_values entries). */
static void bpack_into(const uint16_t *src, int64_t sk, int64_t sn, int64_t K, int64_t N, uint16_t *dst)
{
    int64_t kp2 = kp2_of(K);
    memset(dst, 0, bpanel_values(K, N) * sizeof(uint16_t));
    for (int64_t n = 0; n < N; n++) {
        uint16_t *d = dst + (n / 16) * kp2 * 16 + (n % 16) * 2;
        for (int64_t k = 0; k < K; k++)
            d[(k >> 1) * 32 + (k & 1)] = src[k * sk + n * sn];
    }
}

kiln_status kiln__bgemm_pack_b(const uint16_t *src, int64_t sk, int64_t sn, int64_t K, int64_t N, kiln_bgemm_b **out)
{
    *out = NULL;
    kiln_bgemm_b *b = kiln__malloc(sizeof *b);
    if (!b)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    size_t bytes = bpanel_values(K, N) * sizeof(uint16_t);
    if (posix_memalign((void **)&b->data, 64, bytes ? bytes : 64) != 0) {
        kiln__free(b);
        return kiln__err(KILN_ERR_NOMEM, "out of memory (BF16 weight panels, %zu bytes)", bytes);
    }
    b->K = K, b->N = N, b->kp2 = kp2_of(K);
    bpack_into(src, sk, sn, K, N, b->data);
    *out = b;
    return KILN_OK;
}

void kiln__bgemm_free_b(kiln_bgemm_b *b)
{
    if (b) {
        free(b->data);
        kiln__free(b);
    }
}

typedef struct bjob {
    const kiln_bgemm *g;
    uint16_t *a;           /* A rounded to BF16: M rows of kp2 */
    const uint16_t *arows; /* the rows used: a or g->A16 */
    int isa;               /* kiln__bgemm_isa() */
    int64_t width;         /* columns a strip (the scheduler's) */
    uint16_t *bufs;        /* packb: one strip per slot */
    int64_t *packed;       /* packb: the strip each slot holds */
} bjob;

/* A's rows [r0, r1) rounded to BF16 (numfmt's RNE), zero padded */
static void round_rows(void *arg, int64_t r0, int64_t r1)
{
    const bjob *j = arg;
    int64_t K = j->g->K, kp2 = kp2_of(K);
    for (int64_t r = r0; r < r1; r++) {
        uint16_t *d = j->a + r * kp2;
        kiln__f32_to_bf16_array(d, j->g->A + r * j->g->lda, K);
        if (kp2 > K)
            d[K] = 0;
    }
}

static float bf(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* portable tile: same operands, float32 sums in k order */
static void tile_c(const kiln_bgemm *g, const uint16_t *a, const uint16_t *bs, int64_t i0, int m, int64_t j0, int ncols)
{
    int64_t kp2 = kp2_of(g->K);
    for (int i = 0; i < m; i++)
        for (int c = 0; c < ncols; c++) {
            const uint16_t *bp = bs + (c / 16) * kp2 * 16 + (c % 16) * 2;
            float s = 0;
            for (int64_t k = 0; k < kp2; k++)
                s += bf(a[i * kp2 + k]) * bf(bp[(k >> 1) * 32 + (k & 1)]);
            g->C[(i0 + i) * g->ldc + j0 + c] = s;
        }
}

static void bgemm_task(void *arg, int64_t slot, int64_t strip, int64_t i0, int64_t i1)
{
    bjob *j = arg;
    const kiln_bgemm *g = j->g;
    int64_t kp2 = kp2_of(g->K), j0 = strip * j->width;
    int ncols = (int)min64(j->width, g->N - j0);
    const uint16_t *bs;
    if (g->packb) {
        uint16_t *buf = j->bufs + slot * kp2 * j->width;
        /* the packers take 48-column strips: a wider strip in 48-column pieces (3 panels, 48 kp2 values) */
        for (int64_t h = 0; j->packed[slot] != strip && h < ncols; h += KILN_QGEMM_STRIP)
            g->packb(g->packb_ctx, j0 + h, min64(KILN_QGEMM_STRIP, ncols - h), buf + h * kp2);
        j->packed[slot] = strip;
        bs = buf;
    } else {
        bs = g->b->data + j0 * kp2;   /* panel j0 / 16, kp2 * 16 values each */
    }
    if (j->isa == 3) {
        kiln__bgemm_rows_amx(g, j->arows, bs, i0, i1, j0, ncols);   /* the epilogue too, tile by tile */
        return;
    }
    for (int64_t i = i0; i < i1; i += KILN_QGEMM_MR) {
        int m = (int)min64(KILN_QGEMM_MR, i1 - i);
        if (j->isa == 2)
            kiln__bgemm_tile_bf16(g, j->arows + i * kp2, bs, i, m, j0, ncols);
        else if (j->isa == 1)
            kiln__bgemm_tile_avx2(g, j->arows + i * kp2, bs, i, m, j0, ncols);
        else
            tile_c(g, j->arows + i * kp2, bs, i, m, j0, ncols);
        if (g->epi && j->isa != 2) /* the AVX512-BF16 tile applies it while storing */
            kiln__epi_apply_f32(g->epi, g->C + i * g->ldc + j0, g->ldc, m, ncols, i, j0);
    }
}

kiln_status kiln__bgemm(kiln_pool *pool, int nthreads, const kiln_bgemm *g)
{
    if (g->M <= 0 || g->N <= 0)
        return KILN_OK;
    if (!g->packb && (g->b->K != g->K || g->b->N != g->N))
        return kiln__err(KILN_ERR_INTERNAL, "BF16 panels do not match the GEMM");
    bjob j = {.g = g, .isa = kiln__bgemm_isa(), .arows = g->A16};
    if (j.isa == 3 && isa_cap < 4 && !kiln__amx_pays(g->M, 2 * g->K))
        j.isa = 2;   /* the AVX512-BF16 tile */
    j.width = kiln__sched_width(j.isa);
    kiln_sched s;
    kiln__sched_plan(&s, g->M, g->N, g->K, nthreads, j.width);
    kiln_status st = KILN_OK;
    if (!g->A16) {
        size_t bytes = (size_t)(g->M * kp2_of(g->K)) * sizeof(uint16_t);
        if (posix_memalign((void **)&j.a, 64, bytes ? bytes : 64) != 0)
            return kiln__err(KILN_ERR_NOMEM, "out of memory (BF16 activation rows, %zu bytes)", bytes);
        kiln__parallel_for(pool, nthreads, g->M, 1 + 65536 / (g->K + 1), round_rows, &j);
        j.arows = j.a;
    }
    if (g->packb) {
        size_t bytes = (size_t)s.nt * (size_t)(kp2_of(g->K) * j.width) * sizeof(uint16_t);
        j.packed = malloc(sizeof(int64_t) * (size_t)s.nt);
        if (posix_memalign((void **)&j.bufs, 64, bytes) != 0 || !j.packed)
            st = kiln__err(KILN_ERR_NOMEM, "out of memory (BF16 packing buffers)");
        for (int i = 0; j.packed && i < s.nt; i++)
            j.packed[i] = -1;
    }
    if (st == KILN_OK)
        kiln__sched_run(pool, &s, bgemm_task, &j);
    free(j.a);
    free(j.bufs);
    free(j.packed);
    return st;
}

void kiln__bpack_pair16(const uint16_t *r0, const uint16_t *r1, uint16_t *dst)
{
#if defined(__SSE2__)
    __m128i a0 = _mm_loadu_si128((const __m128i *)r0), a1 = _mm_loadu_si128((const __m128i *)(r0 + 8));
    __m128i b0 = _mm_loadu_si128((const __m128i *)r1), b1 = _mm_loadu_si128((const __m128i *)(r1 + 8));
    _mm_storeu_si128((__m128i *)dst, _mm_unpacklo_epi16(a0, b0));
    _mm_storeu_si128((__m128i *)(dst + 8), _mm_unpackhi_epi16(a0, b0));
    _mm_storeu_si128((__m128i *)(dst + 16), _mm_unpacklo_epi16(a1, b1));
    _mm_storeu_si128((__m128i *)(dst + 24), _mm_unpackhi_epi16(a1, b1));
#else
    for (int c = 0; c < 16; c++)
        dst[2 * c] = r0[c], dst[2 * c + 1] = r1[c];
#endif
}

/* ---- Conv with BF16 weights, 2-D: weights as rows, the image rounded to BF16 into its padded stride
 * phases (qgemm.h, kiln_conv_phases) and read in place as panels over virtual pixels
 * q = oy * wq + ox, as the INT8 conv does ---- */

typedef struct bconv {
    uint16_t *xpad;         /* the phase planes of cpg channels, then slack */
    const int64_t *off;     /* per k = (c, ky, kx) */
    int64_t K;
    const float *x;         /* while filling: the group's input planes (float32) ... */
    uint16_t *x16;          /* ... rounded to BF16 plane by plane first (strided columns, hosts without AVX-512), or
                             * NULL: each row rounded as it is copied (bconv_copy) */
    int64_t hw;             /* elements per plane */
} bconv;

static void bconv_round(void *arg, int64_t c0, int64_t c1)
{
    bconv *b = arg;
    kiln__f32_to_bf16_array(b->x16 + c0 * b->hw, b->x + c0 * b->hw, (c1 - c0) * b->hw);
}

static void bconv_clear(void *arg, int64_t dst_off, int64_t n)
{
    bconv *b = arg;
    memset(b->xpad + dst_off, 0, sizeof(uint16_t) * (size_t)n);
}

/* BF16 values of the rounded planes */
static void bconv_copy(void *arg, int64_t dst_off, int64_t src_off, int64_t n, int64_t sw)
{
    bconv *b = arg;
    if (sw == 1 && !b->x16) {   /* rounded as it is copied */
        kiln__f32_to_bf16_array(b->xpad + dst_off, b->x + src_off, n);
        return;
    }
    if (sw == 1) {
        memcpy(b->xpad + dst_off, b->x16 + src_off, sizeof(uint16_t) * (size_t)n);
        return;
    }
    for (int64_t q = 0; q < n; q++)
        b->xpad[dst_off + q] = b->x16[src_off + q * sw];
}

/* A pointwise convolution (1x1, stride 1, no padding): B is the float32 input itself, rounded and paired strip by
 * strip (no BF16 copy of the image, no stride phases: ResNet-50's and PP-OCRv4 det's 1x1 layers read their input
 * once) */
typedef struct bconv_pw {
    const float *x;         /* the group's input planes */
    int64_t hw, K;          /* plane size, channels */
} bconv_pw;

static void bconv_packb_pw(void *arg, int64_t j0, int64_t n, uint16_t *dst)
{
    (void)n; /* whole strips: columns past the image are zero, computed and not stored */
    const bconv_pw *b = arg;
    if (kiln__cpu_has(KILN_CPU_AVX512F)) {
        kiln__bpack_f32_pairs_avx512(b->x, b->hw, b->K, j0, dst);
        return;
    }
    int64_t kp2 = kp2_of(b->K);
    for (int64_t k = 0; k < kp2; k++)
        for (int64_t c = 0; c < KILN_QGEMM_STRIP; c++) {
            int64_t col = j0 + c;
            dst[(c / 16) * kp2 * 16 + (k >> 1) * 32 + (c % 16) * 2 + (k & 1)] =
                k < b->K && col < b->hw ? kiln__f32_to_bf16(b->x[k * b->hw + col]) : 0;
        }
}

static void bconv_packb(void *arg, int64_t j0, int64_t n, uint16_t *dst)
{
    (void)n; /* the padded image has slack: whole strips are read, extra columns dropped */
    const bconv *b = arg;
    static const uint16_t zero[KILN_QGEMM_STRIP];
    int64_t kp2 = kp2_of(b->K);
    for (int64_t k0 = 0; k0 < kp2; k0 += 2) {
        const uint16_t *r0 = b->xpad + b->off[k0] + j0, *r1 = k0 + 1 < b->K ? b->xpad + b->off[k0 + 1] + j0 : zero;
        for (int p = 0; p < KILN_QGEMM_NV; p++)
            kiln__bpack_pair16(r0 + p * 16, r1 + p * 16, dst + p * kp2 * 16 + k0 * 16);
    }
}

/* rows of kp2 BF16 values from the M x K weights (zero padded) */
static void bconv_rows(const uint16_t *w, int64_t M, int64_t K, uint16_t *dst)
{
    int64_t kp2 = kp2_of(K);
    for (int64_t m = 0; m < M; m++) {
        memcpy(dst + m * kp2, w + m * K, sizeof(uint16_t) * (size_t)K);
        if (kp2 > K)
            dst[m * kp2 + K] = 0;
    }
}

kiln_status kiln__bconv_prep(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                             size_t *size)
{
    *blob = NULL;
    *size = 0;
    const kiln_tensor *w = consts && n_in > 1 ? consts[1] : NULL;
    if (!w || !w->data || w->dtype != KILN_DT_BFLOAT16 || w->ndim != 4 || w->dims[0] <= 0)
        return KILN_OK;
    int64_t M = w->dims[0], K = kiln_tensor_numel(w) / M, G = kiln__attr_i(n, "group", 1), sp = 1;
    const kiln_attr *s = kiln__attr(n, "strides");
    for (int i = 0; s && s->type == KILN_ATTR_INTS && i < s->n; i++)
        sp *= s->ints[i] > 0 && s->ints[i] <= 16 ? s->ints[i] : 17;
    if (K <= 0 || (double)M * (double)K > (double)((int64_t)1 << 31))
        return KILN_OK;
    /* the weights may be dropped where conv_bf16 surely runs: its other conditions are the input
     * (4-D for a 4-D weight, channels matching: else the layer is malformed and fails cleanly) */
    bool sure = G >= 1 && M % G == 0 && sp <= 16 && (!s || s->type == KILN_ATTR_INTS);
    if (G == M && w->dims[1] == 1)   /* depthwise: the float32 rows (conv_bf16), from the weights kept as they are */
        return KILN_OK;
    int64_t kp2 = kp2_of(K), dims[3] = {K, M, kp2};
    uint16_t *dst = kiln__prep_alloc_any(KILN_PREP_BCONV_W, sure ? 1u << 1 : 0, KILN_DT_BFLOAT16, 3, dims,
                                         (uint64_t)(M * kp2) * sizeof(uint16_t), blob, size);
    if (!dst)
        return kiln__err(KILN_ERR_NOMEM, "out of memory preparing BF16 conv weights of node '%s'", n->name);
    bconv_rows(w->data, M, K, dst);
    return KILN_OK;
}

static kiln_status conv_bf16(kiln_kctx *ctx, bool *handled)
{
    *handled = false;
    const kiln_tensor *x = kiln__kin(ctx, 0), *w = kiln__kin(ctx, 1), *bias = kiln__kin(ctx, 2), *res = NULL;
    kiln_qconv_geom g;
    memset(&g, 0, sizeof g);
    if (x->ndim != 4 || kiln__qconv_geom(ctx, x, w, &g) != KILN_OK || g.stride[0] * g.stride[1] > 16)
        return KILN_OK; /* the generic path (and its errors) */
    if (ctx->node->op == KILN_OP_FusedConv)
        res = kiln__kin(ctx, 3);
    int64_t cpg = g.C / g.group, mpg = g.M / g.group, kh = g.k[0], kw = g.k[1], K = cpg * kh * kw, kp2 = kp2_of(K);
    int64_t Ho = g.out[0], Wo = g.out[1], osp = Ho * Wo, H = g.in[0], W = g.in[1];
    /* depthwise: one 1 x K GEMM a channel would waste the tile; the float32 depthwise rows on the rounded activations
     * and the widened weights compute the same products (kiln__run_mixed's fallback). An engine that stored such a
     * layer's weights only packed (before) still runs them here. */
    if (cpg == 1 && mpg == 1 && !kiln__prep_dropped(w))
        return KILN_OK;
    if ((bias && (bias->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(bias) != g.M)) ||
        (res && (res->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(res) != g.N * g.M * osp)) || K <= 0)
        return KILN_OK;
    kiln_epi e = {.bias = bias ? bias->data : NULL, .row_bias = true, .ldr = osp};
    KILN_TRY(kiln__act_from_node(ctx, &e.act));
    *handled = true;
    int64_t odims[4] = {g.N, g.M, Ho, Wo};
    KILN_TRY(kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, 4, odims));
    if (kiln_tensor_numel(ctx->out[0]) == 0)
        return KILN_OK;
    int64_t *off = kiln__malloc(sizeof(int64_t) * (size_t)K);
    kiln_conv_phases ph;
    if (!off || !kiln__conv_phases_init(&g, cpg, &ph, off)) {
        kiln__free(off);
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    int64_t wq = ph.wq, nv = Ho * wq, pdims[3] = {K, g.M, kp2};
    /* the weights as rows of kp2: made at build time (kiln__bconv_prep), else now */
    const uint16_t *rows = kiln__prep_check(ctx, KILN_PREP_BCONV_W, KILN_DT_BFLOAT16, 3, pdims,
                                            (uint64_t)(g.M * kp2) * sizeof(uint16_t));
    /* pointwise: B straight from the float32 input (bconv_packb_pw), no image copies */
    bool pw = kh == 1 && kw == 1 && g.stride[0] == 1 && g.stride[1] == 1 && Ho == H && Wo == W;
    if (pw)
        wq = Wo, nv = osp;
    size_t xn = pw ? 0 : (size_t)kiln__conv_phases_elems(&ph, cpg, KILN_QGEMM_STRIP);
    uint16_t *xpad = pw ? NULL : kiln__malloc(xn * sizeof(uint16_t));
    /* stride-1 columns on AVX-512: each row rounded as it is copied into the phases (kiln__f32_to_bf16_array, whose
     * AVX-512 path ends with a masked step: one pass and one buffer less, PP-OCRv4 det bf16 1.5-2% faster, ResNet-50
     * bf16 unchanged; with the scalar tail it had then it was 9% slower there); else the planes rounded first, then
     * copied or gathered */
    bool round_first = !pw && (g.stride[1] > 1 || !kiln__cpu_has(KILN_CPU_AVX512F));
    uint16_t *x16 = round_first ? kiln__malloc(sizeof(uint16_t) * (size_t)(cpg * H * W + 1)) : NULL;
    uint16_t *a16 = rows || kiln__prep_dropped(w) ? NULL : kiln__malloc(sizeof(uint16_t) * (size_t)(g.M * kp2));
    bool direct = wq == Wo;   /* no dropped columns: the GEMM writes the output itself */
    float *yv = direct ? NULL : kiln__malloc(sizeof(float) * (size_t)(mpg * nv));
    kiln_status st = KILN_OK;
    if (!rows && kiln__prep_dropped(w))
        st = kiln__prep_missing(ctx, 1);
    else if ((!pw && !xpad) || (round_first && !x16) || (!rows && !a16) || (!direct && !yv))
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    if (st == KILN_OK && !rows) {
        bconv_rows(w->data, g.M, K, a16);
        rows = a16;
    }
    bconv bc = {.xpad = xpad, .off = off, .K = K, .x16 = x16, .hw = H * W};
    bconv_pw bp = {.hw = H * W, .K = K};
    for (int64_t n = 0; st == KILN_OK && n < g.N; n++)
        for (int64_t gi = 0; st == KILN_OK && gi < g.group; gi++) {
            bc.x = bp.x = (const float *)x->data + (n * g.C + gi * cpg) * H * W;
            if (!pw) {
                if (round_first)
                    kiln__parallel_for(ctx->pool, ctx->nthreads, cpg, 1 + 16384 / (H * W + 1), bconv_round, &bc);
                kiln_phase_fill f = {bconv_clear, bconv_copy, &bc};
                kiln__conv_phases_fill(&ph, &g, cpg, &f, ctx->pool, ctx->nthreads);
            }
            /* the epilogue runs on each tile inside the GEMM, except a residual over virtual columns */
            float *yg = (float *)ctx->out[0]->data + (n * g.M + gi * mpg) * osp;
            kiln_epi eg = e;
            eg.bias = e.bias ? e.bias + gi * mpg : NULL;
            eg.res = res ? (const float *)res->data + (n * g.M + gi * mpg) * osp : NULL;
            bool in_gemm = !kiln__epi_is_noop(&eg) && (direct || !eg.res);
            kiln_bgemm bg = {.M = mpg, .N = nv, .K = K, .A16 = rows + gi * mpg * kp2,
                             .packb = pw ? bconv_packb_pw : bconv_packb, .packb_ctx = pw ? (void *)&bp : (void *)&bc,
                             .C = direct ? yg : yv, .ldc = nv, .epi = in_gemm ? &eg : NULL};
            st = kiln__bgemm(ctx->pool, ctx->nthreads, &bg);
            for (int64_t r = 0; st == KILN_OK && !direct && r < mpg * Ho; r++)
                memcpy(yg + r * Wo, yv + r * wq, sizeof(float) * (size_t)Wo);
            if (st == KILN_OK && !in_gemm && !kiln__epi_is_noop(&eg))
                kiln__epi_apply_f32(&eg, yg, osp, mpg, osp, 0, 0);
        }
    kiln__free(xpad);
    kiln__free(x16);
    kiln__free(a16);
    kiln__free(off);
    kiln__free(yv);
    return st;
}

/* ---- float32 x FP16 / BF16 weights ---- */

bool kiln__mixed_weight(const kiln_kctx *ctx, int wi)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *w = kiln__kin(ctx, wi);
    return x && w && x->dtype == KILN_DT_FLOAT32 && (w->dtype == KILN_DT_FLOAT16 || w->dtype == KILN_DT_BFLOAT16);
}

/* a float32 copy of t (BF16 / FP16 widened exactly) */
static kiln_status to_f32(const kiln_kctx *ctx, const kiln_tensor *t, kiln_tensor *o)
{
    memset(o, 0, sizeof *o);
    if (kiln__tensor_alloc(o, KILN_DT_FLOAT32, t->ndim, t->dims) != KILN_OK)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    kiln__lowp_to_f32_array(t->dtype, o->data, t->data, kiln_tensor_numel(t));
    return KILN_OK;
}

enum { ROUND_BLOCK = 4096 };
typedef struct round_job {
    const float *src;
    float *dst;
    int64_t n;
} round_job;

static void round_task(void *arg, int64_t b0, int64_t b1)
{
    const round_job *j = arg;
    int64_t i = b0 * ROUND_BLOCK, e = b1 * ROUND_BLOCK < j->n ? b1 * ROUND_BLOCK : j->n;
    kiln__f32_round_bf16_array(j->dst + i, j->src + i, e - i);
}

/* float32 activations t rounded to BF16 and back, into *o: a view of this thread's scratch (not to be released),
 * written by the layer's threads. A fresh allocation per run cost page faults on every page (PP-OCRv4 det's
 * 320 x 320 depthwise layers: 13 MB a run). */
static kiln_status round_bf16(const kiln_kctx *ctx, const kiln_tensor *t, kiln_tensor *o)
{
    memset(o, 0, sizeof *o);
    int64_t n = kiln_tensor_numel(t);
    float *d = kiln__scratch(KILN_SCRATCH_BF16_X, sizeof(float) * (size_t)(n ? n : 1));
    if (!d)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    o->dtype = KILN_DT_FLOAT32;
    o->ndim = t->ndim;
    memcpy(o->dims, t->dims, sizeof(int64_t) * (size_t)t->ndim);
    o->data = d;
    o->nbytes = sizeof(float) * (size_t)n;
    o->flags = KILN_TENSOR_BORROWED;
    round_job j = {.src = t->data, .dst = d, .n = n};
    if (n > 0)
        kiln__parallel_for(ctx->pool, ctx->nthreads, (n + ROUND_BLOCK - 1) / ROUND_BLOCK, 4, round_task, &j);
    return KILN_OK;
}

/* MatMul / FusedMatMul / Gemm / FusedGemm with a 2-D BF16 B through the BF16 GEMM; *handled false
 * (nothing done) for shapes it does not cover. */
static kiln_status mixed_bgemm(kiln_kctx *ctx, bool *handled)
{
    *handled = false;
    kiln_op op = ctx->node->op;
    bool gemm = op == KILN_OP_Gemm || op == KILN_OP_FusedGemm;
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 1), *bias = NULL, *res = NULL;
    if (b->ndim != 2 || a->ndim < (gemm ? 2 : 1) || (gemm && a->ndim != 2))
        return KILN_OK;
    bool tb = gemm && kiln__attr_i(ctx->node, "transB", 0);
    int64_t K = b->dims[tb ? 1 : 0], N = b->dims[tb ? 0 : 1];
    if (a->dims[a->ndim - 1] != K || K <= 0)
        return KILN_OK;
    if (gemm) {
        const kiln_tensor *c = kiln__kin(ctx, 2);
        if (kiln__attr_i(ctx->node, "transA", 0) || kiln__attr_f(ctx->node, "alpha", 1.0f) != 1.0f)
            return KILN_OK;
        if (c && (c->dtype != KILN_DT_FLOAT32 || kiln__attr_f(ctx->node, "beta", 1.0f) != 1.0f ||
                  kiln_tensor_numel(c) != N || c->dims[c->ndim - 1] != N))
            return KILN_OK;
        bias = c;
    } else if (op == KILN_OP_FusedMatMul) {
        bias = kiln__kin(ctx, 2), res = kiln__kin(ctx, 3);
        if ((bias && (bias->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(bias) != N)) ||
            (res && res->dtype != KILN_DT_FLOAT32))
            return KILN_OK;
    }
    int64_t M = kiln_tensor_numel(a) / K, odims[KILN_MAX_DIMS];
    for (int d = 0; d < a->ndim - 1; d++)
        odims[d] = a->dims[d];
    odims[a->ndim - 1] = N;
    if (res && kiln_tensor_numel(res) != M * N)
        return KILN_OK;
    kiln_epi e = {.bias = bias ? bias->data : NULL, .res = res ? res->data : NULL, .ldr = N};
    KILN_TRY(kiln__act_from_node(ctx, &e.act));
    *handled = true;
    KILN_TRY(kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, a->ndim, odims));
    /* the panels made at build time (kiln__bgemm_prep), else packed now */
    int64_t pd[4] = {K, N, kp2_of(K), tb};
    const uint16_t *pre = kiln__prep_check(ctx, KILN_PREP_BGEMM_B, KILN_DT_BFLOAT16, 4, pd,
                                           bpanel_values(K, N) * sizeof(uint16_t));
    kiln_bgemm_b view = {K, N, kp2_of(K), (uint16_t *)pre}, *pb = &view;
    if (!pre) {
        if (kiln__prep_dropped(b))
            return kiln__prep_missing(ctx, 1);
        KILN_TRY(kiln__bgemm_pack_b(b->data, tb ? 1 : N, tb ? K : 1, K, N, &pb));
    }
    kiln_bgemm g = {.M = M, .N = N, .K = K, .A = a->data, .lda = K, .b = pb, .C = ctx->out[0]->data, .ldc = N,
                    .epi = kiln__epi_is_noop(&e) ? NULL : &e};
    kiln_status st = kiln__bgemm(ctx->pool, ctx->nthreads, &g);
    if (!pre)
        kiln__bgemm_free_b(pb);
    return st;
}

kiln_status kiln__bgemm_prep(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                             size_t *size)
{
    *blob = NULL;
    *size = 0;
    const kiln_tensor *b = consts && n_in > 1 ? consts[1] : NULL;
    if (!b || !b->data || b->dtype != KILN_DT_BFLOAT16 || b->ndim != 2)
        return KILN_OK;
    bool gemm = n->op == KILN_OP_Gemm || n->op == KILN_OP_FusedGemm;
    bool tb = gemm && kiln__attr_i(n, "transB", 0) != 0;
    int64_t K = b->dims[tb ? 1 : 0], N = b->dims[tb ? 0 : 1];
    if (K <= 0 || N <= 0 || (double)K * (double)N > (double)((int64_t)1 << 31))
        return KILN_OK;
    /* the weights may be dropped only where mixed_bgemm surely takes the layer: its other
     * conditions are the node's attributes and the bias (a constant here) */
    bool sure = true;
    const kiln_tensor *c = n_in > 2 ? consts[2] : NULL;
    bool no_bias = n_in < 3 || (n->in && n->in[2] < 0);
    if (gemm)
        sure = !kiln__attr_i(n, "transA", 0) && kiln__attr_f(n, "alpha", 1.0f) == 1.0f &&
               (no_bias ||
                (c && c->dtype == KILN_DT_FLOAT32 && kiln__attr_f(n, "beta", 1.0f) == 1.0f &&
                 kiln_tensor_numel(c) == N && c->dims[c->ndim - 1] == N));
    else if (n->op == KILN_OP_FusedMatMul)
        sure = no_bias || (c && c->dtype == KILN_DT_FLOAT32 && kiln_tensor_numel(c) == N);
    int64_t dims[4] = {K, N, kp2_of(K), tb};
    uint16_t *dst = kiln__prep_alloc_any(KILN_PREP_BGEMM_B, sure ? 1u << 1 : 0, KILN_DT_BFLOAT16, 4, dims,
                                         bpanel_values(K, N) * sizeof(uint16_t), blob, size);
    if (!dst)
        return kiln__err(KILN_ERR_NOMEM, "out of memory packing the weights of node '%s'", n->name);
    bpack_into(b->data, tb ? 1 : N, tb ? K : 1, K, N, dst);
    return KILN_OK;
}

kiln_status kiln__run_mixed(kiln_kctx *ctx, int wi, kiln_kernel_fn fn)
{
    const kiln_tensor *w = kiln__kin(ctx, wi);
    bool bf16 = w->dtype == KILN_DT_BFLOAT16;
    kiln_op op = ctx->node->op;
    if (bf16 && wi == 1 &&
        (op == KILN_OP_MatMul || op == KILN_OP_FusedMatMul || op == KILN_OP_Gemm || op == KILN_OP_FusedGemm)) {
        bool handled;
        KILN_TRY(mixed_bgemm(ctx, &handled));
        if (handled)
            return KILN_OK;
    }
    if (bf16 && wi == 1 && (op == KILN_OP_Conv || op == KILN_OP_FusedConv)) {
        bool handled;
        KILN_TRY(conv_bf16(ctx, &handled));
        if (handled)
            return KILN_OK;
    }
    /* the float32 kernel on widened weights (and, for BF16, activations rounded to BF16) */
    if (kiln__prep_dropped(w))
        return kiln__prep_missing(ctx, wi);
    /* a depthwise 2-D convolution rounds its input rows as its float32 rows copy them (kiln_kctx.x_bf16); other
     * layers read a rounded copy of the input */
    const kiln_tensor *x = ctx->in[0];
    const bool dw_round = bf16 && wi == 1 && (op == KILN_OP_Conv || op == KILN_OP_FusedConv) && x &&
                          x->dtype == KILN_DT_FLOAT32 && (x->ndim == 3 || x->ndim == 4) && x->dims[1] > 0 &&
                          kiln__attr_i(ctx->node, "group", 1) == x->dims[1];
    kiln_tensor wf, xf;
    KILN_TRY(to_f32(ctx, w, &wf));
    kiln_status st = bf16 && !dw_round ? round_bf16(ctx, ctx->in[0], &xf) : KILN_OK;
    if (st != KILN_OK) {
        kiln__tensor_release(&wf);
        return st;
    }
    const kiln_tensor *in[16];
    if (ctx->n_in > 16) {
        st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "too many inputs");
    } else {
        for (int i = 0; i < ctx->n_in; i++)
            in[i] = ctx->in[i];
        in[wi] = &wf;
        if (bf16 && !dw_round)
            in[0] = &xf;
        kiln_kctx sub = *ctx;
        sub.in = in;
        sub.x_bf16 = dw_round;
        sub.prepared = NULL, sub.prepared_size = 0; /* prepared data belongs to the original weights */
        st = fn(&sub);
    }
    kiln__tensor_release(&wf);   /* xf: scratch */
    return st;
}
