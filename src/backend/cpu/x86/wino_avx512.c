/* Winograd transforms of the 3x3 stride-1 float32 convolution (wino.h; driver: conv_wino.c):
 * filter transform matrices (Tw = G (x) G), and the AVX-512 input and output transforms of
 * F(2x2, 3x3) and F(4x4, 3x3), 16 tiles of one tile row per vector. */
#include "wino.h"
#include "../prep.h"
#include "../vmath.h"
#include "conv_x86.h"

#if KILN_CONV_X86
#include <immintrin.h>

/* Tw[a*n+b][i*3+j] = G[a][i] G[b][j] for G of n rows (n x 3, row-major) */
static void kron_g(const float *G, int n, float *tw)
{
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    tw[(a * n + b) * 9 + i * 3 + j] = G[a * 3 + i] * G[b * 3 + j];
}

/* G (x) G: Tw[a*4+b][i*3+j] = G[a][i] G[b][j] */
static void tw_f23(float *tw)
{
    static const float G[4 * 3] = {1, 0, 0, 0.5f, 0.5f, 0.5f, 0.5f, -0.5f, 0.5f, 0, 0, 1};
    kron_g(G, 4, tw);
}

/* Calls f(ty, tx, cnt, col) for the tiles [t0, t1) (row-major tile order) in chunks of at most
 * 16 tiles within one tile row; col is the chunk's first column in the block. */
#define WINO_CHUNKS(j, t0, t1, ...)                                                                     \
    for (int64_t t_ = (t0); t_ < (t1);) {                                                             \
        int64_t ty = t_ / (j)->tW, tx = t_ % (j)->tW;                                                  \
        int64_t rem_ = (j)->tW - tx < (t1) - t_ ? (j)->tW - tx : (t1) - t_;                            \
        int cnt = rem_ < 16 ? (int)rem_ : 16;                                                          \
        int64_t col = t_ - (t0);                                                                       \
        __mmask16 m = kiln_v_mask16(cnt);                                                              \
        __VA_ARGS__;                                                                                   \
        t_ += cnt;                                                                                     \
    }

/* The np transformed values o[] of one chunk of tiles (lanes in m) into V's np planes (xs
 * apart), in the GEMM's packed-B layout: 32-tile panels [p][Cg][32]; a chunk may end in the
 * next panel (second store, its lane k0 landing on that panel's lane 0). */
__attribute__((target("avx512f"), always_inline)) static inline void store_v(float *V, int64_t col, int64_t c,
                                                                            int64_t Cg, int64_t xs, __mmask16 m,
                                                                            const __m512 *o, const int np)
{
    int64_t off0 = col % 32, k0 = 32 - off0;
    float *v1 = V + (col / 32) * Cg * 32 + c * 32 + off0, *v2 = v1 + Cg * 32 - 32;
    __mmask16 m1 = k0 >= 16 ? m : (__mmask16)(m & ((1u << k0) - 1u)), m2 = (__mmask16)(m & ~m1);
    _Pragma("GCC unroll 36") for (int q = 0; q < np; q++) {
        _mm512_mask_storeu_ps(v1 + q * xs, m1, o[q]);
        if (m2)
            _mm512_mask_storeu_ps(v2 + q * xs, m2, o[q]);
    }
}

/* 16 output pixels (lanes in mk) with the epilogue: + bias, + residual row rr (NULL: none), the
 * fused activation (act), stored to y. */
__attribute__((target("avx512f,avx512dq,fma"), always_inline)) static inline void epi_store16(
    float *y, const float *rr, __mmask16 mk, __m512 x, __m512 vbias, bool act, const kiln_act *a)
{
    x = _mm512_add_ps(x, vbias);
    if (rr)
        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, rr));
    if (act)
        x = kiln_v_act(a, x);
    _mm512_mask_storeu_ps(y, mk, x);
}

/* Mask of the lanes of the v-th 16-float vector from a row position with `avail` floats left in
 * the padded row: the transforms load whole vectors, nothing past the row is read. */
static inline __mmask16 row_mask(int64_t avail, int v)
{
    return kiln_v_mask16(avail - 16 * v);
}

/* A padded row of an input tile row as the transforms load it: p + k for k in [lo, hi) are the floats of padded row
 * pr from padded column pc on, the rest reads as zero. From the padded copy (xp), or from the input read in place
 * (j->x): rows above and below it and columns left and right of it are the padding, never loaded (masked loads). */
