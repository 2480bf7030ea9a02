/* Internal core utilities shared by every module: errors, allocation, dtypes, tensors,
 * reduced-precision formats (numfmt.h), thread pool. Internal names use the kiln__ prefix. */
#ifndef KILN_CORE_H
#define KILN_CORE_H

#include "kiln/kiln.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#if defined(__GNUC__)
#define KILN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KILN_PRINTF(a, b)
#endif

/* Records a formatted error message (thread-local + log callback) and returns `s`. */
kiln_status kiln__err(kiln_status s, const char *fmt, ...) KILN_PRINTF(2, 3);
void kiln__log(kiln_log_level lvl, const char *fmt, ...) KILN_PRINTF(2, 3);
/* Prepends context to the current thread's last error ("ctx: old message"). */
void kiln__err_prefix(const char *fmt, ...) KILN_PRINTF(1, 2);

#define KILN_TRY(expr) do { kiln_status kiln__s = (expr); if (kiln__s != KILN_OK) return kiln__s; } while (0)

/* Allocation through the hookable allocator. All return NULL on failure without side effects. */
void *kiln__malloc(size_t n);
/* n bytes for a large, long-lived block (an activation arena): from 2 MB on, and without allocator hooks, 2 MB
 * aligned and advised for transparent huge pages (Linux; its THP mode "madvise" gives them only to advised
 * memory), so that a layer streaming through MBs of activations does not miss the TLB on every 4 KB page; else
 * kiln__malloc. Freed with kiln__free. */
void *kiln__malloc_large(size_t n);
void *kiln__calloc(size_t count, size_t size);   /* overflow-checked */
void *kiln__realloc(void *p, size_t n);
void kiln__free(void *p);
char *kiln__strdup(const char *s);
char *kiln__strndup(const char *s, size_t n);
size_t kiln__max_tensor_bytes(void);

/* dtypes */
bool kiln__dtype_is_float(kiln_dtype dt);     /* f16 bf16 f32 f64 (+fp8 fp4) */
bool kiln__dtype_is_int(kiln_dtype dt);       /* signed or unsigned integer, not bool */
bool kiln__dtype_is_signed(kiln_dtype dt);

/* Reduced-precision formats (FP16, BF16, FP8, FP4, E8M0, block formats): numfmt.h. */
#include "numfmt.h"

/* Generic element access: read element i of any numeric dtype as double / int64,
 * write a double / int64 into element i. Slow; for reference kernels and tests. */
double kiln__get_f64(kiln_dtype dt, const void *data, int64_t i);
int64_t kiln__get_i64(kiln_dtype dt, const void *data, int64_t i);
void kiln__set_f64(kiln_dtype dt, void *data, int64_t i, double v);
void kiln__set_i64(kiln_dtype dt, void *data, int64_t i, int64_t v);
/* Converts n elements between dtypes (ONNX Cast semantics for numeric types; FP8 targets
 * saturate, FP8 from float64 goes through float32 as in ONNX's reference). */
kiln_status kiln__convert(kiln_dtype dst_dt, void *dst, kiln_dtype src_dt, const void *src, int64_t n);

/* tensors */
/* numel of a shape, or -1 on overflow / negative dim */
int64_t kiln__shape_numel(int ndim, const int64_t *dims);
/* *r = a * b for a, b >= 0; false (and *r untouched) when either is negative or it overflows */
static inline bool kiln__mul_nonneg(int64_t a, int64_t b, int64_t *r)
{
    if (a < 0 || b < 0 || (a && b > INT64_MAX / a))
        return false;
    *r = a * b;
    return true;
}
/* Allocates t->data for the given dtype/shape (zeroed); enforces the size limit. */
kiln_status kiln__tensor_alloc(kiln_tensor *t, kiln_dtype dt, int ndim, const int64_t *dims);
void kiln__tensor_release(kiln_tensor *t);            /* frees data (unless borrowed), keeps struct */
/* A tensor over `data` that it does not own (KILN_TENSOR_BORROWED): never freed or written through
 * it; `nbytes` must equal the shape's size. The owner keeps `data` alive longer than the tensor. */
kiln_status kiln__tensor_borrow(kiln_tensor *t, kiln_dtype dt, int ndim, const int64_t *dims, const void *data,
                                size_t nbytes);
kiln_status kiln__tensor_clone(kiln_tensor *dst, const kiln_tensor *src);
void kiln__shape_str(const kiln_tensor *t, char *buf, size_t n);   /* "float32[1,3,224,224]" */

/* Thread pools (threadpool.c). Each execution context (or model run, or build) owns one; several
 * pools run jobs at the same time, each on its own threads. */
typedef struct kiln_pool kiln_pool;
/* The one place "0 threads" is resolved: requested > 0 is kept (capped at 64), else the number of
 * online CPUs. */
