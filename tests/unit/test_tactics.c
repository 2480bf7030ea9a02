/* Build-time tactic timing (src/build/tactic_time.h) with an injected clock and scripted run
 * times, so every case is deterministic (no timed test):
 * 1. candidates run alternately (warm-ups, then A B, B A, ...), every timed run is recorded;
 * 2. the default stays unless another candidate's fastest run is >= 5% faster (4% is noise, 6% is
 *    not) and it wins at least 3/4 of the rounds: a few lucky runs or load spikes on one
 *    candidate's runs do not move the choice;
 * 3. a failing run stops the timing with its status;
 * 4. the thread tactic keeps all threads for a layer whose one-thread run is long. */
#include "test.h"
#include "build/tactic_time.h"
#include "build/build.h"

enum { MAXRUN = 64, R = KILN_TACTIC_ROUNDS };

/* A fake layer: run k of candidate t takes dur[t][k] ns of virtual time (the last value repeats;
 * the warm-up is run 0). */
typedef struct fake {
    double now;
    double dur[3][MAXRUN];
    int ndur[3], done[3];
    int order[MAXRUN], n_order;
    int fail_at;   /* run index that fails, or -1 */
} fake;

static double fake_clock(void *u) { return ((fake *)u)->now; }

static kiln_status fake_run(void *u, int t)
{
    fake *f = u;
    if (f->n_order == f->fail_at)
        return KILN_ERR_INTERNAL;
    f->order[f->n_order++] = t;
    int k = f->done[t] < f->ndur[t] ? f->done[t] : f->ndur[t] - 1;
    f->done[t]++;
    f->now += f->dur[t][k];
    return KILN_OK;
}

/* The choice for two candidates with run times a[] (default) and b[], warm-up first in each. */
static int pick_for(const double *a, int na, const double *b, int nb, double *min_a, double *min_b)
{
    fake f = {.fail_at = -1, .ndur = {na, nb}};
    for (int i = 0; i < na; i++)
        f.dur[0][i] = a[i];
    for (int i = 0; i < nb; i++)
        f.dur[1][i] = b[i];
    double ns[2 * R];
    CHECK(kiln__tactic_time(2, R, fake_run, &f, fake_clock, &f, ns) == KILN_OK);
    CHECK(f.n_order == 2 + 2 * R);
    *min_a = kiln__tactic_min(ns, 2, R, 0);
    *min_b = kiln__tactic_min(ns, 2, R, 1);
    return kiln__tactic_pick(ns, 2, R, KILN_TACTIC_MARGIN);
}

static void test_order_and_samples(void)
{
    fake f = {.fail_at = -1, .ndur = {4, 4}, .dur = {{50, 10, 12, 9}, {70, 20, 8, 30}}};
    double ns[6];
    CHECK(kiln__tactic_time(2, 3, fake_run, &f, fake_clock, &f, ns) == KILN_OK);
    static const int want[] = {0, 1, 0, 1, 1, 0, 0, 1};   /* warm-ups, A B, B A, A B */
    CHECK(f.n_order == 8);
    for (int i = 0; i < 8 && i < f.n_order; i++)
        CHECK_MSG(f.order[i] == want[i], "run %d: tactic %d", i, f.order[i]);
    static const double want_ns[] = {10, 20, 12, 8, 9, 30};   /* warm-ups (50, 70) not recorded */
    for (int i = 0; i < 6; i++)
        CHECK_MSG(ns[i] == want_ns[i], "sample %d: %g", i, ns[i]);
    CHECK(kiln__tactic_min(ns, 2, 3, 0) == 9);
    CHECK(kiln__tactic_min(ns, 2, 3, 1) == 8);
    /* three candidates: the order is reversed every other round */
    fake g = {.fail_at = -1, .ndur = {1, 1, 1}, .dur = {{5}, {6}, {7}}};
    double ns3[6];
    CHECK(kiln__tactic_time(3, 2, fake_run, &g, fake_clock, &g, ns3) == KILN_OK);
    static const int want3[] = {0, 1, 2, 0, 1, 2, 2, 1, 0};
    CHECK(g.n_order == 9);
    for (int i = 0; i < 9 && i < g.n_order; i++)
        CHECK_MSG(g.order[i] == want3[i], "run %d: tactic %d", i, g.order[i]);
}

