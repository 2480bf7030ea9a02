/* test_gpu: float and half layer cases, half weights, CPU fallbacks under --strict-device. */
#include "gpu_harness.h"


void binary_cases(void)
{
    static const kiln_op ops[] = {KILN_OP_Add, KILN_OP_Sub, KILN_OP_Mul, KILN_OP_Div, KILN_OP_Max, KILN_OP_Min};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        tgraph t = tg_new(ops[k], 13);
        tg_in(&t, RT(3, 3, 1, 7), false);
        tg_in(&t, ops[k] == KILN_OP_Div ? rand_tensor(F32, 2, D(5, 7), 0.5, 2) : RT(2, 5, 7), false);
        tg_outs(&t, 1);
        char name[64];
        snprintf(name, sizeof name, "%s broadcast", kiln__op_name(ops[k]));
        run_case(name, &t, 1e-6);
    }
    tgraph t = tg_new(KILN_OP_Add, 13);
    tg_in(&t, RT(2, 17, 33), false);
    tg_in(&t, RT(2, 17, 33), false);
    tg_outs(&t, 1);
    run_case("Add same shape", &t, 1e-6);
    t = tg_new(KILN_OP_Mul, 13);
    tg_in(&t, RT(4, 2, 3, 5, 7), false);
    tg_in(&t, RT(1, 7), true);
    tg_outs(&t, 1);
    run_case("Mul by const row", &t, 1e-6);
    /* 16-byte vectors (k_binary_v): same shapes, an operand repeated over the leading dimension (BERT's position
     * embeddings), the other way round, and a row of 24 repeated (float32: 4-value vectors, half: 8) */
    t = tg_new(KILN_OP_Add, 13);
    tg_in(&t, RT(3, 5, 16, 24), false);
    tg_in(&t, RT(3, 5, 16, 24), false);
    tg_outs(&t, 1);
    run_case("Add same shape, vectors", &t, 1e-6);
    t = tg_new(KILN_OP_Add, 13);
    tg_in(&t, RT(3, 7, 16, 24), false);
    tg_in(&t, RT(3, 1, 16, 24), false);
    tg_outs(&t, 1);
    run_case("Add [7,16,24] + [1,16,24]", &t, 1e-6);
    t = tg_new(KILN_OP_Sub, 13);
    tg_in(&t, RT(2, 16, 24), false);
    tg_in(&t, RT(3, 9, 16, 24), false);
    tg_outs(&t, 1);
    run_case("Sub [16,24] - [9,16,24]", &t, 1e-6);
    t = tg_new(KILN_OP_Mul, 13);
    tg_in(&t, RT(3, 13, 11, 24), false);
    tg_in(&t, RT(1, 24), true);
    tg_outs(&t, 1);
    run_case("Mul by row of 24, vectors", &t, 1e-6);
    t = tg_new(KILN_OP_Pow, 13);
    tg_in(&t, rand_tensor(F32, 2, D(9, 11), 0.1, 3), false);
    tg_in(&t, rand_tensor(F32, 1, D(11), -2, 2), false);
    tg_outs(&t, 1);
    run_case("Pow", &t, 1e-5);
    t = tg_new(KILN_OP_Add, 13);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 2, D(65, 67), -1000, 1000), false);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 1, D(67), -1000, 1000), false);
    tg_outs(&t, 1);
    run_case("Add int64", &t, 0);
}

void unary_cases(void)
{
    static const kiln_op ops[] = {KILN_OP_Relu, KILN_OP_Sigmoid, KILN_OP_Tanh, KILN_OP_Exp, KILN_OP_Erf, KILN_OP_Neg,
                                  KILN_OP_Abs, KILN_OP_HardSwish, KILN_OP_Softplus, KILN_OP_Floor};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        tgraph t = tg_new(ops[k], 13);
        tg_in(&t, rand_tensor(F32, 3, D(3, 17, 129), -4, 4), false);
        tg_outs(&t, 1);
        run_case(kiln__op_name(ops[k]), &t, 1e-5);
        /* a size of whole 16-byte vectors: the vector kernel (the size above takes the scalar one) */
        t = tg_new(ops[k], 13);
        tg_in(&t, rand_tensor(F32, 3, D(4, 8, 40), -4, 4), false);
        tg_outs(&t, 1);
        char name[64];
        snprintf(name, sizeof name, "%s 4x8x40", kiln__op_name(ops[k]));
        run_case(name, &t, 1e-5);
    }
    tgraph t = tg_new(KILN_OP_Gelu, 20);
    tg_in(&t, rand_tensor(F32, 2, D(16, 24), -4, 4), false);
    tg_outs(&t, 1);
    run_case("Gelu 16x24", &t, 1e-5);
    t = tg_new(KILN_OP_Sqrt, 13);
    tg_in(&t, rand_tensor(F32, 2, D(31, 37), 0, 9), false);
    tg_outs(&t, 1);
    run_case("Sqrt", &t, 1e-6);
    t = tg_new(KILN_OP_LeakyRelu, 13);
    tg_in(&t, RT(2, 31, 37), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "alpha", 0.13f);
    run_case("LeakyRelu", &t, 1e-6);
    t = tg_new(KILN_OP_Gelu, 20);
    tg_in(&t, rand_tensor(F32, 2, D(31, 37), -4, 4), false);
    tg_outs(&t, 1);
    run_case("Gelu", &t, 1e-5);
    t = tg_new(KILN_OP_Clip, 13);
    tg_in(&t, RT(2, 31, 37), false);
    float lo = -0.3f, hi = 0.45f;
    kiln_tensor a, b;
    kiln__tensor_alloc(&a, F32, 0, NULL);
    kiln__tensor_alloc(&b, F32, 0, NULL);
    *(float *)a.data = lo;
    *(float *)b.data = hi;
    tg_in(&t, a, true);
    tg_in(&t, b, true);
    tg_outs(&t, 1);
    run_case("Clip (min/max inputs)", &t, 0);
}

