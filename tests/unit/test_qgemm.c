/* INT8 GEMM core and the quantized kernels: differential tests.
 *
 * 1. The core (kiln__qgemm: the host's widest tile, then each narrower one it can run: VNNI, AVX2,
 *    portable; threads, packed or packb B, K past the AVX2 tile's chunk, bytes at the ends of their
 *    range) against its scalar loop (kiln__qgemm_ref) and against naive int64 sums of the original
 *    (unpacked, either signedness) matrices: integer results exact, requantized results exact
 *    (same float operations), float results exact for linear activations.
 * 2. QLinearMatMul, MatMulInteger, QGemm, QLinearConv, ConvInteger: the kernel the host runs
 *    (the AVX512-VNNI one where available) against the scalar reference kernel on random odd
 *    shapes, u8 and s8 activations and weights, zero points != 0, per-tensor / per-channel
 *    scales, saturation at both ends, the kiln_act activations and kiln_out_float: every output
 *    element equal. Against the ideal requantization computed in double, u8/s8 outputs may
 *    differ by 1 where float32 rounding of acc * (a_scale * w_scale / y_scale) lands on the other
 *    side of a .5 boundary; the test checks that bound and counts such elements. QLinearMatMul
 *    also with kiln's int32 bias (input 8).
 * 3. QuantizeLinear: the AVX-512 kernel against the reference, byte for byte (test_quantize), and
 *    DequantizeLinear, bit for bit (test_dequantize). */
#include "test.h"
#include "test_tensor.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/prep.h"
#include "backend/cpu/qgemm.h"
#include "test_pool.h"
#include <string.h>

static unsigned long long seed = 12345;
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(test_rng(&seed) % (uint64_t)(hi - lo + 1)); }

/* ---------------------------------------------------------------- core ---------------------- */

typedef struct strip_src {
    const uint8_t *full;   /* B packed over all N */
    int64_t K;
} strip_src;

/* kiln_qpackb_fn over a fully packed B: copies the strip's panels */
static void packb_copy(void *arg, int64_t j0, int64_t n, uint8_t *dst, int32_t *sum)
{
    const strip_src *s = arg;
    int64_t kp = kiln__qgemm_kp(s->K), np = (n + 15) / 16;
    memcpy(dst, s->full + (j0 / 16) * kp * 16, (size_t)(np * kp * 16));
    if (sum)
        kiln__qpanel_sums(dst, s->K, np * 16, true, sum); /* used with a_s8 == false: B holds s8 */
}

static void test_core(int iter)
{
    int64_t M = rnd(1, 40), N = rnd(1, 150), K = rnd(1, 300);
    if (iter % 5 == 0)
        K = rnd(1, 7);
    if (iter % 9 == 4) /* across the AVX2 tile's chunks of 512 k of A */
        M = rnd(1, 12), N = rnd(1, 60), K = rnd(509, 2200);
    if (iter % 13 == 6) /* AMX: several 16-row blocks (4 x 1 tiles over an odd panel from 64 rows), whole 64-byte k steps */
        M = rnd(64, 140), N = rnd(1, 100), K = 64 * rnd(1, 6);
    bool extreme = iter % 11 == 7;   /* bytes at the ends of their range: pair sums past int16 */
    bool a_signed = rnd(0, 1), b_signed = rnd(0, 1), a_s8 = rnd(0, 1), use_packb = rnd(0, 1) && !a_s8;
    kiln_qout out = (kiln_qout)rnd(0, 3);
    int th = (int)rnd(1, 3);
    uint8_t *A = malloc((size_t)(M * K)), *B = malloc((size_t)(K * N));
    for (int64_t i = 0; i < M * K; i++)
        A[i] = extreme ? (uint8_t)(a_signed ? 0x80 : 0xFF) : (uint8_t)test_rng(&seed);
    for (int64_t i = 0; i < K * N; i++)
        B[i] = extreme ? (uint8_t)(b_signed ? 0x80 : 0xFF) : (uint8_t)test_rng(&seed);
    int32_t za = (int32_t)(a_signed ? rnd(-128, 127) : rnd(0, 255));
    int32_t *zb = malloc(sizeof(int32_t) * (size_t)N);
    bool zb_per_col = rnd(0, 1);
    for (int64_t j = 0; j < N; j++)
        zb[j] = zb_per_col || j == 0 ? (int32_t)(b_signed ? rnd(-128, 127) : rnd(0, 255)) : zb[0];
    /* stored domain: A on side a_s8, B on the other */
    bool a_flip = a_signed != a_s8, b_flip = b_signed == a_s8;
    int64_t kp = kiln__qgemm_kp(K);
    uint8_t *ap = malloc((size_t)(M * kp)), *bp = aligned_alloc(64, (size_t)((kiln__qgemm_panel_bytes(K, N) + 63) / 64 * 64));
    int32_t *asum = malloc(sizeof(int32_t) * (size_t)M), *bsum = malloc(sizeof(int32_t) * (size_t)(N + 16));
    int32_t *zbs = malloc(sizeof(int32_t) * (size_t)N);
    kiln__qpack_rows(A, K, M, K, a_flip, a_s8, ap, asum);
    kiln__qpack_panels(B, N, 1, K, N, b_flip, bp);
    kiln__qpanel_sums(bp, K, N, !a_s8, bsum);
    for (int64_t j = 0; j < N; j++)
        zbs[j] = zb[j] + (b_flip ? (b_signed ? 128 : -128) : 0);
    int32_t zas = za + (a_flip ? (a_signed ? 128 : -128) : 0);
    /* epilogue: channels along rows or columns */
    bool ch_row = rnd(0, 1);
    int64_t nch = ch_row ? M : N;
    float *scale = malloc(sizeof(float) * (size_t)nch), *mult = malloc(sizeof(float) * (size_t)nch);
    int32_t *bias = malloc(sizeof(int32_t) * (size_t)nch);
    float ys = (float)rnd(1, 2000) * 0.37f;
    for (int64_t c = 0; c < nch; c++) {
        scale[c] = 0.001f + (float)rnd(0, 1000) * 0.0007f;
        mult[c] = scale[c] / ys;
        bias[c] = (int32_t)rnd(-40000, 40000);
    }
    kiln_act act = {(kiln_act_kind)(iter % 4 == 3 ? KILN_ACT_SIGMOID : iter % 3), -(float)rnd(0, 300), (float)rnd(0, 900)};
    if (out == KILN_QOUT_S32)
        act.kind = KILN_ACT_NONE;
    kiln_qepi e;
    int32_t yzp = out == KILN_QOUT_U8 ? (int32_t)rnd(0, 255) : (int32_t)rnd(-128, 127);
    kiln__qepi_init(&e, out, &act, ys, yzp, out == KILN_QOUT_U8 ? 0 : -128, out == KILN_QOUT_U8 ? 255 : 127);
    e.ch_row = ch_row, e.bias = rnd(0, 1) ? bias : NULL, e.scale = scale, e.mult = mult;
    size_t esz = out == KILN_QOUT_U8 || out == KILN_QOUT_S8 ? 1 : 4;
    uint8_t *c1 = malloc((size_t)(M * N) * esz), *c2 = malloc((size_t)(M * N) * esz);
    memset(c1, 0xAB, (size_t)(M * N) * esz);
    strip_src ss = {bp, K};
    kiln_qgemm g = {.M = M, .N = N, .K = K, .a = ap, .lda = kp, .a_s8 = a_s8, .a_sum = asum, .a_zp0 = zas,
                    .b = bp, .b_sum = bsum, .b_zp = zbs, .c = c1, .ldc = N, .epi = e};
    if (use_packb)
        g.packb = packb_copy, g.packb_ctx = &ss, g.packb_sums = true;
    CHECK(kiln__qgemm(test_pool(th), th, &g) == KILN_OK);
    g.packb = NULL, g.c = c2;
    kiln__qgemm_ref(&g);
    int bad = 0, bad_naive = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t at = i * N + j;
            if (out == KILN_QOUT_F32 && act.kind == KILN_ACT_SIGMOID) {
                float x = ((float *)c1)[at], y = ((float *)c2)[at];
                bad += !(fabsf(x - y) <= 1e-6f + 1e-5f * fabsf(y));
            } else {
                bad += memcmp(c1 + at * esz, c2 + at * esz, esz) != 0;
            }
            if (out == KILN_QOUT_S32) { /* naive sum on the original bytes */
                int64_t s = 0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t av = a_signed ? (int8_t)A[i * K + k] : A[i * K + k];
                    int64_t bv = b_signed ? (int8_t)B[k * N + j] : B[k * N + j];
                    s += (av - za) * (bv - zb[j]);
                }
                s += e.bias ? bias[ch_row ? i : j] : 0;
                bad_naive += ((int32_t *)c1)[at] != (int32_t)s;
            }
        }
    CHECK_MSG(bad == 0 && bad_naive == 0,
              "core (tile %d) M=%lld N=%lld K=%lld a_s8=%d a/b signed=%d/%d out=%d act=%d packb=%d th=%d: %d vs ref, "
              "%d vs naive",
              kiln__qgemm_isa(), (long long)M, (long long)N, (long long)K, a_s8, a_signed, b_signed, (int)out, (int)act.kind, use_packb,
              th, bad, bad_naive);
    free(A), free(B), free(zb), free(ap), free(bp), free(asum), free(bsum), free(zbs), free(scale), free(mult);
    free(bias), free(c1), free(c2);
}

