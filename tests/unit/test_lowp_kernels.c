/* Reference kernels on reduced-precision types: Cast / CastLike to and from FP8 (ONNX Cast-19
 * with 'saturate'), QuantizeLinear / DequantizeLinear with FP8 (opset 19), and the FP16 / BF16
 * array paths: every element must equal the scalar numfmt conversion (whose correctness
 * test_numfmt checks exhaustively), on 1 and 2 threads, sizes past the threading threshold. */
#include "test.h"
#include "backend/kernel.h"
#include "test_pool.h"
#include <string.h>

enum { N = 70001 };   /* odd, past the kernels' parallel threshold */

static kiln_status run_cast(kiln_op op, const kiln_tensor *x, const kiln_tensor *like, int64_t to, int sat,
                            int nthreads, kiln_tensor *y)
{
    kiln_attr attrs[2] = {{.name = (char *)"to", .type = KILN_ATTR_INT, .i = to},
                          {.name = (char *)"saturate", .type = KILN_ATTR_INT, .i = sat}};
    int ids[3] = {0, 1, 2};
    kiln_node node = {.name = (char *)"c", .op_type = (char *)kiln__op_name(op), .domain = (char *)"", .op = op,
                      .opset = 19, .n_in = like ? 2 : 1, .n_out = 1, .in = ids, .out = ids + 2,
                      .attrs = op == KILN_OP_Cast ? attrs : attrs + 1, .n_attr = op == KILN_OP_Cast ? 2 : 1};
    if (sat < 0)
        node.n_attr--;   /* attribute absent: default saturate = 1 */
    const kiln_tensor *in[2] = {x, like};
    kiln_tensor *out[1] = {y};
    kiln_kctx ctx = {.node = &node, .n_in = node.n_in, .in = in, .n_out = 1, .out = out, .pool = test_pool(nthreads),
                     .nthreads = nthreads};
    memset(y, 0, sizeof *y);
    return kiln__ref_kernel(op)(&ctx);
}

static kiln_status run_qdq(kiln_op op, const kiln_tensor *x, const kiln_tensor *s, const kiln_tensor *z, int sat,
                           kiln_tensor *y)
{
    kiln_attr attrs[2] = {{.name = (char *)"saturate", .type = KILN_ATTR_INT, .i = sat},
                          {.name = (char *)"axis", .type = KILN_ATTR_INT, .i = 0}};
    int ids[4] = {0, 1, 2, 3};
    kiln_node node = {.name = (char *)"q", .op_type = (char *)kiln__op_name(op), .domain = (char *)"", .op = op,
                      .opset = 19, .n_in = z ? 3 : 2, .n_out = 1, .in = ids, .out = ids + 3, .attrs = attrs,
                      .n_attr = 2};
    const kiln_tensor *in[3] = {x, s, z};
    kiln_tensor *out[1] = {y};
    kiln_kctx ctx = {.node = &node, .n_in = node.n_in, .in = in, .n_out = 1, .out = out, .nthreads = 1};
    memset(y, 0, sizeof *y);
    return kiln__ref_kernel(op)(&ctx);
}

static kiln_tensor vec(kiln_dtype dt, int64_t n, void *data)
{
    kiln_tensor t = {.dtype = dt, .ndim = 1, .data = data, .nbytes = (size_t)n * kiln_dtype_size(dt)};
    t.dims[0] = n;
    return t;
}

