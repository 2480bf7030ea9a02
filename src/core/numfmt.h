/* Numeric formats below FP32: scalar and array conversions for FP16, BF16, the four ONNX FP8
 * types, FP4 E2M1 and E8M0 scales, and the block-quantized matrix formats (NVFP4, MXFP4, INT4
 * weight-only, INT8 per-channel / per-tensor). docs/PRECISION.md is the normative description of
 * every encoding, rounding / saturation rule and packed layout declared here.
 *
 * Every encoder rounds to nearest, ties to even, on the exact FP32 value (never through an
 * intermediate format). Included by core.h. */
#ifndef KILN_NUMFMT_H
#define KILN_NUMFMT_H

#include "kiln/kiln.h"

/* ---- FP16 (IEEE binary16) and BF16. Encoders quiet NaNs (payload kept where it fits) and
 * round to nearest even, overflowing to +-Inf; subnormals are exact, never flushed.
 * kiln__f16_to_f32 quiets NaNs (like F16C); kiln__bf16_to_f32 is exact bit widening. */
float kiln__f16_to_f32(uint16_t h);
uint16_t kiln__f32_to_f16(float f);
float kiln__bf16_to_f32(uint16_t h);
uint16_t kiln__f32_to_bf16(float f);
/* Array forms, identical results to the scalar ones (F16C, AVX-512 / AVX2 fast paths when present). */
void kiln__f16_to_f32_array(float *dst, const uint16_t *src, int64_t n);
void kiln__f32_to_f16_array(uint16_t *dst, const float *src, int64_t n);
void kiln__bf16_to_f32_array(float *dst, const uint16_t *src, int64_t n);
void kiln__f32_to_bf16_array(uint16_t *dst, const float *src, int64_t n);
/* dst[i] = src[i] rounded to BF16 and widened back (the value a BF16 layer computes with); dst may be src */
void kiln__f32_round_bf16_array(float *dst, const float *src, int64_t n);
/* Scalar-only versions of the array forms (the reference the fast paths are tested against). */
void kiln__f16_to_f32_array_ref(float *dst, const uint16_t *src, int64_t n);
void kiln__f32_to_f16_array_ref(uint16_t *dst, const float *src, int64_t n);
void kiln__bf16_to_f32_array_ref(float *dst, const uint16_t *src, int64_t n);
void kiln__f32_to_bf16_array_ref(uint16_t *dst, const float *src, int64_t n);
/* Which fast paths the array forms use on this CPU (for tests and logs). */
bool kiln__numfmt_has_f16c(void);
bool kiln__numfmt_has_avx512(void);

/* n elements of a reduced-precision float dtype (FLOAT16, BFLOAT16 or an FP8 type) to / from
 * FP32 through the array forms above; saturate applies to FP8 targets. False for other dtypes. */
bool kiln__dtype_is_lowp_float(kiln_dtype dt);
bool kiln__lowp_to_f32_array(kiln_dtype dt, float *dst, const void *src, int64_t n);
bool kiln__f32_to_lowp_array(kiln_dtype dt, void *dst, const float *src, int64_t n, bool saturate);

/* ---- FP8: dt is one of KILN_DT_FP8E4M3 (OCP E4M3FN), KILN_DT_FP8E4M3FNUZ, KILN_DT_FP8E5M2,
 * KILN_DT_FP8E5M2FNUZ. ONNX Cast semantics: saturate=true maps finite overflow and +-Inf to
 * +-max; saturate=false gives Inf (E5M2) or NaN (the others). NaN -> NaN; -0 -> 0 in FNUZ. */
bool kiln__dtype_is_fp8(kiln_dtype dt);
uint8_t kiln__f32_to_fp8(kiln_dtype dt, float f, bool saturate);
float kiln__fp8_to_f32(kiln_dtype dt, uint8_t v);
float kiln__fp8_max(kiln_dtype dt);   /* largest finite value: 448, 240, 57344, 57344 */
void kiln__f32_to_fp8_array(kiln_dtype dt, uint8_t *dst, const float *src, int64_t n, bool saturate);
void kiln__fp8_to_f32_array(kiln_dtype dt, float *dst, const uint8_t *src, int64_t n);

