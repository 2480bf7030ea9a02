/* fold-shapes: with fixed input shapes (a profile whose min == max, or a model with static
 * dims), Shape and Size of every value whose shape cannot depend on data become constants, so
 * constant folding can then collapse the Shape/Gather/Unsqueeze/Concat chains that exporters
 * write to compute Reshape targets. `shapes` holds each value's shape from one recorded run at
 * those input shapes; a taint analysis decides which of those shapes hold for any input data. */
#include "rewrite.h"
#include <stdio.h>
#include <stdlib.h>

/* Inputs (beyond the data input) whose VALUES decide an op's output shape. */
static bool shape_input(const kiln_node *n, int j)
{
    switch (n->op) {
    case KILN_OP_Reshape: case KILN_OP_Expand: case KILN_OP_Tile: case KILN_OP_Upsample: case KILN_OP_TopK:
    case KILN_OP_OneHot:
        return j == 1;
    case KILN_OP_Slice: case KILN_OP_Pad: case KILN_OP_Resize: case KILN_OP_Squeeze: case KILN_OP_Unsqueeze:
    case KILN_OP_Split: case KILN_OP_ReduceSum: case KILN_OP_ReduceMean: case KILN_OP_ReduceMax:
    case KILN_OP_ReduceMin: case KILN_OP_ReduceProd: case KILN_OP_ReduceL1: case KILN_OP_ReduceL2:
    case KILN_OP_ReduceLogSum: case KILN_OP_ReduceLogSumExp: case KILN_OP_ReduceSumSquare:
    case KILN_OP_DFT: case KILN_OP_STFT:
        return j >= 1;
    case KILN_OP_ConstantOfShape: case KILN_OP_Range: case KILN_OP_EyeLike: case KILN_OP_HannWindow:
    case KILN_OP_HammingWindow: case KILN_OP_BlackmanWindow: case KILN_OP_MelWeightMatrix:
        return true;
    default:
        return false;
    }
}

/* Ops whose output shape depends on data values no matter what. */
static bool data_dependent(const kiln_node *n)
{
    switch (n->op) {
    case KILN_OP_NonZero: case KILN_OP_Unique: case KILN_OP_Compress: case KILN_OP_NonMaxSuppression:
    case KILN_OP_Loop: case KILN_OP_If: case KILN_OP_Scan: case KILN_OP_UNKNOWN:
        return true;
    default:
        return false;
    }
}

kiln_status kiln__pass_fold_shapes(kiln_graph *g, const kiln_tensor *shapes, int n_shapes, int *changed)
{
    *changed = 0;
    if (!shapes || kiln__graph_has_subgraphs(g))
        return KILN_OK;
    bool *stat = kiln__calloc((size_t)g->n_values + 1, sizeof(bool));
    if (!stat)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int v = 0; v < g->n_values; v++)
        stat[v] = g->values[v].init != NULL || g->values[v].producer < 0;   /* constants, fixed inputs */
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        bool ok = !data_dependent(n);
        for (int j = 0; ok && j < n->n_in; j++) {
            int v = n->in[j];
            if (v < 0)
                continue;
            ok = stat[v] && (!shape_input(n, j) || g->values[v].init != NULL);
        }
        for (int o = 0; o < n->n_out; o++)
            if (n->out[o] >= 0)
                stat[n->out[o]] = ok;
        if (!ok && getenv("KILN_DEBUG_SHAPES"))
            fprintf(stderr, "fold-shapes: %s '%s' has a data-dependent shape\n", n->op_type, n->name);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if ((n->op != KILN_OP_Shape && n->op != KILN_OP_Size) || n->n_in != 1 || n->n_out != 1 || n->out[0] < 0)
            continue;
        int x = n->in[0];
        if (x < 0 || (!g->values[x].init && x >= n_shapes))
            continue;
        const kiln_tensor *s = g->values[x].init ? g->values[x].init : &shapes[x];
        if (!stat[x] || s->dtype == KILN_DT_UNDEFINED || s->ndim < 0)
            continue;
        kiln_tensor c;
        if (n->op == KILN_OP_Size) {
            KILN_TRY(kiln__tensor_alloc(&c, KILN_DT_INT64, 0, NULL));
            *(int64_t *)c.data = kiln__shape_numel(s->ndim, s->dims);
        } else {
            int64_t r = s->ndim, start = kiln__attr_i(n, "start", 0), end = kiln__attr_i(n, "end", r);
            start = start < 0 ? start + r : start;
            end = end < 0 ? end + r : end;
            start = start < 0 ? 0 : start > r ? r : start;
            end = end < 0 ? 0 : end > r ? r : end;
            int64_t len = end > start ? end - start : 0;
            KILN_TRY(kiln__tensor_alloc(&c, KILN_DT_INT64, 1, &len));
            for (int64_t k = 0; k < len; k++)
                ((int64_t *)c.data)[k] = s->dims[start + k];
        }
        int out = n->out[0];
        kiln_tensor *t = kiln__malloc(sizeof *t);
        if (!t) {
            kiln__tensor_release(&c);
            kiln__free(stat);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        *t = c;
        g->values[out].init = t;
        g->values[out].dtype = KILN_DT_INT64;
        g->values[out].producer = -1;
        n->dead = true;
        (*changed)++;
    }
    kiln__free(stat);
    if (*changed)
        kiln__graph_remove_dead(g);
    return KILN_OK;
}
