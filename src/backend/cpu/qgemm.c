/* INT8 GEMM core (qgemm.h): packing, the scalar epilogue, the threaded driver over the AVX512-VNNI
 * micro-kernel (x86/qgemm_vnni.c), the AVX2 tile (x86/qgemm_avx2.c) or a portable C tile, and a
 * scalar reference.
 *
 * Threads: C is cut into strips of 48 columns (3 panels; 96 for the AMX tiles, kiln__sched_width) and
 * blocks of rows; task t covers strip t / tm and row block t % tm, and each thread runs a contiguous
 * share of the tasks, so its consecutive tasks reuse a strip of B from its cache. Every output
 * element is written exactly once. */
#include "qgemm.h"
#include "x86/amx_gemm.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__SSE2__)
#define QG_SSE2 1
#include <emmintrin.h>
#else
#define QG_SSE2 0
#endif

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- epilogue ---- */

/* round(x / ys) + zp of a Clip bound, within [lo, hi] */
static int32_t q_bound(float x, float ys, int32_t zp, int32_t lo, int32_t hi)
{
    double t = nearbyint((double)x / (double)ys) + zp;
    if (!(t >= lo)) /* also NaN */
        return lo;
    return t > hi ? hi : (int32_t)t;
}

void kiln__qepi_init(kiln_qepi *e, kiln_qout out, const kiln_act *act, float ys, int32_t zp, int32_t lo, int32_t hi)
{
    *e = (kiln_qepi){0};
    e->out = out;
    e->act = act ? *act : (kiln_act){KILN_ACT_NONE, 0, 0};
    e->lin = e->act.kind == KILN_ACT_NONE || e->act.kind == KILN_ACT_RELU || e->act.kind == KILN_ACT_CLIP;
    e->inv_ys = 1.0f / ys;
    e->zp = zp;
    e->lo = lo;
    e->hi = hi;
    if (out != KILN_QOUT_U8 && out != KILN_QOUT_S8) {
        e->lin = false;
        return;
    }
    /* q(act(v)) = clamp(q(v), q(lower), q(upper)) for a monotone q and these activations */
    if (e->act.kind == KILN_ACT_RELU)
        e->lo = zp > lo ? (zp < hi ? zp : hi) : lo;
    if (e->act.kind == KILN_ACT_CLIP) {
        e->lo = q_bound(e->act.alpha, ys, zp, lo, hi);
        e->hi = q_bound(e->act.beta, ys, zp, lo, hi);
    }
}

kiln_status kiln__qact_from_attr(const kiln_kctx *ctx, const char *attr, kiln_act *a)
{
    *a = (kiln_act){KILN_ACT_NONE, 0.0f, 0.0f};
    const char *name = kiln__attr_s(ctx->node, attr, NULL);
    if (!name || !name[0])
        return KILN_OK;
    char an[64], bn[64];
    snprintf(an, sizeof an, "%s_alpha", attr);
    snprintf(bn, sizeof bn, "%s_beta", attr);
    for (int k = KILN_ACT_RELU; k <= KILN_ACT_HARDSWISH_AFFINE; k++) {
        const char *kn = kiln__act_name((kiln_act_kind)k);
        if (kn && !strcmp(kn, name)) {
            /* defaults: the ONNX op's (Clip: no bound, LeakyRelu 0.01, HardSigmoid 0.2 / 0.5) */
            float da = k == KILN_ACT_CLIP          ? -INFINITY
                       : k == KILN_ACT_LEAKYRELU   ? 0.01f
                       : k == KILN_ACT_HARDSIGMOID ? 0.2f
                                                   : 0.0f;
            float db = k == KILN_ACT_CLIP ? INFINITY : k == KILN_ACT_HARDSIGMOID ? 0.5f : 0;
            a->kind = (kiln_act_kind)k;
            a->alpha = kiln__attr_f(ctx->node, an, da);
            a->beta = kiln__attr_f(ctx->node, bn, db);
            return KILN_OK;
        }
    }
    return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown %s activation '%s'", attr, name);
}

kiln_status kiln__qact_from_node(const kiln_kctx *ctx, kiln_act *a) { return kiln__qact_from_attr(ctx, "kiln_act", a); }

static float scalar_f(const kiln_tensor *t, int64_t i) { return (float)kiln__get_f64(t->dtype, t->data, i); }

