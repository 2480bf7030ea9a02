/* FP8 feeds (docs/CUDA.md, "FP8 GEMMs"): in a --device cuda build, a layer whose output an FP8 layer quantizes
 * next gets KILN_ATTR_FP8_FEED = that FP8 layer's activation scale, so the CUDA module can write the E4M3 copy
 * in the kernel that produces the output (LayerNorm, the attention kernel, an FP8 GEMM's GELU epilogue) instead of
 * the FP8 layer reading the output again in a pass of its own. The mark only says which scale the readers want:
 * the module checks, when the FP8 layer runs, that the copy it keeps is of that data with that scale (else it
 * quantizes as before), so the bytes and the results are the same either way. */
#include "precision.h"
#include "../core/numfmt.h"
#include <math.h>
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
