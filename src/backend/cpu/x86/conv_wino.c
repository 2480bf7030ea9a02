/* Winograd convolution of 3x3 stride-1 float32 layers for the AVX-512 and AVX2 Conv kernels
 * (conv_avx512.c, conv_avx2.c): the driver (tiles in blocks or phases, np GEMMs per block on the
 * GEMM's packed panels), its choice per layer, and the build-time transform of the filters (the
 * prepare functions registered over the reference's). Transforms: wino_avx512.c, wino_avx2.c
 * (wino.h); a kiln_wino_set (conv_x86.h) names one ISA's pair. */
#include "../gemm.h"
#include "../prep.h"
#include "../scratch.h"
#include "conv_x86.h"
#include "wino.h"

#if KILN_CONV_X86
/* Zero-padded copy [Cg][Hp][Wq] of channels [c0, c1) (P == 1): padded row r holds input row
 * r - ph, padded column u input column u - pw. */
static void wino_fill_task(void *vctx, int64_t c0, int64_t c1)
{
    const kiln_convd_geom *q = vctx;
    const kiln_conv2d *p = &q->p;
    for (int64_t ch = c0; ch < c1; ch++) {
        float *d = q->xp + ch * q->Hp * q->Wq;
        for (int64_t r = 0; r < q->Hp; r++, d += q->Wq) {
            int64_t iy = r - p->ph;
            if (iy < 0 || iy >= p->H) {
                memset(d, 0, sizeof(float) * (size_t)q->Wq);
                continue;
            }
            kiln__conv_pad_row(d, q->Wq, q->x + (ch * p->H + iy) * p->W, p->W, p->pw);
        }
    }
}

/* ---- Winograd for 3x3 stride-1 convolutions (wino.h: F(2x2, 3x3) and F(4x4, 3x3)) ----
 *
 * The np element-wise products of a variant, summed over channels, are np GEMMs
 * U[xi] (M x C) x V[xi] (C x tiles). The weights are transformed at build time (prep_conv) or
 * once per call by one GEMM (U = Tw x W^T, Tw = G (x) G, np x 9); the input is copied into a
 * zero-padded buffer; then blocks of tile rows are processed independently (one per task):
 * input transform into V (np x C x tiles, L2-sized), np GEMMs into P (np x M x tiles), output
 * transform with the epilogue. The transforms work on 16 tiles at a time with AVX-512.
 * F(4x4, 3x3) does 4/9 of F(2x2)'s multiplies per output and moves less data through V and P,
 * but its filters are 36/16 the size: it is taken where the filters are small (few channel
 * pairs), i.e. in a CNN's early, large-image layers; F(2x2) for the wider ones. */
#define WINO43_MAX_PAIRS ((int64_t)1 << 14)
/* the most channel pairs whose filters are transformed at build time (see prep_wino) */
#define WINO_PREP_MAX_PAIRS ((int64_t)1 << 16)

/* kiln__wino_zero_tail (channels [c0, c1)) for panels of nr tiles (the AVX-512 one for 32) */
static void wino_zero_tail(float *V, int64_t sv, int np, int64_t Cg, int64_t c0, int64_t c1, int64_t Tb, int nr)
{
    if (nr == 32) {
        kiln__wino_zero_tail(V, sv, np, Cg, c0, c1, Tb);
        return;
    }
    int64_t r = Tb % nr;
    if (!r)
        return;
    float *last = V + (cdiv(Tb, nr) - 1) * Cg * nr;
    for (int q = 0; q < np; q++)
        for (int64_t c = c0; c < c1; c++)
            memset(last + q * sv + c * nr + r, 0, sizeof(float) * (size_t)(nr - r));
}