typedef struct in_row {
    const float *p;
    int64_t lo, hi;
} in_row;

static inline in_row in_row_at(const wino_job *j, const float *xc, int64_t pr, int64_t pc)
{
    if (!j->x)
        return (in_row){xc + pr * j->Wp + pc, 0, j->Wp - pc};
    int64_t iy = pr - j->ph, ix = pc - j->pw;
    if (iy < 0 || iy >= j->H)
        return (in_row){xc, 0, 0};
    return (in_row){xc + iy * j->W + ix, ix < 0 ? -ix : 0, j->W - ix};
}

/* The first channel's rows: of the padded copy or the input. */
static inline const float *in_plane(const wino_job *j, int64_t c)
{
    return j->x ? j->x + c * j->H * j->W : j->xp + c * j->Hp * j->Wp;
}

/* Lanes of the v-th 16-float vector of row r that hold its floats. */
static inline __mmask16 in_mask(in_row r, int v)
{
    return (__mmask16)(kiln_v_mask16(r.hi - 16 * v) & ~kiln_v_mask16(r.lo - 16 * v));
}

/* Input transform of tiles [t0, t1) (all channels) into V[16] (packed 32-tile panels [p][Cg][32]). */
__attribute__((target("avx512f"))) static void in_f23(const wino_job *j, int64_t t0, int64_t t1, float *V,
                                                          int64_t c0, int64_t c1)
{
    const int64_t Cg = j->Cg, Tb = t1 - t0, xs = wino_stride(cdiv(Tb, 32) * 32 * Cg); /* between the 16 products */
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t c = c0; c < c1; c++) {
        const float *xc = in_plane(j, c);
        WINO_CHUNKS(j, t0, t1, {
            /* t = B^T d, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], accumulated row by row */
            __m512 t[4][4];
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                const in_row rw = in_row_at(j, xc, ty * 2 + i, 2 * tx);
                __m512 a = _mm512_maskz_loadu_ps(in_mask(rw, 0), rw.p);
                __m512 b = _mm512_maskz_loadu_ps(in_mask(rw, 1), rw.p + 16);
                __m512i ci = _mm512_castps_si512(_mm512_maskz_loadu_ps(in_mask(rw, 2), rw.p + 32));
                /* lane l: x[2l], x[2l+1], x[2l+2], x[2l+3]; the last lane's x[32], x[33] come from ci */
                __m512 d[4];
                d[0] = _mm512_permutex2var_ps(a, ev, b);
                d[1] = _mm512_permutex2var_ps(a, od, b);
                d[2] = _mm512_castsi512_ps(_mm512_alignr_epi32(ci, _mm512_castps_si512(d[0]), 1));
                d[3] = _mm512_castsi512_ps(
                    _mm512_alignr_epi32(_mm512_alignr_epi32(ci, ci, 1), _mm512_castps_si512(d[1]), 1));
                _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
                    if (i == 0) {
                        t[0][q] = d[q];
                    } else if (i == 1) {
                        t[1][q] = d[q];
                        t[2][q] = _mm512_sub_ps(_mm512_setzero_ps(), d[q]);
                        t[3][q] = d[q];
                    } else if (i == 2) {
                        t[0][q] = _mm512_sub_ps(t[0][q], d[q]);
                        t[1][q] = _mm512_add_ps(t[1][q], d[q]);
                        t[2][q] = _mm512_add_ps(t[2][q], d[q]);
                    } else {
                        t[3][q] = _mm512_sub_ps(t[3][q], d[q]);
                    }
                }
            }
            __m512 o[16];
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                o[p * 4 + 0] = _mm512_sub_ps(t[p][0], t[p][2]);
                o[p * 4 + 1] = _mm512_add_ps(t[p][1], t[p][2]);
                o[p * 4 + 2] = _mm512_sub_ps(t[p][2], t[p][1]);
                o[p * 4 + 3] = _mm512_sub_ps(t[p][1], t[p][3]);
            }
            store_v(V, col, c, Cg, xs, m, o, 16);
        })
    }
}

