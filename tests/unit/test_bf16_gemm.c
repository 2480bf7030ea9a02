/* BF16 GEMM (qgemm_bf16.h) and float32 x FP16 / BF16 weights in Conv, MatMul, Gemm and the fused
 * ops.
 *  - kiln__bgemm (vdpbf16ps where the host has AVX512-BF16, else the AVX2 tile; then each narrower
 *    tile the host can run: AVX2, portable; 1-3 threads, odd sizes, K past the AVX2 tile's chunk,
 *    epilogue) against a double-precision sum of bf16(A) x B: within float32 accumulation error.
 *  - MatMul / Gemm / FusedMatMul / FusedGemm with a BF16 weight against the float32 kernel run on
 *    bf16-rounded activations and widened weights (the same products; sums in another order).
 *  - Conv / FusedConv with BF16 weights (the BF16 GEMM over the padded image's stride phases: 1x1
 *    and 3x3 kernels, strides 1-3; bias, residual-free
 *    Relu) against the float32 Conv on rounded activations and widened weights, within float32
 *    summation error; every op with FP16 weights: exactly the float32 kernel on widened weights. */
#include "test.h"
#include "test_tensor.h"
#include "backend/cpu/qgemm_bf16.h"
#include "core/numfmt.h"
#include "test_pool.h"
#include <string.h>

static unsigned long long seed = 777;
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(test_rng(&seed) % (uint64_t)(hi - lo + 1)); }

static float bf16_round(float x) { return kiln__bf16_to_f32(kiln__f32_to_bf16(x)); }

static void test_core(int it)
{
    int64_t M = rnd(1, 30), N = rnd(1, 120), K = rnd(1, 260);
    if (it % 8 == 5) /* across the AVX2 tile's chunks of 256 k of A */
        M = rnd(1, 12), N = rnd(1, 60), K = rnd(255, 1300);
    if (it % 8 == 6) /* several 16-row AMX blocks, K whole 32-value steps (no tail), C rows padded */
        M = rnd(31, 90), N = rnd(16, 130), K = 32 * rnd(1, 12);
    int64_t ldc = N + (it % 8 == 6 || it % 8 == 2 ? rnd(0, 5) : 0);
    int th = (int)rnd(1, 3);
    float *A = malloc(sizeof(float) * (size_t)(M * K)), *C = malloc(sizeof(float) * (size_t)(M * ldc));
    uint16_t *B = malloc(sizeof(uint16_t) * (size_t)(K * N));
    float *bias = malloc(sizeof(float) * (size_t)N);
    for (int64_t i = 0; i < M * K; i++)
        A[i] = test_randf(&seed) * 4;
    for (int64_t i = 0; i < K * N; i++)
        B[i] = kiln__f32_to_bf16(test_randf(&seed));
    for (int64_t j = 0; j < N; j++)
        bias[j] = test_randf(&seed);
    kiln_bgemm_b *pb;
    CHECK(kiln__bgemm_pack_b(B, N, 1, K, N, &pb) == KILN_OK);
    kiln_epi e = {.bias = bias, .act = {it % 2 ? KILN_ACT_RELU : KILN_ACT_NONE, 0, 0}};
    for (int64_t i = 0; i < M * ldc; i++)
        C[i] = -7.0f;   /* the padding columns must keep it */
    kiln_bgemm g = {.M = M, .N = N, .K = K, .A = A, .lda = K, .b = pb, .C = C, .ldc = ldc, .epi = it % 3 ? &e : NULL};
    CHECK(kiln__bgemm(test_pool(th), th, &g) == KILN_OK);
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                double p = (double)bf16_round(A[i * K + k]) * kiln__bf16_to_f32(B[k * N + j]);
                s += p;
                mag += fabs(p);
            }
            if (g.epi) {
                s += bias[j];
                mag += fabs(bias[j]);
                if (e.act.kind == KILN_ACT_RELU)
                    s = s > 0 ? s : 0;
            }
            bad += !(fabs(C[i * ldc + j] - s) <= 1e-6 * mag + 1e-30);
        }
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < ldc; j++)
            bad += C[i * ldc + j] != -7.0f;
    CHECK_MSG(bad == 0, "bgemm (tile %d) M=%lld N=%lld K=%lld th=%d: %d outside the float32 accumulation bound",
              kiln__bgemm_isa(), (long long)M, (long long)N, (long long)K, th, bad);
    kiln__bgemm_free_b(pb);
    free(A), free(C), free(B), free(bias);
}