static void wino_task(void *vctx, int64_t b0, int64_t b1)
{
    wino_job *j = vctx;
    const int64_t Cg = j->Cg, Mg = j->Mg, T = j->tH * j->tW, NP = j->k->np;
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t t0 = blk * j->R, t1 = t0 + j->R < T ? t0 + j->R : T, Tb = t1 - t0;
        const int64_t np = cdiv(Tb, j->nr), sv = wino_stride(np * j->nr * Cg), sp = wino_stride(Mg * Tb);
        float *V = kiln__scratch(KILN_SCRATCH_WINO, sizeof(float) * (size_t)(NP * (sv + sp) + 64));
        if (!V) {
            j->failed = true;
            return;
        }
        float *P = V + NP * sv;
        wino_zero_tail(V, sv, (int)NP, Cg, 0, Cg, Tb, j->nr); /* the last panel's unused lanes: keep them finite */
        j->k->in(j, t0, t1, V, 0, Cg);
        for (int64_t q = 0; q < NP; q++) {
            const float *Uq = j->U + q * j->uq;
            kiln_gemm gm = {.M = Mg, .N = Tb, .K = Cg, .alpha = 1.0f, .beta = 0.0f, .A = Uq, .lda = Cg,
                            .apack = j->upk ? Uq : NULL, .apack_next = j->upk && q + 1 < NP ? Uq + j->uq : NULL,
                            .bpack = V + q * sv, .C = P + q * sp, .ldc = Tb};
            kiln__sgemm_ex(NULL, 1, &gm);
        }
        j->k->out(j, t0, t1, P, 0, Mg);
    }
}

/* Few tiles (one block): the phases run one after the other, each split over the threads
 * (channels for the input transform, the np products for the GEMMs, output channels last). */
typedef struct wino_phase {
    wino_job *j;
    float *V, *P;
    int64_t sv, sp, T;
} wino_phase;

/* channels [c0, c1): the last panel's unused lanes zeroed (as wino_task does for its block), then the
 * input transform; the zeroing ran on the calling thread alone before (~25 us a layer at 3x3 256 @14) */
static void wino_ph_in(void *vctx, int64_t c0, int64_t c1)
{
    const wino_phase *w = vctx;
    const wino_job *j = w->j;
    wino_zero_tail(w->V, w->sv, (int)j->k->np, j->Cg, c0, c1, w->T, j->nr);
    j->k->in(w->j, 0, w->T, w->V, c0, c1);
}

static void wino_ph_gemm(void *vctx, int64_t q0, int64_t q1)
{
    const wino_phase *w = vctx;
    const wino_job *j = w->j;
    for (int64_t q = q0; q < q1; q++) {
        const float *Uq = j->U + q * j->uq;
        kiln_gemm gm = {.M = j->Mg, .N = w->T, .K = j->Cg, .alpha = 1.0f, .beta = 0.0f, .A = Uq, .lda = j->Cg,
                        .apack = j->upk ? Uq : NULL, .apack_next = j->upk && q + 1 < q1 ? Uq + j->uq : NULL,
                        .bpack = w->V + q * w->sv, .C = w->P + q * w->sp, .ldc = w->T};
        kiln__sgemm_ex(NULL, 1, &gm);
    }
}

static void wino_ph_out(void *vctx, int64_t m0, int64_t m1)
{
    const wino_phase *w = vctx;
    w->j->k->out(w->j, 0, w->T, w->P, m0, m1);
}

/* Whether the Winograd path of set s can run this layer: 2-D 3x3, stride and dilation 1, pads
 * <= 2, enough channels, the host's GEMM panels fit the set's transforms (everything but the tile
 * count); the build-time prepare function asks it too. */
static bool wino_geom(const kiln_wino_set *s, const kiln_window *g, int64_t Cg, int64_t Mg)
{
    int nr = kiln__sgemm_nr();
    if (!kiln__cpu_has(s->isa) || !(nr == 32 || (nr == 16 && s->nr16)) || g->nsp != 2 || g->k[0] != 3 ||
        g->k[1] != 3)
        return false;
    for (int i = 0; i < 2; i++)
        if (g->s[i] != 1 || g->d[i] != 1 || g->pb[i] > 2 || g->pe[i] > 2)
            return false;
    return Cg >= 16 && Mg >= 16 && Cg * Mg <= ((int64_t)1 << 22);
}

/* Winograd pays when there are enough tiles to amortize the weight transform (16 M C floats
 * written per call): roughly 100 tiles and more. With the filters transformed at build time
 * there is no transform to amortize and it is taken for every tile count. */
static bool wino_pays(const kiln_wino_set *s, const kiln_window *g, int64_t Cg, int64_t Mg)
{
    int64_t tiles = cdiv(g->out[0], 2) * cdiv(g->out[1], 2);
#ifndef WINO_MIN_TILES
#define WINO_MIN_TILES 40
#endif
    return wino_geom(s, g, Cg, Mg) && tiles >= WINO_MIN_TILES;
}

