/* INT8 GEMM core (u8 x s8 -> s32, AVX512-VNNI vpdpbusd) with a requantizing epilogue, and the
 * shared pieces of the quantized kernels (QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger,
 * com.microsoft QGemm). The kernel contract (rounding, fused activation, outputs) is in
 * docs/PRECISION.md, "INT8 kernels".
 *
 * Operands. C[M,N] = sum_k (A[m,k] - za[m]) * (B[k,n] - zb[n]) with
 *   - A the "row operand": M rows of kp = ceil4(K) bytes (row stride lda), zero padded after K;
 *   - B the "panel operand": N columns packed 16 per panel, 4 consecutive k per 32-bit lane:
 *     byte (k, n) at  (n / 16) * kp * 16 + (k / 4) * 64 + (n % 16) * 4 + k % 4,  zero padded.
 * vpdpbusd multiplies unsigned by signed bytes, so exactly one operand holds s8 values (a_s8 or
 * !a_s8). Any u8/s8 input fits either side: a value goes to the other signedness by x ^ 0x80
 * (x + 128 as u8, x - 128 as s8) with its zero point moved by the same 128, so x - z is
 * unchanged (kiln__qconv_bytes). Zero points are int32 in that stored domain; the products
 * a * b are summed exactly in int32, and the zero points are compensated with the per-row sums
 * of A and per-column sums of B:
 *   C = sum a b - zb[n] * (rowsum(A)[m] - K za[m]) - za[m] * colsum(B)[n].
 * Exact while |C| and the partial sums stay below 2^31 (K <= KILN_QGEMM_MAX_K). */
#ifndef KILN_BACKEND_CPU_QGEMM_H
#define KILN_BACKEND_CPU_QGEMM_H
#include "../kernel.h"
#include "epilogue.h"

#define KILN_QGEMM_MAX_K 32768   /* 255 * 128 * 32768 < 2^31: no int32 overflow anywhere */
#define KILN_QGEMM_NR 16          /* columns per panel */

static inline int64_t kiln__qgemm_kp(int64_t K) { return (K + 3) & ~(int64_t)3; }
/* bytes of a packed panel operand of N columns */
static inline int64_t kiln__qgemm_panel_bytes(int64_t K, int64_t N)
{
    return (N + KILN_QGEMM_NR - 1) / KILN_QGEMM_NR * KILN_QGEMM_NR * kiln__qgemm_kp(K);
}

typedef enum kiln_qout { KILN_QOUT_S32, KILN_QOUT_F32, KILN_QOUT_U8, KILN_QOUT_S8 } kiln_qout;

/* The epilogue of one output element of channel ch (a row or a column of C):
 *   S32: y = acc + bias[ch]
 *   F32: y = act((float)(acc + bias[ch]) * scale[ch])
 *   U8/S8, "linear" activations (none, Relu, Clip):
 *        y = clamp(rne((float)(acc + bias) * mult[ch]), lo - zp, hi - zp) + zp
 *   U8/S8, other activations:
 *        y = clamp(rne(act((float)(acc + bias) * scale[ch]) * inv_ys), lo - zp, hi - zp) + zp
 * where scale = a_scale * w_scale[ch] (times alpha), mult = scale / y_scale, and lo/hi are the
 * saturation bounds narrowed by the activation (kiln__qepi_init). */
typedef struct kiln_qepi {
    kiln_qout out;
    bool ch_row;             /* channel = row of C (conv: output channel), else column */
    const int32_t *bias;     /* per channel, or NULL */
    const float *scale;      /* per channel (F32 and non-linear activations) */
    const float *mult;       /* per channel (U8/S8, linear activations) */
    kiln_act act;
    bool lin;                /* quantized output computed with mult (act none/Relu/Clip) */
    float inv_ys;
    int32_t zp, lo, hi;
    /* kiln's QLinearConvAdd with one rounding (kiln_res_once: cpu/qadd.h): kiln__qepi_qr adds a residual byte r as
     * t = fmaf((float)(r - res_zp), res_k, t) before the clamp (res_k = R_scale / C_scale; lin only); the GEMM's
     * epilogues (kiln__qepi_store, the VNNI tile) read r of element (i, j) of C at res[i * res_ld + j] where res is set
     * (u8 / s8 outputs) */
    float res_k;
    int32_t res_zp;
    const uint8_t *res;
    int64_t res_ld;
    bool res_s8;
} kiln_qepi;

