/* Prepared-weight blobs of the CPU backend (prep.h): header, validation, and the registry of
 * per-op prepare functions (next to the kernel registry: each kernel file that packs weights
 * exports a kiln__prep_<group>[] table). */
#include "prep.h"
#include "gemm.h"
#include "lowbit.h"
#include <assert.h>
#include <pthread.h>

static_assert(sizeof(kiln_prep_hdr) == KILN_PREP_HDR_BYTES, "prepared blob header is 128 bytes");

#define PREP_GROUPS(X) X(conv) X(linalg) X(qgemm)
#define FAST_PREP_GROUPS(X) X(conv)
#define DECL(g) extern const kiln_prep_reg kiln__prep_##g[];
PREP_GROUPS(DECL)
#undef DECL
#define DECL(g) extern const kiln_prep_isa_reg kiln__x86_prep_##g[];
FAST_PREP_GROUPS(DECL)
#undef DECL

static kiln_kernel_prep_fn ref_prep[KILN_OP_COUNT], prep[KILN_OP_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
#define ADD(g)                                                                                     \
    for (const kiln_prep_reg *r = kiln__prep_##g; r->fn; r++)                                      \
        if (r->op >= 0 && r->op < KILN_OP_COUNT)                                                   \
            ref_prep[r->op] = r->fn;
    PREP_GROUPS(ADD)
#undef ADD
    memcpy(prep, ref_prep, sizeof prep);
#define ADD(g)                                                                                     \
    for (const kiln_prep_isa_reg *r = kiln__x86_prep_##g; r->fn; r++)                              \
        if (r->op >= 0 && r->op < KILN_OP_COUNT && kiln__cpu_has(r->isa))                          \
            prep[r->op] = r->fn;
    FAST_PREP_GROUPS(ADD)
#undef ADD
}

kiln_kernel_prep_fn kiln__cpu_prep_fn(kiln_op op)
{
    pthread_once(&once, init);
    return op >= 0 && op < KILN_OP_COUNT ? prep[op] : NULL;
}

kiln_kernel_prep_fn kiln__cpu_ref_prep_fn(kiln_op op)
{
    pthread_once(&once, init);
    return op >= 0 && op < KILN_OP_COUNT ? ref_prep[op] : NULL;
}

kiln_kernel_prep_fn kiln__cpu_prep_node(const kiln_node *n)
{
    return kiln__lowbit_node(n) ? kiln__lowbit_prep : kiln__cpu_prep_fn(n->op);
}

/* The engine ISA bits (KILN_ISA_*) a GEMM family needs. Only the widest family is chosen by
 * every host that has its features, so only its blobs may replace their weights; a portable
 * layout (kiln__prep_portable, made by kiln__prep_alloc_any) replaces them on every host, and so
 * does GEMM_B of any family: a host of another family repacks it when it restores the layer
 * (kiln__prep_gemm_b_rehost). */
static uint32_t isa_of_kind(int kind)
{
    return kind == 3 ? 1u | 4u : kind == 2 ? 1u | 2u : 0u;
}

void *kiln__prep_alloc(uint32_t layout, uint32_t replaces, kiln_dtype dt, int ndims, const int64_t *dims,
                       uint64_t payload_bytes, void **blob, size_t *size)
{
    *blob = NULL;
    *size = 0;
    if (ndims < 0 || ndims > KILN_PREP_MAX_DIMS || payload_bytes > (uint64_t)kiln__max_tensor_bytes())
        return NULL;
    uint8_t *b = kiln__malloc(KILN_PREP_HDR_BYTES + (size_t)payload_bytes);
    if (!b)
        return NULL;
    kiln_prep_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, KILN_PREP_MAGIC, 8);
    h.layout = layout;
    h.gemm_kind = (uint32_t)kiln__sgemm_kind();
    h.engine_isa = isa_of_kind(kiln__sgemm_kind());
    h.replaces = h.gemm_kind == 3 || layout == KILN_PREP_GEMM_B ? replaces : 0;
    h.dtype = (int32_t)dt;
    h.ndims = (uint32_t)ndims;
    for (int i = 0; i < ndims; i++)
        h.dims[i] = dims[i];
    h.payload_bytes = payload_bytes;
    memcpy(b, &h, sizeof h);
    *blob = b;
    *size = KILN_PREP_HDR_BYTES + (size_t)payload_bytes;
    return b + KILN_PREP_HDR_BYTES;
}

void *kiln__prep_alloc_any(uint32_t layout, uint32_t replaces, kiln_dtype dt, int ndims, const int64_t *dims,
                           uint64_t payload_bytes, void **blob, size_t *size)
{
    uint8_t *p = kiln__prep_alloc(layout, replaces, dt, ndims, dims, payload_bytes, blob, size);
    if (p) {
        kiln_prep_hdr h;
        memcpy(&h, *blob, sizeof h);
        h.gemm_kind = 0;
        h.engine_isa = 0;
        h.replaces = replaces;
        memcpy(*blob, &h, sizeof h);
    }
    return p;
}

bool kiln__prep_portable(uint32_t layout)
{
    return layout == KILN_PREP_LOWBIT_W || layout == KILN_PREP_BGEMM_B || layout == KILN_PREP_BCONV_W ||
           layout == KILN_PREP_QGEMM_B || layout == KILN_PREP_QCONV_W;
}

bool kiln__prep_header(const void *blob, size_t size, kiln_prep_hdr *h)
{
    if (!blob || size < KILN_PREP_HDR_BYTES)
        return false;
    memcpy(h, blob, sizeof *h);
    return !memcmp(h->magic, KILN_PREP_MAGIC, 8) && h->ndims <= KILN_PREP_MAX_DIMS &&
           h->payload_bytes == size - KILN_PREP_HDR_BYTES;
}

bool kiln__prep_fits_op(kiln_op op, const kiln_prep_hdr *h)
{
    bool conv = op == KILN_OP_Conv || op == KILN_OP_FusedConv;
    bool gemm = op == KILN_OP_MatMul || op == KILN_OP_Gemm || op == KILN_OP_FusedMatMul || op == KILN_OP_FusedGemm;
    bool qconv = op == KILN_OP_QLinearConv || op == KILN_OP_ConvInteger || op == KILN_OP_QLinearConvAdd;
    bool qgemm = op == KILN_OP_QLinearMatMul || op == KILN_OP_MatMulInteger || op == KILN_OP_QGemm;
    uint32_t want = conv    ? KILN_PREP_WINO_F23
                    : gemm  ? KILN_PREP_GEMM_B
                    : qconv ? KILN_PREP_QCONV_W
                    : qgemm ? KILN_PREP_QGEMM_B
                            : 0;
    /* the weights input: 1, or 3 for QLinearConv / QLinearMatMul / QGemm */
    int wi = op == KILN_OP_QLinearConv || op == KILN_OP_QLinearConvAdd || op == KILN_OP_QLinearMatMul || op == KILN_OP_QGemm
                 ? 3
                 : 1;
    if (op == KILN_OP_Gather && h->layout == KILN_PREP_LOWBIT_W)   /* a 4-bit embedding table, input 0 (lowbit.h) */
        want = h->gemm_kind == 0 ? KILN_PREP_LOWBIT_W : 0, wi = 0;
    if (conv && h->layout == KILN_PREP_WINO_F43)   /* Winograd F(4x4, 3x3) filters (x86/wino.h) */
        want = KILN_PREP_WINO_F43;
    if (gemm && h->layout == KILN_PREP_BGEMM_B)   /* BF16 weights (qgemm_bf16.h) */
        want = KILN_PREP_BGEMM_B;
    if (conv && h->layout == KILN_PREP_BCONV_W)   /* BF16 conv weights (qgemm_bf16.h) */
        want = KILN_PREP_BCONV_W;
    if ((gemm || conv) && h->layout == KILN_PREP_LOWBIT_W)   /* FP8 / FP4 / INT4 weights (lowbit.h) */
        want = h->gemm_kind == 0 ? KILN_PREP_LOWBIT_W : 0;
    return want && h->layout == want && (h->replaces & ~(1u << wi)) == 0;
}

const void *kiln__prep_check(const kiln_kctx *ctx, uint32_t layout, kiln_dtype dt, int ndims, const int64_t *dims,
                             uint64_t payload_bytes)
{
    kiln_prep_hdr h;
    if (!ctx->prepared || !kiln__prep_header(ctx->prepared, ctx->prepared_size, &h))
        return NULL;
    uint32_t kind = (uint32_t)kiln__sgemm_kind();
    /* plain bytes (kiln__prep_alloc_any): any host; the BF16 / INT8 layouts were stamped with the
     * packing host's family before they were made portable, with the same payload */
    bool kind_ok = layout == KILN_PREP_LOWBIT_W ? h.gemm_kind == 0
                   : kiln__prep_portable(layout) ? h.gemm_kind == 0 || h.gemm_kind == kind
                                                 : h.gemm_kind == kind;
    if (h.layout != layout || !kind_ok || h.dtype != (int32_t)dt ||
        h.ndims != (uint32_t)ndims || h.payload_bytes != payload_bytes)
        return NULL;
    for (int i = 0; i < ndims; i++)
        if (h.dims[i] != dims[i])
            return NULL;
    const uint8_t *p = (const uint8_t *)ctx->prepared + KILN_PREP_HDR_BYTES;
    return (uintptr_t)p % 64 ? NULL : p;   /* packed panels are read with aligned loads */
}

kiln_status kiln__prep_missing(const kiln_kctx *ctx, int input)
{
    return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED,
                      "input %d is stored only in a packed layout that does not fit this layer (%s); rebuild the "
                      "engine on this machine",
                      input, ctx->prepared ? "prepared data of another layout, shape or CPU" : "no prepared data");
}