/* The variant of set s for a layer's prepared filters: F(4x4) for small filters. */
static const wino_kind *wino_kind_for(const kiln_wino_set *s, int64_t Cg, int64_t Mg)
{
    return Cg * Mg <= s->f43_max_pairs ? s->f43 : s->f23;
}

/* Whether set s's filters prepared on this host are the GEMM's packed A (kiln__sgemm_apack: the
 * AVX2 GEMM family), [G][np][ceil(Mg/mr)*mr*Cg], instead of [G][np][Mg][Cg]. */
static bool wino_upacked(const kiln_wino_set *s) { return s->upack && kiln__sgemm_apack_mr() > 0; }

/* Floats of one product's filters U[xi] of a group (packed: as the GEMM's A panels). */
static int64_t wino_uq(int64_t Mg, int64_t Cg, bool packed)
{
    return packed ? kiln__sgemm_apack_floats(Mg, Cg) : Mg * Cg;
}

/* Floats of the transformed filters U of all groups: [G][np][uq]. */
static int64_t wino_u_floats(const kiln_window *g, const wino_kind *k, bool packed)
{
    return k->np * wino_uq(g->M / g->G, g->C / g->G, packed) * g->G;
}

/* The layer's build-time transformed filters of variant k, when ctx->prepared holds them. */
static const float *wino_prepared(const kiln_kctx *ctx, const kiln_window *g, const wino_kind *k, bool packed)
{
    int64_t dims[3] = {g->M, g->C / g->G, g->G};
    return kiln__prep_check(ctx, k->layout, KILN_DT_FLOAT32, 3, dims,
                            (uint64_t)wino_u_floats(g, k, packed) * sizeof(float));
}

/* U[np][Mg*Cg] = Tw[np x 9] x W^T for one group's filters W [Mg*Cg][9] (tw: np x 9 scratch). */
static void wino_transform(kiln_pool *pool, int nt, const wino_kind *k, const float *w, int64_t Mg, int64_t Cg,
                           float *tw, float *U)
{
    k->tw(tw);
    kiln_gemm gw = {.M = k->np, .N = Mg * Cg, .K = 9, .alpha = 1.0f, .beta = 0.0f, .trans_b = true, .A = tw,
                    .lda = 9, .B = w, .ldb = 9, .C = U, .ldc = Mg * Cg};
    kiln__sgemm_ex(pool, nt, &gw);
}

/* The most tiles one of nt threads gets when blocks of r tiles (the last one shorter) are taken
 * in order by whichever thread has done the least so far (the pool's dynamic chunks). */
static int64_t wino_makespan(int64_t T, int nt, int64_t r)
{
    int64_t load[64] = {0};
    nt = nt > 64 ? 64 : nt;
    for (int64_t t0 = 0; t0 < T; t0 += r) {
        int lo = 0;
        for (int i = 1; i < nt; i++)
            lo = load[i] < load[lo] ? i : lo;
        load[lo] += T - t0 < r ? T - t0 : r;
    }
    int64_t mx = 0;
    for (int i = 0; i < nt; i++)
        mx = load[i] > mx ? load[i] : mx;
    return mx;
}

/* Tiles per block: r, or a smaller multiple of 32 where the threads' shares of the blocks come out
 * more even. ResNet-50's 64-channel 56x56 layers (196 tiles of F(4x4), r = 64): blocks of 64, 64,
 * 64 and 4 tiles give two threads 128 and 68; blocks of 32 give them 100 and 96 (the smaller
 * blocks cost ~1% on one thread). */
static int64_t wino_balance(int64_t T, int nt, int64_t r)
{
    if (nt < 2)
        return r;
    int64_t best = r, span = wino_makespan(T, nt, r);
    for (int64_t c = r - 32; c >= 32; c -= 32) {
        int64_t s = wino_makespan(T, nt, c);
        if (s * 20 < span * 19) {   /* at least 5% fewer tiles on the busiest thread */
            best = c;
            span = s;
        }
    }
    return best;
}

/* Up: the filters of variant k transformed at build time ([G][np][Mg][Cg]), or NULL:
 * transformed from w here. */
