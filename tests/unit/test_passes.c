/* Every optimization pass, alone and as the full pipeline, must leave model outputs unchanged
 * (within float rounding) on random inputs, and must actually fire where its pattern exists. */
#include "build/build.h"
#include "runtime/model.h"
#include "passes/passes.h"
#include "kiln/kiln.h"
#include "test.h"
#include <string.h>

typedef struct {
    const char *path;
    const char *shape;      /* dims for every input, e.g. "1x3x32x40" */
    const char *must_fire;  /* a pass that must change this model, or NULL */
    int max_nodes_after;    /* full pipeline bound, 0 = no bound */
    const char *pipeline_act;   /* a fused activation the pipeline must produce, or NULL */
} model_case;

static const model_case cases[] = {
    {"models/tiny_cnn.onnx", "2x3x32x40", "fold-batchnorm", 0, NULL},
    {"models/tiny_bert.onnx", "2x16", "constant-fold", 0, NULL},
    {"models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", "1x3x48x192", "constant-fold", 0, NULL},
    {"models/ocr/ch_PP-OCRv4_rec_infer.onnx", "1x3x48x160", "constant-fold", 0, NULL},
    /* PP-LCNetV3's learnable affine blocks after its hard-swishes: fuse-post-affine */
    {"models/ocr/ch_PP-OCRv4_det_infer.onnx", "1x3x96x128", "constant-fold", 0, "HardSwishAffine"},
};

/* Inputs from the library's one synthetic-input generator, every input at the case's dims. */
static void make_inputs(kiln_model_t m, const char *shape, kiln_tensor *ins, const char **names)
{
    kiln_shapes_t dims, all;
    int nd;
    int64_t d[KILN_MAX_DIMS];
    char spec[64];
    snprintf(spec, sizeof spec, "x:%s", shape);
    CHECK(kiln_shapes_parse(spec, &dims) == KILN_OK && kiln_shapes_get(dims, 0, NULL, &nd, d) == KILN_OK);
    CHECK(kiln_shapes_new(&all) == KILN_OK);
    for (int i = 0; i < kiln_model_num_inputs(m); i++) {
        names[i] = kiln_model_input_name(m, i);
        CHECK(kiln_shapes_add(all, names[i], nd, d) == KILN_OK);
    }
    kiln_synth_options o = {.shapes = all};
    CHECK_MSG(kiln_model_synth_inputs(m, &o, ins) == KILN_OK, "%s", kiln_last_error());
    kiln_shapes_free(all);
    kiln_shapes_free(dims);
}

static double rel_err(const kiln_tensor *a, const kiln_tensor *b)
{
    if (a->dtype != b->dtype || a->nbytes != b->nbytes || a->ndim != b->ndim)
        return 1e30;
    double worst = 0;
    int64_t n = kiln_tensor_numel(a);
    for (int64_t i = 0; i < n; i++) {
        double x = kiln__get_f64(a->dtype, a->data, i), y = kiln__get_f64(b->dtype, b->data, i);
        double e = fabs(x - y) / (1e-4 + fabs(y));
        worst = e > worst ? e : worst;
    }
    return worst;
}

