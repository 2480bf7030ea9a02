/* Shape inference: symbolic dim algebra, one inference function per op, and inferred shapes
 * equal to the shapes a run produces, for every node output of
 *   - every ONNX backend test kiln passes (tests/conformance/expected_passes.txt), inferred with
 *     the test's concrete input shapes;
 *   - the reference models at two input shapes each, inferred ONCE symbolically and then
 *     evaluated with each shape's dims (models/ missing: that part is skipped).
 * Usage: test_shapes [--no-models] [--only-models] */
#include "test.h"
#include "ir/shape.h"
#include "runtime/exec.h"
#include "runtime/model.h"
#include <string.h>
#include <sys/stat.h>

static char sbuf[256];
static const char *S(kiln_symtab *t, kiln_sdim d)
{
    kiln__sd_str(t, d, sbuf, sizeof sbuf);
    return sbuf;
}

#define CHECK_STR(t, d, want) CHECK_MSG(!strcmp(S(t, d), want), "got '%s', want '%s'", sbuf, want)

static void test_symdim(void)
{
    kiln_symtab *t = kiln__symtab_new();
    kiln_sdim b = kiln__sd_sym(t, "batch"), s = kiln__sd_sym(t, "seq"), h = kiln__sd_sym(t, "h");
    kiln_sdim two = kiln__sd_const(t, 2), c32 = kiln__sd_const(t, 32);
    /* hash-consing: equal expressions are one id, however built */
    CHECK(kiln__sd_sym(t, "seq") == s);
    CHECK(kiln__sd_mul(t, s, two) == kiln__sd_add(t, s, s));
    CHECK(kiln__sd_mul(t, b, s) == kiln__sd_mul(t, s, b));
    CHECK(kiln__sd_add(t, kiln__sd_add(t, b, s), h) == kiln__sd_add(t, h, kiln__sd_add(t, s, b)));
    CHECK(kiln__sd_sub(t, kiln__sd_add(t, b, s), b) == s);
    CHECK(kiln__sd_mul(t, kiln__sd_add(t, b, two), s) == kiln__sd_add(t, kiln__sd_mul(t, b, s), kiln__sd_mulc(t, s, 2)));
    CHECK_STR(t, kiln__sd_mul(t, s, two), "2*seq");
    CHECK_STR(t, kiln__sd_mul(t, b, s), "batch*seq");
    CHECK_STR(t, kiln__sd_addc(t, kiln__sd_mulc(t, s, 2), 1), "2*seq+1");
    CHECK_STR(t, kiln__sd_sub(t, kiln__sd_const(t, 3), s), "-seq+3");
    /* constant folding */
    int64_t v = 0;
    CHECK(kiln__sd_is_const(t, kiln__sd_add(t, two, c32), &v) && v == 34);
    CHECK(kiln__sd_is_const(t, kiln__sd_div(t, kiln__sd_const(t, -7), two), &v) && v == -4);
    CHECK(kiln__sd_is_const(t, kiln__sd_tdiv(t, kiln__sd_const(t, -7), two), &v) && v == -3);
    CHECK(kiln__sd_is_const(t, kiln__sd_mod(t, kiln__sd_const(t, -7), two), &v) && v == 1);
    CHECK(kiln__sd_is_const(t, kiln__sd_cdiv(t, kiln__sd_const(t, 7), two), &v) && v == 4);
    CHECK(kiln__sd_is_const(t, kiln__sd_sub(t, s, s), &v) && v == 0);
    /* division */
    kiln_sdim ceil32 = kiln__sd_cdiv(t, h, c32);
    CHECK_STR(t, ceil32, "(h+31)/32");
    CHECK(ceil32 == kiln__sd_div(t, kiln__sd_addc(t, h, 31), c32));
    CHECK(kiln__sd_div(t, kiln__sd_mulc(t, s, 2), two) == s);                           /* exact */
    CHECK(kiln__sd_div(t, kiln__sd_addc(t, kiln__sd_mulc(t, s, 2), 1), two) == s);      /* (2s+1)/2 = s */
    CHECK(kiln__sd_div(t, kiln__sd_addc(t, kiln__sd_mulc(t, s, 64), 31), c32) == kiln__sd_mulc(t, s, 2));
    CHECK(kiln__sd_div(t, kiln__sd_mul(t, b, h), h) == b);                               /* monomial */
    CHECK(kiln__sd_div(t, s, s) == kiln__sd_const(t, 1));
    CHECK(kiln__sd_div(t, kiln__sd_div(t, h, two), two) == kiln__sd_div(t, h, kiln__sd_const(t, 4)));
    CHECK(kiln__sd_cdiv(t, kiln__sd_cdiv(t, h, two), two) == kiln__sd_cdiv(t, h, kiln__sd_const(t, 4)));  /* nested */
    CHECK_STR(t, kiln__sd_cdiv(t, kiln__sd_cdiv(t, kiln__sd_cdiv(t, h, two), two), two), "(h+7)/8");
    CHECK(kiln__sd_mod(t, kiln__sd_mulc(t, s, 4), two) == kiln__sd_const(t, 0));
    CHECK_STR(t, kiln__sd_div(t, s, h), "seq/h");
    /* min / max */
    CHECK(kiln__sd_min(t, s, kiln__sd_addc(t, s, 5)) == s);
    CHECK(kiln__sd_max(t, s, kiln__sd_mulc(t, s, 2)) == kiln__sd_mulc(t, s, 2));
    CHECK(kiln__sd_min(t, s, b) == kiln__sd_min(t, b, s));
    CHECK(kiln__sd_max(t, s, kiln__sd_min(t, s, c32)) == s);                            /* absorption */
    CHECK(kiln__sd_min(t, kiln__sd_max(t, c32, s), s) == s);
    CHECK_STR(t, kiln__sd_max(t, kiln__sd_const(t, 0), kiln__sd_addc(t, s, -1)), "max(0,seq-1)");
    CHECK(kiln__sd_cmp(t, kiln__sd_mul(t, b, s), s) == 2);
    CHECK(kiln__sd_cmp(t, kiln__sd_addc(t, s, 1), s) == 1);
    /* unknowns */
    kiln_sdim u1 = kiln__sd_unknown(t), u2 = kiln__sd_unknown(t);
    CHECK(u1 != u2 && kiln__sd_has_unknown(t, kiln__sd_add(t, u1, s)) && !kiln__sd_has_unknown(t, ceil32));
    CHECK(kiln__sd_sub(t, u1, u1) == kiln__sd_const(t, 0));
    CHECK(kiln__sd_div(t, s, kiln__sd_const(t, 0)) != kiln__sd_div(t, s, kiln__sd_const(t, 0)));
    /* evaluation */
    const char *names[] = {"batch", "seq", "h"};
    int64_t vals[] = {3, 37, 100};
    kiln_sdim e = kiln__sd_add(t, kiln__sd_mul(t, b, ceil32), kiln__sd_min(t, s, kiln__sd_const(t, 20)));
    CHECK(kiln__sd_eval(t, e, 3, names, vals, &v) == KILN_OK && v == 3 * 4 + 20);
    CHECK(kiln__sd_eval(t, kiln__sd_mod(t, s, kiln__sd_const(t, 5)), 3, names, vals, &v) == KILN_OK && v == 2);
    CHECK(kiln__sd_eval(t, s, 1, names, vals, &v) == KILN_ERR_SHAPE);   /* unbound */
    CHECK(kiln__sd_eval(t, u1, 3, names, vals, &v) == KILN_ERR_SHAPE);
    CHECK(kiln__sd_eval(t, kiln__sd_div(t, s, h), 3, names, (int64_t[]){3, 37, 0}, &v) == KILN_ERR_LIMIT);
    /* overflow never wraps silently */
    kiln_sdim big = kiln__sd_const(t, INT64_MAX);
    CHECK(kiln__sd_has_unknown(t, kiln__sd_add(t, big, big)));
    CHECK(kiln__sd_has_unknown(t, kiln__sd_mul(t, kiln__sd_mulc(t, s, INT64_MAX / 2 + 1), two)));
    CHECK(!kiln__symtab_failed(t));
    kiln__symtab_free(t);
}

