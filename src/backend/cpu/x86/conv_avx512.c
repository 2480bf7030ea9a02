/* AVX-512 float32 Conv / FusedConv: the reference kernels (cpu/ref/k_conv.c) with AVX-512 depthwise rows, the AVX2
 * gathers (conv_avx2.c), AVX-512 implicit-im2col panels, and the whole-layer
 * strategies tried first: Winograd (conv_wino.c) and the direct convolution (conv_direct.c).
 * Registered over the AVX2 kernels for hosts with AVX-512F/DQ. */
#include "../cpu_kernels.h"
#include "conv_x86.h"

#if KILN_CONV_X86
#include <immintrin.h>

/* bits [lo, hi) of a 32-bit mask, lo and hi clamped to [0, 32] */
static inline uint32_t bits32(int64_t lo, int64_t hi)
{
    lo = lo < 0 ? 0 : lo > 32 ? 32 : lo;
    hi = hi < 0 ? 0 : hi > 32 ? 32 : hi;
    if (hi <= lo)
        return 0;
    uint32_t h = hi == 32 ? 0xFFFFFFFFu : (1u << hi) - 1u;
    return h & ~((1u << lo) - 1u);
}

/* The three taps kj = 0, 1, 2 of one row of a 3-wide, column-stride-2, undilated kernel into d,
 * d + 32 and d + 64: tap kj reads raw elements ix0 + kj + 2 i, so one set of loads (33 elements
 * per 16 columns) serves all three, evens, odds and evens + 2 picked by permutes. */
__attribute__((target("avx512f"))) static void taps3_s2(const float *row, int64_t W, int64_t ix0, int len,
                                                        float *d)
{
    enum { NR = 32 };
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    /* lane 15 of the evens + 2 is raw element 32, blended in from the 33rd element */
    const __m512i even2 = _mm512_setr_epi32(2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 0);
    for (int h = 0; h < 2 && h * 16 < len; h++) {
        const int64_t base = ix0 + 32 * h;
        const int cnt = len - 16 * h < 16 ? len - 16 * h : 16;
        const uint32_t m = bits32(-base, W - base) & bits32(0, 2 * cnt + 1);
        const __m512 a = _mm512_maskz_loadu_ps((__mmask16)m, row + base);
        const __m512 b = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), row + base + 16);
        const float last = cnt == 16 && base + 32 >= 0 && base + 32 < W ? row[base + 32] : 0.0f;
        const __mmask16 st = (__mmask16)bits32(0, cnt);
        float *dh = d + 16 * h;
        _mm512_mask_storeu_ps(dh, st, _mm512_permutex2var_ps(a, even, b));
        _mm512_mask_storeu_ps(dh + NR, st, _mm512_permutex2var_ps(a, odd, b));
        __m512 v2 = _mm512_mask_mov_ps(_mm512_permutex2var_ps(a, even2, b), (__mmask16)0x8000, _mm512_set1_ps(last));
        _mm512_mask_storeu_ps(dh + 2 * NR, st, v2);
    }
}

/* im2col_panel512 for a channel plane of at most 64 floats (a 7x7 or 8x8 map: ResNet-50's 3x3 512 @7): the
 * plane is held in four registers and each panel row is two two-source permutes of it. The index and the
 * in-bounds mask of every column are computed once per call for each tap (kh * kw <= 49) from the segments;
 * a row is then, per 16 columns, two permutes, a blend and a masked move, instead of one masked load and store
 * per segment (a 7x7 map puts 5 or 6 segments in a 32-column panel). False (nothing done) for larger planes. */