int kiln__resolve_threads(int requested);
/* A pool of kiln__resolve_threads(nthreads) threads, the caller included; workers start lazily. */
kiln_pool *kiln__pool_create(int nthreads);
void kiln__pool_free(kiln_pool *p);
int kiln__pool_threads(const kiln_pool *p);   /* 1 for NULL */
/* The threads a job asking for `nthreads` gets: all of the pool's for nthreads <= 0, at most all. */
int kiln__pool_clamp(const kiln_pool *p, int nthreads);
typedef struct kiln_pool_stats {
    int threads;                        /* the pool's thread count, caller included */
    int workers_started;
    unsigned long long jobs_parallel;   /* parallel_for calls offered to at least one worker */
    int max_threads_offered;            /* largest number of threads a job was offered to */
    unsigned long long worker_joins;    /* times a worker took part in a job */
    unsigned long long jobs_inline_busy; /* calls run inline because the pool was busy (nesting) */
} kiln_pool_stats;
void kiln__pool_stats_get(kiln_pool *p, kiln_pool_stats *out);
/* Runs fn(ctx, begin, end) over [0, n) in chunks of at least `grain` on up to nthreads threads of
 * `pool` (nthreads <= 0: all of them), the caller included. pool NULL, or a call from inside a
 * running job of the same pool, runs inline. */
typedef void (*kiln__par_fn)(void *ctx, int64_t begin, int64_t end);
void kiln__parallel_for(kiln_pool *pool, int nthreads, int64_t n, int64_t grain, kiln__par_fn fn, void *ctx);

/* CPU features (x86; all false elsewhere). kiln__cpu_has(set) is true when the CPU has every
 * feature in `set`; detection runs once per process and is thread-safe. */
enum {
    KILN_CPU_AVX2 = 1u << 0,
    KILN_CPU_FMA = 1u << 1,
    KILN_CPU_AVX512F = 1u << 2,
    KILN_CPU_AVX512DQ = 1u << 3,
    KILN_CPU_F16C = 1u << 4,   /* F16C and AVX */
    KILN_CPU_AVX512VNNI = 1u << 5,   /* vpdpbusd (AVX512_VNNI) */
    KILN_CPU_AVX512BF16 = 1u << 6,   /* vdpbf16ps, vcvtne2ps2bf16 (AVX512_BF16) */
    KILN_CPU_AVX512VBMI = 1u << 7,   /* vpermi2b / vpermt2b (AVX512_VBMI) and AVX512BW */
    KILN_CPU_AMX_BF16 = 1u << 8,     /* AMX tiles with tdpbf16ps, the OS saving their state and this process
                                      * granted their use (Linux arch_prctl, requested by the detection) */
    KILN_CPU_AMX_INT8 = 1u << 9,     /* the same with tdpbusd / tdpbsud / tdpbssd / tdpbuud */
};
#define KILN_CPU_AVX2_FMA (KILN_CPU_AVX2 | KILN_CPU_FMA)
#define KILN_CPU_AVX512_DQ_FMA (KILN_CPU_AVX512F | KILN_CPU_AVX512DQ | KILN_CPU_FMA)
bool kiln__cpu_has(unsigned features);

/* files */
/* Reads a whole regular file (anything else is refused before allocating); *data is NUL-terminated. */
kiln_status kiln__read_file(const char *path, void **data, size_t *len);
/* True when both paths exist and name the same file (same device and inode: catches other
 * spellings, hard links and symlinks). */
bool kiln__same_file(const char *a, const char *b);
/* Every file kiln writes goes through these (atomic_file.c): the data is written to a temporary
 * file in the destination's directory, fsync'ed and renamed over the destination, so readers never
 * see a partial file and a failure leaves the old file byte-identical. open, write to af->f, then
 * commit (which releases af, also on failure) or abort (removes the temporary). */
typedef struct kiln__afile { FILE *f; char *path, *tmp; } kiln__afile;
kiln_status kiln__afile_open(kiln__afile *af, const char *path);
kiln_status kiln__afile_commit(kiln__afile *af);
void kiln__afile_abort(kiln__afile *af);
kiln_status kiln__write_file_atomic(const char *path, const void *data, size_t len);

/* Terminal-safe text (escape.c): copies `in` to `out` (size n, always NUL-terminated when n > 0)
 * with C0 controls, DEL, C1 controls and bytes that are not valid UTF-8 escaped as \n, \t, \r or
 * \xNN; other text, including valid UTF-8, is unchanged. Idempotent. Returns the length the full
 * escaped text needs (excluding the NUL), like snprintf. Used for every message that can quote
 * model-supplied names. */
size_t kiln__escape(char *out, size_t n, const char *in);

#endif
