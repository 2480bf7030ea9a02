/* Alternated timing of tactic candidates and the choice rule (tactic_time.h). */
#include "tactic_time.h"
#include <time.h>

static double mono_ns(void *unused)
{
    (void)unused;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

kiln_status kiln__tactic_time(int n, int rounds, kiln_tactic_run_fn run, void *user, kiln_tactic_clock_fn clock,
                              void *clock_user, double *ns)
{
    if (!clock)
        clock = mono_ns;
    for (int t = 0; t < n; t++)
        KILN_TRY(run(user, t));   /* warm-up: caches, scratch buffers, page faults */
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) {
            int t = r % 2 ? n - 1 - i : i;
            double t0 = clock(clock_user);
            KILN_TRY(run(user, t));
            ns[r * n + t] = clock(clock_user) - t0;
        }
    return KILN_OK;
}

double kiln__tactic_min(const double *ns, int n, int rounds, int t)
{
    double m = 1e300;
    for (int r = 0; r < rounds; r++)
        m = ns[r * n + t] < m ? ns[r * n + t] : m;
    return m;
}

int kiln__tactic_pick(const double *ns, int n, int rounds, double margin)
{
    int best = 0;
    double m0 = kiln__tactic_min(ns, n, rounds, 0), mb = m0;
    for (int t = 1; t < n; t++) {
        double m = kiln__tactic_min(ns, n, rounds, t);
        int wins = 0;
        for (int r = 0; r < rounds; r++)
            wins += ns[r * n + t] < ns[r * n];
        if (m <= margin * m0 && 4 * wins >= 3 * rounds && m < mb) {
            best = t;
            mb = m;
        }
    }
    return best;
}
