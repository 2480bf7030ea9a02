/* 4-bit embedding tables (backend/cpu/lowbit.h, docs/PRECISION.md "4-bit embedding tables"): a Gather marked
 * with a low-bit format against its scalar reference, the float32 Gather (the node without the low-bit
 * attributes) on kiln__lowbit_ref_weight's quantized-dequantized table. Bit for bit: through the blob (which
 * replaces input 0), quantized on the fly, and with the table dropped (the blob alone); odd row lengths, rows
 * shorter than a block, the first and last rows, negative indices, int32 and int64 indices of rank 0 to 3, 1
 * and 2 threads. Every gathered value is exact in FP16 (what the GPU writes). Indices out of range and of the
 * wrong type fail as the float32 Gather fails, with the same message; corrupted blobs are refused cleanly. */
#include "test.h"
#include "test_tensor.h"
#include "backend/cpu/lowbit.h"
#include "backend/cpu/prep.h"
#include "backend/lowbit_blob.h"
#include "backend/kernel.h"
#include "test_pool.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long seed = 77;

typedef struct gnode {
    kiln_node node;
    kiln_attr attrs[4];
    int ids[3];
    int n_plain;   /* attributes before the low-bit ones */
} gnode;

static void gnode_init(gnode *g, const char *fmt, int64_t axis, bool set_axis)
{
    memset(g, 0, sizeof *g);
    g->ids[0] = 0, g->ids[1] = 1, g->ids[2] = 2;
    g->node = (kiln_node){.name = (char *)"emb", .op_type = (char *)"Gather", .domain = (char *)"", .op = KILN_OP_Gather,
                          .opset = 13, .n_in = 2, .n_out = 1, .in = g->ids, .out = g->ids + 2, .attrs = g->attrs};
    if (set_axis)
        g->attrs[g->node.n_attr++] = (kiln_attr){.name = (char *)"axis", .type = KILN_ATTR_INT, .i = axis};
    g->n_plain = g->node.n_attr;
    g->attrs[g->node.n_attr++] =
        (kiln_attr){.name = (char *)KILN_ATTR_WQ, .type = KILN_ATTR_STRING, .s = (char *)fmt, .s_len = strlen(fmt)};
    g->attrs[g->node.n_attr++] =
        (kiln_attr){.name = (char *)KILN_ATTR_AQ, .type = KILN_ATTR_STRING, .s = (char *)"fp16", .s_len = 4};
}

static kiln_status run(const kiln_node *n, const kiln_tensor *table, const kiln_tensor *ind, const void *blob,
                       size_t size, int nt, kiln_tensor *y)
{
    const kiln_tensor *in[2] = {table, ind};
    kiln_tensor *out[1] = {y};
    memset(y, 0, sizeof *y);
    kiln_kctx c = {.node = n, .n_in = 2, .in = in, .n_out = 1, .out = out, .pool = test_pool(nt), .nthreads = nt,
                   .prepared = blob, .prepared_size = size};
    return kiln__ref_kernel(n->op)(&c);
}

static bool same_bits(const kiln_tensor *a, const kiln_tensor *b)
{
    return a->dtype == b->dtype && a->nbytes == b->nbytes && a->ndim == b->ndim &&
           !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim) &&
           (a->nbytes == 0 || (a->data && b->data && !memcmp(a->data, b->data, a->nbytes)));
}

/* indices of dtype dt (int32 / int64), shape (nd, dims), values v[i % nv] */
static kiln_tensor indices(kiln_dtype dt, int nd, const int64_t *dims, const int64_t *v, int nv)
{
    kiln_tensor t;
    CHECK(kiln__tensor_alloc(&t, dt, nd, dims) == KILN_OK);
    for (int64_t i = 0; i < kiln_tensor_numel(&t); i++)
        kiln__set_i64(dt, t.data, i, v[i % nv]);
    return t;
}

/* The packed table of node n (a 64-byte aligned copy, as engines store blobs); checks its header. */
static void *pack(const kiln_node *n, const kiln_tensor *table, size_t *size)
{
    const kiln_tensor *in[2] = {table, NULL};
    void *blob = NULL;
    CHECK(kiln__cpu_prep_node(n) == kiln__lowbit_prep);
    CHECK(kiln__lowbit_prep(n, 2, in, &blob, size) == KILN_OK && blob);
    if (!blob)
        return NULL;
    kiln_prep_hdr h;
    kiln_lowbit_blob B;
    CHECK(kiln__prep_header(blob, *size, &h) && kiln__prep_fits_op(KILN_OP_Gather, &h) && h.replaces == 1u &&
          h.gemm_kind == 0);
    CHECK(kiln__lowbit_blob_parse(blob, *size, &B) && B.rows == table->dims[0] && B.k == table->dims[1] && !B.trans);
    CHECK(!kiln__prep_fits_op(KILN_OP_MatMul, &h));   /* a blob replacing input 0 fits no GEMM */
    void *p = aligned_alloc(64, (*size + 63) / 64 * 64);
    memcpy(p, blob, *size);
    kiln__free(blob);
    return p;
}

