/* The public introspection and tooling API (kiln.h), used only through kiln.h: argument
 * validation, the one shape-spec parser, the one synthetic-input generator (deterministic, the
 * builder's value rule), model info, inferred shapes, engine layers/profiles and per-layer
 * profiling. */
#include "kiln/kiln.h"
#include "test.h"
#include <stdlib.h>
#include <string.h>

static bool err_has(const char *s) { return strstr(kiln_last_error(), s) != NULL; }

static void test_shapes(void)
{
    kiln_shapes_t s = NULL;
    CHECK(kiln_shapes_parse("a:1x3x224x224,b:c:8,s:", &s) == KILN_OK);
    CHECK(kiln_shapes_count(s) == 3 && kiln_shapes_find(s, "b:c") == 1 && kiln_shapes_find(s, "zz") == -1);
    const char *name;
    int nd;
    int64_t d[KILN_MAX_DIMS];
    CHECK(kiln_shapes_get(s, 0, &name, &nd, d) == KILN_OK && !strcmp(name, "a") && nd == 4 && d[3] == 224);
    CHECK(kiln_shapes_get(s, 2, NULL, &nd, NULL) == KILN_OK && nd == 0);
    CHECK(kiln_shapes_get(s, 3, NULL, NULL, NULL) == KILN_ERR_INVALID_ARG && err_has("out of range"));
    CHECK(kiln_shapes_get(NULL, 0, NULL, NULL, NULL) == KILN_ERR_INVALID_ARG);
    kiln_shapes_free(s);
    static const struct { const char *spec, *msg; } bad[] = {
        {"", "bad shape '': empty spec"},
        {"a:1,,b:2", "empty entry"},
        {"a1x2", "no ':' between name and dims"},
        {":1x2", "empty input name"},
        {"a:1x2,a:3", "input named twice"},
        {"a:1xx2", "empty dimension"},
        {"a:1x2x3x4x5x6x7x8x9", "rank 9 exceeds kiln's maximum of 8"},
        {"a:1x-2", "dimension is not an integer in [0, 2^63-1]: -2"},
        {"a:1x 2", "dimension is not an integer"},
        {"a:99999999999999999999", "dimension is not an integer"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        s = (kiln_shapes_t)1;
        CHECK_MSG(kiln_shapes_parse(bad[k].spec, &s) == KILN_ERR_INVALID_ARG && s == NULL && err_has(bad[k].msg) &&
                      err_has("(want NAME:DIMS, e.g. input:1x3x224x224)"),
                  "'%s': %s", bad[k].spec, kiln_last_error());
    }
    CHECK(kiln_shapes_parse("a:1", NULL) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_shapes_new(&s) == KILN_OK);
    int64_t neg = -1;
    CHECK(kiln_shapes_add(s, "x", 1, &neg) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_shapes_add(s, "x", KILN_MAX_DIMS + 1, d) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_shapes_add(s, "x", 1, d) == KILN_OK && kiln_shapes_add(s, "x", 1, d) == KILN_ERR_INVALID_ARG);
    kiln_shapes_free(s);
}

static void test_synth(kiln_model_t m)
{
    kiln_tensor a[3] = {{0}}, b[3] = {{0}};
    kiln_shapes_t s;
    CHECK(kiln_shapes_parse("input_ids:2x5,attention_mask:2x5,token_type_ids:2x5", &s) == KILN_OK);
    kiln_synth_options o = {.shapes = s};
    CHECK(kiln_model_synth_inputs(m, &o, a) == KILN_OK && kiln_model_synth_inputs(m, &o, b) == KILN_OK);
    for (int i = 0; i < 3; i++) {
        const char *n = kiln_model_input_name(m, i);
        CHECK(a[i].ndim == 2 && a[i].dims[1] == 5 && a[i].nbytes == b[i].nbytes && !memcmp(a[i].data, b[i].data, a[i].nbytes));
        for (int64_t k = 0; k < kiln_tensor_numel(&a[i]); k++) {
            int64_t v = ((const int64_t *)a[i].data)[k];
            if (strstr(n, "type"))
                CHECK(v == 0);
            else if (strstr(n, "ids"))
                CHECK(v >= 0 && v < 100);
            else
                CHECK_MSG(v == 1, "%s[%lld] = %lld", n, (long long)k, (long long)v);   /* masks, sizes: 1 */
        }
    }
    /* a caller-supplied entry is kept; a seed changes the random ids */
    kiln_free(b[0].data);
    kiln_free(b[1].data);
    kiln_free(b[2].data);
    memset(b, 0, sizeof b);
    b[1] = a[1];
    o.seed = 12345;
    CHECK(kiln_model_synth_inputs(m, &o, b) == KILN_OK && b[1].data == a[1].data);
    CHECK(memcmp(a[0].data, b[0].data, a[0].nbytes) != 0);
    kiln_free(b[0].data);
    kiln_free(b[2].data);
    for (int i = 0; i < 3; i++)
        kiln_free(a[i].data);
    kiln_shapes_free(s);
    /* the declared dynamic sequence dim needs a shape; a non-input name is an error; nothing leaks */
    memset(a, 0, sizeof a);
    CHECK(kiln_model_synth_inputs(m, NULL, a) == KILN_ERR_INVALID_ARG && err_has("dim 1 is dynamic (sequence)"));
    CHECK(a[0].data == NULL && a[0].dtype == KILN_DT_UNDEFINED);
    CHECK(kiln_shapes_parse("nope:1", &s) == KILN_OK);
    o = (kiln_synth_options){.shapes = s};
    CHECK(kiln_model_synth_inputs(m, &o, a) == KILN_ERR_INVALID_ARG && err_has("no input 'nope'"));
    kiln_shapes_free(s);
    CHECK(kiln_model_synth_inputs(NULL, NULL, a) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_model_synth_inputs(m, NULL, NULL) == KILN_ERR_INVALID_ARG);
    kiln_tensor f = {.dtype = KILN_DT_FLOAT32, .ndim = 1, .dims = {64}};
    float buf[64];
    f.data = buf;
    f.nbytes = sizeof buf;
    CHECK(kiln_tensor_fill_synthetic(&f, "x", 0) == KILN_OK);
    for (int k = 0; k < 64; k++)
        CHECK(buf[k] >= -1 && buf[k] < 1);
    f.nbytes = 4;
    CHECK(kiln_tensor_fill_synthetic(&f, "x", 0) == KILN_ERR_INVALID_ARG);
    /* the builder's rule for integers: ids small random, type ids 0, anything else 1 */
    int64_t iv[256];
    kiln_tensor it = {.dtype = KILN_DT_INT64, .ndim = 1, .dims = {256}, .data = iv, .nbytes = sizeof iv};
    static const struct { const char *name; int64_t lo, hi; } rule[] = {
        {"sizes", 1, 1}, {"indices", 1, 1}, {"mask", 1, 1}, {"token_type_ids", 0, 0}, {"input_ids", 0, 99}};
    for (size_t r = 0; r < sizeof rule / sizeof rule[0]; r++) {
        CHECK(kiln_tensor_fill_synthetic(&it, rule[r].name, 7) == KILN_OK);
        int64_t lo = iv[0], hi = iv[0];
        for (int k = 0; k < 256; k++)
            lo = iv[k] < lo ? iv[k] : lo, hi = iv[k] > hi ? iv[k] : hi;
        CHECK_MSG(lo >= rule[r].lo && hi <= rule[r].hi && (rule[r].lo == rule[r].hi || hi > lo), "%s: [%lld, %lld]",
                  rule[r].name, (long long)lo, (long long)hi);
    }
    it.dtype = KILN_DT_STRING;
    CHECK(kiln_tensor_fill_synthetic(&it, "s", 0) == KILN_ERR_DTYPE);
}

static void test_model_info(kiln_model_t m)
{
    kiln_type_info t;
    CHECK(kiln_model_io_type(m, KILN_IO_INPUT, 0, &t) == KILN_OK && t.is_tensor && t.dtype == KILN_DT_INT64 && t.rank == 2);
    CHECK(t.dims[1] == -1 && t.dim_names[1] && !strcmp(t.dim_names[1], "sequence"));
    CHECK(kiln_model_io_type(m, KILN_IO_INPUT, 3, &t) == KILN_ERR_INVALID_ARG && err_has("input 3 out of range [0, 3)"));
    CHECK(kiln_model_io_type(m, KILN_IO_OUTPUT, -1, &t) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_model_io_type(m, (kiln_io)7, 0, &t) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_model_io_type(NULL, KILN_IO_INPUT, 0, &t) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_model_io_type(m, KILN_IO_INPUT, 0, NULL) == KILN_ERR_INVALID_ARG);
    int64_t size = 0;
    const char *dn = NULL;
    CHECK(kiln_model_io_dim(m, KILN_IO_INPUT, 0, 1, &size, &dn) == KILN_OK && size == -1 && !strcmp(dn, "sequence"));
    CHECK(kiln_model_io_dim(m, KILN_IO_INPUT, 0, 2, &size, &dn) == KILN_ERR_INVALID_ARG && err_has("dim 2 out of range"));
    CHECK(kiln_model_io_dim(m, KILN_IO_OUTPUT, 5, 0, NULL, NULL) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_model_num_opsets(m) >= 1 && kiln_model_num_nodes(m) > 10 && kiln_model_producer(m) != NULL);
    CHECK(kiln_model_opset(m, kiln_model_num_opsets(m), NULL, NULL) == KILN_ERR_INVALID_ARG);
    int64_t params = 0;
    CHECK(kiln_model_parameters(m, &params, NULL, NULL) == KILN_OK && params > 1000);
    kiln_op_count *h;
    int nh, nu;
    char *text;
    CHECK(kiln_model_op_histogram(m, &nh, &h) == KILN_OK && nh > 3);
    for (int i = 1; i < nh; i++)
        CHECK(h[i - 1].count >= h[i].count);
    kiln_free(h);
    CHECK(kiln_model_unsupported(m, &nu, &text) == KILN_OK && nu == 0 && text && !text[0]);
    kiln_free(text);
    CHECK(kiln_model_op_histogram(m, NULL, &h) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_num_ops() > 100 && kiln_op_name(0) && !kiln_op_name(kiln_num_ops()) && !kiln_op_has_kernel(-1));
    /* inferred shapes: symbolic, then concrete */
    kiln_value_shapes_t vs;
    CHECK(kiln_model_infer_shapes(m, NULL, &vs) == KILN_OK && kiln_value_shapes_count(vs) > 100);
    const char *name;
    bool found = false;
    for (int i = 0; i < kiln_value_shapes_count(vs); i++) {
        CHECK(kiln_value_shapes_get(vs, i, &name, &t) == KILN_OK);
        if (!strcmp(name, "last_hidden_state"))
            found = t.rank == 3 && !strcmp(t.dim_names[0], "batch") && !strcmp(t.dim_names[1], "sequence") && t.dims[2] == 64;
    }
    CHECK_MSG(found, "last_hidden_state [batch, sequence, 64]");
    CHECK(kiln_value_shapes_get(vs, kiln_value_shapes_count(vs), &name, &t) == KILN_ERR_INVALID_ARG);
    kiln_value_shapes_free(vs);
    kiln_shapes_t s;
    CHECK(kiln_shapes_parse("input_ids:2x7,attention_mask:2x7,token_type_ids:2x7", &s) == KILN_OK);
    CHECK(kiln_model_infer_shapes(m, s, &vs) == KILN_OK);
    for (int i = 0; i < kiln_value_shapes_count(vs); i++) {
        kiln_value_shapes_get(vs, i, &name, &t);
        for (int d = 0; d < t.rank; d++)
            CHECK_MSG(t.dims[d] >= 0 && !t.dim_names[d], "%s dim %d", name, d);
    }
    kiln_value_shapes_free(vs);
    kiln_shapes_free(s);
    CHECK(kiln_shapes_parse("input_ids:1x2x3", &s) == KILN_OK);
    CHECK(kiln_model_infer_shapes(m, s, &vs) == KILN_ERR_SHAPE && err_has("rank 3") && vs == NULL);
    kiln_shapes_free(s);
    CHECK(kiln_model_infer_shapes(NULL, NULL, &vs) == KILN_ERR_INVALID_ARG);
}

static void test_engine(kiln_model_t m)
{
    kiln_shape_range r = {.input = "input_ids", .ndim = 2, .min = {1, 1}, .opt = {2, 6}, .max = {4, 16}};
    kiln_shape_range r2 = r, r3 = r;
    r2.input = "attention_mask";
    r3.input = "token_type_ids";
    kiln_shape_range rs[3] = {r, r2, r3};
    kiln_profile p = {3, rs};
    kiln_build_options bo = {.num_profiles = 1, .profiles = &p, .no_tactics = true};
    kiln_engine_t e;
    CHECK_MSG(kiln_build(m, &bo, &e) == KILN_OK, "%s", kiln_last_error());
    CHECK(kiln_engine_num_profiles(e) == 1 && kiln_engine_profile_num_ranges(e, 0) == 3);
    CHECK(kiln_engine_profile_num_ranges(e, 1) == -1);
    kiln_shape_range got;
    CHECK(kiln_engine_profile_range(e, 0, 0, &got) == KILN_OK && !strcmp(got.input, "input_ids") && got.opt[1] == 6 &&
          got.max[1] == 16);
    CHECK(kiln_engine_profile_range(e, 0, 3, &got) == KILN_ERR_INVALID_ARG);
    kiln_type_info t;
    CHECK(kiln_engine_io_type(e, KILN_IO_OUTPUT, 0, &t) == KILN_OK && t.dtype == KILN_DT_FLOAT32);
    CHECK(kiln_engine_io_type(e, KILN_IO_OUTPUT, 99, &t) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_engine_manifest(e) && kiln_engine_manifest(e)[0] == '{');
    bool has_plan = false;
    size_t arena = 0, naive = 0;
    CHECK(kiln_engine_memory_plan(e, &has_plan, &arena, &naive) == KILN_OK && has_plan && arena > 0 && arena <= naive);
    int nl = kiln_engine_num_layers(e);
    kiln_layer_info L;
    CHECK(nl > 0 && kiln_engine_layer(e, 0, &L) == KILN_OK && L.op && L.precision && !strcmp(L.precision, "fp32"));
    CHECK(kiln_engine_layer(e, nl, &L) == KILN_ERR_INVALID_ARG && kiln_engine_layer(NULL, 0, &L) == KILN_ERR_INVALID_ARG);
    /* synthetic inputs at the profile's opt shapes, shapes recorded by the first run, profiling */
    kiln_tensor ins[3] = {{0}};
    CHECK(kiln_engine_synth_inputs(e, NULL, ins) == KILN_OK && ins[0].dims[0] == 2 && ins[0].dims[1] == 6);
    kiln_context_t c;
    CHECK(kiln_context_create(e, &c) == KILN_OK && kiln_context_record_shapes(c) == KILN_OK);
    for (int i = 0; i < 3; i++)
        CHECK(kiln_context_set_input(c, kiln_engine_input_name(e, i), &ins[i]) == KILN_OK);
    CHECK(kiln_context_run(c) == KILN_OK);
    CHECK(kiln_engine_layer(e, nl - 1, &L) == KILN_OK);
    bool weight = true;
    CHECK(kiln_context_layer_type(c, nl - 1, KILN_IO_OUTPUT, 0, &t, &weight) == KILN_OK && !weight &&
          t.dtype != KILN_DT_UNDEFINED && t.rank >= 0);
    CHECK(kiln_context_layer_type(c, nl - 1, KILN_IO_OUTPUT, L.num_outputs, &t, NULL) == KILN_ERR_INVALID_ARG);
    double *ms = calloc((size_t)nl, sizeof *ms), total = 0;
    CHECK(kiln_context_profile(c, 3, ms) == KILN_OK);
    for (int i = 0; i < nl; i++)
        total += ms[i] >= 0 ? ms[i] : -1e9;
    CHECK(total > 0);
    CHECK(kiln_context_profile(c, 0, ms) == KILN_ERR_INVALID_ARG && kiln_context_profile(c, 1, NULL) == KILN_ERR_INVALID_ARG);
    free(ms);
    /* layer placement: none on a CPU context (the GPU's is checked by test_gpu); bad arguments refused */
    kiln_layer_place pl = KILN_PLACE_DEVICE;
    CHECK(kiln_context_layer_place(c, nl - 1, &pl) == KILN_OK && pl == KILN_PLACE_NONE);
    CHECK(kiln_context_layer_place(c, nl, &pl) == KILN_ERR_INVALID_ARG &&
          kiln_context_layer_place(c, -1, &pl) == KILN_ERR_INVALID_ARG &&
          kiln_context_layer_place(c, 0, NULL) == KILN_ERR_INVALID_ARG &&
          kiln_context_layer_place(NULL, 0, &pl) == KILN_ERR_INVALID_ARG);
    kiln_context_free(c);
    for (int i = 0; i < 3; i++)
        kiln_free(ins[i].data);
    kiln_engine_free(e);
}

static void test_files(void)
{
    char out[8];
    CHECK(kiln_escape(out, sizeof out, "a\x1b[0m") == 8 && !strcmp(out, "a\\x1b[0"));
    CHECK(kiln_escape(NULL, 0, "ok") == 2);
    CHECK(!kiln_same_file(NULL, "x") && kiln_same_file("models/tiny_cnn.onnx", "models/../models/tiny_cnn.onnx"));
    CHECK(kiln_write_file_atomic(NULL, "", 0) == KILN_ERR_INVALID_ARG && kiln_atomic_file_open(NULL, NULL) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_atomic_file_commit(NULL) == KILN_ERR_INVALID_ARG);
    kiln_atomic_file_abort(NULL);
    kiln_tensor t;
    CHECK(kiln_tensor_read(NULL, &t) == KILN_ERR_INVALID_ARG && kiln_resolve_threads(0) >= 1 && kiln_resolve_threads(3) == 3);
}

int main(void)
{
    test_shapes();
    test_files();
    kiln_model_t m;
    if (kiln_model_load("models/tiny_bert.onnx", &m) != KILN_OK) {
        printf("skip: %s\n", kiln_last_error());
        return 77;
    }
    test_synth(m);
    test_model_info(m);
    test_engine(m);
    kiln_model_free(m);
    return TEST_SUMMARY();
}
