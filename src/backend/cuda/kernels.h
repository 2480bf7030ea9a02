/* kiln's own CUDA kernels (kernels.cu), launched on a stream from the module's C code. All sizes
 * in elements; every launcher returns cudaGetLastError() after its launch. */
#ifndef KILN_BACKEND_CUDA_KERNELS_H
#define KILN_BACKEND_CUDA_KERNELS_H
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

#define CUK_MAX_DIMS 8

/* Elementwise math shared by the unary kernels and the fused epilogues. */
enum cuk_act {
    CUK_IDENTITY = 0, CUK_RELU, CUK_CLIP, CUK_LEAKYRELU, CUK_SIGMOID, CUK_HARDSIGMOID, CUK_HARDSWISH, CUK_SILU,
    CUK_GELU, CUK_GELU_TANH, CUK_TANH, CUK_EXP, CUK_LOG, CUK_SQRT, CUK_NEG, CUK_ABS, CUK_ERF, CUK_RECIPROCAL,
    CUK_FLOOR, CUK_CEIL, CUK_ELU, CUK_SOFTPLUS, CUK_SIN, CUK_COS, CUK_SELU, CUK_ROUND, CUK_SIGN,
    CUK_HARDSWISH_AFFINE,   /* a * HardSwish(x) + b */
    CUK_ACT_COUNT
};
/* Float storage of an activation: float32, FP16, BF16 (arithmetic is float32 in every kernel). */
enum cuk_fdt { CUK_F32 = 0, CUK_F16 = 1, CUK_BF16 = 2 };
enum cuk_binop { CUK_ADD = 0, CUK_SUB, CUK_MUL, CUK_DIV, CUK_POW, CUK_MAX, CUK_MIN, CUK_BINOP_COUNT };

/* An output shape and, per operand, its element strides over it (0 where broadcast). */
typedef struct cuk_shape {
    int ndim;
    int64_t dims[CUK_MAX_DIMS];
    int64_t str[3][CUK_MAX_DIMS];
} cuk_shape;

/* A 2-D convolution for cuk_conv_smallc (kernels_conv.cu): input [n, c, h, w] at element strides xs*, filter
 * [k, c, r, s] given as [k][kp] (KCRS rows zero-padded to kp, a multiple of 32, <= cuk_conv_smallc_max_kp()),
 * output [n, k, p, q] in NHWC (y_nhwc) or NCHW, stride s*, begin pad p*, dilation d*. */
typedef struct cuk_conv_desc {
    int n, c, h, w, k, r, s, p, q, sh, sw, ph, pw, dh, dw, kp, y_nhwc, relu;
    int v4;   /* cuk_conv_smallc: x is cuk_conv_to_nhwc4's [n][h][w][4] copy, w cuk_conv_w_rs4's [k][(r, s, c < 4)] */
    int64_t xsn, xsc, xsh, xsw;
} cuk_conv_desc;
/* y = relu?(conv(x, w) + bias + res): x in storage fdt_x (float32 or half), w / res / y in fdt_y (FP16 or
 * BF16), bias float32 (bias, res may be NULL); FP32 accumulation on tensor cores. */
cudaError_t cuk_conv_smallc(int fdt_x, int fdt_y, const void *x, const void *w, const float *bias, const void *res,
                            void *y, const cuk_conv_desc *d, cudaStream_t s);
int cuk_conv_smallc_max_kp(void);
/* For c <= 4: x (by d's x strides, storage fdt_x) as [n][h][w][4] in fdt_y, channels past c zero; the filter
 * [k][c][r][s] in fdt as [k][kp] ordered (r, s, c < 4), zeros past c and past r * s * 4. */
