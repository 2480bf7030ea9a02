/* AVX2 + FMA Winograd transforms of the 3x3 stride-1 float32 convolution (wino.h; driver:
 * conv_wino.c): the twins of wino_avx512.c's F(2x2, 3x3) and F(4x4, 3x3), 8 tiles of one tile row
 * per vector, with the same arithmetic in the same order. V is written in the GEMM's packed-B
 * panels of j->nr tiles (16 with the AVX2 GEMM, 32 when this kernel runs on an AVX-512 host); the
 * filter transforms (Tw) are wino_avx512.c's, so prepared filters have the same layout and values. */
#include "wino.h"
#include "../prep.h"
#include "../vmath_avx2.h"
#include "conv_x86.h"

#if KILN_CONV_X86
#include <immintrin.h>

#define T2 __attribute__((target("avx2,fma")))

static void tw_f23(float *tw) { kiln__wino_f23.tw(tw); }
static void tw_f43(float *tw) { kiln__wino_f43.tw(tw); }

/* Calls the body for the tiles [t0, t1) (row-major tile order) in chunks of at most 8 tiles
 * within one tile row (ty, tx: the first tile; cnt tiles; col: the first's column in the block). */
#define WINO_CHUNKS8(j, t0, t1, ...)                                                                    \
    for (int64_t t_ = (t0); t_ < (t1);) {                                                             \
        int64_t ty = t_ / (j)->tW, tx = t_ % (j)->tW;                                                  \
        int64_t rem_ = (j)->tW - tx < (t1) - t_ ? (j)->tW - tx : (t1) - t_;                            \
        int cnt = rem_ < 8 ? (int)rem_ : 8;                                                            \
        int64_t col = t_ - (t0);                                                                       \
        __VA_ARGS__;                                                                                   \
        t_ += cnt;                                                                                     \
    }