__attribute__((target("avx512f"))) static bool im2col_small512(const kiln_im2col *c, const kiln_im2col_seg *segs,
                                                               int ns, int width, int64_t k0, int64_t kc, float *d)
{
    enum { NR = 32, MAXT = 49 };
    const int64_t plane = c->H * c->W, ksz = c->kh * c->kw;
    if (plane > 64 || ksz > MAXT || kc <= 0)
        return false;
    int32_t yl[NR], xl[NR];
    for (int j = 0; j < NR; j++)
        yl[j] = xl[j] = -(1 << 20);   /* padding lanes: out of bounds for every tap */
    for (int s = 0; s < ns; s++)
        for (int i = 0; i < segs[s].len; i++) {
            yl[segs[s].lane + i] = (int32_t)segs[s].y0;
            xl[segs[s].lane + i] = (int32_t)(segs[s].x0 + i * c->sw);
        }
    (void)width;   /* the lanes past it are padding lanes */
    __m512i idx[MAXT][2];
    __mmask16 msk[MAXT][2];
    const __m512i vH = _mm512_set1_epi32((int32_t)c->H), vW = _mm512_set1_epi32((int32_t)c->W);
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t t = 0; t < ksz; t++) {
        const int32_t dy = (int32_t)((t / c->kw) * c->dh), dx = (int32_t)((t % c->kw) * c->dw);
        for (int h = 0; h < 2; h++) {
            __m512i iy = _mm512_add_epi32(_mm512_loadu_si512(yl + 16 * h), _mm512_set1_epi32(dy));
            __m512i ix = _mm512_add_epi32(_mm512_loadu_si512(xl + 16 * h), _mm512_set1_epi32(dx));
            __mmask16 m = _mm512_cmpge_epi32_mask(iy, zero) & _mm512_cmplt_epi32_mask(iy, vH) &
                          _mm512_cmpge_epi32_mask(ix, zero) & _mm512_cmplt_epi32_mask(ix, vW);
            idx[t][h] = _mm512_add_epi32(_mm512_mullo_epi32(iy, vW), ix);
            msk[t][h] = m;
        }
    }
    const __m512i bit5 = _mm512_set1_epi32(32);
    int64_t ch = k0 / ksz, t = k0 % ksz;
    __m512 p0, p1, p2, p3;
#define LOAD_PLANE()                                                                                        \
    do {                                                                                                    \
        const float *xc = c->x + ch * plane;                                                                \
        p0 = _mm512_maskz_loadu_ps((__mmask16)bits32(0, plane), xc);                                        \
        p1 = _mm512_maskz_loadu_ps((__mmask16)bits32(0, plane - 16), xc + 16);                              \
        p2 = _mm512_maskz_loadu_ps((__mmask16)bits32(0, plane - 32), xc + 32);                              \
        p3 = _mm512_maskz_loadu_ps((__mmask16)bits32(0, plane - 48), xc + 48);                              \
    } while (0)
    LOAD_PLANE();
    for (int64_t k = 0; k < kc; k++, d += NR) {
        for (int h = 0; h < 2; h++) {
            __m512 lo = _mm512_permutex2var_ps(p0, idx[t][h], p1), hi = _mm512_permutex2var_ps(p2, idx[t][h], p3);
            __m512 v = _mm512_mask_mov_ps(lo, _mm512_test_epi32_mask(idx[t][h], bit5), hi);
            _mm512_storeu_ps(d + 16 * h, _mm512_maskz_mov_ps(msk[t][h], v));
        }
        if (++t == ksz && k + 1 < kc) {
            t = 0;
            ch++;
            LOAD_PLANE();
        }
    }
#undef LOAD_PLANE
    return true;
}

/* One 16-lane chunk of a segment for taps3_rows: the raw input elements [x, x + 33) of its row read by two masked
 * loads (lm0 / lm1: inside the row) and, where last, the 33rd as a scalar; per target half t of the panel row
 * (on[t]) the panel lanes it fills (pm[t]) and, per tap kj, the raw element each of them takes (idx[kj][t]: 2 q + kj
 * for its segment lane q, 32 = the scalar: lastm[t]). */
typedef struct s2_chunk {
    int64_t x, y0;
    __mmask16 lm0, lm1, pm[2], lastm[2];
    bool last, on[2];
    __m512i idx[3][2];
} s2_chunk;