static void test_registry(void)
{
    for (int op = 0; op < KILN_OP_COUNT; op++)
        CHECK_MSG(kiln__shape_has_infer((kiln_op)op), "no shape inference for %s", kiln__op_name((kiln_op)op));
}

static bool data_dependent(kiln_op op)
{
    switch (op) {
    case KILN_OP_NonZero: case KILN_OP_Unique: case KILN_OP_Compress: case KILN_OP_NonMaxSuppression:
    case KILN_OP_Loop: case KILN_OP_If: case KILN_OP_Scan: case KILN_OP_TopK:
        return true;
    default:
        return false;
    }
}

/* Runs g (top level, record_meta) and compares every produced value's dtype and shape with
 * the inferred one evaluated under the bindings. Returns the number of mismatches. */
static int compare_run(const char *label, const kiln_graph *g, const kiln_tensor *const *feed, kiln_symtab *st,
                       const kiln_vshape *inf, int nb, const char *const *names, const int64_t *vals, int *n_values,
                       int *n_unknown)
{
    kiln_tensor *meta = calloc((size_t)g->n_values + 1, sizeof *meta);
    kiln_tensor *outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
    kiln_mem mem = {.record_meta = meta};
    kiln_status s = kiln__exec_graph_ex(g, NULL, feed, outs, NULL, 0, &mem, NULL);   /* single-threaded */
    int bad = 0;
    if (s != KILN_OK) {
        fprintf(stderr, "%s: run failed: %s\n", label, kiln_last_error());
        bad = 1;
    }
    for (int v = 0; s == KILN_OK && v < g->n_values; v++) {
        const kiln_tensor *m = &meta[v];
        if (m->dtype == KILN_DT_UNDEFINED)
            continue;   /* not produced by a top-level node */
        (*n_values)++;
        const kiln_vshape *x = &inf[v];
        int64_t dims[KILN_MAX_DIMS];
        bool ok = x->dtype == m->dtype && (x->rank == m->ndim || x->rank < 0);
        for (int d = 0; ok && d < x->rank; d++)
            ok = kiln__sd_has_unknown(st, x->dims[d]) ||
                 (kiln__sd_eval(st, x->dims[d], nb, names, vals, &dims[d]) == KILN_OK && dims[d] == m->dims[d]);
        if (ok && !kiln__vshape_complete(st, x)) {
            /* unknown dims: only where the shape depends on data */
            const kiln_node *n = &g->nodes[g->values[v].producer];
            (*n_unknown)++;
            ok = data_dependent(n->op);
            for (int j = 0; j < n->n_in; j++)
                ok |= n->in[j] >= 0 && !kiln__vshape_complete(st, &inf[n->in[j]]);
        }
        if (!ok) {
            if (bad++ < 5) {
                char want[128], got[512] = "";
                kiln__shape_str(m, want, sizeof want);
                for (int d = 0; d < x->rank; d++) {
                    size_t o = strlen(got);
                    snprintf(got + o, sizeof got - o, "%s%s", d ? "," : "", S(st, x->dims[d]));
                }
                fprintf(stderr, "%s: value '%s' (node %d %s): ran %s, inferred %s[%s] rank %d\n", label,
                        g->values[v].name, g->values[v].producer,
                        g->values[v].producer >= 0 ? g->nodes[g->values[v].producer].op_type : "-",
                        want, kiln_dtype_name(x->dtype), got, x->rank);
            }
        }
    }
    for (int o = 0; o < g->n_outputs; o++)
        kiln__tensor_release(&outs[o]);
    free(outs);
    free(meta);
    return bad;
}