kiln_status kiln__qepi_setup(const kiln_kctx *ctx, kiln_qepi *e, kiln_dtype odt, bool ch_row, int64_t nch,
                             float a_scale, const kiln_tensor *w_scale, float alpha, const kiln_tensor *ys,
                             const kiln_tensor *yz, float **buf)
{
    memset(e, 0, sizeof *e);
    *buf = NULL;
    kiln_act act;
    KILN_TRY(kiln__qact_from_node(ctx, &act));
    kiln_qout out;
    int32_t lo = 0, hi = 0;
    switch (odt) {
    case KILN_DT_FLOAT32: out = KILN_QOUT_F32; break;
    case KILN_DT_INT32: out = KILN_QOUT_S32; break;
    case KILN_DT_UINT8: out = KILN_QOUT_U8, lo = 0, hi = 255; break;
    case KILN_DT_INT8: out = KILN_QOUT_S8, lo = -128, hi = 127; break;
    case KILN_DT_UINT16: out = KILN_QOUT_U8, lo = 0, hi = 65535; break;
    case KILN_DT_INT16: out = KILN_QOUT_S8, lo = -32768, hi = 32767; break;
    default: return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported output dtype %s", kiln_dtype_name(odt));
    }
    if (out == KILN_QOUT_S32 && act.kind != KILN_ACT_NONE)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "kiln_act needs a float or quantized output");
    bool quant = out == KILN_QOUT_U8 || out == KILN_QOUT_S8;
    float ysv = quant ? scalar_f(ys, 0) : 1.0f;
    int32_t zp = quant && yz ? (int32_t)kiln__get_i64(yz->dtype, yz->data, 0) : 0;
    kiln__qepi_init(e, out, &act, ysv, zp, lo, hi);
    e->ch_row = ch_row;
    if (out == KILN_QOUT_S32)
        return KILN_OK;
    float *b = kiln__malloc(sizeof(float) * (size_t)(2 * (nch > 0 ? nch : 1)));
    if (!b)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    int64_t nw = kiln_tensor_numel(w_scale);
    for (int64_t c = 0; c < nch; c++) {
        float s = a_scale * scalar_f(w_scale, nw == 1 ? 0 : c);
        if (alpha != 1.0f)
            s *= alpha;
        b[c] = s;
        b[nch + c] = s / ysv;
    }
    e->scale = b;
    e->mult = b + nch;
    *buf = b;
    return KILN_OK;
}

static inline int32_t acc_bias(const kiln_qepi *e, int32_t acc, int64_t ch)
{
    return (int32_t)((uint32_t)acc + (uint32_t)(e->bias ? e->bias[ch] : 0));
}

float kiln__qepi_f(const kiln_qepi *e, int32_t acc, int64_t ch)
{
    return kiln__act_scalar(&e->act, (float)acc_bias(e, acc, ch) * e->scale[ch]);
}

/* clamp(rint(t), lo - zp, hi - zp) + zp, NaN -> lo */
static int32_t q_round(const kiln_qepi *e, float t)
{
    float lo = (float)(e->lo - e->zp), hi = (float)(e->hi - e->zp);
    if (!(t >= lo)) /* NaN -> lo, like the vector max */
        t = lo;
    if (t > hi)
        t = hi;
    return (int32_t)rintf(t) + e->zp;
}

int32_t kiln__qepi_q(const kiln_qepi *e, int32_t acc, int64_t ch)
{
    int32_t a = acc_bias(e, acc, ch);
    if (e->out == KILN_QOUT_S32)
        return a;
    float t = e->lin ? (float)a * e->mult[ch] : kiln__act_scalar(&e->act, (float)a * e->scale[ch]) * e->inv_ys;
    return q_round(e, t);
}

int32_t kiln__qepi_qr(const kiln_qepi *e, int32_t acc, int64_t ch, int32_t r)
{
    float t = (float)acc_bias(e, acc, ch) * e->mult[ch];   /* rounded: its own statement, as kiln__qepi_q's */
    return q_round(e, fmaf((float)(r - e->res_zp), e->res_k, t));
}

int32_t kiln__qepi_qt(const kiln_qepi *e, int32_t acc, int64_t ch, float t2)
{
    float t = (float)acc_bias(e, acc, ch) * e->mult[ch];   /* rounded: its own statement, as kiln__qepi_q's */
    return q_round(e, t + t2);
}

