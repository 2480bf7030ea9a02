/* Weights prepared at build time (src/backend/cpu/prep.h): for every op with a prepare function
 * (Conv / FusedConv: Winograd-transformed filters; MatMul / Gemm / FusedMatMul / FusedGemm: GEMM
 * panels), on odd sizes and several thread counts, the layer run with its prepared blob against
 * the same layer run without one: bit-identical where both take the same path, within the
 * kernels' tolerance where the unprepared layer takes another one (Winograd below its tile
 * threshold). Also: the weights input dropped (data NULL) runs from the blob alone; a blob that
 * does not fit (other layout, dims, magic, size, misaligned) is ignored, or refused cleanly when
 * the weights were dropped; `load` borrows the blob (no copy) and `release` leaves it alone, except
 * GEMM panels of another GEMM family, which `load` repacks for this host. */
#include "test.h"
#include "test_tensor.h"
#include "test_pool.h"
#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/prep.h"
#include <string.h>

static kiln_tensor mk(int ndim, const int64_t *dims, unsigned long long *seed) { return test_tensor_f32(ndim, dims, 1.0f, seed); }

static kiln_node node_of(kiln_op op, const char *type, kiln_attr *attrs, int na)
{
    kiln_node n;
    memset(&n, 0, sizeof n);
    n.name = (char *)"layer";
    n.op_type = (char *)type;
    n.domain = (char *)(op == KILN_OP_FusedConv || op == KILN_OP_FusedMatMul || op == KILN_OP_FusedGemm ? "kiln" : "");
    n.op = op;
    n.opset = 17;
    n.attrs = attrs;
    n.n_attr = na;
    return n;
}

static kiln_attr ints_attr(const char *name, int n, int64_t *v)
{
    kiln_attr a = {.name = (char *)name, .type = KILN_ATTR_INTS, .n = n, .ints = v};
    return a;
}

static kiln_attr int_attr(const char *name, int64_t v)
{
    kiln_attr a = {.name = (char *)name, .type = KILN_ATTR_INT, .i = v};
    return a;
}

/* Runs node n on inputs in[0..n_in) with layer l (NULL: the kernel with no prepared data). */
static kiln_status run(const kiln_node *n, const kiln_layer *l, const kiln_tensor *const *in, int n_in, kiln_tensor *y,
                       int nt)
{
    memset(y, 0, sizeof *y);
    kiln_tensor *outp[1] = {y};
    kiln_kctx ctx = {.node = n, .n_in = n_in, .in = in, .n_out = 1, .out = outp, .pool = test_pool(nt), .nthreads = nt};
    if (l)
        return l->be->ops->run(l->be, l, &ctx);
    return kiln__ref_kernel(n->op)(&ctx);
}

static bool same_bits(const kiln_tensor *a, const kiln_tensor *b)
{
    return a->data && b->data && a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes);
}

static bool close_to(const kiln_tensor *a, const kiln_tensor *b, double tol)
{
    if (!a->data || !b->data || a->nbytes != b->nbytes)
        return false;
    const float *p = a->data, *q = b->data;
    for (size_t i = 0; i < a->nbytes / sizeof(float); i++)
        if (!(fabs((double)p[i] - (double)q[i]) <= tol * fmax(1.0, fabs((double)q[i]))))
            return false;
    return true;
}

/* A layer over a modified copy of l's blob (aligned like an engine's), run with the weights
 * present (must equal the unprepared result y0: the blob is ignored) and dropped (must fail). */