/* im2col_panel512's whole kernel rows of a 3-wide, column-stride-2, undilated kernel: each panel row is assembled
 * in two registers from every segment (permutes of the raw row loads straight into the segment's lanes, blended)
 * and stored whole, instead of three masked stores per segment and tap. The chunks (loads, lanes, permute
 * indices) are the same for every channel and kernel row of the panel, so they are set up once per call.
 * ResNet-50's three 3x3/2 convs in the model (bench/env_ab, 300 pairs, 2 threads): 1/1.27 of the per-segment
 * stores (taps3_s2), the model 1/1.027. Returns false (nothing done) where the segments exceed the chunk table. */
__attribute__((target("avx512f"))) static bool taps3_rows(const kiln_im2col *c, const kiln_im2col_seg *segs, int ns,
                                                          int64_t ch, int64_t ki, int64_t nk, float *d)
{
    enum { NR = 32, MAXC = 16 };
    s2_chunk ck[MAXC];
    int nc = 0;
    const int64_t W = c->W, H = c->H, plane = H * W;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int s = 0; s < ns; s++)
        for (int h = 0; h * 16 < segs[s].len; h++) {
            if (nc == MAXC)
                return false;
            s2_chunk *k = &ck[nc++];
            const int cnt = segs[s].len - 16 * h < 16 ? segs[s].len - 16 * h : 16;
            const int lane = segs[s].lane + 16 * h;   /* panel lane of segment lane 16 h */
            k->x = segs[s].x0 + 32 * h;
            k->y0 = segs[s].y0;
            const uint32_t m = bits32(-k->x, W - k->x) & bits32(0, 2 * cnt + 1);
            k->lm0 = (__mmask16)m;
            k->lm1 = (__mmask16)(m >> 16);
            k->last = cnt == 16 && k->x + 32 >= 0 && k->x + 32 < W;
            const uint32_t pm = bits32(lane, lane + cnt);
            for (int t = 0; t < 2; t++) {
                k->pm[t] = (__mmask16)(pm >> 16 * t);
                k->on[t] = k->pm[t] != 0;
                /* panel lane 16 t + i holds segment lane q = 16 t + i - lane: raw element 2 q + kj (the permutes
                 * read its low 5 bits; 32, the scalar, is blended in at q = 15) */
                const __m512i q2 = _mm512_slli_epi32(_mm512_add_epi32(iota, _mm512_set1_epi32(16 * t - lane)), 1);
                for (int kj = 0; kj < 3; kj++)
                    k->idx[kj][t] = _mm512_add_epi32(q2, _mm512_set1_epi32(kj));
                const int l15 = lane + 15 - 16 * t;   /* the half's lane of q = 15 */
                k->lastm[t] = (__mmask16)(cnt == 16 && l15 >= 0 && l15 < 16 ? 1u << l15 : 0u);
            }
        }
    /* the rows of the channel two ahead, prefetched into L1 (the channels are planes apart, which the hardware
     * prefetchers do not follow): in-model, the three 3x3/2 convs 1/1.114 without it; one channel ahead 1/1.015
     * of two, three or four 1.00-1.01 */
    const int64_t pfd = 2 * plane;
    for (int64_t r = 0; r < nk; r++, d += 3 * NR) {
        const float *xc = c->x + ch * plane;
        /* the panel row's three taps, two halves each, kept in registers (an array indexed by the half went
         * through the stack: masked stores, then full reloads that the store forwarding cannot serve) */
        __m512 p00 = _mm512_setzero_ps(), p01 = p00, p10 = p00, p11 = p00, p20 = p00, p21 = p00;
        for (int i = 0; i < nc; i++) {
            const s2_chunk *k = &ck[i];
            const int64_t iy = k->y0 + ki * c->dh;
            if (iy < 0 || iy >= H)
                continue;
            const float *row = xc + iy * W + k->x;
            _mm_prefetch((const char *)(row + pfd), _MM_HINT_T0);
            _mm_prefetch((const char *)(row + pfd + 16), _MM_HINT_T0);
            const __m512 a = _mm512_maskz_loadu_ps(k->lm0, row), b = _mm512_maskz_loadu_ps(k->lm1, row + 16);
            const __m512 l = _mm512_set1_ps(k->last ? row[32] : 0.0f);
#define S2_HALF(t, q0, q1, q2)                                                                                    \
    if (k->on[t]) {                                                                                               \
        q0 = _mm512_mask_mov_ps(q0, k->pm[t], _mm512_permutex2var_ps(a, k->idx[0][t], b));                       \
        q1 = _mm512_mask_mov_ps(q1, k->pm[t], _mm512_permutex2var_ps(a, k->idx[1][t], b));                       \
        q2 = _mm512_mask_mov_ps(q2, k->pm[t],                                                                     \
                                _mm512_mask_mov_ps(_mm512_permutex2var_ps(a, k->idx[2][t], b), k->lastm[t], l)); \
    }
            S2_HALF(0, p00, p10, p20)
            S2_HALF(1, p01, p11, p21)
#undef S2_HALF
        }
        _mm512_storeu_ps(d, p00);
        _mm512_storeu_ps(d + 16, p01);
        _mm512_storeu_ps(d + NR, p10);
        _mm512_storeu_ps(d + NR + 16, p11);
        _mm512_storeu_ps(d + 2 * NR, p20);
        _mm512_storeu_ps(d + 2 * NR + 16, p21);
        if (++ki == c->kh) {
            ki = 0;
            ch++;
        }
    }
    return true;
}