void kiln__qepi_store(const kiln_qepi *e, void *c, int64_t ldc, int64_t i, int64_t j, int32_t acc)
{
    int64_t ch = e->ch_row ? i : j, at = i * ldc + j;
    if (e->res && (e->out == KILN_QOUT_U8 || e->out == KILN_QOUT_S8)) {
        const uint8_t rb = e->res[i * e->res_ld + j];
        int32_t q = kiln__qepi_qr(e, acc, ch, e->res_s8 ? (int32_t)(int8_t)rb : (int32_t)rb);
        ((uint8_t *)c)[at] = (uint8_t)q;
        return;
    }
    switch (e->out) {
    case KILN_QOUT_S32: ((int32_t *)c)[at] = kiln__qepi_q(e, acc, ch); break;
    case KILN_QOUT_F32: ((float *)c)[at] = kiln__qepi_f(e, acc, ch); break;
    case KILN_QOUT_U8: ((uint8_t *)c)[at] = (uint8_t)kiln__qepi_q(e, acc, ch); break;
    case KILN_QOUT_S8: ((int8_t *)c)[at] = (int8_t)kiln__qepi_q(e, acc, ch); break;
    }
}

/* zero-point compensation of the exact product sum s at (i, j); bsum: column j's sum or NULL */
static inline int32_t compensate(const kiln_qgemm *g, int32_t s, int64_t i, int64_t j, const int32_t *bsum)
{
    uint32_t r = (uint32_t)s;
    int32_t za = g->a_zp ? g->a_zp[i] : g->a_zp0;
    if (g->a_sum) {
        int32_t zb = g->b_zp ? g->b_zp[j] : g->b_zp0;
        r -= (uint32_t)zb * ((uint32_t)g->a_sum[i] - (uint32_t)g->K * (uint32_t)za);
    }
    if (bsum)
        r -= (uint32_t)za * (uint32_t)*bsum;
    return (int32_t)r;
}

/* ---- packing ---- */

void kiln__qconv_bytes(uint8_t *dst, const uint8_t *src, int64_t n, bool flip)
{
    if (!flip) {
        if (dst != src)
            memcpy(dst, src, (size_t)n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = src[i] ^ 0x80;
}

static inline int32_t byte_val(uint8_t b, bool s8) { return s8 ? (int32_t)(int8_t)b : (int32_t)b; }

/* 16 columns of 4 rows (row r at s[r], columns contiguous) into one 64-byte k-group */
static inline void interleave16p(const uint8_t *const *s, uint8_t x, uint8_t *d)
{
#if QG_SSE2
    const __m128i fx = _mm_set1_epi8((char)x);
    __m128i r0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)s[0]), fx);
    __m128i r1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)s[1]), fx);
    __m128i r2 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)s[2]), fx);
    __m128i r3 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)s[3]), fx);
    __m128i a0 = _mm_unpacklo_epi8(r0, r1), a1 = _mm_unpackhi_epi8(r0, r1);
    __m128i b0 = _mm_unpacklo_epi8(r2, r3), b1 = _mm_unpackhi_epi8(r2, r3);
    _mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi16(a0, b0));
    _mm_storeu_si128((__m128i *)(d + 16), _mm_unpackhi_epi16(a0, b0));
    _mm_storeu_si128((__m128i *)(d + 32), _mm_unpacklo_epi16(a1, b1));
    _mm_storeu_si128((__m128i *)(d + 48), _mm_unpackhi_epi16(a1, b1));
#else
    for (int c = 0; c < 16; c++)
        for (int r = 0; r < 4; r++)
            d[c * 4 + r] = s[r][c] ^ x;
#endif
}

static inline void interleave16(const uint8_t *s, int64_t sk, uint8_t x, uint8_t *d)
{
    const uint8_t *r[4] = {s, s + sk, s + 2 * sk, s + 3 * sk};
    interleave16p(r, x, d);
}