static bool exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* One ONNX backend test: 1 if checked, 0 if skipped; *bad += mismatches. */
static int suite_test(const char *dir, int *bad, int *n_values, int *n_unknown)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    kiln_model_t m;
    if (kiln_model_load(p, &m) != KILN_OK)
        return 0;
    const kiln_graph *g = m->g;
    kiln_tensor *ins = calloc((size_t)g->n_inputs + 1, sizeof *ins);
    const kiln_tensor **feed = calloc((size_t)g->n_inputs + 1, sizeof *feed);
    kiln_vshape *vin = calloc((size_t)g->n_inputs + 1, sizeof *vin);
    const kiln_vshape **pin = calloc((size_t)g->n_inputs + 1, sizeof *pin);
    kiln_symtab *st = kiln__symtab_new();
    int checked = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        snprintf(p, sizeof p, "%s/test_data_set_0/input_%d.pb", dir, i);
        if (!exists(p) || kiln_tensor_pb_read(p, &ins[i]) != KILN_OK)
            goto done;   /* optional inputs left out, sequences, ... */
        feed[i] = &ins[i];
        kiln__vs_from_tensor(st, &ins[i], &vin[i]);   /* small inputs' values too: some decide shapes */
        pin[i] = &vin[i];
    }
    kiln_vshape *inf;
    kiln_status s = kiln__infer_shapes(g, st, pin, &inf);
    checked = 1;
    if (s != KILN_OK) {
        fprintf(stderr, "%s: inference failed: %s\n", dir, kiln_last_error());
        (*bad)++;
        goto done;
    }
    *bad += compare_run(dir, g, feed, st, inf, 0, NULL, NULL, n_values, n_unknown);
    kiln__free(inf);
