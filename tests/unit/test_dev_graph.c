/* The runtime's CUDA-graph bookkeeping (src/runtime/device_graph.c) over a fake device module on host memory: the
 * device blocks a graph touches outside its own launch -- its outputs, read after every replay, and its inputs'
 * uploads, written before it -- stay the graph's until it is dropped. Session 23 found on the H200 that the captured
 * run's end freed the output block into the module's pool, where the next allocation of its size (the relayout of
 * an NHWC output on its way to the host) took it at every replay: all NaN. No GPU needed: the fake module counts
 * every free per block (a block freed early, twice, or never fails here). */
#include "runtime/device_impl.h"
#include "test.h"
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCKS 64

static struct {
    void *p[MAX_BLOCKS];
    int frees[MAX_BLOCKS];
    int n;
    int launches, graphs_freed;
    bool fail_end;
    char stage[4096];
} fk;

static int block_of(const void *p)
{
    for (int i = 0; i < fk.n; i++)
        if (fk.p[i] == p)
            return i;
    return -1;
}

static kiln_status f_alloc(kiln_backend *be, size_t n, void **p)
{
    (void)be;
    *p = calloc(1, n ? n : 1);
    if (!*p || fk.n == MAX_BLOCKS)
        return KILN_ERR_NOMEM;
    fk.p[fk.n] = *p;
    fk.frees[fk.n++] = 0;
    return KILN_OK;
}

/* freed blocks are counted, not returned, so a pointer never comes back for another block */
static void f_free(kiln_backend *be, void *p)
{
    (void)be;
    int i = block_of(p);
    if (i >= 0)
        fk.frees[i]++;
}

static kiln_status f_copy(kiln_backend *be, void *dst, const void *src, size_t n)
{
    (void)be;
    memcpy(dst, src, n);
    return KILN_OK;
}

static kiln_status f_graph_begin(kiln_backend *be, size_t stage)
{
    (void)be;
    (void)stage;   /* graph_h2d checks each upload against fk.stage */
    return KILN_OK;
}

static kiln_status f_graph_h2d(kiln_backend *be, void *dst, const void *src, size_t n, void **staged)
{
    (void)be;
    if (n > sizeof fk.stage)
        return KILN_ERR_NOMEM;
    memcpy(fk.stage, src, n);
    memcpy(dst, src, n);
    *staged = fk.stage;
    return KILN_OK;
}

static kiln_status f_graph_end(kiln_backend *be, void **graph)
{
    (void)be;
    *graph = fk.fail_end ? NULL : (void *)fk.stage;
    return fk.fail_end ? KILN_ERR_UNSUPPORTED : KILN_OK;
}

static kiln_status f_graph_launch(kiln_backend *be, void *graph)
{
    (void)be;
    (void)graph;
    fk.launches++;
    return KILN_OK;
}

static void f_graph_free(kiln_backend *be, void *graph)
{
    (void)be;
    (void)graph;
    fk.graphs_freed++;
}

static kiln_status f_sync(const kiln_backend *be)
{
    (void)be;
    return KILN_OK;
}

static const kiln_devmod fake_mod = {.abi = KILN_DEVMOD_ABI, .name = "fake", .alloc = f_alloc, .free = f_free,
                                     .h2d = f_copy, .d2h = f_copy, .graph_begin = f_graph_begin,
                                     .graph_h2d = f_graph_h2d, .graph_end = f_graph_end,
                                     .graph_launch = f_graph_launch, .graph_free = f_graph_free};
static const kiln_backend_ops fake_ops = {.name = "fake", .synchronize = f_sync};
static kiln_backend fake_be = {.ops = &fake_ops};

/* one input "x" [4] -> one output "y" [4] */
static kiln_graph *one_io_graph(void)
{
    kiln_graph *g = kiln__graph_new(NULL);
    int x = kiln__graph_add_value(g, "x"), y = kiln__graph_add_value(g, "y");
    g->inputs = kiln__calloc(1, sizeof(int));
    g->inputs[g->n_inputs++] = x;
    g->outputs = kiln__calloc(1, sizeof(int));
    g->outputs[g->n_outputs++] = y;
    return g;
}

static kiln_tensor dev_tensor(int64_t n)
{
    kiln_tensor t = {.dtype = KILN_DT_FLOAT32, .ndim = 1, .dims = {n}, .nbytes = (size_t)n * sizeof(float),
                     .flags = KILN_TENSOR_BORROWED | KILN_TENSOR_ON_DEVICE};
    if (f_alloc(&fake_be, t.nbytes, &t.data) != KILN_OK)
        t.data = NULL;
    return t;
}

/* A kiln_dev on the fake module with graphs on (its graph_end fails when fail_end), the counts cleared */
static kiln_dev *fake_dev(bool fail_end)
{
    memset(&fk, 0, sizeof fk);
    fk.fail_end = fail_end;
    kiln_dev *d = kiln__calloc(1, sizeof *d);
    d->mod = &fake_mod;
    d->be = &fake_be;
    d->graphs = true;
    return d;
}

static void fake_dev_free(kiln_dev *d, kiln_graph *g)
{
    for (int i = 0; i < fk.n; i++)
        free(fk.p[i]);
    kiln__free(d->key);
    kiln__free(d->up);
    kiln__free(d);
    kiln__graph_free(g);
}