static kiln_status conv_wino(const kiln_kctx *ctx, const kiln_window *g, const wino_kind *k, const float *x,
                             const float *w, const float *Up, bool upk, const float *b, float *y, const kiln_epi *post)
{
    int nt = ctx->nthreads;
    const int64_t NP = k->np, tm = k->m;
    int64_t Cg = g->C / g->G, Mg = g->M / g->G, Ho = g->out[0], Wo = g->out[1];
    wino_job j = {.g = g, .k = k, .Cg = Cg, .Mg = Mg, .tH = cdiv(Ho, tm), .tW = cdiv(Wo, tm), .nr = kiln__sgemm_nr(),
                  .upk = Up && upk};
    j.uq = wino_uq(Mg, Cg, j.upk);
    j.Hp = tm * j.tH + 2;
    j.Wp = tm * j.tW + 2;
    /* tiles per block (R): a multiple of 32 (the GEMM panels), V and P within ~1.5 MB, and
     * several blocks per thread where the tiles allow */
    int64_t T = j.tH * j.tW, rmax = 393216 / (16 * (Cg + Mg)) * 16 / NP / 32 * 32;
    if (rmax < 32)
        rmax = 32;
    j.R = cdiv(cdiv(T, 3 * nt), 32) * 32;
    if (j.R < 64)
        j.R = 64;
    if (j.R > rmax)
        j.R = rmax;
    /* too few blocks for the threads and V, P for all tiles within ~3 MB (L3): phased instead
     * (measured on 256 x 256 channels at 14x14: 0.58-0.60 ms against 0.68-0.70 in two blocks) */
    bool phased = nt > 1 && cdiv(T, j.R) < 2 * nt && T <= 2 * rmax;
    if (!phased)
        j.R = wino_balance(T, nt, j.R);
    int64_t svp = phased ? wino_stride(cdiv(T, j.nr) * j.nr * Cg) : 0, spp = phased ? wino_stride(Mg * T) : 0;
    /* the AVX-512 transforms read the input in place (wino_kind.direct_in), the padding as masked-off lanes and zero
     * rows: no padded copy. ResNet-50's 11 Winograd layers spent ~0.5 ms an inference in the copy (wino_fill_task's
     * parallel loops, 2 threads); without it those layers take 0.96-0.97 of their time (bench/env_ab, 300 pairs) */
    const bool direct = k->direct_in;
    size_t nU = Up ? 0 : (size_t)(NP * Mg * Cg), nX = direct ? 0 : (size_t)(Cg * j.Hp * j.Wp + WINO_XP_SLACK),
           nV = (size_t)(NP * (svp + spp));
    nU = (nU + 15) / 16 * 16;
    nX = (nX + 15) / 16 * 16;
    float *buf = kiln__scratch(KILN_SCRATCH_CONV, sizeof(float) * (nU + nX + nV + (size_t)NP * 9 + 64));
    if (!buf)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (Winograd buffers)");
    float *U = buf, *xp = buf + nU, *Vph = xp + nX, *tw = Vph + nV;
    j.xp = direct ? NULL : xp;
    if (!direct)
        memset(xp + Cg * j.Hp * j.Wp, 0, sizeof(float) * WINO_XP_SLACK);
    kiln_convd_geom q = {.Cg = Cg, .P = 1, .Hp = j.Hp, .Wq = j.Wp, .xp = xp};
    kiln__conv2d_view(g, &q.p);
    j.H = q.p.H;
    j.W = q.p.W;
    j.ph = q.p.ph;
    j.pw = q.p.pw;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            /* U[np][Mg*Cg] = Tw[np x 9] x W^T, W viewed as [Mg*Cg][9] (or transformed at build time) */
            if (Up)
                j.U = Up + gi * NP * j.uq;
            else if (n == 0 || g->G > 1)
                wino_transform(ctx->pool, nt, k, w + gi * Mg * Cg * 9, Mg, Cg, tw, U);
            if (!Up)
                j.U = U;
            /* zero-padded input [Cg][Hp][Wp]: padded row r = input row r - ph, column u = u - pw */
            q.x = x + (n * g->C + gi * Cg) * g->in_sz;
            if (direct)
                j.x = q.x;
            else
                kiln__parallel_for(ctx->pool, nt, Cg, 1, wino_fill_task, &q);
            j.row0 = n * g->M + gi * Mg;
            j.y = y + j.row0 * g->out_sz;
            j.e = kiln__conv_epi(g, b, post, gi, j.row0);
            j.failed = false;
            if (phased) {
                wino_phase ph = {.j = &j, .V = Vph, .P = Vph + NP * svp, .sv = svp, .sp = spp, .T = T};
                kiln__parallel_for(ctx->pool, nt, Cg, 1 + 64 / cdiv(T, 16), wino_ph_in, &ph);
                kiln__parallel_for(ctx->pool, nt, NP, 1, wino_ph_gemm, &ph);
                kiln__parallel_for(ctx->pool, nt, Mg, 1 + 64 / cdiv(T, 16), wino_ph_out, &ph);
            } else {
                kiln__parallel_for(ctx->pool, nt, cdiv(j.tH * j.tW, j.R), 1, wino_task, &j);
            }
            if (j.failed)
                return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (Winograd block buffers)");
        }
    return KILN_OK;
}

