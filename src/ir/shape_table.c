/* The op -> shape inference function table (designated initializers by op enum). Every op in
 * ops.def has an entry; test_shapes checks that none is missing. */
#include "shape_impl.h"

#define U(op) [KILN_OP_##op] = kiln__si_unary
#define B(op) [KILN_OP_##op] = kiln__si_bcast
#define CMP(op) [KILN_OP_##op] = kiln__si_compare
#define R(op) [KILN_OP_##op] = kiln__si_reduce

static const kiln_infer_fn table[KILN_OP_COUNT] = {
    /* elementwise unary: shape and dtype of the input */
    U(Abs), U(Acos), U(Acosh), U(Asin), U(Asinh), U(Atan), U(Atanh), U(Ceil), U(Cos), U(Cosh), U(Erf), U(Exp),
    U(Floor), U(Log), U(Neg), U(Not), U(Reciprocal), U(Round), U(Sign), U(Sin), U(Sinh), U(Sqrt), U(Tan), U(Tanh),
    U(Celu), U(Elu), U(Gelu), U(HardSigmoid), U(HardSwish), U(LeakyRelu), U(Mish), U(Relu), U(Selu), U(Sigmoid),
    U(Softplus), U(Softsign), U(ThresholdedRelu), U(Shrink), U(Clip), U(Identity), U(BitwiseNot),
    U(Hardmax), U(InstanceNormalization), U(GroupNormalization), U(LpNormalization),
    U(LRN), U(MeanVarianceNormalization), U(CumSum), U(Trilu), U(ReverseSequence), U(ScatterElements),
    U(ScatterND), U(Scatter), U(PRelu),
    [KILN_OP_Softmax] = kiln__si_softmax, [KILN_OP_LogSoftmax] = kiln__si_softmax,
    [KILN_OP_IsInf] = kiln__si_isx, [KILN_OP_IsNaN] = kiln__si_isx,
    [KILN_OP_Cast] = kiln__si_cast, [KILN_OP_CastLike] = kiln__si_castlike, [KILN_OP_Dropout] = kiln__si_dropout,
    /* broadcasting */
    B(Add), B(Sub), B(Mul), B(Div), B(Pow), [KILN_OP_Mod] = kiln__si_mod, B(BitShift), B(BitwiseAnd), B(BitwiseOr),
    B(BitwiseXor), B(Max), B(Mean), B(Min), B(Sum),
    CMP(And), CMP(Or), CMP(Xor), CMP(Equal), CMP(Greater), CMP(GreaterOrEqual), CMP(Less), CMP(LessOrEqual),
    [KILN_OP_Where] = kiln__si_where,
    /* shape and data movement */
    [KILN_OP_Concat] = kiln__si_concat, [KILN_OP_Constant] = kiln__si_constant,
    [KILN_OP_ConstantOfShape] = kiln__si_constofshape, [KILN_OP_DepthToSpace] = kiln__si_d2s,
    [KILN_OP_Expand] = kiln__si_expand, [KILN_OP_EyeLike] = kiln__si_eyelike, [KILN_OP_Flatten] = kiln__si_flatten,
    [KILN_OP_Gather] = kiln__si_gather, [KILN_OP_GatherElements] = kiln__si_gatherelem,
    [KILN_OP_GatherND] = kiln__si_gathernd, [KILN_OP_NonZero] = kiln__si_nonzero, [KILN_OP_OneHot] = kiln__si_onehot,
    [KILN_OP_Pad] = kiln__si_pad, [KILN_OP_Range] = kiln__si_range, [KILN_OP_Reshape] = kiln__si_reshape,
    [KILN_OP_Shape] = kiln__si_shape, [KILN_OP_Size] = kiln__si_size, [KILN_OP_Slice] = kiln__si_slice,
    [KILN_OP_SpaceToDepth] = kiln__si_s2d, [KILN_OP_Split] = kiln__si_split, [KILN_OP_Squeeze] = kiln__si_squeeze,
    [KILN_OP_Tile] = kiln__si_tile, [KILN_OP_Transpose] = kiln__si_transpose, [KILN_OP_Unsqueeze] = kiln__si_unsqueeze,
    [KILN_OP_Compress] = kiln__si_compress, [KILN_OP_TopK] = kiln__si_topk, [KILN_OP_ArgMax] = kiln__si_argmax,
    [KILN_OP_ArgMin] = kiln__si_argmax, [KILN_OP_Unique] = kiln__si_unique,
    /* reductions and normalization */
    R(ReduceL1), R(ReduceL2), R(ReduceLogSum), R(ReduceLogSumExp), R(ReduceMax), R(ReduceMean), R(ReduceMin),
    R(ReduceProd), R(ReduceSum), R(ReduceSumSquare),
    [KILN_OP_BatchNormalization] = kiln__si_batchnorm, [KILN_OP_LayerNormalization] = kiln__si_layernorm,
    /* linear algebra, convolution, pooling, resampling */
    [KILN_OP_MatMul] = kiln__si_matmul, [KILN_OP_Gemm] = kiln__si_gemm, [KILN_OP_Einsum] = kiln__si_einsum,
    [KILN_OP_MatMulInteger] = kiln__si_matmulint, [KILN_OP_QLinearMatMul] = kiln__si_qlinearmatmul,
    [KILN_OP_Conv] = kiln__si_conv, [KILN_OP_ConvTranspose] = kiln__si_convtranspose,
    [KILN_OP_ConvInteger] = kiln__si_convint, [KILN_OP_QLinearConv] = kiln__si_qlinearconv,
    [KILN_OP_AveragePool] = kiln__si_pool, [KILN_OP_MaxPool] = kiln__si_pool, [KILN_OP_LpPool] = kiln__si_pool,
    [KILN_OP_GlobalAveragePool] = kiln__si_globalpool, [KILN_OP_GlobalMaxPool] = kiln__si_globalpool,
    [KILN_OP_GlobalLpPool] = kiln__si_globalpool, [KILN_OP_MaxUnpool] = kiln__si_maxunpool,
    [KILN_OP_Resize] = kiln__si_resize, [KILN_OP_Upsample] = kiln__si_upsample,
    /* quantization */
    [KILN_OP_QuantizeLinear] = kiln__si_quantize, [KILN_OP_DequantizeLinear] = kiln__si_dequantize,
    [KILN_OP_DynamicQuantizeLinear] = kiln__si_dynquant,
    /* control flow and recurrent */
    [KILN_OP_If] = kiln__si_if, [KILN_OP_Loop] = kiln__si_loop, [KILN_OP_Scan] = kiln__si_scan,
    [KILN_OP_RNN] = kiln__si_rnn, [KILN_OP_GRU] = kiln__si_rnn, [KILN_OP_LSTM] = kiln__si_rnn,
    /* detection, losses, signal, misc */
    [KILN_OP_NonMaxSuppression] = kiln__si_nms, [KILN_OP_RoiAlign] = kiln__si_roialign,
    [KILN_OP_NegativeLogLikelihoodLoss] = kiln__si_nllloss, [KILN_OP_SoftmaxCrossEntropyLoss] = kiln__si_sceloss,
    [KILN_OP_GridSample] = kiln__si_gridsample, [KILN_OP_DFT] = kiln__si_dft, [KILN_OP_STFT] = kiln__si_stft,
    [KILN_OP_HannWindow] = kiln__si_window, [KILN_OP_HammingWindow] = kiln__si_window,
    [KILN_OP_BlackmanWindow] = kiln__si_window, [KILN_OP_MelWeightMatrix] = kiln__si_melweight,
    [KILN_OP_Det] = kiln__si_det,
    /* kiln's fused ops */
    [KILN_OP_FusedConv] = kiln__si_fusedconv, [KILN_OP_FusedMatMul] = kiln__si_fusedmatmul,
    [KILN_OP_FusedGemm] = kiln__si_fusedgemm, [KILN_OP_Attention] = kiln__si_attention,
    [KILN_OP_FusedConvSum] = kiln__si_fusedconvsum, [KILN_OP_QLinearConvAdd] = kiln__si_qlinearconv_add,
    [KILN_OP_QLinearConvSum] = kiln__si_qlinearconv_sum, [KILN_OP_FusedConvPool] = kiln__si_fusedconvpool,
    [KILN_OP_QLookup] = kiln__si_qlookup,
    /* ONNX Runtime contrib ops */
    [KILN_OP_QGemm] = kiln__si_qgemm, [KILN_OP_QLinearAdd] = kiln__si_qlinearadd,
};

kiln_infer_fn kiln__infer_fn(kiln_op op) { return op >= 0 && op < KILN_OP_COUNT ? table[op] : NULL; }
