/* The CPU kernel registry: the reference kernels, assembled from each cpu/ref kernel file's
 * registration table, and the fast kernels of cpu/x86 registered over them by op and ISA. */
#include "../cpu_kernels.h"
#include <pthread.h>

#define GROUPS(X) X(unary) X(binary) X(shape) X(reduce) X(norm) X(linalg) X(conv) X(pool) \
                  X(resize) X(quant) X(control) X(rnn) X(detect) X(misc) X(fused) X(extra) X(qadd)
#define FAST_GROUPS(X) X(pool_avx2) X(pool) X(qgemm) X(qadd) X(conv_avx2) X(conv_avx512) X(attn_avx2) X(attn) X(norm)

#define DECL(g) extern const kiln_kernel_reg kiln__ref_##g[];
GROUPS(DECL)
#undef DECL
#define DECL(g) extern const kiln_kernel_isa_reg kiln__x86_##g[];
FAST_GROUPS(DECL)
#undef DECL

static kiln_kernel_fn ref[KILN_OP_COUNT];
static const kiln_kernel_isa_reg *fast[KILN_OP_COUNT];
enum { MAX_FAST = 4 };   /* fast kernels of one op the host runs */
static const kiln_kernel_isa_reg *fast_all[KILN_OP_COUNT][MAX_FAST];
static int n_fast[KILN_OP_COUNT];
static kiln_kernel_fn best[KILN_OP_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void add(const kiln_kernel_reg *r)
{
    for (; r->fn; r++)
        if (r->op >= 0 && r->op < KILN_OP_COUNT)
            ref[r->op] = r->fn;
}

static void add_fast(const kiln_kernel_isa_reg *r)
{
    for (; r->fn; r++)
        if (r->op >= 0 && r->op < KILN_OP_COUNT && ref[r->op] && kiln__cpu_has(r->isa)) {
            fast[r->op] = r;
            if (n_fast[r->op] < MAX_FAST)
                fast_all[r->op][n_fast[r->op]++] = r;
        }
}

static void init(void)
{
#define ADD(g) add(kiln__ref_##g);
    GROUPS(ADD)
#undef ADD
#define ADD(g) add_fast(kiln__x86_##g);
    FAST_GROUPS(ADD)
#undef ADD
    for (int op = 0; op < KILN_OP_COUNT; op++)
        best[op] = fast[op] ? fast[op]->fn : ref[op];
}

kiln_kernel_fn kiln__ref_kernel(kiln_op op)
{
    pthread_once(&once, init);
    return (op >= 0 && op < KILN_OP_COUNT) ? best[op] : NULL;
}

kiln_kernel_fn kiln__cpu_ref_kernel(kiln_op op)
{
    pthread_once(&once, init);
    return (op >= 0 && op < KILN_OP_COUNT) ? ref[op] : NULL;
}

const kiln_kernel_isa_reg *kiln__cpu_fast_kernel(kiln_op op)
{
    pthread_once(&once, init);
    return (op >= 0 && op < KILN_OP_COUNT) ? fast[op] : NULL;
}

const kiln_kernel_isa_reg *kiln__cpu_fast_kernel_at(kiln_op op, int i)
{
    pthread_once(&once, init);
    return op >= 0 && op < KILN_OP_COUNT && i >= 0 && i < n_fast[op] ? fast_all[op][i] : NULL;
}
