/* Precision plumbing of the builder (docs/PRECISION.md, "Requested and realized precision"):
 *   requests   every layer the build options name gets an internal attribute `kiln_prec_req`
 *              ("fp32", "fp16", "bf16", "int8"): --precision for Conv / MatMul / Gemm (int8 keeps
 *              the first and the last of them in fp32), then --layer-precision rules (glob on node
 *              names and op types, later rules win, any op), honoured exactly;
 *   int8       (before the optimization passes) BatchNormalization and scale/shift are folded,
 *              the model is calibrated (src/quant through kiln_calibrate) and Q/DQ nodes are
 *              inserted around each int8 Conv / MatMul: per-tensor activation scales from the
 *              calibration (uint8 with zero point 0 and T/255 after a Relu, else int8 T/127),
 *              symmetric per-output-channel int8 weights; the pass fuse-qdq then makes them
 *              QLinearConv / QLinearMatMul like any explicit QDQ model (each layer and residual Add
 *              whose output kiln quantized marked kiln_q_auto: implicit INT8, core/numfmt.h);
 *   fp16/bf16  (after the passes) constant weights of the layer are stored in that format, which
 *              the kernels take directly with float32 activations;
 *   realized   (after everything, every build) each layer's precision derived from its op and
 *              input types (node->precision, serialized with the graph); a layer whose realized precision differs
 *              from the requested one fails the build, naming it, unless fallback is allowed,
 *              and then it is listed in the precision report. */
#include "build.h"
#include "precision.h"
#include "../passes/rewrite.h"
#include "../core/numfmt.h"
#include "../backend/lowbit_blob.h"
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define REQ_ATTR KILN_ATTR_PREC_REQ
#define AUTO_ATTR "kiln_prec_auto"   /* 1: the request was made by --precision auto's planner */

/* Precision codes as node->precision stores them (the order of api_engine.c's names). */
enum { P_FP32 = 0, P_TF32, P_FP16, P_BF16, P_INT8, P_FP8, P_FP4, P_INT4, P_MXFP4, P_INT16, P_COUNT };
/* int16: realized only by a model's own 16-bit QuantizeLinear / DequantizeLinear (no layer kernel computes in it; a
 * --layer-precision rule may ask it of those, --precision and --allow refuse it) */
static const char *const prec_names[P_COUNT] = {"fp32", "tf32", "fp16",  "bf16", "int8",
                                                "fp8",  "nvfp4", "int4", "mxfp4", "int16"};
#define PREC_LIST "fp32, fp16, bf16, int8, fp8, nvfp4 (or fp4), mxfp4, int4"

/* A precision name: its code, -2 for names of issue 8 not implemented yet, -1 otherwise. */
static int prec_parse(const char *s)
{
    static const char *const later[] = {"tf32", "auto"};
    if (s && !strcmp(s, "fp4"))
        return P_FP4;   /* a synonym of nvfp4 */
    for (int p = 0; s && p < P_COUNT; p++)
        if (!strcmp(s, prec_names[p]) && p != P_TF32)
            return p;
    for (size_t k = 0; s && k < sizeof later / sizeof later[0]; k++)
        if (!strcmp(s, later[k]))
            return -2;
    return -1;
}

static kiln_status nomem(void) { return kiln__err(KILN_ERR_NOMEM, "out of memory"); }

/* ---- a growing text (the precision report) ---- */
typedef struct sbuf { char *p; size_t len, cap; bool oom; } sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->oom || n < 0)
        return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *p = kiln__realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static const char *node_label(const kiln_node *n) { return n->name && n->name[0] ? n->name : n->op_type; }

/* Conv / MatMul / Gemm and their fused forms: the layers --precision applies to. */
static bool is_compute(const kiln_node *n)
{
    switch (n->op) {
    case KILN_OP_Conv: case KILN_OP_MatMul: case KILN_OP_Gemm: case KILN_OP_FusedConv: case KILN_OP_FusedMatMul:
    case KILN_OP_FusedGemm:
        return true;
    default:
        return false;
    }
}

static bool is_int8_layer(const kiln_node *n)
{
    return n->op == KILN_OP_QLinearConv || n->op == KILN_OP_QLinearMatMul || n->op == KILN_OP_ConvInteger ||
           n->op == KILN_OP_MatMulInteger || n->op == KILN_OP_QGemm || n->op == KILN_OP_QLinearConvAdd ||
           n->op == KILN_OP_QLinearConvSum;
}

/* Value v holds a constant once the passes have run: an initializer, a Constant node's output, or the
 * output of an op that only moves, retypes or dequantizes constants -- Identity (how PyTorch exports tied
 * weights), Cast (FP16-stored weights), Transpose, Reshape, Flatten, Squeeze, Unsqueeze, DequantizeLinear --
 * whose inputs all are (recursively, a few ops deep). Requests are set before the passes; remove-identity and
 * constant-fold then make such a chain the constant the kernels take (PRECISION.md, "Requested and realized
 * precision"). */
#define CONST_CHAIN_DEPTH 8
/* An op that only moves or retypes its input 0's values (the chains const_value and dq_made follow) */
static bool moves_values(kiln_op op)
{
    switch (op) {
    case KILN_OP_Identity: case KILN_OP_Cast: case KILN_OP_Transpose: case KILN_OP_Reshape: case KILN_OP_Flatten:
    case KILN_OP_Squeeze: case KILN_OP_Unsqueeze:
        return true;
    default:
        return false;
    }
}

static bool const_value(const kiln_graph *g, int v, int depth)
{
    if (v < 0 || v >= g->n_values)
        return false;
    if (g->values[v].init)
        return true;
    int p = g->values[v].producer;
    if (p < 0 || g->nodes[p].dead || depth >= CONST_CHAIN_DEPTH)
        return false;
    const kiln_node *d = &g->nodes[p];
    if (d->op == KILN_OP_Constant)
        return true;
    if (!moves_values(d->op) && d->op != KILN_OP_DequantizeLinear)
        return false;
    if (d->n_in < 1 || d->in[0] < 0)
        return false;
    for (int j = 0; j < d->n_in; j++)
        if (d->in[j] >= 0 && !const_value(g, d->in[j], depth + 1))
            return false;
    return true;
}

/* A compute layer with a constant weight (input 1: const_value): what --precision applies to. MatMuls of two
 * activations (attention) stay float, as Softmax and the normalizations do, unless a --layer-precision rule
 * names them. */
static bool is_weight_layer(const kiln_graph *g, const kiln_node *n)
{
    return is_compute(n) && n->n_in >= 2 && const_value(g, n->in[1], 0);
}

/* A MatMul of two computed operands (attention: Q·Kᵀ, whose result feeds a Softmax, and the
 * weighting of V by it): with --precision int8 / fp8 / fp4 it is requested fp32, the layers
 * TensorRT users keep in higher precision besides the first and the last; a --layer-precision
 * rule may ask otherwise (no quantized kernel takes two computed operands: fallback or error). */
static bool is_attention(const kiln_graph *g, const kiln_node *n)
{
    if (n->dead || (n->op != KILN_OP_MatMul && n->op != KILN_OP_FusedMatMul) || n->n_in < 2 || is_weight_layer(g, n))
        return false;
    for (int k = 0; k < 2; k++) {
        int v = n->in[k], p = v >= 0 ? g->values[v].producer : -1;
        if (p < 0 || g->nodes[p].dead || const_value(g, v, 0))
            return false;   /* graph inputs and constants are not computed */
    }
    return true;
}

/* A ConvTranspose with a constant weight: a weight layer that no kernel runs with a reduced weight (the CPU
 * kernel takes W of X's type, the GPU's widens W to float32), so --precision keeps it in fp32 and says so. */
static bool is_convt_weight(const kiln_graph *g, const kiln_node *n)
{
    return !n->dead && n->op == KILN_OP_ConvTranspose && n->n_in >= 2 && const_value(g, n->in[1], 0);
}

static int req_of(const kiln_node *n) { return prec_parse(kiln__attr_s(n, REQ_ATTR, NULL)); }

/* ---- explicit quantization (PRECISION.md, "Explicit Q/DQ and --precision") ----
 * A Conv / MatMul / Gemm is explicitly quantized when the model's own DequantizeLinear makes its input 0 or its
 * weight (input 1), directly or through ops that only move or retype values (Identity, Reshape, Transpose, Flatten,
 * Squeeze, Unsqueeze, Cast), a few deep. Decided once, before anything is calibrated or inserted, and marked
 * EXPLICIT_ATTR (dropped in realize): such a layer keeps the model's quantization -- --precision requests nothing of
 * it, the first/last rule does not count it, no calibrated Q/DQ goes around it -- and a --layer-precision rule on
 * it is checked against what that quantization realizes. */
#define EXPLICIT_ATTR "kiln_qdq_explicit"

static bool dq_made(const kiln_graph *g, int v, int depth)
{
    int p = v >= 0 && v < g->n_values && !g->values[v].init ? g->values[v].producer : -1;
    if (p < 0 || g->nodes[p].dead || depth >= CONST_CHAIN_DEPTH)
        return false;
    const kiln_node *d = &g->nodes[p];
    if (d->op == KILN_OP_DequantizeLinear)
        return true;
    return moves_values(d->op) && d->n_in >= 1 && dq_made(g, d->in[0], depth + 1);
}

static bool explicit_layer(const kiln_node *n) { return kiln__attr_i(n, EXPLICIT_ATTR, 0) != 0; }