static void check_rejected(const kiln_node *n, const kiln_layer *l, const kiln_tensor *const *in, int n_in,
                           const kiln_tensor *y0, int what, int nt, const char *label)
{
    const kiln_backend *be = kiln__cpu_backend();
    size_t size = l->blob_size - (what == 3 ? 64 : 0);
    uint8_t *mem = malloc(l->blob_size + 128);
    uint8_t *b = mem + (64 - (uintptr_t)mem % 64) % 64 + (what == 4 ? 4 : 0);
    memcpy(b, l->blob, l->blob_size);
    kiln_prep_hdr h;
    memcpy(&h, b, sizeof h);
    if (what == 0)
        h.layout = h.layout == KILN_PREP_GEMM_B ? KILN_PREP_WINO_F23 : KILN_PREP_GEMM_B;
    else if (what == 1)
        h.dims[0]++;
    else if (what == 2)
        h.magic[0] = 'X';
    else if (what == 3)
        h.payload_bytes -= 64;
    else if (what == 5)
        h.gemm_kind ^= 7;
    memcpy(b, &h, sizeof h);
    kiln_layer bad = *l;
    bad.blob = b;
    bad.blob_size = size;
    bad.blob_mem = NULL;
    kiln_tensor y;
    CHECK_MSG(run(n, &bad, in, n_in, &y, nt) == KILN_OK && same_bits(&y, y0), "%s: rejected blob %d", label, what);
    kiln__tensor_release(&y);
    const kiln_tensor *dropped_in[4];
    kiln_tensor wd = *in[1];
    wd.data = NULL;
    wd.nbytes = 0;
    for (int i = 0; i < n_in; i++)
        dropped_in[i] = i == 1 ? &wd : in[i];
    CHECK_MSG(run(n, &bad, dropped_in, n_in, &y, nt) == KILN_ERR_UNSUPPORTED, "%s: blob %d, weights dropped", label,
              what);
    kiln__tensor_release(&y);
    kiln_clear_last_error();
    (void)be;
    free(mem);
}

/* GEMM panels packed for the other x86 GEMM family (an engine built on a host of another ISA,
 * weights stored only packed): `load` repacks them for this host into a blob the layer owns, and
 * the layer computes the same bits from it as from its own panels (y1), the weights dropped. */
static void check_foreign_panels(const kiln_node *n, const kiln_layer *l, const kiln_tensor *const *in, int n_in,
                                 const kiln_tensor *y1, int nt, const char *label)
{
    kiln_prep_hdr h;
    if (!kiln__prep_header(l->blob, l->blob_size, &h) || h.layout != KILN_PREP_GEMM_B)
        return;
    CHECK_MSG(h.replaces == 2u, "%s: GEMM panels replace the weights on every host (%u)", label, h.replaces);
    const kiln_backend *be = kiln__cpu_backend();
    int64_t K = h.dims[0], N = h.dims[1], tb = h.dims[3];
    int kind = kiln__sgemm_kind() == 3 ? 2 : 3, nr = kind == 3 ? 32 : 16;
    size_t payload = (size_t)((N + nr - 1) / nr * K * nr) * sizeof(float), size = KILN_PREP_HDR_BYTES + payload;
    uint8_t *mem = aligned_alloc(64, (size + 63) / 64 * 64);
    memset(mem, 0, size);
    h.gemm_kind = (uint32_t)kind;
    h.dims[2] = nr;
    h.payload_bytes = payload;
    memcpy(mem, &h, sizeof h);
    float *p = (float *)(mem + KILN_PREP_HDR_BYTES);
    const float *w = in[1]->data;
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++)
            p[(j / nr) * K * nr + k * nr + j % nr] = tb ? w[j * K + k] : w[k * N + j];
    kiln_layer r;
    CHECK_MSG(be->ops->load(be, n, l->kernel, mem, size, &r) == KILN_OK && r.blob && r.blob_mem && r.blob != mem &&
                  r.replaces == h.replaces,
              "%s: family %d panels not repacked on load", label, kind);
    kiln_prep_hdr rh;
    CHECK(r.blob && kiln__prep_header(r.blob, r.blob_size, &rh) && rh.gemm_kind == (uint32_t)kiln__sgemm_kind() &&
          rh.dims[2] == kiln__sgemm_nr() && rh.replaces == h.replaces);
    kiln_tensor wd = *in[1], y2;
    wd.data = NULL;
    wd.nbytes = 0;
    const kiln_tensor *din[4];
    for (int i = 0; i < n_in; i++)
        din[i] = i == 1 ? &wd : in[i];
    CHECK_MSG(run(n, &r, din, n_in, &y2, nt) == KILN_OK && same_bits(y1, &y2), "%s: repacked family %d panels",
              label, kind);
    kiln__tensor_release(&y2);
    be->ops->release(be, &r);
    free(mem);
}