done:
    for (int i = 0; i < g->n_inputs; i++)
        kiln__tensor_release(&ins[i]);
    free(ins);
    free(feed);
    free(vin);
    free(pin);
    kiln__symtab_free(st);
    kiln_model_free(m);
    return checked;
}

static void test_suite(void)
{
    const char *root = "/usr/share/libonnx-testdata/data";
    FILE *f = fopen("tests/conformance/expected_passes.txt", "r");
    if (!f || !exists(root)) {
        printf("suite: skipped (no test data)\n");
        if (f)
            fclose(f);
        return;
    }
    char line[512];
    int n = 0, skipped = 0, bad = 0, values = 0, unknown = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#')
            continue;
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", root, line);
        int before = bad;
        if (suite_test(dir, &bad, &values, &unknown))
            n++;
        else
            skipped++;
        CHECK_MSG(bad == before, "%s: inferred shapes differ from the run", line);
    }
    fclose(f);
    printf("suite: %d tests checked (%d values, %d with data-dependent unknown dims), %d skipped (inputs not all "
           "tensors), %d mismatches\n", n, values, unknown, skipped, bad);
    CHECK(n > 900);
}

/* ---- robustness: inference on mutated graphs never crashes, and every error has a message ---- */

static int64_t odd_int(unsigned long long *r)
{
    static const int64_t v[] = {-3, -1, 0, 1, 2, 3, 7, 64, INT64_C(1) << 40, INT64_MIN, INT64_MAX};
    return v[test_rng(r) % (sizeof v / sizeof v[0])];
}

static void mutate_graph(kiln_graph *g, unsigned long long *r)
{
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attr; a++) {
            kiln_attr *at = &g->nodes[i].attrs[a];
            if (at->type == KILN_ATTR_INT && test_rng(r) % 3 == 0)
                at->i = odd_int(r);
            for (int k = 0; at->type == KILN_ATTR_INTS && k < at->n; k++)
                if (test_rng(r) % 3 == 0)
                    at->ints[k] = odd_int(r);
            if (at->g)
                mutate_graph(at->g, r);
        }
}

