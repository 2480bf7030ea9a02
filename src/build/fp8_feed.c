/* FP8 feeds (docs/CUDA.md, "FP8 GEMMs"): in a --device cuda build, a layer whose output an FP8 layer quantizes
 * next gets KILN_ATTR_FP8_FEED = that FP8 layer's activation scale, so the CUDA module can write the E4M3 copy
 * in the kernel that produces the output (LayerNorm, the attention kernel, an FP8 GEMM's GELU epilogue) instead of
 * the FP8 layer reading the output again in a pass of its own. The mark only says which scale the readers want:
 * the module checks, when the FP8 layer runs, that the copy it keeps is of that data with that scale (else it
 * quantizes as before), so the bytes and the results are the same either way. */
#include "precision.h"
#include "../ir/fused.h"
#include "../core/numfmt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An FP8 layer as the CUDA module runs it: FP8 weights with one scale per tensor and a calibrated activation
 * scale, *scale. */
static bool fp8_layer(const kiln_node *n, float *scale)
{
    if (n->dead || (n->op != KILN_OP_MatMul && n->op != KILN_OP_FusedMatMul && n->op != KILN_OP_Gemm &&
                    n->op != KILN_OP_FusedGemm && n->op != KILN_OP_Conv && n->op != KILN_OP_FusedConv))
        return false;
    const char *wq = kiln__attr_s(n, KILN_ATTR_WQ, NULL), *aq = kiln__attr_s(n, KILN_ATTR_AQ, NULL);
    float s = kiln__attr_f(n, KILN_ATTR_AQ_SCALE, NAN);
    if (!wq || !aq || strcmp(wq, "fp8") || strcmp(aq, "fp8") || !(s > 0 && isfinite(s)) ||
        kiln__attr_i(n, KILN_ATTR_WQ_TENSOR, 0) != 1)
        return false;
    *scale = s;
    return true;
}

#define FEED_DEPTH 4   /* views followed from a producer to its FP8 readers */
#define FEED_READERS 64

/* The first FP8 layer in graph order (*first, the lowest node index) reading value v as its activation, directly or
 * through views. */
static void first_reader(const kiln_graph *g, int v, int depth, int *first, float *scale)
{
    int r[FEED_READERS];
    int n = kiln__value_readers(g, v, r, FEED_READERS);
    for (int i = 0; i < n && i < FEED_READERS; i++) {
        const kiln_node *c = &g->nodes[r[i]];
        float s;
        if (c->n_in < 1 || c->in[0] != v)
            continue;   /* reads v in another slot (a residual, a weight): not quantized */
        if (fp8_layer(c, &s)) {
            if (*first < 0 || r[i] < *first) {
                *first = r[i];
                *scale = s;
            }
        } else if (kiln__op_is_view(c->op) && depth < FEED_DEPTH && c->n_out > 0 && c->out[0] >= 0) {
            first_reader(g, c->out[0], depth + 1, first, scale);
        }
    }
}

kiln_status kiln__fp8_mark_feeds(kiln_graph *g, int *marked)
{
    *marked = 0;
    bool own = false;
    KILN_TRY(kiln__uses_ensure(g, &own));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead || kiln__op_is_view(n->op) || n->n_out < 1 || n->out[0] < 0)
            continue;
        int first = -1;
        float s = 0;
        first_reader(g, n->out[0], 0, &first, &s);
        if (first < 0)
            continue;
        st = kiln__node_set_attr_f(n, KILN_ATTR_FP8_FEED, s);
        *marked += st == KILN_OK;
    }
    if (own)
        kiln__uses_free(g);
    return st;
}

/* The largest reduction (input channels x kernel area) of a convolution that writes or reads E4M3 storage: such
 * layers run kiln's FP8 kernel, which beats cuDNN / cuBLASLt only where the layer is memory-bound. Session 15 (H200,
 * ResNet-50 batch 256 per layer) set 128: the residual 1x1 convolutions with K = 64 / 128 gained 0.03-0.07 ms each,
 * those with K = 256 / 512 lost 0.03-0.08 ms. Since kiln's kernel writes its epilogue from the registers (session 21)
 * those win too: 512 holds ResNet-50's layer 3-4 residual outputs as well (12 instead of 5), whole runs 6.43 -> 6.30
 * ms in one call (session 22; CPU emulation SNR 29.6 -> 29.1 dB, more residuals rounded through E4M3). */
#define FP8_STORE_MAX_K 512

/* FP8_STORE_MAX_K, or KILN_FP8_STORE_MAX_K at build time (a developer's A/B switch) */
static int64_t store_max_k(void)
{
    const char *e = getenv("KILN_FP8_STORE_MAX_K");
    char *end;
    long long v = e && *e ? strtoll(e, &end, 10) : 0;
    return e && *e && !*end && v > 0 ? (int64_t)v : FP8_STORE_MAX_K;
}

/* An FP8 convolution the CUDA module runs (cu_fp8_conv_accepts' static part: 4-D, one group, channels in multiples
 * of 16) with ReLU or no activation (what kiln's FP8 kernel fuses), *scale its activation scale; *k its reduction
 * (input channels x kernel area). */
