/* Graph optimization passes. Each pass rewrites a graph in place and reports how many nodes it
 * changed; each is testable alone (tests/unit/test_passes.c compares outputs before and after). */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "../ir/graph.h"

/* What passes need from the builder, without depending on a backend or the runtime. */
typedef struct kiln_pass_ctx {
    /* Computes node n on constant inputs (in[j] NULL for an empty input) into out[0..n->n_out)
     * (zero-initialized by the caller; every output's data set on success). An error leaves the
     * node unfolded. NULL: constant-fold folds nothing. */
    kiln_status (*eval_node)(void *user, const kiln_node *n, const kiln_tensor *const *in, kiln_tensor *out);
    void *user;
    /* Verify the graph's use index after every pass (kiln__uses_check); tests set it. The
     * environment variable KILN_CHECK_IR=1 turns it on too. */
    bool check;
} kiln_pass_ctx;

typedef kiln_status (*kiln_pass_fn)(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);

typedef struct kiln_pass_info {
    const char *name;
    kiln_pass_fn fn;
} kiln_pass_info;

/* Registry of all passes in their default order (NULL-terminated). */
extern const kiln_pass_info kiln__passes[];
const kiln_pass_info *kiln__pass_find(const char *name);

typedef struct kiln_pass_report {
    int n;
    struct { const char *name; int changed; } entry[64];
    int nodes_before, nodes_after;
} kiln_pass_report;

/* Runs one pass: builds the use index for it unless the graph has one (and frees it again), and
 * checks the index afterwards when pc->check. pc may be NULL (no evaluation, no check). */
kiln_status kiln__pass_run(const kiln_pass_info *p, kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
/* Runs the default pipeline (to a fixed point, at most a few rounds) with one use index built
 * once for it: O(N + E) per pass. report may be NULL. */
kiln_status kiln__optimize(kiln_graph *g, const kiln_pass_ctx *pc, kiln_pass_report *report);

kiln_status kiln__pass_remove_identity(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_constant_fold(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_dead_nodes(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fold_batchnorm(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fold_scale_shift(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fuse_layernorm(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fuse_gelu(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fuse_hardswish(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fuse_attention(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_attention_transpose(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_cancel_transpose_reshape(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fuse_bias(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fuse_residual(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
/* fuse-qdq holds a quantized layer's float bias as int32 b / (x_scale * w_scale) only below this (the largest float
 * below 2^31), else the layer stays float; the builder's INT8 weight scales keep biases under it (build/precision.c) */
#define KILN_QBIAS_MAX 2147483520.f
kiln_status kiln__pass_fuse_qdq(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fuse_activation(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fuse_post_affine(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
/* Not in the default pipeline (FusedConvSum is a CPU kernel): the builder runs it for CPU engines (p_shortcut.c). */
kiln_status kiln__pass_fuse_shortcut(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
/* fuse-qconv-add (p_qres.c): an INT8 block's last QLinearConv and its residual QLinearAdd as one QLinearConvAdd,
 * then a one-rounding one's 1x1 shortcut QLinearConv summed in (QLinearConvSum); run by the builder for device
 * engines only */
kiln_status kiln__pass_fuse_qconv_add(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
/* The same for CPU engines: only the pairs it fuses with one rounding (implicit INT8), pointwise convolutions only */
kiln_status kiln__pass_fuse_qconv_once(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
kiln_status kiln__pass_fold_qdq_lookup(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
/* fuse-conv-pool (p_convpool.c): a stem convolution, its max pool and the pool's QuantizeLinear as one FusedConvPool for
 * the GPU's kernel; not in the default pipeline (device engines, builder.c) */
kiln_status kiln__pass_fuse_conv_pool(kiln_graph *g, const kiln_pass_ctx *pc, int *changed);
/* Shape/Size -> constants where shape inference at the given input shapes (in_shapes: one per
 * graph input, dtype and dims, data unused; ndim < 0 or in_shapes NULL = declared) determines them. */
kiln_status kiln__pass_fold_shapes(kiln_graph *g, const kiln_tensor *in_shapes, int *changed);

/* helpers shared by passes */
/* The constant tensor of value v, or NULL. */
static inline const kiln_tensor *kiln__const_of(const kiln_graph *g, int v)
{
    return v >= 0 ? g->values[v].init : NULL;
}

#endif