/* Output transform of P[16][Mg][Tb] for tiles [t0, t1), with the epilogue. */
__attribute__((target("avx512f,avx512dq,fma"))) static void out_f23(const wino_job *j, int64_t t0, int64_t t1,
                                                                         const float *P, int64_t m0, int64_t m1)
{
    const kiln_window *g = j->g;
    const int64_t Mg = j->Mg, Tb = t1 - t0, Ho = g->out[0], Wo = g->out[1], xs = wino_stride(Mg * Tb);
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const bool act = j->e.act.kind != KILN_ACT_NONE;
    for (int64_t mo = m0; mo < m1; mo++) {
        float *ym = j->y + mo * g->out_sz;
        const __m512 vbias = _mm512_set1_ps(j->e.bias ? j->e.bias[mo] : 0.0f);
        const float *res = j->e.res ? j->e.res + mo * j->e.ldr : NULL;
        WINO_CHUNKS(j, t0, t1, {
            const float *p = P + mo * Tb + col;
            /* t = A^T s, A^T = [1 1 1 0; 0 1 -1 -1], accumulated row by row */
            __m512 ta[4], tb[4];
            _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
                __m512 s0 = _mm512_maskz_loadu_ps(m, p + q * xs), s1 = _mm512_maskz_loadu_ps(m, p + (4 + q) * xs);
                __m512 s2 = _mm512_maskz_loadu_ps(m, p + (8 + q) * xs), s3 = _mm512_maskz_loadu_ps(m, p + (12 + q) * xs);
                ta[q] = _mm512_add_ps(_mm512_add_ps(s0, s1), s2);
                tb[q] = _mm512_sub_ps(_mm512_sub_ps(s1, s2), s3);
            }
            __m512 yv[2][2];
            yv[0][0] = _mm512_add_ps(_mm512_add_ps(ta[0], ta[1]), ta[2]);
            yv[0][1] = _mm512_sub_ps(_mm512_sub_ps(ta[1], ta[2]), ta[3]);
            yv[1][0] = _mm512_add_ps(_mm512_add_ps(tb[0], tb[1]), tb[2]);
            yv[1][1] = _mm512_sub_ps(_mm512_sub_ps(tb[1], tb[2]), tb[3]);
            int64_t oy = 2 * ty, ox = 2 * tx, ncol = Wo - ox < 2 * cnt ? Wo - ox : 2 * cnt;
            __mmask16 ma = kiln_v_mask16(ncol), mb = kiln_v_mask16(ncol - 16);
            _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {
                if (oy + i >= Ho)
                    break;
                float *yr = ym + (oy + i) * Wo + ox;
                const float *rr = res ? res + (oy + i) * Wo + ox : NULL;
                epi_store16(yr, rr, ma, _mm512_permutex2var_ps(yv[i][0], lo, yv[i][1]), vbias, act, &j->e.act);
                epi_store16(yr + 16, rr ? rr + 16 : NULL, mb, _mm512_permutex2var_ps(yv[i][0], hi, yv[i][1]), vbias, act,
                            &j->e.act);
            }
        })
    }
}

/* ---- F(4x4, 3x3) ----
 * B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
 * G   = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
 * A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1] */
static void tw_f43(float *tw)
{
    static const float G[6 * 3] = {1.0f / 4,  0,          0,         -1.0f / 6, -1.0f / 6, -1.0f / 6,
                                   -1.0f / 6, 1.0f / 6,   -1.0f / 6, 1.0f / 24, 1.0f / 12, 1.0f / 6,
                                   1.0f / 24, -1.0f / 12, 1.0f / 6,  0,         0,         1};
    kron_g(G, 6, tw);
}

/* r = B^T a (6 values, element-wise over the lanes) */
__attribute__((target("avx512f,fma"), always_inline)) static inline void bt6(const __m512 *a, __m512 *r)
{
    const __m512 c2 = _mm512_set1_ps(2.0f), c4 = _mm512_set1_ps(4.0f), c5 = _mm512_set1_ps(5.0f);
    __m512 s12 = _mm512_add_ps(a[1], a[2]), s34 = _mm512_add_ps(a[3], a[4]);
    __m512 d12 = _mm512_sub_ps(a[1], a[2]), d43 = _mm512_sub_ps(a[4], a[3]);
    __m512 m42 = _mm512_sub_ps(a[4], a[2]), d31 = _mm512_sub_ps(a[3], a[1]);
    r[0] = _mm512_fmadd_ps(c4, a[0], _mm512_fnmadd_ps(c5, a[2], a[4]));
    r[1] = _mm512_fnmadd_ps(c4, s12, s34);
    r[2] = _mm512_fmadd_ps(c4, d12, d43);
    r[3] = _mm512_fmadd_ps(c2, d31, m42);
    r[4] = _mm512_fnmadd_ps(c2, d31, m42);
    r[5] = _mm512_fmadd_ps(c4, a[1], _mm512_fnmadd_ps(c5, a[3], a[5]));
}