/* Marks the explicitly quantized compute layers; returns how many. */
static kiln_status mark_explicit(kiln_graph *g, int *count)
{
    *count = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead || !is_compute(n) || n->n_in < 2 || (!dq_made(g, n->in[0], 0) && !dq_made(g, n->in[1], 0)))
            continue;
        KILN_TRY(kiln__node_set_attr_i(n, EXPLICIT_ATTR, 1));
        (*count)++;
    }
    return KILN_OK;
}

/* The build line naming the explicitly quantized layers --precision P leaves to the model's Q/DQ. */
static void explicit_report(const kiln_graph *g, int global, int count, sbuf *rep)
{
    if (!count || global == P_FP32)
        return;
    sb_printf(rep, "explicit Q/DQ: %d layer%s keep%s the model's own quantization (--precision %s not applied, no "
              "calibrated Q/DQ added): ", count, count > 1 ? "s" : "", count > 1 ? "" : "s", prec_names[global]);
    int k = 0;
    for (int i = 0; i < g->n_nodes && k < 8; i++)
        if (!g->nodes[i].dead && explicit_layer(&g->nodes[i]))
            sb_printf(rep, "%s%s", k++ ? ", " : "", node_label(&g->nodes[i]));
    sb_printf(rep, "%s\n", count > 8 ? ", ..." : "");
}

/* Precisions whose weights are quantized (the first and last weight layers stay fp32). */
static bool quantized(int p) { return p == P_INT8 || p == P_FP8 || p == P_FP4 || p == P_MXFP4 || p == P_INT4; }

/* The weight formats of the low-bit layers (lowbit.h in the CPU backend): precision -> format. */
static bool lowbit_fmt(int p, kiln__qfmt *f)
{
    switch (p) {
    case P_FP8: *f = KILN_QF_FP8; return true;
    case P_FP4: *f = KILN_QF_NVFP4; return true;
    case P_MXFP4: *f = KILN_QF_MXFP4; return true;
    case P_INT4: *f = KILN_QF_INT4; return true;
    default: return false;
    }
}

int kiln__precision_code(const char *name) { return prec_parse(name); }
const char *kiln__precision_name(int code) { return code >= 0 && code < P_COUNT ? prec_names[code] : NULL; }
bool kiln__precision_weight_layer(const kiln_graph *g, int node) { return is_weight_layer(g, &g->nodes[node]); }

/* The glob of rule "PATTERN:PREC" into pat (false when the rule has no ':' or an empty pattern). */
static bool rule_pattern(const char *rule, char *pat, size_t n)
{
    const char *colon = rule ? strrchr(rule, ':') : NULL;
    if (!colon || colon == rule)
        return false;
    snprintf(pat, n, "%.*s", (int)(colon - rule), rule);
    return true;
}

static bool pattern_names(const char *pat, const kiln_node *n)
{
    return (n->name && n->name[0] && !fnmatch(pat, n->name, 0)) || !fnmatch(pat, n->op_type, 0);
}

bool kiln__precision_rule_names(const kiln_build_options *o, const kiln_node *n)
{
    char pat[512];
    for (int r = 0; o && o->layer_precisions && r < o->num_layer_precisions; r++)
        if (rule_pattern(o->layer_precisions[r], pat, sizeof pat) && pattern_names(pat, n))
            return true;
    return false;
}

/* ---- requests ---- */

static kiln_status set_requests(kiln_graph *g, const kiln_build_options *o, int global, const kiln_prec_plan *plan,
                                sbuf *rep)
{
    int kept[2] = {-1, -1};   /* int8: the first and last weight layers, requested fp32 */
    /* what keeping the first and last weight layers in higher precision means: fp32 on the CPU; fp16 in a
     * --device cuda build, where the layers between the low-bit ones hold FP16 anyway and an fp32 GEMM runs without
     * tensor cores (TF32 off: BERT-base FP8 b128 on the H200 spent ~0.5 ms a run in its first layer's fp32 GEMM,
     * docs/CUDA.md). Attention's MatMuls stay fp32 requests (no fp16 pattern for two computed operands; the GPU
     * runs the fused Attention in the half storage of its inputs) */
    const int keep_p = o && o->device == KILN_DEVICE_CUDA ? P_FP16 : P_FP32;
    int n_explicit;
    KILN_TRY(mark_explicit(g, &n_explicit));
    explicit_report(g, global, n_explicit, rep);
    if (global != P_FP32) {
        int first = -1, last = -1;
        for (int i = 0; i < g->n_nodes; i++)
            if (is_weight_layer(g, &g->nodes[i]) && !explicit_layer(&g->nodes[i])) {
                first = first < 0 ? i : first;
                last = i;
            }
        for (int i = 0; i < g->n_nodes; i++) {
            if (explicit_layer(&g->nodes[i]))
                continue;   /* the model's own Q/DQ decide */
            if ((quantized(global) && is_attention(g, &g->nodes[i])) || is_convt_weight(g, &g->nodes[i])) {
                KILN_TRY(kiln__node_set_attr_s(&g->nodes[i], REQ_ATTR, prec_names[P_FP32]));   /* kept: see both */
                continue;
            }
            if (!is_weight_layer(g, &g->nodes[i]))
                continue;
            bool keep = quantized(global) && (i == first || i == last);
            KILN_TRY(kiln__node_set_attr_s(&g->nodes[i], REQ_ATTR, prec_names[keep ? keep_p : global]));
        }
        if (quantized(global))
            kept[0] = first, kept[1] = last;
    }
    if (plan && plan->req && plan->n_nodes != g->n_nodes)
        return kiln__err(KILN_ERR_INTERNAL, "precision plan for %d nodes, graph of %d", plan->n_nodes, g->n_nodes);
    for (int i = 0; plan && plan->req && i < g->n_nodes; i++)
        if (plan->req[i]) {
            if (prec_parse(plan->req[i]) < 0)
                return kiln__err(KILN_ERR_INTERNAL, "precision plan: '%s'", plan->req[i]);
            KILN_TRY(kiln__node_set_attr_s(&g->nodes[i], REQ_ATTR, plan->req[i]));
            if (plan->mark_auto)
                KILN_TRY(kiln__node_set_attr_i(&g->nodes[i], AUTO_ATTR, 1));
        }
    for (int r = 0; o && r < o->num_layer_precisions; r++) {
        const char *rule = o->layer_precisions ? o->layer_precisions[r] : NULL;
        const char *colon = rule ? strrchr(rule, ':') : NULL;
        int p = colon ? prec_parse(colon + 1) : -1;
        char pat[512];
        if (!rule_pattern(rule, pat, sizeof pat) || p < 0)
            return kiln__err(KILN_ERR_INVALID_ARG, "layer precision '%s': %s", rule ? rule : "(null)",
                             p == -2 ? "precision not supported yet (" PREC_LIST ")"
                                     : "want PATTERN:PRECISION with PRECISION one of " PREC_LIST);
        int matched = 0;
        bool exact = !strpbrk(pat, "*?[\\");   /* names its layers exactly: enforced on fused ops too (realize) */
        for (int i = 0; i < g->n_nodes; i++) {
            kiln_node *n = &g->nodes[i];
            if (pattern_names(pat, n)) {
                KILN_TRY(kiln__node_set_attr_s(n, REQ_ATTR, prec_names[p]));
                if (exact)
                    KILN_TRY(kiln__node_set_attr_i(n, KILN_ATTR_PREC_EXACT, 1));
                else
                    kiln__node_drop_attr(n, KILN_ATTR_PREC_EXACT);
                matched++;
            }
        }
        if (!matched)
            return kiln__err(KILN_ERR_INVALID_ARG, "layer precision '%s': no layer name or op type matches '%s'",
                             rule, pat);
    }
    for (int i = 0; quantized(global) && i < g->n_nodes; i++)
        if (is_attention(g, &g->nodes[i]) && !explicit_layer(&g->nodes[i]) && req_of(&g->nodes[i]) == P_FP32)
            sb_printf(rep, "kept in fp32: %s (%s, both operands computed: attention scores or their weighting)\n",
                      node_label(&g->nodes[i]), g->nodes[i].op_type);
    for (int i = 0; global != P_FP32 && i < g->n_nodes; i++)
        if (is_convt_weight(g, &g->nodes[i]) && req_of(&g->nodes[i]) == P_FP32)
            sb_printf(rep, "kept in fp32: %s (ConvTranspose: no kernel in %s)\n", node_label(&g->nodes[i]),
                      prec_names[global]);
    for (int k = 0; k < 2; k++)   /* said once the rules are applied: a rule may lower them after all */
        if (kept[k] >= 0 && (k == 0 || kept[1] != kept[0]) && req_of(&g->nodes[kept[k]]) == keep_p)
            sb_printf(rep, "kept in %s: %s (%s, the %s layer; override with --layer-precision)\n", prec_names[keep_p],
                      node_label(&g->nodes[kept[k]]), g->nodes[kept[k]].op_type, k == 0 ? "first" : "last");
    return KILN_OK;
}

/* ---- graph building helpers (outside the pass pipeline: no use index) ---- */

static int new_value(kiln_graph *g, const char *base, const char *suffix, kiln_dtype dt)
{
    char name[512];
    int k = 0;
    do
        snprintf(name, sizeof name, "%s%s%d", base, suffix, k++);
    while (kiln__graph_find(g, name) >= 0);
    int v = kiln__graph_add_value(g, name);
    if (v >= 0)
        g->values[v].dtype = dt;
    return v;
}

