/* What an engine computes in, for kiln bench: the realized precisions of its layers; what a device run held in
 * half storage. */
#include "cli.h"
#include <stdio.h>
#include <string.h>

#define MAX_KINDS 16

/* The ops whose float32 kernels --tf32 changes: the CUDA module's cuDNN convolutions (Conv, FusedConv) and
 * cuBLASLt GEMMs (MatMul, Gemm, their fused forms, Attention's two products). Every other layer (pooling, element-wise,
 * Flatten, ...) computes in plain float32 whatever the flag, and is not reported as tf32. */
static bool tf32_op(const char *op)
{
    static const char *const ops[] = {"Conv", "FusedConv", "MatMul", "FusedMatMul", "Gemm", "FusedGemm", "Attention"};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (!strcmp(op, ops[k]))
            return true;
    return false;
}

void cli_precision_summary(kiln_engine_t e, kiln_context_t c, bool tf32, cli_precision *out)
{
    memset(out, 0, sizeof *out);
    const char *kind[MAX_KINDS];
    int count[MAX_KINDS], nk = 0, nreq = 0, ntf32 = 0;
    const char *req_kind = NULL;
    bool mixed = false;
    int n = kiln_engine_num_layers(e);
    for (int i = 0; i < n; i++) {
        const char *req = NULL, *real = NULL;
        if (kiln_engine_layer_precision(e, i, &req, &real) != KILN_OK || !real || !*real)
            continue;
        kiln_layer_info L;
        kiln_layer_place place = KILN_PLACE_DEVICE;
        /* a float32 convolution / GEMM the GPU ran may use TF32 tensor cores; one that fell back to the CPU
         * (or never ran) did not */
        if (tf32 && !strcmp(real, "fp32") && kiln_engine_layer(e, i, &L) == KILN_OK && tf32_op(L.op) &&
            (!c || (kiln_context_layer_place(c, i, &place) == KILN_OK && place == KILN_PLACE_DEVICE)))
            real = "tf32", ntf32++;
        int k = 0;
        while (k < nk && strcmp(kind[k], real))
            k++;
        if (k == nk && nk < MAX_KINDS)
            kind[nk] = real, count[nk++] = 0;
        if (k < nk)
            count[k]++;
        if (req && *req) {   /* a layer the build was asked to lower (or keep): what it realized */
            nreq++;
            if (!req_kind)
                req_kind = real;
            else if (strcmp(req_kind, real))
                mixed = true;
        }
    }
    snprintf(out->name, sizeof out->name, "%s", nreq ? (mixed ? "mixed" : req_kind) : ntf32 ? "tf32" : "fp32");
    /* "fp16 51, fp32 22": most layers first */
    size_t len = 0;
    for (int done = 0; done < nk; done++) {
        int best = -1;
        for (int k = 0; k < nk; k++)
            if (count[k] >= 0 && (best < 0 || count[k] > count[best]))
                best = k;
        int w = snprintf(out->layers + len, sizeof out->layers - len, "%s%s %d", len ? ", " : "", kind[best],
                         count[best]);
        if (w < 0 || (size_t)w >= sizeof out->layers - len)
            break;
        len += (size_t)w;
        out->kinds[out->nkinds].name = kind[best];
        out->kinds[out->nkinds++].layers = count[best];
        count[best] = -1;
    }
}

void cli_print_half_storage(int n, bool always)
{
    if (n > 0 || always)
        printf("half storage: %d layer%s held a float32 output in FP16 / BF16 on the GPU (float32 arithmetic; kiln "
               "inspect --device cuda marks them after the output shape)\n", n, n == 1 ? "" : "s");
}