/* r = A^T a (4 values from 6) */
__attribute__((target("avx512f,fma"), always_inline)) static inline void at6(const __m512 *a, __m512 *r)
{
    const __m512 c2 = _mm512_set1_ps(2.0f), c4 = _mm512_set1_ps(4.0f), c8 = _mm512_set1_ps(8.0f);
    __m512 s12 = _mm512_add_ps(a[1], a[2]), s34 = _mm512_add_ps(a[3], a[4]);
    __m512 d12 = _mm512_sub_ps(a[1], a[2]), d34 = _mm512_sub_ps(a[3], a[4]);
    r[0] = _mm512_add_ps(_mm512_add_ps(a[0], s12), s34);
    r[1] = _mm512_fmadd_ps(c2, d34, d12);
    r[2] = _mm512_fmadd_ps(c4, s34, s12);
    r[3] = _mm512_add_ps(_mm512_fmadd_ps(c8, d34, d12), a[5]);
}

/* Input transform of tiles [t0, t1), channels [c0, c1), into V[36]. Per input row of 16 tiles:
 * 80 floats loaded, de-interleaved by 4 (lane l of d[q] = x[4l + q]), transformed along the row;
 * then B^T along the 6 rows. */
__attribute__((target("avx512f,fma"))) static void in_f43(const wino_job *j, int64_t t0, int64_t t1, float *V,
                                                          int64_t c0, int64_t c1)
{
    const int64_t Cg = j->Cg, Tb = t1 - t0, xs = wino_stride(cdiv(Tb, 32) * 32 * Cg);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t c = c0; c < c1; c++) {
        const float *xc = in_plane(j, c);
        WINO_CHUNKS(j, t0, t1, {
            __m512 h[6][6]; /* h[i][q]: row i of the input tiles, transformed along the row */
            _Pragma("GCC unroll 6") for (int i = 0; i < 6; i++) {
                const in_row rw = in_row_at(j, xc, ty * 4 + i, 4 * tx);
                __m512 v0 = _mm512_maskz_loadu_ps(in_mask(rw, 0), rw.p);
                __m512 v1 = _mm512_maskz_loadu_ps(in_mask(rw, 1), rw.p + 16);
                __m512 v2 = _mm512_maskz_loadu_ps(in_mask(rw, 2), rw.p + 32);
                __m512 v3 = _mm512_maskz_loadu_ps(in_mask(rw, 3), rw.p + 48);
                __m512i v4 = _mm512_castps_si512(_mm512_maskz_loadu_ps(in_mask(rw, 4), rw.p + 64));
                __m512 e01 = _mm512_permutex2var_ps(v0, ev, v1), o01 = _mm512_permutex2var_ps(v0, od, v1);
                __m512 e23 = _mm512_permutex2var_ps(v2, ev, v3), o23 = _mm512_permutex2var_ps(v2, od, v3);
                __m512 d[6];
                d[0] = _mm512_permutex2var_ps(e01, ev, e23);
                d[2] = _mm512_permutex2var_ps(e01, od, e23);
                d[1] = _mm512_permutex2var_ps(o01, ev, o23);
                d[3] = _mm512_permutex2var_ps(o01, od, o23);
                /* x[4l + 4], x[4l + 5]: one lane on, the last lane's from x[64], x[65] */
                d[4] = _mm512_castsi512_ps(_mm512_alignr_epi32(v4, _mm512_castps_si512(d[0]), 1));
                d[5] = _mm512_castsi512_ps(
                    _mm512_alignr_epi32(_mm512_alignr_epi32(v4, v4, 1), _mm512_castps_si512(d[1]), 1));
                bt6(d, h[i]);
            }
            __m512 o[36];
            _Pragma("GCC unroll 6") for (int q = 0; q < 6; q++) {
                __m512 a[6], r[6];
                _Pragma("GCC unroll 6") for (int i = 0; i < 6; i++) a[i] = h[i][q];
                bt6(a, r);
                _Pragma("GCC unroll 6") for (int p = 0; p < 6; p++) o[p * 6 + q] = r[p];
            }
            store_v(V, col, c, Cg, xs, m, o, 36);
        })
    }
}

/* Output transform of P[36][Mg][Tb] for tiles [t0, t1), output channels [m0, m1), with the
 * epilogue: A^T along each row of the 6x6 products, then along the columns; each output row of
 * 16 tiles (64 pixels) re-interleaved from its 4 column vectors. */