/* kiln_conv_isa.im2col_panel32: rows [k0, k0 + kc) of one 32-column panel, column strides 1
 * and 2, with masked loads (nothing outside the input row is read) and stores. */
__attribute__((target("avx512f"))) static void im2col_panel512(const kiln_im2col *c, const kiln_im2col_seg *segs,
                                                               int ns, int width, int64_t k0, int64_t kc, float *d)
{
    enum { NR = 32 };
    const int64_t ksz = c->kh * c->kw, plane = c->H * c->W, W = c->W, sw = c->sw;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    if (im2col_small512(c, segs, ns, width, k0, kc, d))
        return;
    const bool row3 = sw == 2 && c->kw == 3 && c->dw == 1;
    int64_t ch = k0 / ksz, kk = k0 % ksz, ki = kk / c->kw, kj = kk % c->kw;
    const __mmask16 pad_lo = (__mmask16)~bits32(0, width), pad_hi = (__mmask16)(~bits32(0, width) >> 16);
    for (int64_t k = 0; k < kc;) {
        if (row3 && kj == 0 && k + 3 <= kc) {
            const int64_t nk = (kc - k) / 3;
            if (taps3_rows(c, segs, ns, ch, ki, nk, d)) {
                k += 3 * nk;
                d += 3 * nk * NR;
                ki += nk;
                ch += ki / c->kh;
                ki %= c->kh;
                continue;
            }
        }
        const float *xc = c->x + ch * plane;
        const int64_t dy = ki * c->dh, dx = kj * c->dw;
        /* a whole kernel row in this slice: its three taps at once */
        const int nrows = row3 && kj == 0 && k + 3 <= kc ? 3 : 1;
        for (int s = 0; s < ns; s++) {
            const kiln_im2col_seg *sg = &segs[s];
            float *ds = d + sg->lane;
            const int len = sg->len;
            const __mmask16 st0 = (__mmask16)bits32(0, len), st1 = (__mmask16)(bits32(0, len) >> 16);
            const int64_t iy = sg->y0 + dy, ix0 = sg->x0 + dx;
            const bool inside = iy >= 0 && iy < c->H;
            if (nrows == 3 && inside) {
                taps3_s2(xc + iy * W, W, ix0, len, ds);
                continue;
            }
            __m512 v0 = _mm512_setzero_ps(), v1 = v0;
            if (inside) {
                const float *row = xc + iy * W;
                if (sw == 1) {
                    uint32_t m = ix0 >= 0 && ix0 + len <= W ? bits32(0, len) : bits32(-ix0, W - ix0) & bits32(0, len);
                    v0 = _mm512_maskz_loadu_ps((__mmask16)m, row + ix0);
                    if (len > 16)
                        v1 = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), row + ix0 + 16);
                } else {
                    /* stride 2: raw elements ix0 .. ix0 + 2 len - 1, evens picked by permutes */
                    for (int h = 0; h < 2 && h * 16 < len; h++) {
                        int64_t base = ix0 + 32 * h;
                        int cnt = len - 16 * h < 16 ? len - 16 * h : 16;
                        uint32_t m = bits32(-base, W - base) & bits32(0, 2 * cnt - 1);
                        __m512 a = _mm512_maskz_loadu_ps((__mmask16)m, row + base);
                        __m512 b = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), row + base + 16);
                        __m512 v = _mm512_permutex2var_ps(a, even, b);
                        if (h == 0)
                            v0 = v;
                        else
                            v1 = v;
                    }
                }
            }
            for (int r = 0; r < nrows; r++) {
                _mm512_mask_storeu_ps(ds + r * NR, st0, v0);
                if (len > 16)
                    _mm512_mask_storeu_ps(ds + r * NR + 16, st1, v1);
            }
        }
        for (int r = 0; r < nrows; r++, k++, d += NR) {
            if (width < NR) {
                _mm512_mask_storeu_ps(d, pad_lo, _mm512_setzero_ps());
                _mm512_mask_storeu_ps(d + 16, pad_hi, _mm512_setzero_ps());
            }
            if (++kj == c->kw) {
                kj = 0;
                if (++ki == c->kh) {
                    ki = 0;
                    ch++;
                }
            }
        }
    }
}