void cast_where_cases(void)
{
    tgraph t = tg_new(KILN_OP_Cast, 13);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 2, D(65, 67), -5000, 5000), false);   /* > 4096: not shape data */
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "to", KILN_DT_FLOAT32);
    run_case("Cast int64->float", &t, 0);
    t = tg_new(KILN_OP_Cast, 13);
    tg_in(&t, rand_tensor(F32, 2, D(7, 13), -50, 50), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "to", KILN_DT_INT64);
    run_case("Cast float->int64", &t, 0);
    t = tg_new(KILN_OP_Where, 13);
    tg_in(&t, rand_tensor(KILN_DT_BOOL, 2, D(1, 19), -1, 1), false);
    tg_in(&t, RT(2, 11, 19), false);
    tg_in(&t, RT(2, 11, 1), false);
    tg_outs(&t, 1);
    run_case("Where broadcast", &t, 0);
}

void shape_cases(void)
{
    tgraph t = tg_new(KILN_OP_Reshape, 13);
    tg_in(&t, RT(3, 3, 5, 7), false);
    tg_in(&t, ints_tensor(2, D(0, -1)), true);
    tg_outs(&t, 1);
    run_case("Reshape 0,-1", &t, 0);
    t = tg_new(KILN_OP_Flatten, 13);
    tg_in(&t, RT(4, 3, 5, 7, 2), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 2);
    run_case("Flatten axis 2", &t, 0);
    for (int axis = -4; axis <= -1; axis++) {   /* negative: counted from the rank (ONNX range [-r, r]) */
        char name[32];
        snprintf(name, sizeof name, "Flatten axis %d", axis);
        t = tg_new(KILN_OP_Flatten, 13);
        tg_in(&t, RT(4, 3, 5, 7, 2), false);
        tg_outs(&t, 1);
        kiln__node_set_attr_i(tg_node(&t), "axis", axis);
        run_case(name, &t, 0);
    }
    t = tg_new(KILN_OP_Unsqueeze, 13);
    tg_in(&t, RT(2, 3, 5), false);
    tg_in(&t, ints_tensor(2, D(0, -1)), true);
    tg_outs(&t, 1);
    run_case("Unsqueeze", &t, 0);
    t = tg_new(KILN_OP_Squeeze, 13);
    tg_in(&t, RT(4, 3, 1, 5, 1), false);
    tg_in(&t, ints_tensor(1, D(-1)), true);
    tg_outs(&t, 1);
    run_case("Squeeze", &t, 0);
    t = tg_new(KILN_OP_Transpose, 13);
    tg_in(&t, RT(4, 3, 5, 7, 2), false);
    tg_outs(&t, 1);
    attr_ints(&t, "perm", 4, D(2, 0, 3, 1));
    run_case("Transpose 2031", &t, 0);
    t = tg_new(KILN_OP_Transpose, 13);
    tg_in(&t, RT(4, 2, 17, 12, 9), false);
    tg_outs(&t, 1);
    attr_ints(&t, "perm", 4, D(0, 2, 1, 3));
    run_case("Transpose 0213 (heads)", &t, 0);
    t = tg_new(KILN_OP_Transpose, 13);
    tg_in(&t, RT(4, 2, 17, 12, 64), false);
    tg_outs(&t, 1);
    attr_ints(&t, "perm", 4, D(0, 2, 1, 3));
    run_case("Transpose 0213 (16-byte runs)", &t, 0);
    t = tg_new(KILN_OP_Transpose, 13);   /* K^T of attention: a batched 2-D transpose (tiles) */
    tg_in(&t, RT(4, 2, 37, 3, 40), false);
    tg_outs(&t, 1);
    attr_ints(&t, "perm", 4, D(0, 2, 3, 1));
    run_case("Transpose 0231 (tiles)", &t, 0);
    t = tg_new(KILN_OP_Transpose, 13);
    tg_in(&t, RT(2, 67, 45), false);
    tg_outs(&t, 1);
    run_case("Transpose 2-D (tiles)", &t, 0);
    t = tg_new(KILN_OP_Slice, 13);
    tg_in(&t, RT(3, 5, 7, 34), false);
    tg_in(&t, ints_tensor(1, D(2)), true);
    tg_in(&t, ints_tensor(1, D(32)), true);
    tg_in(&t, ints_tensor(1, D(2)), true);
    tg_outs(&t, 1);
    run_case("Slice inner (8-byte runs)", &t, 0);
    t = tg_new(KILN_OP_Slice, 13);
    tg_in(&t, RT(3, 9, 11, 13), false);
    tg_in(&t, ints_tensor(2, D(-2, 1)), true);
    tg_in(&t, ints_tensor(2, D(0, 100)), true);
    tg_in(&t, ints_tensor(2, D(1, 2)), true);
    tg_in(&t, ints_tensor(2, D(-3, 2)), true);
    tg_outs(&t, 1);
    run_case("Slice steps -3, 2", &t, 0);
    t = tg_new(KILN_OP_Expand, 13);
    tg_in(&t, RT(2, 5, 1), false);
    tg_in(&t, ints_tensor(3, D(3, 5, 7)), true);
    tg_outs(&t, 1);
    run_case("Expand", &t, 0);
    t = tg_new(KILN_OP_Concat, 13);
    tg_in(&t, RT(3, 3, 2, 5), false);
    tg_in(&t, RT(3, 3, 7, 5), false);
    tg_in(&t, RT(3, 3, 1, 5), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 1);
    run_case("Concat axis 1", &t, 0);
    t = tg_new(KILN_OP_Gather, 13);
    tg_in(&t, RT(3, 5, 9, 3), false);
    tg_in(&t, ints_tensor(4, D(0, -1, 4, 2)), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 1);
    run_case("Gather axis 1", &t, 0);
    t = tg_new(KILN_OP_Gather, 13);
    tg_in(&t, RT(2, 1000, 33), true);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 2, D(3, 129), 0, 999), false);
    tg_outs(&t, 1);
    run_case("Gather embedding", &t, 0);
    /* rows of 16-byte multiples: copied as 16-byte pieces (cuk_gather); negative indices, an axis-1 gather of 32-byte
     * rows */
    t = tg_new(KILN_OP_Gather, 13);
    tg_in(&t, RT(2, 500, 64), true);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 2, D(3, 41), -500, 499), false);
    tg_outs(&t, 1);
    run_case("Gather embedding rows of 64", &t, 0);
    t = tg_new(KILN_OP_Gather, 13);
    tg_in(&t, RT(3, 3, 7, 8), false);
    tg_in(&t, ints_tensor(5, D(6, -1, 0, 3, -7)), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 1);
    run_case("Gather axis 1 rows of 8", &t, 0);
}

