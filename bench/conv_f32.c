/* FP32 convolution layers of ResNet-50 (batch 1, 224x224) through the kernels a built engine runs:
 * FusedConv (bias, Relu, and the residual where the model has one) with the weights prepared by the
 * CPU backend's prepare function as the builder stores them (Winograd filters, ...). Every distinct
 * layer shape once; the table gives the best of R rounds (rounds alternate over the layers so that
 * load changes hit all of them alike), GFLOP/s, and the model's total (each shape times its count).
 * Meant for A/B comparisons of the FP32 conv path on a shared machine: run two builds one after the
 * other and compare per layer. The MaxPool after the stem (3x3/2, pad 1) is timed alike, on its own
 * line after the convs' total.
 *
 *   build/bench_conv_f32 [rounds] [threads] [name-substring]   (built by CMake, not run by ctest)
 *   KILN_BENCH_COLD_WEIGHTS=1: weights flushed from the caches before each call (as in a model run)
 *   KILN_BENCH_COLD_IO=1: the input, the residual and the output's memory flushed too (an inference's first layers:
 *   its input and arena lines evicted by the last inference's ~100 MB of weights) */
#include "backend/cpu/prep.h"
#include "ir/graph.h"
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct layer {
    const char *name;
    int64_t C, M, H, W, k, s;
    int count;    /* occurrences in ResNet-50 */
    bool res;     /* residual input (bottleneck conv3) */
    bool pool;    /* MaxPool k x k / s instead of a conv (not in the convs' total) */
} layer;

static const layer layers[] = {
    {"stem 7x7/2 3->64 @224", 3, 64, 224, 224, 7, 2, 1, false, false},
    {"1x1 64->64 @56", 64, 64, 56, 56, 1, 1, 1, false, false},
    {"3x3 64->64 @56", 64, 64, 56, 56, 3, 1, 3, false, false},
    {"1x1 64->256 @56 (+res)", 64, 256, 56, 56, 1, 1, 4, true, false},
    {"1x1 256->64 @56", 256, 64, 56, 56, 1, 1, 2, false, false},
    {"1x1 256->128 @56", 256, 128, 56, 56, 1, 1, 1, false, false},
    {"3x3/2 128->128 @56", 128, 128, 56, 56, 3, 2, 1, false, false},
    {"1x1/2 256->512 @56", 256, 512, 56, 56, 1, 2, 1, false, false},
    {"1x1 128->512 @28 (+res)", 128, 512, 28, 28, 1, 1, 4, true, false},
    {"1x1 512->128 @28", 512, 128, 28, 28, 1, 1, 3, false, false},
    {"3x3 128->128 @28", 128, 128, 28, 28, 3, 1, 3, false, false},
    {"1x1 512->256 @28", 512, 256, 28, 28, 1, 1, 1, false, false},
    {"3x3/2 256->256 @28", 256, 256, 28, 28, 3, 2, 1, false, false},
    {"1x1/2 512->1024 @28", 512, 1024, 28, 28, 1, 2, 1, false, false},
    {"1x1 256->1024 @14 (+res)", 256, 1024, 14, 14, 1, 1, 6, true, false},
    {"1x1 1024->256 @14", 1024, 256, 14, 14, 1, 1, 5, false, false},
    {"3x3 256->256 @14", 256, 256, 14, 14, 3, 1, 5, false, false},
    {"1x1 1024->512 @14", 1024, 512, 14, 14, 1, 1, 1, false, false},
    {"3x3/2 512->512 @14", 512, 512, 14, 14, 3, 2, 1, false, false},
    {"1x1/2 1024->2048 @14", 1024, 2048, 14, 14, 1, 2, 1, false, false},
    {"1x1 512->2048 @7 (+res)", 512, 2048, 7, 7, 1, 1, 3, true, false},
    {"1x1 2048->512 @7", 2048, 512, 7, 7, 1, 1, 2, false, false},
    {"3x3 512->512 @7", 512, 512, 7, 7, 3, 1, 2, false, false},
    {"maxpool 3x3/2 64 @112", 64, 64, 112, 112, 3, 2, 1, false, true},
};
enum { NL = sizeof layers / sizeof layers[0] };

