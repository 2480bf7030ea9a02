/* Stopping runs early: cancellation (per context, or every run in the process) and the time
 * budget of the builder's own runs. Requests are lock-free atomic stores, so they may come from a
 * signal handler; runs poll them between nodes and at every subgraph (Loop / Scan iteration). */
#include "exec.h"
#include "model.h"
#include <time.h>

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "cancellation needs lock-free atomics (async-signal safety)");

static atomic_uint cancel_generation;   /* bumped by kiln_cancel_all */

void kiln_cancel_all(void)
{
    atomic_fetch_add(&cancel_generation, 1u);
}

int64_t kiln__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

kiln_run_ctl kiln__run_ctl(const atomic_int *cancel, double budget_s)
{
    kiln_run_ctl c = {.cancel = cancel, .generation = atomic_load(&cancel_generation), .budget_s = budget_s};
    if (budget_s > 0)
        c.deadline_ns = kiln__now_ns() + (budget_s > 1e9 ? (int64_t)1e18 : (int64_t)(budget_s * 1e9));
    return c;
}

kiln_status kiln__run_check(const kiln_run_ctl *c)
{
    if ((c->cancel && atomic_load_explicit(c->cancel, memory_order_relaxed)) ||
        atomic_load_explicit(&cancel_generation, memory_order_relaxed) != c->generation)
        return kiln__err(KILN_ERR_CANCELLED, "run cancelled");
    if (c->deadline_ns && kiln__now_ns() > c->deadline_ns)
        return kiln__err(KILN_ERR_LIMIT, "the run exceeded its time budget of %g s", c->budget_s);
    return KILN_OK;
}