cudaError_t cuk_conv_to_nhwc4(int fdt_x, int fdt_y, const void *x, void *y, const cuk_conv_desc *d, cudaStream_t s);
cudaError_t cuk_conv_w_rs4(int fdt, const void *w, void *w4, const cuk_conv_desc *d, cudaStream_t s);
/* A network's stem and its max pool as one kernel (kernels_stem.cu, the FusedConvPool layer): y = maxpool 3x3 stride 2
 * pad 1 of relu?(conv 7x7 stride 2 pad 3 (x, w) + bias) with x either the float32 input itself by d's x strides
 * (fdt_x CUK_F32) or cuk_conv_to_nhwc4's [n][h][w][4] copy in fdt (fdt_x == fdt: FP16 / BF16), w cuk_stem_weights'
 * [k][7][8][4] copy, bias float32 (may be NULL), d->k a multiple of 64 and d->p, d->q the convolution's output size;
 * y NHWC [n][po][qo][k]: in fdt (q->kind 0) or QuantizeLinear's bytes of the half value (clamp(rint(v / scale) + zp),
 * inv = kq_inv(scale)) as uint8 (1) or int8 (2). flags: CUK_STEM_MMA runs mma.sync where wgmma would (sm_90),
 * CUK_STEM_TILE the 7 x 7 pooled-pixel tiles where the row kernel would (sm_90, a float32 input <= 224 wide),
 * CUK_STEM_LOCK the row kernel's two warpgroups in lockstep (else the second lags half a step).
 * cuk_stem_pool_fits: the geometry it takes. */
typedef struct cuk_stem_q {
    int kind, zp;
    float scale, inv;
} cuk_stem_q;
enum { CUK_STEM_MMA = 1, CUK_STEM_TILE = 2, CUK_STEM_LOCK = 4 };
bool cuk_stem_pool_fits(const cuk_conv_desc *d, int po, int qo);
int cuk_stem_kp(void);   /* the reordered filter's row: 7 * 8 * 4 elements */
cudaError_t cuk_stem_weights(int fdt, const void *w, void *w8, int k, int c, cudaStream_t s);
cudaError_t cuk_stem_pool(int fdt, int fdt_x, const void *x, const void *w8, const float *bias, void *y,
                          const cuk_conv_desc *d, int po, int qo, const cuk_stem_q *q, int flags, cudaStream_t s);
/* FP8 convolution (kernels_conv_fp8.cu): y = relu?(scale[0] * conv(x, w) + bias + res) with x E4M3 NHWC, w E4M3
 * KRSC, C a multiple of 16, K even, y / res in fdt_y (NHWC: y_nhwc must be set; d->kp unused); yq (may be NULL):
 * also E4M3(value * inv[0]), saturating; y NULL: only yq written (an output held in E4M3). resq (res NULL): the
 * residual held in E4M3, added as resq x rs[0]. scale, inv, rs: device scalars. */
cudaError_t cuk_conv_fp8(int fdt_y, const uint8_t *x, const uint8_t *w, const float *scale, const float *bias,
                         const void *res, void *y, const float *inv, uint8_t *yq, const uint8_t *resq, const float *rs,
                         const cuk_conv_desc *d, cudaStream_t s);
/* The same on Hopper's wgmma (kernels_conv_fp8_wg.cu), tile configuration cfg (0 .. cuk_conv_fp8_wg_configs() - 1);
 * cudaErrorNotSupported on a GPU other than sm_90. */
cudaError_t cuk_conv_fp8_wg(int cfg, int fdt_y, const uint8_t *x, const uint8_t *w, const float *scale,
                            const float *bias, const void *res, void *y, const float *inv, uint8_t *yq,
                            const uint8_t *resq, const float *rs, const cuk_conv_desc *d, cudaStream_t s);
int cuk_conv_fp8_wg_configs(void);
/* The same for a 1x1 stride-1 convolution (a GEMM) with TMA copies by a producer warp and persistent blocks
 * (kernels_conv_fp8_tma.cu), configuration cfg (0 .. cuk_conv_fp8_tma_configs() - 1); cudaErrorNotSupported on a GPU
 * other than sm_90, without the driver's tensor-map encoder, or for operands TMA cannot address (16-byte alignment). */