/* exact: the unprepared layer takes the same path, so the results must be bit-identical; else
 * within tol (relative, at least absolute). */
static void check_layer_tol(const kiln_node *node, const kiln_tensor *const *in, int n_in, bool expect_blob, bool exact,
                            double tol, const char *label)
{
    kiln_node nn = *node;
    nn.n_in = n_in;   /* the prepare function sees the node's input count */
    const kiln_node *n = &nn;
    const kiln_backend *be = kiln__cpu_backend();
    const kiln_tensor *consts[4] = {NULL, in[1], NULL, NULL};
    kiln_layer l;
    CHECK_MSG(be->ops->prepare(be, n, consts, &l) == KILN_OK, "%s: %s", label, kiln_last_error());
    CHECK_MSG(!l.blob == !expect_blob, "%s: blob %p, expected %d", label, l.blob, expect_blob);
    CHECK(!l.blob || (uintptr_t)l.blob % 64 == 0);
    kiln_layer none;
    CHECK(be->ops->prepare(be, n, NULL, &none) == KILN_OK && !none.blob);   /* on the fly: packs nothing */
    for (int nt = 1; nt <= 3; nt += 2) {
        kiln_tensor y0, y1;
        CHECK_MSG(run(n, NULL, in, n_in, &y0, nt) == KILN_OK, "%s: %s", label, kiln_last_error());
        CHECK_MSG(run(n, &l, in, n_in, &y1, nt) == KILN_OK, "%s: %s", label, kiln_last_error());
        if (exact)
            CHECK_MSG(same_bits(&y0, &y1), "%s (%d threads): prepared differs from unprepared", label, nt);
        else
            CHECK_MSG(close_to(&y1, &y0, tol), "%s (%d threads): prepared too far from unprepared", label, nt);
        if (l.blob && nt == 3) {
            /* restored from the blob as an engine does: borrowed, same result */
            kiln_layer r;
            CHECK(be->ops->load(be, n, l.kernel, l.blob, l.blob_size, &r) == KILN_OK && r.blob == l.blob &&
                  !r.blob_mem);
            kiln_tensor y2;
            CHECK(run(n, &r, in, n_in, &y2, nt) == KILN_OK && same_bits(&y1, &y2));
            kiln__tensor_release(&y2);
            be->ops->release(be, &r);   /* must not free the borrowed blob (ASan) */
            CHECK(be->ops->load(be, n, l.kernel + 1, l.blob, l.blob_size, &r) == KILN_ERR_PARSE);
            CHECK(be->ops->load(be, n, l.kernel, l.blob, 100, &r) == KILN_ERR_PARSE);
            kiln_clear_last_error();
            /* the weights dropped: the blob alone computes the same bits */
            kiln_tensor wd = *in[1];
            wd.data = NULL;
            wd.nbytes = 0;
            const kiln_tensor *din[4];
            for (int i = 0; i < n_in; i++)
                din[i] = i == 1 ? &wd : in[i];
            if (l.replaces & 2u) {
                CHECK_MSG(run(n, &l, din, n_in, &y2, nt) == KILN_OK && same_bits(&y1, &y2), "%s: dropped weights",
                          label);
                kiln__tensor_release(&y2);
            }
            CHECK(run(n, NULL, din, n_in, &y2, nt) == KILN_ERR_UNSUPPORTED);
            kiln__tensor_release(&y2);
            kiln_clear_last_error();
            for (int what = 0; what <= 5; what++)
                check_rejected(n, &l, in, n_in, &y0, what, nt, label);
            check_foreign_panels(n, &l, in, n_in, &y1, nt, label);
        }
        kiln__tensor_release(&y0);
        kiln__tensor_release(&y1);
    }
    be->ops->release(be, &l);
    CHECK(!l.blob && !l.blob_mem);
}