/* lanes [0, n) of 8 (n clamped to [0, 8]) as a maskload / maskstore mask */
T2 static inline __m256i lanes8(int64_t n)
{
    int k = n < 0 ? 0 : n > 8 ? 8 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The np transformed values o[] of one chunk (cnt tiles from column col) into V's np planes (xs
 * apart), packed-B panels [p][Cg][nr]: whole vectors where the chunk is full and inside one panel,
 * else lane by lane (the row's last chunk, or a chunk across two panels). */
T2 __attribute__((always_inline)) static inline void store_v8(float *V, int64_t col, int64_t c, int64_t Cg,
                                                              int64_t xs, int nr, int cnt, const __m256 *o,
                                                              const int np)
{
    const int64_t off0 = col % nr;
    if (cnt == 8 && off0 + 8 <= nr) {
        float *v = V + (col / nr) * Cg * nr + c * nr + off0;
        _Pragma("GCC unroll 36") for (int q = 0; q < np; q++) _mm256_storeu_ps(v + q * xs, o[q]);
        return;
    }
    float t[36 * 8] __attribute__((aligned(32)));
    _Pragma("GCC unroll 36") for (int q = 0; q < np; q++) _mm256_store_ps(t + 8 * q, o[q]);
    for (int l = 0; l < cnt; l++) {
        const int64_t cl = col + l;
        float *v = V + (cl / nr) * Cg * nr + c * nr + cl % nr;
        for (int q = 0; q < np; q++)
            v[q * xs] = t[8 * q + l];
    }
}

/* 8 output pixels (the first n, n > 0) with the epilogue: + bias, + residual rr (NULL: none), the
 * fused activation, stored to y. */
T2 __attribute__((always_inline)) static inline void epi_store8(float *y, const float *rr, int64_t n, __m256 x,
                                                                __m256 vbias, const kiln_act *a)
{
    x = _mm256_add_ps(x, vbias);
    if (n >= 8) {
        if (rr)
            x = _mm256_add_ps(x, _mm256_loadu_ps(rr));
        if (a->kind != KILN_ACT_NONE)
            x = kiln_v8_act(a->kind, a->alpha, a->beta, x);
        _mm256_storeu_ps(y, x);
        return;
    }
    const __m256i m = lanes8(n);
    if (rr)
        x = _mm256_add_ps(x, _mm256_maskload_ps(rr, m));
    if (a->kind != KILN_ACT_NONE)
        x = kiln_v8_act(a->kind, a->alpha, a->beta, x);
    _mm256_maskstore_ps(y, m, x);
}

/* 8 floats of P from p: all 8 lanes, or the first cnt (the rest zero) */
T2 __attribute__((always_inline)) static inline __m256 load_p(const float *p, int cnt, __m256i m)
{
    return cnt == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}

/* lane l = q[2 l] and q[2 l + 1] (reads q[0 .. 15]) */
T2 __attribute__((always_inline)) static inline void deint2(const float *q, __m256 *ev, __m256 *od)
{
    __m256 a = _mm256_loadu_ps(q), b = _mm256_loadu_ps(q + 8);
    __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    *ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    *od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* Input transform of tiles [t0, t1), channels [c0, c1), into V[16]. */
T2 static void in_f23(const wino_job *j, int64_t t0, int64_t t1, float *V, int64_t c0, int64_t c1)
{
    const int nr = j->nr;
    const int64_t Cg = j->Cg, Tb = t1 - t0, xs = wino_stride(cdiv(Tb, nr) * nr * Cg);
    for (int64_t c = c0; c < c1; c++) {
        const float *xc = j->xp + c * j->Hp * j->Wp;
        WINO_CHUNKS8(j, t0, t1, {
            /* t = B^T d, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], accumulated row by row */
            __m256 t[4][4];
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                const float *row = xc + (ty * 2 + i) * j->Wp + 2 * tx;   /* reads row[0 .. 17] */
                __m256 d[4];
                deint2(row, &d[0], &d[1]);
                deint2(row + 2, &d[2], &d[3]);
                _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
                    if (i == 0) {
                        t[0][q] = d[q];
                    } else if (i == 1) {
                        t[1][q] = d[q];
                        t[2][q] = _mm256_sub_ps(_mm256_setzero_ps(), d[q]);
                        t[3][q] = d[q];
                    } else if (i == 2) {
                        t[0][q] = _mm256_sub_ps(t[0][q], d[q]);
                        t[1][q] = _mm256_add_ps(t[1][q], d[q]);
                        t[2][q] = _mm256_add_ps(t[2][q], d[q]);
                    } else {
                        t[3][q] = _mm256_sub_ps(t[3][q], d[q]);
                    }
                }
            }
            __m256 o[16];
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                o[p * 4 + 0] = _mm256_sub_ps(t[p][0], t[p][2]);
                o[p * 4 + 1] = _mm256_add_ps(t[p][1], t[p][2]);
                o[p * 4 + 2] = _mm256_sub_ps(t[p][2], t[p][1]);
                o[p * 4 + 3] = _mm256_sub_ps(t[p][1], t[p][3]);
            }
            store_v8(V, col, c, Cg, xs, nr, cnt, o, 16);
        })
    }
}