kiln_status kiln__conv_wino_layer(const kiln_kctx *ctx, const kiln_wino_set *s, const kiln_window *g,
                                  const float *x, const float *w, const float *b, float *y, const kiln_epi *post,
                                  bool *done)
{
    int64_t Cg = g->C / g->G, Mg = g->M / g->G;
    *done = false;
    if (!wino_geom(s, g, Cg, Mg))
        return KILN_OK;
    /* the prepared filters' variant; unprepared layers (transformed per call) F(2x2) */
    const bool upk = wino_upacked(s);
    const float *u43 = wino_prepared(ctx, g, s->f43, upk), *u23 = u43 ? NULL : wino_prepared(ctx, g, s->f23, upk);
    const float *Up = u43 ? u43 : u23;
    if (!Up && !(w && wino_pays(s, g, Cg, Mg)))
        return KILN_OK;
    *done = true;
    return conv_wino(ctx, g, u43 ? s->f43 : s->f23, x, w, Up, upk, b, y, post);
}

const kiln_wino_set kiln__wino_set_avx512 = {&kiln__wino_f23, &kiln__wino_f43, KILN_CONV_AVX512_ISA, false, false,
                                             WINO43_MAX_PAIRS, WINO_PREP_MAX_PAIRS};
/* AVX2: F(4x4) up to 2^16 pairs (256 x 256 channels at 14x14: 0.87x F(2x2)'s time, best of 10
 * alternated runs), F(2x2) prepared up to 2^18 (512 x 512 at 7x7: 0.83x im2col's time, filters
 * stored as the GEMM's packed A; before that packing it took 1.4x) */
const kiln_wino_set kiln__wino_set_avx2 = {&kiln__wino_f23_avx2, &kiln__wino_f43_avx2, KILN_CPU_AVX2_FMA, true, true,
                                           WINO_PREP_MAX_PAIRS, (int64_t)1 << 18};

/* Build time: Winograd-transformed filters for layers whose attributes and weights take the
 * Winograd path (every tile count, once prepared), so the runtime never transforms them. Not for
 * filters whose transform exceeds 4 MiB (Cg * Mg > 2^16): with few tiles (a 7x7 image) Winograd
 * is then bound by reading U from memory and im2col wins (measured: 512 x 512 channels at 7x7,
 * 3.0 ms against 2.3 ms), so those keep the unprepared choice. The other float32 paths read the
 * weights as they are (the AVX-512 GEMM reads row-major A in place): no prepared copy, and the
 * reference's prepare function (cpu/ref/k_conv.c: BF16 weights) runs instead. Registered over it
 * for hosts that run this kernel (prep.c). */