/* Appends a node op(in) -> out (one output); the caller re-sorts the graph afterwards. */
static kiln_status add_node(kiln_graph *g, kiln_op op, const char *name, int opset, int n_in, const int *in, int out,
                            int *idx)
{
    int i = kiln__graph_add_node(g);
    if (i < 0)
        return nomem();
    kiln_node *n = &g->nodes[i];
    n->name = kiln__strdup(name);
    n->op_type = kiln__strdup(kiln__op_name(op));
    n->domain = kiln__strdup("");
    n->in = kiln__malloc(sizeof(int) * (size_t)n_in);
    n->out = kiln__malloc(sizeof(int));
    if (!n->name || !n->op_type || !n->domain || !n->in || !n->out)
        return nomem();
    n->op = op;
    n->opset = opset;
    n->n_in = n_in;
    memcpy(n->in, in, sizeof(int) * (size_t)n_in);
    n->n_out = 1;
    n->out[0] = out;
    g->values[out].producer = i;
    if (idx)
        *idx = i;
    return KILN_OK;
}

static int add_const(kiln_graph *g, const char *hint, kiln_tensor *t)
{
    int v = kiln__graph_add_const(g, hint, t);
    if (v < 0)
        kiln__tensor_release(t);
    return v;
}

static int scalar_const(kiln_graph *g, const char *hint, kiln_dtype dt, double value)
{
    kiln_tensor t;
    if (kiln__tensor_alloc(&t, dt, 0, NULL) != KILN_OK)
        return -1;
    kiln__set_f64(dt, t.data, 0, value);
    return add_const(g, hint, &t);
}

/* Rewires every reader of `from` except node `skip` to `to` (graph outputs keep `from`). */
static void reroute(kiln_graph *g, int from, int to, int skip)
{
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; i != skip && !g->nodes[i].dead && j < g->nodes[i].n_in; j++)
            if (g->nodes[i].in[j] == from)
                g->nodes[i].in[j] = to;
}

/* Releases the data of initializers no live node reads (and that are not graph inputs/outputs). */
static void release_unread(kiln_graph *g)
{
    bool *read = kiln__calloc((size_t)g->n_values + 1, sizeof *read);
    if (!read)
        return;   /* only a size optimization */
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; !g->nodes[i].dead && j < g->nodes[i].n_in; j++)
            if (g->nodes[i].in[j] >= 0)
                read[g->nodes[i].in[j]] = true;
    for (int k = 0; k < g->n_inputs; k++)
        read[g->inputs[k]] = true;
    for (int k = 0; k < g->n_outputs; k++)
        read[g->outputs[k]] = true;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].init && !read[v]) {
            kiln__tensor_release(g->values[v].init);
            kiln__free(g->values[v].init);
            g->values[v].init = NULL;
        }
    kiln__free(read);
}

/* ---- int8: calibration and Q/DQ insertion ---- */

typedef struct qctx {
    kiln_graph *g;
    kiln_calibration_t cal;
    int *dq_of;      /* value -> its DQ'd copy (-1: none yet) */
    int cap;
} qctx;

static float calib_threshold(const qctx *q, const char *name)
{
    for (int i = 0; i < kiln_calib_num_tensors(q->cal); i++)
        if (!strcmp(kiln_calib_tensor_name(q->cal, i), name))
            return kiln_calib_scale(q->cal, i) * 127.f;
    return -1.f;
}

/* v -> Q -> DQ with v's calibrated threshold; *out = the DQ'd value (-1: v is not calibrated).
 * With reroute_all every other reader of v then reads the DQ'd value. */
static kiln_status quantize_value(qctx *q, int v, bool reroute_all, int *out)
{
    kiln_graph *g = q->g;
    *out = v < q->cap ? q->dq_of[v] : -1;
    if (*out >= 0)
        return KILN_OK;
    float t = calib_threshold(q, g->values[v].name), scale;
    if (!(t > 0) || !isfinite(t))
        return KILN_OK;
    bool u8;
    int zp;
    kiln__int8_act_params(g, v, t, &u8, &scale, &zp);
    kiln_dtype dt = u8 ? KILN_DT_UINT8 : KILN_DT_INT8;
    const char *name = g->values[v].name;
    int s = scalar_const(g, name, KILN_DT_FLOAT32, scale);
    int z = scalar_const(g, name, dt, zp);
    int qv = new_value(g, name, "__kiln_q", dt), dv = new_value(g, name, "__kiln_dq", KILN_DT_FLOAT32);
    if (s < 0 || z < 0 || qv < 0 || dv < 0)
        return nomem();
    int qi, qin[3] = {v, s, z}, din[3] = {qv, s, z};
    char nm[512];
    snprintf(nm, sizeof nm, "%s__kiln_quantize", name);
    KILN_TRY(add_node(g, KILN_OP_QuantizeLinear, nm, 13, 3, qin, qv, &qi));
    snprintf(nm, sizeof nm, "%s__kiln_dequantize", name);
    KILN_TRY(add_node(g, KILN_OP_DequantizeLinear, nm, 13, 3, din, dv, NULL));
    if (reroute_all)
        reroute(g, v, dv, qi);
    if (v < q->cap)
        q->dq_of[v] = dv;
    *out = dv;
    return KILN_OK;
}

/* Symmetric per-channel int8 of a float32 weight along `axis` (PRECISION.md, INT8 per-channel:
 * s = channel amax / 127, q = clamp(RNE(x / s), -127, 127), an all-zero channel s = 1).
 * false (nothing added) when a value is not finite. With the layer's float32 bias b (per channel, NULL: none) and its
 * input's scale xs (> 0), a channel whose bias would not fit the int32 accumulator's scale xs * s (|b| / (xs * s) near
 * 2^31 or more: near-zero weights under a large bias, e.g. a channel a folded BatchNormalization nearly switched off)
 * gets s = |b| / (xs * 2^30) instead: its weights, negligible next to the bias, round to fewer levels, where the layer
 * otherwise could not be an integer layer at all (fuse-qdq refuses a bias it cannot hold in int32). */
#define BIAS_FIT 1073741824.f   /* 2^30 */
static kiln_status quantize_weight(kiln_graph *g, int wv, int axis, const float *bias, float xs, int *wq, int *ws,
                                   bool *ok)
{
    const kiln_tensor *w = g->values[wv].init;
    int64_t nch = w->dims[axis], inner = 1, n = kiln_tensor_numel(w);
    for (int d = axis + 1; d < w->ndim; d++)
        inner *= w->dims[d];
    const float *x = w->data;
    *ok = false;
    kiln_tensor ts, tq;
    KILN_TRY(kiln__tensor_alloc(&ts, KILN_DT_FLOAT32, 1, &nch));
    float *s = ts.data;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!isfinite(a)) {
            kiln__tensor_release(&ts);
            return KILN_OK;
        }
        int64_t c = (i / inner) % nch;
        s[c] = a > s[c] ? a : s[c];
    }
    for (int64_t c = 0; c < nch; c++) {
        s[c] = s[c] > 0 ? s[c] / 127.f : 1.f;
        /* only where fuse-qdq could not hold the bias at all (KILN_QBIAS_MAX): no other layer changes */
        float bx = bias && xs > 0 && isfinite(bias[c]) ? fabsf(bias[c]) / xs : 0.f;
        if (bx / s[c] >= 0.999f * KILN_QBIAS_MAX)
            s[c] = bx / BIAS_FIT;
    }
    kiln_status st = kiln__tensor_alloc(&tq, KILN_DT_INT8, w->ndim, w->dims);
    if (st != KILN_OK) {
        kiln__tensor_release(&ts);
        return st;
    }
    int8_t *qd = tq.data;
    for (int64_t i = 0; i < n; i++) {
        float r = rintf(x[i] / s[(i / inner) % nch]);
        qd[i] = (int8_t)(r < -127.f ? -127.f : (r > 127.f ? 127.f : r));
    }
    const char *name = g->values[wv].name;
    *ws = add_const(g, name, &ts);
    *wq = add_const(g, name, &tq);
    if (*ws < 0 || *wq < 0)
        return nomem();
    *ok = true;
    return KILN_OK;
}

/* The one-element scale of the DequantizeLinear producing v, or 0 */
static float dq_scale(const kiln_graph *g, int v)
{
    int p = v >= 0 ? g->values[v].producer : -1;
    const kiln_node *d = p >= 0 ? &g->nodes[p] : NULL;
    if (!d || d->dead || d->op != KILN_OP_DequantizeLinear || d->n_in < 2 || d->in[1] < 0)
        return 0.f;
    const kiln_tensor *t = g->values[d->in[1]].init;
    return t && t->dtype == KILN_DT_FLOAT32 && kiln_tensor_numel(t) == 1 ? *(const float *)t->data : 0.f;
}

/* Add node a reads y and a constant 1-D float32 bias of n elements. */
static bool bias_add(const kiln_graph *g, const kiln_node *a, int y, int64_t n)
{
    if (a->op != KILN_OP_Add || a->n_in != 2 || (a->in[0] == y) == (a->in[1] == y))
        return false;
    const kiln_tensor *b = g->values[a->in[a->in[0] == y ? 1 : 0]].init;
    return b && b->dtype == KILN_DT_FLOAT32 && b->ndim == 1 && b->dims[0] == n;
}

/* Value y is read by one of the model's own QuantizeLinear nodes (not one kiln inserted): that Q quantizes the layer's
 * output (fuse-qdq takes it as the output Q), kiln adds none of its own (the value would be rounded twice). */
static bool model_q_reads(const qctx *q, int y)
{
    const kiln_graph *g = q->g;
    if (y < q->cap && q->dq_of[y] >= 0)
        return false;
    for (int k = 0; k < g->n_nodes; k++)
        if (!g->nodes[k].dead && g->nodes[k].op == KILN_OP_QuantizeLinear && g->nodes[k].n_in > 0 &&
            g->nodes[k].in[0] == y)
            return true;
    return false;
}