/* Clears e, then fills out, act, lin, inv_ys, zp, lo, hi for an output of kind `out` (U8/S8:
 * zero point zp, scale ys, saturation bounds [lo, hi], which a 16-bit output of the references
 * widens) with activation act. */
void kiln__qepi_init(kiln_qepi *e, kiln_qout out, const kiln_act *act, float ys, int32_t zp, int32_t lo, int32_t hi);
/* The whole epilogue of a quantized node: output dtype odt (FLOAT32, INT32, or the quantized
 * type UINT8/INT8/UINT16/INT16 with y_scale ys and zero point yz, tensors, yz may be NULL), nch
 * channels along rows (ch_row) or columns, scale[c] = alpha * a_scale * w_scale[c] (w_scale
 * has 1 or nch entries), the node's kiln_act activation. *buf (free with kiln__free) holds the
 * per-channel arrays. */
kiln_status kiln__qepi_setup(const kiln_kctx *ctx, kiln_qepi *e, kiln_dtype odt, bool ch_row, int64_t nch,
                             float a_scale, const kiln_tensor *w_scale, float alpha, const kiln_tensor *ys,
                             const kiln_tensor *yz, float **buf);
/* The epilogue of one element (the scalar definition the vector code matches). */
int32_t kiln__qepi_q(const kiln_qepi *e, int32_t acc, int64_t ch);   /* U8/S8/S32 */
/* U8/S8 with e->lin: kiln__qepi_q with the residual byte r added before the rounding (res_k, res_zp above) */
int32_t kiln__qepi_qr(const kiln_qepi *e, int32_t acc, int64_t ch, int32_t r);
/* U8/S8 with e->lin: kiln__qepi_q with the float t2 added before the rounding (QLinearConvSum: its second
 * convolution's requantizing product, ref/k_quant.c): q_round(t + t2), t = (float)(acc + bias) * mult rounded first */
int32_t kiln__qepi_qt(const kiln_qepi *e, int32_t acc, int64_t ch, float t2);
/* Node n's kiln_res_once where it is a QLinearConvAdd (1: one rounding, cpu/qadd.h; 0: not one; anything else is
 * malformed, which kiln__qconv_add reports) */
static inline int64_t kiln__qconv_once(const kiln_node *n)
{
    return n->op == KILN_OP_QLinearConvAdd ? kiln__attr_i(n, "kiln_res_once", 0) : 0;
}
/* A one-rounding QLinearConvAdd's residual (kiln_res_once, ctx's node; ref/k_quant.c): R (input 9: 8-bit, the output's
 * nd dims odims), R_scale (10: float32, finite, > 0), R_zero_point (11: absent or a scalar of R's type), the output
 * quantized (odt) with a linear activation (e->lin) and C_scale ys: e->res_k, e->res_zp set, *res = R; else a clean
 * error */
kiln_status kiln__qconv_once_res(kiln_kctx *ctx, kiln_qepi *e, kiln_dtype odt, int nd, const int64_t *odims, float ys,
                                 const kiln_tensor **res);
float kiln__qepi_f(const kiln_qepi *e, int32_t acc, int64_t ch);     /* F32 */
/* Stores element (i, j) of C computed from acc. */
void kiln__qepi_store(const kiln_qepi *e, void *c, int64_t ldc, int64_t i, int64_t j, int32_t acc);

/* Packs columns [j0, j0 + n) (n <= KILN_QGEMM_STRIP) of the panel operand into dst (panel
 * layout, ceil(n / 16) panels; columns >= n may hold anything: they are computed, not stored)
 * and, when sum != NULL, their column sums (sum[c] for column j0 + c). Called concurrently
 * from several threads. */
typedef void (*kiln_qpackb_fn)(void *ctx, int64_t j0, int64_t n, uint8_t *dst, int32_t *sum);

typedef struct kiln_qgemm {
    int64_t M, N, K;
    const uint8_t *a;        /* row operand, lda >= kp bytes per row */
    int64_t lda;
    bool a_s8;               /* A holds s8 (then B holds u8) */
    const int32_t *a_sum;    /* per-row sums of A's stored values (NULL: B's zero points are all 0) */
    const int32_t *a_zp;     /* per-row zero points (stored domain), or NULL: a_zp0 for all */
    int32_t a_zp0;
    const uint8_t *b;        /* panel operand (kiln__qpack_panels); ignored with packb */
    const int32_t *b_sum;    /* per-column sums of B, or NULL: A's zero points are all 0 */
    const int32_t *b_zp;     /* per-column zero points, or NULL: b_zp0 */
    int32_t b_zp0;
    kiln_qpackb_fn packb;    /* or B packed strip by strip by the caller (implicit im2col) */
    void *packb_ctx;
    bool packb_sums;         /* with packb: the packer makes column sums (A's zero points not all 0) */
    void *c;                 /* output: int32 / float / u8 / s8 per epi.out */
    int64_t ldc;             /* in elements */
    kiln_qepi epi;
} kiln_qgemm;