static void check_layer(const kiln_node *node, const kiln_tensor *const *in, int n_in, bool expect_blob, bool exact,
                        const char *label)
{
    check_layer_tol(node, in, n_in, expect_blob, exact, 1e-4, label);
}

static void test_conv(void)
{
    unsigned long long seed = 12345;
    /* the Winograd path needs the AVX-512 GEMM or the AVX2 one (x86/conv_wino.c: AVX-512 or AVX2 transforms) */
    bool wino = kiln__sgemm_kind() >= 2;
    /* {N, C, H, W, M, group, pad, fused} */
    static const int64_t cases[][8] = {
        {1, 17, 9, 11, 19, 1, 1, 0},    /* few tiles: unprepared takes im2col, prepared Winograd */
        {2, 16, 23, 29, 33, 1, 1, 1},   /* enough tiles: both Winograd (prepared F(4x4), unprepared F(2x2)) */
        {1, 130, 19, 17, 130, 1, 1, 1}, /* over 2^14 channel pairs: both F(2x2), bit-identical */
        {1, 34, 9, 7, 36, 2, 0, 0},     /* groups, no padding */
        {1, 16, 1, 1, 16, 1, 1, 1},     /* one pixel */
        {1, 19, 30, 17, 21, 1, 2, 0},   /* pads 2 */
        {1, 3, 15, 15, 8, 1, 1, 0},     /* too few channels: nothing prepared */
        {1, 272, 5, 5, 272, 1, 1, 0},   /* transform over 4 MiB: nothing prepared (AVX2 GEMM: F(2x2)) */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t *k = cases[c];
        int64_t xd[4] = {k[0], k[1], k[2], k[3]}, wd[4] = {k[4], k[1] / k[5], 3, 3}, bd[1] = {k[4]};
        kiln_tensor x = mk(4, xd, &seed), w = mk(4, wd, &seed), b = mk(1, bd, &seed);
        int64_t pads[4] = {k[6], k[6], k[6], k[6]}, ks[2] = {3, 3};
        kiln_attr at[4] = {ints_attr("pads", 4, pads), int_attr("group", k[5]), ints_attr("kernel_shape", 2, ks)};
        bool fused = k[7] != 0;
        kiln_attr act = {.name = (char *)"activation", .type = KILN_ATTR_STRING, .s = (char *)"Relu", .s_len = 4};
        if (fused)
            at[3] = act;
        kiln_node n = node_of(fused ? KILN_OP_FusedConv : KILN_OP_Conv, fused ? "FusedConv" : "Conv", at, fused ? 4 : 3);
        int64_t Ho = k[2] + 2 * k[6] - 2, Wo = k[3] + 2 * k[6] - 2, tiles = ((Ho + 1) / 2) * ((Wo + 1) / 2);
        /* filters transformed at build time up to 2^16 channel pairs, 2^18 with the AVX2 GEMM (x86/conv_wino.c) */
        int64_t prep_max = kiln__sgemm_kind() == 2 ? (int64_t)1 << 18 : 65536;
        bool eligible = wino && k[1] / k[5] >= 16 && k[4] / k[5] >= 16 && (k[1] / k[5]) * (k[4] / k[5]) <= prep_max;
        const kiln_tensor *in[3] = {&x, &w, &b};
        char label[64];
        snprintf(label, sizeof label, "conv case %zu", c);
        /* prepared filters are F(4x4, 3x3) up to 2^14 channel pairs (x86/conv_wino.c WINO43_MAX_PAIRS; with
         * the AVX2 GEMM every prepared layer, up to 2^16), the unprepared layer transforms F(2x2, 3x3) per
         * call: the same path only above that */
        int64_t pairs = (k[1] / k[5]) * (k[4] / k[5]);
        bool f43 = pairs <= (kiln__sgemm_kind() == 2 ? 65536 : 16384);
        /* F(4x4) against F(2x2) over more than 2^14 pairs (AVX2 only): F(4x4)'s tolerance (test_conv.c) */
        check_layer_tol(&n, in, 3, eligible, !eligible || (tiles >= 40 && !f43), pairs > 16384 ? 5e-4 : 1e-4, label);
        kiln__tensor_release(&x);
        kiln__tensor_release(&w);
        kiln__tensor_release(&b);
    }
    /* strided: no Winograd, nothing prepared */
    int64_t xd[4] = {1, 16, 12, 12}, wd[4] = {16, 16, 3, 3}, st[2] = {2, 2};
    kiln_tensor x = mk(4, xd, &seed), w = mk(4, wd, &seed);
    kiln_attr at[1] = {ints_attr("strides", 2, st)};
    kiln_node n = node_of(KILN_OP_Conv, "Conv", at, 1);
    const kiln_tensor *in[2] = {&x, &w};
    check_layer(&n, in, 2, false, true, "strided conv");
    kiln__tensor_release(&x);
    kiln__tensor_release(&w);
}

