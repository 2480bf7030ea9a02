/* libkiln_fakedev.so: a device module (src/backend/cuda/cuda_module.h) on host memory, so that the runtime's device
 * paths -- layers placed on the device, CPU fallbacks with their copies, channels-last outputs brought back through
 * `canonical`, CUDA graphs captured, launched and replayed, device memory pooled by size -- run in CI, where there
 * is no GPU (tests/unit/test_fakedev.c loads it with KILN_CUDA_MODULE). Like the CUDA module it pools freed blocks
 * by size and fills every block it hands out with 0xFF bytes (NaN), and a capture records the work (kernels, those
 * fills, uploads from pinned memory) instead of running it; a launch runs the record. Layers: Relu, Sigmoid, Add,
 * Sub, Mul on float32 (broadcast up to 4 dims); every 4-D output is held channels-last (KILN_TENSOR_DEV_NHWC), as the
 * CUDA module holds half convolutions' outputs. Other ops fall back to the CPU. Device tactics: a layer's first run
 * outside a capture "times" a choice per op and output dims (recorded, exported, imported as the CUDA module's);
 * KILN_FAKEDEV_SIGNATURE replaces the signature (another GPU, other versions); KILN_FAKEDEV_E4M3=OP flags that op's
 * outputs as held only in E4M3 (FP8 storage: not readable on the host), KILN_FAKEDEV_F16=OP as held in FP16 storage
 * (the flag only: the data stays float32, so such an output must be read by the fake device's layers alone). */
#include "backend/cuda/cuda_module.h"
#include "core/devtac.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fk_block { void *p; size_t n; } fk_block;

typedef enum { REC_RUN, REC_FILL, REC_COPY } rec_kind;
typedef struct fk_rec {
    rec_kind kind;
    kiln_op op;
    kiln_tensor in[2], out;   /* REC_RUN: the tensors as the layer saw them (data pointers kept) */
    int n_in;
    void *dst;
    const void *src;
    size_t n;
} fk_rec;

typedef struct fk_graph { fk_rec *r; int n; } fk_graph;

typedef struct fk_be {
    kiln_backend be;
    const kiln_devmod_host *host;
    fk_block live[4096], pool[256];
    int n_live, n_pool;
    bool capturing;
    fk_rec *rec;
    int n_rec, cap_rec;
    char *stage;
    size_t stage_size, stage_used;
    kiln_devtac *tac;   /* "timed" choices: one per op and output dims, made at its first run outside a capture */
    int timed;
} fk_be;

static fk_be *fk_of(const kiln_backend *be) { return (fk_be *)be->state; }

static kiln_status fk_err(const fk_be *b, kiln_status s, const char *msg) { return b->host->err(s, msg); }

static bool record(fk_be *b, fk_rec r)
{
    if (b->n_rec == b->cap_rec) {
        int cap = b->cap_rec ? 2 * b->cap_rec : 64;
        fk_rec *nr = realloc(b->rec, sizeof *nr * (size_t)cap);
        if (!nr)
            return false;
        b->rec = nr;
        b->cap_rec = cap;
    }
    b->rec[b->n_rec++] = r;
    return true;
}

/* ---- memory: blocks pooled by exact size, every block handed out filled with 0xFF (NaN) */

static kiln_status fk_alloc(kiln_backend *be, size_t n, void **p)
{
    fk_be *b = fk_of(be);
    n = n ? (n + 255) / 256 * 256 : 256;
    *p = NULL;
    for (int i = b->n_pool - 1; i >= 0 && !*p; i--)
        if (b->pool[i].n == n) {
            *p = b->pool[i].p;
            b->pool[i] = b->pool[--b->n_pool];
        }
    if (!*p && !(*p = malloc(n)))
        return fk_err(b, KILN_ERR_NOMEM, "fake device: out of memory");
    if (b->n_live == (int)(sizeof b->live / sizeof *b->live)) {
        free(*p);
        return fk_err(b, KILN_ERR_NOMEM, "fake device: too many blocks");
    }
    b->live[b->n_live++] = (fk_block){*p, n};
    memset(*p, 0xFF, n);
    if (b->capturing && !record(b, (fk_rec){.kind = REC_FILL, .dst = *p, .n = n}))
        return fk_err(b, KILN_ERR_NOMEM, "fake device: out of memory");
    return KILN_OK;
}

