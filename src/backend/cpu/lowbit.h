/* Conv / MatMul / Gemm (and FusedConv / FusedMatMul / FusedGemm) with FP8, NVFP4, MXFP4 or INT4
 * weights (docs/PRECISION.md, "FP8, NVFP4, MXFP4 and INT4 layers").
 *
 * The builder marks such a layer with the attributes of core/numfmt.h (KILN_ATTR_WQ, the weight
 * format; KILN_ATTR_AQ, how its activations are quantize-dequantized; KILN_ATTR_AQ_SCALE, the FP8
 * activation scale) and keeps the float32 weight in the graph; at build time kiln__lowbit_prep
 * quantizes it into a KILN_PREP_LOWBIT_W blob (prep.h) that replaces it in the engine. The kernel
 * computes  y = layer(aq(x), dq(q(W)))  where q / dq are the block formats of numfmt.h and aq
 * rounds the activations (FP8 E4M3 with the per-tensor scale, or FP16), in float32 arithmetic:
 *   - MatMul / Gemm: the float32 GEMM with a B packer that dequantizes each panel of the weight
 *     straight from its packed form (no float32 copy of the weight);
 *   - Conv (one group): the float32 convolution kernel per block of output channels, each block's
 *     filters dequantized into a scratch buffer of at most 1 MiB;
 *   - anything else (grouped convolutions, Gemm with a 2-D C, ...): the float32 kernel on a
 *     dequantized copy of the weight.
 * A Gather marked so (an embedding table: input 0 a 2-D float32 constant, rows x k, gathered along axis
 * 0; the 4-bit builds mark them, docs/PRECISION.md "4-bit embedding tables") has the table quantized as
 * a rows x k weight (the blob replaces input 0) and dequantizes only the gathered rows, each straight
 * from the packed table, with the FP16 rounding of weight-only layers (KILN_ATTR_AQ "fp16"): exactly the
 * float32 Gather on kiln__lowbit_ref_weight's table, indices checked the same way.
 * Without a blob (a layer run before its weights were packed) the weight is quantized on the fly
 * with the same function, so the result is the same; with neither blob nor weight data the layer
 * fails cleanly (kiln__prep_missing). */
#ifndef KILN_BACKEND_CPU_LOWBIT_H
#define KILN_BACKEND_CPU_LOWBIT_H
#include "../kernel.h"

/* Node n carries a low-bit weight format (KILN_ATTR_WQ). */
bool kiln__lowbit_node(const kiln_node *n);
/* The layer of ctx has low-bit weights and is not already being run by kiln__run_lowbit. */
bool kiln__lowbit_layer(const kiln_kctx *ctx);
/* Runs the layer; fn is the op's float32 kernel (called on dequantized weights). */
kiln_status kiln__run_lowbit(kiln_kctx *ctx, kiln_kernel_fn fn);
/* Build time: the KILN_PREP_LOWBIT_W blob of a node with KILN_ATTR_WQ and a float32 weight (a Gather's
 * table: input 0). */
kiln_status kiln__lowbit_prep(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                              size_t *size);

/* The scalar reference of a low-bit layer's weight: the weight w (dims as the tensor) of node n
 * quantized and dequantized into y (numel(w) floats, w's layout), with the FP16 rounding of
 * weight-only layers. For tests. */
kiln_status kiln__lowbit_ref_weight(const kiln_node *n, const kiln_tensor *w, float *y);
/* Tests: the convolution block size in floats (<= 0: the default, 1 MiB of filters); blocks
 * hold at least 16 output channels. */
void kiln__lowbit_set_block_floats(int64_t floats);
/* The scalar reference of the activation rounding of node n applied to x (n floats, in place). */
kiln_status kiln__lowbit_ref_act(const kiln_node *n, float *x, int64_t count);

#endif
