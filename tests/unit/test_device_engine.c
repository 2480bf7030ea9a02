/* Engines built for --device cuda (no GPU needed to build them): the layer plan packs the low-bit
 * layers, and only those (src/build/builder.c). On tiny_bert at --precision fp8 (calibrated on
 * synthetic inputs), every FP8 layer has a KILN_PREP_LOWBIT_W blob with one scale per tensor that the
 * CUDA module runs from (backend/lowbit_blob.h: E4M3 [N, K] and the scale amax / 448), its float32
 * weight is stored only packed, and the engine file shrinks accordingly; the float32 device engine
 * packs nothing. The CPU runs the device engine (its emulation of the GPU's FP8) from those blobs: the
 * same outputs after a save / load round trip. Exits 77 without the model. */
#include "test.h"
#include "test_engine_run.h"
#include "test_calib.h"
#include "backend/lowbit_blob.h"
#include "engine/engine.h"
#include "kiln/kiln.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *MODEL = "models/tiny_bert.onnx";
static const char *SHAPES = "input_ids:2x16,attention_mask:2x16,token_type_ids:2x16";

/* Weight input 1 of node n: its value, or NULL */
static const kiln_value *weight_of(const kiln_graph *g, const kiln_node *n)
{
    return n->n_in > 1 && n->in[1] >= 0 && g->values[n->in[1]].init ? &g->values[n->in[1]] : NULL;
}

/* The FP8 layers of a device engine: a per-tensor FP8 blob of the weight's [N, K] view, the weight dropped.
 * Returns the FP8 weights' element count; *blobs: layers with a blob of any kind. */
static int64_t check_fp8_layers(kiln_engine_t e, int *blobs)
{
    const kiln_graph *g = e->g;
    int64_t elems = 0;
    int fp8 = 0;
    *blobs = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_layer_rec *r = &e->layers[i];
        *blobs += r->blob_size > 0;
        const char *wq = NULL;
        for (int a = 0; a < n->n_attr; a++)
            if (!strcmp(n->attrs[a].name, KILN_ATTR_WQ) && n->attrs[a].type == KILN_ATTR_STRING)
                wq = n->attrs[a].s;
        if (!wq || strcmp(wq, "fp8"))
            continue;
        fp8++;
        const kiln_value *w = weight_of(g, n);
        CHECK_MSG(w && w->init->ndim == 2, "%s: no 2-D weight", n->name);
        if (!w || w->init->ndim != 2)
            continue;
        bool transb = false;
        for (int a = 0; a < n->n_attr; a++)
            transb |= !strcmp(n->attrs[a].name, "transB") && n->attrs[a].i;
        int64_t K = transb ? w->init->dims[1] : w->init->dims[0], N = transb ? w->init->dims[0] : w->init->dims[1];
        elems += N * K;
        kiln_lowbit_blob L;
        const uint8_t *p = kiln__lowbit_blob_parse(r->blob, (size_t)r->blob_size, &L);
        CHECK_MSG(p, "%s: no FP8 blob", n->name);
        if (!p)
            continue;
        float ts;
        memcpy(&ts, p + L.off_t, sizeof ts);
        CHECK_MSG(L.fmt == KILN_QF_FP8 && L.tensor && L.rows == N && L.k == K && L.trans == !transb && ts > 0,
                  "%s: blob fmt %d tensor %d %lld x %lld for N %lld K %lld, scale %g", n->name, (int)L.fmt, L.tensor,
                  (long long)L.rows, (long long)L.k, (long long)N, (long long)K, (double)ts);
        CHECK_MSG(!w->init->data && !w->init->nbytes, "%s: its float32 weight is stored too", n->name);
    }
    CHECK_MSG(fp8 >= 10, "%d FP8 layers", fp8);
    return elems;
}

/* The FP8 feeds (build/fp8_feed.c): every layer whose output an FP8 layer quantizes next, directly or through a
 * Reshape, carries that layer's activation scale; no other layer does. tiny_bert (2 layers): each layer's two
 * LayerNorms (Q / K / V, FFN1), its Attention (the output projection) and FFN1 (FFN2). */
static float attr_f(const kiln_node *n, const char *name)
{
    for (int a = 0; a < n->n_attr; a++)
        if (!strcmp(n->attrs[a].name, name) && n->attrs[a].type == KILN_ATTR_FLOAT)
            return n->attrs[a].f;
    return 0;
}

static float first_fp8_reader(const kiln_graph *g, int v)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *c = &g->nodes[i];
        if (c->n_in < 1 || c->in[0] != v)
            continue;
        if (c->op == KILN_OP_Reshape)
            return first_fp8_reader(g, c->out[0]);
        if (attr_f(c, KILN_ATTR_AQ_SCALE) > 0)
            return attr_f(c, KILN_ATTR_AQ_SCALE);
    }
    return 0;
}