static kiln_status prep_wino(const kiln_wino_set *s, const kiln_node *n, int n_in, const kiln_tensor *const *consts,
                             void **blob, size_t *size)
{
    *blob = NULL;
    *size = 0;
    const kiln_tensor *w = consts && n_in > 1 ? consts[1] : NULL;
    kiln_kernel_prep_fn ref = kiln__cpu_ref_prep_fn(n->op);
    if (!w || !w->data || w->dtype != KILN_DT_FLOAT32 || w->ndim != 4)
        return ref ? ref(n, n_in, consts, blob, size) : KILN_OK;
    const kiln_kctx c = {.node = n};
    kiln_window g = {.nsp = 2, .M = w->dims[0], .G = kiln__attr_i(n, "group", 1), .k = {w->dims[2], w->dims[3]}};
    int64_t pads[4];
    int ap;
    bool bad = g.G < 1 || g.G > LIM || g.M % g.G || w->dims[1] < 1 || w->dims[1] > LIM;
    bad = bad || kiln__win_ints(&c, "strides", 2, 1, 1, g.s, NULL) != KILN_OK;
    bad = bad || kiln__win_ints(&c, "dilations", 2, 1, 1, g.d, NULL) != KILN_OK;
    bad = bad || kiln__win_ints(&c, "pads", 4, 0, 0, pads, NULL) != KILN_OK || kiln__win_auto_pad(&c, &ap) != KILN_OK;
    if (bad) {
        kiln_clear_last_error();   /* the kernel reports bad attributes when it runs */
        return KILN_OK;
    }
    g.C = w->dims[1] * g.G;
    for (int i = 0; i < 2; i++) {   /* 3x3 stride 1: SAME pads 1 + 1, VALID 0 */
        g.pb[i] = ap == AP_NOTSET ? pads[i] : ap == AP_VALID ? 0 : 1;
        g.pe[i] = ap == AP_NOTSET ? pads[2 + i] : ap == AP_VALID ? 0 : 1;
    }
    int64_t Cg = g.C / g.G, Mg = g.M / g.G;
    if (!wino_geom(s, &g, Cg, Mg) || Cg * Mg > s->prep_max_pairs)
        return KILN_OK;
    const wino_kind *k = wino_kind_for(s, Cg, Mg);
    const bool upk = wino_upacked(s);
    const int64_t uq = wino_uq(Mg, Cg, upk);
    int64_t dims[3] = {g.M, Cg, g.G};
    float *U = kiln__prep_alloc(k->layout, 1u << 1, KILN_DT_FLOAT32, 3, dims,
                                (uint64_t)wino_u_floats(&g, k, upk) * sizeof(float), blob, size);
    float *plain = upk ? kiln__malloc(sizeof(float) * (size_t)(k->np * Mg * Cg)) : NULL;
    if (!U || (upk && !plain)) {
        kiln__free(plain);
        kiln__free(*blob);
        *blob = NULL;
        *size = 0;
        return kiln__err(KILN_ERR_NOMEM, "out of memory preparing Winograd filters of node '%s'", n->name);
    }
    float tw[36 * 9];
    for (int64_t gi = 0; gi < g.G; gi++) {
        float *Ug = U + gi * k->np * uq;
        wino_transform(NULL, 1, k, (const float *)w->data + gi * Mg * Cg * 9, Mg, Cg, tw, upk ? plain : Ug);
        for (int64_t q = 0; upk && q < k->np; q++)   /* each product's filters as the GEMM's packed A */
            kiln__sgemm_apack(Mg, Cg, plain + q * Mg * Cg, Cg, Ug + q * uq);
    }
    kiln__free(plain);
    return KILN_OK;
}

static kiln_status prep_wino_avx2(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                                  size_t *size)
{
    return prep_wino(&kiln__wino_set_avx2, n, n_in, consts, blob, size);
}

static kiln_status prep_wino_avx512(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                                    size_t *size)
{
    return prep_wino(&kiln__wino_set_avx512, n, n_in, consts, blob, size);
}

/* later entries over earlier ones: the AVX-512 kernel's choice where the host runs it */
const kiln_prep_isa_reg kiln__x86_prep_conv[] = {
    {KILN_OP_Conv, prep_wino_avx2, KILN_CPU_AVX2_FMA},
    {KILN_OP_FusedConv, prep_wino_avx2, KILN_CPU_AVX2_FMA},
    {KILN_OP_Conv, prep_wino_avx512, KILN_CONV_AVX512_ISA},
    {KILN_OP_FusedConv, prep_wino_avx512, KILN_CONV_AVX512_ISA},
    {KILN_OP_COUNT, NULL, 0},
};
#else
const kiln_prep_isa_reg kiln__x86_prep_conv[] = {{KILN_OP_COUNT, NULL, 0}};
#endif