/* kiln_conv_isa.dw_row: one depthwise output row from the padded band rows at rb (tap (0, 0) of output 0), strides
 * 1 and 2 -- the AVX2 rows' arithmetic (each output: the bias, then its taps in order by FMA) on 16 outputs a vector,
 * so the same bits. Stride 1 reads whole vectors past the row's end into the band's slack (kiln__conv_dw_plan: Wp
 * holds the outputs rounded up to 8 plus 16 floats); stride 2's last vectors are masked. In one process against the
 * AVX2 rows (bench/env_ab, 2 threads, 60 pairs): PP-OCRv4 rec fp32 / int8 1/1.061 / 1/1.053, det 1/1.014 / 1/1.035
 * (its INT8 depthwise layers run these rows too: x86/qdw_f32.c), cls 1/1.018 / 1/1.043. */
__attribute__((target("avx512f"))) void kiln__conv_dw_row_avx512(const kiln_conv2d *p, const float *rb,
                                                                 const float *wk, float bias, float *yr)
{
    const int64_t kh = p->kh, kw = p->kw, dw = p->dw, rs = p->dh * p->Wp, Wo = p->Wo;
    int64_t ox = 0;
    if (p->sw == 1) {
        for (; ox + 64 <= Wo; ox += 64) {
            __m512 a0 = _mm512_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t ki = 0; ki < kh; ki++) {
                const float *xr = rb + ki * rs + ox, *wr = wk + ki * kw;
                for (int64_t kj = 0; kj < kw; kj++) {
                    const float *q = xr + kj * dw;
                    __m512 wv = _mm512_set1_ps(wr[kj]);
                    a0 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(q), a0);
                    a1 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(q + 16), a1);
                    a2 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(q + 32), a2);
                    a3 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(q + 48), a3);
                }
            }
            _mm512_storeu_ps(yr + ox, a0);
            _mm512_storeu_ps(yr + ox + 16, a1);
            _mm512_storeu_ps(yr + ox + 32, a2);
            _mm512_storeu_ps(yr + ox + 48, a3);
        }
        for (; ox < Wo; ox += 16) {
            __m512 a0 = _mm512_set1_ps(bias);
            for (int64_t ki = 0; ki < kh; ki++) {
                const float *xr = rb + ki * rs + ox, *wr = wk + ki * kw;
                for (int64_t kj = 0; kj < kw; kj++)
                    a0 = _mm512_fmadd_ps(_mm512_set1_ps(wr[kj]), _mm512_loadu_ps(xr + kj * dw), a0);
            }
            _mm512_mask_storeu_ps(yr + ox, Wo - ox >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (Wo - ox)) - 1), a0);
        }
    } else {
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        for (; ox + 32 <= Wo; ox += 32) {
            __m512 a0 = _mm512_set1_ps(bias), a1 = a0;
            for (int64_t ki = 0; ki < kh; ki++) {
                const float *xr = rb + ki * rs + 2 * ox, *wr = wk + ki * kw;
                for (int64_t kj = 0; kj < kw; kj++) {
                    const float *q = xr + kj * dw;
                    __m512 wv = _mm512_set1_ps(wr[kj]);
                    a0 = _mm512_fmadd_ps(wv, _mm512_permutex2var_ps(_mm512_loadu_ps(q), even, _mm512_loadu_ps(q + 16)), a0);
                    a1 = _mm512_fmadd_ps(wv, _mm512_permutex2var_ps(_mm512_loadu_ps(q + 32), even, _mm512_loadu_ps(q + 48)),
                                         a1);
                }
            }
            _mm512_storeu_ps(yr + ox, a0);
            _mm512_storeu_ps(yr + ox + 16, a1);
        }
        for (; ox < Wo; ox += 16) {
            const int64_t rem = Wo - ox < 16 ? Wo - ox : 16, cnt = 2 * rem - 1;   /* raw elements read: 0 .. cnt - 1 */
            const __mmask16 ma = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1),
                            mb = cnt > 16 ? (__mmask16)((1u << (cnt - 16)) - 1) : (__mmask16)0;
            __m512 a0 = _mm512_set1_ps(bias);
            for (int64_t ki = 0; ki < kh; ki++) {
                const float *xr = rb + ki * rs + 2 * ox, *wr = wk + ki * kw;
                for (int64_t kj = 0; kj < kw; kj++) {
                    const float *q = xr + kj * dw;
                    __m512 v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(ma, q), even, _mm512_maskz_loadu_ps(mb, q + 16));
                    a0 = _mm512_fmadd_ps(_mm512_set1_ps(wr[kj]), v, a0);
                }
            }
            _mm512_mask_storeu_ps(yr + ox, rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1), a0);
        }
    }
}