static void fk_free(kiln_backend *be, void *p)
{
    fk_be *b = fk_of(be);
    for (int i = 0; p && i < b->n_live; i++)
        if (b->live[i].p == p) {
            fk_block k = b->live[i];
            b->live[i] = b->live[--b->n_live];
            if (b->n_pool < (int)(sizeof b->pool / sizeof *b->pool))
                b->pool[b->n_pool++] = k;
            else
                free(p);
            return;
        }
}

static kiln_status fk_shared_alloc(kiln_backend *be, size_t n, void **p)
{
    *p = malloc(n ? n : 1);
    return *p ? KILN_OK : fk_err(fk_of(be), KILN_ERR_NOMEM, "fake device: out of memory");
}

static void fk_shared_free(void *p) { free(p); }

static kiln_status fk_copy(kiln_backend *be, void *dst, const void *src, size_t n)
{
    fk_be *b = fk_of(be);
    if (b->capturing)
        return fk_err(b, KILN_ERR_UNSUPPORTED, "fake device: a copy cannot be captured");
    memcpy(dst, src, n);
    return KILN_OK;
}

/* ---- layers */

static bool fk_op(kiln_op op)
{
    return op == KILN_OP_Relu || op == KILN_OP_Sigmoid || op == KILN_OP_Add || op == KILN_OP_Sub || op == KILN_OP_Mul;
}

static bool fk_supports(const kiln_backend *be, const kiln_bk_query *q)
{
    (void)be;
    if (!q->node || !fk_op(q->node->op))
        return false;
    for (int i = 0; q->in_dtype && i < q->n_in; i++)
        if (q->in_dtype[i] != KILN_DT_FLOAT32 && q->in_dtype[i] != KILN_DT_UNDEFINED)
            return false;
    return true;
}

static bool fk_accepts(kiln_backend *be, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)be;
    int want = n->op == KILN_OP_Relu || n->op == KILN_OP_Sigmoid ? 1 : 2;
    if (n_in != want)
        return false;
    for (int i = 0; i < n_in; i++)
        if (!in[i] || in[i]->dtype != KILN_DT_FLOAT32 || in[i]->ndim > 4)
            return false;
    return true;
}

/* memory offset of logical index a (4 dims, right-aligned) in t: NCHW order, or NHWC when t is held so */
static int64_t offset_of(const kiln_tensor *t, const int64_t *a)
{
    int64_t d[4] = {1, 1, 1, 1}, x[4];
    for (int k = 0; k < t->ndim; k++)
        d[4 - t->ndim + k] = t->dims[k];
    for (int k = 0; k < 4; k++)
        x[k] = d[k] == 1 ? 0 : a[k];   /* broadcast */
    if (t->flags & KILN_TENSOR_DEV_NHWC)
        return ((x[0] * d[2] + x[2]) * d[3] + x[3]) * d[1] + x[1];
    return ((x[0] * d[1] + x[1]) * d[2] + x[2]) * d[3] + x[3];
}

static void compute(kiln_op op, const kiln_tensor *in, int n_in, const kiln_tensor *y)
{
    int64_t d[4] = {1, 1, 1, 1}, a[4];
    for (int k = 0; k < y->ndim; k++)
        d[4 - y->ndim + k] = y->dims[k];
    for (a[0] = 0; a[0] < d[0]; a[0]++)
        for (a[1] = 0; a[1] < d[1]; a[1]++)
            for (a[2] = 0; a[2] < d[2]; a[2]++)
                for (a[3] = 0; a[3] < d[3]; a[3]++) {
                    float u = ((const float *)in[0].data)[offset_of(&in[0], a)];
                    float v = n_in > 1 ? ((const float *)in[1].data)[offset_of(&in[1], a)] : 0.0f, r;
                    switch (op) {
                    case KILN_OP_Relu: r = u > 0 ? u : 0; break;
                    case KILN_OP_Sigmoid: r = 1.0f / (1.0f + expf(-u)); break;
                    case KILN_OP_Add: r = u + v; break;
                    case KILN_OP_Sub: r = u - v; break;
                    default: r = u * v; break;
                    }
                    ((float *)y->data)[offset_of(y, a)] = r;
                }
}