cudaError_t cuk_conv_fp8_tma(int cfg, int fdt_y, const uint8_t *x, const uint8_t *w, const float *scale,
                             const float *bias, const void *res, void *y, const float *inv, uint8_t *yq,
                             const uint8_t *resq, const float *rs, const cuk_conv_desc *d, cudaStream_t s);
int cuk_conv_fp8_tma_configs(void);

/* Unary kernels and fused epilogues take fdt (enum cuk_fdt): x, y, res in that storage; bias and
 * LayerNorm scale / bias are float32. */
cudaError_t cuk_unary(int fdt, int act, const void *x, void *y, int64_t n, float alpha, float beta, cudaStream_t s);
/* y = a op b; sh == NULL: same shape, n elements. dtype: 0 float32, 1 int64, 2 int32, 3 FP16, 4 BF16. */
cudaError_t cuk_binary(int dtype, int op, const void *a, const void *b, void *y, int64_t n, const cuk_shape *sh,
                       cudaStream_t s);
/* y = cond ? a : b (by elem size 2, 4 or 8), broadcast by sh (str[0] cond, [1] a, [2] b). */
cudaError_t cuk_where(size_t es, const bool *cond, const void *a, const void *b, void *y, int64_t n,
                      const cuk_shape *sh, cudaStream_t s);
/* Casts between float32 (1), uint8 (2), int8 (3), int32 (6), int64 (7), bool (9), float16 (10), bfloat16 (16)
 * (ONNX ids). */
cudaError_t cuk_cast(int src_dt, const void *x, int dst_dt, void *y, int64_t n, cudaStream_t s);
/* y[i] = x[base + sum_d idx_d(i) * sh->str[0][d]] over sh's dims: Transpose, Slice, Expand. */
cudaError_t cuk_strided_copy(size_t es, const void *x, int64_t base, void *y, int64_t n, const cuk_shape *sh,
                             cudaStream_t s);
/* y[o, j, i] = x[o, idx[j], i] (negative indices wrap; out of range indices give 0 and set *bad). */
cudaError_t cuk_gather(size_t es, const void *x, const void *idx, bool idx64, void *y, int64_t outer,
                       int64_t axis_len, int64_t n_idx, int64_t inner, int *bad, cudaStream_t s);
/* Softmax over cols of each row of x (rows x cols; inner stride 1) after x * scale. */
cudaError_t cuk_softmax_rows(int fdt, const void *x, void *y, int64_t rows, int64_t cols, cudaStream_t s);
/* Softmax over the axis of [outer, axis, inner] (inner > 1). */
cudaError_t cuk_softmax_strided(int fdt, const void *x, void *y, int64_t outer, int64_t axis, int64_t inner,
                                cudaStream_t s);
/* Attention scores (in place): row r of [lead..., S, Sk] = softmax(row * scale (+ mask | masked fill)).
 * sh: the score dims and str[0] the mask's strides (0 = broadcast); mask NULL = none.
 * kind 1 additive float mask, 2 keep where true (bool), 3 fill where true (bool). */
cudaError_t cuk_attn_softmax(int fdt, void *sc, float *ws, int64_t rows, int64_t cols, float scale, const void *mask,
                             int kind, float fill, const cuk_shape *sh, cudaStream_t s);
/* Fused attention (kernels_attn.cu): per lead index (batch, head, ...) y = softmax(q kt * scale (+ mask | fill)) v
 * with FP32 accumulation, every operand read through strides: element (lead l, row s, col d) of Q at
 * q + sum l_i * ql[i] + s * qs + d * qd; K's key j, dim d at k + ... + j * ks + d * kd (K, not K^T); V's key j,
 * col e at v + ... + j * vs + e * vd; Y's row s, col e at y + ... + s * ys + e * yd. Elements in FP16 / BF16
 * (fdt). mask / sh as for cuk_attn_softmax over the logical score dims [lead..., S, Sk]. _fits: whether it
 * takes these sizes (D, Dv <= 128). */
