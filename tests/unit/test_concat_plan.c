/* A Concat's inputs computed where they lie in its output (runtime/plan.h KILN_PLAN_CONCAT, plan.c concat_groups; the
 * Concat kernel then copies nothing, k_shape.c k_concat):
 * - hand-built graphs Concat(Relu(X), Sigmoid(Y), X + X) along the channels, with a Neg of the Relu after the Concat
 *   (an in-place op reading a piece the Concat output still needs), built into engines and run on the CPU: the plan
 *   places the pieces, the engine file's plan check accepts it, and every run equals the model's run with
 *   KILN_PLAN_CONCAT=0 (every Concat copying) bit for bit; shapes where the pieces are not contiguous (batch 2) or not at 64-byte multiples are not placed, nor are
 *   they with KILN_PLAN_CONCAT=0 or in a --device cuda engine;
 * - plans with a piece moved, a mark on another op or an unknown mark fail kiln__plan_validate;
 * - the kernel given inputs already inside its output (at their places; at later places, as after a data-dependent
 *   size change; inside the output with batch 2, where the copies are strided) still writes the right output. */
#include "backend/kernel.h"
#include "engine/engine.h"
#include "kiln/kiln.h"
#include "runtime/model.h"
#include "runtime/plan.h"
#include "test.h"
#include "test_graph.h"
#include <stdlib.h>
#include <string.h>

typedef struct cat_case {
    int64_t N, C1, C2, H, W;
    int axis;
    bool placed;   /* expected: the plan puts the pieces in the Concat's output */
} cat_case;

/* Transpose(Concat(Relu(X), Sigmoid(Y), X + X)) and Transpose(Neg(Relu(X))) */
static kiln_model_t cat_model(const cat_case *c)
{
    kiln_graph *g = test_graph_onnx("concat_plan");
    int64_t xd[4] = {c->N, c->C1, c->H, c->W}, yd[4] = {c->N, c->C2, c->H, c->W};
    if (c->axis == 2 || c->axis == -2) {   /* along the rows: the channels agree */
        yd[1] = c->C1;
        yd[2] = c->H + 3;
    }
    int x = test_graph_input(g, "X", 4, xd), y = test_graph_input(g, "Y", 4, yd);
    int a = test_graph_value(g, "a"), b = test_graph_value(g, "b"), s = test_graph_value(g, "s");
    int cat = test_graph_value(g, "cat"), ng = test_graph_value(g, "neg"), o1 = test_graph_value(g, "out1");
    int o2 = test_graph_value(g, "out2");
    test_graph_node(g, KILN_OP_Relu, "relu", 1, &x, a);
    test_graph_node(g, KILN_OP_Sigmoid, "sigmoid", 1, &y, b);
    int xx[2] = {x, x};
    test_graph_node(g, KILN_OP_Add, "add", 2, xx, s);
    int cin[3] = {a, b, s};
    int ci = test_graph_node(g, KILN_OP_Concat, "concat", 3, cin, cat);
    CHECK(kiln__node_set_attr_i(&g->nodes[ci], "axis", c->axis) == KILN_OK);
    test_graph_node(g, KILN_OP_Neg, "neg", 1, &a, ng);
    int64_t perm[4] = {0, 1, 3, 2};
    int t1 = test_graph_node(g, KILN_OP_Transpose, "t1", 1, &cat, o1);
    int t2 = test_graph_node(g, KILN_OP_Transpose, "t2", 1, &ng, o2);
    CHECK(kiln__node_set_attr_ints(&g->nodes[t1], "perm", 4, perm) == KILN_OK);
    CHECK(kiln__node_set_attr_ints(&g->nodes[t2], "perm", 4, perm) == KILN_OK);
    test_graph_output(g, o1);
    test_graph_output(g, o2);
    struct kiln_model *m = kiln__calloc(1, sizeof *m);
    m->g = g;
    return m;
}