static kiln_status fk_run(const kiln_backend *be, const kiln_layer *l, kiln_kctx *ctx)
{
    fk_be *b = fk_of(be);
    const kiln_node *n = l->node;
    int n_in = n->op == KILN_OP_Relu || n->op == KILN_OP_Sigmoid ? 1 : 2;
    if (!fk_op(n->op) || ctx->n_in != n_in || ctx->n_out < 1 || !ctx->out[0])
        return fk_err(b, KILN_ERR_UNSUPPORTED, "fake device: no kernel");
    fk_rec r = {.kind = REC_RUN, .op = n->op, .n_in = n_in};
    int nd = 0;
    int64_t dims[4];
    for (int i = 0; i < n_in; i++) {
        if (!ctx->in[i] || ctx->in[i]->ndim > 4 || !(ctx->in[i]->flags & KILN_TENSOR_ON_DEVICE))
            return fk_err(b, KILN_ERR_UNSUPPORTED, "fake device: an input is not on the device");
        r.in[i] = *ctx->in[i];
        nd = ctx->in[i]->ndim > nd ? ctx->in[i]->ndim : nd;
    }
    for (int k = 0; k < nd; k++) {   /* numpy broadcasting */
        int64_t v = 1;
        for (int i = 0; i < n_in; i++) {
            int off = nd - ctx->in[i]->ndim;
            int64_t x = k >= off ? ctx->in[i]->dims[k - off] : 1;
            if (x != 1 && v != 1 && x != v)
                return fk_err(b, KILN_ERR_SHAPE, "fake device: inputs do not broadcast");
            v = x != 1 ? x : v;
        }
        dims[k] = v;
    }
    kiln_tensor *y = ctx->out[0];
    int64_t numel = 1;
    for (int k = 0; k < nd; k++)
        numel *= dims[k];
    /* KILN_FAKEDEV_E4M3=OP: that op's outputs are flagged as held only in E4M3, as the CUDA module holds FP8-stored
     * outputs (the data stays float32 here: only the host may not read it; tests of that refusal) */
    const char *e4 = getenv("KILN_FAKEDEV_E4M3"), *f16 = getenv("KILN_FAKEDEV_F16");
    bool e4m3 = e4 && !strcmp(e4, n->op_type), half = f16 && !strcmp(f16, n->op_type);
    *y = (kiln_tensor){.dtype = KILN_DT_FLOAT32, .ndim = nd, .nbytes = (size_t)numel * sizeof(float),
                       .flags = KILN_TENSOR_BORROWED | KILN_TENSOR_ON_DEVICE | (nd == 4 ? KILN_TENSOR_DEV_NHWC : 0u) |
                                (e4m3 ? KILN_TENSOR_DEV_E4M3 : 0u) | (half ? KILN_TENSOR_DEV_F16 : 0u)};
    memcpy(y->dims, dims, sizeof(int64_t) * (size_t)nd);
    bool fresh = true;
    y->data = ctx->rt && ctx->rt->place ? ctx->rt->place(ctx->rt_user, ctx, 0, y->nbytes, &fresh) : NULL;
    if (!y->data) {
        kiln_status st = fk_alloc((kiln_backend *)be, y->nbytes, &y->data);
        if (st != KILN_OK) {
            memset(y, 0, sizeof *y);
            return st;
        }
    }
    r.out = *y;
    /* a choice "timed" per op and output dims (device tactics: what the CUDA module times, kept in engines) */
    int64_t tk[5] = {n->op, dims[0], nd > 1 ? dims[1] : 0, nd > 2 ? dims[2] : 0, nd > 3 ? dims[3] : 0};
    if (!b->capturing && kiln__devtac_get(b->tac, 'f', tk, sizeof tk) < 0) {
        kiln__devtac_put(b->tac, 'f', tk, sizeof tk, (int)(n->op % 3));
        b->timed++;
    }
    if (b->capturing)
        return record(b, r) ? KILN_OK : fk_err(b, KILN_ERR_NOMEM, "fake device: out of memory");
    compute(r.op, r.in, r.n_in, &r.out);
    return KILN_OK;
}