typedef struct cuk_attn_io {
    const void *q, *k, *v;
    void *y;
    int nlead;
    int64_t lead[CUK_MAX_DIMS];
    int64_t ql[CUK_MAX_DIMS], kl[CUK_MAX_DIMS], vl[CUK_MAX_DIMS], yl[CUK_MAX_DIMS];
    int64_t qs, qd, ks, kd, vs, vd, ys, yd;
    int64_t S, Sk, D, Dv;
} cuk_attn_io;
bool cuk_attn_fused_fits(int fdt, const cuk_attn_io *io);
typedef struct cuk_attn_opts {
    int grid;            /* 0: as many blocks as fit the GPU at once, each walking jobs (16-128 query rows of one
                          * lead index) with the next one's loads in flight; > 0 at most that many; < 0 one a job */
    bool scatter;        /* Y written from registers, two values at a time (else, where _feeds, 16-byte pieces) */
    uint8_t *feed;       /* or NULL: also write y's E4M3 copy (element i of y's buffer at feed[i], the bytes of
                          * cuk_fp8_quant with feed_scale); needs cuk_attn_fused_feeds and !scatter */
    float feed_scale;
} cuk_attn_opts;
/* whether the kernel writes Y as 16-byte pieces (unit inner stride, Dv and Y's strides multiples of 8, aligned) and
 * so can write an FP8 feed */
bool cuk_attn_fused_feeds(const cuk_attn_io *io);
cudaError_t cuk_attn_fused(int fdt, const cuk_attn_io *io, float scale, const void *mask, int kind, float fill,
                           const cuk_shape *sh, const cuk_attn_opts *o, cudaStream_t s);
/* Weight-only 4-bit GEMM (kernels_fp4.cu): y[M, N] (FP16 or BF16, out_fdt) = a[M, K] (FP16, row stride lda)
 * times the transpose of w, N rows of ceil(K / 2) packed bytes (the even element in the low nibble) with
 * one scale per `block` elements of a row at `scales` (NVFP4: E4M3 bytes, times ts; MXFP4: E8M0 bytes;
 * INT4: FP16), each weight decoded to FP16 as the CPU emulation does (docs/PRECISION.md). */
enum cuk_qfmt { CUK_Q_NVFP4 = 0, CUK_Q_MXFP4 = 1, CUK_Q_INT4 = 2 };
cudaError_t cuk_fp4_gemm(int out_fdt, const void *a, int64_t lda, int64_t M, int64_t K, const uint8_t *w,
                         const void *scales, int fmt, int64_t block, float ts, void *y, int64_t N, float *ws,
                         int splits, cudaStream_t s);
/* Parts of K that cuk_fp4_gemm should split a grid of few output tiles into (small M): > 1 wants ws, M x N
 * float32 (the parts' sums, added atomically: their order varies from run to run). */
int cuk_fp4_gemm_splits(int64_t M, int64_t N, int64_t K);
/* Gather over such a packed table (rows x K, axis 0): y[j, :] (float32, FP16 or BF16 storage, out_fdt) = row
 * idx[j] (n_idx int64 when idx64, else int32) decoded as cuk_fp4_gemm decodes its weights (FP16 values); negative
 * indices wrap, out of range ones give 0 and set *bad. */
cudaError_t cuk_fp4_gather(int out_fdt, const uint8_t *w, const void *scales, int fmt, int64_t block, float ts,
                           int64_t rows, int64_t K, const void *idx, bool idx64, int64_t n_idx, void *y, int *bad,
                           cudaStream_t s);