int main(void)
{
    int ran = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kiln_model_t m;
        if (kiln_model_load(cases[c].path, &m) != KILN_OK) {
            printf("skip %s: %s\n", cases[c].path, kiln_last_error());
            continue;
        }
        ran++;
        const kiln_graph *g0 = m->g;
        kiln_tensor ins[8] = {{0}};
        const char *names[8];
        make_inputs(m, cases[c].shape, ins, names);
        kiln_tensor *ref;
        int nref;
        CHECK_MSG(kiln_model_run(m, g0->n_inputs, names, ins, NULL, &nref, &ref) == KILN_OK, "%s: %s", cases[c].path,
                  kiln_last_error());
        /* each pass alone, then the whole pipeline (name NULL) */
        for (const kiln_pass_info *p = kiln__passes;; p++) {
            kiln_engine_t e;
            kiln_build_options raw = {.no_optimize = true};
            CHECK(kiln_build(m, &raw, &e) == KILN_OK);
            int changed = 0, before = e->g->n_nodes;
            kiln_pass_ctx pc = *kiln__builder_pass_ctx();
            pc.check = true;   /* the use index stays consistent through every pass */
            kiln_status st = p->name ? kiln__pass_run(p, e->g, &pc, &changed) : kiln__optimize(e->g, &pc, NULL);
            CHECK_MSG(st == KILN_OK, "%s: %s", p->name ? p->name : "pipeline", kiln_last_error());
            if (!p->name)
                changed = before - e->g->n_nodes;
            if (p->name && cases[c].must_fire && !strcmp(p->name, cases[c].must_fire))
                CHECK_MSG(changed > 0, "%s: pass %s changed nothing", cases[c].path, p->name);
            kiln_tensor *out;
            int nout;
            st = kiln_engine_run(e, g0->n_inputs, names, ins, NULL, &nout, &out);
            CHECK_MSG(st == KILN_OK, "%s after %s: %s", cases[c].path, p->name ? p->name : "pipeline", kiln_last_error());
            if (st == KILN_OK) {
                for (int o = 0; o < nout && o < nref; o++) {
                    double err = rel_err(&out[o], &ref[o]);
                    CHECK_MSG(err < 1e-3, "%s after %s: output %d differs (rel err %g)", cases[c].path,
                              p->name ? p->name : "pipeline", o, err);
                }
                kiln_tensors_free(out, nout);
            }
            printf("%-52s %-16s changed %4d  nodes %4d -> %4d\n", cases[c].path, p->name ? p->name : "(pipeline)",
                   changed, before, e->g->n_nodes);
            if (!p->name && cases[c].pipeline_act) {
                int n_act = 0;
                for (int i = 0; i < e->g->n_nodes; i++)
                    n_act += !strcmp(kiln__attr_s(&e->g->nodes[i], "activation", ""), cases[c].pipeline_act);
                CHECK_MSG(n_act > 0, "%s: no %s after the pipeline", cases[c].path, cases[c].pipeline_act);
                printf("%-52s %d layers with %s\n", cases[c].path, n_act, cases[c].pipeline_act);
            }
            kiln_engine_free(e);
            if (!p->name)
                break;
        }
        /* fixed-shape build: fold-shapes + the pipeline again, then tactics and memory plan */
        kiln_shape_range fr[8];
        for (int i = 0; i < g0->n_inputs && i < 8; i++) {
            memset(&fr[i], 0, sizeof fr[i]);
            fr[i].input = names[i];
            fr[i].ndim = ins[i].ndim;
            for (int d = 0; d < ins[i].ndim; d++)
                fr[i].min[d] = fr[i].opt[d] = fr[i].max[d] = ins[i].dims[d];
        }
        kiln_profile prof = {g0->n_inputs, fr};
        kiln_build_options fo = {.num_profiles = 1, .profiles = &prof, .want_report = true};
        kiln_engine_t fe;
        CHECK_MSG(kiln_build(m, &fo, &fe) == KILN_OK, "%s fixed build: %s", cases[c].path, kiln_last_error());
        if (fo.report && strstr(fo.report, "fold-shapes"))
            printf("%-52s %s", cases[c].path, strstr(fo.report, "fold-shapes"));
        kiln_free(fo.report);
        kiln_tensor *fout;
        int nfout;
        if (kiln_engine_run(fe, g0->n_inputs, names, ins, NULL, &nfout, &fout) == KILN_OK) {
            for (int o = 0; o < nfout && o < nref; o++)
                CHECK_MSG(rel_err(&fout[o], &ref[o]) < 1e-3, "%s fixed-shape engine: output %d differs", cases[c].path, o);
            printf("%-52s %-16s nodes %4d -> %4d\n", cases[c].path, "(fixed shapes)", g0->n_nodes, fe->g->n_nodes);
            kiln_tensors_free(fout, nfout);
        } else {
            CHECK_MSG(0, "%s fixed-shape engine failed: %s", cases[c].path, kiln_last_error());
        }
        if (strstr(cases[c].path, "tiny_bert"))
            CHECK(fe->g->n_nodes < 60);   /* the Shape/Gather/Concat chains are gone */
        kiln_engine_free(fe);
        kiln_tensors_free(ref, nref);
        for (int i = 0; i < g0->n_inputs; i++)
            kiln__tensor_release(&ins[i]);
        kiln_model_free(m);
    }
    if (!ran) {
        printf("SKIP: no models (run scripts/bootstrap.sh)\n");
        return 77;
    }
    return TEST_SUMMARY();
}