static void test_gemm(void)
{
    unsigned long long seed = 777;
    /* {M, K, N, batch} MatMul / FusedMatMul A [batch, M, K] x B [K, N] */
    static const int64_t mm[][4] = {{5, 37, 45, 1}, {1, 64, 33, 1}, {129, 70, 100, 1}, {7, 19, 3, 3}, {33, 1, 65, 2}};
    for (size_t c = 0; c < sizeof mm / sizeof mm[0]; c++) {
        const int64_t *k = mm[c];
        int64_t ad[3] = {k[3], k[0], k[1]}, bd[2] = {k[1], k[2]}, cd[1] = {k[2]};
        kiln_tensor a = mk(3, ad, &seed), b = mk(2, bd, &seed), bias = mk(1, cd, &seed);
        /* the packed path over B either way unless the unprepared GEMM is small (direct path) */
        double flops = 2.0 * (double)(k[0] * k[3]) * (double)k[1] * (double)k[2];
        bool exact = flops >= 65536.0 && k[0] * k[3] > 1 && k[2] > 1;
        char label[64];
        snprintf(label, sizeof label, "matmul case %zu", c);
        kiln_node n = node_of(KILN_OP_MatMul, "MatMul", NULL, 0);
        const kiln_tensor *in[3] = {&a, &b, &bias};
        check_layer(&n, in, 2, true, exact, label);
        kiln_attr act = {.name = (char *)"activation", .type = KILN_ATTR_STRING, .s = (char *)"Relu", .s_len = 4};
        kiln_node f = node_of(KILN_OP_FusedMatMul, "FusedMatMul", &act, 1);
        snprintf(label, sizeof label, "fused matmul case %zu", c);
        check_layer(&f, in, 3, true, exact, label);
        kiln__tensor_release(&a);
        kiln__tensor_release(&b);
        kiln__tensor_release(&bias);
    }
    /* {M, K, N, transA, transB} Gemm / FusedGemm with alpha, beta and a bias */
    static const int64_t gm[][5] = {{3, 41, 57, 0, 1}, {66, 31, 35, 1, 0}, {1, 2048, 99, 0, 1}, {40, 8, 300, 0, 0}};
    for (size_t c = 0; c < sizeof gm / sizeof gm[0]; c++) {
        const int64_t *k = gm[c];
        int64_t ad[2] = {k[3] ? k[1] : k[0], k[3] ? k[0] : k[1]}, bd[2] = {k[4] ? k[2] : k[1], k[4] ? k[1] : k[2]};
        int64_t cd[1] = {k[2]};
        kiln_tensor a = mk(2, ad, &seed), b = mk(2, bd, &seed), bias = mk(1, cd, &seed);
        double flops = 2.0 * (double)k[0] * (double)k[1] * (double)k[2];
        bool exact = flops >= 65536.0 && k[0] > 1 && k[2] > 1;
        kiln_attr at[5] = {int_attr("transA", k[3]), int_attr("transB", k[4]),
                           {.name = (char *)"alpha", .type = KILN_ATTR_FLOAT, .f = 0.75f},
                           {.name = (char *)"beta", .type = KILN_ATTR_FLOAT, .f = 1.0f}};
        char label[64];
        snprintf(label, sizeof label, "gemm case %zu", c);
        kiln_node n = node_of(KILN_OP_Gemm, "Gemm", at, 4);
        const kiln_tensor *in[3] = {&a, &b, &bias};
        check_layer(&n, in, 3, true, exact, label);
        at[4] = (kiln_attr){.name = (char *)"activation", .type = KILN_ATTR_STRING, .s = (char *)"Relu", .s_len = 4};
        kiln_node f = node_of(KILN_OP_FusedGemm, "FusedGemm", at, 5);
        snprintf(label, sizeof label, "fused gemm case %zu", c);
        check_layer(&f, in, 3, true, exact, label);
        kiln__tensor_release(&a);
        kiln__tensor_release(&b);
        kiln__tensor_release(&bias);
    }
    /* integer and 1-D right operands: nothing to pack */
    int64_t d1[1] = {5}, d2[2] = {3, 5};
    kiln_tensor a = mk(2, d2, &seed), v = mk(1, d1, &seed);
    kiln_node n = node_of(KILN_OP_MatMul, "MatMul", NULL, 0);
    const kiln_tensor *in[2] = {&a, &v};
    check_layer(&n, in, 2, false, true, "matmul by a vector");
    kiln__tensor_release(&a);
    kiln__tensor_release(&v);
}