/* Output transform of P[16][Mg][Tb] for tiles [t0, t1), output channels [m0, m1), with the epilogue. */
T2 static void out_f23(const wino_job *j, int64_t t0, int64_t t1, const float *P, int64_t m0, int64_t m1)
{
    const kiln_window *g = j->g;
    const int64_t Mg = j->Mg, Tb = t1 - t0, Ho = g->out[0], Wo = g->out[1], xs = wino_stride(Mg * Tb);
    for (int64_t mo = m0; mo < m1; mo++) {
        float *ym = j->y + mo * g->out_sz;
        const __m256 vbias = _mm256_set1_ps(j->e.bias ? j->e.bias[mo] : 0.0f);
        const float *res = j->e.res ? j->e.res + mo * j->e.ldr : NULL;
        WINO_CHUNKS8(j, t0, t1, {
            const float *p = P + mo * Tb + col;
            const __m256i m = lanes8(cnt);
            /* t = A^T s, A^T = [1 1 1 0; 0 1 -1 -1], accumulated row by row */
            __m256 ta[4], tb[4];
            _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
                __m256 s0 = load_p(p + q * xs, cnt, m), s1 = load_p(p + (4 + q) * xs, cnt, m);
                __m256 s2 = load_p(p + (8 + q) * xs, cnt, m), s3 = load_p(p + (12 + q) * xs, cnt, m);
                ta[q] = _mm256_add_ps(_mm256_add_ps(s0, s1), s2);
                tb[q] = _mm256_sub_ps(_mm256_sub_ps(s1, s2), s3);
            }
            __m256 yv[2][2];
            yv[0][0] = _mm256_add_ps(_mm256_add_ps(ta[0], ta[1]), ta[2]);
            yv[0][1] = _mm256_sub_ps(_mm256_sub_ps(ta[1], ta[2]), ta[3]);
            yv[1][0] = _mm256_add_ps(_mm256_add_ps(tb[0], tb[1]), tb[2]);
            yv[1][1] = _mm256_sub_ps(_mm256_sub_ps(tb[1], tb[2]), tb[3]);
            int64_t oy = 2 * ty, ox = 2 * tx, ncol = Wo - ox < 2 * cnt ? Wo - ox : 2 * cnt;
            _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {
                if (oy + i >= Ho)
                    break;
                float *yr = ym + (oy + i) * Wo + ox;
                const float *rr = res ? res + (oy + i) * Wo + ox : NULL;
                /* pixels 2 l, 2 l + 1 of tile l: interleave the two columns */
                __m256 lo = _mm256_unpacklo_ps(yv[i][0], yv[i][1]), hi = _mm256_unpackhi_ps(yv[i][0], yv[i][1]);
                epi_store8(yr, rr, ncol, _mm256_permute2f128_ps(lo, hi, 0x20), vbias, &j->e.act);
                if (ncol > 8)
                    epi_store8(yr + 8, rr ? rr + 8 : NULL, ncol - 8, _mm256_permute2f128_ps(lo, hi, 0x31), vbias,
                               &j->e.act);
            }
        })
    }
}

/* ---- F(4x4, 3x3): wino_avx512.c gives B^T, G, A^T ---- */

/* r = B^T a (6 values, element-wise over the lanes) */
T2 __attribute__((always_inline)) static inline void bt6(const __m256 *a, __m256 *r)
{
    const __m256 c2 = _mm256_set1_ps(2.0f), c4 = _mm256_set1_ps(4.0f), c5 = _mm256_set1_ps(5.0f);
    __m256 s12 = _mm256_add_ps(a[1], a[2]), s34 = _mm256_add_ps(a[3], a[4]);
    __m256 d12 = _mm256_sub_ps(a[1], a[2]), d43 = _mm256_sub_ps(a[4], a[3]);
    __m256 m42 = _mm256_sub_ps(a[4], a[2]), d31 = _mm256_sub_ps(a[3], a[1]);
    r[0] = _mm256_fmadd_ps(c4, a[0], _mm256_fnmadd_ps(c5, a[2], a[4]));
    r[1] = _mm256_fnmadd_ps(c4, s12, s34);
    r[2] = _mm256_fmadd_ps(c4, d12, d43);
    r[3] = _mm256_fmadd_ps(c2, d31, m42);
    r[4] = _mm256_fnmadd_ps(c2, d31, m42);
    r[5] = _mm256_fmadd_ps(c4, a[1], _mm256_fnmadd_ps(c5, a[3], a[5]));
}

/* r = A^T a (4 values from 6) */
T2 __attribute__((always_inline)) static inline void at6(const __m256 *a, __m256 *r)
{
    const __m256 c2 = _mm256_set1_ps(2.0f), c4 = _mm256_set1_ps(4.0f), c8 = _mm256_set1_ps(8.0f);
    __m256 s12 = _mm256_add_ps(a[1], a[2]), s34 = _mm256_add_ps(a[3], a[4]);
    __m256 d12 = _mm256_sub_ps(a[1], a[2]), d34 = _mm256_sub_ps(a[3], a[4]);
    r[0] = _mm256_add_ps(_mm256_add_ps(a[0], s12), s34);
    r[1] = _mm256_fmadd_ps(c2, d34, d12);
    r[2] = _mm256_fmadd_ps(c4, s34, s12);
    r[3] = _mm256_add_ps(_mm256_fmadd_ps(c8, d34, d12), a[5]);
}

