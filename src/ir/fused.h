/* The vocabulary of kiln's fused ops in the IR: the activation a fused Conv / MatMul / Gemm
 * applies to its output, stored as node attributes ("activation" = name, "activation_alpha",
 * "activation_beta"). Passes write it; backends map it to their own kernels' epilogues. */
#ifndef KILN_IR_FUSED_H
#define KILN_IR_FUSED_H
#include "graph.h"

typedef enum kiln_fused_act_kind {
    KILN_FUSED_NONE = 0, KILN_FUSED_RELU, KILN_FUSED_CLIP, KILN_FUSED_LEAKYRELU, KILN_FUSED_SIGMOID,
    KILN_FUSED_HARDSIGMOID, KILN_FUSED_HARDSWISH, KILN_FUSED_SILU, KILN_FUSED_GELU, KILN_FUSED_GELU_TANH,
    KILN_FUSED_TANH, KILN_FUSED_ACT_COUNT
} kiln_fused_act_kind;

typedef struct kiln_fused_act {
    kiln_fused_act_kind kind;
    float alpha, beta;   /* Clip: min/max; LeakyRelu: alpha; HardSigmoid: alpha/beta */
} kiln_fused_act;

/* Attribute value naming the activation ("Relu", "Clip", ...); NULL for NONE or out of range. */
const char *kiln__fused_act_name(kiln_fused_act_kind k);
/* Reads a node's fused activation (kind NONE if it has none); false if the name is unknown. */
bool kiln__fused_act_of(const kiln_node *n, kiln_fused_act *a);
/* Sets the activation attributes of a fused node. */
kiln_status kiln__node_set_fused_act(kiln_node *n, const kiln_fused_act *a);
#endif