/* One int8 layer: Q/DQ on its input and output activations, DQ(int8) for its weight. Layers
 * that cannot be quantized are left alone (their realized precision then says so). */
static kiln_status quantize_layer(qctx *q, int i)
{
    kiln_graph *g = q->g;
    kiln_node *n = &g->nodes[i];
    bool conv = n->op == KILN_OP_Conv, mm = n->op == KILN_OP_MatMul, gemm = n->op == KILN_OP_Gemm;
    if ((!conv && !mm && !gemm) || n->n_out != 1 || n->out[0] < 0 || n->in[0] < 0 || g->values[n->in[0]].init)
        return KILN_OK;
    const kiln_tensor *w = g->values[n->in[1]].init;
    if (!w || w->dtype != KILN_DT_FLOAT32 || (!conv && w->ndim != 2) || (conv && w->ndim < 3))
        return KILN_OK;
    /* Gemm -> QGemm: its bias must be a constant (made int32 by the fusion) */
    int waxis = conv ? 0 : gemm && kiln__attr_i(n, "transB", 0) ? 0 : 1;
    if (gemm && n->n_in > 2 && n->in[2] >= 0 && !g->values[n->in[2]].init)
        return KILN_OK;
    /* the value the output Q goes on: the layer's, or that of an activation reading it alone */
    int y = n->out[0], readers = 0, act = -1;
    for (int k = 0; k < g->n_nodes; k++)
        for (int j = 0; !g->nodes[k].dead && j < g->nodes[k].n_in; j++)
            if (g->nodes[k].in[j] == y) {
                readers++;
                act = k;
            }
    for (int k = 0; k < g->n_outputs; k++)
        readers += g->outputs[k] == y;
    kiln_fused_act fa;
    if (readers == 1 && act >= 0 && g->nodes[act].n_out == 1 && g->nodes[act].out[0] >= 0 &&
        kiln__activation_of(g, &g->nodes[act], &fa) && calib_threshold(q, g->values[g->nodes[act].out[0]].name) > 0)
        y = g->nodes[act].out[0];   /* fused as kiln_act (implied by the Q for Relu / Clip from 0) */
    /* a MatMul read only by its bias Add gets no output Q: fuse-qdq makes it a QLinearMatMul with an
     * int32 bias whose output is float, or requantized where an int8 reader quantizes the sum (or
     * the activation after it) */
    bool out_q = !(mm && readers == 1 && act >= 0 && bias_add(g, &g->nodes[act], y, w->dims[1])) &&
                 !model_q_reads(q, y);
    for (int k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] == y) {
            if (!gemm || y != n->out[0])
                return KILN_OK;
            out_q = false;
        }
    int xd = n->in[0], yd, wq, ws, xp = g->values[xd].producer;
    bool ok;
    if (xp < 0 || g->nodes[xp].op != KILN_OP_DequantizeLinear)   /* else: an int8 layer's output */
        KILN_TRY(quantize_value(q, n->in[0], false, &xd));
    if (xd < 0 || (out_q && calib_threshold(q, g->values[y].name) <= 0))
        return KILN_OK;
    /* a Conv's bias must fit the int32 accumulator (quantize_weight): with the input's scale */
    const kiln_tensor *bt = conv && n->n_in > 2 && n->in[2] >= 0 ? g->values[n->in[2]].init : NULL;
    const float *bias = bt && bt->dtype == KILN_DT_FLOAT32 && kiln_tensor_numel(bt) == w->dims[0] ? bt->data : NULL;
    KILN_TRY(quantize_weight(g, n->in[1], waxis, bias, dq_scale(g, xd), &wq, &ws, &ok));
    if (!ok)
        return KILN_OK;
    if (out_q)
        KILN_TRY(quantize_value(q, y, true, &yd));
    n = &g->nodes[i];
    if (out_q && yd >= 0)
        KILN_TRY(kiln__node_set_attr_i(n, KILN_ATTR_Q_AUTO, 1));
    int wd = new_value(g, g->values[n->in[1]].name, "__kiln_dq", KILN_DT_FLOAT32);
    if (wd < 0)
        return nomem();
    int din[2] = {wq, ws};
    char nm[512];
    snprintf(nm, sizeof nm, "%s__kiln_weight", node_label(n));
    KILN_TRY(add_node(g, KILN_OP_DequantizeLinear, nm, 13, 2, din, wd, NULL));
    n = &g->nodes[i];
    KILN_TRY(kiln__node_set_attr_i(&g->nodes[g->n_nodes - 1], "axis", waxis));
    n->in[0] = xd;
    n->in[1] = wd;
    return KILN_OK;
}

/* The DQ'd copy of value v: v itself when a DequantizeLinear makes it, else the one quantize_value
 * made (-1: none). */
static int dq_value(const qctx *q, int v)
{
    int p = v >= 0 ? q->g->values[v].producer : -1;
    if (p >= 0 && !q->g->nodes[p].dead && q->g->nodes[p].op == KILN_OP_DequantizeLinear)
        return v;
    return v >= 0 && v < q->cap ? q->dq_of[v] : -1;
}

/* Residual Adds between int8 layers: an Add whose result (or that of an activation reading it
 * alone) is quantized for an int8 layer reads the DQ'd copies of its two inputs, so that fuse-qdq
 * makes DQ, DQ -> Add [-> activation] -> Q one integer layer (com.microsoft QLinearAdd) and the
 * activations stay 8-bit across the block (an input such as a block's shortcut was otherwise read
 * in float, its Q/DQ serving only the int8 layers); the other readers of its result read the DQ'd
 * copy, as those of an int8 layer's output do. */
static kiln_status quantize_adds(qctx *q)
{
    kiln_graph *g = q->g;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead || n->op != KILN_OP_Add || n->n_in != 2 || n->n_out != 1 || n->out[0] < 0)
            continue;
        int y = n->out[0], readers = 0, act = -1;
        for (int k = 0; k < g->n_nodes; k++)
            for (int j = 0; !g->nodes[k].dead && j < g->nodes[k].n_in; j++)
                if (g->nodes[k].in[j] == y)
                    readers++, act = k;
        kiln_fused_act fa;
        if (readers == 1 && g->nodes[act].n_out == 1 && g->nodes[act].out[0] >= 0 &&
            kiln__activation_of(g, &g->nodes[act], &fa))
            y = g->nodes[act].out[0];
        int da = dq_value(q, n->in[0]), db = dq_value(q, n->in[1]);
        if (y >= q->cap || q->dq_of[y] < 0 || da < 0 || db < 0)
            continue;
        n->in[0] = da;
        n->in[1] = db;
        KILN_TRY(kiln__node_set_attr_i(n, KILN_ATTR_Q_AUTO, 1));
        /* as for an int8 layer's output: every other reader takes the DQ'd result too */
        int dq = g->values[q->dq_of[y]].producer, qn = dq >= 0 ? g->values[g->nodes[dq].in[0]].producer : -1;
        if (qn >= 0)
            reroute(g, y, q->dq_of[y], qn);
    }
    return KILN_OK;
}

static kiln_status run_passes(kiln_graph *g, const char *const *names)
{
    for (; *names; names++) {
        int changed;
        const kiln_pass_info *p = kiln__pass_find(*names);
        if (!p)
            return kiln__err(KILN_ERR_INTERNAL, "no pass named %s", *names);
        KILN_TRY(kiln__pass_run(p, g, kiln__builder_pass_ctx(), &changed));
    }
    return KILN_OK;
}

/* The graph in canonical form and its calibration (for int8 and fp8 layers): the planner's (given,
 * not owned) or made now from --calib (*cal owned by the caller when given is NULL). */
static kiln_status calibrate(kiln_graph *g, kiln_model_t m, const kiln_build_options *o, sbuf *rep,
                             kiln_calibration_t given, kiln_calibration_t *cal)
{
    if (!given && (!o->calib || (!o->calib->data_dir && !o->calib->cache_path)))
        return kiln__err(KILN_ERR_INVALID_ARG,
                         "int8 and fp8 layers need calibration data: give --calib DIR (or a calibration cache)");
    /* canonical form first, so that the layers' inputs and outputs are the tensors calibrated and
     * decomposed activations are single nodes the integer layers can apply */
    static const char *const canon[] = {"remove-identity", "constant-fold", "fold-batchnorm", "fold-scale-shift",
                                        "fuse-hardswish", "fuse-gelu", "dead-nodes", NULL};
    KILN_TRY(run_passes(g, canon));
    if (given) {
        *cal = given;
        return KILN_OK;
    }
    KILN_TRY(kiln_calibrate(m, o->calib, cal));
    char line[160];
    kiln__calib_describe(*cal, line, sizeof line);
    sb_printf(rep, "%s", line);
    return KILN_OK;
}

void kiln__calib_describe(kiln_calibration_t cal, char *buf, size_t n)
{
    snprintf(buf, n, "calibration: %s, %lld samples%s\n", kiln_calib_method_name(cal),
             (long long)kiln_calib_num_samples(cal), kiln_calib_from_cache(cal) ? " (from cache)" : "");
}

/* FP8 layers: the per-tensor scale of their input activation, amax / 448 over the calibration
 * data (max calibration, the FP8 recipe; the calibration method only shapes int8 thresholds).
 * A layer whose input was not calibrated gets none and is then not realized in fp8. */