void kiln__qpack_panels(const uint8_t *src, int64_t sk, int64_t sn, int64_t K, int64_t N, bool flip, uint8_t *dst)
{
    int64_t kp = kiln__qgemm_kp(K), np = (N + KILN_QGEMM_NR - 1) / KILN_QGEMM_NR;
    uint8_t x = flip ? 0x80 : 0;
    memset(dst, 0, (size_t)(np * kp * KILN_QGEMM_NR));
    int64_t nfull = 0;
    if (sn == 1) { /* rows of contiguous columns: 4 x 16 blocks interleaved */
        nfull = N / KILN_QGEMM_NR;
        for (int64_t p = 0; p < nfull; p++) {
            uint8_t *d = dst + p * kp * KILN_QGEMM_NR;
            int64_t k = 0;
            for (; k + 4 <= K; k += 4)
                interleave16(src + k * sk + p * KILN_QGEMM_NR, sk, x, d + k * 16);
            for (; k < K; k++)
                for (int c = 0; c < KILN_QGEMM_NR; c++)
                    d[(k >> 2) * 64 + c * 4 + (k & 3)] = src[k * sk + p * KILN_QGEMM_NR + c] ^ x;
        }
        nfull *= KILN_QGEMM_NR;
    }
    for (int64_t n = nfull; n < N; n++) {
        uint8_t *d = dst + (n / KILN_QGEMM_NR) * kp * KILN_QGEMM_NR + (n % KILN_QGEMM_NR) * 4;
        const uint8_t *s = src + n * sn;
        if (sk == 1) { /* columns contiguous along k: 4 bytes per lane */
            int64_t k = 0;
            for (; k + 4 <= K; k += 4) {
                uint32_t w;
                memcpy(&w, s + k, 4);
                w ^= x * 0x01010101u;
                memcpy(d + k * 16, &w, 4);
            }
            for (; k < K; k++)
                d[(k >> 2) * 64 + (k & 3)] = s[k] ^ x;
        } else {
            for (int64_t k = 0; k < K; k++)
                d[(k >> 2) * 64 + (k & 3)] = s[k * sk] ^ x;
        }
    }
}

void kiln__qpack_group4(const uint8_t *rows, int64_t ld, int64_t npanels, int64_t kp, int64_t k0, uint8_t x,
                        uint8_t *dst)
{
    for (int64_t p = 0; p < npanels; p++)
        interleave16(rows + p * KILN_QGEMM_NR, ld, x, dst + p * kp * KILN_QGEMM_NR + k0 * 16);
}

void kiln__qpack_group4p(const uint8_t *const *rows, int64_t npanels, int64_t kp, int64_t k0, uint8_t x, uint8_t *dst)
{
    for (int64_t p = 0; p < npanels; p++) {
        const uint8_t *r[4] = {rows[0] + p * KILN_QGEMM_NR, rows[1] + p * KILN_QGEMM_NR, rows[2] + p * KILN_QGEMM_NR,
                               rows[3] + p * KILN_QGEMM_NR};
        interleave16p(r, x, dst + p * kp * KILN_QGEMM_NR + k0 * 16);
    }
}

void kiln__qpanel_sums(const uint8_t *p, int64_t K, int64_t N, bool s8, int32_t *sum)
{
    int64_t kp = kiln__qgemm_kp(K), n = 0;
    if (kiln__qgemm_vnni_available()) {
        n = N / KILN_QGEMM_NR * KILN_QGEMM_NR;
        kiln__qpanel_sums_vnni(p, kp, n / KILN_QGEMM_NR, s8, sum);
    }
    for (; n < N; n++) {
        const uint8_t *d = p + (n / KILN_QGEMM_NR) * kp * KILN_QGEMM_NR + (n % KILN_QGEMM_NR) * 4;
        int32_t s = 0;
        for (int64_t k = 0; k < kp; k++)
            s += byte_val(d[(k >> 2) * 64 + (k & 3)], s8);
        sum[n] = s;
    }
}

void kiln__qpack_rows(const uint8_t *src, int64_t ld, int64_t M, int64_t K, bool flip, bool s8, uint8_t *dst,
                      int32_t *sum)
{
    int64_t kp = kiln__qgemm_kp(K);
    for (int64_t i = 0; i < M; i++) {
        uint8_t *d = dst + i * kp;
        kiln__qconv_bytes(d, src + i * ld, K, flip);
        for (int64_t k = K; k < kp; k++)
            d[k] = 0;
        if (sum) {
            int32_t s = 0;
            if (s8)
                for (int64_t k = 0; k < K; k++)
                    s += (int8_t)d[k];
            else
                for (int64_t k = 0; k < K; k++)
                    s += d[k];
            sum[i] = s;
        }
    }
}

/* ---- driver ---- */

bool kiln__qgemm_vnni_available(void)
{
    return kiln__cpu_has(KILN_CPU_AVX512_DQ_FMA | KILN_CPU_AVX512VNNI);
}

static int isa_cap = 3;

void kiln__qgemm_set_isa_cap(int cap) { isa_cap = cap; }