/* BF16 weights (qgemm_bf16.h): panels packed at build time, bit-identical to packing per run; the
 * weights are replaced only where the BF16 GEMM surely takes the layer (alpha 1, a constant bias). */
static kiln_tensor to_bf16(const kiln_tensor *f)
{
    kiln_tensor t;
    CHECK(kiln__tensor_alloc(&t, KILN_DT_BFLOAT16, f->ndim, f->dims) == KILN_OK);
    kiln__f32_to_bf16_array(t.data, f->data, kiln_tensor_numel(f));
    return t;
}

static void test_bf16(void)
{
    unsigned long long seed = 4242;
    /* {M, K, N, op: 0 MatMul, 1 FusedMatMul, 2 Gemm alpha 1 transB 1, 3 Gemm alpha 0.75} */
    static const int64_t cs[][4] = {{5, 37, 45, 0}, {129, 70, 100, 0}, {33, 1, 65, 1}, {7, 96, 17, 1},
                                    {3, 41, 57, 2}, {40, 8, 300, 2}, {6, 31, 35, 3}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const int64_t *k = cs[c];
        bool tb = k[3] == 2;
        int64_t ad[2] = {k[0], k[1]}, bd[2] = {tb ? k[2] : k[1], tb ? k[1] : k[2]}, cd[1] = {k[2]};
        kiln_tensor a = mk(2, ad, &seed), bf = mk(2, bd, &seed), bias = mk(1, cd, &seed), b = to_bf16(&bf);
        kiln_attr at[4] = {int_attr("transB", tb),
                           {.name = (char *)"alpha", .type = KILN_ATTR_FLOAT, .f = k[3] == 3 ? 0.75f : 1.0f},
                           {.name = (char *)"activation", .type = KILN_ATTR_STRING, .s = (char *)"Relu", .s_len = 4}};
        kiln_node n = k[3] == 0   ? node_of(KILN_OP_MatMul, "MatMul", NULL, 0)
                      : k[3] == 1 ? node_of(KILN_OP_FusedMatMul, "FusedMatMul", &at[2], 1)
                                  : node_of(KILN_OP_Gemm, "Gemm", at, 2);
        const kiln_tensor *in[3] = {&a, &b, &bias};
        char label[64];
        snprintf(label, sizeof label, "bf16 case %zu", c);
        check_layer(&n, in, k[3] == 0 ? 2 : 3, true, true, label);
        /* where the BF16 GEMM surely runs, the blob replaces the weights */
        kiln_node nn = n;
        nn.n_in = k[3] == 0 ? 2 : 3;
        const kiln_tensor *consts[3] = {NULL, &b, &bias};
        kiln_layer l;
        CHECK(kiln__cpu_backend()->ops->prepare(kiln__cpu_backend(), &nn, consts, &l) == KILN_OK);
        kiln_prep_hdr h;
        CHECK(kiln__prep_header(l.blob, l.blob_size, &h) && h.layout == KILN_PREP_BGEMM_B);
        /* portable panels (gemm_kind 0): on every host, AVX512-BF16 or not */
        CHECK_MSG(h.gemm_kind == 0 && h.engine_isa == 0, "%s: gemm kind %u", label, h.gemm_kind);
        CHECK_MSG(!(h.replaces & 2u) == (k[3] == 3), "%s: replaces %u", label, h.replaces);
        kiln__cpu_backend()->ops->release(kiln__cpu_backend(), &l);
        kiln__tensor_release(&a);
        kiln__tensor_release(&bf);
        kiln__tensor_release(&b);
        kiln__tensor_release(&bias);
    }
}