static kiln_tensor tens(int nd, const int64_t *dims, unsigned long long *seed)
{
    kiln_tensor t;
    memset(&t, 0, sizeof t);
    if (kiln__tensor_alloc(&t, KILN_DT_FLOAT32, nd, dims) != KILN_OK)
        exit(1);
    /* 64-byte aligned, as a context's activation arena places every tensor (runtime/plan.c): the heap's 16-byte
     * alignment split every vector load across two lines and made the 1x1 convs at 56x56 read ~15-20% slower here
     * than in a model (session 40) */
    void *p = NULL;
    if (posix_memalign(&p, 64, t.nbytes) != 0)
        exit(1);
    kiln__free(t.data);
    t.data = p;
    for (int64_t i = 0; i < kiln_tensor_numel(&t); i++) {
        *seed = *seed * 6364136223846793005ULL + 1;
        ((float *)t.data)[i] = (float)(*seed >> 40) / (float)(1 << 24) - 0.5f;
    }
    return t;
}

typedef struct inst {
    kiln_tensor x, w, b, r;
    int64_t pads[4], st[2], ks[2];
    kiln_attr attrs[3];
    int ids[10];
    kiln_node node;
    void *blob;
    size_t size;
    double flops;
} inst;

static void setup(inst *in, const layer *l, unsigned long long *seed)
{
    memset(in, 0, sizeof *in);
    int64_t Ho = (l->H + 2 * (l->k / 2) - l->k) / l->s + 1, Wo = (l->W + 2 * (l->k / 2) - l->k) / l->s + 1;
    int64_t xd[4] = {1, l->C, l->H, l->W}, wd[4] = {l->M, l->C, l->k, l->k}, rd[4] = {1, l->M, Ho, Wo};
    in->x = tens(4, xd, seed);
    in->w = tens(4, wd, seed);
    in->b = tens(1, &l->M, seed);
    if (l->res)
        in->r = tens(4, rd, seed);
    for (int i = 0; i < 4; i++)
        in->pads[i] = l->k / 2;
    in->st[0] = in->st[1] = l->s;
    in->attrs[0] = (kiln_attr){.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4, .ints = in->pads};
    in->attrs[1] = (kiln_attr){.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = 2, .ints = in->st};
    in->attrs[2] = (kiln_attr){.name = (char *)"activation", .type = KILN_ATTR_STRING, .s = (char *)"Relu", .s_len = 4};
    for (int i = 0; i < 10; i++)
        in->ids[i] = i;
    if (l->pool) {
        in->ks[0] = in->ks[1] = l->k;
        in->attrs[2] = (kiln_attr){.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = 2, .ints = in->ks};
        in->node = (kiln_node){.name = (char *)"p", .op_type = (char *)"MaxPool", .domain = (char *)"",
                               .op = KILN_OP_MaxPool, .opset = 12, .n_in = 1, .n_out = 1, .in = in->ids,
                               .out = in->ids + 9, .attrs = in->attrs, .n_attr = 3};
        in->flops = (double)(l->C * l->k * l->k) * (double)(Ho * Wo);   /* one max per window element */
        return;
    }
    int nin = l->res ? 4 : 3;
    in->node = (kiln_node){.name = (char *)"l", .op_type = (char *)"FusedConv", .domain = (char *)"kiln",
                           .op = KILN_OP_FusedConv, .opset = 1, .n_in = nin, .n_out = 1, .in = in->ids,
                           .out = in->ids + 9, .attrs = in->attrs, .n_attr = 3};
    const kiln_tensor *cin[4] = {&in->x, &in->w, &in->b, &in->r};
    kiln_kernel_prep_fn prep = kiln__cpu_prep_fn(KILN_OP_FusedConv);
    void *blob = NULL;
    if (prep && prep(&in->node, nin, cin, &blob, &in->size) != KILN_OK) {
        fprintf(stderr, "prepare failed: %s\n", kiln_last_error());
        exit(1);
    }
    if (blob) {   /* 64-byte aligned, as an engine's PACKED section maps it (kernels check) */
        if (posix_memalign(&in->blob, 64, in->size) != 0)
            exit(1);
        memcpy(in->blob, blob, in->size);
        kiln__free(blob);
    }
    in->flops = 2.0 * (double)(l->M * l->C * l->k * l->k) * (double)(Ho * Wo);
}

/* KILN_BENCH_COLD_WEIGHTS=1: the weights (and the prepared blob) are flushed from every cache level before
 * each timed call, as in a model run, where ~100 MB of weights stream from memory (activations stay warm) */
static void flush_weights(const inst *in)
{
#if defined(__x86_64__)
    const char *p[2] = {in->w.data, in->blob};
    size_t n[2] = {(size_t)kiln_tensor_numel(&in->w) * sizeof(float), in->blob ? in->size : 0};
    for (int i = 0; i < 2; i++)
        for (size_t o = 0; p[i] && o < n[i]; o += 64)
            __builtin_ia32_clflush(p[i] + o);
    __builtin_ia32_mfence();
#else
    (void)in;
#endif
}