static void test_fuzz(void)
{
    const char *root = "/usr/share/libonnx-testdata/data";
    FILE *f = fopen("tests/conformance/expected_passes.txt", "r");
    if (!f)
        return;
    unsigned long long r = 12345;
    char line[512];
    int runs = 0, errors = 0, silent = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s/model.onnx", root, line);
        for (int rep = 0; rep < 3; rep++) {
            kiln_model_t m;
            if (kiln_model_load(p, &m) != KILN_OK)
                break;
            kiln_graph *g = m->g;
            kiln_symtab *st = kiln__symtab_new();
            kiln_vshape *in = calloc((size_t)g->n_inputs + 1, sizeof *in), *out = NULL;
            const kiln_vshape **pin = calloc((size_t)g->n_inputs + 1, sizeof *pin);
            if (rep > 0)
                mutate_graph(g, &r);
            for (int i = 0; i < g->n_inputs; i++) {   /* random ranks, dims and small int values */
                kiln__vshape_declared(st, &g->values[g->inputs[i]], &in[i]);
                if (rep == 2 || test_rng(&r) % 4 == 0) {
                    in[i].rank = (int)(test_rng(&r) % (KILN_MAX_DIMS + 1));
                    for (int d = 0; d < in[i].rank; d++)
                        in[i].dims[d] = test_rng(&r) % 4 ? kiln__sd_const(st, (int64_t)(test_rng(&r) % 5))
                                                         : kiln__sd_sym(st, "n");
                }
                if (kiln__dt_int_like(in[i].dtype) && in[i].rank == 1 && kiln__sd_is_const(st, in[i].dims[0], NULL)) {
                    int64_t n;
                    kiln__sd_is_const(st, in[i].dims[0], &n);
                    in[i].hv = n <= KILN_SHAPE_MAXVAL;
                    in[i].nval = (int)n;
                    for (int k = 0; in[i].hv && k < n; k++)
                        in[i].val[k].i = kiln__sd_const(st, odd_int(&r));
                }
                pin[i] = &in[i];
            }
            kiln_clear_last_error();
            kiln_status s = kiln__infer_shapes(g, st, pin, &out);
            runs++;
            if (s != KILN_OK) {
                errors++;
                if (!kiln_last_error()[0]) {
                    silent++;
                    fprintf(stderr, "fuzz %s rep %d: %s without a message\n", line, rep, kiln_status_str(s));
                }
            }
            kiln__free(out);
            free(in);
            free(pin);
            kiln__symtab_free(st);
            kiln_model_free(m);
        }
    }
    fclose(f);
    printf("fuzz: %d inferences on mutated graphs / odd input shapes, %d clean errors, %d without a message\n", runs,
           errors, silent);
    CHECK(silent == 0 && runs > 2000);
}

/* ---- reference models ---- */

typedef struct { const char *path; int n_in; const char *in[3]; int nd; int64_t shape[2][4]; } model_case;

static const model_case models[] = {
    {"models/resnet50.onnx", 1, {"input"}, 4, {{1, 3, 224, 224}, {2, 3, 160, 192}}},
    {"models/bert_base.onnx", 3, {"input_ids", "attention_mask", "token_type_ids"}, 2, {{1, 128}, {2, 37}}},
    {"models/ocr/ch_PP-OCRv4_det_infer.onnx", 1, {"x"}, 4, {{1, 3, 640, 640}, {1, 3, 320, 480}}},
    {"models/ocr/ch_PP-OCRv4_rec_infer.onnx", 1, {"x"}, 4, {{1, 3, 48, 320}, {2, 3, 48, 160}}},
    {"models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", 1, {"x"}, 4, {{1, 3, 48, 192}, {3, 3, 48, 192}}},
};

static unsigned long long rng = 42;

static void fill_input(const kiln_value *v, kiln_tensor *t)
{
    int64_t n = kiln_tensor_numel(t);
    bool mask = strstr(v->name, "mask") != NULL, type = strstr(v->name, "type") != NULL;
    for (int64_t k = 0; k < n; k++) {
        if (kiln__dtype_is_float(t->dtype))
            kiln__set_f64(t->dtype, t->data, k, test_randf(&rng));
        else
            kiln__set_i64(t->dtype, t->data, k, mask ? 1 : type ? 0 : (int64_t)(test_rng(&rng) % 100));
    }
}