static kiln_tensor rand_f32(int nd, const int64_t *dims) { return test_tensor_f32(nd, dims, 1.0f, &seed); }

/* the low-precision copy of t (rounded) and t's float32 values replaced by the widened ones */
static kiln_tensor lowp_of(kiln_tensor *t, kiln_dtype dt)
{
    kiln_tensor o;
    memset(&o, 0, sizeof o);
    CHECK(kiln__tensor_alloc(&o, dt, t->ndim, t->dims) == KILN_OK);
    int64_t n = kiln_tensor_numel(t);
    kiln__f32_to_lowp_array(dt, o.data, t->data, n, true);
    kiln__lowp_to_f32_array(dt, t->data, o.data, n);
    return o;
}

static kiln_status run(kiln_op op, kiln_attr *attrs, int na, const kiln_tensor **in, int nin, int th, kiln_tensor *y)
{
    int ids[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    kiln_node node = {.name = (char *)"m", .op_type = (char *)kiln__op_name(op), .domain = (char *)"", .op = op,
                      .opset = 13, .n_in = nin, .n_out = 1, .in = ids, .out = ids + 7, .attrs = attrs, .n_attr = na};
    kiln_tensor *o[1] = {y};
    memset(y, 0, sizeof *y);
    kiln_kctx c = {.node = &node, .n_in = nin, .in = in, .n_out = 1, .out = o, .pool = test_pool(th), .nthreads = th};
    return kiln__ref_kernel(op)(&c);
}

static void test_op(int it)
{
    static const kiln_op ops[] = {KILN_OP_MatMul, KILN_OP_Gemm, KILN_OP_FusedMatMul, KILN_OP_FusedGemm, KILN_OP_Conv,
                                  KILN_OP_FusedConv};
    kiln_op op = ops[it % 6];
    kiln_dtype wdt = (it / 6) % 2 ? KILN_DT_FLOAT16 : KILN_DT_BFLOAT16;
    bool conv = op == KILN_OP_Conv || op == KILN_OP_FusedConv, gemm = op == KILN_OP_Gemm || op == KILN_OP_FusedGemm;
    int th = (int)rnd(1, 3);
    kiln_tensor x, w, b = {0};
    int64_t M = rnd(1, 20), N = rnd(1, 70), K = rnd(1, 90), kdepth = K;
    kiln_attr attrs[5];
    int na = 0, nin = 2;
    bool dw = false;   /* a depthwise convolution, one output a channel: the float32 rows, rounding each input row
                        * as they copy it (two a channel: the BF16 GEMM per group) */
    static const int64_t pads[4] = {1, 0, 1, 1}, no_pads[4] = {0, 0, 0, 0};
    int64_t strides[2] = {1, 1};
    kiln_tensor res = {0};
    bool tb = gemm && rnd(0, 1);
    if (conv) {
        int64_t kk = rnd(0, 2) ? 3 : 1; /* 3x3 padded, or 1x1 (pointwise / strided downsampling) */
        int64_t xd[4] = {rnd(1, 2), rnd(1, 6), rnd(3, 40), rnd(3, 40)}, wd[4] = {rnd(1, 9), xd[1], kk, kk};
        if (rnd(0, 2) == 0) { /* group = C, 1 or 2 outputs a channel */
            wd[0] = xd[1] * rnd(1, 2);
            wd[1] = 1;
            dw = wd[0] == xd[1];
            attrs[na++] = (kiln_attr){.name = (char *)"group", .type = KILN_ATTR_INT, .i = xd[1]};
        }
        x = rand_f32(4, xd), w = rand_f32(4, wd);
        kdepth = wd[1] * kk * kk;
        attrs[na++] = (kiln_attr){.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4,
                                  .ints = (int64_t *)(kk == 3 ? pads : no_pads)};
        /* strides 2 and 3: the stride phases of the padded image */
        strides[0] = rnd(0, 2) ? 1 : rnd(2, 3), strides[1] = rnd(0, 3) ? strides[0] : rnd(1, 3);
        attrs[na++] = (kiln_attr){.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = 2, .ints = strides};
        int64_t bd = wd[0];
        b = rand_f32(1, &bd);
        nin = 3;
        if (op == KILN_OP_FusedConv && rnd(0, 1)) { /* residual of the output's shape */
            int64_t ph = kk == 3 ? 2 : 0, pw = kk == 3 ? 1 : 0;
            int64_t rd[4] = {xd[0], wd[0], (xd[2] + ph - kk) / strides[0] + 1, (xd[3] + pw - kk) / strides[1] + 1};
            res = rand_f32(4, rd);
            nin = 4;
        }
    } else {
        int64_t xd[3] = {rnd(1, 2), M, K}, wd[2] = {tb ? N : K, tb ? K : N}, bd = N;
        x = gemm ? rand_f32(2, xd + 1) : rand_f32(3, xd), w = rand_f32(2, wd);
        if (gemm)
            attrs[na++] = (kiln_attr){.name = (char *)"transB", .type = KILN_ATTR_INT, .i = tb};
        if (op != KILN_OP_MatMul && rnd(0, 1))
            b = rand_f32(1, &bd), nin = 3;
    }
    if (op == KILN_OP_FusedConv || op == KILN_OP_FusedMatMul || op == KILN_OP_FusedGemm)
        attrs[na++] = (kiln_attr){.name = (char *)"activation", .type = KILN_ATTR_STRING, .s = (char *)"Relu", .s_len = 4};
    kiln_tensor wl = lowp_of(&w, wdt); /* w now holds the widened values */
    kiln_tensor xr = x;                 /* the activations the float32 kernel should see */
    if (wdt == KILN_DT_BFLOAT16) {
        memset(&xr, 0, sizeof xr);
        CHECK(kiln__tensor_alloc(&xr, KILN_DT_FLOAT32, x.ndim, x.dims) == KILN_OK);
        for (int64_t i = 0; i < kiln_tensor_numel(&x); i++)
            ((float *)xr.data)[i] = bf16_round(((float *)x.data)[i]);
    }
    const kiln_tensor *in_mixed[4] = {&x, &wl, b.data ? &b : NULL, &res}, *in_f32[4] = {&xr, &w, b.data ? &b : NULL, &res};
    kiln_tensor y1, y2;
    kiln_status s1 = run(op, attrs, na, in_mixed, nin, th, &y1), s2 = run(op, attrs, na, in_f32, nin, th, &y2);
    CHECK_MSG(s1 == KILN_OK && s2 == KILN_OK, "%s: %s", kiln__op_name(op), kiln_last_error());
    /* the same float32 kernel on the same values: FP16 weights, and BF16 depthwise layers (rounded rows) */
    bool exact = wdt == KILN_DT_FLOAT16 || dw;
    int bad = 0;
    if (s1 == KILN_OK && s2 == KILN_OK) {
        CHECK(y1.dtype == KILN_DT_FLOAT32 && kiln_tensor_numel(&y1) == kiln_tensor_numel(&y2));
        for (int64_t i = 0; i < kiln_tensor_numel(&y1); i++) {
            float a = ((float *)y1.data)[i], c = ((float *)y2.data)[i];
            bad += exact ? memcmp(&a, &c, 4) != 0 : !(fabsf(a - c) <= 2e-5f * (1 + fabsf(c)) * sqrtf((float)kdepth));
        }
    }
    CHECK_MSG(bad == 0, "%s%s with %s weights (th=%d): %d differ", kiln__op_name(op), dw ? " (depthwise)" : "",
              kiln_dtype_name(wdt), th, bad);
    kiln__tensor_release(&y1), kiln__tensor_release(&y2), kiln__tensor_release(&wl), kiln__tensor_release(&w);
    if (xr.data != x.data)
        kiln__tensor_release(&xr);
    kiln__tensor_release(&x);
    if (b.data)
        kiln__tensor_release(&b);
    if (res.data)
        kiln__tensor_release(&res);
}

int main(void)
{
    int isa = kiln__bgemm_isa();
    printf("AVX512-BF16 %s; tile %s\n", kiln__bgemm_available() ? "present" : "absent",
           isa == 3 ? "AMX" : isa == 2 ? "AVX512-BF16" : isa == 1 ? "AVX2" : "portable");
    kiln__bgemm_set_isa_cap(4);   /* AMX (where the host has it) for every shape, the small ones too */
    for (int i = 0; i < 120; i++)
        test_core(i);
    /* the narrower tiles this host can run too: AVX512-BF16 (on AMX hosts), AVX2, portable */
    for (int cap = isa - 1; cap >= 0; cap--) {
        kiln__bgemm_set_isa_cap(cap);
        CHECK(kiln__bgemm_isa() == cap);
        for (int i = 0; i < 60; i++)
            test_core(i);
    }
    kiln__bgemm_set_isa_cap(3);
    for (int i = 0; i < 144; i++)
        test_op(i);
    return TEST_SUMMARY();
}
