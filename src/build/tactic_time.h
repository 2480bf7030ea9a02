/* Timing the candidate tactics of one layer (tactics.c) and choosing among them, apart from the
 * graph so that the rule can be tested with an injected clock and scripted run times. */
#ifndef KILN_BUILD_TACTIC_TIME_H
#define KILN_BUILD_TACTIC_TIME_H
#include "../core/core.h"

/* Rounds of timing: every candidate runs once per round. */
enum { KILN_TACTIC_ROUNDS = 9 };
/* A candidate replaces the default (index 0) only when its fastest run is at most this fraction of
 * the default's fastest run (i.e. at least 5% faster), see kiln__tactic_pick. */
#define KILN_TACTIC_MARGIN 0.95

typedef kiln_status (*kiln_tactic_run_fn)(void *user, int tactic);
typedef double (*kiln_tactic_clock_fn)(void *user);   /* nanoseconds, monotonic */

/* Times n candidates: one warm-up run of each, then `rounds` rounds that run each candidate once,
 * in reverse order every other round (A B, B A, A B, ...), so that a slow phase of a loaded
 * machine hits all candidates alike. ns[r * n + t]: candidate t's run in round r. clock NULL:
 * the monotonic clock. Stops at the first run that fails and returns its status. */
kiln_status kiln__tactic_time(int n, int rounds, kiln_tactic_run_fn run, void *user, kiln_tactic_clock_fn clock,
                              void *clock_user, double *ns);

/* Candidate t's fastest run in the samples of kiln__tactic_time. */
double kiln__tactic_min(const double *ns, int n, int rounds, int t);

/* The candidate to use: 0 (the default) unless another one's fastest run is <= margin times the
 * default's and it was faster than the default in at least 3/4 of the rounds (so a few lucky runs
 * do not move the choice); of those, the one with the fastest run. */
int kiln__tactic_pick(const double *ns, int n, int rounds, double margin);

#endif
