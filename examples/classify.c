/* Example: build an engine from an ONNX model (or load a .kiln file), run it on one random input
 * through an execution context, and print the output shape. Uses only the public header.
 *
 *     cc -std=c17 examples/classify.c -Iinclude build/libkiln.a -lprotobuf-c -lz -ljansson -lpthread -lm
 *     ./a.out models/tiny_cnn.onnx 1x3x32x32
 */
#include <kiln/kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(kiln_status st, const char *what)
{
    fprintf(stderr, "%s: %s (%s)\n", what, kiln_last_error(), kiln_status_str(st));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.onnx|ENGINE.kiln SHAPE (e.g. 1x3x224x224)\n", argv[0]);
        return 2;
    }
    kiln_tensor in = {.dtype = KILN_DT_FLOAT32};
    for (char *p = argv[2]; *p && in.ndim < KILN_MAX_DIMS;) {
        in.dims[in.ndim++] = strtoll(p, &p, 10);
        if (*p == 'x')
            p++;
    }
    kiln_engine_t engine;
    kiln_status st;
    if (kiln_is_engine_file(argv[1])) {
        st = kiln_engine_load(argv[1], &engine);
    } else {
        kiln_model_t model;
        if ((st = kiln_model_load(argv[1], &model)) != KILN_OK)
            return fail(st, "load");
        kiln_build_options opts = {.want_report = true};
        st = kiln_build(model, &opts, &engine);
        if (opts.report)
            printf("%s", opts.report);
        kiln_free(opts.report);
        kiln_free(opts.precision_report);
        kiln_model_free(model);
    }
    if (st != KILN_OK)
        return fail(st, "engine");
    int64_t n = kiln_tensor_numel(&in);
    float *data = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        data[i] = (float)((i * 7919) % 255) / 255.0f;
    in.data = data;
    kiln_context_t ctx;
    if ((st = kiln_context_create(engine, &ctx)) != KILN_OK)
        return fail(st, "context");
    if ((st = kiln_context_set_input(ctx, kiln_engine_input_name(engine, 0), &in)) != KILN_OK ||
        (st = kiln_context_run(ctx)) != KILN_OK)
        return fail(st, "run");
    const kiln_tensor *out = kiln_context_output(ctx, 0);
    printf("%s:", kiln_engine_output_name(engine, 0));
    for (int d = 0; d < out->ndim; d++)
        printf(" %lld", (long long)out->dims[d]);
    printf(" (%s)\n", kiln_dtype_name(out->dtype));
    kiln_context_free(ctx);
    kiln_engine_free(engine);
    free(data);
    return 0;
}