/* True when cuk_attn_softmax needs no ws (rows x cols float32 scratch) for these sizes. */
bool cuk_attn_softmax_fits(int64_t rows, int64_t cols);
/* LayerNorm over cols: y = (x - mean) / sqrt(var + eps) * scale + bias (bias may be NULL). */
/* q (may be NULL): the E4M3 bytes of y as stored too, scale qs (cuk_fp8_quant's rounding; cuda_fp8.c "feeds") */
cudaError_t cuk_layernorm(int fdt, const void *x, const float *scale, const float *bias, void *y, int64_t rows,
                          int64_t cols, float eps, uint8_t *q, float qs, cudaStream_t s);
/* 2-D pooling over NCHW planes (nc planes of h x w). kind 0 max, 1 average. */
typedef struct cuk_pool {
    int kind;
    int64_t nc, h, w, oh, ow;
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int peh, pew;             /* end pads (count_include_pad's window) */
    bool count_include_pad;
    int64_t c;                /* NHWC: x is [nc / c, h, w, c] (0: NCHW planes) */
} cuk_pool;
/* q (may be NULL): the E4M3 bytes of y as stored too, scale qs (a feed, cuda_fp8.c); only where cuk_pool2d_feeds */
cudaError_t cuk_pool2d(int fdt, const cuk_pool *p, const void *x, void *y, uint8_t *q, float qs, cudaStream_t s);
bool cuk_pool2d_feeds(int fdt, const cuk_pool *p, const void *x, const void *y);
cudaError_t cuk_global_avgpool(int fdt, const void *x, void *y, int64_t nc, int64_t hw, cudaStream_t s);
/* The same over NHWC data [n, hw, c] (y: [n, c]), through float partial sums in scratch (device memory of
 * cuk_global_avgpool_nhwc_scratch bytes; n at most 65535). */
size_t cuk_global_avgpool_nhwc_scratch(int64_t n, int64_t c, int64_t hw);
cudaError_t cuk_global_avgpool_nhwc(int fdt, const void *x, void *y, int64_t n, int64_t c, int64_t hw, float *scratch,
                                    cudaStream_t s);
/* y = act(y + bias[(i / inner) % channels] + res[i]) for n elements; bias / res may be NULL. */
cudaError_t cuk_epilogue(int fdt, void *y, int64_t n, int64_t channels, int64_t inner, const float *bias,
                         const void *res, int act, float alpha, float beta, cudaStream_t s);
/* cuk_epilogue, and q (may be NULL): the E4M3 bytes of y as stored, scale qs (as cuk_layernorm's q) */
cudaError_t cuk_epilogue_q(int fdt, void *y, int64_t n, int64_t channels, int64_t inner, const float *bias,
                           const void *res, int act, float alpha, float beta, uint8_t *q, float qs, cudaStream_t s);
/* act(x + bias[column]) of x [n / channels, channels] as E4M3 bytes only, scale qs, into q (cuda_fp8.c: an FP8 GEMM's
 * output held only as E4M3); x is not written back, except where the values take no 16-byte vectors: then x is
 * overwritten (a scratch). */
cudaError_t cuk_epilogue_e4m3(int fdt, void *x, int64_t n, int64_t channels, const float *bias, int act, float alpha,
                              float beta, uint8_t *q, float qs, cudaStream_t s);
cudaError_t cuk_fill(int fdt, void *y, int64_t n, float v, cudaStream_t s);
/* FP8 E4M3 (kernels_fp8.cu; the CPU emulation's rounding: RNE, saturating to +-448): activations
 * q = e4m3(x / scale) for n elements in storage fdt. */
cudaError_t cuk_fp8_quant(int fdt, const void *x, uint8_t *q, int64_t n, float scale, cudaStream_t s);
/* y = q x scale in storage fdt (n E4M3 bytes widened: an E4M3-held tensor, docs/CUDA.md "E4M3 storage") */
cudaError_t cuk_fp8_dequant(int fdt, const uint8_t *q, void *y, int64_t n, float scale, cudaStream_t s);