void nn_cases(void)
{
    tgraph t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 3, D(3, 17, 129), -5, 5), false);
    tg_outs(&t, 1);
    run_case("Softmax last axis", &t, 1e-5);
    t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 3, D(3, 17, 13), -5, 5), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 1);
    run_case("Softmax axis 1 (strided)", &t, 1e-5);
    t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 2, D(5, 2001), -5, 5), false);
    tg_outs(&t, 1);
    run_case("Softmax 2001 cols (block)", &t, 1e-5);
    t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 2, D(37, 31), -5, 5), false);
    tg_outs(&t, 1);
    run_case("Softmax 31 cols", &t, 1e-5);
    t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 2, D(37, 136), -5, 5), false);
    tg_outs(&t, 1);
    run_case("Softmax 136 cols", &t, 1e-5);
    t = tg_new(KILN_OP_Softmax, 13);
    tg_in(&t, rand_tensor(F32, 2, D(5, 40), -5, 5), false);
    tg_outs(&t, 1);
    run_case("Softmax 40 cols", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 3, D(3, 17, 769), -3, 3), false);
    tg_in(&t, RT(1, 769), true);
    tg_in(&t, RT(1, 769), true);
    tg_outs(&t, 1);
    run_case("LayerNormalization", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 3, D(3, 17, 768), -3, 3), false);
    tg_in(&t, RT(1, 768), true);
    tg_in(&t, RT(1, 768), true);
    tg_outs(&t, 1);
    run_case("LayerNormalization 768", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 2, D(5, 200), -3, 3), false);
    tg_in(&t, RT(1, 200), true);
    tg_outs(&t, 1);
    run_case("LayerNormalization 200 no bias", &t, 1e-5);
    /* half storage: rows of whole 256-value chunks a lane (the bounds-free kernel), without a bias, and a row one
     * chunk past 512 with one */
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 2, D(33, 256), -3, 3), false);
    tg_in(&t, RT(1, 256), true);
    tg_outs(&t, 1);
    run_case("LayerNormalization 256 no bias", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 2, D(11, 520), -3, 3), false);
    tg_in(&t, RT(1, 520), true);
    tg_in(&t, RT(1, 520), true);
    tg_outs(&t, 1);
    run_case("LayerNormalization 520", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 2, D(9, 1501), -3, 3), false);
    tg_in(&t, RT(1, 1501), true);
    tg_outs(&t, 1);
    run_case("LayerNormalization 1501 (block)", &t, 1e-5);
    t = tg_new(KILN_OP_LayerNormalization, 17);
    tg_in(&t, rand_tensor(F32, 3, D(4, 3, 50), -3, 3), false);
    tg_in(&t, RT(2, 3, 50), true);
    tg_in(&t, RT(2, 3, 50), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", 1);
    run_case("LayerNormalization axis 1", &t, 1e-5);
    t = tg_new(KILN_OP_MaxPool, 13);
    tg_in(&t, RT(4, 2, 5, 17, 19), false);
    tg_outs(&t, 1);
    attr_ints(&t, "kernel_shape", 2, D(3, 3));
    attr_ints(&t, "strides", 2, D(2, 2));
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    run_case("MaxPool 3x3 s2 p1", &t, 0);
    for (int cip = 0; cip < 2; cip++) {
        t = tg_new(KILN_OP_AveragePool, 13);
        tg_in(&t, RT(4, 2, 3, 15, 14), false);
        tg_outs(&t, 1);
        attr_ints(&t, "kernel_shape", 2, D(3, 2));
        attr_ints(&t, "strides", 2, D(2, 3));
        attr_ints(&t, "pads", 4, D(1, 0, 2, 1));
        kiln__node_set_attr_i(tg_node(&t), "ceil_mode", 1);
        kiln__node_set_attr_i(tg_node(&t), "count_include_pad", cip);
        run_case(cip ? "AveragePool ceil, incl pad" : "AveragePool ceil, excl pad", &t, 1e-6);
    }
    t = tg_new(KILN_OP_GlobalAveragePool, 13);
    tg_in(&t, RT(4, 3, 33, 7, 9), false);
    tg_outs(&t, 1);
    run_case("GlobalAveragePool", &t, 1e-6);
}