static void test_rule(void)
{
    double ma, mb;
    const double a[] = {1000};
    const double b4[] = {960}, b6[] = {940}, b5[] = {950};
    CHECK(pick_for(a, 1, b4, 1, &ma, &mb) == 0);   /* 4% faster: noise, the default stays */
    CHECK(ma == 1000 && mb == 960);
    CHECK(pick_for(a, 1, b6, 1, &ma, &mb) == 1);   /* 6% faster in every round: switch */
    CHECK(pick_for(a, 1, b5, 1, &ma, &mb) == 1);   /* exactly 5%: switch (<=) */
    /* the same scripted times give the same choice every time */
    for (int i = 0; i < 5; i++)
        CHECK(pick_for(a, 1, b4, 1, &ma, &mb) == 0);
    /* load spikes on most of the default's runs (2.7x): its fastest run still wins against a
     * candidate 1.8x slower */
    const double spiky[] = {1490, 2680, 2680, 1490, 2680, 2680, 2680, 2680, 2680, 1500};
    const double slow[] = {2680};
    CHECK(pick_for(spiky, 10, slow, 1, &ma, &mb) == 0);
    CHECK(ma == 1490);
    /* one lucky fast run of the candidate (20% faster once, else 10% slower): the default stays */
    const double lucky[] = {1100, 1100, 800, 1100};
    CHECK(pick_for(a, 1, lucky, 4, &ma, &mb) == 0);
    CHECK(mb == 800);
    /* faster by 10% in 6 of 9 rounds, slower in 3: below 3/4, the default stays; in 7 of 9: switch */
    const double six[] = {0, 900, 1100, 900, 1100, 900, 1100, 900, 900, 900};
    CHECK(pick_for(a, 1, six, 10, &ma, &mb) == 0);
    const double seven[] = {0, 900, 1100, 900, 1100, 900, 900, 900, 900, 900};
    CHECK(pick_for(a, 1, seven, 10, &ma, &mb) == 1);
    /* three candidates: the fastest of those that qualify */
    double ns[3 * 4];
    for (int r = 0; r < 4; r++) {
        ns[3 * r] = 100, ns[3 * r + 1] = 90, ns[3 * r + 2] = 80;
    }
    CHECK(kiln__tactic_pick(ns, 3, 4, KILN_TACTIC_MARGIN) == 2);
    for (int r = 0; r < 4; r++)
        ns[3 * r + 2] = 97;   /* within the margin */
    CHECK(kiln__tactic_pick(ns, 3, 4, KILN_TACTIC_MARGIN) == 1);
    for (int r = 0; r < 4; r++)
        ns[3 * r + 1] = 96;
    CHECK(kiln__tactic_pick(ns, 3, 4, KILN_TACTIC_MARGIN) == 0);
}

static void test_failure(void)
{
    for (int at = 0; at < 6; at++) {
        fake f = {.fail_at = at, .ndur = {1, 1}, .dur = {{10}, {20}}};
        double ns[6];
        CHECK(kiln__tactic_time(2, 3, fake_run, &f, fake_clock, &f, ns) == KILN_ERR_INTERNAL);
        CHECK(f.n_order == at);
    }
}

/* The thread tactic (tactics.c): one thread only for a layer lighter than KILN_TACTIC_ST_MAX_NS
 * run on one thread; a heavier layer where one thread measured faster (a core busy with another
 * process during the build) keeps all threads. */
static void test_thread_rule(void)
{
    double ns[2 * R];
    const double st_max = KILN_TACTIC_ST_MAX_NS;
    /* {mt, st} per round: st 40% faster in every round */
    static const double scale[] = {0.2, 0.5, 0.99, 1.0, 1.5, 8.0};
    for (size_t i = 0; i < sizeof scale / sizeof scale[0]; i++) {
        for (int r = 0; r < R; r++) {
            ns[2 * r] = scale[i] * st_max / 0.6 * (1.0 + 0.01 * r);
            ns[2 * r + 1] = scale[i] * st_max * (1.0 + 0.01 * r);
        }
        CHECK(kiln__tactic_pick(ns, 2, R, KILN_TACTIC_MARGIN) == 1);
        CHECK_MSG(kiln__tactic_pick_threads(ns, R) == (scale[i] < 1.0 ? 1 : 0), "st at %g x the limit", scale[i]);
    }
    /* mt faster: mt, whatever the size */
    for (int r = 0; r < R; r++)
        ns[2 * r] = 0.1 * st_max, ns[2 * r + 1] = 0.2 * st_max;
    CHECK(kiln__tactic_pick_threads(ns, R) == 0);
}

int main(void)
{
    test_thread_rule();
    test_order_and_samples();
    test_rule();
    test_failure();
    return TEST_SUMMARY();
}
