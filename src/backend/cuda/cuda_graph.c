/* CUDA graphs: the runtime captures a whole run of an engine on a context's stream once per input
 * shape and replays it (docs/CUDA.md). Uploads made during the capture go through pinned memory
 * owned by the graph (the runtime rewrites the graph inputs' bytes there before each launch);
 * anything that would synchronize or copy through the shared staging buffer fails the capture. */
#include "cuda_internal.h"
#include <stdlib.h>

typedef struct cu_graph {
    cudaGraphExec_t exec;
    char *stage;
    unsigned mem_gen;
} cu_graph;

kiln_status cu_not_in_capture(cu_be *b, const char *what)
{
    kiln_status st = cu_err(b, KILN_ERR_UNSUPPORTED, "%s cannot be captured in a CUDA graph", what);
    if (b->cap_status == KILN_OK)
        b->cap_status = st;
    return st;
}

kiln_status cu_graph_begin(kiln_backend *be, size_t stage_bytes)
{
    cu_be *b = cu_of(be);
    if (b->capturing)
        return cu_err(b, KILN_ERR_INTERNAL, "already capturing");
    if (b->profile)   /* the per-layer profile synchronizes */
        return cu_err(b, KILN_ERR_UNSUPPORTED, "no CUDA graphs with KILN_CUDA_PROFILE");
    b->cap_stage = NULL;
    b->cap_stage_size = b->cap_used = 0;
    if (stage_bytes)
        KILN_TRY(cu_check(b, cudaMallocHost((void **)&b->cap_stage, stage_bytes), "allocating pinned memory"));
    b->cap_stage_size = stage_bytes;
    b->cap_status = KILN_OK;
    kiln_status st = cu_check(b, cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeRelaxed), "capturing");
    if (st != KILN_OK) {
        cudaFreeHost(b->cap_stage);
        b->cap_stage = NULL;
        return st;
    }
    b->capturing = true;
    return KILN_OK;
}

kiln_status cu_graph_h2d(kiln_backend *be, void *dst, const void *src, size_t n, void **staged)
{
    cu_be *b = cu_of(be);
    if (!b->capturing)
        return cu_err(b, KILN_ERR_INTERNAL, "graph_h2d outside a capture");
    size_t at = (b->cap_used + 255) / 256 * 256;
    if (at + n > b->cap_stage_size || at + n < at)
        return cu_not_in_capture(b, "an upload larger than the capture's pinned memory");
    memcpy(b->cap_stage + at, src, n);
    b->cap_used = at + n;
    *staged = b->cap_stage + at;
    kiln_status st = cu_check(b, cudaMemcpyAsync(dst, b->cap_stage + at, n, cudaMemcpyHostToDevice, b->stream),
                              "copying to the GPU");
    if (st != KILN_OK && b->cap_status == KILN_OK)
        b->cap_status = st;
    return st;
}

kiln_status cu_graph_end(kiln_backend *be, void **out)
{
    cu_be *b = cu_of(be);
    *out = NULL;
    if (!b->capturing)
        return cu_err(b, KILN_ERR_INTERNAL, "not capturing");
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(b->stream, &graph);
    b->capturing = false;
    kiln_status st = b->cap_status != KILN_OK ? b->cap_status : cu_check(b, e, "ending the capture");
    cu_graph *g = NULL;
    if (st == KILN_OK && !(g = calloc(1, sizeof *g)))
        st = cu_err(b, KILN_ERR_NOMEM, "out of memory");
    if (st == KILN_OK)
        st = cu_check(b, cudaGraphInstantiate(&g->exec, graph, 0), "instantiating the CUDA graph");
    if (graph)
        cudaGraphDestroy(graph);
    cudaGetLastError();   /* a failed capture leaves its error behind */
    if (st != KILN_OK) {
        free(g);
        cudaFreeHost(b->cap_stage);
        b->cap_stage = NULL;
        return st;
    }
    g->stage = b->cap_stage;
    g->mem_gen = b->mem_gen;
    b->cap_stage = NULL;
    *out = g;
    return KILN_OK;
}

kiln_status cu_graph_launch(kiln_backend *be, void *graph)
{
    cu_be *b = cu_of(be);
    cu_graph *g = graph;
    if (g->mem_gen != b->mem_gen)
        return cu_err(b, KILN_ERR_UNSUPPORTED, "memory the CUDA graph uses was reallocated");
    b->runs++;
    /* events around the launch: the graph's device time (cu_graph_ms) */
    b->launch_timed = false;
    for (int i = 0; i < 2; i++)
        if (!b->launch_ev[i] && cudaEventCreate(&b->launch_ev[i]) != cudaSuccess)
            b->launch_ev[i] = NULL;
    bool timed = b->launch_ev[0] && b->launch_ev[1] && cudaEventRecord(b->launch_ev[0], b->stream) == cudaSuccess;
    KILN_TRY(cu_check(b, cudaGraphLaunch(g->exec, b->stream), "launching the CUDA graph"));
    b->launch_timed = timed && cudaEventRecord(b->launch_ev[1], b->stream) == cudaSuccess;
    cudaGetLastError();
    return KILN_OK;
}

double cu_graph_ms(kiln_backend *be)
{
    cu_be *b = cu_of(be);
    float ms = -1;
    if (!b->launch_timed || cudaEventSynchronize(b->launch_ev[1]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, b->launch_ev[0], b->launch_ev[1]) != cudaSuccess)
        ms = -1;
    cudaGetLastError();
    return ms;
}

void cu_graph_free(kiln_backend *be, void *graph)
{
    cu_graph *g = graph;
    if (!g)
        return;
    cudaStreamSynchronize(cu_of(be)->stream);
    cudaGraphExecDestroy(g->exec);
    cudaFreeHost(g->stage);
    free(g);
}