void conv_cases(void)
{
    tgraph t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(4, 2, 6, 15, 13), false);
    tg_in(&t, RT(4, 8, 3, 3, 3), true);
    tg_in(&t, RT(1, 8), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "group", 2);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    attr_ints(&t, "strides", 2, D(2, 1));
    run_case("Conv 3x3 group 2 s(2,1)", &t, 1e-5);
    t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(4, 3, 17, 9, 11), false);
    tg_in(&t, RT(4, 5, 17, 1, 1), true);
    tg_outs(&t, 1);
    run_case("Conv 1x1 no bias", &t, 1e-5);
    t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(4, 1, 4, 19, 23), false);
    tg_in(&t, RT(4, 6, 4, 3, 3), true);
    tg_outs(&t, 1);
    attr_ints(&t, "dilations", 2, D(2, 2));
    kiln__node_set_attr_s(tg_node(&t), "auto_pad", "SAME_UPPER");
    run_case("Conv dilated SAME_UPPER", &t, 1e-5);
    t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(3, 2, 5, 31), false);
    tg_in(&t, RT(3, 7, 5, 3), true);
    tg_in(&t, RT(1, 7), true);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 2, D(1, 1));
    run_case("Conv 1-D", &t, 1e-5);
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 3, 16, 14, 14), false);
    tg_in(&t, RT(4, 32, 16, 3, 3), true);
    tg_in(&t, RT(1, 32), true);
    tg_in(&t, RT(4, 3, 32, 14, 14), false);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    run_case("FusedConv bias+res+Relu", &t, 1e-5);
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 2, 16, 9, 9), false);
    tg_in(&t, RT(4, 8, 16, 1, 1), true);
    tg_in(&t, RT(1, 8), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    run_case("FusedConv bias+Relu", &t, 1e-5);
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 2, 16, 9, 9), false);
    tg_in(&t, RT(4, 8, 16, 3, 3), true);
    tg_in(&t, RT(1, 8), true);
    tg_outs(&t, 1);
    attr_ints(&t, "strides", 2, D(2, 2));
    set_act(&t, KILN_FUSED_SILU, 0, 0);
    run_case("FusedConv SiLU s2", &t, 1e-5);
    /* PP-LCNet's hard-swish and learnable affine block (fuse-post-affine): 0.8 * HardSwish(x) - 0.3 */
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 2, 16, 9, 9), false);
    tg_in(&t, RT(4, 24, 16, 3, 3), true);
    tg_in(&t, RT(1, 24), true);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_HARDSWISH_AFFINE, 0.8f, -0.3f);
    run_case("FusedConv HardSwishAffine", &t, 1e-5);
}

void gemm_cases(void)
{
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(3, 3, 17, 33), false);
    tg_in(&t, RT(2, 33, 9), true);
    tg_outs(&t, 1);
    run_case("MatMul [3,17,33]x[33,9]", &t, 1e-5);
    t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(4, 2, 3, 5, 7), false);
    tg_in(&t, RT(4, 2, 3, 7, 4), false);
    tg_outs(&t, 1);
    run_case("MatMul batched", &t, 1e-5);
    t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(2, 5, 7), false);
    tg_in(&t, RT(3, 3, 7, 4), false);
    tg_outs(&t, 1);
    run_case("MatMul broadcast A", &t, 1e-5);
    t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(1, 7), false);
    tg_in(&t, RT(3, 2, 7, 5), false);
    tg_outs(&t, 1);
    run_case("MatMul 1-D A", &t, 1e-5);
    t = tg_new(KILN_OP_FusedMatMul, 1);
    tg_in(&t, RT(3, 2, 17, 65), false);
    tg_in(&t, RT(2, 65, 33), true);
    tg_in(&t, RT(1, 33), true);
    tg_in(&t, RT(3, 2, 17, 33), false);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_GELU, 0, 0);
    run_case("FusedMatMul bias+res+Gelu", &t, 1e-5);
    t = tg_new(KILN_OP_FusedMatMul, 1);
    tg_in(&t, RT(3, 2, 17, 65), false);
    tg_in(&t, RT(2, 65, 33), true);
    tg_in(&t, RT(1, 33), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    run_case("FusedMatMul bias+Relu", &t, 1e-5);
    t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 7, 130), false);
    tg_in(&t, RT(2, 33, 130), true);
    tg_in(&t, RT(1, 33), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "transB", 1);
    kiln__node_set_attr_f(tg_node(&t), "alpha", 0.5f);
    run_case("Gemm transB bias alpha", &t, 1e-5);
    t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 130, 7), false);
    tg_in(&t, RT(2, 130, 33), true);
    tg_in(&t, RT(2, 7, 1), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "transA", 1);
    kiln__node_set_attr_f(tg_node(&t), "beta", 0.3f);
    run_case("Gemm transA C[M,1] beta", &t, 1e-5);
    t = tg_new(KILN_OP_FusedGemm, 1);
    tg_in(&t, RT(2, 5, 64), false);
    tg_in(&t, RT(2, 64, 48), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_TANH, 0, 0);
    run_case("FusedGemm Tanh", &t, 1e-5);
}

/* Attention reading its operands through perms (the attention-transpose pass folds the Transposes around it):
 * BERT's [B, S, H, D] layout with K key-major, K^T d-major, a lead-axis swap, a Q whose head dim is not the
 * innermost axis (no 16-byte rows), 3-D, a per-row mask; each against the CPU's strided reference */
static void perm_case(const char *name, const int64_t *dq, const int64_t *dk, const int64_t *dv, int r,
                      const int64_t *pq, const int64_t *pk, const int64_t *pv, const int64_t *py, kiln_tensor mask)
{
    tgraph t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, rand_tensor(F32, r, dq, -1, 1), false);
    tg_in(&t, rand_tensor(F32, r, dk, -1, 1), false);
    tg_in(&t, rand_tensor(F32, r, dv, -1, 1), false);
    if (mask.data)
        tg_in(&t, mask, false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.3f);
    if (pq)
        kiln__node_set_attr_ints(tg_node(&t), "q_perm", r, pq);
    if (pk)
        kiln__node_set_attr_ints(tg_node(&t), "kt_perm", r, pk);
    if (pv)
        kiln__node_set_attr_ints(tg_node(&t), "v_perm", r, pv);
    if (py)
        kiln__node_set_attr_ints(tg_node(&t), "y_perm", r, py);
    run_case(name, &t, 1e-5);
}