/* graph input "x": a host float32 [4] over v */
static kiln_tensor host_input(float *v)
{
    return (kiln_tensor){.dtype = KILN_DT_FLOAT32, .ndim = 1, .dims = {4}, .nbytes = 4 * sizeof(float), .data = v,
                         .flags = KILN_TENSOR_BORROWED};
}

/* The captured run of the runtime's sequence (exec.c / exec_device.c): graph input uploaded, the layer's output,
 * the upload freed at its node's end, the graph finished (ended and launched), every device value freed at the
 * run's end. *up / *out: the two blocks. */
static kiln_status captured_run(kiln_dev *d, const kiln_graph *g, const kiln_tensor *in, void **up, void **out)
{
    kiln_tensor u, y = dev_tensor(4);
    d->cap_input = 0;
    kiln_status st = kiln__dev_graph_upload(d, in, &u);
    d->cap_input = -1;
    if (st != KILN_OK)
        return st;
    *up = u.data;
    *out = y.data;
    for (int i = 0; i < 4; i++)
        ((float *)y.data)[i] = 2.0f * ((const float *)u.data)[i];
    kiln__dev_tensor_free(d, &u);   /* its node's end */
    const kiln_tensor *val[2] = {NULL, &y};
    st = kiln__dev_graph_finish(d, g, val);
    kiln__dev_tensor_free(d, &y);   /* the run's end */
    return st;
}

static void test_graph_keeps_outputs_and_uploads(void)
{
    kiln_dev *d = fake_dev(false);
    kiln_graph *g = one_io_graph();
    float xv[4] = {1, 2, 3, 4};
    kiln_tensor x = host_input(xv);
    const kiln_tensor *in[1] = {&x};
    /* a context's first run at new shapes plans memory (no arm); the second arms (the key), the third is captured */
    kiln__dev_graph_arm(d, g, in);
    CHECK(!d->cap_open);
    kiln__dev_graph_arm(d, g, in);
    CHECK(d->cap_open);
    void *up = NULL, *out = NULL;
    CHECK(captured_run(d, g, &x, &up, &out) == KILN_OK);
    CHECK(d->graph != NULL && fk.launches == 1);
    CHECK(block_of(up) >= 0 && block_of(out) >= 0);
    /* the run let go of both, but the graph keeps them: not freed */
    CHECK(fk.frees[block_of(up)] == 0);
    CHECK(fk.frees[block_of(out)] == 0);
    /* a block the graph does not keep is freed as always */
    kiln_tensor other = dev_tensor(4);
    void *op = other.data;
    kiln__dev_tensor_free(d, &other);
    CHECK(fk.frees[block_of(op)] == 1);
    /* a replay on new input values: the graph's output block is read back */
    xv[0] = 10;
    kiln_tensor outs[1];
    memset(outs, 0, sizeof outs);
    kiln_status st = KILN_ERR_INTERNAL;
    CHECK(kiln__dev_graph_replay(d, g, in, outs, NULL, &st));
    CHECK(st == KILN_OK && fk.launches == 2);
    CHECK(!memcmp(fk.stage, xv, sizeof xv));   /* the input's bytes refreshed in the capture's pinned memory */
    CHECK(outs[0].data && ((float *)outs[0].data)[1] == 4.0f);
    kiln__tensor_release(&outs[0]);
    CHECK(fk.frees[block_of(up)] == 0);
    CHECK(fk.frees[block_of(out)] == 0);
    /* dropped (new shapes, the context freed): each kept block freed once */
    kiln__dev_graph_drop(d);
    CHECK(fk.frees[block_of(up)] == 1);
    CHECK(fk.frees[block_of(out)] == 1);
    CHECK(fk.graphs_freed == 1);
    kiln__dev_graph_drop(d);   /* twice: nothing more */
    CHECK(fk.frees[block_of(up)] == 1);
    CHECK(fk.frees[block_of(out)] == 1);
    fake_dev_free(d, g);
}

/* A capture that fails at its end: the run is made again layer by layer, so every block is freed as usual, once */
static void test_failed_capture_frees_once(void)
{
    kiln_dev *d = fake_dev(true);
    kiln_graph *g = one_io_graph();
    float xv[4] = {1, 2, 3, 4};
    kiln_tensor x = host_input(xv);
    const kiln_tensor *in[1] = {&x};
    for (int r = 0; r < 2; r++)
        kiln__dev_graph_arm(d, g, in);
    CHECK(d->cap_open);
    void *up = NULL, *out = NULL;
    CHECK(captured_run(d, g, &x, &up, &out) != KILN_OK);
    CHECK(d->graph == NULL && fk.launches == 0);
    CHECK(kiln__dev_graph_retry(d));   /* the runtime's retry: the capture's kept blocks go back now */
    CHECK(fk.frees[block_of(up)] == 1);   /* held by the capture, released by the drop */
    CHECK(fk.frees[block_of(out)] == 1);  /* never held: freed at the run's end */
    kiln__dev_graph_drop(d);
    CHECK(fk.frees[block_of(up)] == 1);
    CHECK(fk.frees[block_of(out)] == 1);
    fake_dev_free(d, g);
}

int main(void)
{
    test_graph_keeps_outputs_and_uploads();
    test_failed_capture_frees_once();
    return TEST_SUMMARY();
}