/* The value id of the Concat's output in g, or -1 */
static int cat_value(const kiln_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == KILN_OP_Concat)
            return g->nodes[i].out[0];
    return -1;
}

/* Whether plan p places the Concat's pieces in its output (and checks where) */
static bool placed(const kiln_graph *g, const kiln_plan *p)
{
    int v = cat_value(g);
    if (v < 0 || p->inplace[v] != KILN_SLOT_CONCAT)
        return false;
    const kiln_node *n = &g->nodes[g->values[v].producer];
    int64_t off = p->offset[v];
    for (int k = 0; k < n->n_in; k++) {
        CHECK_MSG(p->offset[n->in[k]] == off, "piece %d at %lld, expected %lld", k, (long long)p->offset[n->in[k]],
                  (long long)off);
        off += (int64_t)p->cap[n->in[k]];
    }
    return true;
}

/* Plans with the Concat's mark that the loader must refuse: a piece moved by 64 bytes, the mark on another value,
 * an unknown mark */
static void check_tampered(const kiln_graph *g, const kiln_plan *p)
{
    int v = cat_value(g);
    const kiln_node *n = &g->nodes[g->values[v].producer];
    kiln_plan q = *p;
    q.offset = kiln__malloc(sizeof(int64_t) * (size_t)p->n_values);
    q.inplace = kiln__malloc((size_t)p->n_values);
    memcpy(q.offset, p->offset, sizeof(int64_t) * (size_t)p->n_values);
    memcpy(q.inplace, p->inplace, (size_t)p->n_values);
    CHECK_MSG(kiln__plan_validate(g, &q) == KILN_OK, "%s", kiln_last_error());
    q.offset[n->in[1]] += 64;
    CHECK(kiln__plan_validate(g, &q) == KILN_ERR_PARSE);
    q.offset[n->in[1]] -= 64;
    q.inplace[v] = KILN_SLOT_OWN;   /* the pieces overlap the output while live: no longer allowed */
    CHECK(kiln__plan_validate(g, &q) == KILN_ERR_PARSE);
    q.inplace[v] = 3;
    CHECK(kiln__plan_validate(g, &q) == KILN_ERR_PARSE);
    q.inplace[v] = KILN_SLOT_CONCAT;
    q.inplace[n->in[0]] = KILN_SLOT_CONCAT;   /* a Relu's output is no Concat */
    CHECK(kiln__plan_validate(g, &q) == KILN_ERR_PARSE);
    kiln__free(q.offset);
    kiln__free(q.inplace);
}

static void compare(const kiln_tensor *got, int n_got, const kiln_tensor *ref, const char *what, const cat_case *c)
{
    CHECK(n_got == 2);
    for (int o = 0; o < 2 && o < n_got; o++)
        CHECK_MSG(got[o].nbytes == ref[o].nbytes && !memcmp(got[o].data, ref[o].data, ref[o].nbytes),
                  "%s: output %d differs (N=%lld C=%lld+%lld %lldx%lld axis %d)", what, o, (long long)c->N,
                  (long long)c->C1, (long long)c->C2, (long long)c->H, (long long)c->W, c->axis);
}