__attribute__((target("avx512f,avx512dq,fma"))) static void out_f43(const wino_job *j, int64_t t0, int64_t t1,
                                                                    const float *P, int64_t m0, int64_t m1)
{
    const kiln_window *g = j->g;
    const int64_t Mg = j->Mg, Tb = t1 - t0, Ho = g->out[0], Wo = g->out[1], xs = wino_stride(Mg * Tb);
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const __m512i lo64 = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), hi64 = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
    const bool act = j->e.act.kind != KILN_ACT_NONE;
    for (int64_t mo = m0; mo < m1; mo++) {
        float *ym = j->y + mo * g->out_sz;
        const __m512 vbias = _mm512_set1_ps(j->e.bias ? j->e.bias[mo] : 0.0f);
        const float *res = j->e.res ? j->e.res + mo * j->e.ldr : NULL;
        WINO_CHUNKS(j, t0, t1, {
            const float *p = P + mo * Tb + col;
            __m512 s[6][4]; /* s[i][q]: row i of the products, transformed along the row */
            _Pragma("GCC unroll 6") for (int i = 0; i < 6; i++) {
                __m512 a[6];
                _Pragma("GCC unroll 6") for (int q = 0; q < 6; q++) a[q] = _mm512_maskz_loadu_ps(m, p + (i * 6 + q) * xs);
                at6(a, s[i]);
            }
            __m512 yv[4][4]; /* yv[r][q]: output row r, column q of each tile */
            _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
                __m512 a[6], r[4];
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
                __m512 a0 = _mm512_permutex2var_ps(yv[r][0], lo, yv[r][1]), a1 = _mm512_permutex2var_ps(yv[r][0], hi, yv[r][1]);
                __m512 b0 = _mm512_permutex2var_ps(yv[r][2], lo, yv[r][3]), b1 = _mm512_permutex2var_ps(yv[r][2], hi, yv[r][3]);
                __m512 out[4];
                out[0] = _mm512_castpd_ps(_mm512_permutex2var_pd(_mm512_castps_pd(a0), lo64, _mm512_castps_pd(b0)));
                out[1] = _mm512_castpd_ps(_mm512_permutex2var_pd(_mm512_castps_pd(a0), hi64, _mm512_castps_pd(b0)));
                out[2] = _mm512_castpd_ps(_mm512_permutex2var_pd(_mm512_castps_pd(a1), lo64, _mm512_castps_pd(b1)));
                out[3] = _mm512_castpd_ps(_mm512_permutex2var_pd(_mm512_castps_pd(a1), hi64, _mm512_castps_pd(b1)));
                _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) {
                    int64_t n = ncol - 16 * v;
                    if (n <= 0)
                        break;
                    epi_store16(yr + 16 * v, rr ? rr + 16 * v : NULL, kiln_v_mask16(n), out[v], vbias, act, &j->e.act);
                }
            }
        })
    }
}
#undef WINO_CHUNKS

/* the lanes [r, 32) of channels [c0, c1) of the last panel of each of the np planes */
__attribute__((target("avx512f"))) static void zero_tail512(float *last, int64_t sv, int np, int64_t c0, int64_t c1,
                                                             int r)
{
    const __mmask16 m0 = (__mmask16)~row_mask(r, 0), m1 = (__mmask16)~row_mask(r, 1);
    const __m512 z = _mm512_setzero_ps();
    for (int q = 0; q < np; q++)
        for (int64_t c = c0; c < c1; c++) {
            _mm512_mask_storeu_ps(last + q * sv + c * 32, m0, z);
            _mm512_mask_storeu_ps(last + q * sv + c * 32 + 16, m1, z);
        }
}

void kiln__wino_zero_tail(float *V, int64_t sv, int np, int64_t Cg, int64_t c0, int64_t c1, int64_t Tb)
{
    int r = (int)(Tb % 32);
    if (!r)
        return;
    zero_tail512(V + (cdiv(Tb, 32) - 1) * Cg * 32, sv, np, c0, c1, r);
}

const wino_kind kiln__wino_f23 = {2, 16, KILN_PREP_WINO_F23, tw_f23, in_f23, out_f23, true};
const wino_kind kiln__wino_f43 = {4, 36, KILN_PREP_WINO_F43, tw_f43, in_f43, out_f43, true};
#endif
