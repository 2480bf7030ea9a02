/* Memory planner: places every intermediate tensor of a graph in one arena by liveness, sharing
 * a slot in place where an elementwise op's input dies at that op. */
#ifndef KILN_RUNTIME_PLAN_H
#define KILN_RUNTIME_PLAN_H
#include "exec.h"
#include "../engine/mem_plan.h"

/* Plans g given the byte size of each value (0 = not planned, e.g. never produced). flags: KILN_PLAN_CONV_RES also
 * computes a float32 1x1 FusedConv in place over its residual where that dies there (plan.c conv_res_pair): for the
 * CPU kernels only, which read each residual element before storing over it, or copy the residual first. */
enum { KILN_PLAN_CONV_RES = 1, KILN_PLAN_CONCAT = 2 };
/* The flags of a plan for the CPU kernels (build-time engine plans and host contexts' own): KILN_PLAN_CONV_RES only
 * with KILN_PLAN_CONV_RES=1 in the environment (read at each call). On the Zen 5 class host of bench/notes (session 23)
 * ResNet-50's conv3 layers ran 1.11-1.19x slower in place over their residual than into a slot of their own (bench/env_ab,
 * two engines, 200 pairs both orders: model 1.04x; in that host's 2x-slow phases ~1% faster); on the Zen 4 host of
 * session 17 in place was ~1.4% faster. */
unsigned kiln__plan_host_flags(void);
/* KILN_PLAN_CONCAT (with meta, each value's dtype and shape at these sizes): a Concat whose inputs are contiguous
 * pieces of its output (every dimension before the axis 1) and all computed by earlier nodes of g, each planned,
 * used by no other Concat and at a 64-byte multiple into the output, gets its inputs placed where they lie in its
 * output, so its kernel copies nothing (the output's in_place mark KILN_SLOT_CONCAT; mem_plan.h). For the CPU
 * kernels, whose Concat skips an input already in place: host flags carry it unless KILN_PLAN_CONCAT=0. */
kiln_status kiln__plan_make(const kiln_graph *g, const size_t *bytes, const kiln_tensor *meta, unsigned flags,
                            kiln_plan *p);
/* A kiln_mem view of a plan over an arena buffer. */
void kiln__plan_mem(const kiln_plan *p, uint8_t *arena, kiln_mem *m);
#endif