/* C = epi(A x B) on up to nthreads threads (AVX512-VNNI micro-kernel when the host has it,
 * portable C otherwise). Fails only when out of memory for packb's strip buffers. */
kiln_status kiln__qgemm(kiln_pool *pool, int nthreads, const kiln_qgemm *g);
/* The same, one thread, scalar loops, B packed (no packb): the tests' reference for the core. */
void kiln__qgemm_ref(const kiln_qgemm *g);
bool kiln__qgemm_vnni_available(void);
/* The tile kiln__qgemm runs: 3 AMX (x86/qgemm_amx.c), 2 the AVX512-VNNI one, 1 the AVX2 one (x86/qgemm_avx2.c),
 * 0 the portable C tile; the widest the host has, at most the cap (tests lower it; default 3). With AMX a GEMM
 * where the tiles do not pay (kiln__amx_pays: few k over few rows) runs the VNNI tile, unless the cap is 4 (tests:
 * the AMX tile for every shape). */
int kiln__qgemm_isa(void);
void kiln__qgemm_set_isa_cap(int cap);

/* ---- scheduler (also used by the BF16 GEMM): C cut into strips (kiln__sched_width) and blocks of rows, tasks in
 * strip order (a strip's row blocks together, sharing its packed panels); slot i of nt (at most nthreads) runs the
 * i-th contiguous share of the tasks. Contiguous, not taken one at a time: two threads taking alternate strips each
 * streamed every other strip of the weights and wrote 48-byte pieces of the same output lines (INT8 outputs); in
 * one process against that (bench/env_ab, 2 threads, 40-60 pairs) INT8 PP-OCRv4 det 0.902, rec 0.958, ResNet-50
 * 0.933, BERT-base 0.929; BF16 det 0.847, rec 0.813, ResNet-50 0.979, BERT-base 0.973. ---- */
typedef void (*kiln_strip_task_fn)(void *ctx, int64_t slot, int64_t strip, int64_t i0, int64_t i1);
typedef struct kiln_sched {
    int64_t M;
    int nt;                   /* slots: 0 .. nt-1 */
    int64_t tm, mb, ntask;    /* row blocks per strip, rows per block, tasks */
} kiln_sched;
/* width: the strip's columns (kiln__sched_width) */
void kiln__sched_plan(kiln_sched *s, int64_t M, int64_t N, int64_t K, int nthreads, int64_t width);
void kiln__sched_run(kiln_pool *pool, const kiln_sched *s, kiln_strip_task_fn fn, void *ctx);

/* ---- packing ---- */

/* dst[i] = src[i] ^ 0x80 when flip (moves a byte to the other signedness), else a copy. */
void kiln__qconv_bytes(uint8_t *dst, const uint8_t *src, int64_t n, bool flip);
/* Packs the K x N matrix with element (k, n) at src[k*sk + n*sn] into the panel layout (flip:
 * x ^ 0x80); dst has kiln__qgemm_panel_bytes(K, N) bytes. */
void kiln__qpack_panels(const uint8_t *src, int64_t sk, int64_t sn, int64_t K, int64_t N, bool flip, uint8_t *dst);
/* One group of 4 k (k0 % 4 == 0): rows r = 0..3 at rows + r*ld, npanels*16 columns each, xored
 * with x, into the panels at dst (panel stride kp*16 bytes). */
void kiln__qpack_group4(const uint8_t *rows, int64_t ld, int64_t npanels, int64_t kp, int64_t k0, uint8_t x,
                        uint8_t *dst);
/* The same with the 4 rows at rows[0..3]. */
void kiln__qpack_group4p(const uint8_t *const *rows, int64_t npanels, int64_t kp, int64_t k0, uint8_t x, uint8_t *dst);
/* Per-column sums of a packed panel operand of N columns; s8: it holds s8 values. */
void kiln__qpanel_sums(const uint8_t *p, int64_t K, int64_t N, bool s8, int32_t *sum);
/* Copies M rows of K bytes (row stride ld) into rows of kp bytes (zero padded; flip: x ^ 0x80)
 * and (sum != NULL) their sums; s8: the stored values are s8. */