static kiln_status fk_prepare(const kiln_backend *be, const kiln_node *n, const kiln_tensor *const *consts,
                              kiln_layer *out)
{
    (void)consts;
    *out = (kiln_layer){.be = be, .node = n, .kernel = (int)n->op};
    return KILN_OK;
}

static kiln_status fk_load(const kiln_backend *be, const kiln_node *n, int kernel, const void *blob, size_t size,
                           kiln_layer *out)
{
    (void)kernel;
    (void)blob;
    (void)size;
    return fk_prepare(be, n, NULL, out);
}

static void fk_release(const kiln_backend *be, kiln_layer *l)
{
    (void)be;
    (void)l;
}

static kiln_status fk_sync(const kiln_backend *be)
{
    (void)be;
    return KILN_OK;
}

static const kiln_backend_ops fk_ops = {.name = "cuda", .supports = fk_supports, .prepare = fk_prepare,
                                        .load = fk_load, .release = fk_release, .run = fk_run, .synchronize = fk_sync};

/* ---- channels-last back to ONNX layout, graphs */

static kiln_status fk_canonical(kiln_backend *be, const kiln_tensor *t, kiln_tensor *out)
{
    *out = *t;
    out->flags &= ~KILN_TENSOR_DEV_NHWC;
    KILN_TRY(fk_alloc(be, t->nbytes, &out->data));
    int64_t a[4];
    for (a[0] = 0; a[0] < t->dims[0]; a[0]++)
        for (a[1] = 0; a[1] < t->dims[1]; a[1]++)
            for (a[2] = 0; a[2] < t->dims[2]; a[2]++)
                for (a[3] = 0; a[3] < t->dims[3]; a[3]++)
                    ((float *)out->data)[offset_of(out, a)] = ((const float *)t->data)[offset_of(t, a)];
    return KILN_OK;
}

static kiln_status fk_graph_begin(kiln_backend *be, size_t stage_bytes)
{
    fk_be *b = fk_of(be);
    free(b->stage);
    b->stage = malloc(stage_bytes ? stage_bytes : 1);
    if (!b->stage)
        return fk_err(b, KILN_ERR_NOMEM, "fake device: out of memory");
    b->stage_size = stage_bytes;
    b->stage_used = 0;
    b->n_rec = 0;
    b->capturing = true;
    return KILN_OK;
}

static kiln_status fk_graph_h2d(kiln_backend *be, void *dst, const void *src, size_t n, void **staged)
{
    fk_be *b = fk_of(be);
    if (!b->capturing || b->stage_used + n > b->stage_size)
        return fk_err(b, KILN_ERR_UNSUPPORTED, "fake device: an upload outside a capture or its pinned memory");
    char *s = b->stage + b->stage_used;
    memcpy(s, src, n);
    b->stage_used += (n + 255) / 256 * 256;
    *staged = s;
    return record(b, (fk_rec){.kind = REC_COPY, .dst = dst, .src = s, .n = n}) ? KILN_OK
                                                                               : fk_err(b, KILN_ERR_NOMEM, "fake device: out of memory");
}

static kiln_status fk_graph_end(kiln_backend *be, void **graph)
{
    fk_be *b = fk_of(be);
    b->capturing = false;
    fk_graph *g = malloc(sizeof *g);
    if (!g)
        return fk_err(b, KILN_ERR_NOMEM, "fake device: out of memory");
    g->r = b->rec;
    g->n = b->n_rec;
    b->rec = NULL;
    b->n_rec = b->cap_rec = 0;
    *graph = g;
    return KILN_OK;
}

static kiln_status fk_graph_launch(kiln_backend *be, void *graph)
{
    (void)be;
    const fk_graph *g = graph;
    for (int i = 0; i < g->n; i++) {
        const fk_rec *r = &g->r[i];
        if (r->kind == REC_FILL)
            memset(r->dst, 0xFF, r->n);
        else if (r->kind == REC_COPY)
            memcpy(r->dst, r->src, r->n);
        else
            compute(r->op, r->in, r->n_in, &r->out);
    }
    return KILN_OK;
}