/* Resize (kernels_upsample.cu) over 4 logical axes (a lower rank padded in front with axes of 1): output
 * element (o0..o3) is the separable weighted sum over each axis's taps, innermost axis first; axis d's
 * device tables idx[d] / w[d] hold out[d] * nt[d] entries (source index, weight), outside[d] (NULL when
 * none) out[d] flags of tf_crop_and_resize (the output is extrap). xs / ys: element strides of the logical
 * axes in x and y (NCHW or NHWC); nhwc orders the threads by y's memory. nearest: one tap of weight 1 on
 * every axis, a copy. */
typedef struct cuk_resize_args {
    int64_t out[4], xs[4], ys[4];
    int nt[4];
    const int32_t *idx[4];
    const float *w[4];
    const uint8_t *outside[4];
    float extrap;
    bool nearest, nhwc;
} cuk_resize_args;
cudaError_t cuk_resize(int fdt, const cuk_resize_args *p, const void *x, void *y, cudaStream_t s);

/* ConvTranspose, 2-D: x [n, cin, h, w], float32 weights w [cin, cout / group, kh, kw], bias [cout] (may be
 * NULL), y [n, cout, oh, ow]; y[o] = bias + sum x[i] w[k] over o = i * stride - pad + k * dilation. xs / ys:
 * element strides of the logical (n, c, h, w) axes (NCHW or NHWC; nhwc orders the threads by y's memory). */
typedef struct cuk_convt_args {
    int64_t n, cin, cout, h, w, oh, ow, group;
    int kh, kw, sh, sw, dh, dw, ph, pw;
    int64_t xs[4], ys[4];
    bool nhwc;
} cuk_convt_args;
cudaError_t cuk_convt(int fdt, const cuk_convt_args *p, const void *x, const float *w, const float *bias, void *y,
                      cudaStream_t s);

/* INT8 layers (cuda_int8.c), the CPU reference's float32 arithmetic operation for operation (docs/PRECISION.md,
 * "INT8 kernels"). kernels_int8.cu: QuantizeLinear y = sat(rint(x / scale) + zp) from storage fdt into u8 / s8,
 * DequantizeLinear y = (x - zp) * scale into storage fdt, QLinearAdd of two tensors of one shape. */
cudaError_t cuk_quantize(int fdt, const void *x, uint8_t *y, int64_t n, float scale, int zp, bool s8, cudaStream_t s);
/* kiln's QLookup: y[i] = table[x[i]] over n bytes (table: 256 bytes on the host, passed by value) */
cudaError_t cuk_qlookup(const uint8_t *x, uint8_t *y, int64_t n, const uint8_t *table, cudaStream_t s);
cudaError_t cuk_dequantize(int fdt, const uint8_t *x, bool s8, void *y, int64_t n, float scale, int zp,
                           cudaStream_t s);
/* c = clamp(rint(act((a - za) * sa + (b - zb) * sb) / sc) + zc, lo, hi); act: 0 none, else min(fhi, max(flo, v))
 * (Relu, Clip) */
typedef struct cuk_qadd_args {
    float sa, sb, sc, isc;   /* isc: 1 / sc rounded (the division's quick path; the result is the division's) */
    int za, zb, zc, lo, hi;
    int act;
    float flo, fhi;
} cuk_qadd_args;
cudaError_t cuk_qadd(const uint8_t *a, bool as8, const uint8_t *b, bool bs8, uint8_t *c, int64_t n,
                     const cuk_qadd_args *p, cudaStream_t s);