static bool store_conv(const kiln_graph *g, const kiln_node *n, float *scale, int64_t *k)
{
    if ((n->op != KILN_OP_Conv && n->op != KILN_OP_FusedConv) || !fp8_layer(n, scale) || n->n_in < 2 ||
        kiln__attr_i(n, "group", 1) != 1)
        return false;
    kiln_fused_act a;
    if (n->op == KILN_OP_FusedConv && (!kiln__fused_act_of(n, &a) || (a.kind != KILN_FUSED_NONE && a.kind != KILN_FUSED_RELU)))
        return false;
    const kiln_tensor *w = n->in[1] >= 0 ? g->values[n->in[1]].init : NULL;
    if (!w || w->ndim != 4 || w->dims[0] % 16 || w->dims[1] % 16)
        return false;
    *k = w->dims[1] * w->dims[2] * w->dims[3];
    return true;
}

/* The readers of value v into r (at most FEED_READERS): their number, or 0 when v is a graph output (which must stay
 * readable as its dtype), has no reader or more than r holds. */
static int held_readers(const kiln_graph *g, int v, int *r)
{
    if (kiln__value_is_output(g, v))
        return 0;
    int n = kiln__value_readers(g, v, r, FEED_READERS);
    return n > FEED_READERS ? 0 : n;
}

/* Whether value v (written by an FP8 convolution whose feed scale is s) is read only by FP8 convolutions, as their
 * input 0 with scale s (any reduction: such a reader takes the held bytes as its quantized input, in any kernel) or
 * as their residual (a reduction of at most max_k: store_max_k()), at least one as a residual; not a graph output. */
static bool store_readers(const kiln_graph *g, int v, float s, int64_t max_k)
{
    int r[FEED_READERS];
    int n = held_readers(g, v, r), res = 0;
    for (int i = 0; i < n; i++) {
        const kiln_node *c = &g->nodes[r[i]];
        float cs;
        int64_t ck;
        if (!store_conv(g, c, &cs, &ck))
            return false;
        for (int k = 0; k < c->n_in; k++) {
            if (c->in[k] != v)
                continue;
            if (k == 0 && cs == s)
                continue;
            if (k == 3 && c->op == KILN_OP_FusedConv && ck <= max_k) {
                res++;
                continue;
            }
            return false;   /* read as a weight or bias, or quantized with another scale */
        }
    }
    return res > 0;
}

/* An FP8 MatMul / FusedMatMul / Gemm / FusedGemm the CUDA module runs as cuBLASLt's FP8 GEMM (cu_fp8_accepts'
 * static part: a 2-D float32 weight, K and N multiples of 16, no transA), *scale its activation scale. */
static bool fp8_gemm(const kiln_graph *g, const kiln_node *n, float *scale)
{
    bool gemm = n->op == KILN_OP_Gemm || n->op == KILN_OP_FusedGemm;
    if ((!gemm && n->op != KILN_OP_MatMul && n->op != KILN_OP_FusedMatMul) || !fp8_layer(n, scale) || n->n_in < 2 ||
        (gemm && kiln__attr_i(n, "transA", 0)))
        return false;
    const kiln_tensor *w = n->in[1] >= 0 ? g->values[n->in[1]].init : NULL;
    return w && w->ndim == 2 && w->dtype == KILN_DT_FLOAT32 && w->dims[0] % 16 == 0 && w->dims[1] % 16 == 0;
}

/* An FP8 FusedMatMul whose activation kiln's epilogue applies (not ReLU or none, which cuBLASLt's GEMM writes
 * itself): that epilogue can write the output as E4M3 bytes only. */
static bool store_gemm(const kiln_graph *g, const kiln_node *n)
{
    float s;
    kiln_fused_act a;
    return n->op == KILN_OP_FusedMatMul && fp8_gemm(g, n, &s) && kiln__fused_act_of(n, &a) &&
           a.kind != KILN_FUSED_NONE && a.kind != KILN_FUSED_RELU;
}

/* Whether value v is read only by FP8 GEMMs, as their input 0 with scale s, and is not a graph output. */
static bool gemm_readers(const kiln_graph *g, int v, float s)
{
    int r[FEED_READERS];
    int n = held_readers(g, v, r);
    for (int i = 0; i < n; i++) {
        const kiln_node *c = &g->nodes[r[i]];
        float cs;
        if (!fp8_gemm(g, c, &cs) || cs != s)
            return false;
        for (int k = 1; k < c->n_in; k++)
            if (c->in[k] == v)
                return false;   /* also its weight, bias or residual */
    }
    return n > 0;
}

kiln_status kiln__fp8_mark_store(kiln_graph *g, int *marked)
{
    *marked = 0;
    /* on unless KILN_FP8_STORAGE=0 at build time (docs/CUDA.md "E4M3 storage"; H200, ResNet-50 FP8 batch 256:
     * 8.14 / 8.16 -> 7.91 / 7.87 ms) */
    const char *e = getenv("KILN_FP8_STORAGE");
    if (e && !strcmp(e, "0"))
        return KILN_OK;
    const int64_t max_k = store_max_k();
    bool own = false;
    KILN_TRY(kiln__uses_ensure(g, &own));
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        kiln_node *n = &g->nodes[i];
        float s = kiln__attr_f(n, KILN_ATTR_FP8_FEED, NAN), cs;
        int64_t k;
        if (n->dead || n->n_out < 1 || n->out[0] < 0 || !(s > 0 && isfinite(s)))
            continue;
        bool conv = store_conv(g, n, &cs, &k);
        if (conv ? k > max_k || !store_readers(g, n->out[0], s, max_k)
                 : !store_gemm(g, n) || !gemm_readers(g, n->out[0], s))
            continue;
        st = kiln__node_set_attr_f(n, KILN_ATTR_FP8_STORE, s);
        *marked += st == KILN_OK;
    }
    if (own)
        kiln__uses_free(g);
    return st;
}
