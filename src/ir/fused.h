/* The vocabulary of kiln's fused ops in the IR: the activation a fused Conv / MatMul / Gemm
 * applies to its output, stored as node attributes ("activation" = name, "activation_alpha",
 * "activation_beta"). Passes write it; backends map it to their own kernels' epilogues. */
#ifndef KILN_IR_FUSED_H
#define KILN_IR_FUSED_H
#include "graph.h"

typedef enum kiln_fused_act_kind {
    KILN_FUSED_NONE = 0, KILN_FUSED_RELU, KILN_FUSED_CLIP, KILN_FUSED_LEAKYRELU, KILN_FUSED_SIGMOID,
    KILN_FUSED_HARDSIGMOID, KILN_FUSED_HARDSWISH, KILN_FUSED_SILU, KILN_FUSED_GELU, KILN_FUSED_GELU_TANH,
    KILN_FUSED_TANH,
    KILN_FUSED_HARDSWISH_AFFINE,   /* alpha * HardSwish(x) + beta (PP-LCNet's learnable affine block after it) */
    KILN_FUSED_ACT_COUNT
} kiln_fused_act_kind;

typedef struct kiln_fused_act {
    kiln_fused_act_kind kind;
    float alpha, beta;   /* Clip: min/max; LeakyRelu: alpha; HardSigmoid, HardSwishAffine: alpha/beta */
} kiln_fused_act;

/* Attribute value naming the activation ("Relu", "Clip", ...); NULL for NONE or out of range. */
const char *kiln__fused_act_name(kiln_fused_act_kind k);
/* Reads a node's fused activation (kind NONE if it has none); false if the name is unknown. */
bool kiln__fused_act_of(const kiln_node *n, kiln_fused_act *a);
/* Sets the activation attributes of a fused node. */
kiln_status kiln__node_set_fused_act(kiln_node *n, const kiln_fused_act *a);

/* Attention's operand permutations (INTS attributes, absent = identity; docs/OPS.md): input i's
 * logical operand is Transpose(physical input i, perm), perm = "q_perm", "kt_perm", "v_perm" for
 * i = 0, 1, 2 (logical.dims[j] = physical.dims[perm[j]]); the physical output is
 * Transpose(logical output, "y_perm"). */
enum { KILN_ATTN_Q, KILN_ATTN_KT, KILN_ATTN_V, KILN_ATTN_Y, KILN_ATTN_NPERM };
extern const char *const kiln__attn_perm_names[KILN_ATTN_NPERM];
/* perm[0..rank) = the attribute `which` of Attention node n (the identity when absent). False,
 * perm unspecified, when the attribute is not INTS of length rank holding a permutation of
 * 0..rank-1 (or rank is outside 0..KILN_MAX_DIMS). */
bool kiln__attn_perm(const kiln_node *n, int which, int rank, int *perm);
#endif