static void fk_graph_free(kiln_backend *be, void *graph)
{
    (void)be;
    fk_graph *g = graph;
    if (g)
        free(g->r);
    free(g);
}

/* ---- the module */

static void fk_describe(kiln_backend *be, char *buf, size_t n);

static kiln_status fk_create(const kiln_devmod_host *host, const kiln_devmod_opts *o, kiln_backend **out)
{
    (void)o;
    fk_be *b = calloc(1, sizeof *b);
    if (!b)
        return host->err(KILN_ERR_NOMEM, "fake device: out of memory");
    b->host = host;
    b->be.ops = &fk_ops;
    b->be.state = b;
    char sig[256];
    fk_describe(&b->be, sig, sizeof sig);
    if (!(b->tac = kiln__devtac_new(sig))) {
        free(b);
        return host->err(KILN_ERR_NOMEM, "fake device: out of memory");
    }
    *out = &b->be;
    return KILN_OK;
}

static void fk_destroy(kiln_backend *be)
{
    fk_be *b = fk_of(be);
    for (int i = 0; i < b->n_live; i++)
        free(b->live[i].p);
    for (int i = 0; i < b->n_pool; i++)
        free(b->pool[i].p);
    free(b->rec);
    free(b->stage);
    kiln__devtac_free(b->tac);
    free(b);
}

static uint32_t fk_host_inputs(kiln_backend *be, const kiln_node *n)
{
    (void)be;
    (void)n;
    return 0;
}

static void fk_describe(kiln_backend *be, char *buf, size_t n)
{
    (void)be;
    const char *sig = getenv("KILN_FAKEDEV_SIGNATURE");   /* another GPU or library versions (tests) */
    snprintf(buf, n, "%s", sig && sig[0] ? sig : "fake device (host memory, tests/fakedev)");
}

static kiln_status fk_tactics_export(kiln_backend *be, char **text, size_t *n)
{
    fk_be *b = fk_of(be);
    *text = NULL;
    *n = 0;
    if (kiln__devtac_count(b->tac) && !(*text = kiln__devtac_text(b->tac, n)))
        return fk_err(b, KILN_ERR_NOMEM, "fake device: out of memory");
    return KILN_OK;
}

static int fk_tactics_import(kiln_backend *be, const char *text, size_t n)
{
    return kiln__devtac_parse(fk_of(be)->tac, text, n);
}

static int fk_tactics_timed(kiln_backend *be) { return fk_of(be)->timed; }

static double fk_graph_ms(kiln_backend *be, double *compute_ms)
{
    (void)be;
    if (compute_ms)
        *compute_ms = -1;
    return -1;
}

static uint64_t fk_own_weight_bytes(kiln_backend *be)
{
    (void)be;
    return 0;
}

static void fk_fp8_counts(kiln_backend *be, unsigned long long c[KILN_FP8_COUNTS])
{
    (void)be;
    memset(c, 0, sizeof(unsigned long long) * KILN_FP8_COUNTS);
}

static const kiln_devmod fk_module = {
    .abi = KILN_DEVMOD_ABI, .name = "cuda", .create = fk_create, .destroy = fk_destroy, .host_inputs = fk_host_inputs,
    .accepts = fk_accepts, .alloc = fk_alloc, .free = fk_free, .shared_alloc = fk_shared_alloc,
    .shared_free = fk_shared_free, .h2d = fk_copy, .d2h = fk_copy, .describe = fk_describe,
    .canonical = fk_canonical, .graph_begin = fk_graph_begin, .graph_h2d = fk_graph_h2d, .graph_end = fk_graph_end,
    .graph_launch = fk_graph_launch, .graph_free = fk_graph_free, .graph_ms = fk_graph_ms,
    .own_weight_bytes = fk_own_weight_bytes, .fp8_counts = fk_fp8_counts, .tactics_export = fk_tactics_export,
    .tactics_import = fk_tactics_import, .tactics_timed = fk_tactics_timed};

__attribute__((visibility("default"))) const kiln_devmod *kiln_devmod_entry(void) { return &fk_module; }