void kiln__qpack_rows(const uint8_t *src, int64_t ld, int64_t M, int64_t K, bool flip, bool s8, uint8_t *dst,
                      int32_t *sum);

/* AVX512-VNNI pieces (x86/qgemm_vnni.c): the micro-kernel over an m x ncols tile at (i0, j0)
 * (m <= 8, ncols <= 16 nv, nv <= 3) whose panels start at bs (sums bsum[c] for column j0 + c),
 * storing through the epilogue; column sums of whole panels. */
#define KILN_QGEMM_MR 8
#define KILN_QGEMM_NV 3
#define KILN_QGEMM_STRIP (KILN_QGEMM_NR * KILN_QGEMM_NV)
/* The scheduler's strip for the INT8 / BF16 GEMMs' tile isa: KILN_QGEMM_STRIP columns, twice that for the AMX tiles
 * (3), whose six panels run as three 2 x 2 tile pairs where three panels left one to the 4 x 1 tiles (an A tile
 * loaded per tile product): bench/env_ab, 2 threads, BERT-base int8 / bf16 0.951 / 0.958, ResNet-50 0.951 / 0.947,
 * PP-OCRv4 rec int8 0.964, det 0.981 / 0.974. A caller's packer still fills KILN_QGEMM_STRIP columns at a time. */
static inline int64_t kiln__sched_width(int isa) { return isa == 3 ? 2 * KILN_QGEMM_STRIP : KILN_QGEMM_STRIP; }
void kiln__qgemm_tile_vnni(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, int m, int64_t j0,
                           int nv, int ncols);
/* x86/qgemm_amx.c: rows [i0, i1) x the strip's ncols (<= 48) columns at j0 on AMX tiles, the same outputs as the
 * VNNI tile's; only where kiln__cpu_has(KILN_CPU_AMX_INT8) */
void kiln__qgemm_rows_amx(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, int64_t i1,
                          int64_t j0, int ncols);
void kiln__qpanel_sums_vnni(const uint8_t *p, int64_t kp, int64_t npanels, bool s8, int32_t *sum);
/* AVX2 + FMA (x86/qgemm_avx2.c): the same contract as kiln__qgemm_tile_vnni with nv implied by ncols. */
void kiln__qgemm_tile_avx2(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, int m, int64_t j0,
                           int ncols);
/* The epilogue of n elements of channel ch (acc[j] -> column j of dst), and the depthwise step
 * acc[j] += (row[j] - zx) * wv over n bytes (s8: signed) with AVX-512 (the VNNI kernels' hosts). */
void kiln__qepi_row_vnni(const kiln_qepi *e, const int32_t *acc, int64_t n, int64_t ch, void *dst);
void kiln__qdw_row_vnni(int32_t *acc, const uint8_t *row, bool s8, int64_t n, int32_t zx, int32_t wv);
/* One depthwise plane through the float32 depthwise rows (x86/qdw_f32.c; hosts with the VNNI kernels): p's band of
 * (x - zx) in buf (p->band_rows x p->Wp floats), wk the plane's kh * kw weights (w - zw) as floats, frow (p->band x
 * Wo floats: a band's sums) scratch; exact while kh * kw <= KILN_QDW_F32_MAX_TAPS (every partial sum an integer below
 * 2^24). Outputs of channel c through e into yp (osz bytes an element). */
#define KILN_QDW_F32_MAX_TAPS 258
struct kiln_conv2d;
void kiln__qdw_plane_f32(const struct kiln_conv2d *p, const uint8_t *xp, bool s8, int32_t zx, const float *wk,
                         float *buf, float *frow, const kiln_qepi *e, int64_t c, uint8_t *yp, size_t osz);

/* QLinearConv / ConvInteger geometry (ONNX Conv attributes) of x [N, C, spatial] and
 * w [M, C/group, kernel] (ref/k_quant.c, shared by the reference and the fast kernels). */
#define KILN_QC_MAX_SP (KILN_MAX_DIMS - 2)
typedef struct kiln_qconv_geom {
    int nsp;                     /* spatial rank */
    int64_t N, C, M, group;
    int64_t in[KILN_QC_MAX_SP], k[KILN_QC_MAX_SP], out[KILN_QC_MAX_SP];
    int64_t stride[KILN_QC_MAX_SP], dil[KILN_QC_MAX_SP], pad_b[KILN_QC_MAX_SP];
} kiln_qconv_geom;
kiln_status kiln__qconv_geom(const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w, kiln_qconv_geom *g);