int main(void)
{
    static const kiln_dtype f8[] = {KILN_DT_FP8E4M3, KILN_DT_FP8E4M3FNUZ, KILN_DT_FP8E5M2, KILN_DT_FP8E5M2FNUZ};
    unsigned long long seed = 42;
    float *x = malloc(sizeof(float) * N);
    uint8_t *codes = malloc(N);
    for (int i = 0; i < N; i++) {
        x[i] = test_randf(&seed) * ldexpf(1, (int)(test_rng(&seed) % 48) - 24);   /* 2^-24 .. 2^24 */
        codes[i] = (uint8_t)test_rng(&seed);
    }
    x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = -0.0f, x[4] = 1e30f, x[5] = -465.0f;
    kiln_tensor tx = vec(KILN_DT_FLOAT32, N, x), y, z;
    for (int t = 0; t < 4; t++)
        for (int sat = -1; sat < 2; sat++)
            for (int th = 1; th <= 2; th++) {
                CHECK(run_cast(KILN_OP_Cast, &tx, NULL, f8[t], sat, th, &y) == KILN_OK && y.dtype == f8[t]);
                int bad = 0;
                for (int i = 0; i < N && y.data; i++)
                    bad += ((uint8_t *)y.data)[i] != kiln__f32_to_fp8(f8[t], x[i], sat != 0);
                CHECK_MSG(bad == 0, "Cast float32 -> %s saturate=%d threads=%d: %d mismatches",
                          kiln_dtype_name(f8[t]), sat, th, bad);
                kiln__tensor_release(&y);
            }
    /* FP8 -> float32 / float16 / another FP8 type, and CastLike */
    for (int t = 0; t < 4; t++) {
        kiln_tensor tc = vec(f8[t], N, codes);
        CHECK(run_cast(KILN_OP_Cast, &tc, NULL, KILN_DT_FLOAT32, 1, 2, &y) == KILN_OK);
        int bad = 0;
        for (int i = 0; i < N && y.data; i++) {
            float got = ((float *)y.data)[i], want = kiln__fp8_to_f32(f8[t], codes[i]);
            bad += !(got == want || (isnan(got) && isnan(want))) || signbit(got) != signbit(want);
        }
        CHECK_MSG(bad == 0, "Cast %s -> float32: %d mismatches", kiln_dtype_name(f8[t]), bad);
        kiln__tensor_release(&y);
        CHECK(run_cast(KILN_OP_Cast, &tc, NULL, KILN_DT_FLOAT16, 1, 1, &y) == KILN_OK);
        bad = 0;
        for (int i = 0; i < N && y.data; i++)
            bad += ((uint16_t *)y.data)[i] != kiln__f32_to_f16(kiln__fp8_to_f32(f8[t], codes[i]));
        CHECK_MSG(bad == 0, "Cast %s -> float16: %d mismatches", kiln_dtype_name(f8[t]), bad);
        kiln__tensor_release(&y);
        kiln_tensor like = vec(f8[(t + 1) % 4], 1, codes);
        CHECK(run_cast(KILN_OP_CastLike, &tc, &like, 0, 0, 2, &y) == KILN_OK && y.dtype == like.dtype);
        bad = 0;
        for (int i = 0; i < N && y.data; i++)
            bad += ((uint8_t *)y.data)[i] != kiln__f32_to_fp8(like.dtype, kiln__fp8_to_f32(f8[t], codes[i]), false);
        CHECK_MSG(bad == 0, "CastLike %s -> %s: %d mismatches", kiln_dtype_name(f8[t]), kiln_dtype_name(like.dtype), bad);
        kiln__tensor_release(&y);
    }
    /* int32 -> FP8 and FP8 -> int64 go through float32 */
    int32_t iv[5] = {0, 1, -7, 300, 100000};
    kiln_tensor ti = vec(KILN_DT_INT32, 5, iv);
    CHECK(run_cast(KILN_OP_Cast, &ti, NULL, KILN_DT_FP8E4M3, 1, 1, &y) == KILN_OK);
    CHECK(y.data && ((uint8_t *)y.data)[4] == 0x7e && ((uint8_t *)y.data)[3] == kiln__f32_to_fp8(KILN_DT_FP8E4M3, 300, 1));
    CHECK(run_cast(KILN_OP_Cast, &y, NULL, KILN_DT_INT64, 1, 1, &z) == KILN_OK);
    CHECK(z.data && ((int64_t *)z.data)[2] == -7 && ((int64_t *)z.data)[4] == 448);
    kiln__tensor_release(&y);
    kiln__tensor_release(&z);
    /* float16 / bfloat16 Cast (array fast paths) equal the scalar conversions */
    uint16_t *h = malloc(2 * N);
    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)test_rng(&seed);
    for (int b = 0; b < 2; b++) {
        kiln_dtype hd = b ? KILN_DT_BFLOAT16 : KILN_DT_FLOAT16;
        CHECK(run_cast(KILN_OP_Cast, &tx, NULL, hd, 1, 2, &y) == KILN_OK);
        int bad = 0;
        for (int i = 0; i < N && y.data; i++)
            bad += ((uint16_t *)y.data)[i] != (b ? kiln__f32_to_bf16(x[i]) : kiln__f32_to_f16(x[i]));
        kiln__tensor_release(&y);
        kiln_tensor th = vec(hd, N, h);
        CHECK(run_cast(KILN_OP_Cast, &th, NULL, KILN_DT_FLOAT32, 1, 2, &y) == KILN_OK);
        for (int i = 0; i < N && y.data; i++) {
            float w = b ? kiln__bf16_to_f32(h[i]) : kiln__f16_to_f32(h[i]);
            bad += memcmp(&w, (float *)y.data + i, 4) != 0;
        }
        CHECK_MSG(bad == 0, "Cast %s <-> float32: %d mismatches", kiln_dtype_name(hd), bad);
        kiln__tensor_release(&y);
    }
    /* QuantizeLinear / DequantizeLinear with FP8, per tensor and per axis 0 of a [3 x M] input */
    for (int t = 0; t < 4; t++) {
        float sc[3] = {0.5f, 0.01f, 3.0f};
        uint8_t zc[3] = {kiln__f32_to_fp8(f8[t], 1.0f, 1), 0, kiln__f32_to_fp8(f8[t], -2.0f, 1)};
        for (int axis = 0; axis < 2; axis++) {
            int nch = axis ? 3 : 1;
            kiln_tensor ts = vec(KILN_DT_FLOAT32, nch, sc), tz = vec(f8[t], nch, zc);
            if (!axis)
                ts.ndim = tz.ndim = 0;
            kiln_tensor x2 = tx;
            x2.ndim = 2, x2.dims[0] = 3, x2.dims[1] = (N - 1) / 3;
            int64_t inner = x2.dims[1], nx = 3 * inner;
            x2.nbytes = sizeof(float) * (size_t)nx;
            for (int sat = 0; sat < 2; sat++) {
                CHECK(run_qdq(KILN_OP_QuantizeLinear, &x2, &ts, &tz, sat, &y) == KILN_OK && y.dtype == f8[t]);
                int bad = 0;
                for (int64_t i = 0; i < nx && y.data; i++) {
                    int c = axis ? (int)(i / inner) : 0;
                    float v = x[i] / sc[c] + kiln__fp8_to_f32(f8[t], zc[c]);
                    if (((uint8_t *)y.data)[i] != kiln__f32_to_fp8(f8[t], v, sat) && bad++ < 3)
                        fprintf(stderr, "i=%lld x=%a got 0x%x want 0x%x\n", (long long)i, (double)x[i], ((uint8_t *)y.data)[i], kiln__f32_to_fp8(f8[t], v, sat));
                }
                CHECK_MSG(bad == 0, "QuantizeLinear -> %s axis %d saturate %d: %d mismatches", kiln_dtype_name(f8[t]),
                          axis, sat, bad);
                CHECK(run_qdq(KILN_OP_DequantizeLinear, &y, &ts, &tz, sat, &z) == KILN_OK && z.dtype == KILN_DT_FLOAT32);
                bad = 0;
                for (int64_t i = 0; i < nx && z.data; i++) {
                    int c = axis ? (int)(i / inner) : 0;
                    float w = (kiln__fp8_to_f32(f8[t], ((uint8_t *)y.data)[i]) - kiln__fp8_to_f32(f8[t], zc[c])) * sc[c];
                    float got = ((float *)z.data)[i];
                    bad += !(got == w || (isnan(got) && isnan(w)));
                }
                CHECK_MSG(bad == 0, "DequantizeLinear %s axis %d: %d mismatches", kiln_dtype_name(f8[t]), axis, bad);
                kiln__tensor_release(&y);
                kiln__tensor_release(&z);
            }
        }
    }
    /* a mismatched zero point type is a clean error */
    {
        float one = 1.0f;
        uint8_t zq = 0;
        kiln_tensor ts = vec(KILN_DT_FLOAT32, 1, &one), tz = vec(KILN_DT_UINT8, 1, &zq), tc = vec(KILN_DT_FP8E4M3, 1, &zq);
        CHECK(run_qdq(KILN_OP_DequantizeLinear, &tc, &ts, &tz, 1, &y) == KILN_ERR_DTYPE);
        kiln__tensor_release(&y);
    }
    /* the 4-bit types stay unsupported: a clean error, not a crash */
    CHECK(run_cast(KILN_OP_Cast, &tx, NULL, KILN_DT_FP4E2M1, 1, 1, &y) == KILN_ERR_UNSUPPORTED);
    kiln__tensor_release(&y);
    free(x), free(codes), free(h);
    return TEST_SUMMARY();
}
