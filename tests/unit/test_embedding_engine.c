/* 4-bit embedding tables in engines (src/build/precision.c lower_tables, docs/PRECISION.md "4-bit embedding
 * tables") on tiny_bert, built for --device cuda (no GPU needed to build or to run on the CPU):
 *   - --precision nvfp4 / mxfp4 / int4 mark the Gathers of the word and position tables (each >= 1 % of the
 *     weights) in the build's format with FP16 rounding, not the 2-row token-type table nor the shape Gathers;
 *     fp16 marks none; --layer-precision rules keep a table in fp32 or store a small one (or one of an fp32
 *     build) in 4 bits; the report says how many tables and their bytes;
 *   - each marked table is stored only packed (a KILN_PREP_LOWBIT_W blob replacing input 0, rows x k as the
 *     table), and the engine file shrinks by what that saves;
 *   - the CPU runs the engine, after a save / load round trip, bit for bit as the emulation: the same build
 *     of a model whose tables were replaced by their quantized-dequantized values (kiln__lowbit_ref_weight)
 *     with rules keeping them float32.
 * Exits 77 without the model. */
#include "test.h"
#include "test_engine_run.h"
#include "backend/cpu/lowbit.h"
#include "backend/lowbit_blob.h"
#include "engine/engine.h"
#include "runtime/model.h"
#include "kiln/kiln.h"
#include <stdlib.h>
#include <string.h>

static const char *MODEL = "models/tiny_bert.onnx";
static const char *SHAPES = "input_ids:2x16,attention_mask:2x16,token_type_ids:2x16";

static const char *attr_s(const kiln_node *n, const char *name)
{
    for (int a = 0; a < n->n_attr; a++)
        if (!strcmp(n->attrs[a].name, name) && n->attrs[a].type == KILN_ATTR_STRING)
            return n->attrs[a].s;
    return NULL;
}

static kiln_engine_t build(kiln_model_t m, const char *prec, int nrules, const char **rules, const char *want_report)
{
    kiln_engine_t e = NULL;
    kiln_build_options o = {.no_tactics = true, .device = KILN_DEVICE_CUDA, .precision = prec,
                            .num_layer_precisions = nrules, .layer_precisions = rules};
    CHECK_MSG(kiln_build(m, &o, &e) == KILN_OK && e, "%s: %s", prec ? prec : "fp32", kiln_last_error());
    if (want_report)
        CHECK_MSG(o.precision_report && strstr(o.precision_report, want_report), "%s: report '%s', want '%s'",
                  prec ? prec : "fp32", o.precision_report ? o.precision_report : "(none)", want_report);
    kiln_free(o.precision_report);
    return e;
}

/* The marked Gathers of e, in format fmt, each with its table stored only in its blob; returns their names
 * (comma-separated, in node order) into names and the tables' float32 bytes into *f32. */
static int check_tables(kiln_engine_t e, const char *fmt, char *names, size_t cap, int64_t *f32)
{
    const kiln_graph *g = e->g;
    int marked = 0;
    names[0] = 0;
    *f32 = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        const char *wq = attr_s(n, KILN_ATTR_WQ);
        if (n->op != KILN_OP_Gather || !wq)
            continue;
        marked++;
        const kiln_tensor *t = g->values[n->in[0]].init;
        const char *aq = attr_s(n, KILN_ATTR_AQ), *req = NULL, *real = NULL;
        CHECK(kiln_engine_layer_precision(e, i, &req, &real) == KILN_OK);
        CHECK_MSG(!strcmp(wq, fmt) && aq && !strcmp(aq, "fp16") && real && !strcmp(real, fmt), "%s: %s / %s, realized %s",
                  n->name, wq, aq ? aq : "-", real ? real : "-");
        CHECK_MSG(t && t->ndim == 2 && !t->data && !t->nbytes, "%s: its float32 table is stored too", n->name);
        kiln_lowbit_blob L;
        const kiln_layer_rec *r = &e->layers[i];
        kiln_prep_hdr h;
        CHECK(r->blob_size >= KILN_PREP_HDR_BYTES);
        if (r->blob_size >= KILN_PREP_HDR_BYTES)
            memcpy(&h, r->blob, sizeof h);
        CHECK_MSG(kiln__lowbit_blob_parse(r->blob, (size_t)r->blob_size, &L) && t && L.rows == t->dims[0] &&
                      L.k == t->dims[1] && !L.trans && h.replaces == 1u && !strcmp(kiln__lowbit_name(L.fmt), fmt),
                  "%s: no fitting blob", n->name);
        if (t)
            *f32 += kiln_tensor_numel(t) * 4;
        size_t len = strlen(names);
        snprintf(names + len, cap - len, "%s%s", len ? "," : "", n->name);
    }
    return marked;
}

/* The emulation of e's marked tables: m's tables replaced by their quantized-dequantized values; restored by
 * the caller from *saved (one copy per table, in node order). Returns how many. */
static int emulate_tables(kiln_engine_t e, kiln_model_t m, void **saved)
{
    int k = 0;
    for (int i = 0; i < e->g->n_nodes && k < 8; i++) {
        const kiln_node *n = &e->g->nodes[i];
        if (n->op != KILN_OP_Gather || !attr_s(n, KILN_ATTR_WQ))
            continue;
        int v = kiln__graph_find(m->g, e->g->values[n->in[0]].name);
        kiln_tensor *t = v >= 0 ? m->g->values[v].init : NULL;
        CHECK_MSG(t && t->data && t->dtype == KILN_DT_FLOAT32, "%s: table not in the model", n->name);
        if (!t || !t->data)
            continue;
        saved[k] = malloc(t->nbytes);
        memcpy(saved[k], t->data, t->nbytes);
        float *y = malloc(t->nbytes);
        CHECK(kiln__lowbit_ref_weight(n, t, y) == KILN_OK);
        memcpy(t->data, y, t->nbytes);
        free(y);
        k++;
    }
    return k;
}