/* BF16 conv weights (qgemm_bf16.h): rows made at build time, bit-identical to making them per run;
 * they replace the weights where the BF16 conv surely runs (stride product <= 16). */
static void test_bf16_conv(void)
{
    unsigned long long seed = 99;
    /* {N, C, H, W, M, k, stride h, stride w, fused} */
    static const int64_t cs[][9] = {{1, 5, 9, 11, 7, 3, 1, 1, 0}, {2, 3, 13, 10, 17, 3, 2, 2, 1},
                                    {1, 16, 7, 9, 33, 1, 1, 1, 0}, {1, 9, 12, 12, 5, 1, 2, 2, 1},
                                    {1, 4, 11, 13, 6, 3, 3, 2, 0}, {1, 3, 17, 17, 4, 1, 5, 5, 0}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const int64_t *k = cs[c];
        int64_t xd[4] = {k[0], k[1], k[2], k[3]}, wd[4] = {k[4], k[1], k[5], k[5]}, bd[1] = {k[4]};
        int64_t strides[2] = {k[6], k[7]}, pads[4] = {k[5] / 2, k[5] / 2, k[5] / 2, k[5] / 2};
        kiln_tensor x = mk(4, xd, &seed), wf = mk(4, wd, &seed), bias = mk(1, bd, &seed), w = to_bf16(&wf);
        kiln_attr at[3] = {{.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = 2, .ints = strides},
                           {.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4, .ints = pads},
                           {.name = (char *)"activation", .type = KILN_ATTR_STRING, .s = (char *)"Relu", .s_len = 4}};
        kiln_node n = k[8] ? node_of(KILN_OP_FusedConv, "FusedConv", at, 3) : node_of(KILN_OP_Conv, "Conv", at, 2);
        const kiln_tensor *in[3] = {&x, &w, &bias};
        char label[64];
        snprintf(label, sizeof label, "bf16 conv case %zu", c);
        check_layer(&n, in, 3, true, true, label);
        kiln_node nn = n;
        nn.n_in = 3;
        const kiln_tensor *consts[3] = {NULL, &w, NULL};
        kiln_layer l;
        CHECK(kiln__cpu_backend()->ops->prepare(kiln__cpu_backend(), &nn, consts, &l) == KILN_OK);
        kiln_prep_hdr h;
        CHECK(kiln__prep_header(l.blob, l.blob_size, &h) && h.layout == KILN_PREP_BCONV_W);
        CHECK_MSG(h.gemm_kind == 0 && h.engine_isa == 0, "%s: gemm kind %u", label, h.gemm_kind);
        CHECK_MSG(!(h.replaces & 2u) == (k[6] * k[7] > 16), "%s: replaces %u", label, h.replaces);
        kiln__cpu_backend()->ops->release(kiln__cpu_backend(), &l);
        kiln__tensor_release(&x);
        kiln__tensor_release(&wf);
        kiln__tensor_release(&w);
        kiln__tensor_release(&bias);
    }
}