/* ---------------------------------------------------------------- kernels ------------------- */

typedef struct tens {
    kiln_tensor t;
    void *buf;
} tens;

static kiln_tensor mk(kiln_dtype dt, int nd, const int64_t *dims) { return test_tensor(dt, nd, dims); }
static kiln_tensor mk_bytes(kiln_dtype dt, int nd, const int64_t *dims) { return test_tensor_bytes(dt, nd, dims, &seed); }
static kiln_tensor mk_scalar_q(kiln_dtype dt)
{
    kiln_tensor t = mk(dt, 0, NULL);
    *(uint8_t *)t.data = (uint8_t)(dt == KILN_DT_UINT8 ? rnd(0, 255) : rnd(-128, 127));
    return t;
}
static kiln_tensor mk_scales(int64_t n, float lo, float hi)
{
    kiln_tensor t = n == 0 ? mk(KILN_DT_FLOAT32, 0, NULL) : mk(KILN_DT_FLOAT32, 1, &n);
    for (int64_t i = 0; i < (n ? n : 1); i++)
        ((float *)t.data)[i] = lo + (hi - lo) * (float)rnd(0, 10000) / 10000.0f;
    return t;
}

/* Runs op with the fast kernel (what the registry picks) and the scalar reference; returns the
 * number of differing output elements (-1 on a status mismatch). *sat_lo / *sat_hi count
 * outputs at the saturation bounds; *out_ref gets the reference output (caller releases). */
/* fast kernel's ctx->prepared: 0 none, 1 the layer's prep blob, 2 that blob with a bad header
 * (magic, layout, element type or a dim: must be refused, results equal), 3 a valid header over
 * a zeroed payload (must be used: results differ somewhere), 4 the blob with the weights input
 * dropped where the blob replaces them (as an engine stores such a layer: it must run from the blob
 * alone, whichever path the kernel takes) */
static int prep_mode;
static int64_t preps_used, zeroed_runs, zeroed_runs_differing, dropped_runs;