static kiln_status fp8_scales(kiln_graph *g, kiln_calibration_t cal, kiln_device device, int wq)
{
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead || req_of(n) != P_FP8 || !is_compute(n) || n->n_in < 1 || n->in[0] < 0 || explicit_layer(n))
            continue;
        /* the GPU's FP8 GEMM scales its weight per tensor: a CUDA engine's FP8 layers are emulated (and
         * bias-corrected) that way too, so the CPU computes what the GPU will; a CPU build may ask
         * for it (kiln_prec_plan.fp8_wq, chosen by precision_wq.c) */
        if (device == KILN_DEVICE_CUDA || wq == KILN_WQ_TENSOR)
            KILN_TRY(kiln__node_set_attr_i(n, KILN_ATTR_WQ_TENSOR, 1));
        for (int t = 0; t < kiln_calib_num_tensors(cal); t++) {
            float amax = kiln_calib_amax(cal, t);
            if (strcmp(kiln_calib_tensor_name(cal, t), g->values[n->in[0]].name) || !isfinite(amax) || amax < 0)
                continue;
            KILN_TRY(kiln__node_set_attr_f(n, KILN_ATTR_AQ_SCALE, amax > 0 ? amax / 448.0f : 1.0f));
            break;
        }
    }
    return KILN_OK;
}

/* FP8 layers' bias correction on the calibration data (calib_bias.c), when the data is at hand
 * (a calibration cache holds only scales) and not turned off (KILN_FP8_BIAS_CORRECTION=0). */
static kiln_status fp8_bias(kiln_graph *g, const kiln_build_options *o, const kiln_prec_plan *plan, sbuf *rep)
{
    const char *env = getenv("KILN_FP8_BIAS_CORRECTION");
    if (env && !strcmp(env, "0")) {
        sb_printf(rep, "fp8 bias correction: off (KILN_FP8_BIAS_CORRECTION=0)\n");
        return KILN_OK;
    }
    if (!o->calib || !o->calib->data_dir) {
        sb_printf(rep, "fp8 bias correction: not done (it needs the calibration data, --calib DIR: a calibration "
                       "cache holds only scales)\n");
        return KILN_OK;
    }
    int done;
    int64_t rows;
    bool choose = plan && plan->fp8_wq == KILN_WQ_LAYER && o->device != KILN_DEVICE_CUDA;
    KILN_TRY(kiln__fp8_bias_correct(g, o->calib->data_dir, o->num_threads, plan ? plan->bias : NULL, choose, &done,
                                    &rows));
    if (done && rows)
        sb_printf(rep, "fp8 bias correction: %d layers, measured on %lld calibration samples\n", done, (long long)rows);
    else if (done && plan && plan->bias && plan->bias->samples > 0)
        sb_printf(rep, "fp8 bias correction: %d layers, measured on %lld calibration samples (for a trial build)\n",
                  done, (long long)plan->bias->samples);
    else if (done)
        sb_printf(rep, "fp8 bias correction: %d layers (as measured for an earlier trial build)\n", done);
    int fp8 = 0, tensor = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && kiln__attr(&g->nodes[i], KILN_ATTR_AQ_SCALE)) {
            fp8++;
            tensor += kiln__attr_i(&g->nodes[i], KILN_ATTR_WQ_TENSOR, 0) != 0;
        }
    if (fp8 && o->device != KILN_DEVICE_CUDA)
        sb_printf(rep, "fp8 weight scales: per tensor on %d of %d layers, per output channel on the others\n", tensor,
                  fp8);
    return KILN_OK;
}

static kiln_status insert_qdq(kiln_graph *g, kiln_calibration_t cal)
{
    qctx q = {.g = g, .cal = cal};
    q.cap = g->n_values;
    q.dq_of = kiln__malloc(sizeof(int) * ((size_t)q.cap + 1));
    kiln_status st = q.dq_of ? KILN_OK : nomem();
    for (int v = 0; v < q.cap && q.dq_of; v++)
        q.dq_of[v] = -1;
    int n0 = g->n_nodes;
    for (int i = 0; i < n0 && st == KILN_OK; i++)
        if (!g->nodes[i].dead && req_of(&g->nodes[i]) == P_INT8 && !explicit_layer(&g->nodes[i]))
            st = quantize_layer(&q, i);
    if (st == KILN_OK)
        st = quantize_adds(&q);
    kiln__free(q.dq_of);
    if (st == KILN_OK)
        st = kiln__graph_toposort(g);
    return st;
}

/* ---- fp16 / bf16 weights ---- */

/* FP16 weights of w (n values, converted into h): a finite value past FP16's range (|x| > 65504) is set to +-65504
 * rather than left to round to infinity (TensorRT clamps and warns the same way); the count of such values */
static int64_t fp16_clamp(uint16_t *h, const float *w, int64_t n, float *worst)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(w[i]) && fabsf(w[i]) > 65504.0f) {
            h[i] = w[i] < 0 ? 0xfbffu : 0x7bffu;
            *worst = fabsf(w[i]) > *worst ? fabsf(w[i]) : *worst;
            c++;
        }
    return c;
}

/* FP16 weights that lose most of their precision: of the n values of w (converted into h), counts the nonzero finite
 * ones (*nz), those whose FP16 value is zero or a subnormal under 2^-19 (returned: at most 5 of FP16's 11
 * significant bits left; FP16's subnormals start at 2^-14 and end at 2^-24) and of those the zeros (*flushed);
 * *least = the smallest nonzero |w|. TensorRT warns of subnormal and flushed FP16 weights the same way. */
#define FP16_FEW_BITS 32u   /* FP16 codes (sign cleared) below 32: 0 or a subnormal of at most 5 significant bits */
static int64_t fp16_underflow(const uint16_t *h, const float *w, int64_t n, int64_t *nz, int64_t *flushed, float *least)
{
    int64_t c = 0;
    *nz = *flushed = 0;
    *least = INFINITY;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(w[i]);
        if (!(a > 0) || !isfinite(a))
            continue;
        ++*nz;
        *least = a < *least ? a : *least;
        if ((h[i] & 0x7fffu) < FP16_FEW_BITS) {
            c++;
            *flushed += (h[i] & 0x7fffu) == 0;
        }
    }
    return c;
}

/* The share of a weight's nonzero values so reduced from which the build says so (PRECISION.md, "FP16 and BF16
 * weights"): a few tiny values among normal ones hardly change a layer, a weight much of which is that small does. */
#define FP16_UNDERFLOW_SHARE 0.01

/* Says (into rep) when the FP16 copy h of weight wv of layer n lost at least FP16_UNDERFLOW_SHARE of its nonzero
 * values to zero or to subnormals of few bits (fp16_underflow). */
static void fp16_underflow_report(const kiln_graph *g, const kiln_node *n, int wv, const uint16_t *h, sbuf *rep)
{
    const kiln_tensor *w = g->values[wv].init;
    int64_t nz, flushed;
    float least;
    int64_t under = fp16_underflow(h, w->data, kiln_tensor_numel(w), &nz, &flushed, &least);
    if (!under || (double)under < FP16_UNDERFLOW_SHARE * (double)nz)
        return;
    const char *name = n->name && n->name[0] ? n->name : NULL;
    sb_printf(rep, "fp16 weights underflow: %s (%s): %lld of %lld nonzero values below 1.9e-06, where FP16 keeps at "
              "most 5 significant bits: %lld flushed to 0, the others subnormal (smallest |w| %g; bf16 keeps the "
              "range; or --layer-precision %s:fp32)\n", g->values[wv].name, name ? name : "", (long long)under,
              (long long)nz, (long long)flushed, (double)least, name ? name : "LAYER");
}

static kiln_status reduce_weights(kiln_graph *g, sbuf *rep)
{
    int n0 = g->n_nodes, nv0 = g->n_values, *done = kiln__malloc(sizeof(int) * (2 * (size_t)nv0 + 1));
    if (!done)
        return nomem();
    for (int v = 0; v < 2 * nv0; v++)
        done[v] = -1;   /* [2v]: the FP16 copy of value v, [2v + 1]: the BF16 one */
    kiln_status st = KILN_OK;
    for (int i = 0; i < n0 && st == KILN_OK; i++) {
        kiln_node *n = &g->nodes[i];
        int p = req_of(n);
        if (n->dead || !is_compute(n) || (p != P_FP16 && p != P_BF16) || n->n_in < 2 || n->in[1] < 0 ||
            explicit_layer(n))   /* the model's own Q/DQ weights stay as they are: the request is unmet */
            continue;
        int wv = n->in[1], *slot = &done[2 * wv + (p == P_BF16)];
        const kiln_tensor *w = g->values[wv].init;
        bool input = false;
        for (int k = 0; k < g->n_inputs; k++)
            input |= g->inputs[k] == wv;
        if (!w || w->dtype != KILN_DT_FLOAT32 || input)
            continue;
        if (*slot < 0) {
            kiln_tensor t;
            if ((st = kiln__tensor_alloc(&t, p == P_FP16 ? KILN_DT_FLOAT16 : KILN_DT_BFLOAT16, w->ndim, w->dims)) != KILN_OK)
                break;
            (p == P_FP16 ? kiln__f32_to_f16_array : kiln__f32_to_bf16_array)(t.data, w->data, kiln_tensor_numel(w));
            float worst = 0;
            int64_t clamped = p == P_FP16 ? fp16_clamp(t.data, w->data, kiln_tensor_numel(w), &worst) : 0;
            if (clamped)   /* said: the layer computes with other weights than the model's */
                sb_printf(rep, "fp16 weights clamped: %s (%s): %lld values outside FP16's range (largest |w| %g) set "
                          "to +-65504 (bf16 keeps the range; or --layer-precision %s:fp32)\n", g->values[wv].name,
                          n->name ? n->name : "", (long long)clamped, (double)worst, n->name ? n->name : "LAYER");
            if (p == P_FP16)   /* and below the range: values flushed to 0 or kept with few bits */
                fp16_underflow_report(g, n, wv, t.data, rep);
            if ((*slot = add_const(g, g->values[wv].name, &t)) < 0)
                st = nomem();
        }
        /* the kernels take FP16 / BF16 weights with float32 activations (PRECISION.md) */
        g->nodes[i].in[1] = *slot;
    }
    kiln__free(done);
    if (st == KILN_OK)
        release_unread(g);
    return st;
}