static void attention_perm_cases(void)
{
    static const int64_t p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1}, p0132[4] = {0, 1, 3, 2},
                         p1023[4] = {1, 0, 2, 3}, p102[3] = {1, 0, 2}, p120[3] = {1, 2, 0};
    kiln_tensor none = {0};
    perm_case("Attention BSHD BERT 2x128x12x64", D(2, 128, 12, 64), D(2, 128, 12, 64), D(2, 128, 12, 64), 4, p0213,
              p0231, p0213, p0213, rand_tensor(F32, 4, D(2, 1, 1, 128), -3, 0));
    perm_case("Attention BSHD 17x19 d8 dv5", D(2, 17, 3, 8), D(2, 3, 19, 8), D(2, 19, 3, 5), 4, p0213, p0132, p0213,
              p0213, rand_tensor(F32, 4, D(2, 1, 17, 19), -2, 1));
    perm_case("Attention lead swap, K^T", D(3, 2, 70, 40), D(2, 3, 40, 141), D(3, 2, 141, 40), 4, p1023, NULL, p1023,
              p1023, rand_tensor(F32, 4, D(2, 1, 1, 141), -3, 0));
    perm_case("Attention Q d-major (strided)", D(2, 16, 3, 33), D(2, 3, 33, 16), D(2, 3, 33, 16), 4, p0231, p0132,
              NULL, NULL, none);
    perm_case("Attention 3-D SHD", D(37, 4, 32), D(45, 4, 32), D(45, 4, 24), 3, p102, p120, p102, p102,
              rand_tensor(F32, 3, D(4, 37, 45), -2, 1));
}

/* in FP16 / BF16 (the KILN_CUDA_ACT passes) these run the fused attention kernel (KILN_CUDA_FUSED_ATTN=1),
 * and again the two-GEMM path (=0, the default) */
void attention_cases(void)
{
    tgraph t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(4, 2, 3, 17, 8), false);
    tg_in(&t, RT(4, 2, 3, 8, 19), false);
    tg_in(&t, RT(4, 2, 3, 19, 5), false);
    tg_in(&t, rand_tensor(F32, 4, D(2, 1, 1, 19), -3, 0), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.35f);
    run_case("Attention additive mask", &t, 1e-5);
    for (int kind = 2; kind <= 3; kind++) {
        t = tg_new(KILN_OP_Attention, 1);
        tg_in(&t, RT(4, 2, 2, 9, 16), false);
        tg_in(&t, RT(4, 2, 2, 16, 130), false);
        tg_in(&t, RT(4, 2, 2, 130, 7), false);
        kiln_tensor m = rand_tensor(KILN_DT_BOOL, 4, D(2, 1, 9, 130), -0.3, 1);   /* mostly true */
        tg_in(&t, m, false);
        tg_outs(&t, 1);
        kiln__node_set_attr_f(tg_node(&t), "scale", 0.25f);
        kiln__node_set_attr_i(tg_node(&t), "mask_kind", kind);
        kiln__node_set_attr_f(tg_node(&t), "mask_fill", -1e4f);
        run_case(kind == 2 ? "Attention bool keep mask" : "Attention bool fill mask", &t, 1e-5);
    }
    /* BERT-base's shape (heads of 64, sequence 128, mask over the keys), sizes off the 16-grid (several
     * key chunks, query rows past the block's 64, head sizes of 40 and 128), no mask */
    t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(4, 2, 12, 128, 64), false);
    tg_in(&t, RT(4, 2, 12, 64, 128), false);
    tg_in(&t, RT(4, 2, 12, 128, 64), false);
    tg_in(&t, rand_tensor(F32, 4, D(2, 1, 1, 128), -3, 0), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.125f);
    run_case("Attention BERT 12x128x64", &t, 1e-5);
    t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(3, 3, 77, 40), false);
    tg_in(&t, RT(3, 3, 40, 141), false);
    tg_in(&t, RT(3, 3, 141, 40), false);
    tg_in(&t, rand_tensor(F32, 3, D(3, 77, 141), -2, 1), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.16f);
    run_case("Attention 77x141 d40 full mask", &t, 1e-5);
    t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(3, 2, 70, 128), false);
    tg_in(&t, RT(3, 2, 128, 33), false);
    tg_in(&t, RT(3, 2, 33, 128), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.09f);
    run_case("Attention d128 no mask", &t, 1e-5);
    /* key counts that are multiples of 8 (half storage: 16-byte rows in the softmax), 4 and 32 lanes a row */
    t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(4, 2, 3, 11, 16), false);
    tg_in(&t, RT(4, 2, 3, 16, 24), false);
    tg_in(&t, RT(4, 2, 3, 24, 8), false);
    tg_in(&t, rand_tensor(KILN_DT_BOOL, 4, D(2, 1, 11, 24), -0.3, 1), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.25f);
    kiln__node_set_attr_i(tg_node(&t), "mask_kind", 3);
    kiln__node_set_attr_f(tg_node(&t), "mask_fill", -1e4f);
    run_case("Attention Sk 24 fill mask", &t, 1e-5);
    t = tg_new(KILN_OP_Attention, 1);
    tg_in(&t, RT(4, 2, 5, 9, 32), false);
    tg_in(&t, RT(4, 2, 5, 32, 264), false);
    tg_in(&t, RT(4, 2, 5, 264, 16), false);
    tg_in(&t, rand_tensor(F32, 4, D(2, 1, 1, 264), -3, 0), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.2f);
    run_case("Attention Sk 264 additive mask", &t, 1e-5);
    attention_perm_cases();
}

/* ---- FP16 / BF16 weights (what `--precision fp16|bf16` engines hold): the layer computes in that
 * format on the GPU, FP32 accumulation, half output; the CPU reference computes in float32 from the
 * same (pre-rounded) activations */

/* A constant weight in h (FP16 / BF16) storage, uniform in [lo, hi) */
static kiln_tensor half_weight_in(kiln_dtype h, int nd, const int64_t *dims, double lo, double hi)
{
    kiln_tensor f = rand_tensor(F32, nd, dims, lo, hi), t;
    if (kiln__tensor_alloc(&t, h, nd, dims) != KILN_OK)
        exit(2);
    const float *x = f.data;
    uint16_t *o = t.data;
    for (int64_t i = 0; i < kiln_tensor_numel(&f); i++)
        o[i] = h == KILN_DT_FLOAT16 ? kiln__f32_to_f16(x[i]) : kiln__f32_to_bf16(x[i]);
    kiln__tensor_release(&f);
    return t;
}

