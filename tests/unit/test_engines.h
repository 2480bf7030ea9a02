/* Engine helpers shared by the unit tests that build engines from hand-made graphs and compare them. */
#ifndef KILN_TEST_ENGINES_H
#define KILN_TEST_ENGINES_H
#include "engine/engine.h"
#include "kiln/kiln.h"
#include "test.h"
#include <string.h>

/* Live layers of engine e (NULL: 0) running op. */
static inline int test_engine_count_op(kiln_engine_t e, kiln_op op)
{
    int n = 0;
    for (int i = 0; e && i < e->g->n_nodes; i++)
        n += !e->g->nodes[i].dead && e->g->nodes[i].op == op;
    return n;
}

/* e's output 0 with input `name` = x on nt threads, copied into *y (zeroed on failure). */
static inline void test_engine_run(kiln_engine_t e, const char *name, const kiln_tensor *x, int nt, kiln_tensor *y)
{
    memset(y, 0, sizeof *y);
    kiln_context_t cx = NULL;
    CHECK(kiln_context_create(e, &cx) == KILN_OK);
    if (!cx)
        return;
    kiln_context_set_threads(cx, nt);
    CHECK(kiln_context_set_input(cx, name, x) == KILN_OK);
    CHECK_MSG(kiln_context_run(cx) == KILN_OK, "%s", kiln_last_error());
    const kiln_tensor *o = kiln_context_output(cx, 0);
    if (o && kiln__tensor_alloc(y, o->dtype, o->ndim, o->dims) == KILN_OK)
        memcpy(y->data, o->data, o->nbytes);
    kiln_context_free(cx);
}
#endif