kiln_status kiln__prep_gemm_b_rehost(const void *blob, size_t size, void **out, size_t *out_size)
{
    *out = NULL;
    *out_size = 0;
    kiln_prep_hdr h;
    int host = kiln__sgemm_kind();
    if (!kiln__prep_header(blob, size, &h) || h.layout != KILN_PREP_GEMM_B || h.gemm_kind == (uint32_t)host ||
        h.gemm_kind < 1 || h.gemm_kind > 3 || h.dtype != (int32_t)KILN_DT_FLOAT32 || h.ndims != 4)
        return KILN_OK;
    int64_t K = h.dims[0], N = h.dims[1], nr = h.dims[2];
    if (K <= 0 || N <= 0 || nr <= 0 || nr > 64 || K > (int64_t)1 << 31 || N > (int64_t)1 << 31)
        return KILN_OK;
    /* exactly ceil(N/nr)*nr columns of K floats (so K x N floats fit in the blob), else not the
     * bpack layout: the kernels ignore it */
    uint64_t floats = h.payload_bytes / 4, width = (uint64_t)((N + nr - 1) / nr * nr);
    if (h.payload_bytes % 4 || floats % (uint64_t)K || floats / (uint64_t)K != width)
        return KILN_OK;
    /* op(B) [K, N] back out of the other family's panels: (k, p*nr + r) at p*K*nr + k*nr + r */
    const float *src = (const float *)((const uint8_t *)blob + KILN_PREP_HDR_BYTES);
    float *b = kiln__malloc(sizeof(float) * (size_t)(K * N));
    if (!b)
        return kiln__err(KILN_ERR_NOMEM, "out of memory repacking GEMM weights (%lld x %lld)", (long long)K,
                         (long long)N);
    for (int64_t n = 0; n < N; n++) {
        const float *col = src + (n / nr) * K * nr + n % nr;
        for (int64_t k = 0; k < K; k++)
            b[k * N + n] = col[k * nr];
    }
    int64_t dims[4] = {K, N, kiln__sgemm_nr(), h.dims[3]};
    float *dst = kiln__prep_alloc(KILN_PREP_GEMM_B, h.replaces, KILN_DT_FLOAT32, 4, dims,
                                  (uint64_t)kiln__sgemm_bpack_floats(K, N) * sizeof(float), out, out_size);
    bool ok = dst && kiln__sgemm_bpack(false, K, N, b, N, dst);
    kiln__free(b);
    if (!ok) {
        kiln__free(*out);
        *out = NULL;
        *out_size = 0;
        return kiln__err(KILN_ERR_NOMEM, "out of memory repacking GEMM weights (%lld x %lld)", (long long)K,
                         (long long)N);
    }
    return KILN_OK;
}