int kiln__qgemm_isa(void)
{
    static int host = -1;   /* racing first calls store the same value */
    int h = __atomic_load_n(&host, __ATOMIC_RELAXED);
    if (h < 0) {
        h = kiln__cpu_has(KILN_CPU_AMX_INT8) && kiln__qgemm_vnni_available() ? 3
            : kiln__qgemm_vnni_available()                                 ? 2
            : kiln__cpu_has(KILN_CPU_AVX2_FMA)                             ? 1
                                                                           : 0;
        __atomic_store_n(&host, h, __ATOMIC_RELAXED);
    }
    return h < isa_cap ? h : isa_cap;
}

/* Portable tile (hosts without VNNI or AVX2): the contract of kiln__qgemm_tile_vnni. */
static void tile_c(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, int m, int64_t j0,
                   int ncols)
{
    int64_t kp = kiln__qgemm_kp(g->K);
    for (int i = 0; i < m; i++) {
        const uint8_t *ar = g->a + (i0 + i) * g->lda;
        for (int c = 0; c < ncols; c++) {
            const uint8_t *bp = bs + (c / KILN_QGEMM_NR) * kp * KILN_QGEMM_NR + (c % KILN_QGEMM_NR) * 4;
            int32_t s = 0;
            for (int64_t k = 0; k < kp; k++)
                s += byte_val(ar[k], g->a_s8) * byte_val(bp[(k >> 2) * 64 + (k & 3)], !g->a_s8);
            kiln__qepi_store(&g->epi, g->c, g->ldc, i0 + i, j0 + c,
                             compensate(g, s, i0 + i, j0 + c, bsum ? bsum + c : NULL));
        }
    }
}

/* ---- scheduler ---- */

void kiln__sched_plan(kiln_sched *s, int64_t M, int64_t N, int64_t K, int nthreads, int64_t width)
{
    int64_t tn = (N + width - 1) / width;
    int nt = nthreads < 1 ? 1 : nthreads;
    if ((double)M * (double)N * (double)(K + 16) < 1048576.0)
        nt = 1;
    /* rows per block: all of M unless there are too few strips to keep the threads busy */
    int64_t tm = 1;
    if (tn < 4 * nt)
        tm = min64((4 * nt + tn - 1) / tn, (M + KILN_QGEMM_MR - 1) / KILN_QGEMM_MR);
    int64_t mb = ((M + tm - 1) / tm + KILN_QGEMM_MR - 1) / KILN_QGEMM_MR * KILN_QGEMM_MR;
    tm = (M + mb - 1) / mb;
    if (nt > tn * tm)
        nt = (int)(tn * tm);
    *s = (kiln_sched){.M = M, .nt = nt, .tm = tm, .mb = mb, .ntask = tn * tm};
}

typedef struct sched_job {
    const kiln_sched *s;
    kiln_strip_task_fn fn;
    void *ctx;
} sched_job;

/* Worker slots [s0, s1): each runs its contiguous share of the tasks, in order. */
static void sched_slot(void *arg, int64_t s0, int64_t s1)
{
    sched_job *j = arg;
    const kiln_sched *s = j->s;
    for (int64_t slot = s0; slot < s1; slot++) {
        const int64_t a = slot * s->ntask / s->nt, b = (slot + 1) * s->ntask / s->nt;
        for (int64_t t = a; t < b; t++) {
            int64_t i0 = (t % s->tm) * s->mb;
            j->fn(j->ctx, slot, t / s->tm, i0, min64(s->M, i0 + s->mb));
        }
    }
}

void kiln__sched_run(kiln_pool *pool, const kiln_sched *s, kiln_strip_task_fn fn, void *ctx)
{
    sched_job j = {.s = s, .fn = fn, .ctx = ctx};
    kiln__parallel_for(s->nt > 1 ? pool : NULL, s->nt, s->nt, 1, sched_slot, &j);
}

/* ---- INT8 GEMM ---- */

typedef struct qjob {
    const kiln_qgemm *g;
    int isa;             /* kiln__qgemm_isa() */
    int64_t width;       /* columns a strip (the scheduler's) */
    int64_t per;         /* packb: bytes of a slot's buffer (the strip's panels, then its column sums) */
    uint8_t *bufs;       /* packb: one strip buffer per slot */
    int64_t *packed;     /* packb: the strip each slot's buffer holds */
} qjob;