/* QLinearConv's integer convolution (kernels_conv_i8.cu): acc = sum x * w, exact in int32, over x u8 (x_s8: s8)
 * NHWC and w s8 KRSC (C a multiple of 16, K of 8; d->y_nhwc set; zero padding: the caller folds a nonzero input
 * zero point into the bias where there is no padding), then per output channel c, with a = acc + bias[c] (int32,
 * wrapping as the CPU's): u8 / s8 outputs y = clamp(rint((float)a * m[c]), lo, hi) + zp (lo, hi: the type's bounds
 * narrowed by Relu / Clip, minus zp); float outputs y = min(hi, max(lo, (float)a * m[c])) (none / Relu / Clip), stored
 * as e->out says (float32, FP16 or BF16); with
 * e->res (QLinearConvAdd) the requantized value is added to R by the QLinearAdd arithmetic before it is stored (or,
 * res_float, both dequantized and summed in float).
 * Configuration cfg: 0 mma.sync (any sm_80+ GPU), 1 .. cuk_conv_i8_configs() - 1 wgmma tiles (sm_90 only:
 * cudaErrorNotSupported elsewhere). */
enum cuk_qout { CUK_QU8 = 0, CUK_QS8 = 1, CUK_QF32 = 2, CUK_QF16 = 3, CUK_QBF16 = 4 };   /* float outputs: the storage */
typedef struct cuk_qepi {
    const int32_t *bias;   /* [k] device, or NULL */
    const float *m;        /* [k] device: u8 / s8 outputs scale / y_scale, float32 outputs the scale (act: the scale) */
    int out, zp;           /* enum cuk_qout; the output's zero point */
    float lo, hi;
    /* a non-linear activation (enum cuk_act, 0: none, Relu / Clip folded into lo / hi): u8 / s8 outputs
     * y = clamp(rint(act((float)a * m[c]) * inv_ys), lo, hi) + zp, float32 outputs act((float)a * m[c]) (the CPU's
     * order; the GPU's expf / erf approximation may move a requantized value by one step) */
    int act;
    float act_a, act_b, inv_ys;
    /* QLinearConvAdd: the requantized value a (u8 / s8 out) then goes through the add with R (NHWC u8 / s8, the
     * output's shape): y = the add's c of (a, R) as cuk_qadd computes it; res NULL: no add */
    const uint8_t *res;
    int res_s8;
    cuk_qadd_args add;
    /* QLinearConvAdd with kiln_res_float: a float output (out CUK_QF32 / QF16 / QBF16) y = act(float(Y - zp) * ys +
     * float(R - zr) * rs), Y the requantized byte (lo / hi / zp above), each product and the sum rounded as the
     * separate DequantizeLinear and Add layers round them, act Relu (x < 0 ? 0 : x) where res_relu */
    int res_float, res_relu, zr;
    float ys, rs;
    /* QLinearConvAdd with kiln_res_once (one rounding, u8 / s8 out): y = clamp(rint(fma(float(R - zr), rk, t)), lo, hi)
     * + zp for t = (float)a * m[c], m, lo, hi, zp the output C's (cpu/qgemm.c kiln__qepi_qr); rk = R_scale / C_scale */
    int res_once;
    float rk;
    /* QLinearConvSum (u8 / s8 out, act none; Relu / Clip as lo / hi): a second convolution's product added before the
     * one rounding, y = clamp(rint(t + t2), lo, hi) + zp with t = (float)a * m[c] and t2 = (float)(acc2 + bias2[c]) *
     * m2[c] (each rounded: cpu/qgemm.c kiln__qepi_qt), acc2 the exact sum over x2 (NHWC, x's type, c2 channels, an
     * h2 x w2 image: the output's pixels at strides sh2, sw2) and the 1x1 s8 filter f2 [k][c2] (no padding: x2's zero
     * point folded into bias2). Its reduction runs first in the same tile (wgmma configurations only: the others
     * answer cudaErrorNotSupported). x2 NULL: none */
    const uint8_t *x2;
    const int8_t *f2;
    const int32_t *bias2;
    const float *m2;
    int c2, h2, w2, sh2, sw2;
} cuk_qepi;
/* Whether this device runs QLinearConvSum (cuk_qepi.x2): its kernels are the wgmma configurations' (sm_90) */
bool cuk_conv_i8_sum_ok(void);
cudaError_t cuk_conv_i8(int cfg, bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi *e, void *y,
                        const cuk_conv_desc *d, cudaStream_t s);
