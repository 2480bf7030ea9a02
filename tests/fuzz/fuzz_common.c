/* Shared pieces of the fuzz harnesses; see fuzz_common.h. */
#include "fuzz_common.h"
#include "runtime/exec.h"
#include "runtime/model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void quiet(kiln_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)msg;
    (void)user;
}

static bool verbose;

void fuzz_note(const char *what, kiln_status st)
{
    if (verbose)
        fprintf(stderr, "fuzz: %s: %s%s%s\n", what, kiln_status_str(st), st ? ": " : "", st ? kiln_last_error() : "");
}

const char *fuzz_init(void)
{
    static char dir[64];
    if (dir[0])
        return dir;
    verbose = getenv("KILN_FUZZ_VERBOSE") != NULL;
    if (!verbose)
        kiln_set_log_callback(quiet, NULL);
    /* one directory per user, shared by all harness processes; each file is written under a
     * per-process name and renamed, so concurrent processes never see it half written */
    snprintf(dir, sizeof dir, "/tmp/kiln-fuzz-%d", (int)getuid());
    mkdir(dir, 0700);
    static const char *const names[] = {"weights.bin", "empty.bin"};   /* also in onnx.dict */
    for (int i = 0; i < 2; i++) {
        char p[128], tmp[160];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        snprintf(tmp, sizeof tmp, "%s.%d", p, (int)getpid());
        FILE *f = fopen(tmp, "wb");
        for (int k = 0; f && i == 0 && k < 4096; k++)
            fputc(k * 7 + 1, f);
        if (f && fclose(f) == 0)
            rename(tmp, p);
    }
    return dir;
}

const char *fuzz_memfile(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("kiln-fuzz", 0);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("memfd write");
        abort();
    }
    return path;
}

bool fuzz_make_inputs(const kiln_graph *g, const struct kiln_engine *e, kiln_tensor *ins)
{
    if (g->n_inputs > FUZZ_MAX_INPUTS)
        return false;
    memset(ins, 0, sizeof *ins * (size_t)g->n_inputs);
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        int64_t dims[KILN_MAX_DIMS];
        int nd = -1;
        for (int k = 0; e && e->n_profiles && k < e->profiles[0].n_inputs; k++)
            if (!strcmp(e->profiles[0].names[k], v->name) && e->profiles[0].ndim[k] <= KILN_MAX_DIMS) {
                nd = e->profiles[0].ndim[k];
                memcpy(dims, e->profiles[0].opt[k], sizeof(int64_t) * (size_t)(nd > 0 ? nd : 0));
            }
        if (nd < 0 && v->ndim >= 0 && v->ndim <= KILN_MAX_DIMS) {
            nd = v->ndim;
            for (int d = 0; d < nd; d++)
                dims[d] = v->dims[d].value >= 0 && !v->dims[d].param ? v->dims[d].value : 1;
        }
        kiln_dtype dt = v->dtype ? v->dtype : KILN_DT_FLOAT32;
        int64_t n = nd >= 0 ? kiln__shape_numel(nd, dims) : -1;
        if (n < 0 || n > FUZZ_MAX_INPUT_ELEMS || kiln_dtype_size(dt) == 0 ||
            kiln__tensor_alloc(&ins[i], dt, nd, dims) != KILN_OK) {
            fuzz_note("no synthetic input (unknown rank, dtype or too large)", KILN_ERR_LIMIT);
            fuzz_free_inputs(g, ins);
            return false;
        }
        /* small values that are valid indices/sizes for most ops: floats in [-1.25, 1.25],
         * integers 0, 1, 2; 8-bit floats (no element accessors) get raw bytes */
        for (int64_t k = 0; k < n; k++) {
            if (kiln_dtype_size(dt) == 1 && kiln__dtype_is_float(dt))
                ((uint8_t *)ins[i].data)[k] = (uint8_t)(0x30 + k % 16);
            else if (kiln__dtype_is_float(dt))
                kiln__set_f64(dt, ins[i].data, k, (double)(k * 7 % 11 - 5) * 0.25);
            else
                kiln__set_i64(dt, ins[i].data, k, dt == KILN_DT_BOOL ? k & 1 : k % 3);
        }
    }
    return true;
}

void fuzz_free_inputs(const kiln_graph *g, kiln_tensor *ins)
{
    for (int i = 0; i < g->n_inputs; i++)
        kiln__tensor_release(&ins[i]);
}

static double numel(const kiln_tensor *t)
{
    return t ? (double)kiln_tensor_numel(t) : 0;
}

/* Product over the spatial axes of (size + pads) / size: how much padding grows a window op. */
static double pad_growth(const kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    const int64_t *pads;
    int np = kiln__attr_ints(ctx->node, "pads", &pads);
    double f = 1;
    int sp = x && x->ndim > 2 ? x->ndim - 2 : 0;
    for (int d = 0; np == 2 * sp && d < sp; d++) {
        double s = x->dims[2 + d] > 0 ? (double)x->dims[2 + d] : 1;
        f *= (s + fabs((double)pads[d]) + fabs((double)pads[sp + d])) / s;
    }
    return f;
}

/* Rough upper bound of the element operations one node does, from its input sizes. Outputs
 * are already bounded by the tensor-size cap; what is left are ops whose work grows with the
 * product of input sizes (contractions, windows, pairwise ops) and control flow. */