/* ---- FP4 E2M1 (OCP MX): 4-bit code S.EE.M in the low nibble; values 0 .5 1 1.5 2 3 4 6.
 * No Inf/NaN: finite overflow and +-Inf saturate to +-6, NaN encodes as +6 (0x7). */
uint8_t kiln__f32_to_fp4(float f);
float kiln__fp4_to_f32(uint8_t v);    /* uses the low nibble only */

/* ---- E8M0 (OCP MX scale): unsigned power of two 2^(code-127), code 0..254; 0xFF = NaN.
 * Encoding takes floor(log2(f)) clamped to [-127, 127]; f <= 0 gives code 0; NaN/Inf give 0xFF. */
uint8_t kiln__f32_to_e8m0(float f);
float kiln__e8m0_to_f32(uint8_t v);

/* ---- Block-quantized row-major matrices [rows x k] (rows = output channels for weights,
 * k = the reduction axis). See docs/PRECISION.md "Packed layouts". */
typedef enum kiln__qfmt {
    KILN_QF_NVFP4,       /* FP4 E2M1, 16-element blocks, E4M3 block scale, FP32 tensor scale */
    KILN_QF_MXFP4,       /* FP4 E2M1, 32-element blocks, E8M0 block scale */
    KILN_QF_INT4,        /* int4 symmetric [-7,7], block size 32/64/128/..., FP16 or FP32 scale */
    KILN_QF_INT8_CHANNEL,/* int8 symmetric [-127,127], one FP32 scale per row */
    KILN_QF_INT8_TENSOR, /* int8 [-128,127], one given FP32 scale for the whole matrix */
    KILN_QF_FP8,         /* FP8 E4M3 (OCP E4M3FN), one FP32 scale for the whole matrix: amax / 448 */
} kiln__qfmt;

typedef struct kiln__qlayout {
    kiln__qfmt fmt;
    int64_t rows, k;
    int64_t block;        /* elements sharing one scale along k (k for INT8_CHANNEL and INT8_TENSOR) */
    int64_t nblk;         /* scales per row: ceil(k / block) (1 for INT8_*; 0 scales stored for INT8_TENSOR) */
    int64_t row_bytes;    /* packed bytes of one row: ceil(k/2) for 4-bit formats, k for INT8 */
    kiln_dtype scale_dt;  /* FP8E4M3 (NVFP4), UINT8 holding E8M0 (MXFP4), FLOAT16/FLOAT32 (INT4), FLOAT32 */
    size_t data_bytes;    /* rows * row_bytes */
    size_t scale_bytes;   /* rows * nblk * sizeof(scale), 0 for INT8_TENSOR */
    size_t total_bytes;   /* data + scales + 4 for the FP32 tensor scale (NVFP4, INT8_TENSOR) */
} kiln__qlayout;

/* Fills *L. block is the INT4 block size (>= 2, even) and ignored otherwise; scale_dt is the
 * INT4 scale type (FLOAT16 or FLOAT32) and ignored otherwise. Errors on bad arguments / overflow. */
kiln_status kiln__qlayout_init(kiln__qlayout *L, kiln__qfmt fmt, int64_t rows, int64_t k, int64_t block,
                               kiln_dtype scale_dt);
/* Quantizes x [rows x k] into data (data_bytes) and scales (scale_bytes). *tensor_scale is
 * written for NVFP4 (amax / (6*448)) and read for INT8_TENSOR (must be finite and > 0). */
kiln_status kiln__qpack(const kiln__qlayout *L, const float *x, uint8_t *data, void *scales, float *tensor_scale);
/* Dequantizes rows [r0, r1) into y (row-major, k floats per row, y points at row r0). */
void kiln__qunpack_rows(const kiln__qlayout *L, const uint8_t *data, const void *scales, float tensor_scale,
                        int64_t r0, int64_t r1, float *y);