/* ---- fp8 / nvfp4 / mxfp4 / int4 weights ---- */

/* Value wv is a finite float32 constant (an initializer with data, not a graph input) of rank conv ? >= 3 : 2. */
static bool lowbit_weight(const kiln_graph *g, int wv, bool conv)
{
    const kiln_tensor *w = g->values[wv].init;
    for (int k = 0; k < g->n_inputs; k++)
        if (g->inputs[k] == wv)
            return false;
    if (!w || !w->data || w->dtype != KILN_DT_FLOAT32 || (conv ? w->ndim < 3 : w->ndim != 2) ||
        kiln_tensor_numel(w) <= 0)
        return false;
    const float *x = w->data;
    for (int64_t i = 0; i < kiln_tensor_numel(w); i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* The layer takes low-bit weights: a finite float32 constant weight of the shape the kernels
 * take (Conv: rank >= 3; MatMul / Gemm: 2-D), float32 activations, and for fp8 a calibrated
 * activation scale. */
static bool lowbit_ok(const kiln_graph *g, const kiln_node *n, int p)
{
    if (!is_compute(n) || n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0 ||
        (g->values[n->in[0]].dtype != KILN_DT_FLOAT32 && g->values[n->in[0]].dtype != KILN_DT_UNDEFINED) ||
        (p == P_FP8 && !kiln__attr(n, KILN_ATTR_AQ_SCALE)))
        return false;
    return lowbit_weight(g, n->in[1], n->op == KILN_OP_Conv || n->op == KILN_OP_FusedConv);
}

/* An embedding lookup (PRECISION.md, "4-bit embedding tables"): a Gather along axis 0 of a 2-D finite
 * float32 constant (the table; not a graph input) by int32 / int64 indices (or indices of a type not
 * inferred: the kernel checks them as the float32 Gather does). */
static bool is_embedding(const kiln_graph *g, const kiln_node *n)
{
    if (n->op != KILN_OP_Gather || n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0)
        return false;
    kiln_dtype it = g->values[n->in[1]].dtype;
    int64_t axis = kiln__attr_i(n, "axis", 0);
    return (it == KILN_DT_INT64 || it == KILN_DT_INT32 || it == KILN_DT_UNDEFINED) && (axis == 0 || axis == -2) && lowbit_weight(g, n->in[0], false);
}

/* A Gather marked with a low-bit table (lower_weights). */
static bool lowbit_embedding(const kiln_node *n)
{
    kiln__qfmt f;
    return n->op == KILN_OP_Gather && kiln__lowbit_parse(kiln__attr_s(n, KILN_ATTR_WQ, NULL), &f);
}

/* The 4-bit weight-only formats: their builds store the large embedding tables in the format too. */
static bool four_bit(int p) { return p == P_FP4 || p == P_MXFP4 || p == P_INT4; }

/* The elements of the float constants live nodes read (the model's weights, counted once each). */
static int64_t weight_elements(const kiln_graph *g)
{
    bool *seen = kiln__calloc((size_t)g->n_values + 1, sizeof *seen);
    int64_t total = 0;
    for (int i = 0; seen && i < g->n_nodes; i++)
        for (int k = 0; !g->nodes[i].dead && k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            const kiln_tensor *t = v >= 0 ? g->values[v].init : NULL;
            if (t && !seen[v] && kiln__dtype_is_float(t->dtype))
                total += kiln_tensor_numel(t);
            if (v >= 0)
                seen[v] = true;
        }
    kiln__free(seen);
    return total;
}

/* A table smaller than this fraction of the model's weights stays float32 unless a rule asks for 4 bits: the
 * position and token-type tables of BERT-base (0.4 % of its weights) cost it 0.6 dB of SNR for 1.4 MB
 * (PRECISION.md, "4-bit embedding tables"). */
#define TABLE_MIN_SHARE 0.01

/* In a 4-bit build (global), marks each embedding table (is_embedding) holding at least TABLE_MIN_SHARE of the
 * model's weights, unless a --layer-precision rule keeps its Gather in another precision; in any build, each
 * one a rule asks a 4-bit format for. Its lookups read the packed table, the dequantized values rounded to FP16
 * as the weight-only layers' weights (KILN_ATTR_AQ "fp16": what the GPU writes). Reported. */
static kiln_status lower_tables(kiln_graph *g, int global, sbuf *rep)
{
    int tables = 0, small = 0;
    double f32_bytes = 0, packed = 0, all = (double)weight_elements(g);
    kiln__qfmt tf = KILN_QF_NVFP4, f;
    bool mixed = false;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        bool asked = kiln__attr(n, REQ_ATTR) != NULL;
        int p = asked ? req_of(n) : global;
        if (n->dead || n->op != KILN_OP_Gather || !four_bit(p) || !lowbit_fmt(p, &f) || !is_embedding(g, n))
            continue;
        const kiln_tensor *w = g->values[n->in[0]].init;
        kiln_lowbit_blob B;
        if (!kiln__lowbit_blob_layout(f, w->dims[0], w->dims[1], false, false, &B))
            continue;
        if (!asked && (double)kiln_tensor_numel(w) < TABLE_MIN_SHARE * all) {
            small++;
            continue;
        }
        KILN_TRY(kiln__node_set_attr_s(n, KILN_ATTR_WQ, kiln__lowbit_name(f)));
        KILN_TRY(kiln__node_set_attr_s(n, KILN_ATTR_AQ, "fp16"));
        mixed |= tables && f != tf;
        tf = f;
        tables++;
        f32_bytes += (double)w->nbytes;
        packed += (double)(B.total + KILN_PREP_HDR_BYTES);
    }
    if (tables)
        sb_printf(rep, "embedding tables in %s: %d table%s, %.4g MB -> %.4g MB (float32 -> packed)\n",
                  mixed ? "4-bit formats" : kiln__lowbit_name(tf), tables, tables > 1 ? "s" : "", f32_bytes / 1e6,
                  packed / 1e6);
    if (small)
        sb_printf(rep, "embedding tables kept in float32: %d (each under %g%% of the weights; --layer-precision "
                       "NAME:%s stores one in 4 bits)\n", small, 100 * TABLE_MIN_SHARE, prec_names[global]);
    return KILN_OK;
}

/* Marks each layer requested in a low-bit format that can take it (the CPU backend stores its
 * weight quantized at packing time and runs it with the activations rounded: FP8 with the
 * calibrated scale, FP16 for the weight-only 4-bit formats), then the embedding tables (lower_tables). */
static kiln_status lower_weights(kiln_graph *g, int global, sbuf *rep)
{
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        int p = req_of(n);
        kiln__qfmt f;
        if (n->dead || !lowbit_fmt(p, &f) || !lowbit_ok(g, n, p) || explicit_layer(n))
            continue;
        KILN_TRY(kiln__node_set_attr_s(n, KILN_ATTR_WQ, kiln__lowbit_name(f)));
        KILN_TRY(kiln__node_set_attr_s(n, KILN_ATTR_AQ, p == P_FP8 ? "fp8" : "fp16"));
    }
    return lower_tables(g, global, rep);
}

/* ---- realized precision ---- */

static int dtype_prec(kiln_dtype dt)
{
    switch (dt) {
    case KILN_DT_FLOAT16: return P_FP16;
    case KILN_DT_BFLOAT16: return P_BF16;
    case KILN_DT_INT8: case KILN_DT_UINT8: return P_INT8;
    case KILN_DT_INT16: case KILN_DT_UINT16: return P_INT16;
    case KILN_DT_FP8E4M3: case KILN_DT_FP8E4M3FNUZ: case KILN_DT_FP8E5M2: case KILN_DT_FP8E5M2FNUZ: return P_FP8;
    case KILN_DT_INT4: case KILN_DT_UINT4: return P_INT4;
    case KILN_DT_FP4E2M1: return P_FP4;
    default: return P_FP32;
    }
}

static kiln_dtype value_dtype(const kiln_graph *g, int v)
{
    return v < 0 ? KILN_DT_UNDEFINED : g->values[v].init ? g->values[v].init->dtype : g->values[v].dtype;
}

/* The precision a QuantizeLinear (v: its output) or DequantizeLinear (v: its input) realizes: that of its quantized
 * type (PRECISION.md, "Requested and realized precision"): int8 for 8-bit integers, int16 for 16-bit ones, fp8 for
 * the four FP8 types, int4 for 4-bit integers, nvfp4 for E2M1; a DequantizeLinear of int32 (an integer layer's bias)
 * counts as int8. Where v's type is not recorded: the zero point's, else (DQ) what v's producer realized (vp), else
 * int8 (Q's default output, uint8). */