static kiln_tensor half_weight(kiln_dtype h, int nd, const int64_t *dims) { return half_weight_in(h, nd, dims, -1, 1); }

/* A float32 activation holding values of h, uniform in [lo, hi) before the rounding */
static kiln_tensor half_act_in(kiln_dtype h, int nd, const int64_t *dims, double lo, double hi)
{
    kiln_tensor t = rand_tensor(F32, nd, dims, lo, hi);
    round_half(&t, h);
    return t;
}

static kiln_tensor half_act(kiln_dtype h, int nd, const int64_t *dims) { return half_act_in(h, nd, dims, -1, 1); }

void half_weight_cases(void)
{
    static const kiln_dtype hs[2] = {KILN_DT_FLOAT16, KILN_DT_BFLOAT16};
    for (int k = 0; k < 2; k++) {
        kiln_dtype h = hs[k];
        double tol = h == KILN_DT_FLOAT16 ? 2e-3 : 1.6e-2;
        char name[64];
        const char *hn = h == KILN_DT_FLOAT16 ? "fp16" : "bf16";
        tgraph t = tg_new(KILN_OP_Conv, 13);
        tg_in(&t, half_act(h, 4, D(2, 16, 15, 13)), false);
        tg_in(&t, half_weight(h, 4, D(24, 16, 3, 3)), true);
        tg_in(&t, RT(1, 24), true);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        snprintf(name, sizeof name, "Conv %s W bias", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(3, 8, 9, 11)), false);
        tg_in(&t, half_weight(h, 4, D(16, 8, 3, 3)), true);
        tg_in(&t, RT(1, 16), true);
        tg_in(&t, half_act(h, 4, D(3, 16, 5, 6)), false);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        attr_ints(&t, "strides", 2, D(2, 2));
        set_act(&t, KILN_FUSED_RELU, 0, 0);
        snprintf(name, sizeof name, "FusedConv %s W bias+res+Relu", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);   /* PP-LCNet: hard-swish then its affine block, and a depthwise one */
        tg_in(&t, half_act(h, 4, D(2, 16, 20, 20)), false);
        tg_in(&t, half_weight(h, 4, D(32, 16, 1, 1)), true);
        tg_in(&t, RT(1, 32), true);
        tg_outs(&t, 1);
        set_act(&t, KILN_FUSED_HARDSWISH_AFFINE, 1.2f, 0.1f);
        snprintf(name, sizeof name, "FusedConv %s W 1x1 HardSwishAffine", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(2, 32, 20, 20)), false);
        tg_in(&t, half_weight(h, 4, D(32, 1, 3, 3)), true);
        tg_in(&t, RT(1, 32), true);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        kiln__node_set_attr_i(tg_node(&t), "group", 32);
        set_act(&t, KILN_FUSED_HARDSWISH_AFFINE, 0.7f, -0.2f);
        snprintf(name, sizeof name, "FusedConv %s W dw 3x3 HardSwishAffine", hn);
        run_case(name, &t, tol);
        /* ResNet's shapes: 1x1 stride-2 projection (bias, no activation), 3x3 bias + ReLU, channels
         * multiples of 8; then odd channel counts (engines may refuse them: another path runs) */
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(2, 32, 14, 14)), false);
        tg_in(&t, half_weight(h, 4, D(64, 32, 1, 1)), true);
        tg_in(&t, RT(1, 64), true);
        tg_outs(&t, 1);
        attr_ints(&t, "strides", 2, D(2, 2));
        snprintf(name, sizeof name, "FusedConv %s W 1x1 s2 bias", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(3, 64, 7, 9)), false);
        tg_in(&t, half_weight(h, 4, D(64, 64, 3, 3)), true);
        tg_in(&t, RT(1, 64), true);
        tg_in(&t, half_act(h, 4, D(3, 64, 7, 9)), false);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        set_act(&t, KILN_FUSED_RELU, 0, 0);
        snprintf(name, sizeof name, "FusedConv %s W 3x3 64 bias+res+Relu", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(1, 5, 11, 7)), false);
        tg_in(&t, half_weight(h, 4, D(7, 5, 3, 3)), true);
        tg_in(&t, RT(1, 7), true);
        tg_in(&t, half_act(h, 4, D(1, 7, 11, 7)), false);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        set_act(&t, KILN_FUSED_RELU, 0, 0);
        snprintf(name, sizeof name, "FusedConv %s W odd C bias+res+Relu", hn);
        run_case(name, &t, tol);
        /* 1x1 stride 1: a cuBLASLt GEMM or cuDNN's graph (cuda_conv_gemm.c, timed per layer), each forced: bias +
         * residual + ReLU over 297 pixels, SiLU after (kiln's epilogue), 12 channels (rows of 24 bytes), no bias */
        for (int m = 0; m < 2; m++) {
            const char *how = m ? "GEMM" : "cuDNN";
            setenv("KILN_CUDA_CONV_GEMM", m ? "1" : "0", 1);
            t = tg_new(KILN_OP_FusedConv, 1);
            tg_in(&t, half_act(h, 4, D(3, 32, 9, 11)), false);
            tg_in(&t, half_weight(h, 4, D(48, 32, 1, 1)), true);
            tg_in(&t, RT(1, 48), true);
            tg_in(&t, half_act(h, 4, D(3, 48, 9, 11)), false);
            tg_outs(&t, 1);
            set_act(&t, KILN_FUSED_RELU, 0, 0);
            snprintf(name, sizeof name, "FusedConv %s W 1x1 bias+res+Relu (%s)", hn, how);
            run_case(name, &t, tol);
            t = tg_new(KILN_OP_FusedConv, 1);
            tg_in(&t, half_act(h, 4, D(2, 16, 7, 5)), false);
            tg_in(&t, half_weight(h, 4, D(24, 16, 1, 1)), true);
            tg_in(&t, RT(1, 24), true);
            tg_outs(&t, 1);
            set_act(&t, KILN_FUSED_SILU, 0, 0);
            snprintf(name, sizeof name, "FusedConv %s W 1x1 bias+SiLU (%s)", hn, how);
            run_case(name, &t, tol);
            t = tg_new(KILN_OP_Conv, 13);
            tg_in(&t, half_act(h, 4, D(1, 12, 13, 3)), false);
            tg_in(&t, half_weight(h, 4, D(20, 12, 1, 1)), true);
            tg_outs(&t, 1);
            snprintf(name, sizeof name, "Conv %s W 1x1 C12 (%s)", hn, how);
            run_case(name, &t, tol);
        }
        unsetenv("KILN_CUDA_CONV_GEMM");
        /* fewer than 8 input channels: kiln's implicit-GEMM kernel (kernels_conv.cu), not cuDNN. A stem (7x7 s2,
         * 3 channels, pixels not a multiple of its 128-row tile), one channel dilated with a residual and 40
         * outputs (a partial column tile), 72 outputs (two column tiles) with strides (1, 2) and SiLU after */
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(2, 3, 37, 45)), false);
        tg_in(&t, half_weight(h, 4, D(64, 3, 7, 7)), true);
        tg_in(&t, RT(1, 64), true);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(3, 3, 3, 3));
        attr_ints(&t, "strides", 2, D(2, 2));
        set_act(&t, KILN_FUSED_RELU, 0, 0);
        snprintf(name, sizeof name, "FusedConv %s W stem 7x7 s2 3ch bias+Relu", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(3, 1, 17, 19)), false);
        tg_in(&t, half_weight(h, 4, D(40, 1, 5, 5)), true);
        tg_in(&t, RT(1, 40), true);
        tg_in(&t, half_act(h, 4, D(3, 40, 17, 19)), false);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(4, 4, 4, 4));
        attr_ints(&t, "dilations", 2, D(2, 2));
        snprintf(name, sizeof name, "FusedConv %s W 1ch 5x5 d2 K40 bias+res", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(1, 4, 9, 130)), false);
        tg_in(&t, half_weight(h, 4, D(72, 4, 3, 3)), true);
        tg_outs(&t, 1);
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        attr_ints(&t, "strides", 2, D(1, 2));
        set_act(&t, KILN_FUSED_SILU, 0, 0);
        snprintf(name, sizeof name, "FusedConv %s W 4ch 3x3 s(1,2) K72 SiLU", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedConv, 1);
        tg_in(&t, half_act(h, 4, D(2, 8, 10, 10)), false);
        tg_in(&t, half_weight(h, 4, D(16, 8, 3, 3)), true);
        tg_in(&t, RT(1, 16), true);
        tg_outs(&t, 1);
        set_act(&t, KILN_FUSED_SILU, 0, 0);
        snprintf(name, sizeof name, "FusedConv %s W bias+SiLU", hn);
        run_case(name, &t, tol);
        /* a half convolution writes NHWC: the max pools after it take the 8-channel vector path */
        t = tg_new(KILN_OP_Conv, 13);
        tg_in(&t, half_act(h, 4, D(2, 8, 15, 13)), false);
        tg_in(&t, half_weight(h, 4, D(16, 8, 1, 1)), true);
        tg_then(&t, KILN_OP_MaxPool, 13);
        tg_outs(&t, 1);
        attr_ints(&t, "kernel_shape", 2, D(3, 3));
        attr_ints(&t, "strides", 2, D(2, 2));
        attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
        snprintf(name, sizeof name, "Conv %s -> MaxPool 3x3 s2 NHWC", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_Conv, 13);
        tg_in(&t, half_act(h, 4, D(3, 8, 11, 9)), false);
        tg_in(&t, half_weight(h, 4, D(24, 8, 3, 3)), true);
        tg_then(&t, KILN_OP_MaxPool, 13);
        tg_outs(&t, 1);
        attr_ints(&t, "kernel_shape", 2, D(2, 3));
        attr_ints(&t, "dilations", 2, D(2, 1));
        attr_ints(&t, "pads", 4, D(0, 1, 1, 0));
        snprintf(name, sizeof name, "Conv %s -> MaxPool 2x3 d2 NHWC", hn);
        run_case(name, &t, tol);
        /* ... and binary ops between it and an operand of another shape computed channels-last (nhwc_view):
         * a scalar, a per-channel constant, a per-image scale [N, C, 1, 1] and a map [N, 1, H, W] (graph inputs),
         * the NHWC operand first or second; and a full NCHW operand of the output's shape (taken back to NCHW) */
        static const struct { kiln_op op; int64_t d[4]; int nd; bool cnst, first; const char *what; } bn[] = {
            {KILN_OP_Add, {1}, 1, true, true, "+ scalar"},
            {KILN_OP_Mul, {1, 24, 1, 1}, 4, true, true, "* [1,24,1,1]"},
            {KILN_OP_Mul, {2, 24, 1, 1}, 4, false, true, "* [2,24,1,1] input"},
            {KILN_OP_Sub, {2, 24, 1, 1}, 4, false, false, "[2,24,1,1] - conv"},
            {KILN_OP_Add, {2, 1, 9, 11}, 4, false, true, "+ [2,1,9,11]"},
            {KILN_OP_Div, {24, 1, 1}, 3, true, false, "[24,1,1] / conv"},
            {KILN_OP_Max, {2, 24, 9, 11}, 4, false, true, "max NCHW [2,24,9,11]"},
        };
        for (size_t j = 0; j < sizeof bn / sizeof *bn; j++) {
            /* the convolution a divisor: positive operands, so that its outputs stay away from 0 (a sum of signed
             * products near 0, rounded to half, divides to any value: the cuDNN legacy path gave inf there) */
            const bool divisor = bn[j].op == KILN_OP_Div && !bn[j].first;
            t = tg_new(KILN_OP_Conv, 13);
            tg_in(&t, half_act_in(h, 4, D(2, 8, 9, 11), divisor ? 0.25 : -1, 1), false);
            tg_in(&t, half_weight_in(h, 4, D(24, 8, 1, 1), divisor ? 0.25 : -1, 1), true);
            int mid = tg_out1(t.g, t.node, "mid"), other;
            kiln_tensor o = rand_tensor(F32, bn[j].nd, bn[j].d, 0.5, 2);   /* away from 0: a divisor */
            round_half(&o, h);
            if (bn[j].cnst) {
                other = tg_const(t.g, "other", o);
            } else {
                other = kiln__graph_add_value(t.g, "other");
                t.g->inputs = kiln__realloc(t.g->inputs, sizeof(int) * (size_t)(t.g->n_inputs + 1));
                t.g->inputs[t.g->n_inputs++] = other;
                t.feed[t.n_feed++] = o;
            }
            int ins[2] = {bn[j].first ? mid : other, bn[j].first ? other : mid};
            t.node = tg_node_add(t.g, bn[j].op, 13, "bin", 2, ins, "y0");
            tg_output(t.g, t.node);
            snprintf(name, sizeof name, "Conv %s -> %s", hn, bn[j].what);
            run_case(name, &t, tol);
        }
        /* ... and the global average pools after it the NHWC slices (one image of many pixels and few channels,
         * 40 channels: a partial 32-channel group; a batch of three) */
        for (int g = 0; g < 2; g++) {
            t = tg_new(KILN_OP_Conv, 13);
            tg_in(&t, half_act(h, 4, g ? D(3, 8, 13, 11) : D(1, 8, 157, 161)), false);
            tg_in(&t, half_weight(h, 4, g ? D(40, 8, 3, 3) : D(24, 8, 1, 1)), true);
            tg_then(&t, KILN_OP_GlobalAveragePool, 13);
            tg_outs(&t, 1);
            snprintf(name, sizeof name, "Conv %s -> GlobalAveragePool NHWC %s", hn, g ? "3x40x11x9" : "1x24x157x161");
            run_case(name, &t, tol);
        }
        t = tg_new(KILN_OP_MatMul, 13);
        tg_in(&t, half_act(h, 3, D(3, 17, 65)), false);
        tg_in(&t, half_weight(h, 2, D(65, 33)), true);
        tg_outs(&t, 1);
        snprintf(name, sizeof name, "MatMul %s W", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedMatMul, 1);
        tg_in(&t, half_act(h, 3, D(2, 19, 64)), false);
        tg_in(&t, half_weight(h, 2, D(64, 40)), true);
        tg_in(&t, RT(1, 40), true);
        tg_in(&t, half_act(h, 3, D(2, 19, 40)), false);
        tg_outs(&t, 1);
        set_act(&t, KILN_FUSED_GELU, 0, 0);
        snprintf(name, sizeof name, "FusedMatMul %s W bias+res+Gelu", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_FusedMatMul, 1);
        tg_in(&t, half_act(h, 2, D(37, 96)), false);
        tg_in(&t, half_weight(h, 2, D(96, 72)), true);
        tg_in(&t, RT(1, 72), true);
        tg_outs(&t, 1);
        set_act(&t, KILN_FUSED_RELU, 0, 0);
        snprintf(name, sizeof name, "FusedMatMul %s W bias+Relu", hn);
        run_case(name, &t, tol);
        t = tg_new(KILN_OP_Gemm, 13);
        tg_in(&t, half_act(h, 2, D(7, 130)), false);
        tg_in(&t, half_weight(h, 2, D(33, 130)), true);
        tg_in(&t, RT(1, 33), true);
        tg_outs(&t, 1);
        kiln__node_set_attr_i(tg_node(&t), "transB", 1);
        snprintf(name, sizeof name, "Gemm %s W transB bias", hn);
        run_case(name, &t, tol);
    }
}