/* One table and one set of indices: the marked Gather on nt threads against the float32 Gather on the
 * reference table, through the blob, on the fly and from the blob alone. */
static void check_gather(const char *what, gnode *g, const kiln_tensor *table, const kiln_tensor *ind, int nt)
{
    kiln_node *n = &g->node, plain = *n;
    plain.n_attr = g->n_plain;
    kiln_tensor wr, yr, yb, yf, yd;
    CHECK(kiln__tensor_alloc(&wr, KILN_DT_FLOAT32, table->ndim, table->dims) == KILN_OK);
    CHECK(kiln__lowbit_ref_weight(n, table, wr.data) == KILN_OK);
    CHECK_MSG(run(&plain, &wr, ind, NULL, 0, 1, &yr) == KILN_OK, "%s: %s", what, kiln_last_error());
    size_t size = 0;
    void *blob = pack(n, table, &size);
    kiln_tensor td = *table;   /* the table dropped from the engine */
    td.data = NULL, td.nbytes = 0;
    CHECK_MSG(run(n, table, ind, blob, size, nt, &yb) == KILN_OK, "%s: %s", what, kiln_last_error());
    CHECK_MSG(run(n, table, ind, NULL, 0, nt, &yf) == KILN_OK, "%s: %s", what, kiln_last_error());
    CHECK_MSG(run(n, &td, ind, blob, size, nt, &yd) == KILN_OK, "%s: %s", what, kiln_last_error());
    CHECK_MSG(same_bits(&yr, &yb), "%s (threads %d): blob result differs from the reference", what, nt);
    CHECK_MSG(same_bits(&yr, &yf), "%s (threads %d): on-the-fly result differs from the reference", what, nt);
    CHECK_MSG(same_bits(&yr, &yd), "%s (threads %d): dropped-table result differs from the reference", what, nt);
    int inexact = 0;   /* the GPU writes FP16-exact values: the emulation rounds to them */
    for (int64_t i = 0; yb.data && i < kiln_tensor_numel(&yb); i++) {
        float v = ((float *)yb.data)[i];
        inexact += kiln__f16_to_f32(kiln__f32_to_f16(v)) != v;
    }
    CHECK_MSG(inexact == 0, "%s: %d gathered values not exact in FP16", what, inexact);
    free(blob);
    kiln__tensor_release(&wr), kiln__tensor_release(&yr), kiln__tensor_release(&yb);
    kiln__tensor_release(&yf), kiln__tensor_release(&yd);
}

static const char *const FMTS[] = {"nvfp4", "mxfp4", "int4", "fp8"};

/* rows x k tables (k odd, below one block, several blocks) and index sets of every rank and both types */
static void case_tables(int nt)
{
    static const int64_t K[] = {1, 7, 16, 33, 50, 100};
    for (int f = 0; f < 4; f++)
        for (size_t ki = 0; ki < sizeof K / sizeof *K; ki++) {
            int64_t rows = 37 + (int64_t)ki, td[2] = {rows, K[ki]};
            kiln_tensor table = test_tensor_f32(2, td, 0.1f, &seed);
            ((float *)table.data)[0] = 3.0f;   /* one large value: other blocks keep their own scales */
            int64_t v[] = {0, rows - 1, -1, -rows, 5, 3, rows / 2, 5};
            struct { int nd; int64_t d[3]; } shp[] = {{0, {0}}, {1, {8}}, {2, {3, 5}}, {3, {2, 1, 7}}, {1, {0}}};
            for (size_t s = 0; s < sizeof shp / sizeof *shp; s++)
                for (int it = 0; it < 2; it++) {
                    kiln_tensor ind = indices(it ? KILN_DT_INT32 : KILN_DT_INT64, shp[s].nd, shp[s].d, v, 8);
                    gnode g;
                    gnode_init(&g, FMTS[f], s % 2 ? -2 : 0, s > 0);   /* axis absent, 0 or -2 */
                    char what[96];
                    snprintf(what, sizeof what, "%s %lld x %lld, indices rank %d %s", FMTS[f], (long long)rows,
                             (long long)K[ki], shp[s].nd, it ? "int32" : "int64");
                    check_gather(what, &g, &table, &ind, nt);
                    kiln__tensor_release(&ind);
                }
            kiln__tensor_release(&table);
        }
    /* many indices (the rows split between the threads) and a wide table */
    int64_t td[2] = {300, 770}, idd[2] = {4, 257};
    kiln_tensor table = test_tensor_f32(2, td, 1, &seed), ind;
    CHECK(kiln__tensor_alloc(&ind, KILN_DT_INT64, 2, idd) == KILN_OK);
    for (int64_t i = 0; i < kiln_tensor_numel(&ind); i++)
        ((int64_t *)ind.data)[i] = (int64_t)(test_randf(&seed) * 299.0);   /* -299 .. 299 */
    for (int f = 0; f < 3; f++) {
        gnode g;
        gnode_init(&g, FMTS[f], 0, false);
        check_gather(FMTS[f], &g, &table, &ind, nt);
    }
    kiln__tensor_release(&table), kiln__tensor_release(&ind);
}

