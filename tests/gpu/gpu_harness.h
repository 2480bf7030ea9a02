/* test_gpu's harness (gpu_harness.c) and the case files' entry points (gpu_cases.c: float / half layers and
 * CPU fallbacks; gpu_lowp.c: FP8 and 4-bit layers; gpu_models.c: whole models); test_gpu.c has main. */
#ifndef KILN_TEST_GPU_HARNESS_H
#define KILN_TEST_GPU_HARNESS_H
#define KILN_TEST_SHARED_COUNTERS 1   /* test.h: one pair of counters for all of test_gpu's files */
#include "test.h"
#include "test_calib.h"
#include "engine/engine.h"
#include "ir/fused.h"
#include "runtime/device.h"
#include "runtime/exec.h"
#include "core/numfmt.h"
#include <float.h>
#include <stdint.h>
#include <string.h>

extern unsigned long long rng;   /* the cases' data */
extern kiln_dev *dev;   /* the device under test (NULL: --cpu-only) */
/* Half pass (KILN_CUDA_ACT=fp16|bf16): float inputs and weights rounded to half_mode first; half_tol the tolerance */
extern kiln_dtype half_mode;
extern double half_tol;

typedef struct tgraph {
    kiln_graph *g;
    int node;
    int n_feed;
    kiln_tensor feed[8];
} tgraph;

/* gpu_harness.c: random / integer tensors, one-node graphs (tg_*), their CPU-vs-GPU check (check_case: every
 * layer on the device, max |gpu - cpu| <= tol * max(1, max |cpu|); run_case frees the graph) */
void round_half(kiln_tensor *t, kiln_dtype h);
kiln_tensor rand_tensor(kiln_dtype dt, int nd, const int64_t *dims, double lo, double hi);
kiln_tensor ints_tensor(int n, const int64_t *v);
tgraph tg_new(kiln_op op, int opset);
int tg_out1(kiln_graph *g, int nd, const char *name);
int tg_node_add(kiln_graph *g, kiln_op op, int opset, const char *name, int nin, const int *in, const char *out);
int tg_const(kiln_graph *g, const char *name, kiln_tensor x);
void tg_output(kiln_graph *g, int nd);
void tg_then(tgraph *t, kiln_op op, int opset);
kiln_node *tg_node(tgraph *t);
void tg_in(tgraph *t, kiln_tensor x, bool const_);
void tg_outs(tgraph *t, int n);
void attr_ints(tgraph *t, const char *name, int n, const int64_t *v);
void set_act(tgraph *t, kiln_fused_act_kind k, float a, float b);
void tg_free(tgraph *t);
double compare(const kiln_tensor *a, const kiln_tensor *b);
void print_diff(const kiln_tensor *got, const kiln_tensor *ref);
double cosine(const kiln_tensor *a, const kiln_tensor *b);
void tg_round_half(tgraph *t);
int tg_run_both(kiln_dev *d, const char *name, tgraph *t, kiln_tensor *ref, kiln_tensor *got, const char **why);
void tg_release(const tgraph *t, kiln_tensor *ref, kiln_tensor *got);
void check_case(const char *name, tgraph *t, double tol);
void run_case(const char *name, tgraph *t, double tol);
/* gpu_cases.c */
void binary_cases(void);
void unary_cases(void);
void cast_where_cases(void);
void shape_cases(void);
void nn_cases(void);
void conv_cases(void);
void gemm_cases(void);
void attention_cases(void);
void half_weight_cases(void);
/* gpu_upsample.c */
void upsample_cases(void);
void strict_check(const char *what, tgraph (*make)(void));
tgraph reduce_mean_graph(void);
/* gpu_lowp.c */
tgraph fp8_per_channel_graph(void);
tgraph fp8_illegal_graph(void);
tgraph fp8_trans_a_graph(void);
tgraph fp8_conv_illegal_graph(void);
void fp8_cases(double tol);
void fp8_accuracy_sweep(double tol);
void fp8_feed_case(double tol);
void fp8_block_case(void);
void fp8_store_case(void);
void fp4_gather_cases(void);
void fp4_cases(void);
/* gpu_int8.c */
void int8_cases(void);
void int8_new_cases(void);
void stem_pool_cases(void);   /* gpu_stem.c */
/* gpu_models.c: MODEL.onnx@SHAPES[#precision] built and run on the CPU and the GPU */
void model_case(const char *spec);

#define F32 KILN_DT_FLOAT32
#define D(...) ((const int64_t[]){__VA_ARGS__})
#define RT(nd, ...) rand_tensor(F32, nd, D(__VA_ARGS__), -1, 1)

#endif