static void run_case(const cat_case *c, unsigned long long *seed)
{
    kiln_model_t m = cat_model(c);
    kiln_tensor ins[2];
    const char *names[2] = {"X", "Y"};
    test_graph_random_inputs(m->g, 2, ins, seed);
    kiln_tensor *ref = NULL;
    int nref = 0;
    const char *env = getenv("KILN_PLAN_CONCAT");
    bool env_off = env && !strcmp(env, "0");
    setenv("KILN_PLAN_CONCAT", "0", 1);   /* the reference: every Concat copies */
    CHECK_MSG(kiln_model_run(m, 2, names, ins, NULL, &nref, &ref) == KILN_OK, "%s", kiln_last_error());
    if (!env_off)
        unsetenv("KILN_PLAN_CONCAT");
    kiln_engine_t e = NULL;
    kiln_build_options o = {.no_tactics = true};
    CHECK_MSG(kiln_build(m, &o, &e) == KILN_OK, "build: %s", kiln_last_error());
    if (e) {
        CHECK_MSG(e->has_plan && placed(e->g, &e->plan) == c->placed, "N=%lld C=%lld+%lld %lldx%lld axis %d: placed %d",
                  (long long)c->N, (long long)c->C1, (long long)c->C2, (long long)c->H, (long long)c->W, c->axis,
                  e->has_plan && placed(e->g, &e->plan));
        if (c->placed)
            check_tampered(e->g, &e->plan);
        void *buf = NULL;
        size_t len = 0;
        kiln_engine_t e2 = NULL;
        CHECK(kiln_engine_serialize(e, &buf, &len) == KILN_OK);
        CHECK_MSG(kiln_engine_load_buffer(buf, len, &e2) == KILN_OK, "%s", kiln_last_error());
        CHECK(!e2 || placed(e2->g, &e2->plan) == c->placed);
        kiln_engine_free(e2);
        kiln_free(buf);
        /* a --device cuda engine (built here without a GPU) does not place them: the CUDA Concat copies every input */
        kiln_build_options od = {.no_tactics = true, .device = KILN_DEVICE_CUDA};
        kiln_engine_t ed = NULL;
        CHECK_MSG(kiln_build(m, &od, &ed) == KILN_OK, "device build: %s", kiln_last_error());
        CHECK(!ed || (ed->has_plan && !placed(ed->g, &ed->plan)));
        kiln_engine_free(ed);
        for (int nt = 1; nt <= 2; nt++) {
            kiln_context_t cx = NULL;
            CHECK(kiln_context_create(e, &cx) == KILN_OK);
            kiln_context_set_threads(cx, nt);
            for (int i = 0; cx && i < 2; i++)
                CHECK(kiln_context_set_input(cx, names[i], &ins[i]) == KILN_OK);
            for (int run = 0; cx && run < 2; run++) {   /* the second run reuses the arena */
                CHECK_MSG(kiln_context_run(cx) == KILN_OK, "%s", kiln_last_error());
                kiln_tensor got[2];
                for (int k = 0; k < 2; k++) {
                    const kiln_tensor *t = kiln_context_output(cx, k);
                    got[k] = t ? *t : (kiln_tensor){0};
                }
                compare(got, 2, ref, "engine plan", c);
            }
            kiln_context_free(cx);
        }
        kiln_engine_free(e);
    }
    kiln_tensors_free(ref, nref);
    for (int i = 0; i < 2; i++)
        kiln__tensor_release(&ins[i]);
    kiln_model_free(m);
}

/* ---- the kernel with inputs already inside its output ---- */

typedef struct slot_rt {
    uint8_t *out;
    size_t cap;
} slot_rt;

static void *slot_place(void *user, const kiln_kctx *ctx, int i, size_t nbytes, bool *fresh)
{
    (void)ctx;
    slot_rt *s = user;
    if (i != 0 || nbytes > s->cap)
        return NULL;
    *fresh = false;
    return s->out;
}

static bool slot_owns(void *user, const void *p)
{
    const slot_rt *s = user;
    return (const uint8_t *)p >= s->out && (const uint8_t *)p < s->out + s->cap;
}

/* Concat along axis 1 of three [N, c_k, 5] float32 inputs whose data lie inside the output buffer at byte offsets
 * at[k] (-1: on the heap), against the same Concat of heap copies */