static void restore_tables(kiln_engine_t e, kiln_model_t m, void **saved, int count)
{
    int k = 0;
    for (int i = 0; i < e->g->n_nodes && k < count; i++) {
        const kiln_node *n = &e->g->nodes[i];
        if (n->op != KILN_OP_Gather || !attr_s(n, KILN_ATTR_WQ))
            continue;
        kiln_tensor *t = m->g->values[kiln__graph_find(m->g, e->g->values[n->in[0]].name)].init;
        memcpy(t->data, saved[k], t->nbytes);
        free(saved[k++]);
    }
}

int main(void)
{
    kiln_model_t m = NULL;
    if (kiln_model_load(MODEL, &m) != KILN_OK) {
        printf("SKIP: %s missing\n", MODEL);
        return 77;
    }
    char names[256];
    int64_t f32 = 0, f32_all = 0;
    /* which tables each build stores in 4 bits */
    kiln_engine_t e4 = build(m, "nvfp4", 0, NULL, "embedding tables in nvfp4: 2 tables");
    int marked = e4 ? check_tables(e4, "nvfp4", names, sizeof names, &f32) : 0;
    CHECK_MSG(marked == 2 && !strcmp(names, "Gather_1,Gather_3"), "marked %d: %s", marked, names);
    static const char *fmts[2] = {"mxfp4", "int4"};
    for (int f = 0; f < 2; f++) {
        kiln_engine_t e = build(m, fmts[f], 0, NULL, "embedding tables kept in float32: 1");
        CHECK_MSG(e && check_tables(e, fmts[f], names, sizeof names, &f32_all) == 2, "%s: %s", fmts[f], names);
        kiln_engine_free(e);
    }
    kiln_engine_t e = build(m, "fp16", 0, NULL, NULL);
    CHECK(e && check_tables(e, "-", names, sizeof names, &f32_all) == 0);
    kiln_engine_free(e);
    const char *small[] = {"Gather_2:nvfp4"}, *keep[] = {"Gather_1:fp32"}, *asked[] = {"Gather_1:int4"},
               *none[] = {"Gather_1:fp32", "Gather_3:fp32"};
    e = build(m, "nvfp4", 1, small, "embedding tables in nvfp4: 3 tables");
    CHECK(e && check_tables(e, "nvfp4", names, sizeof names, &f32_all) == 3);
    kiln_engine_free(e);
    e = build(m, "nvfp4", 1, keep, NULL);
    CHECK(e && check_tables(e, "nvfp4", names, sizeof names, &f32_all) == 1 && !strcmp(names, "Gather_3"));
    kiln_engine_free(e);
    e = build(m, NULL, 1, asked, "embedding tables in int4: 1 table");   /* a float32 build */
    CHECK(e && check_tables(e, "int4", names, sizeof names, &f32_all) == 1 && !strcmp(names, "Gather_1"));
    kiln_engine_free(e);

    /* the engine shrinks by the tables' float32 bytes less their packed bytes (4.5 bits an element) */
    kiln_engine_t ef = build(m, "nvfp4", 2, none, NULL);
    size_t s4 = ef && e4 ? test_engine_bytes(e4) : 0, sf = ef && e4 ? test_engine_bytes(ef) : 0;
    printf("tiny_bert nvfp4 device engines: %zu bytes with float32 tables, %zu with 4-bit tables (%lld table bytes)\n",
           sf, s4, (long long)f32);
    CHECK_MSG(s4 + (size_t)(f32 - f32 * 9 / 64) <= sf + 2 * 1024, "engine %zu bytes, %zu with float32 tables", s4, sf);
    kiln_engine_free(ef);

    /* the CPU runs it after a round trip through the file as the emulation */
    kiln_shapes_t shapes = NULL;
    CHECK(kiln_shapes_parse(SHAPES, &shapes) == KILN_OK);
    void *buf = NULL, *saved[8];
    size_t len = 0;
    kiln_engine_t e4b = NULL, em = NULL;
    CHECK(e4 && kiln_engine_serialize(e4, &buf, &len) == KILN_OK);
    CHECK(buf && kiln_engine_load_buffer(buf, len, &e4b) == KILN_OK && e4b);
    int nsaved = e4 ? emulate_tables(e4, m, saved) : 0;
    CHECK(nsaved == 2);
    em = build(m, "nvfp4", 2, none, NULL);
    if (e4)
        restore_tables(e4, m, saved, nsaved);
    kiln_tensor in[8] = {0};
    int nin = e4b ? kiln_engine_num_inputs(e4b) : 0;
    kiln_synth_options so = {.shapes = shapes, .seed = 5};
    CHECK(e4b && nin <= 8 && kiln_engine_synth_inputs(e4b, &so, in) == KILN_OK);
    test_same_outputs(e4b, em, in, 2, "differs from the emulation");
    for (int i = 0; i < nin && i < 8; i++)
        kiln_free(in[i].data);
    kiln_free(buf);
    kiln_engine_free(em);
    kiln_engine_free(e4b);
    kiln_engine_free(e4);
    kiln_shapes_free(shapes);
    kiln_model_free(m);
    return TEST_SUMMARY();
}