static void qgemm_task(void *arg, int64_t slot, int64_t strip, int64_t i0, int64_t i1)
{
    qjob *q = arg;
    const kiln_qgemm *g = q->g;
    int64_t kp = kiln__qgemm_kp(g->K), j0 = strip * q->width;
    int ncols = (int)min64(q->width, g->N - j0);
    const uint8_t *bs;
    const int32_t *bsum = NULL;
    if (g->packb) {
        uint8_t *buf = q->bufs + slot * q->per;
        int32_t *sums = (int32_t *)(buf + kp * q->width);
        /* the packers take strips of up to 48 columns: a wider strip in 48-column pieces (3 panels, 48 kp bytes) */
        for (int64_t h = 0; q->packed[slot] != strip && h < ncols; h += KILN_QGEMM_STRIP)
            g->packb(g->packb_ctx, j0 + h, min64(KILN_QGEMM_STRIP, ncols - h), buf + h * kp,
                     g->packb_sums ? sums + h : NULL);
        q->packed[slot] = strip;
        bs = buf;
        bsum = g->packb_sums ? sums : NULL;
    } else {
        bs = g->b + j0 * kp;   /* panel j0 / 16, kp * 16 bytes each */
        bsum = g->b_sum ? g->b_sum + j0 : NULL;
    }
    if (q->isa == 3) {
        kiln__qgemm_rows_amx(g, bs, bsum, i0, i1, j0, ncols);
        return;
    }
    for (int64_t i = i0; i < i1; i += KILN_QGEMM_MR) {
        int m = (int)min64(KILN_QGEMM_MR, i1 - i);
        if (q->isa == 2)
            kiln__qgemm_tile_vnni(g, bs, bsum, i, m, j0, (ncols + KILN_QGEMM_NR - 1) / KILN_QGEMM_NR, ncols);
        else if (q->isa == 1)
            kiln__qgemm_tile_avx2(g, bs, bsum, i, m, j0, ncols);
        else
            tile_c(g, bs, bsum, i, m, j0, ncols);
    }
}

kiln_status kiln__qgemm(kiln_pool *pool, int nthreads, const kiln_qgemm *g)
{
    if (g->M <= 0 || g->N <= 0)
        return KILN_OK;
    qjob q = {.g = g, .isa = kiln__qgemm_isa()};
    if (q.isa == 3 && isa_cap < 4 && !kiln__amx_pays(g->M, g->K))
        q.isa = 2;   /* the VNNI tile */
    q.width = kiln__sched_width(q.isa);
    kiln_sched s;
    kiln__sched_plan(&s, g->M, g->N, g->K, nthreads, q.width);
    if (g->epi.res && q.isa == 1)   /* the AVX2 tile has no residual epilogue: the portable one (kiln__qepi_store) */
        q.isa = 0;
    if (g->packb) { /* per slot: a strip of panels, then its column sums */
        q.per = (kiln__qgemm_kp(g->K) * q.width + 4 * q.width + 63) / 64 * 64;
        size_t per = (size_t)q.per;
        if (posix_memalign((void **)&q.bufs, 64, per * (size_t)s.nt) != 0)
            return kiln__err(KILN_ERR_NOMEM, "out of memory (INT8 GEMM packing buffers)");
        q.packed = malloc(sizeof(int64_t) * (size_t)s.nt);
        if (!q.packed) {
            free(q.bufs);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < s.nt; i++)
            q.packed[i] = -1;
    }
    kiln__sched_run(pool, &s, qgemm_task, &q);
    free(q.bufs);
    free(q.packed);
    return KILN_OK;
}

void kiln__qgemm_ref(const kiln_qgemm *g)
{
    int64_t kp = kiln__qgemm_kp(g->K);
    for (int64_t i = 0; i < g->M; i++)
        for (int64_t j = 0; j < g->N; j++) {
            const uint8_t *ar = g->a + i * g->lda;
            const uint8_t *bp = g->b + (j / KILN_QGEMM_NR) * kp * KILN_QGEMM_NR + (j % KILN_QGEMM_NR) * 4;
            int64_t s = 0;
            for (int64_t k = 0; k < g->K; k++)
                s += (int64_t)byte_val(ar[k], g->a_s8) * byte_val(bp[(k >> 2) * 64 + (k & 3)], !g->a_s8);
            const int32_t *bs = g->b_sum ? g->b_sum + j : NULL;
            kiln__qepi_store(&g->epi, g->c, g->ldc, i, j, compensate(g, (int32_t)s, i, j, bs));
        }
}