/* --strict-device (KILN_DEVICE_STRICT): a layer the GPU does not run is an error instead of a CPU
 * fallback; without it the same graph runs with one fallback and matches the CPU exactly (the CPU ran it) */
void strict_check(const char *what, tgraph (*make)(void))
{
    for (int strict = 0; strict < 2; strict++) {
        kiln_dev *sd = NULL;
        test_checks++;
        if (kiln__dev_open(KILN_DEVICE_CUDA, strict ? KILN_DEVICE_STRICT : 0, &sd) != KILN_OK) {
            printf("FAIL opening the device: %s\n", kiln_last_error());
            test_failures++;
            return;
        }
        tgraph t = make();
        const kiln_tensor *feed[8];
        for (int i = 0; i < t.n_feed; i++)
            feed[i] = &t.feed[i];
        kiln_tensor got[1] = {0}, ref[1] = {0};
        kiln_run_env cpu = {.nthreads = 1};
        kiln_status rs = kiln__exec_graph(t.g, NULL, feed, ref, &cpu, 0);
        kiln_run_env gpu = {.nthreads = 1, .dev = sd, .backend = kiln__dev_backend(sd)};
        kiln__dev_run_begin(sd);
        kiln_status s = kiln__exec_graph(t.g, NULL, feed, got, &gpu, 0);
        kiln_device_stats st;
        kiln__dev_stats(sd, &st);
        bool ok = strict ? s == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "--strict-device")
                         : s == KILN_OK && rs == KILN_OK && st.fallback_layers == 1 && compare(&got[0], &ref[0]) == 0;
        printf("%s %s %s: %s\n", ok ? "ok  " : "FAIL", what, strict ? "--strict-device refused" : "fell back to the CPU",
               s == KILN_OK ? "ran" : kiln_last_error());
        test_failures += !ok;
        kiln__tensor_release(&got[0]);
        kiln__tensor_release(&ref[0]);
        kiln__dev_weights_clear(sd);
        tg_free(&t);
        kiln__dev_close(sd);
    }
}

tgraph reduce_mean_graph(void)
{
    tgraph t = tg_new(KILN_OP_ReduceMean, 13);
    tg_in(&t, RT(3, 2, 5, 7), false);
    tg_outs(&t, 1);
    attr_ints(&t, "axes", 1, D(1));
    return t;
}
