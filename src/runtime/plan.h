/* Memory planner: places every intermediate tensor of a graph in one arena by liveness, sharing
 * a slot in place where an elementwise op's input dies at that op. */
#ifndef KILN_RUNTIME_PLAN_H
#define KILN_RUNTIME_PLAN_H
#include "exec.h"

typedef struct kiln_plan {
    int n_values;
    int64_t *offset;      /* per value: arena offset or -1 */
    size_t *cap;          /* per value: bytes */
    uint8_t *inplace;     /* per value: shares the slot of a dying input */
    size_t arena_size;    /* peak: bytes the arena needs */
    size_t naive_bytes;   /* sum of all planned tensors (what per-tensor allocation would hold) */
    int n_planned, n_inplace;
} kiln_plan;

/* Plans g given the byte size of each value (0 = not planned, e.g. never produced). */
kiln_status kiln__plan_make(const kiln_graph *g, const size_t *bytes, kiln_plan *p);
void kiln__plan_free(kiln_plan *p);
/* Checks a plan from outside (an engine file) against g: every slot inside the arena and held
 * by a value a node of g computes, and no two values live at the same time share a byte unless
 * one is computed in place over the other by an op that allows it. KILN_ERR_PARSE if not. */
kiln_status kiln__plan_validate(const kiln_graph *g, const kiln_plan *p);
/* A kiln_mem view of a plan over an arena buffer. */
void kiln__plan_mem(const kiln_plan *p, uint8_t *arena, kiln_mem *m);
#endif