/* kiln_conv_isa.layer: Winograd where it applies or its filters were prepared, else the direct
 * convolution where it pays. */
static kiln_status layer512(const kiln_kctx *ctx, const kiln_window *g, const float *x, const float *w,
                            const float *b, float *y, const kiln_epi *post, bool *done)
{
    KILN_TRY(kiln__conv_wino_layer(ctx, &kiln__wino_set_avx512, g, x, w, b, y, post, done));
    if (*done)
        return KILN_OK;
    return kiln__conv_direct_layer(ctx, g, x, w, b, y, post, done);
}

static const kiln_conv_isa isa_avx512 = {.dw_row = kiln__conv_dw_row_avx512,
                                         .gather2 = kiln__conv_gather2_avx2,
                                         .im2col_panel32 = im2col_panel512,
                                         .layer = layer512};

static kiln_status k_conv_avx512(kiln_kctx *ctx) { return kiln__conv(ctx, &isa_avx512, k_conv_avx512); }
static kiln_status k_fused_conv_avx512(kiln_kctx *ctx)
{
    return kiln__fused_conv(ctx, &isa_avx512, k_fused_conv_avx512);
}

const kiln_kernel_isa_reg kiln__x86_conv_avx512[] = {
    {KILN_OP_Conv, k_conv_avx512, KILN_CONV_AVX512_ISA, "Conv/avx512"},
    {KILN_OP_FusedConv, k_fused_conv_avx512, KILN_CONV_AVX512_ISA, "FusedConv/avx512"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
const kiln_kernel_isa_reg kiln__x86_conv_avx512[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif
