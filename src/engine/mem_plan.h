/* The memory plan an engine carries (PLAN section): every intermediate value's slot in one
 * activation arena. The engine owns the type and checks a plan it reads (mem_plan.c); the
 * runtime's planner (src/runtime/plan.c) makes plans. */
#ifndef KILN_ENGINE_MEM_PLAN_H
#define KILN_ENGINE_MEM_PLAN_H
#include "../ir/graph.h"

typedef struct kiln_plan {
    int n_values;
    int64_t *offset;      /* per value: arena offset or -1 */
    size_t *cap;          /* per value: bytes */
    uint8_t *inplace;     /* per value: KILN_SLOT_OWN, KILN_SLOT_INPLACE or KILN_SLOT_CONCAT */
    size_t arena_size;    /* peak: bytes the arena needs */
    size_t naive_bytes;   /* sum of all planned tensors (what per-tensor allocation would hold) */
    int n_planned, n_inplace;
} kiln_plan;

/* A value's in_place mark: a slot of its own; the slot of a dying input it is computed in place over; or (a Concat's
 * output) a slot its inputs were computed into, each where it lies in the output (runtime/plan.c). */
enum { KILN_SLOT_OWN = 0, KILN_SLOT_INPLACE = 1, KILN_SLOT_CONCAT = 2 };

/* Slot alignment of the runtime's planner (src/runtime/plan.c): each block's size is rounded up to it. */
#define KILN_PLAN_ALIGN 64

void kiln__plan_free(kiln_plan *p);
/* Ops whose kernels compute out[i] from in[i] (same index) and may therefore overwrite an input:
 * output 0 of such a node may share the slot of one of its first two inputs dying there. */
bool kiln__plan_inplace_op(kiln_op op);
/* Checks a plan from outside (an engine file) against g: every slot inside the arena and held
 * by a value a node of g computes, and no two values live at the same time share a byte unless
 * one is computed in place over the other by an op that allows it. KILN_ERR_PARSE if not. */
kiln_status kiln__plan_validate(const kiln_graph *g, const kiln_plan *p);
#endif