static int64_t run_both(kiln_op op, const char *domain, kiln_attr *attrs, int nattr, const kiln_tensor **in, int nin,
                        int th, kiln_tensor *out_ref, bool approx_float)
{
    int ids[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    kiln_node node = {.name = (char *)"q", .op_type = (char *)kiln__op_name(op), .domain = (char *)domain, .op = op,
                      .opset = 13, .n_in = nin, .n_out = 1, .in = ids, .out = ids + 11, .attrs = attrs,
                      .n_attr = nattr};
    kiln_tensor y1, y2;
    memset(&y1, 0, sizeof y1);
    memset(&y2, 0, sizeof y2);
    kiln_tensor *o1[1] = {&y1}, *o2[1] = {&y2};
    kiln_kctx c1 = {.node = &node, .n_in = nin, .in = in, .n_out = 1, .out = o1, .pool = test_pool(th), .nthreads = th};
    kiln_kctx c2 = c1;
    c2.out = o2;
    void *blob = NULL, *al = NULL;
    size_t bsize = 0;
    int mode = prep_mode;
    const kiln_tensor *din[12];
    kiln_tensor wd;
    if (mode) {
        bool conv = op == KILN_OP_QLinearConv || op == KILN_OP_ConvInteger;
        CHECK((conv ? kiln__qprep_conv : kiln__qprep_matmul)(&node, nin, in, &blob, &bsize) == KILN_OK);
        kiln_prep_hdr h;
        int wi = op == KILN_OP_ConvInteger || op == KILN_OP_MatMulInteger ? 1 : 3;
        /* plain bytes any host reads, replacing the weights on every host */
        CHECK(!blob || (kiln__prep_header(blob, bsize, &h) && h.gemm_kind == 0 && h.engine_isa == 0 &&
                        h.replaces == 1u << wi));
        if (blob && mode == 4) {   /* the weights stored only packed */
            wd = *in[wi];
            wd.data = NULL;
            wd.nbytes = 0;
            for (int i = 0; i < nin; i++)
                din[i] = i == wi ? &wd : in[i];
            c1.in = din;
            dropped_runs++;
        }
        if (blob) { /* as an engine holds it: 64-byte aligned */
            al = aligned_alloc(64, (bsize + 63) / 64 * 64);
            memcpy(al, blob, bsize);
            static const int hdr_off[4] = {0, 8, 24, 32}; /* magic, layout, dtype, dims[0] */
            if (mode == 2)
                ((uint8_t *)al)[hdr_off[rnd(0, 3)]] ^= 1;
            if (mode == 3)
                memset((uint8_t *)al + KILN_PREP_HDR_BYTES, 0, bsize - KILN_PREP_HDR_BYTES);
            c1.prepared = al, c1.prepared_size = bsize;
            preps_used++;
        } else {
            mode = 0;
        }
    }
    kiln_status s1 = kiln__ref_kernel(op)(&c1), s2 = kiln__cpu_ref_kernel(op)(&c2);
    kiln__free(blob);
    free(al);
    int64_t bad = 0;
    if (s1 != s2 || s1 != KILN_OK) {
        bad = s1 == s2 ? 0 : -1;
        if (s1 != KILN_OK)
            fprintf(stderr, "status %d / %d: %s\n", (int)s1, (int)s2, kiln_last_error());
        bad = -1;
    } else if (y1.dtype != y2.dtype || y1.nbytes != y2.nbytes || y1.ndim != y2.ndim) {
        bad = -1;
    } else {
        int64_t n = kiln_tensor_numel(&y1);
        size_t es = kiln_dtype_size(y1.dtype);
        for (int64_t i = 0; i < n; i++) {
            if (approx_float && y1.dtype == KILN_DT_FLOAT32) {
                float a = ((float *)y1.data)[i], b = ((float *)y2.data)[i];
                bad += !(fabsf(a - b) <= 1e-6f + 1e-5f * fabsf(b));
            } else {
                bad += memcmp((uint8_t *)y1.data + i * es, (uint8_t *)y2.data + i * es, es) != 0;
            }
        }
    }
    kiln__tensor_release(&y1);
    *out_ref = y2;
    if (mode == 3 && bad >= 0) { /* the zeroed weights were used */
        zeroed_runs++;
        zeroed_runs_differing += bad > 0;
        return 0;
    }
    return bad;
}

/* ---- layers the fast kernels leave to the reference: their weights packed or not ----
 * A prepare function packs only the weights of layers its fast kernel takes (the checks it shares with the kernel,
 * on the node's constants); where the refusing operand is computed (not a constant at build time) the weights are
 * packed and an engine stores only the blob: the fast kernel leaves the layer to the reference, which must run on
 * the weights read back from the blob. Each case: prep on consts (want_blob), then the fast kernel on in[] with that
 * blob and, where there is one, the weights input dropped, against the reference on in[]: the same bytes. */
static void prep_case(kiln_op op, const char *domain, kiln_attr *attrs, int nattr, const kiln_tensor **in, int nin,
                      int hide, bool want_blob, const char *what)
{
    int ids[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    kiln_node node = {.name = (char *)"q", .op_type = (char *)kiln__op_name(op), .domain = (char *)domain, .op = op,
                      .opset = 13, .n_in = nin, .n_out = 1, .in = ids, .out = ids + 11, .attrs = attrs,
                      .n_attr = nattr};
    const kiln_tensor *consts[12], *din[12];
    for (int i = 0; i < nin; i++)
        consts[i] = i == hide ? NULL : in[i], din[i] = in[i];   /* hide: an input computed at build time */
    bool conv = op == KILN_OP_QLinearConv || op == KILN_OP_ConvInteger;
    int wi = op == KILN_OP_ConvInteger || op == KILN_OP_MatMulInteger ? 1 : 3;
    void *blob = NULL, *al = NULL;
    size_t bsize = 0;
    CHECK((conv ? kiln__qprep_conv : kiln__qprep_matmul)(&node, nin, consts, &blob, &bsize) == KILN_OK);
    CHECK_MSG((blob != NULL) == want_blob, "%s: %s blob", what, blob ? "a" : "no");
    kiln_tensor wd = *in[wi];
    if (blob) {   /* as an engine stores the layer: the blob 64-byte aligned, the weights dropped */
        al = aligned_alloc(64, (bsize + 63) / 64 * 64);
        memcpy(al, blob, bsize);
        wd.data = NULL;
        wd.nbytes = 0;
        din[wi] = &wd;
    }
    kiln_tensor y1 = {0}, y2 = {0};
    kiln_tensor *o1[1] = {&y1}, *o2[1] = {&y2};
    kiln_kctx c1 = {.node = &node, .n_in = nin, .in = din, .n_out = 1, .out = o1, .pool = test_pool(2), .nthreads = 2,
                    .prepared = al, .prepared_size = al ? bsize : 0};
    kiln_kctx c2 = {.node = &node, .n_in = nin, .in = in, .n_out = 1, .out = o2, .pool = test_pool(2), .nthreads = 2};
    kiln_status s1 = kiln__ref_kernel(op)(&c1);
    const char *e1 = s1 ? kiln_last_error() : "";
    kiln_status s2 = kiln__cpu_ref_kernel(op)(&c2);
    CHECK_MSG(s1 == KILN_OK && s2 == KILN_OK && y1.nbytes == y2.nbytes && y1.dtype == y2.dtype &&
                  !memcmp(y1.data, y2.data, y1.nbytes),
              "%s: fast %d (%s), reference %d", what, (int)s1, e1, (int)s2);
    kiln__tensor_release(&y1);
    kiln__tensor_release(&y2);
    kiln__free(blob);
    free(al);
}

static void test_prep_refusals(void)
{
    int64_t M = 5, K = 20, N = 24, ad[2] = {M, K}, bd[2] = {N, K}, mn[2] = {M, N}, one = 1;
    kiln_tensor a = mk_bytes(KILN_DT_UINT8, 2, ad), b = mk_bytes(KILN_DT_UINT8, 2, bd), az = mk_scalar_q(KILN_DT_UINT8);
    kiln_tensor bz = mk_scalar_q(KILN_DT_UINT8), as = mk_scales(0, 0.005f, 0.05f), bs = mk_scales(N, 0.001f, 0.03f);
    kiln_tensor ys = mk_scales(0, 0.5f, 3.0f), yz = mk_scalar_q(KILN_DT_UINT8), cmn = mk(KILN_DT_INT32, 2, mn);
    kiln_tensor c1 = mk(KILN_DT_INT32, 1, &one), rows = mk_scales(M, 0.005f, 0.05f), azr = mk(KILN_DT_UINT8, 1, &M);
    for (int64_t i = 0; i < M * N; i++)
        ((int32_t *)cmn.data)[i] = (int32_t)rnd(-30000, 30000);
    *(int32_t *)c1.data = 12345;
    for (int64_t i = 0; i < M; i++)
        ((uint8_t *)azr.data)[i] = (uint8_t)rnd(100, 150);
    kiln_attr tb = {.name = (char *)"transB", .type = KILN_ATTR_INT, .i = 1};
    /* QGemm with C [M, N] or [1] (the fast kernel takes a bias of N): no blob, or (C computed) the blob alone */
    const kiln_tensor *g1[9] = {&a, &as, &az, &b, &bs, &bz, &cmn, &ys, &yz}, *g2[9] = {&a, &as, &az, &b, &bs, &bz, &c1,
                                                                                         &ys, &yz};
    prep_case(KILN_OP_QGemm, KILN_MS_DOMAIN, &tb, 1, g1, 9, -1, false, "QGemm C [M, N]");
    prep_case(KILN_OP_QGemm, KILN_MS_DOMAIN, &tb, 1, g1, 9, 6, true, "QGemm C [M, N] computed");
    prep_case(KILN_OP_QGemm, KILN_MS_DOMAIN, &tb, 1, g2, 9, -1, false, "QGemm C [1]");
    prep_case(KILN_OP_QGemm, KILN_MS_DOMAIN, &tb, 1, g2, 9, 6, true, "QGemm C [1] computed");
    /* per-row a_scale (QLinearMatMul), a_zero_point (MatMulInteger): B [K, N] */
    kiln_tensor bt = mk_bytes(KILN_DT_INT8, 2, (int64_t[]){K, N}), bzt = mk_scalar_q(KILN_DT_INT8);
    const kiln_tensor *q1[8] = {&a, &rows, &az, &bt, &bs, &bzt, &ys, &yz}, *m1[4] = {&a, &bt, &azr, &bzt};
    prep_case(KILN_OP_QLinearMatMul, "", NULL, 0, q1, 8, -1, false, "QLinearMatMul per-row a_scale");
    prep_case(KILN_OP_QLinearMatMul, "", NULL, 0, q1, 8, 1, true, "QLinearMatMul per-row a_scale computed");
    prep_case(KILN_OP_MatMulInteger, "", NULL, 0, m1, 4, -1, false, "MatMulInteger per-row a_zero_point");
    prep_case(KILN_OP_MatMulInteger, "", NULL, 0, m1, 4, 2, true, "MatMulInteger per-row a_zero_point computed");
    /* QLinearConv: 3-D (the fast kernel takes 1-D and 2-D), an int16 output (y_zero_point int16); u8 weights */
    int64_t x3[5] = {1, 4, 5, 5, 5}, w3[5] = {6, 4, 3, 3, 3}, x2[4] = {1, 4, 7, 6}, w2[4] = {6, 4, 3, 3};
    int64_t pads3[6] = {1, 1, 1, 1, 1, 1}, pads2[4] = {1, 0, 1, 1};
    kiln_attr pa3 = {.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 6, .ints = pads3};
    kiln_attr pa2 = {.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4, .ints = pads2};
    kiln_tensor xv3 = mk_bytes(KILN_DT_UINT8, 5, x3), wv3 = mk_bytes(KILN_DT_UINT8, 5, w3);
    kiln_tensor xv2 = mk_bytes(KILN_DT_UINT8, 4, x2), wv2 = mk_bytes(KILN_DT_UINT8, 4, w2);
    kiln_tensor ws = mk_scales(6, 0.001f, 0.02f), wz = mk_scalar_q(KILN_DT_UINT8);
    kiln_tensor yz16 = mk(KILN_DT_INT16, 0, NULL), ys16 = mk_scales(0, 0.01f, 0.02f);
    *(int16_t *)yz16.data = -300;
    const kiln_tensor *cv3[8] = {&xv3, &as, &az, &wv3, &ws, &wz, &ys, &yz};
    const kiln_tensor *cv16[8] = {&xv2, &as, &az, &wv2, &ws, &wz, &ys16, &yz16};
    prep_case(KILN_OP_QLinearConv, "", &pa3, 1, cv3, 8, -1, false, "QLinearConv 3-D");
    prep_case(KILN_OP_QLinearConv, "", &pa2, 1, cv16, 8, -1, false, "QLinearConv int16 output");
    prep_case(KILN_OP_QLinearConv, "", &pa2, 1, cv16, 8, 7, true, "QLinearConv int16 output, y_zero_point computed");
    kiln_tensor *all[] = {&a, &b, &az, &bz, &as, &bs, &ys, &yz, &cmn, &c1, &rows, &azr, &bt, &bzt, &xv3, &wv3, &ws,
                          &xv2, &wv2, &wz, &yz16, &ys16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        kiln__tensor_release(all[i]);
}

static int64_t sat_lo_seen, sat_hi_seen, off_by_one, checked_ideal;

/* counts outputs at the bounds */
static void count_sat(const kiln_tensor *y)
{
    if (y->dtype != KILN_DT_UINT8 && y->dtype != KILN_DT_INT8)
        return;
    int64_t n = kiln_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) {
        int v = y->dtype == KILN_DT_UINT8 ? ((uint8_t *)y->data)[i] : ((int8_t *)y->data)[i];
        sat_lo_seen += v == (y->dtype == KILN_DT_UINT8 ? 0 : -128);
        sat_hi_seen += v == (y->dtype == KILN_DT_UINT8 ? 255 : 127);
    }
}

static int32_t qv(const kiln_tensor *t, int64_t i)
{
    return t->dtype == KILN_DT_UINT8 ? ((const uint8_t *)t->data)[i] : ((const int8_t *)t->data)[i];
}
static int32_t qz(const kiln_tensor *z) { return z ? qv(z, 0) : 0; }

static const char *const act_names[] = {NULL, "Relu", "Clip", "Sigmoid"};

static void test_matmul_like(int iter)
{
    int which = iter % 3; /* 0 QLinearMatMul, 1 MatMulInteger, 2 QGemm */
    int64_t M = rnd(1, 37), N = rnd(1, 130), K = rnd(1, 200), batch = which == 2 ? 1 : rnd(1, 3);
    kiln_dtype adt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8, bdt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8;
    bool trans_b = which == 2 && rnd(0, 1), trans_a = which == 2 && rnd(0, 2) == 0;   /* QGemm: A [K, M] */
    int64_t adims[3] = {batch, trans_a ? K : M, trans_a ? M : K}, bdims[2] = {trans_b ? N : K, trans_b ? K : N};
    kiln_tensor a = batch > 1 ? mk_bytes(adt, 3, adims) : mk_bytes(adt, 2, adims + 1), b = mk_bytes(bdt, 2, bdims);
    kiln_tensor az = mk_scalar_q(adt), bz;
    bool per_col = rnd(0, 1);
    if (per_col) {
        bz = mk(bdt, 1, &N);
        for (int64_t j = 0; j < N; j++)
            ((uint8_t *)bz.data)[j] = (uint8_t)(bdt == KILN_DT_UINT8 ? rnd(100, 150) : rnd(-20, 20));
    } else {
        bz = mk_scalar_q(bdt);
    }
    if (bdt == KILN_DT_INT8 && rnd(0, 2) == 0)   /* symmetric s8 weights: a u8 A with K % 4 == 0 is read in place */
        memset(bz.data, 0, (size_t)kiln_tensor_numel(&bz));
    kiln_tensor as = mk_scales(0, 0.005f, 0.05f), bs = mk_scales(per_col ? N : 0, 0.001f, 0.03f);
    kiln_dtype ydt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8;
    kiln_tensor ys = mk_scales(0, 0.05f, 3.0f), yz = mk_scalar_q(ydt);
    int64_t nb = N;
    kiln_tensor bias = mk(KILN_DT_INT32, 1, &nb);
    for (int64_t j = 0; j < N; j++)
        ((int32_t *)bias.data)[j] = (int32_t)rnd(-30000, 30000);
    int ak = (int)rnd(0, 3);
    bool out_float = which != 1 && rnd(0, 3) == 0;
    kiln_attr attrs[9];
    int na = 0;
    if (which != 1 && ak) {
        attrs[na++] = (kiln_attr){.name = (char *)"kiln_act", .type = KILN_ATTR_STRING, .s = (char *)act_names[ak],
                                  .s_len = strlen(act_names[ak])};
        attrs[na++] = (kiln_attr){.name = (char *)"kiln_act_alpha", .type = KILN_ATTR_FLOAT, .f = -(float)rnd(0, 20)};
        attrs[na++] = (kiln_attr){.name = (char *)"kiln_act_beta", .type = KILN_ATTR_FLOAT, .f = (float)rnd(1, 60)};
    }
    if (which == 0 && out_float)
        attrs[na++] = (kiln_attr){.name = (char *)"kiln_out_float", .type = KILN_ATTR_INT, .i = 1};
    if (which == 2) {
        attrs[na++] = (kiln_attr){.name = (char *)"transB", .type = KILN_ATTR_INT, .i = trans_b};
        attrs[na++] = (kiln_attr){.name = (char *)"transA", .type = KILN_ATTR_INT, .i = trans_a};
        attrs[na++] = (kiln_attr){.name = (char *)"alpha", .type = KILN_ATTR_FLOAT, .f = rnd(0, 1) ? 1.0f : 0.75f};
    }
    kiln_tensor y;
    int th = (int)rnd(1, 3);
    int64_t bad;
    const char *name;
    bool mm_bias = which == 0 && rnd(0, 1);   /* kiln's int32 bias, input 8 (fuse-qdq: MatMul + Add) */
    if (which == 0) {
        const kiln_tensor *in[9] = {&a, &as, &az, &b, &bs, &bz, &ys, &yz, &bias};
        bad = run_both(KILN_OP_QLinearMatMul, "", attrs, na, in, mm_bias ? 9 : 8, th, &y, ak == 3);
        name = "QLinearMatMul";
    } else if (which == 1) {
        const kiln_tensor *in[4] = {&a, &b, &az, &bz};
        bad = run_both(KILN_OP_MatMulInteger, "", attrs, na, in, 4, th, &y, false);
        name = "MatMulInteger";
    } else {
        bool has_bias = rnd(0, 1);
        const kiln_tensor *in[9] = {&a, &as, &az, &b, &bs, &bz, has_bias ? &bias : NULL, &ys, &yz};
        bad = run_both(KILN_OP_QGemm, KILN_MS_DOMAIN, attrs, na, in, out_float ? 7 : 9, th, &y, ak == 3);
        name = "QGemm";
    }
    CHECK_MSG(bad == 0,
              "%s batch=%lld M=%lld N=%lld K=%lld transA=%d a=%s b=%s y=%s per_col=%d act=%d float=%d bias=%d th=%d: "
              "%lld differ",
              name, (long long)batch, (long long)M, (long long)N, (long long)K, trans_a, kiln_dtype_name(adt),
              kiln_dtype_name(bdt), kiln_dtype_name(ydt), per_col, ak, out_float, mm_bias, th, (long long)bad);
    count_sat(&y);
    /* ideal requantization in double (QLinearMatMul without activation): within 1 */
    if (which == 0 && !ak && !out_float && y.data) {
        for (int64_t r = 0; r < batch * M; r++)
            for (int64_t j = 0; j < N; j++) {
                int64_t s = mm_bias ? ((int32_t *)bias.data)[j] : 0;
                for (int64_t k = 0; k < K; k++)
                    s += (int64_t)(qv(&a, r * K + k) - qz(&az)) * (qv(&b, k * N + j) - qv(&bz, per_col ? j : 0));
                double m = (double)*(float *)as.data * ((float *)bs.data)[per_col ? j : 0] / *(float *)ys.data;
                double t = nearbyint((double)s * m) + qz(&yz);
                double lo = ydt == KILN_DT_UINT8 ? 0 : -128, hi = ydt == KILN_DT_UINT8 ? 255 : 127;
                t = t < lo ? lo : t > hi ? hi : t;
                int d = abs(qv(&y, r * N + j) - (int)t);
                CHECK_MSG(d <= 1, "QLinearMatMul vs ideal: %d", d);
                off_by_one += d == 1;
                checked_ideal++;
            }
    }
    kiln__tensor_release(&y);
    kiln__tensor_release(&a), kiln__tensor_release(&b), kiln__tensor_release(&az), kiln__tensor_release(&bz);
    kiln__tensor_release(&as), kiln__tensor_release(&bs), kiln__tensor_release(&ys), kiln__tensor_release(&yz);
    kiln__tensor_release(&bias);
}

static void test_conv(int iter)
{
    bool integer = iter % 4 == 3;
    int64_t G = rnd(0, 3) == 0 ? rnd(2, 3) : 1, n = rnd(1, 2);
    int64_t cpg = rnd(1, 9), mpg = rnd(1, 21);
    bool depthwise = iter % 7 == 5;
    if (depthwise)
        cpg = 1, mpg = 1, G = rnd(3, 17);
    int64_t C = cpg * G, M = mpg * G, H = rnd(1, 19), W = rnd(1, 23);
    int64_t kh = rnd(1, 3), kw = rnd(1, 3);
    if (iter % 5 == 0)
        kh = kw = 1;
    int64_t sh = rnd(1, 2), sw = rnd(1, 2), dh = rnd(1, 2), dw = rnd(1, 2), p[4] = {rnd(0, 2), rnd(0, 2), rnd(0, 2), rnd(0, 2)};
    if ((kh - 1) * dh + 1 > H + p[0] + p[2])
        kh = 1;
    if ((kw - 1) * dw + 1 > W + p[1] + p[3])
        kw = 1;
    kiln_dtype xdt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8, wdt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8;
    int64_t xd[4] = {n, C, H, W}, wd[4] = {M, cpg, kh, kw};
    kiln_tensor x = mk_bytes(xdt, 4, xd), w = mk_bytes(wdt, 4, wd), xz = mk_scalar_q(xdt), wz;
    bool per_ch = rnd(0, 1);
    if (per_ch && !integer) {
        wz = mk(wdt, 1, &M);
        for (int64_t m = 0; m < M; m++)
            ((uint8_t *)wz.data)[m] = (uint8_t)(wdt == KILN_DT_UINT8 ? rnd(100, 150) : 0);
    } else {
        wz = mk_scalar_q(wdt);
    }
    kiln_tensor xs = mk_scales(0, 0.005f, 0.05f), ws = mk_scales(per_ch ? M : 0, 0.001f, 0.03f);
    kiln_dtype ydt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8;
    kiln_tensor ys = mk_scales(0, 0.01f, 1.0f), yz = mk_scalar_q(ydt);
    kiln_tensor bias = mk(KILN_DT_INT32, 1, &M);
    for (int64_t m = 0; m < M; m++)
        ((int32_t *)bias.data)[m] = (int32_t)rnd(-20000, 20000);
    int64_t ks[2] = {kh, kw}, st[2] = {sh, sw}, dl[2] = {dh, dw};
    int ak = (int)rnd(0, 3);
    bool out_float = !integer && rnd(0, 4) == 0;
    kiln_attr attrs[9] = {
        {.name = (char *)"group", .type = KILN_ATTR_INT, .i = G},
        {.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = 2, .ints = ks},
        {.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = 2, .ints = st},
        {.name = (char *)"dilations", .type = KILN_ATTR_INTS, .n = 2, .ints = dl},
        {.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4, .ints = p},
    };
    int na = 5;
    if (!integer && ak) {
        attrs[na++] = (kiln_attr){.name = (char *)"kiln_act", .type = KILN_ATTR_STRING, .s = (char *)act_names[ak],
                                  .s_len = strlen(act_names[ak])};
        attrs[na++] = (kiln_attr){.name = (char *)"kiln_act_alpha", .type = KILN_ATTR_FLOAT, .f = -(float)rnd(0, 20)};
        attrs[na++] = (kiln_attr){.name = (char *)"kiln_act_beta", .type = KILN_ATTR_FLOAT, .f = (float)rnd(1, 60)};
    }
    if (out_float)
        attrs[na++] = (kiln_attr){.name = (char *)"kiln_out_float", .type = KILN_ATTR_INT, .i = 1};
    kiln_tensor y;
    int th = (int)rnd(1, 3);
    int64_t bad;
    if (integer) {
        const kiln_tensor *in[4] = {&x, &w, &xz, &wz};
        bad = run_both(KILN_OP_ConvInteger, "", attrs, na, in, 4, th, &y, false);
    } else {
        bool has_bias = rnd(0, 1);
        const kiln_tensor *in[9] = {&x, &xs, &xz, &w, &ws, &wz, &ys, &yz, &bias};
        bad = run_both(KILN_OP_QLinearConv, "", attrs, na, in, has_bias ? 9 : 8, th, &y, ak == 3);
    }
    CHECK_MSG(bad == 0,
              "%s N=%lld C=%lld M=%lld G=%lld HxW=%lldx%lld k=%lldx%lld s=%lld,%lld d=%lld,%lld p=%lld,%lld,%lld,%lld "
              "x=%s w=%s act=%d float=%d th=%d: %lld differ",
              integer ? "ConvInteger" : "QLinearConv", (long long)n, (long long)C, (long long)M, (long long)G,
              (long long)H, (long long)W, (long long)kh, (long long)kw, (long long)sh, (long long)sw, (long long)dh,
              (long long)dw, (long long)p[0], (long long)p[1], (long long)p[2], (long long)p[3], kiln_dtype_name(xdt),
              kiln_dtype_name(wdt), ak, out_float, th, (long long)bad);
    count_sat(&y);
    kiln__tensor_release(&y);
    kiln__tensor_release(&x), kiln__tensor_release(&w), kiln__tensor_release(&xz), kiln__tensor_release(&wz);
    kiln__tensor_release(&xs), kiln__tensor_release(&ws), kiln__tensor_release(&ys), kiln__tensor_release(&yz);
    kiln__tensor_release(&bias);
}

/* bad inputs: clean errors from the fast kernels too (they defer to the reference) */
static void test_errors(void)
{
    int64_t d2[2] = {3, 5}, d2b[2] = {4, 6};
    kiln_tensor a = mk_bytes(KILN_DT_UINT8, 2, d2), b = mk_bytes(KILN_DT_INT8, 2, d2b), f = mk(KILN_DT_FLOAT32, 2, d2b);
    const kiln_tensor *in[4] = {&a, &b, NULL, NULL};
    kiln_tensor y, *o[1] = {&y};
    int ids[5] = {0, 1, 2, 3, 4};
    kiln_node node = {.name = (char *)"e", .op_type = (char *)"MatMulInteger", .domain = (char *)"",
                      .op = KILN_OP_MatMulInteger, .opset = 10, .n_in = 2, .n_out = 1, .in = ids, .out = ids + 4};
    kiln_kctx c = {.node = &node, .n_in = 2, .in = in, .n_out = 1, .out = o, .nthreads = 1};
    memset(&y, 0, sizeof y);
    CHECK(kiln__ref_kernel(KILN_OP_MatMulInteger)(&c) == KILN_ERR_SHAPE); /* K 5 vs 4 */
    in[1] = &f;
    CHECK(kiln__ref_kernel(KILN_OP_MatMulInteger)(&c) == KILN_ERR_DTYPE);
    kiln_attr bad_act = {.name = (char *)"kiln_act", .type = KILN_ATTR_STRING, .s = (char *)"Bogus", .s_len = 5};
    int64_t d3[2] = {5, 6};
    kiln_tensor b2 = mk_bytes(KILN_DT_INT8, 2, d3), s = mk_scales(0, 0.1f, 0.2f), z = mk_scalar_q(KILN_DT_UINT8);
    const kiln_tensor *qin[8] = {&a, &s, &z, &b2, &s, NULL, &s, &z};
    kiln_node qn = {.name = (char *)"q", .op_type = (char *)"QLinearMatMul", .domain = (char *)"",
                    .op = KILN_OP_QLinearMatMul, .opset = 10, .n_in = 8, .n_out = 1, .in = ids, .out = ids + 4,
                    .attrs = &bad_act, .n_attr = 1};
    kiln_kctx qc = {.node = &qn, .n_in = 8, .in = qin, .n_out = 1, .out = o, .nthreads = 1};
    CHECK(kiln__ref_kernel(KILN_OP_QLinearMatMul)(&qc) == KILN_ERR_INVALID_ARG);
    kiln__tensor_release(&y);
    /* kiln's int32 bias (input 8) of the wrong length or type: a clean error from both kernels */
    int64_t nb5 = 5;
    kiln_tensor bb = mk(KILN_DT_INT32, 1, &nb5), bf = mk(KILN_DT_FLOAT32, 1, d3 + 1);
    const kiln_tensor *qin9[9] = {&a, &s, &z, &b2, &s, NULL, &s, &z, &bb};
    kiln_kctx bc = qc;
    kiln_node bn = qn;
    bn.n_attr = 0, bn.n_in = 9, bc.node = &bn, bc.n_in = 9, bc.in = qin9;
    for (int k = 0; k < 2; k++) {
        qin9[8] = k ? &bf : &bb;
        CHECK(kiln__ref_kernel(KILN_OP_QLinearMatMul)(&bc) == KILN_ERR_SHAPE);
        kiln__tensor_release(&y);
        CHECK(kiln__cpu_ref_kernel(KILN_OP_QLinearMatMul)(&bc) == KILN_ERR_SHAPE);
        kiln__tensor_release(&y);
    }
    kiln__tensor_release(&bb), kiln__tensor_release(&bf);
    /* weights an engine stored only packed (data dropped): the fast kernel runs from the blob and
     * gives the reference's result; without a fitting blob both fail cleanly */
    qn.n_attr = 0;
    void *blob = NULL, *al;
    size_t bsize = 0;
    CHECK(kiln__qprep_matmul(&qn, 8, qin, &blob, &bsize) == KILN_OK && blob);
    al = aligned_alloc(64, (bsize + 63) / 64 * 64);
    memcpy(al, blob, bsize);
    kiln_tensor ref_y, dropped = b2;
    memset(&ref_y, 0, sizeof ref_y);
    o[0] = &ref_y;
    CHECK(kiln__cpu_ref_kernel(KILN_OP_QLinearMatMul)(&qc) == KILN_OK);
    dropped.data = NULL, dropped.nbytes = 0;
    qin[3] = &dropped;
    o[0] = &y;
    memset(&y, 0, sizeof y);
    CHECK(kiln__cpu_ref_kernel(KILN_OP_QLinearMatMul)(&qc) == KILN_ERR_UNSUPPORTED);
    if (kiln__cpu_fast_kernel(KILN_OP_QLinearMatMul)) {
        CHECK(kiln__ref_kernel(KILN_OP_QLinearMatMul)(&qc) == KILN_ERR_UNSUPPORTED); /* no blob */
        qc.prepared = al, qc.prepared_size = bsize;
        CHECK(kiln__ref_kernel(KILN_OP_QLinearMatMul)(&qc) == KILN_OK && y.nbytes == ref_y.nbytes &&
              !memcmp(y.data, ref_y.data, y.nbytes));
        kiln__tensor_release(&y);
    }
    kiln__tensor_release(&ref_y);
    kiln__free(blob);
    free(al);
    kiln__tensor_release(&a), kiln__tensor_release(&b), kiln__tensor_release(&f), kiln__tensor_release(&b2);
    kiln__tensor_release(&s), kiln__tensor_release(&z);
}

/* Depthwise QLinearConv (kiln__qdw_plane_f32: float32 rows, exact up to KILN_QDW_F32_MAX_TAPS taps; the int32 rows
 * past it and for strides past 2) against the reference, bit for bit: kernels 1x1 to 7x7 and 16x16 (256 taps, the
 * bound's side), 17x17 (289: the int32 rows), strides 1-3, dilations, pads, rows of 1-70 outputs (the row kernel's
 * 32- and 8-wide blocks and tails); every fourth case at the extremes (x - zx and w - zw of magnitude 255 at every
 * tap: sums up to 256 * 65025, just below 2^24) with float outputs, where a sum one off would show. */
static void test_dw(int iter)
{
    bool extreme = iter % 4 == 0, big = iter % 16 == 8;
    int64_t C = rnd(1, 20), H = rnd(1, 30), W = rnd(1, 70), kh = rnd(1, 7), kw = rnd(1, 7);
    if (big)
        kh = kw = rnd(0, 1) ? 16 : 17, H = rnd(16, 24), W = rnd(16, 40);
    int64_t sh = rnd(1, 3), sw = rnd(1, 3), dh = big ? 1 : rnd(1, 2), dw = big ? 1 : rnd(1, 2);
    int64_t p[4] = {rnd(0, kh - 1), rnd(0, kw - 1), rnd(0, kh - 1), rnd(0, kw - 1)};
    if ((kh - 1) * dh + 1 > H + p[0] + p[2])
        kh = 1, p[0] = p[2] = 0;
    if ((kw - 1) * dw + 1 > W + p[1] + p[3])
        kw = 1, p[1] = p[3] = 0;
    kiln_dtype xdt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8, wdt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8;
    bool one_d = iter % 10 == 3;   /* [1, C, W] with a [C, 1, kw] filter */
    int64_t xd1[3] = {1, C, W}, wd1[3] = {C, 1, kw}, xd[4] = {1, C, H, W}, wd[4] = {C, 1, kh, kw};
    kiln_tensor x = one_d ? mk_bytes(xdt, 3, xd1) : mk_bytes(xdt, 4, xd), w = one_d ? mk_bytes(wdt, 3, wd1) : mk_bytes(wdt, 4, wd);
    kiln_tensor xz = mk_scalar_q(xdt), wz = mk_scalar_q(wdt);
    if (extreme) {   /* x at one end of its range, the zero point at the other; w alike */
        uint8_t xv = xdt == KILN_DT_UINT8 ? 255 : (uint8_t)(int8_t)127, wv = wdt == KILN_DT_UINT8 ? 0 : (uint8_t)(int8_t)-128;
        memset(x.data, xv, x.nbytes);
        memset(w.data, wv, w.nbytes);
        *(uint8_t *)xz.data = xdt == KILN_DT_UINT8 ? 0 : (uint8_t)(int8_t)-128;
        *(uint8_t *)wz.data = wdt == KILN_DT_UINT8 ? 255 : (uint8_t)(int8_t)127;
    }
    bool out_float = extreme || rnd(0, 3) == 0;
    kiln_tensor xs = mk_scales(0, 0.005f, 0.05f), ws = mk_scales(0, 0.001f, 0.03f);
    kiln_dtype ydt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8;
    kiln_tensor ys = mk_scales(0, 0.01f, 1.0f), yz = mk_scalar_q(ydt);
    int64_t ks[2] = {kh, kw}, st[2] = {sh, sw}, dl[2] = {dh, dw}, p1[2] = {p[1], p[3]};
    int sp = one_d ? 1 : 2;
    kiln_attr attrs[7] = {
        {.name = (char *)"group", .type = KILN_ATTR_INT, .i = C},
        {.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = sp, .ints = ks + 2 - sp},
        {.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = sp, .ints = st + 2 - sp},
        {.name = (char *)"dilations", .type = KILN_ATTR_INTS, .n = sp, .ints = dl + 2 - sp},
        {.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 2 * sp, .ints = one_d ? p1 : p},
    };
    int na = 5;
    if (out_float)
        attrs[na++] = (kiln_attr){.name = (char *)"kiln_out_float", .type = KILN_ATTR_INT, .i = 1};
    const kiln_tensor *in[8] = {&x, &xs, &xz, &w, &ws, &wz, &ys, &yz};
    kiln_tensor y;
    int th = (int)rnd(1, 3);
    int64_t bad = run_both(KILN_OP_QLinearConv, "", attrs, na, in, 8, th, &y, false);
    CHECK_MSG(bad == 0, "depthwise %s C=%lld HxW=%lldx%lld k=%lldx%lld s=%lld,%lld d=%lld,%lld p=%lld,%lld,%lld,%lld x=%s "
              "w=%s extreme=%d float=%d th=%d: %lld differ", one_d ? "1-D" : "2-D", (long long)C, (long long)H, (long long)W, (long long)kh,
              (long long)kw, (long long)sh, (long long)sw, (long long)dh, (long long)dw, (long long)p[0],
              (long long)p[1], (long long)p[2], (long long)p[3], kiln_dtype_name(xdt), kiln_dtype_name(wdt), extreme,
              out_float, th, (long long)bad);
    kiln__tensor_release(&y);
    kiln__tensor_release(&x), kiln__tensor_release(&w), kiln__tensor_release(&xz), kiln__tensor_release(&wz);
    kiln__tensor_release(&xs), kiln__tensor_release(&ws), kiln__tensor_release(&ys), kiln__tensor_release(&yz);
}

/* QuantizeLinear: the AVX-512 kernel against the reference on odd lengths, u8 / s8 with and without
 * a zero point, values at .5 steps, saturating, NaN, +-Inf, -0; per-axis scales (the reference's
 * case) give the same through the fallback */
static void test_quantize(int iter)
{
    int64_t n = iter % 7 == 0 ? rnd(1, 17) : rnd(1, 5000), d2[2] = {3, n};
    bool per_axis = iter % 9 == 4, has_zp = rnd(0, 2) != 0;
    kiln_dtype zdt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8;
    kiln_tensor x = mk(KILN_DT_FLOAT32, 2, d2), sc = mk_scales(per_axis ? n : 0, 0.001f, 0.5f);
    kiln_tensor zp = per_axis ? mk(zdt, 1, &n) : mk_scalar_q(zdt);
    float s0 = *(float *)sc.data;
    static const float special[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 3.0e38f, -3.0e38f, 1e-30f};
    for (int64_t i = 0; i < 3 * n; i++) {
        float *v = (float *)x.data + i;
        switch (rnd(0, 9)) {
        case 0: *v = special[rnd(0, 7)]; break;
        case 1: case 2: *v = ((float)rnd(-300, 300) + 0.5f) * s0; break;   /* halfway cases */
        default: *v = (float)rnd(-400000, 400000) / 1000.0f * s0;
        }
    }
    for (int64_t i = 0; per_axis && i < n; i++)
        ((uint8_t *)zp.data)[i] = (uint8_t)rnd(0, 255);
    const kiln_tensor *in[3] = {&x, &sc, has_zp ? &zp : NULL};
    kiln_attr ax = {.name = (char *)"axis", .type = KILN_ATTR_INT, .i = 1};
    kiln_tensor y;
    int th = (int)rnd(1, 3);
    int64_t bad = run_both(KILN_OP_QuantizeLinear, "", &ax, per_axis, in, has_zp ? 3 : 2, th, &y, false);
    CHECK_MSG(bad == 0, "QuantizeLinear n=%lld %s zp=%d per_axis=%d th=%d: %lld differ", (long long)(3 * n),
              kiln_dtype_name(zdt), has_zp, per_axis, th, (long long)bad);
    count_sat(&y);
    kiln__tensor_release(&y), kiln__tensor_release(&x), kiln__tensor_release(&sc), kiln__tensor_release(&zp);
}

/* DequantizeLinear: the AVX-512 kernel against the reference, every float bit for bit, on odd
 * lengths (tails of 1-15 bytes), u8 / s8 with and without a zero point, 1-3 threads; per-axis
 * scales (the reference's case) give the same through the fallback */
static void test_dequantize(int iter)
{
    int64_t n = iter % 7 == 0 ? rnd(1, 17) : rnd(1, 70000), d2[2] = {3, n};
    bool per_axis = iter % 9 == 4, has_zp = rnd(0, 2) != 0;
    kiln_dtype dt = rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8;
    kiln_tensor x = mk(dt, 2, d2), sc = mk_scales(per_axis ? n : 0, 0.0001f, 3.0f);
    kiln_tensor zp = per_axis ? mk(dt, 1, &n) : mk_scalar_q(dt);
    for (int64_t i = 0; i < 3 * n; i++)
        ((uint8_t *)x.data)[i] = (uint8_t)rnd(0, 255);
    for (int64_t i = 0; per_axis && i < n; i++)
        ((uint8_t *)zp.data)[i] = (uint8_t)rnd(0, 255);
    const kiln_tensor *in[3] = {&x, &sc, has_zp ? &zp : NULL};
    kiln_attr ax = {.name = (char *)"axis", .type = KILN_ATTR_INT, .i = 1};
    kiln_tensor y;
    int th = (int)rnd(1, 3);
    int64_t bad = run_both(KILN_OP_DequantizeLinear, "", &ax, per_axis, in, has_zp ? 3 : 2, th, &y, false);
    CHECK_MSG(bad == 0, "DequantizeLinear n=%lld %s zp=%d per_axis=%d th=%d: %lld differ", (long long)(3 * n),
              kiln_dtype_name(dt), has_zp, per_axis, th, (long long)bad);
    /* and against the formula itself: (x - z) * s */
    float s0 = *(const float *)sc.data;
    int z0 = !has_zp ? 0 : dt == KILN_DT_UINT8 ? *(const uint8_t *)zp.data : *(const int8_t *)zp.data;
    for (int64_t i = 0; !per_axis && i < 3 * n; i += 97) {
        int v = dt == KILN_DT_UINT8 ? ((const uint8_t *)x.data)[i] : ((const int8_t *)x.data)[i];
        CHECK(((const float *)y.data)[i] == (float)(v - z0) * s0);
    }
    kiln__tensor_release(&y), kiln__tensor_release(&x), kiln__tensor_release(&sc), kiln__tensor_release(&zp);
}

int main(void)
{
    bool vnni = kiln__qgemm_vnni_available();
    printf("AVX512-VNNI %s; fast QLinearConv kernel: %s\n", vnni ? "present" : "absent",
           kiln__cpu_fast_kernel(KILN_OP_QLinearConv) ? kiln__cpu_fast_kernel(KILN_OP_QLinearConv)->name : "none");
    /* the packed-weight kernels run on every host (the VNNI tile or the portable one) */
    CHECK(kiln__cpu_fast_kernel(KILN_OP_QLinearConv) && kiln__cpu_fast_kernel(KILN_OP_QLinearMatMul) &&
          kiln__cpu_fast_kernel(KILN_OP_QGemm) && kiln__cpu_fast_kernel(KILN_OP_ConvInteger) &&
          kiln__cpu_fast_kernel(KILN_OP_MatMulInteger));
    int isa = kiln__qgemm_isa();
    printf("INT8 GEMM tile: %s\n", isa == 3 ? "AMX" : isa == 2 ? "AVX512-VNNI" : isa == 1 ? "AVX2" : "portable");
    kiln__qgemm_set_isa_cap(4);   /* AMX (where the host has it) for every shape, the small ones too */
    for (int i = 0; i < 300; i++)
        test_core(i);
    /* the narrower tiles this host can run too: AVX512-VNNI (on AMX hosts), AVX2, portable */
    for (int cap = isa - 1; cap >= 0; cap--) {
        kiln__qgemm_set_isa_cap(cap);
        CHECK(kiln__qgemm_isa() == cap);
        for (int i = 0; i < 150; i++)
            test_core(i);
    }
    kiln__qgemm_set_isa_cap(3);
    for (int i = 0; i < 200; i++) {
        prep_mode = i % 5;
        test_matmul_like(i);
    }
    for (int i = 0; i < 160; i++) {
        prep_mode = i % 5;
        test_conv(i);
    }
    prep_mode = 0;
    for (int i = 0; i < 160; i++)
        test_dw(i);
    printf("%lld runs with a prepared (or corrupted) weight blob; %lld of %lld with zeroed packed weights differ; "
           "%lld from the blob alone\n",
           (long long)preps_used, (long long)zeroed_runs_differing, (long long)zeroed_runs, (long long)dropped_runs);
    CHECK(preps_used > 100 && zeroed_runs > 20 && zeroed_runs_differing * 10 >= zeroed_runs * 8 && dropped_runs > 20);
    test_errors();
    test_prep_refusals();
    CHECK(!kiln__cpu_has(KILN_CPU_AVX512F) || kiln__cpu_fast_kernel(KILN_OP_QuantizeLinear));
    prep_mode = 0;
    for (int i = 0; i < 200; i++)
        test_quantize(i);
    CHECK(!kiln__cpu_has(KILN_CPU_AVX512F) || kiln__cpu_fast_kernel(KILN_OP_DequantizeLinear));
    for (int i = 0; i < 200; i++)
        test_dequantize(i);
    printf("saturated outputs: %lld at the low end, %lld at the high end; %lld of %lld QLinearMatMul outputs 1 off "
           "the double-precision requantization\n",
           (long long)sat_lo_seen, (long long)sat_hi_seen, (long long)off_by_one, (long long)checked_ideal);
    CHECK(sat_lo_seen > 0 && sat_hi_seen > 0);
    return TEST_SUMMARY();
}