/* Dequantizes the whole matrix. */
void kiln__qunpack(const kiln__qlayout *L, const uint8_t *data, const void *scales, float tensor_scale, float *y);
/* Dequantizes elements [k0, k1) of row r into y[0 .. k1 - k0) (a panel of a GEMM operand). */
void kiln__qunpack_span(const kiln__qlayout *L, const uint8_t *data, const void *scales, float tensor_scale, int64_t r,
                        int64_t k0, int64_t k1, float *y);
/* The effective (FP32) scale of block b of row r, including the NVFP4 / FP8 tensor scale. */
float kiln__qblock_scale(const kiln__qlayout *L, const void *scales, float tensor_scale, int64_t r, int64_t b);

/* ---- Layers with reduced-precision weights (docs/PRECISION.md, "FP8, NVFP4, MXFP4 and INT4
 * layers"): the builder marks a Conv / MatMul / Gemm (or fused form) with these attributes and
 * the CPU kernels honour them. */
#define KILN_ATTR_WQ "kiln_wq"             /* string: weight format, a name of kiln__lowbit_parse */
#define KILN_ATTR_AQ "kiln_aq"             /* string: "fp8" or "fp16", activations quantize-dequantized */
#define KILN_ATTR_AQ_SCALE "kiln_aq_scale" /* float: the FP8 activation scale (calibrated amax / 448) */
#define KILN_ATTR_WQ_TENSOR "kiln_wq_tensor" /* int 1: FP8 weights with one scale for the whole tensor (what the
                                              * CUDA FP8 GEMM runs; set for --device cuda builds); absent: one
                                              * scale per output channel */
#define KILN_ATTR_FP8_FEED "kiln_fp8_feed" /* float, on a layer of a --device cuda build whose output 0 an FP8
                                            * layer quantizes next (its input 0, directly or through shape-only
                                            * views): that layer's kiln_aq_scale, so the CUDA module may write the
                                            * E4M3 copy in the producing kernel (build/fp8_feed.c); the CPU
                                            * ignores it */
#define KILN_ATTR_HALF_OUT "kiln_half_out" /* string "fp16" / "bf16", on an INT8 layer of a --device cuda build
                                             * (DequantizeLinear, a QLinear layer with kiln_out_float) whose float32
                                             * output the GPU holds in that format
                                             * (kiln_build_options.float_activations); the CPU ignores it */
#define KILN_ATTR_Q_AUTO "kiln_q_auto"   /* int 1, on a Conv / MatMul / Gemm or Add whose output quantization kiln's own
                                        * INT8 calibration inserted (implicit INT8: build/precision.c), kept by
                                        * fuse-qdq on the integer layer it makes: fuse-qconv-add fuses two such
                                        * layers with one rounding (kiln_res_once, docs/OPS.md), which it never does
                                        * for quantization a model's author placed */
#define KILN_ATTR_FP8_STORE "kiln_fp8_store" /* float, on an FP8 convolution of a --device cuda build whose output
                                              * 0 only FP8 convolutions read (as their input 0 with this scale, or
                                              * as their residual, at least one so), or on an FP8 FusedMatMul with
                                              * GELU (any activation kiln's epilogue applies) whose output only FP8
                                              * GEMMs read as input 0 with this scale: the output is held only as
                                              * E4M3 with this scale; the CPU emulation rounds it through E4M3
                                              * (build/fp8_feed.c, docs/CUDA.md "E4M3 storage") */
#define KILN_INT4_BLOCK 32                 /* INT4 weight-only layers: 32-element blocks, FP16 scales */
/* "fp8", "nvfp4" (also "fp4"), "mxfp4", "int4": true and *fmt set; false for anything else. */
bool kiln__lowbit_parse(const char *name, kiln__qfmt *fmt);
const char *kiln__lowbit_name(kiln__qfmt fmt);   /* "fp8", "nvfp4", "mxfp4", "int4"; NULL otherwise */
/* The layout of a layer's weight in that format: rows output channels, k the reduction. */
kiln_status kiln__lowbit_layout(kiln__qlayout *L, kiln__qfmt fmt, int64_t rows, int64_t k);

#endif