static void test_model(const model_case *mc)
{
    kiln_model_t m;
    if (!exists(mc->path)) {
        printf("%s: skipped (missing)\n", mc->path);
        return;
    }
    CHECK(kiln_model_load(mc->path, &m) == KILN_OK);
    const kiln_graph *g = m->g;
    kiln_symtab *st = kiln__symtab_new();
    kiln_vshape vin[3];
    const kiln_vshape *pin[3] = {0};
    const char *names[3 * 4];
    char namebuf[3 * 4][300];
    int nb = 0;
    CHECK(g->n_inputs == mc->n_in);
    /* symbolic inputs: every dim that differs between the two shapes (or is declared dynamic)
     * is a symbol, the declared name if it has one */
    for (int i = 0; i < g->n_inputs && i < 3; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        CHECK(!strcmp(v->name, mc->in[i]));
        kiln__vshape_declared(st, v, &vin[i]);
        vin[i].rank = mc->nd;
        for (int d = 0; d < mc->nd; d++) {
            bool decl_sym = v->ndim == mc->nd && (v->dims[d].param || v->dims[d].value < 0);
            if (mc->shape[0][d] == mc->shape[1][d] && !decl_sym) {
                vin[i].dims[d] = kiln__sd_const(st, mc->shape[0][d]);
                continue;
            }
            if (decl_sym && v->dims[d].param && v->dims[d].param[0])
                snprintf(namebuf[nb], sizeof namebuf[nb], "%s", v->dims[d].param);
            else
                snprintf(namebuf[nb], sizeof namebuf[nb], "%s.%d", v->name, d);
            vin[i].dims[d] = kiln__sd_sym(st, namebuf[nb]);
            bool dup = false;
            for (int k = 0; k < nb; k++)
                dup |= !strcmp(namebuf[k], namebuf[nb]);
            if (!dup) {
                names[nb] = namebuf[nb];
                nb++;
            }
        }
        pin[i] = &vin[i];
    }
    kiln_vshape *inf = NULL;
    kiln_status s = kiln__infer_shapes(g, st, pin, &inf);
    CHECK_MSG(s == KILN_OK, "%s: %s", mc->path, kiln_last_error());
    if (s == KILN_OK) {
        int unknown = 0;
        for (int v = 0; v < g->n_values; v++)
            if (!g->values[v].init && (g->values[v].producer >= 0 || kiln__value_is_output(g, v)) &&
                !kiln__vshape_complete(st, &inf[v]))
                unknown++;
        printf("%s: %d values, %d with unknown dims after symbolic inference\n", mc->path, g->n_values, unknown);
        CHECK_MSG(unknown == 0, "%s: %d values with unknown dims", mc->path, unknown);
        for (int sh = 0; sh < 2; sh++) {
            kiln_tensor ins[3];
            const kiln_tensor *feed[3];
            int64_t vals[12];
            for (int k = 0; k < nb; k++) {   /* bind each symbol to the dim it stands for */
                for (int i = 0; i < g->n_inputs; i++)
                    for (int d = 0; d < mc->nd; d++)
                        if (!strcmp(S(st, vin[i].dims[d]), names[k]))
                            vals[k] = mc->shape[sh][d];
            }
            for (int i = 0; i < g->n_inputs; i++) {
                const kiln_value *v = &g->values[g->inputs[i]];
                CHECK(kiln__tensor_alloc(&ins[i], v->dtype, mc->nd, mc->shape[sh]) == KILN_OK);
                fill_input(v, &ins[i]);
                feed[i] = &ins[i];
            }
            char label[512];
            snprintf(label, sizeof label, "%s shape %d", mc->path, sh);
            int nv = 0, nu = 0, bad = compare_run(label, g, feed, st, inf, nb, names, vals, &nv, &nu);
            printf("%s: %d values compared, %d mismatches\n", label, nv, bad);
            CHECK(bad == 0 && nv > 0 && nu == 0);
            for (int i = 0; i < g->n_inputs; i++)
                kiln__tensor_release(&ins[i]);
        }
    }
    kiln__free(inf);
    kiln__symtab_free(st);
    kiln_model_free(m);
}

int main(int argc, char **argv)
{
    bool no_models = argc > 1 && !strcmp(argv[1], "--no-models");
    bool only_models = argc > 1 && !strcmp(argv[1], "--only-models");
    if (!only_models) {
        test_symdim();
        test_registry();
        test_suite();
        test_fuzz();
    }
    if (!no_models)
        for (size_t k = 0; k < sizeof models / sizeof models[0]; k++)
            test_model(&models[k]);
    return TEST_SUMMARY();
}
