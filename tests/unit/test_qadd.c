/* com.microsoft QLinearAdd (src/backend/cpu/qadd.h): differential tests.
 *
 * 1. The kernel the host runs (AVX-512, else AVX2), then each other fast kernel it can run (AVX2 on
 *    AVX-512 hosts), against the scalar reference on random odd shapes (same-shape and broadcast operands, u8/s8 A, B and C each, zero points != 0,
 *    activations none / Relu / Clip, 1-3 threads; a quarter with scales that put quotients exactly on ties): every
 *    output byte equal.
 * 2. The reference against the graph it replaces, run with the reference kernels:
 *    DequantizeLinear(A), DequantizeLinear(B) -> Add -> Relu / Clip -> QuantizeLinear: every byte
 *    equal (the fusion is exact, not within a step).
 * 3. Malformed inputs: a clean KILN_ERR_* from both kernels. */
#include "test.h"
#include "test_tensor.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/qadd.h"
#include "test_pool.h"
#include <string.h>

static unsigned long long seed = 777;
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(test_rng(&seed) % (uint64_t)(hi - lo + 1)); }

static kiln_tensor mk(kiln_dtype dt, int nd, const int64_t *dims) { return test_tensor(dt, nd, dims); }
static kiln_tensor mk_bytes(kiln_dtype dt, int nd, const int64_t *dims) { return test_tensor_bytes(dt, nd, dims, &seed); }
static kiln_tensor mk_f(float v)
{
    kiln_tensor t = mk(KILN_DT_FLOAT32, 0, NULL);
    *(float *)t.data = v;
    return t;
}
static kiln_tensor mk_zp(kiln_dtype dt)
{
    kiln_tensor t = mk(dt, 0, NULL);
    *(uint8_t *)t.data = (uint8_t)(dt == KILN_DT_UINT8 ? rnd(0, 255) : rnd(-128, 127));
    return t;
}
static kiln_dtype q8(void) { return rnd(0, 1) ? KILN_DT_UINT8 : KILN_DT_INT8; }

/* the QLinearAdd kernel under test when fast (NULL: the registry's pick) */
static kiln_kernel_fn qadd_fast;

