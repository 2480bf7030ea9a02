/* The reference backend's dispatch table, assembled from each kernel file's registration table. */
#include "../../kernel.h"
#include <pthread.h>

#define GROUPS(X) X(unary) X(binary) X(shape) X(reduce) X(norm) X(linalg) X(conv) X(pool) \
                  X(resize) X(quant) X(control) X(rnn) X(detect) X(misc) X(fused) X(extra)

#define DECL(g) extern const kiln_kernel_reg kiln__ref_##g[];
GROUPS(DECL)
#undef DECL

static kiln_kernel_fn table[KILN_OP_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void add(const kiln_kernel_reg *r)
{
    for (; r->fn; r++)
        if (r->op >= 0 && r->op < KILN_OP_COUNT)
            table[r->op] = r->fn;
}

static void init(void)
{
#define ADD(g) add(kiln__ref_##g);
    GROUPS(ADD)
#undef ADD
}

kiln_kernel_fn kiln__ref_kernel(kiln_op op)
{
    pthread_once(&once, init);
    return (op >= 0 && op < KILN_OP_COUNT) ? table[op] : NULL;
}
