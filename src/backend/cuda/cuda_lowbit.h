/* Low-bit weights in device memory, shared by the FP8 (cuda_fp8.c) and 4-bit (cuda_fp4.c) layers: the
 * layer's KILN_PREP_LOWBIT_W blob (backend/lowbit_blob.h), i.e. the weight exactly as the CPU backend
 * packed it, copied to the device once per layer and the only copy of the weight the layer keeps there. */
#ifndef KILN_BACKEND_CUDA_LOWBIT_H
#define KILN_BACKEND_CUDA_LOWBIT_H
#include "cuda_internal.h"
#include "backend/lowbit_blob.h"

typedef struct cu_lowbit_w {
    uint8_t *dev;        /* the payload: elements [rows, k] at 0, scales at L.off_s, FP32 tensor scale at L.off_t */
    kiln_lowbit_blob L;
    float ts;            /* the tensor scale (a host copy) */
    const void *src;     /* the blob or float32 weight it was made from, and cu_weights_gen() then */
    unsigned long gen;
    uint64_t *own;       /* the backend's count of weight bytes of its own */
} cu_lowbit_w;

/* blob is a KILN_PREP_LOWBIT_W blob of format fmt (tensor: FP8 with one scale per tensor). */
bool cu_lowbit_blob_is(const void *blob, size_t size, kiln__qfmt fmt, bool tensor);

/* The layer's weight on the device, a rows (= N) x k (= K) blob of fmt (tensor as above), kept in the
 * layer's state slot `slot`: uploaded from ctx->prepared (the engine's blob), else packed now by the host
 * service lowbit_prep from the float32 weight (input 1, a host tensor: kiln_devmod.host_inputs); made again
 * when its source changed. rs > 1 (FP8 only): each row is a convolution filter [C][rs] (K = C * rs), uploaded
 * channels-last as [rs][C]. Errors for a blob that does not fit the layer, or a weight on the device. */
kiln_status cu_lowbit_weight(cu_be *b, const kiln_kctx *ctx, int slot, kiln__qfmt fmt, bool tensor, int64_t N,
                             int64_t K, int64_t rs, cu_lowbit_w **out);
#endif