static void kernel_case(int64_t N, const int64_t *ck, const int64_t *at, const char *what)
{
    kiln_kernel_fn fn = kiln__ref_kernel(KILN_OP_Concat);
    int64_t tot = ck[0] + ck[1] + ck[2];
    size_t cap = (size_t)(N * tot * 5) * sizeof(float) + 256;
    uint8_t *buf = kiln__calloc(cap, 1);
    kiln_tensor in[3], heap[3];
    const kiln_tensor *inp[3], *hp[3];
    for (int k = 0; k < 3; k++) {
        int64_t d[3] = {N, ck[k], 5};
        CHECK(kiln__tensor_alloc(&heap[k], KILN_DT_FLOAT32, 3, d) == KILN_OK);
        float *f = heap[k].data;
        for (int64_t j = 0; j < N * ck[k] * 5; j++)
            f[j] = (float)(100 * k + j);
        in[k] = heap[k];
        if (at[k] >= 0) {
            in[k].data = buf + at[k];
            memcpy(in[k].data, heap[k].data, heap[k].nbytes);
        }
        inp[k] = &in[k];
        hp[k] = &heap[k];
    }
    kiln_node node = {.op = KILN_OP_Concat, .n_in = 3, .n_out = 1, .opset = 17};
    CHECK(kiln__node_set_attr_i(&node, "axis", 1) == KILN_OK);
    kiln_tensor want = {0}, got = {0};
    kiln_tensor *wp = &want, *gp = &got;
    kiln_kctx cw = {.node = &node, .n_in = 3, .in = hp, .n_out = 1, .out = &wp, .nthreads = 1};
    CHECK_MSG(fn(&cw) == KILN_OK, "%s", kiln_last_error());
    slot_rt s = {buf, cap};
    kiln_krt rt = {.place = slot_place, .owns = slot_owns};
    kiln_kctx cg = {.node = &node, .n_in = 3, .in = inp, .n_out = 1, .out = &gp, .nthreads = 1, .rt = &rt,
                    .rt_user = &s};
    CHECK_MSG(fn(&cg) == KILN_OK, "%s: %s", what, kiln_last_error());
    CHECK_MSG(got.data == buf && got.nbytes == want.nbytes && !memcmp(got.data, want.data, want.nbytes),
              "%s: the output differs", what);
    kiln__tensor_release(&want);
    for (int k = 0; k < 3; k++)
        kiln__tensor_release(&heap[k]);
    for (int a = 0; a < node.n_attr; a++)
        kiln__attr_free(&node.attrs[a]);
    kiln__free(node.attrs);
    kiln__free(buf);
}

int main(void)
{
    unsigned long long seed = 0x2545F4914F6CDD1Dull;
    unsetenv("KILN_PLAN_CONCAT");
    static const cat_case cases[] = {
        {1, 3, 5, 4, 4, 1, true},    /* 64 bytes a channel */
        {1, 16, 24, 20, 20, 1, true}, {1, 7, 1, 8, 2, -3, true},
        {1, 1, 6, 2, 16, 2, true},    /* along the rows: dims before the axis are 1 (C = 1) */
        {2, 3, 5, 4, 4, 1, false},    /* batch 2: the pieces interleave */
        {1, 3, 5, 3, 5, 1, false},    /* 60 bytes a channel: the second piece at byte 180 */
        {1, 2, 2, 3, 5, -2, false},   /* along the rows with 2 channels */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], &seed);
    setenv("KILN_PLAN_CONCAT", "0", 1);
    cat_case off = cases[1];
    off.placed = false;
    run_case(&off, &seed);
    unsetenv("KILN_PLAN_CONCAT");

    /* byte sizes 40, 60, 20 (batch 2: 80, 120, 40); the output is the buffer's first 120 (240) bytes */
    const int64_t ck[3] = {2, 3, 1}, lay[3] = {0, 40, 100}, later[3] = {0, 64, 192}, heap[3] = {-1, 40, -1};
    const int64_t inside2[3] = {0, 96, 216};
    kernel_case(1, ck, lay, "pieces at their places");
    kernel_case(1, ck, later, "pieces at later places");
    kernel_case(1, ck, heap, "one piece in place");
    kernel_case(2, ck, inside2, "batch 2, pieces inside the output");
    return TEST_SUMMARY();
}