static int qdq_prec(const kiln_graph *g, const kiln_node *n, int v, const int *vp)
{
    kiln_dtype dt = value_dtype(g, v);
    if (dt == KILN_DT_UNDEFINED && n->n_in > 2)
        dt = value_dtype(g, n->in[2]);
    int p = dtype_prec(dt);
    if (dt == KILN_DT_UNDEFINED && n->op == KILN_OP_DequantizeLinear && v >= 0)
        p = vp[v];
    return p == P_FP32 || p == P_FP16 || p == P_BF16 || p == P_TF32 ? P_INT8 : p;
}

/* Per value: the precision its data is in (constants: their type; seen through a Cast of a
 * constant, which is how reduced weights are stored). Node outputs follow their first input
 * except where the op decides (quantize, dequantize, integer layers). */
static int layer_prec(const kiln_graph *g, const kiln_node *n, const int *vp)
{
    if (is_int8_layer(n))
        return P_INT8;
    kiln__qfmt f;
    if ((is_compute(n) || n->op == KILN_OP_Gather) && kiln__lowbit_parse(kiln__attr_s(n, KILN_ATTR_WQ, NULL), &f))
        return f == KILN_QF_FP8 ? P_FP8 : f == KILN_QF_NVFP4 ? P_FP4 : f == KILN_QF_MXFP4 ? P_MXFP4 : P_INT4;
    int src = is_compute(n) && n->n_in > 1 ? n->in[1] : (n->n_in > 0 ? n->in[0] : -1);
    (void)g;
    return src >= 0 ? vp[src] : P_FP32;
}

/* Line [s, e) split at tabs into at most n fields (start, length); returns how many. */
static int tab_fields(const char *s, const char *e, const char **f, int *len, int n)
{
    int k = 0;
    while (k < n) {
        const char *t = memchr(s, '\t', (size_t)(e - s));
        f[k] = s;
        len[k++] = (int)((t ? t : e) - s);
        if (!t)
            break;
        s = t + 1;
    }
    return k;
}

/* The requests fused into layer n (KILN_ATTR_PREC_FUSED lines "label\tdomain\top\tprecision[\t1]") that n, realized
 * in `real`, does not honour. Those of compute layers (is_compute) and those a rule naming the op exactly set
 * (the fifth field "1": `--layer-precision Relu_0:fp16`) are unmet requests like any other: each listed as a
 * fallback (allowed) or into bad (the first 8); returns how many went to bad. Another op a glob rule matched (a
 * block's BatchNormalization or Relu under `layer2_*:fp16`) follows the layer it is fused into: said, not an
 * error (PRECISION.md, "Requested and realized precision"). */
static int fused_unmet(const kiln_node *n, int real, bool fallback, sbuf *rep, sbuf *bad, int n_bad)
{
    const char *s = kiln__attr_s(n, KILN_ATTR_PREC_FUSED, NULL);
    int added = 0;
    while (s && *s) {
        const char *end = strchr(s, '\n'), *f[5];
        int len[5], nf = tab_fields(s, end ? end : s + strlen(s), f, len, 5);
        if (nf >= 4) {
            char dom[64], op[64], pr[16];
            snprintf(dom, sizeof dom, "%.*s", len[1], f[1]);
            snprintf(op, sizeof op, "%.*s", len[2], f[2]);
            snprintf(pr, sizeof pr, "%.*s", len[3], f[3]);
            kiln_node probe = {.op = kiln__op_lookup(dom, op)};
            int req = prec_parse(pr);
            bool enforced = is_compute(&probe) || (nf == 5 && len[4] == 1 && f[4][0] == '1');
            if (req < 0 || req == real)
                ;   /* honoured (or not a precision) */
            else if (!enforced)
                sb_printf(rep, "fused: %.*s (%s, fused into %s) requested %s by a pattern, runs in %s with that layer "
                          "(a rule naming it exactly requires %s)\n", len[0], f[0], op, node_label(n), prec_names[req],
                          prec_names[real], prec_names[req]);
            else if (fallback)
                sb_printf(rep, "fallback: %.*s (%s, fused into %s) requested %s, runs in %s\n", len[0], f[0], op,
                          node_label(n), prec_names[req], prec_names[real]);
            else {
                if (n_bad + added < 8)
                    sb_printf(bad, "%s%.*s (%s fused into %s: %s)", n_bad + added > 0 ? ", " : "", len[0], f[0], op,
                              node_label(n), prec_names[real]);
                added++;
            }
        }
        s = end ? end + 1 : NULL;
    }
    return added;
}

static kiln_status realize(kiln_graph *g, const kiln_build_options *o, sbuf *rep)
{
    int *vp = kiln__malloc(sizeof(int) * ((size_t)g->n_values + 1));
    if (!vp)
        return nomem();
    for (int v = 0; v < g->n_values; v++)
        vp[v] = g->values[v].init ? dtype_prec(g->values[v].init->dtype) : dtype_prec(g->values[v].dtype);
    sbuf bad = {0};
    int n_bad = 0;
    bool any_own = false;   /* an unmet request on a layer the model's own Q/DQ quantize (they take precedence) */
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        kiln_node *n = &g->nodes[i];
        int real = layer_prec(g, n, vp), out = real;
        if (n->op == KILN_OP_QuantizeLinear)
            real = out = qdq_prec(g, n, n->n_out > 0 ? n->out[0] : -1, vp);
        else if (n->op == KILN_OP_DequantizeLinear)
            real = qdq_prec(g, n, n->n_in > 0 ? n->in[0] : -1, vp), out = P_FP32;
        else if (n->op == KILN_OP_Cast)
            out = n->n_in && n->in[0] >= 0 && g->values[n->in[0]].init ? real : dtype_prec((kiln_dtype)kiln__attr_i(n, "to", 1));
        else if (is_compute(n) || lowbit_embedding(n) || (n->op == KILN_OP_QGemm && (n->n_in < 8 || n->in[7] < 0)) ||
                 (is_int8_layer(n) && kiln__attr_i(n, "kiln_out_float", 0)))
            out = P_FP32;   /* float output (QGemm without y_scale, kiln_out_float) */
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0)
                vp[n->out[k]] = out;
        n->precision = real;
        n_bad += fused_unmet(n, real, o->precision_fallback, rep, &bad, n_bad);
        kiln__node_drop_attr(n, KILN_ATTR_PREC_EXACT);   /* (only fusion needed it) */
        bool own = explicit_layer(n);
        kiln__node_drop_attr(n, EXPLICIT_ATTR);
        const char *why = kiln__attr_s(n, KILN_ATTR_QDQ_UNFUSED, NULL);
        if (why && !quantized(real))   /* an explicit Q/DQ layer left float: never silent */
            sb_printf(rep, "not fused: %s (%s) runs in %s on dequantized values (fake quantization): %s\n",
                      node_label(n), n->op_type, prec_names[real], why);
        kiln__node_drop_attr(n, KILN_ATTR_QDQ_UNFUSED);
        int req = req_of(n);
        if (!kiln__attr(n, REQ_ATTR) || req == real)
            continue;
        if (o->precision_fallback)
            sb_printf(rep, "fallback: %s (%s) requested %s, runs in %s%s\n", node_label(n), n->op_type,
                      prec_names[req < 0 ? 0 : req], prec_names[real], own ? " (the model's own Q/DQ)" : "");
        else if (n_bad++ < 8) {
            sb_printf(&bad, "%s%s (%s: %s%s)", n_bad > 1 ? ", " : "", node_label(n), n->op_type, prec_names[real],
                      own ? ", as the model's own Q/DQ quantize it" : "");
            any_own |= own;
        }
    }
    kiln__free(vp);
    if (st == KILN_OK && n_bad)
        st = kiln__err(KILN_ERR_UNSUPPORTED,
                       "%d layer%s cannot run in the requested precision: %s%s (no kernel or pattern for it%s; "
                       "--precision-fallback builds anyway and lists each fallback)",
                       n_bad, n_bad > 1 ? "s" : "", bad.p ? bad.p : "", n_bad > 8 ? ", ..." : "",
                       any_own ? ", or the model's own Q/DQ, which take precedence, quantize it otherwise" : "");
    kiln__free(bad.p);
    return st;
}

/* ---- the builder's two hooks ---- */

static int global_prec(const kiln_build_options *o)
{
    return o && o->precision ? prec_parse(o->precision) : P_FP32;
}

static bool any_request(const kiln_graph *g, int p)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && req_of(&g->nodes[i]) == p)
            return true;
    return false;
}

/* A request p kiln must calibrate for: on a node that is neither an explicitly quantized layer nor one of the
 * model's QuantizeLinear / DequantizeLinear (their own scales realize it or not). */
static bool calib_request(const kiln_graph *g, int p)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (!n->dead && req_of(n) == p && !explicit_layer(n) && n->op != KILN_OP_QuantizeLinear &&
            n->op != KILN_OP_DequantizeLinear)
            return true;
    }
    return false;
}

/* Hands the report to o->precision_report when the step succeeded (out of memory while writing it is
 * the step's failure), else frees it. */
static kiln_status finish_report(kiln_build_options *o, sbuf *rep, kiln_status st)
{
    if (st == KILN_OK && rep->oom)
        st = nomem();
    if (st == KILN_OK)
        o->precision_report = rep->p;
    else
        kiln__free(rep->p);
    return st;
}