/* [lo[0..3] | hi[0..3]] */
T2 __attribute__((always_inline)) static inline __m256 load2x4(const float *lo, const float *hi)
{
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
}

/* Input transform of tiles [t0, t1), channels [c0, c1), into V[36]. Per input row of 8 tiles
 * (x[0 .. 35] from the tiles' first column): the 4-float groups of tiles l and l + 4 paired in
 * the two 128-bit halves, so that in-lane 4 x 4 transposes give lane l = x[4 l + q] in tile order;
 * transformed along the row, then B^T along the 6 rows. */
T2 static void in_f43(const wino_job *j, int64_t t0, int64_t t1, float *V, int64_t c0, int64_t c1)
{
    const int nr = j->nr;
    const int64_t Cg = j->Cg, Tb = t1 - t0, xs = wino_stride(cdiv(Tb, nr) * nr * Cg);
    for (int64_t c = c0; c < c1; c++) {
        const float *xc = j->xp + c * j->Hp * j->Wp;
        WINO_CHUNKS8(j, t0, t1, {
            __m256 h[6][6]; /* h[i][q]: row i of the input tiles, transformed along the row */
            _Pragma("GCC unroll 6") for (int i = 0; i < 6; i++) {
                const float *row = xc + (ty * 4 + i) * j->Wp + 4 * tx;
                /* u[k] = groups k and k + 4 (x[4k ..], x[4k + 16 ..]); u[4] = groups 4 and 8 */
                __m256 u0 = load2x4(row, row + 16), u1 = load2x4(row + 4, row + 20);
                __m256 u2 = load2x4(row + 8, row + 24), u3 = load2x4(row + 12, row + 28);
                __m256 u4 = load2x4(row + 16, row + 32);
                __m256 a0 = _mm256_unpacklo_ps(u0, u1), a1 = _mm256_unpackhi_ps(u0, u1);
                __m256 a2 = _mm256_unpacklo_ps(u2, u3), a3 = _mm256_unpackhi_ps(u2, u3);
                __m256 b0 = _mm256_unpacklo_ps(u1, u2), b2 = _mm256_unpacklo_ps(u3, u4);
                __m256 d[6];
                d[0] = _mm256_shuffle_ps(a0, a2, _MM_SHUFFLE(1, 0, 1, 0));
                d[1] = _mm256_shuffle_ps(a0, a2, _MM_SHUFFLE(3, 2, 3, 2));
                d[2] = _mm256_shuffle_ps(a1, a3, _MM_SHUFFLE(1, 0, 1, 0));
                d[3] = _mm256_shuffle_ps(a1, a3, _MM_SHUFFLE(3, 2, 3, 2));
                /* x[4l + 4], x[4l + 5]: elements 0 and 1 of the groups one tile on */
                d[4] = _mm256_shuffle_ps(b0, b2, _MM_SHUFFLE(1, 0, 1, 0));
                d[5] = _mm256_shuffle_ps(b0, b2, _MM_SHUFFLE(3, 2, 3, 2));
                bt6(d, h[i]);
            }
            __m256 o[36];
            _Pragma("GCC unroll 6") for (int q = 0; q < 6; q++) {
                __m256 a[6], r[6];
                _Pragma("GCC unroll 6") for (int i = 0; i < 6; i++) a[i] = h[i][q];
                bt6(a, r);
                _Pragma("GCC unroll 6") for (int p = 0; p < 6; p++) o[p * 6 + q] = r[p];
            }
            store_v8(V, col, c, Cg, xs, nr, cnt, o, 36);
        })
    }
}

/* Output transform of P[36][Mg][Tb] for tiles [t0, t1), output channels [m0, m1), with the
 * epilogue: A^T along each row of the 6x6 products, then along the columns; each output row of 8
 * tiles (32 pixels) re-interleaved from its 4 column vectors by in-lane 4 x 4 transposes. */
