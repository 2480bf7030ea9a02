/* The backend interface (src/backend/backend.h): the CPU backend's capabilities, buffers and
 * prepared layers; the interpreter reaching every kernel through the backend it is given; the
 * kernel-side runtime services (kiln_krt) absent outside the runtime. */
#include "backend/backend.h"
#include "runtime/exec.h"
#include "runtime/model.h"
#include "kiln/kiln.h"
#include "test.h"
#include <string.h>

/* A backend that forwards to the CPU backend and counts what the interpreter asks of it. */
typedef struct counts {
    int prepare, run, sync;
} counts;
static counts cnt;

static kiln_status count_prepare(const kiln_backend *be, const kiln_node *n, const kiln_tensor *const *consts,
                                 kiln_layer *out)
{
    cnt.prepare++;
    const kiln_backend *cpu = kiln__cpu_backend();
    KILN_TRY(cpu->ops->prepare(cpu, n, consts, out));
    out->be = be;
    return KILN_OK;
}

static kiln_status count_run(const kiln_backend *be, const kiln_layer *l, kiln_kctx *ctx)
{
    (void)be;
    cnt.run++;
    const kiln_backend *cpu = kiln__cpu_backend();
    return cpu->ops->run(cpu, l, ctx);
}

static kiln_status count_sync(const kiln_backend *be)
{
    (void)be;
    cnt.sync++;
    return KILN_OK;
}

static void test_cpu_backend(void)
{
    const kiln_backend *be = kiln__cpu_backend();
    CHECK(be && !strcmp(be->ops->name, "cpu"));
    kiln_node conv = {.op = KILN_OP_Conv, .op_type = "Conv", .domain = "", .name = "c", .opset = 17};
    kiln_node unk = {.op = KILN_OP_UNKNOWN, .op_type = "Frobnicate", .domain = "x", .name = "u", .opset = 1};
    kiln_dtype f32[3] = {KILN_DT_FLOAT32, KILN_DT_FLOAT32, KILN_DT_UNDEFINED};
    kiln_bk_query q = {.node = &conv, .n_in = 3, .in_dtype = f32, .precision = KILN_DT_FLOAT32};
    CHECK(be->ops->supports(be, &q));
    q.layout = KILN_LAYOUT_NHWC;
    CHECK(!be->ops->supports(be, &q));   /* activations stay in ONNX's layout on the CPU */
    q.layout = KILN_LAYOUT_NCHW;
    q.precision = KILN_DT_FLOAT16;
    CHECK(!be->ops->supports(be, &q));   /* no reduced-precision compute of float32 inputs */
    q.node = &unk;
    q.precision = KILN_DT_UNDEFINED;
    CHECK(!be->ops->supports(be, &q));
    CHECK(kiln__backend_has_op(be, &conv) && !kiln__backend_has_op(be, &unk));

    kiln_layer l;
    CHECK(be->ops->prepare(be, &conv, NULL, &l) == KILN_OK && l.be == be && l.node == &conv && l.fn && !l.blob);
    be->ops->release(be, &l);
    CHECK(be->ops->prepare(be, &unk, NULL, &l) == KILN_ERR_UNSUPPORTED);
    CHECK(be->ops->load(be, &conv, (int)KILN_OP_Conv, NULL, 0, &l) == KILN_OK && l.fn);
    const char junk[4] = "abc";
    CHECK(be->ops->load(be, &conv, (int)KILN_OP_Conv, junk, sizeof junk, &l) == KILN_ERR_PARSE);   /* not a CPU blob */
    kiln_clear_last_error();

    kiln_buffer a, b;
    CHECK(be->ops->buf_alloc(be, 64, &a) == KILN_OK && a.size == 64 && a.be == be);
    CHECK(be->ops->buf_alloc(be, 64, &b) == KILN_OK);
    memset(a.data, 7, 64);
    CHECK(be->ops->buf_copy(be, b.data, a.data, 64) == KILN_OK && ((unsigned char *)b.data)[63] == 7);
    be->ops->buf_free(be, &a);
    be->ops->buf_free(be, &b);
    CHECK(!a.data && be->ops->synchronize(be) == KILN_OK);

    /* a prepared layer runs on a kernel context: Add of two float32 vectors onto the heap */
    kiln_node add = {.op = KILN_OP_Add, .op_type = "Add", .domain = "", .name = "a", .opset = 17};
    float x[3] = {1, 2, 3}, y[3] = {10, 20, 30};
    kiln_tensor tx = {.dtype = KILN_DT_FLOAT32, .ndim = 1, .dims = {3}, .data = x, .nbytes = sizeof x};
    kiln_tensor ty = tx;
    ty.data = y;
    const kiln_tensor *in[2] = {&tx, &ty};
    kiln_tensor z = {0};
    kiln_tensor *out[1] = {&z};
    kiln_kctx ctx = {.node = &add, .n_in = 2, .in = in, .n_out = 1, .out = out, .nthreads = 1};
    CHECK(be->ops->prepare(be, &add, NULL, &l) == KILN_OK);
    CHECK(kiln__layer_run(&l, &ctx) == KILN_OK && z.data && ((float *)z.data)[2] == 33.0f);
    kiln__tensor_release(&z);

    /* without a runtime (constant folding, tests) a kernel cannot run subgraphs: clean error */
    kiln_graph *g = kiln__graph_new(NULL);
    CHECK(g && kiln__ksubgraph(&ctx, g, NULL, NULL) == KILN_ERR_UNSUPPORTED);
    kiln_clear_last_error();
    kiln__graph_free(g);
}

/* The interpreter prepares and runs every node through the backend in its run environment, and
 * synchronizes it once at the end of the top-level graph; outputs equal the CPU backend's. */
static void test_exec_through_backend(void)
{
    kiln_model_t m;
    if (kiln_model_load("models/tiny_cnn.onnx", &m) != KILN_OK) {
        CHECK_MSG(0, "tiny_cnn: %s", kiln_last_error());
        return;
    }
    const kiln_graph *g = m->g;
    const kiln_value *iv = &g->values[g->inputs[0]];
    kiln_tensor x = {0};
    int64_t dims[4] = {2, 3, 32, 32};
    CHECK(iv->dtype == KILN_DT_FLOAT32 && g->n_inputs == 1);
    CHECK(kiln__tensor_alloc(&x, KILN_DT_FLOAT32, 4, dims) == KILN_OK);
    unsigned long long seed = 7;
    for (int64_t i = 0; i < kiln_tensor_numel(&x); i++)
        ((float *)x.data)[i] = test_randf(&seed);
    const kiln_tensor *feed[1] = {&x};

    kiln_backend_ops ops = *kiln__cpu_backend()->ops;
    ops.name = "counting";
    ops.prepare = count_prepare;
    ops.run = count_run;
    ops.synchronize = count_sync;
    kiln_backend counting = {.ops = &ops};
    kiln_tensor ref[4] = {{0}}, got[4] = {{0}};
    CHECK(g->n_outputs <= 4);
    kiln_run_env cpu_env = {.nthreads = 1};
    kiln_run_env be_env = {.nthreads = 1, .backend = &counting};
    CHECK(kiln__exec_graph(g, NULL, feed, ref, &cpu_env, 0) == KILN_OK);
    CHECK(kiln__exec_graph(g, NULL, feed, got, &be_env, 0) == KILN_OK);
    CHECK_MSG(cnt.prepare == g->n_nodes && cnt.run == g->n_nodes, "%d nodes, %d prepared, %d run", g->n_nodes,
              cnt.prepare, cnt.run);
    CHECK(cnt.sync == 1);
    for (int o = 0; o < g->n_outputs; o++) {
        CHECK(ref[o].nbytes == got[o].nbytes && ref[o].nbytes && !memcmp(ref[o].data, got[o].data, ref[o].nbytes));
        kiln__tensor_release(&ref[o]);
        kiln__tensor_release(&got[o]);
    }
    kiln__tensor_release(&x);
    kiln_model_free(m);
}

int main(void)
{
    test_cpu_backend();
    test_exec_through_backend();
    return TEST_SUMMARY();
}