kiln_status kiln__precision_before_passes(kiln_graph *g, kiln_model_t m, kiln_build_options *o,
                                          const kiln_prec_plan *plan)
{
    if (!o || (!o->precision && o->num_layer_precisions <= 0 && !plan))
        return KILN_OK;
    int global = global_prec(o);
    if (global < 0)
        return kiln__err(KILN_ERR_INVALID_ARG, "precision '%s': %s", o->precision,
                         global == -2 ? "not supported yet (" PREC_LIST ")" : "want one of " PREC_LIST);
    if (global == P_INT16)
        return kiln__err(KILN_ERR_INVALID_ARG, "precision 'int16': no layer computes in it (only a model's own 16-bit "
                         "QuantizeLinear / DequantizeLinear realize it); want one of " PREC_LIST);
    if (o->num_layer_precisions < 0 || o->num_layer_precisions > 4096)
        return kiln__err(KILN_ERR_INVALID_ARG, "invalid number of layer precision rules");
    sbuf rep = {0};
    if (plan && plan->report)
        sb_printf(&rep, "%s", plan->report);
    kiln_status st = set_requests(g, o, global, plan, &rep);
    bool i8 = st == KILN_OK && calib_request(g, P_INT8), f8 = st == KILN_OK && calib_request(g, P_FP8);
    kiln_calibration_t given = plan ? plan->cal : NULL, cal = NULL;
    if (i8 || f8)
        st = calibrate(g, m, o, &rep, given, &cal);
    else if (st == KILN_OK && !given && o->calib && (o->calib->data_dir || o->calib->cache_path) &&
             (global == P_INT8 || global == P_FP8 || any_request(g, P_INT8) || any_request(g, P_FP8)))
        /* the calibration data given reads nothing: every layer asked int8 / fp8 keeps the model's own Q/DQ (or
         * none was) -- said, so that a calibration the user meant to apply is not silently dropped */
        sb_printf(&rep, "calibration: not run (the calibration data given is unused): no layer takes calibrated "
                        "scales (each one asked int8 / fp8 keeps the model's own Q/DQ)\n");
    if (st == KILN_OK && f8)
        st = fp8_scales(g, cal, o->device, plan ? plan->fp8_wq : KILN_WQ_CHANNEL);
    if (st == KILN_OK && f8)
        st = fp8_bias(g, o, plan, &rep);
    if (st == KILN_OK && i8)
        st = insert_qdq(g, cal);
    if (cal && cal != given)
        kiln_calibration_free(cal);
    return finish_report(o, &rep, st);
}

/* "fp16" / "bf16" when o asks for half float activations (kiln_build_options.float_activations), else NULL */
static const char *half_activations(const kiln_build_options *o)
{
    const char *f = o ? o->float_activations : NULL;
    return f && (!strcmp(f, "fp16") || !strcmp(f, "bf16")) ? f : NULL;
}

kiln_status kiln__float_activations_check(const kiln_build_options *o)
{
    const char *f = o ? o->float_activations : NULL;
    if (!f || !strcmp(f, "fp32"))
        return KILN_OK;
    if (!half_activations(o))
        return kiln__err(KILN_ERR_INVALID_ARG, "float activations '%s': want fp16, bf16 or fp32", f);
    if (o->device != KILN_DEVICE_CUDA)
        return kiln__err(KILN_ERR_INVALID_ARG, "float activations %s: for --device cuda engines only (the CPU holds "
                         "INT8 layers' float outputs in float32)", f);
    return KILN_OK;
}

/* Marks KILN_ATTR_HALF_OUT = fmt on the INT8 layers whose float32 output the CUDA module writes (cuda_int8.c):
 * DequantizeLinear with a float32 scale, QLinearConv / QLinearConvAdd / QLinearMatMul with kiln_out_float; with
 * fmt NULL only counts them. */
static kiln_status mark_half_out(kiln_graph *g, const char *fmt, int *marked)
{
    *marked = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead || n->n_out < 1 || n->out[0] < 0)
            continue;
        bool dq = false;
        if (n->op == KILN_OP_DequantizeLinear) {
            const kiln_tensor *sc = n->n_in > 1 && n->in[1] >= 0 ? g->values[n->in[1]].init : NULL;
            dq = !sc || sc->dtype == KILN_DT_FLOAT32;
        }
        bool qf = ((n->op == KILN_OP_QLinearConv || n->op == KILN_OP_QLinearConvAdd || n->op == KILN_OP_QLinearMatMul) &&
                   kiln__attr_i(n, "kiln_out_float", 0) == 1) ||
                  (n->op == KILN_OP_QLinearConvAdd && kiln__attr_i(n, "kiln_res_float", 0) == 1);
        if (!dq && !qf)
            continue;
        if (fmt)
            KILN_TRY(kiln__node_set_attr_s(n, KILN_ATTR_HALF_OUT, fmt));
        (*marked)++;
    }
    return KILN_OK;
}

kiln_status kiln__precision_after_passes(kiln_graph *g, kiln_build_options *o)
{
    kiln_build_options none = {0};
    if (!o)
        o = &none;
    sbuf rep = {.p = o->precision_report, .len = o->precision_report ? strlen(o->precision_report) : 0};
    rep.cap = rep.p ? rep.len + 1 : 0;
    o->precision_report = NULL;
    kiln_status st = KILN_OK;
    if (any_request(g, P_FP16) || any_request(g, P_BF16))
        st = reduce_weights(g, &rep);
    if (st == KILN_OK)
        st = lower_weights(g, global_prec(o), &rep);
    if (st == KILN_OK)
        st = realize(g, o, &rep);
    /* the graph is final here: the FP8 feeds of a GPU engine (fp8_feed.c) */
    int feeds = 0;
    if (st == KILN_OK && o->device == KILN_DEVICE_CUDA && !o->no_optimize)
        st = kiln__fp8_mark_feeds(g, &feeds);
    if (feeds)
        sb_printf(&rep, "fp8 feeds: %d layers write their FP8 readers' input beside their output (GPU)\n", feeds);
    int stored = 0;
    if (st == KILN_OK && feeds)
        st = kiln__fp8_mark_store(g, &stored);
    if (stored)
        sb_printf(&rep, "fp8 storage: %d layer outputs held only in E4M3, read so by FP8 layers (GPU)\n", stored);
    /* said at build time too: the module writes FP8 layers' outputs in FP16 by default (docs/CUDA.md "FP8 GEMMs") */
    int f8 = 0;
    if (st == KILN_OK && o->device == KILN_DEVICE_CUDA)
        for (int i = 0; i < g->n_nodes; i++)
            f8 += !g->nodes[i].dead && g->nodes[i].precision == P_FP8;
    if (f8)
        sb_printf(&rep, "fp8 outputs: %d FP8 layers write FP16 on the GPU (E4M3 where held so), so the float layers "
                  "after them run in half storage (float32 arithmetic; KILN_CUDA_FP8_OUT=fp32 keeps float32)\n", f8);
    /* half float activations of a GPU INT8 engine (kiln_build_options.float_activations): marked here, reported by
     * kiln__precision_half_report once the device fusions are done */
    const char *half = o->device == KILN_DEVICE_CUDA ? half_activations(o) : NULL;
    int halved = 0;
    if (st == KILN_OK && half)
        st = mark_half_out(g, half, &halved);
    return finish_report(o, &rep, st);
}

kiln_status kiln__precision_half_report(kiln_graph *g, kiln_build_options *o)
{
    if (!o || o->device != KILN_DEVICE_CUDA)
        return KILN_OK;
    sbuf rep = {.p = o->precision_report, .len = o->precision_report ? strlen(o->precision_report) : 0};
    rep.cap = rep.p ? rep.len + 1 : 0;
    o->precision_report = NULL;
    const char *half = half_activations(o);
    int n = 0;
    kiln_status st = KILN_OK;
    if (half || !o->float_activations)
        st = mark_half_out(g, NULL, &n);   /* (counts the layers; marked already where half) */
    if (st == KILN_OK && n && !half)   /* a hint, as trtexec's */
        sb_printf(&rep, "float activations: %d INT8 layers write float32 on the GPU, the float layers after them run "
                  "in float32 (--float-activations fp16 holds them in half: faster, less exact)\n", n);
    if (st == KILN_OK && half && n)
        sb_printf(&rep, "float activations: %d INT8 layers write their float32 outputs in %s on the GPU (the float "
                  "layers after them run in half storage; the CPU keeps float32)\n", n, half);
    else if (st == KILN_OK && half)
        sb_printf(&rep, "float activations %s: no INT8 layer writes a float32 output, nothing is held in half\n",
                  half);
    return finish_report(o, &rep, st);
}

kiln_status kiln_engine_layer_storage(kiln_engine_t e, int i, const char **storage)
{
    if (!e || !e->g || i < 0 || i >= e->g->n_nodes || !storage)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_layer_storage: %s",
                         !e ? "NULL engine" : !storage ? "NULL storage" : "layer index out of range");
    float s = kiln__attr_f(&e->g->nodes[i], KILN_ATTR_FP8_STORE, NAN);
    const char *h = kiln__attr_s(&e->g->nodes[i], KILN_ATTR_HALF_OUT, "");
    *storage = s > 0 && isfinite(s) ? "e4m3" : !strcmp(h, "fp16") ? "fp16" : !strcmp(h, "bf16") ? "bf16" : "";
    return KILN_OK;
}

kiln_status kiln_engine_layer_precision(kiln_engine_t e, int i, const char **requested, const char **realized)
{
    if (!e || !e->g || i < 0 || i >= e->g->n_nodes)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_engine_layer_precision: %s", !e ? "NULL engine" : "layer index out of range");
    const kiln_node *n = &e->g->nodes[i];
    if (requested)
        *requested = kiln__attr_i(n, AUTO_ATTR, 0) ? "auto" : kiln__attr_s(n, REQ_ATTR, "");
    if (realized)
        *realized = n->precision >= 0 && n->precision < P_COUNT ? prec_names[n->precision] : "?";
    return KILN_OK;
}