static void check_feeds(kiln_engine_t e, int want)
{
    const kiln_graph *g = e->g;
    int feeds = 0, ln = 0, attn = 0, mm = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        float f = attr_f(n, KILN_ATTR_FP8_FEED), want_s = n->op == KILN_OP_Reshape ? 0 : first_fp8_reader(g, n->out[0]);
        CHECK_MSG(f == want_s, "%s (%s): feed scale %g, its first FP8 reader's %g", n->name, n->op_type, (double)f,
                  (double)want_s);
        feeds += f > 0;
        ln += f > 0 && n->op == KILN_OP_LayerNormalization;
        attn += f > 0 && n->op == KILN_OP_Attention;
        mm += f > 0 && n->op == KILN_OP_FusedMatMul;
    }
    CHECK_MSG(feeds == want && (!want || (ln == 4 && attn == 2 && mm == 2)), "%d feeds (%d LayerNorm, %d Attention, "
              "%d FusedMatMul), want %d", feeds, ln, attn, mm, want);
}

int main(void)
{
    kiln_model_t m = NULL;
    if (kiln_model_load(MODEL, &m) != KILN_OK) {
        printf("SKIP: %s missing\n", MODEL);
        return 77;
    }
    kiln_shapes_t shapes = NULL;
    CHECK(kiln_shapes_parse(SHAPES, &shapes) == KILN_OK);
    kiln_engine_t e32 = NULL, e8 = NULL, e8b = NULL;
    kiln_build_options b32 = {.no_tactics = true, .device = KILN_DEVICE_CUDA};
    CHECK(kiln_build(m, &b32, &e32) == KILN_OK && e32);
    char dir[64] = "/tmp/kiln_devengine_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(e32 && test_calib_samples(e32, shapes, dir, 3, 40) == KILN_OK);
    kiln_calib_options co = {.data_dir = dir, .method = KILN_CALIB_MINMAX};
    kiln_build_options b8 = {.no_tactics = true, .device = KILN_DEVICE_CUDA, .precision = "fp8", .calib = &co};
    CHECK_MSG(kiln_build(m, &b8, &e8) == KILN_OK && e8, "%s", kiln_last_error());
    CHECK_MSG(b8.precision_report && strstr(b8.precision_report, "fp8 feeds: 8 layers"), "report: %s",
              b8.precision_report ? b8.precision_report : "(none)");
    kiln_free(b8.precision_report);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    if (!e32 || !e8)
        return TEST_SUMMARY();

    /* the float32 device engine packs nothing: the GPU copies its float32 weights */
    int blobs32 = 0;
    for (int i = 0; i < e32->n_layers; i++)
        blobs32 += e32->layers[i].blob_size > 0;
    CHECK_MSG(blobs32 == 0, "%d layers of the float32 device engine have blobs", blobs32);
    check_feeds(e32, 0);
    check_feeds(e8, 8);

    /* the FP8 device engine: blobs for its FP8 layers only (the rest are float32 layers the GPU runs from the
     * model's weights), each FP8 weight stored as 1 byte an element + 64-byte aligned scale instead of 4 */
    int blobs8 = 0;
    int64_t elems = check_fp8_layers(e8, &blobs8);
    size_t s32 = test_engine_bytes(e32), s8 = test_engine_bytes(e8);
    int fp8_layers = 0;
    for (int i = 0; i < e8->g->n_nodes; i++) {
        const char *req = NULL, *real = NULL;
        CHECK(kiln_engine_layer_precision(e8, i, &req, &real) == KILN_OK);
        fp8_layers += real && !strcmp(real, "fp8");
    }
    CHECK_MSG(blobs8 == fp8_layers, "%d blobs for %d fp8 layers", blobs8, fp8_layers);
    printf("tiny_bert device engines: float32 %zu bytes, fp8 %zu bytes (%lld FP8 weight elements)\n", s32, s8,
           (long long)elems);
    CHECK_MSG(s8 + (size_t)elems * 3 <= s32 + (size_t)fp8_layers * 512 + 8192,
              "fp8 engine %zu bytes, float32 %zu: the FP8 weights (%lld elements) are not stored 1 byte each", s8, s32,
              (long long)elems);

    /* the CPU runs it from the blobs, the same after a round trip through the file */
    void *buf = NULL;
    size_t len = 0;
    CHECK(kiln_engine_serialize(e8, &buf, &len) == KILN_OK);
    CHECK(buf && kiln_engine_load_buffer(buf, len, &e8b) == KILN_OK && e8b);
    kiln_tensor in[8] = {0};
    int nin = kiln_engine_num_inputs(e8);
    kiln_synth_options so = {.shapes = shapes, .seed = 9};
    CHECK(nin <= 8 && kiln_engine_synth_inputs(e8, &so, in) == KILN_OK);
    test_same_outputs(e8, e8b, in, 2, "differs after the round trip");
    for (int i = 0; i < nin && i < 8; i++)
        kiln_free(in[i].data);
    kiln_engine_free(e8b);
    kiln_free(buf);
    kiln_engine_free(e8);
    kiln_engine_free(e32);
    kiln_shapes_free(shapes);
    kiln_model_free(m);
    return TEST_SUMMARY();
}