/* A Gather along another axis (never marked by the builder): the float32 Gather on the dequantized table. */
static void case_axis1(void)
{
    int64_t td[2] = {9, 40}, idd[1] = {5}, v[] = {0, 39, -1, 7, -40};
    kiln_tensor table = test_tensor_f32(2, td, 1, &seed), ind = indices(KILN_DT_INT64, 1, idd, v, 5);
    gnode g;
    gnode_init(&g, "nvfp4", 1, true);
    check_gather("nvfp4 axis 1", &g, &table, &ind, 2);
    kiln__tensor_release(&table), kiln__tensor_release(&ind);
}

/* Bad indices: the marked Gather fails as the float32 Gather does (status and message), with or without the
 * table's data; corrupted blobs with the table dropped: refused, never read. */
static void case_errors(void)
{
    int64_t td[2] = {11, 20}, idd[1] = {3};
    kiln_tensor table = test_tensor_f32(2, td, 1, &seed), tdrop = table;
    tdrop.data = NULL, tdrop.nbytes = 0;
    gnode g;
    gnode_init(&g, "nvfp4", 0, false);
    kiln_node plain = g.node;
    plain.n_attr = g.n_plain;
    size_t size = 0;
    void *blob = pack(&g.node, &table, &size);
    const int64_t bad[][3] = {{0, 11, 2}, {-12, 0, 1}, {1, 2, 1000000}, {INT32_MAX, 0, 0}};
    for (int k = 0; k < 4; k++)
        for (int it = 0; it < 2; it++) {
            kiln_tensor ind = indices(it ? KILN_DT_INT32 : KILN_DT_INT64, 1, idd, bad[k], 3), y;
            kiln_status want = run(&plain, &table, &ind, NULL, 0, 1, &y);
            char msg[256];
            snprintf(msg, sizeof msg, "%s", kiln_last_error());
            kiln__tensor_release(&y);
            CHECK(want == KILN_ERR_INVALID_ARG);
            for (int path = 0; path < 2; path++) {
                kiln_status st = run(&g.node, path ? &tdrop : &table, &ind, path ? blob : NULL, path ? size : 0, 2, &y);
                CHECK_MSG(st == want && !strcmp(kiln_last_error(), msg), "bad index set %d path %d: %d '%s', the "
                          "float32 Gather: %d '%s'", k, path, (int)st, kiln_last_error(), (int)want, msg);
                kiln__tensor_release(&y);
            }
            kiln__tensor_release(&ind);
        }
    kiln_tensor find = test_tensor_f32(1, idd, 1, &seed), y;   /* float indices */
    kiln_status want = run(&plain, &table, &find, NULL, 0, 1, &y);
    CHECK(want == KILN_ERR_DTYPE);
    kiln__tensor_release(&y);
    CHECK(run(&g.node, &tdrop, &find, blob, size, 1, &y) == want);
    kiln__tensor_release(&y);
    int64_t ok[1] = {3};
    kiln_tensor ind = indices(KILN_DT_INT64, 1, idd, ok, 1);
    CHECK(run(&g.node, &tdrop, &ind, NULL, 0, 1, &y) == KILN_ERR_UNSUPPORTED);   /* dropped, no blob */
    kiln__tensor_release(&y);
    for (int k = 0; blob && k < 7; k++) {
        void *c = aligned_alloc(64, (size + 63) / 64 * 64);
        memcpy(c, blob, size);
        kiln_prep_hdr *h = c;
        size_t sz = size;
        switch (k) {
        case 0: h->layout = KILN_PREP_GEMM_B; break;
        case 1: h->dims[1]++; break;                  /* rows */
        case 2: h->dims[2]--; break;                  /* row length */
        case 3: h->dims[0] = KILN_QF_MXFP4; break;    /* format */
        case 4: h->gemm_kind = 3; break;
        case 5: sz -= 64; break;
        case 6: h->payload_bytes += 64; break;
        }
        CHECK_MSG(run(&g.node, &tdrop, &ind, c, sz, 1, &y) == KILN_ERR_UNSUPPORTED, "corrupted blob %d accepted", k);
        kiln__tensor_release(&y);
        if (k == 4)   /* what the engine's load refuses too */
            CHECK(!kiln__prep_fits_op(KILN_OP_Gather, h));
        free(c);
    }
    /* a 3-D table cannot be stored so */
    int64_t t3[3] = {2, 3, 4};
    kiln_tensor table3 = test_tensor_f32(3, t3, 1, &seed);
    CHECK(run(&g.node, &table3, &ind, NULL, 0, 1, &y) == KILN_ERR_SHAPE);
    kiln__tensor_release(&y);
    free(blob);
    kiln__tensor_release(&ind), kiln__tensor_release(&find), kiln__tensor_release(&table);
    kiln__tensor_release(&table3);
}

int main(void)
{
    case_tables(1);
    case_tables(2);
    case_axis1();
    case_errors();
    return TEST_SUMMARY();
}