/* Configurations 8 (BN 128) and 9 (BN 64), kernels_gemm_i8.cu: weight-stationary persistent blocks for a 1x1 stride-1
 * unpadded convolution (a GEMM over the pixels), K a multiple of 16, whose filter slice [BN][C] and operand stages fit
 * shared memory; cuk_gemm_i8_fits says whether a layer (s8 activations: x_s8) is one (cuk_conv_i8 answers
 * cudaErrorNotSupported otherwise; 8 takes a byte output's residual only where it is added with one rounding and no
 * non-linear activation but GELU over s8 activations, as 13) */
bool cuk_gemm_i8_fits(int cfg, bool x_s8, const cuk_conv_desc *d, const cuk_qepi *e);
cudaError_t cuk_gemm_i8(int cfg, bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi *e, void *y,
                        const cuk_conv_desc *d, cudaStream_t s);
/* Configurations 10 (BN 64) and 11 (BN 128), kernels_conv3_i8.cu: a 3x3 stride-1 convolution with padding 1 (its
 * output the input's size; no residual, no second convolution) over 16 x 8 pixel patches and their halo, each input
 * pixel copied once a patch instead of once a tap; cuk_conv3_i8_fits says whether a layer is one (cuk_conv_i8 answers
 * cudaErrorNotSupported otherwise) */
bool cuk_conv3_i8_fits(const cuk_conv_desc *d, const cuk_qepi *e);
cudaError_t cuk_conv3_i8(int cfg, bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi *e, void *y,
                         const cuk_conv_desc *d, cudaStream_t s);
/* Configurations 12 and 13, kernels_gemm_i8_tma.cu: a 1x1 stride-1 unpadded convolution (a GEMM over the pixels), C
 * and K multiples of 16, or another 2-D convolution (its activations by TMA's im2col mode: C a multiple of 64, the
 * same padding and walk in both dimensions), by TMA copies from a producer warpgroup and two consumers (of one
 * warpgroup in 12, two in 13) whose MMAs and epilogues alternate (sm_90); QLinearConvSum (a 1x1 main convolution, x2
 * by im2col at its stride) over tiles of 64 pixels x 128 channels in 12, 128 x 64 in 13; cuk_gemm_i8_tma_fits says
 * whether a layer (s8 activations: x_s8) fits configuration cfg (cuk_conv_i8 answers cudaErrorNotSupported
 * otherwise; 13 takes a byte output's residual only where it is added with one rounding, e->res_once, and no
 * non-linear activation but GELU over s8 activations) */
bool cuk_gemm_i8_tma_fits(int cfg, bool x_s8, const cuk_conv_desc *d, const cuk_qepi *e);
cudaError_t cuk_gemm_i8_tma(int cfg, bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi *e, void *y,
                            const cuk_conv_desc *d, cudaStream_t s);
/* An INT8 convolution on the CUDA cores (kernels_conv_i8_direct.cu): groups groups (d->c and d->k multiples of it),
 * any channel counts, the input's padding read as its zero point x_zp; x NHWC, w [r*s][c / groups][k] s8, y NHWC;
 * e's bias (the zero point folded in, as for cuk_conv_i8) and multipliers, no residual or second convolution */
bool cuk_qconv_direct_ok(const cuk_conv_desc *d, int groups);
cudaError_t cuk_qconv_direct(bool x_s8, const uint8_t *x, const int8_t *w, const cuk_qepi *e, void *y,
                             const cuk_conv_desc *d, int groups, int x_zp, cudaStream_t s);
/* QLinearMatMul with a constant B runs as the 1x1 convolution of A's rows: d = {n = M, c = K, h = w = 1, k = N, r = s =
 * 1, strides / dilations 1, y_nhwc}, w = B^T ([N][K] s8). */
int cuk_conv_i8_configs(void);

#ifdef __cplusplus
}
#endif
#endif