static void flush_bytes(const void *p, size_t n)
{
#if defined(__x86_64__)
    for (size_t o = 0; p && o < n; o += 64)
        __builtin_ia32_clflush((const char *)p + o);
    __builtin_ia32_mfence();
#else
    (void)p, (void)n;
#endif
}

static double run(inst *in, const layer *l, kiln_pool *pool, int th)
{
    static int cold = -1, cold_io = -1;
    if (cold < 0) {
        cold = getenv("KILN_BENCH_COLD_WEIGHTS") && atoi(getenv("KILN_BENCH_COLD_WEIGHTS")) > 0;
        cold_io = getenv("KILN_BENCH_COLD_IO") && atoi(getenv("KILN_BENCH_COLD_IO")) > 0;
    }
    if (cold && !l->pool)
        flush_weights(in);
    if (cold_io) {
        flush_bytes(in->x.data, (size_t)kiln_tensor_numel(&in->x) * sizeof(float));
        if (in->r.data)
            flush_bytes(in->r.data, (size_t)kiln_tensor_numel(&in->r) * sizeof(float));
    }
    const kiln_tensor *cin[4] = {&in->x, &in->w, &in->b, &in->r};
    kiln_tensor y;
    memset(&y, 0, sizeof y);
    kiln_tensor *o[1] = {&y};
    kiln_kctx c = {.node = &in->node, .n_in = in->node.n_in, .in = cin, .n_out = 1, .out = o, .pool = pool,
                   .nthreads = th, .prepared = in->blob, .prepared_size = in->size};
    double t0 = now();
    kiln_status st = kiln__ref_kernel(in->node.op)(&c);
    double t = now() - t0;
    if (st != KILN_OK) {
        fprintf(stderr, "%s: %s\n", l->name, kiln_last_error());
        exit(1);
    }
    if (cold_io)   /* the next call's output most likely takes this memory again (malloc keeps it) */
        flush_bytes(y.data, (size_t)kiln_tensor_numel(&y) * sizeof(float));
    kiln__tensor_release(&y);
    return t;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 10, th = argc > 2 ? atoi(argv[2]) : 2;
    const char *only = argc > 3 ? argv[3] : NULL;   /* only the layers whose name contains it */
    if (rounds < 1)
        rounds = 1;
    if (th < 1)
        th = 1;
    /* outputs are malloc'ed per run: keep freed memory mapped, as an engine's arena is (no page
     * faults inside the timed calls) */
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    kiln_pool *pool = kiln__pool_create(th);
    static inst ins[NL];
    double best[NL];
    unsigned long long seed = 1;
    for (int i = 0; i < NL; i++) {
        best[i] = 1e30;
        if (only && !strstr(layers[i].name, only))
            continue;
        setup(&ins[i], &layers[i], &seed);
        run(&ins[i], &layers[i], pool, th); /* warm-up */
    }
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < NL; i++) {
            if (only && !strstr(layers[i].name, only))
                continue;
            double t = run(&ins[i], &layers[i], pool, th);
            best[i] = t < best[i] ? t : best[i];
        }
    printf("%-28s %5s %9s %8s %9s\n", "layer (FusedConv+Relu)", "count", "best ms", "GF/s", "total ms");
    double tot = 0, totf = 0;
    for (int pass = 0; pass < 2; pass++) {   /* the convs and their total, then the pool */
        for (int i = 0; i < NL; i++) {
            if ((only && !strstr(layers[i].name, only)) || layers[i].pool != (pass == 1))
                continue;
            double t = best[i] * layers[i].count;
            tot += pass == 0 ? t : 0;
            totf += pass == 0 ? ins[i].flops * layers[i].count : 0;
            printf("%-28s %5d %9.3f %8.1f %9.3f\n", layers[i].name, layers[i].count, best[i] * 1e3,
                   ins[i].flops / best[i] * 1e-9, t * 1e3);
        }
        if (pass == 0)
            printf("%-28s %5s %9s %8.1f %9.3f   (%d thread(s), best of %d)\n", "all convs", "", "",
                   tot > 0 ? totf / tot * 1e-9 : 0, tot * 1e3, th, rounds);
    }
    for (int i = 0; i < NL; i++) {
        kiln__tensor_release(&ins[i].x), kiln__tensor_release(&ins[i].w), kiln__tensor_release(&ins[i].b);
        kiln__tensor_release(&ins[i].r);
        free(ins[i].blob);
    }
    kiln__pool_free(pool);
    return 0;
}