T2 static void out_f43(const wino_job *j, int64_t t0, int64_t t1, const float *P, int64_t m0, int64_t m1)
{
    const kiln_window *g = j->g;
    const int64_t Mg = j->Mg, Tb = t1 - t0, Ho = g->out[0], Wo = g->out[1], xs = wino_stride(Mg * Tb);
    for (int64_t mo = m0; mo < m1; mo++) {
        float *ym = j->y + mo * g->out_sz;
        const __m256 vbias = _mm256_set1_ps(j->e.bias ? j->e.bias[mo] : 0.0f);
        const float *res = j->e.res ? j->e.res + mo * j->e.ldr : NULL;
        WINO_CHUNKS8(j, t0, t1, {
            const float *p = P + mo * Tb + col;
            const __m256i m = lanes8(cnt);
            __m256 s[6][4]; /* s[i][q]: row i of the products, transformed along the row */
            _Pragma("GCC unroll 6") for (int i = 0; i < 6; i++) {
                __m256 a[6];
                _Pragma("GCC unroll 6") for (int q = 0; q < 6; q++) a[q] = load_p(p + (i * 6 + q) * xs, cnt, m);
                at6(a, s[i]);
            }
            __m256 yv[4][4]; /* yv[r][q]: output row r, column q of each tile */
            _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
                __m256 a[6], r[4];
                _Pragma("GCC unroll 6") for (int i = 0; i < 6; i++) a[i] = s[i][q];
                at6(a, r);
                _Pragma("GCC unroll 4") for (int r2 = 0; r2 < 4; r2++) yv[r2][q] = r[r2];
            }
            int64_t oy = 4 * ty, ox = 4 * tx, ncol = Wo - ox < 4 * cnt ? Wo - ox : 4 * cnt;
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
                if (oy + r >= Ho)
                    break;
                float *yr = ym + (oy + r) * Wo + ox;
                const float *rr = res ? res + (oy + r) * Wo + ox : NULL;
                __m256 a0 = _mm256_unpacklo_ps(yv[r][0], yv[r][1]), a1 = _mm256_unpackhi_ps(yv[r][0], yv[r][1]);
                __m256 a2 = _mm256_unpacklo_ps(yv[r][2], yv[r][3]), a3 = _mm256_unpackhi_ps(yv[r][2], yv[r][3]);
                /* e[k]: the 4 pixels of tile k | of tile k + 4 */
                __m256 e0 = _mm256_shuffle_ps(a0, a2, _MM_SHUFFLE(1, 0, 1, 0));
                __m256 e1 = _mm256_shuffle_ps(a0, a2, _MM_SHUFFLE(3, 2, 3, 2));
                __m256 e2 = _mm256_shuffle_ps(a1, a3, _MM_SHUFFLE(1, 0, 1, 0));
                __m256 e3 = _mm256_shuffle_ps(a1, a3, _MM_SHUFFLE(3, 2, 3, 2));
                __m256 out[4];
                out[0] = _mm256_permute2f128_ps(e0, e1, 0x20);   /* tiles 0, 1 */
                out[1] = _mm256_permute2f128_ps(e2, e3, 0x20);   /* tiles 2, 3 */
                out[2] = _mm256_permute2f128_ps(e0, e1, 0x31);   /* tiles 4, 5 */
                out[3] = _mm256_permute2f128_ps(e2, e3, 0x31);   /* tiles 6, 7 */
                _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) {
                    int64_t n = ncol - 8 * v;
                    if (n <= 0)
                        break;
                    epi_store8(yr + 8 * v, rr ? rr + 8 * v : NULL, n, out[v], vbias, &j->e.act);
                }
            }
        })
    }
}
#undef WINO_CHUNKS8

const wino_kind kiln__wino_f23_avx2 = {2, 16, KILN_PREP_WINO_F23, tw_f23, in_f23, out_f23, false};
const wino_kind kiln__wino_f43_avx2 = {4, 36, KILN_PREP_WINO_F43, tw_f43, in_f43, out_f43, false};
#endif