static double node_work(const kiln_kctx *ctx)
{
    double sum = 1;
    for (int i = 0; i < ctx->n_in; i++)
        sum += numel(ctx->in[i]);
    double a = numel(kiln__kin(ctx, 0)), b = numel(kiln__kin(ctx, 1));
    const int64_t *ks;
    switch (ctx->node->op) {
    case KILN_OP_MatMul: case KILN_OP_FusedMatMul: case KILN_OP_Gemm: case KILN_OP_FusedGemm:
    case KILN_OP_MatMulInteger: case KILN_OP_Attention: case KILN_OP_ConvTranspose:
    case KILN_OP_RNN: case KILN_OP_GRU: case KILN_OP_LSTM:
        return sum + a * (b + numel(kiln__kin(ctx, 2)));
    case KILN_OP_QLinearMatMul:
        return sum + a * numel(kiln__kin(ctx, 3));
    case KILN_OP_Conv: case KILN_OP_FusedConv: case KILN_OP_ConvInteger:
        return sum + a * b * pad_growth(ctx);
    case KILN_OP_QLinearConv:
        return sum + a * numel(kiln__kin(ctx, 3)) * pad_growth(ctx);
    case KILN_OP_Einsum: {
        double p = 1;
        for (int i = 0; i < ctx->n_in; i++)
            p *= numel(ctx->in[i]) + 1;
        return sum + p;
    }
    case KILN_OP_MaxPool: case KILN_OP_AveragePool: case KILN_OP_LpPool: {
        double k = 1;
        int nk = kiln__attr_ints(ctx->node, "kernel_shape", &ks);
        for (int d = 0; d < nk; d++)
            k *= ks[d] > 1 ? (double)ks[d] : 1;
        return sum + a * k * pad_growth(ctx);
    }
    case KILN_OP_LRN:
        return sum + a * (double)kiln__attr_i(ctx->node, "size", 1);
    case KILN_OP_NonMaxSuppression: case KILN_OP_DFT: case KILN_OP_STFT: case KILN_OP_Det: case KILN_OP_Unique:
    case KILN_OP_TopK:
        return sum + a * a;
    case KILN_OP_Loop: {
        /* the body's nodes are not budgeted one by one: allow short loops of small tensors */
        const kiln_tensor *m = kiln__kin(ctx, 0);
        if (!m || kiln_tensor_numel(m) != 1 || !kiln__dtype_is_int(m->dtype))
            return 1e300;   /* no trip count: unbounded */
        int64_t trips = kiln__get_i64(m->dtype, m->data, 0);
        const kiln_attr *body = kiln__attr(ctx->node, "body");
        double nodes = body && body->g ? body->g->n_nodes + 1 : 1;
        return sum + (trips > 0 ? (double)trips : 0) * nodes * sum * 64;
    }
    case KILN_OP_Scan: {
        const kiln_attr *body = kiln__attr(ctx->node, "body");
        double nodes = body && body->g ? body->g->n_nodes + 1 : 1;
        return sum * sum * nodes;
    }
    default:
        return sum;
    }
}

typedef struct budget {
    double left;
} budget;

static kiln_status budget_hook(void *user, kiln_kctx *ctx, kiln_kernel_fn fn)
{
    budget *b = user;
    double w = node_work(ctx);
    if (!(w <= b->left))
        return kiln__err(KILN_ERR_LIMIT, "fuzz: work budget exceeded at node '%s'", ctx->node->name);
    b->left -= w;
    return fn(ctx);
}

kiln_status fuzz_run_budgeted(const kiln_graph *g, const kiln_tensor *ins)
{
    if (g->n_inputs > FUZZ_MAX_INPUTS)
        return KILN_ERR_LIMIT;
    const kiln_tensor *feed[FUZZ_MAX_INPUTS + 1];
    for (int i = 0; i < g->n_inputs; i++) {
        KILN_TRY(kiln__check_input(&g->values[g->inputs[i]], &ins[i]));
        feed[i] = &ins[i];
    }
    kiln_tensor *outs = kiln__calloc((size_t)g->n_outputs + 1, sizeof *outs);
    if (!outs)
        return KILN_ERR_NOMEM;
    budget b = {FUZZ_WORK_BUDGET};
    kiln_hooks h = {.tune = budget_hook, .tune_user = &b};
    size_t old_max = kiln__max_tensor_bytes();
    kiln_set_max_tensor_bytes(FUZZ_RUN_MAX_TENSOR_BYTES);
    kiln_status st = kiln__exec_graph_ex(g, NULL, feed, outs, NULL, 0, NULL, &h);
    kiln_set_max_tensor_bytes(old_max);
    fuzz_note("budgeted run", st);
    for (int o = 0; o < g->n_outputs; o++)
        kiln__tensor_release(&outs[o]);
    kiln__free(outs);
    return st;
}

void fuzz_run_context(kiln_engine_t e, const kiln_tensor *ins)
{
    kiln_context_t c;
    if (kiln_context_create(e, &c) != KILN_OK)
        return;
    kiln_context_set_threads(c, 1);
    bool ok = true;
    for (int i = 0; ok && i < e->g->n_inputs; i++)
        ok = kiln_context_set_input(c, e->g->values[e->g->inputs[i]].name, &ins[i]) == KILN_OK;
    size_t old_max = kiln__max_tensor_bytes();
    kiln_set_max_tensor_bytes(FUZZ_RUN_MAX_TENSOR_BYTES);
    if (ok)
        fuzz_note("context run", kiln_context_run(c));
    kiln_set_max_tensor_bytes(old_max);
    kiln_context_free(c);
}
