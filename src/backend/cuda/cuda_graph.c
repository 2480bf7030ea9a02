/* CUDA graphs: the runtime captures a whole run of an engine on a context's stream once per input
 * shape and replays it (docs/CUDA.md). Uploads made during the capture go through pinned memory
 * owned by the graph (the runtime rewrites the graph inputs' bytes there before each launch);
 * anything that would synchronize or copy through the shared staging buffer fails the capture. */
#include "cuda_internal.h"
#include <stdlib.h>

/* A copy of a graph input that began the captured graph, issued before the launch instead (hoist_uploads). */
typedef struct cu_upload {
    void *dst;
    const void *src;
    size_t n;
} cu_upload;

#define CU_MAX_HOISTED 64

typedef struct cu_graph {
    cudaGraphExec_t exec;
    char *stage;
    unsigned mem_gen;
    int n_up;
    cu_upload up[CU_MAX_HOISTED];
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
    cu_fp8_forget(b);   /* device memory is written outside the layers */
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
    cu_fp8_forget(b);   /* device memory is written outside the layers */
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

/* The uploads from the graph's pinned memory that the captured graph begins with (its root, while that is a
 * plain host-to-device copy out of the stage) leave the graph: cu_graph_launch issues them on the stream just
 * before the launch, which is the same order, so events between them time the uploads apart from the
 * compute (what trtexec reports as "H2D" and "GPU compute"). A capture on one stream is a chain, so the
 * root is the first operation; later uploads (into memory an earlier layer may use) stay in the graph. */
static void hoist_uploads(cu_graph *g, cudaGraph_t graph, const char *stage, size_t stage_n)
{
    while (g->n_up < CU_MAX_HOISTED) {
        cudaGraphNode_t root[2];
        size_t nr = 2;
        enum cudaGraphNodeType ty;
        struct cudaMemcpy3DParms p;
        if (cudaGraphGetRootNodes(graph, root, &nr) != cudaSuccess || nr != 1 ||
            cudaGraphNodeGetType(root[0], &ty) != cudaSuccess || ty != cudaGraphNodeTypeMemcpy ||
            cudaGraphMemcpyNodeGetParams(root[0], &p) != cudaSuccess)
            break;
        const char *src = (const char *)p.srcPtr.ptr;
        size_t n = p.extent.width;
        if (p.kind != cudaMemcpyHostToDevice || p.srcArray || p.dstArray || p.extent.height != 1 ||
            p.extent.depth != 1 || p.srcPos.x || p.srcPos.y || p.srcPos.z || p.dstPos.x || p.dstPos.y ||
            p.dstPos.z || !src || src < stage || n > stage_n || (size_t)(src - stage) > stage_n - n)
            break;
        g->up[g->n_up] = (cu_upload){p.dstPtr.ptr, src, n};
        if (cudaGraphDestroyNode(root[0]) != cudaSuccess)
            break;
        g->n_up++;
    }
    cudaGetLastError();
}

kiln_status cu_graph_end(kiln_backend *be, void **out)
{
    cu_be *b = cu_of(be);
    cu_fp8_forget(b);   /* device memory is written outside the layers */
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
    if (st == KILN_OK) {
        hoist_uploads(g, graph, b->cap_stage, b->cap_used);
        st = cu_check(b, cudaGraphInstantiate(&g->exec, graph, 0), "instantiating the CUDA graph");
    }
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
    cu_fp8_forget(b);   /* device memory is written outside the layers */
    cu_graph *g = graph;
    if (g->mem_gen != b->mem_gen)
        return cu_err(b, KILN_ERR_UNSUPPORTED, "memory the CUDA graph uses was reallocated");
    b->runs++;
    /* events before the hoisted uploads, after them and after the graph (cu_graph_ms) */
    b->launch_timed = false;
    for (int i = 0; i < 3; i++)
        if (!b->launch_ev[i] && cudaEventCreate(&b->launch_ev[i]) != cudaSuccess)
            b->launch_ev[i] = NULL;
    bool timed = b->launch_ev[0] && b->launch_ev[1] && b->launch_ev[2] &&
                 cudaEventRecord(b->launch_ev[0], b->stream) == cudaSuccess;
    for (int i = 0; i < g->n_up; i++)
        KILN_TRY(cu_check(b, cudaMemcpyAsync(g->up[i].dst, g->up[i].src, g->up[i].n, cudaMemcpyHostToDevice,
                                             b->stream), "copying to the GPU"));
    timed = timed && cudaEventRecord(b->launch_ev[1], b->stream) == cudaSuccess;
    KILN_TRY(cu_check(b, cudaGraphLaunch(g->exec, b->stream), "launching the CUDA graph"));
    b->launch_timed = timed && cudaEventRecord(b->launch_ev[2], b->stream) == cudaSuccess;
    cudaGetLastError();
    return KILN_OK;
}

double cu_graph_ms(kiln_backend *be, double *compute_ms)
{
    cu_be *b = cu_of(be);
    float ms = -1, cms = -1;
    if (!b->launch_timed || cudaEventSynchronize(b->launch_ev[2]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, b->launch_ev[0], b->launch_ev[2]) != cudaSuccess ||
        cudaEventElapsedTime(&cms, b->launch_ev[1], b->launch_ev[2]) != cudaSuccess)
        ms = cms = -1;
    cudaGetLastError();
    if (compute_ms)
        *compute_ms = cms;
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
