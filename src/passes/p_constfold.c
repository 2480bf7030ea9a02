/* constant-fold: evaluates every node whose inputs are all constants with the reference kernel
 * and turns its outputs into initializers. Constant nodes become initializers this way too.
 * Skips nodes with subgraphs, nondeterministic ops, and outputs larger than a size cap (folding
 * those would bloat the engine, e.g. a huge ConstantOfShape). */
#include "passes.h"
#include "../backend/kernel.h"

#define FOLD_MAX_BYTES ((size_t)64 << 20)

static bool foldable(const kiln_graph *g, const kiln_node *n)
{
    if (n->dead || n->op == KILN_OP_UNKNOWN || !kiln__ref_kernel(n->op))
        return false;
    switch (n->op) {
    case KILN_OP_If: case KILN_OP_Loop: case KILN_OP_Scan:
        return false;
    default:
        break;
    }
    for (int a = 0; a < n->n_attr; a++)
        if (n->attrs[a].g || n->attrs[a].graphs)
            return false;
    for (int j = 0; j < n->n_in; j++) {
        int v = n->in[j];
        if (v < 0)
            continue;
        if (!g->values[v].init)
            return false;
        /* an input with an initializer default can be overridden by the caller */
        for (int k = 0; k < g->n_inputs; k++)
            if (g->inputs[k] == v)
                return false;
    }
    return true;
}

static kiln_status fold_node(kiln_graph *g, int idx, bool *folded)
{
    kiln_node *n = &g->nodes[idx];
    *folded = false;
    const kiln_tensor *in[16];
    kiln_tensor outs[16];
    kiln_tensor *outp[16];
    if (n->n_in > 16 || n->n_out > 16)
        return KILN_OK;
    for (int j = 0; j < n->n_in; j++)
        in[j] = n->in[j] >= 0 ? g->values[n->in[j]].init : NULL;
    memset(outs, 0, sizeof outs);
    for (int o = 0; o < n->n_out; o++)
        outp[o] = &outs[o];
    kiln_kctx ctx = {.node = n, .n_in = n->n_in, .in = in, .n_out = n->n_out, .out = outp, .nthreads = 1};
    kiln_status st = kiln__ref_kernel(n->op)(&ctx);
    bool ok = st == KILN_OK;
    for (int o = 0; ok && o < n->n_out; o++)
        ok = outs[o].data && outs[o].nbytes <= FOLD_MAX_BYTES;
    if (!ok) {
        /* leave the node to fail (or succeed) at run time with its real inputs */
        for (int o = 0; o < n->n_out; o++)
            kiln__tensor_release(&outs[o]);
        kiln_clear_last_error();
        return KILN_OK;
    }
    for (int o = 0; o < n->n_out; o++) {
        int v = n->out[o];
        if (v < 0) {
            kiln__tensor_release(&outs[o]);
            continue;
        }
        kiln_tensor *c = kiln__malloc(sizeof *c);
        if (!c) {
            for (int k = o; k < n->n_out; k++)
                kiln__tensor_release(&outs[k]);
            return kiln__err(KILN_ERR_NOMEM, "out of memory");
        }
        *c = outs[o];
        g->values[v].init = c;
        g->values[v].dtype = c->dtype;
        g->values[v].producer = -1;
    }
    n->dead = true;
    *folded = true;
    return KILN_OK;
}

kiln_status kiln__pass_constant_fold(kiln_graph *g, int *changed)
{
    *changed = 0;
    /* nodes are topologically sorted, so one sweep folds whole constant chains */
    for (int i = 0; i < g->n_nodes; i++) {
        if (!foldable(g, &g->nodes[i]))
            continue;
        bool folded;
        KILN_TRY(fold_node(g, i, &folded));
        *changed += folded;
    }
    if (*changed)
        kiln__graph_remove_dead(g);
    return KILN_OK;
}