/* A 2-D convolution's padded input split into its sh x sw stride phases (phase (qy, qx) holds the
 * padded pixels (y*sh + qy, x*sw + qx)), so that tap (ky, kx) of output pixel (oy, ox) is element
 * off[k] + oy*wq + ox of one phase plane: the im2col matrix over "virtual" pixels oy*wq + ox
 * (ox < wq; columns ox >= Wo are computed and dropped) reads contiguous runs (the INT8 and BF16
 * convolutions). Buffer: sh*sw*cpg planes of plane = hq*wq elements, [phase][channel][hq][wq],
 * plus slack (kiln__conv_phases_elems). */
typedef struct kiln_conv_phases {
    int64_t sh, sw, hq, wq, plane;
    bool used[16];                  /* phases some tap reads */
} kiln_conv_phases;
/* Fills p and off[k] for k = (c, ky, kx), c < cpg; false when sh * sw > 16. */
bool kiln__conv_phases_init(const kiln_qconv_geom *g, int64_t cpg, kiln_conv_phases *p, int64_t *off);
/* Elements of the buffer: the planes, then slack for strips of `strip` columns read past a run. */
static inline int64_t kiln__conv_phases_elems(const kiln_conv_phases *p, int64_t cpg, int64_t strip)
{
    return p->sh * p->sw * cpg * p->plane + p->wq + 2 * strip;
}
/* Sets n buffer elements from dst_off to the padding value (n < 0: nothing), then copies them:
 * n input elements (src_off, src_off + sw, ...: a row of x's layout [cpg][H][W]) to buffer
 * elements dst_off .. dst_off + n - 1, converted as the caller needs. */
typedef struct kiln_phase_fill {
    void (*clear)(void *ctx, int64_t dst_off, int64_t n);
    void (*copy)(void *ctx, int64_t dst_off, int64_t src_off, int64_t n, int64_t sw);
    void *ctx;
} kiln_phase_fill;
/* The whole buffer: padding everywhere, the real pixels of the used phases copied; channels are
 * shared among up to nthreads threads of pool. */
void kiln__conv_phases_fill(const kiln_conv_phases *p, const kiln_qconv_geom *g, int64_t cpg, const kiln_phase_fill *f,
                            kiln_pool *pool, int nthreads);

/* ---- the quantized kernels (qgemm_ops.c), registered over the references by x86/qgemm_vnni.c ---- */

/* The "kiln_act" / "kiln_act_alpha" / "kiln_act_beta" attributes of a quantized node (the fused
 * activation applied in float before requantization; kind NONE when absent). */
kiln_status kiln__qact_from_node(const kiln_kctx *ctx, kiln_act *a);
/* The same from attributes ATTR, ATTR_alpha, ATTR_beta (QLinearConvAdd's add: kiln_res_act) */
kiln_status kiln__qact_from_attr(const kiln_kctx *ctx, const char *attr, kiln_act *a);

kiln_status kiln__k_qlinearconv_fast(kiln_kctx *ctx);
kiln_status kiln__k_convinteger_fast(kiln_kctx *ctx);
kiln_status kiln__k_qlinearmatmul_fast(kiln_kctx *ctx);
kiln_status kiln__k_matmulinteger_fast(kiln_kctx *ctx);
kiln_status kiln__k_qgemm_fast(kiln_kctx *ctx);
/* QuantizeLinear of float32 and DequantizeLinear of uint8 / int8 to float32, with scalar parameters
 * (x86/quant_avx512.c, AVX-512F; registered in the same table): every element equal to the
 * reference's; other cases run the reference. */
kiln_status kiln__k_quantize_fast(kiln_kctx *ctx);
kiln_status kiln__k_dequantize_fast(kiln_kctx *ctx);
/* kiln's QLookup: checks X and the table T and places Y (ref/k_quant.c); the AVX-512 VBMI kernel (x86/quant_avx512.c:
 * 64 bytes a step through two two-register byte permutes) */
kiln_status kiln__qlookup_check(kiln_kctx *ctx, const kiln_tensor **x, const kiln_tensor **t);
kiln_status kiln__k_qlookup_fast(kiln_kctx *ctx);

/* Build-time packing of a quantized layer's constant weights (kernel.h): QLinearConv /
 * ConvInteger (weights as rows), QLinearMatMul / MatMulInteger / QGemm (constant B as panels). */
kiln_status kiln__qprep_conv(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                             size_t *size);
kiln_status kiln__qprep_matmul(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                               size_t *size);

#endif