/* Runs op (fast: the kernel the registry picks or qadd_fast, else the reference) into *y. */
static kiln_status run(kiln_op op, const char *domain, int opset, kiln_attr *attrs, int nattr,
                       const kiln_tensor **in, int nin, int th, kiln_tensor *y, bool fast)
{
    int ids[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    kiln_node node = {.name = (char *)"n", .op_type = (char *)kiln__op_name(op), .domain = (char *)domain, .op = op,
                      .opset = opset, .n_in = nin, .n_out = 1, .in = ids, .out = ids + 11, .attrs = attrs,
                      .n_attr = nattr};
    memset(y, 0, sizeof *y);
    kiln_tensor *o[1] = {y};
    kiln_kctx c = {.node = &node, .n_in = nin, .in = in, .n_out = 1, .out = o, .pool = test_pool(th), .nthreads = th};
    if (fast && op == KILN_OP_QLinearAdd && qadd_fast)
        return qadd_fast(&c);
    return (fast ? kiln__ref_kernel(op) : kiln__cpu_ref_kernel(op))(&c);
}

static int64_t fast_runs, sat_lo, sat_hi, compared;
static const char *const acts[] = {NULL, "Relu", "Clip"};

static void test_random(int iter)
{
    int nd = (int)rnd(1, 4);
    int64_t da[4], db[4];
    bool same = iter % 3 != 2;
    for (int d = 0; d < nd; d++)
        da[d] = db[d] = rnd(1, 9);
    if (iter % 7 == 0) { /* large enough for several threads' chunks */
        nd = 4;
        int64_t big[4] = {rnd(1, 3), rnd(40, 70), rnd(17, 31), rnd(19, 33)};
        memcpy(da, big, sizeof big), memcpy(db, big, sizeof big);
    }
    int ndb = nd;
    if (!same) { /* broadcast: B drops leading dims or has 1s */
        ndb = (int)rnd(1, nd);
        for (int d = 0; d < ndb; d++)
            db[d] = rnd(0, 2) ? da[nd - ndb + d] : 1;
    }
    kiln_dtype at = q8(), bt = q8(), ct = q8();
    kiln_tensor A = mk_bytes(at, nd, da), B = mk_bytes(bt, ndb, db);
    float sa = 0.001f + (float)rnd(0, 1000) * 1e-4f, sb = 0.001f + (float)rnd(0, 1000) * 1e-4f;
    float sc = (sa + sb) * (0.3f + (float)rnd(0, 100) * 0.01f);
    if (iter % 4 == 3) {   /* exact ties: every odd A + B lands on k + 0.5 (the fast kernels' division lanes) */
        sa = sb = ldexpf(1.f + (float)rnd(0, 7) / 8.f, -(int)rnd(5, 9));
        sc = 2.f * sa;
    }
    kiln_tensor Sa = mk_f(sa), Sb = mk_f(sb), Sc = mk_f(sc), Za = mk_zp(at), Zb = mk_zp(bt), Zc = mk_zp(ct);
    bool zps = iter % 5 != 4; /* without zero points: 0, C takes A's type */
    if (!zps)
        ct = at;
    int ak = (int)(iter % 3);
    float lo = -(float)rnd(0, 40) * sc, hi = (float)rnd(1, 90) * sc;
    kiln_attr attrs[3] = {{.name = (char *)"kiln_act", .type = KILN_ATTR_STRING},
                          {.name = (char *)"kiln_act_alpha", .type = KILN_ATTR_FLOAT, .f = lo},
                          {.name = (char *)"kiln_act_beta", .type = KILN_ATTR_FLOAT, .f = hi}};
    if (ak) {
        attrs[0].s = (char *)acts[ak];
        attrs[0].s_len = strlen(acts[ak]);
    }
    const kiln_tensor *in[8] = {&A, &Sa, zps ? &Za : NULL, &B, &Sb, zps ? &Zb : NULL, &Sc, zps ? &Zc : NULL};
    int th = (int)rnd(1, 3);
    kiln_tensor y1, y2;
    CHECK(run(KILN_OP_QLinearAdd, KILN_MS_DOMAIN, 1, attrs, ak ? 3 : 0, in, 8, th, &y1, true) == KILN_OK);
    CHECK(run(KILN_OP_QLinearAdd, KILN_MS_DOMAIN, 1, attrs, ak ? 3 : 0, in, 8, th, &y2, false) == KILN_OK);
    fast_runs += same && kiln__cpu_fast_kernel(KILN_OP_QLinearAdd);
    CHECK(y1.dtype == ct && y2.dtype == ct && y1.nbytes == y2.nbytes && y1.ndim == nd);
    int64_t n = kiln_tensor_numel(&y2), bad = 0;
    if (y1.nbytes == y2.nbytes)
        for (int64_t i = 0; i < n; i++)
            bad += ((uint8_t *)y1.data)[i] != ((uint8_t *)y2.data)[i];
    CHECK_MSG(bad == 0, "iter %d: %lld of %lld outputs differ (fast vs reference)", iter, (long long)bad, (long long)n);
    /* the unfused graph through the reference kernels */
    kiln_tensor fa, fb, s, r, q;
    const kiln_tensor *dqa[3] = {&A, &Sa, zps ? &Za : NULL}, *dqb[3] = {&B, &Sb, zps ? &Zb : NULL};
    CHECK(run(KILN_OP_DequantizeLinear, "", 13, NULL, 0, dqa, 3, 1, &fa, false) == KILN_OK);
    CHECK(run(KILN_OP_DequantizeLinear, "", 13, NULL, 0, dqb, 3, 1, &fb, false) == KILN_OK);
    const kiln_tensor *add[2] = {&fa, &fb};
    CHECK(run(KILN_OP_Add, "", 14, NULL, 0, add, 2, 1, &s, false) == KILN_OK);
    kiln_tensor Lo = mk_f(lo), Hi = mk_f(hi);
    const kiln_tensor *act[3] = {&s, &Lo, &Hi};
    if (ak)
        CHECK(run(ak == 1 ? KILN_OP_Relu : KILN_OP_Clip, "", 13, NULL, 0, act, ak == 1 ? 1 : 3, 1, &r, false) ==
              KILN_OK);
    kiln_tensor Zq = mk(ct, 0, NULL);
    memcpy(Zq.data, zps ? Zc.data : Zq.data, 1);
    if (!zps)
        *(uint8_t *)Zq.data = 0;
    const kiln_tensor *qi[3] = {ak ? &r : &s, &Sc, &Zq};
    CHECK(run(KILN_OP_QuantizeLinear, "", 13, NULL, 0, qi, 3, 1, &q, false) == KILN_OK);
    bad = 0;
    if (q.nbytes == y2.nbytes && q.dtype == y2.dtype)
        for (int64_t i = 0; i < n; i++) {
            int32_t v = ct == KILN_DT_UINT8 ? ((uint8_t *)y2.data)[i] : ((int8_t *)y2.data)[i];
            bad += ((uint8_t *)q.data)[i] != ((uint8_t *)y2.data)[i];
            sat_lo += v == (ct == KILN_DT_UINT8 ? 0 : -128);
            sat_hi += v == (ct == KILN_DT_UINT8 ? 255 : 127);
        }
    else
        bad = -1;
    compared += n;
    CHECK_MSG(bad == 0, "iter %d: %lld of %lld outputs differ from DQ/Add/act/Q", iter, (long long)bad, (long long)n);
    kiln_tensor *all[] = {&A, &B, &Sa, &Sb, &Sc, &Za, &Zb, &Zc, &y1, &y2, &fa, &fb, &s, &q, &Lo, &Hi, &Zq};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        kiln__tensor_release(all[k]);
    if (ak)
        kiln__tensor_release(&r);
}

/* Both kernels: status st for inputs in */
static void expect_err(const kiln_tensor **in, int nin, kiln_attr *attrs, int nattr, kiln_status st)
{
    for (int fast = 0; fast < 2; fast++) {
        kiln_tensor y;
        kiln_status got = run(KILN_OP_QLinearAdd, KILN_MS_DOMAIN, 1, attrs, nattr, in, nin, 1, &y, fast);
        CHECK_MSG(got == st, "%s kernel: status %d, expected %d (%s)", fast ? "fast" : "reference", (int)got, (int)st,
                  kiln_last_error());
        if (got == KILN_OK)
            kiln__tensor_release(&y);
    }
}

static void test_errors(void)
{
    int64_t d[2] = {3, 5}, d2[2] = {4, 5}, one = 2;
    kiln_tensor A = mk_bytes(KILN_DT_UINT8, 2, d), B = mk_bytes(KILN_DT_INT8, 2, d), B2 = mk_bytes(KILN_DT_INT8, 2, d2);
    kiln_tensor F = mk(KILN_DT_FLOAT32, 2, d), s = mk_f(0.1f), s0 = mk_f(0.f), sn = mk_f(NAN), z = mk_zp(KILN_DT_UINT8);
    kiln_tensor zv = mk(KILN_DT_UINT8, 1, &one), zi = mk(KILN_DT_INT32, 0, NULL);
    const kiln_tensor *ok[8] = {&A, &s, &z, &B, &s, NULL, &s, &z};
    expect_err(ok, 8, NULL, 0, KILN_OK);
    const kiln_tensor *c1[8] = {&A, &s, &z, &B2, &s, NULL, &s, &z}; /* 3x5 + 4x5 */
    expect_err(c1, 8, NULL, 0, KILN_ERR_SHAPE);
    const kiln_tensor *c2[8] = {&F, &s, NULL, &B, &s, NULL, &s, &z};
    expect_err(c2, 8, NULL, 0, KILN_ERR_DTYPE);
    const kiln_tensor *c3[8] = {&A, &s0, &z, &B, &s, NULL, &s, &z};
    expect_err(c3, 8, NULL, 0, KILN_ERR_INVALID_ARG);
    const kiln_tensor *c4[8] = {&A, &s, &z, &B, &s, NULL, &sn, &z};
    expect_err(c4, 8, NULL, 0, KILN_ERR_INVALID_ARG);
    const kiln_tensor *c5[8] = {&A, &s, &zv, &B, &s, NULL, &s, &z};
    expect_err(c5, 8, NULL, 0, KILN_ERR_SHAPE);
    const kiln_tensor *c6[8] = {&A, &s, &z, &B, &s, &z, &s, &z}; /* u8 zero point for s8 B */
    expect_err(c6, 8, NULL, 0, KILN_ERR_DTYPE);
    const kiln_tensor *c7[8] = {&A, &s, &z, &B, &s, NULL, &s, &zi};
    expect_err(c7, 8, NULL, 0, KILN_ERR_DTYPE);
    const kiln_tensor *c8[8] = {&A, &s, &z, &B, &s, NULL, NULL, NULL};
    expect_err(c8, 8, NULL, 0, KILN_ERR_INVALID_ARG);
    kiln_attr bad = {.name = (char *)"kiln_act", .type = KILN_ATTR_STRING, .s = (char *)"Bogus", .s_len = 5};
    expect_err(ok, 8, &bad, 1, KILN_ERR_INVALID_ARG);
    kiln_tensor *all[] = {&A, &B, &B2, &F, &s, &s0, &sn, &z, &zv, &zi};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        kiln__tensor_release(all[k]);
}

int main(void)
{
    const kiln_kernel_isa_reg *f = kiln__cpu_fast_kernel(KILN_OP_QLinearAdd);
    printf("fast QLinearAdd kernel: %s\n", f ? f->name : "none");
    CHECK(!!f == kiln__cpu_has(KILN_CPU_AVX2));
    for (int i = 0; i < 200; i++)
        test_random(i);
    /* every other fast kernel this host runs (AVX2 on AVX-512 hosts) */
    for (int k = 0; kiln__cpu_fast_kernel_at(KILN_OP_QLinearAdd, k); k++) {
        const kiln_kernel_isa_reg *r = kiln__cpu_fast_kernel_at(KILN_OP_QLinearAdd, k);
        if (r == f)
            continue;
        printf("also: %s\n", r->name);
        qadd_fast = r->fn;
        for (int i = 0; i < 200; i++)
            test_random(i);
        qadd_fast = NULL;
    }
    test_errors();
    printf("%lld outputs compared; %lld at the low and %lld at the high saturation bound; %lld same-shape runs "
           "on the fast kernel\n",
           (long long)compared, (long long)sat_lo, (long long)sat_hi, (long long)fast_runs);
    CHECK(sat_lo > 0 && sat_hi > 0 && compared > 100000);
    CHECK(!f || fast_runs > 100);
    return TEST_SUMMARY();
}