/* BF16 depthwise convs: no packed rows (prepare keeps the weights), and the result is the float32 depthwise kernel's on
 * the activations rounded to BF16 and the weights widened, bit for bit -- the products docs/PRECISION.md defines for
 * BF16 -- with 1 and 3 threads, strides 1 and 2, 3x3 and 5x5, the fused form with a bias and Relu. */
static void test_bf16_dw(void)
{
    unsigned long long seed = 7;
    /* {C, H, W, k, stride, fused} */
    static const int64_t cs[][6] = {{5, 9, 11, 3, 1, 0}, {16, 20, 37, 5, 2, 1}, {3, 13, 10, 5, 1, 1}, {24, 8, 8, 3, 2, 0}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const int64_t *k = cs[c];
        int64_t xd[4] = {1, k[0], k[1], k[2]}, wd[4] = {k[0], 1, k[3], k[3]}, bd[1] = {k[0]};
        int64_t strides[2] = {k[4], k[4]}, pads[4] = {k[3] / 2, k[3] / 2, k[3] / 2, k[3] / 2};
        kiln_tensor x = mk(4, xd, &seed), wf = mk(4, wd, &seed), bias = mk(1, bd, &seed), w = to_bf16(&wf);
        kiln_tensor xb = to_bf16(&x), xr, wr;
        CHECK(kiln__tensor_alloc(&xr, KILN_DT_FLOAT32, 4, xd) == KILN_OK && kiln__tensor_alloc(&wr, KILN_DT_FLOAT32, 4, wd) == KILN_OK);
        kiln__bf16_to_f32_array(xr.data, xb.data, kiln_tensor_numel(&x));
        kiln__bf16_to_f32_array(wr.data, w.data, kiln_tensor_numel(&w));
        kiln_attr at[4] = {{.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = 2, .ints = strides},
                           {.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4, .ints = pads},
                           {.name = (char *)"group", .type = KILN_ATTR_INT, .i = k[0]},
                           {.name = (char *)"activation", .type = KILN_ATTR_STRING, .s = (char *)"Relu", .s_len = 4}};
        kiln_node n = k[5] ? node_of(KILN_OP_FusedConv, "FusedConv", at, 4) : node_of(KILN_OP_Conv, "Conv", at, 3);
        n.n_in = 3;
        const kiln_tensor *consts[3] = {NULL, &w, NULL}, *in[3] = {&x, &w, &bias}, *inr[3] = {&xr, &wr, &bias};
        kiln_layer l;
        CHECK(kiln__cpu_backend()->ops->prepare(kiln__cpu_backend(), &n, consts, &l) == KILN_OK && !l.blob);
        for (int nt = 1; nt <= 3; nt += 2) {
            kiln_tensor y, yr;
            CHECK_MSG(run(&n, NULL, in, 3, &y, nt) == KILN_OK && run(&n, NULL, inr, 3, &yr, nt) == KILN_OK, "%s",
                      kiln_last_error());
            CHECK_MSG(same_bits(&y, &yr), "bf16 depthwise case %zu (%d threads): not the float32 kernel's on the "
                      "rounded operands", c, nt);
            kiln__tensor_release(&y);
            kiln__tensor_release(&yr);
        }
        kiln__tensor_release(&x), kiln__tensor_release(&xb), kiln__tensor_release(&xr), kiln__tensor_release(&wf);
        kiln__tensor_release(&w), kiln__tensor_release(&wr), kiln__tensor_release(&bias);
    }
}

int main(void)
{
    CHECK(kiln__cpu_prep_fn(KILN_OP_Conv) && kiln__cpu_prep_fn(KILN_OP_FusedGemm) && !kiln__cpu_prep_fn(KILN_OP_Add));
    test_conv();
    test_gemm();
    test_bf16();
    test_bf16_conv();
    test_bf16_dw();
    return TEST_SUMMARY();
}
