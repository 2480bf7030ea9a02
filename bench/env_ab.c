/* In-process A/B of one engine: inferences alternate between an environment variable unset (A) and set to 1
 * (B), in ABBA order, each profiled per layer (kiln_context_profile), so that A and B see the same host phase
 * (on the 2-vCPU VM of bench/notes, a model's p50 moves up to 2x between seconds, far more than the 1-3% a
 * kernel change is worth; separate processes cannot compare such changes, pairs 40 ms apart can).
 *
 * To compare two versions of some code: put both in the build behind a temporary `getenv("NAME")` test (read
 * where the code runs, not cached at start-up), build, run this tool with NAME, then remove the switch.
 *
 *   build/env_ab ENGINE NAME [pairs (100)] [threads (2)] [LAYER,...]
 *
 * Prints per group (the layers whose name contains one of the comma-separated LAYER substrings, or is exactly X
 * for an entry =X; the rest; the whole model) the mean times and the paired ratio B/A (geometric mean and median
 * over the pairs, and how many pairs were below 1), then every layer whose paired ratio is off 1 by more than 2%
 * (and takes >= 0.05 ms).
 * ENV_AB_CONTEXTS=2: A and B run in two contexts, B's created and planned (its first runs) with NAME set, for
 * switches read when a context plans its memory (runtime/plan.c) rather than while it runs; with ENV_AB_ENGINE_B=FILE
 * too, B's context is of that engine (the same model built otherwise: a change made at build time, such as the
 * memory plan an engine stores; its inputs must be ENGINE's; where its layers differ (a fusion), groups are summed per
 * engine by layer name and single layers compared where both engines have one of that name).
 * ENV_AB_A_COPY=1 / ENV_AB_B_COPY=1: ENGINE / ENV_AB_ENGINE_B loaded by copy (KILN_ENGINE_LOAD_COPY) instead of mapped,
 * e.g. the same file both ways to compare where the weights live (session 19: in 2 MB pages or not).
 * The first runs of a context are not timed (3 warm-up runs). Inputs: kiln_engine_synth_inputs. A NAME that
 * nothing reads gives the noise floor (A/A): on that VM under the lead's builds, 20 pairs of ResNet-50 read
 * 0.98-1.01 on the total and single layers 0.85-1.08; with 150-300 pairs unchanged groups of layers stayed
 * within 0.99-1.01 (session 16). */
#include <kiln/kiln.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "env_ab: %s: %s\n", what, kiln_last_error());
    return 1;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static bool selected(const char *name, const char *list)
{
    if (!list || !*list)
        return false;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (*p == '=') {   /* =NAME: that layer only */
            if (n > 1 && strlen(name) == n - 1 && !strncmp(name, p + 1, n - 1))
                return true;
        } else {
            for (const char *s = name; n && *s; s++)
                if (!strncmp(s, p, n))
                    return true;
        }
        p += n + (e != NULL);
    }
    return false;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: env_ab ENGINE NAME [pairs] [threads] [LAYER,...]\n");
        return 2;
    }
    const char *var = argv[2];
    int pairs = argc > 3 ? atoi(argv[3]) : 100, threads = argc > 4 ? atoi(argv[4]) : 2;
    const char *list = argc > 5 ? argv[5] : NULL;
    if (pairs < 1 || threads < 1) {
        fprintf(stderr, "env_ab: pairs and threads must be positive\n");
        return 2;
    }
    kiln_engine_t e;
    if (kiln_engine_load_ex(argv[1], getenv("ENV_AB_A_COPY") ? KILN_ENGINE_LOAD_COPY : 0, &e) != KILN_OK)
        return fail("loading the engine");
    int nin = kiln_engine_num_inputs(e), L = kiln_engine_num_layers(e);
    kiln_tensor *in = calloc((size_t)nin, sizeof *in);
    double *ms = calloc((size_t)L, sizeof *ms), *t[2], *lg = calloc((size_t)L, sizeof *lg);
    double *la = calloc((size_t)L, sizeof *la), *q[3];
    t[0] = calloc((size_t)L, sizeof *ms);
    bool *sel = calloc((size_t)L, sizeof *sel);
    for (int k = 0; k < 3; k++)
        q[k] = calloc((size_t)pairs, sizeof *q[k]);
    if (!in || !ms || !lg || !la || !t[0] || !sel || !q[0] || !q[1] || !q[2]) {
        fprintf(stderr, "env_ab: out of memory\n");
        return 1;
    }
    if (kiln_engine_synth_inputs(e, NULL, in) != KILN_OK)
        return fail("making inputs");
    /* ENV_AB_CONTEXTS=2: B runs in a context of its own (of ENV_AB_ENGINE_B's engine if set), planned (first run)
     * with NAME set */
    const char *nctx = getenv("ENV_AB_CONTEXTS"), *eb = getenv("ENV_AB_ENGINE_B");
    const int two = nctx && atoi(nctx) == 2;
    kiln_context_t cx[2] = {NULL, NULL};
    kiln_engine_t eb_e = NULL;
    if (two && eb && eb[0]) {
        if (kiln_engine_load_ex(eb, getenv("ENV_AB_B_COPY") ? KILN_ENGINE_LOAD_COPY : 0, &eb_e) != KILN_OK)
            return fail("loading ENV_AB_ENGINE_B");
        if (kiln_engine_num_inputs(eb_e) != nin) {
            fprintf(stderr, "env_ab: %s has other inputs than %s\n", eb, argv[1]);
            return 2;
        }
    }
    /* B's layers (its own engine's, else A's), its selection, and which of A's layers each is (by name; -1: none) */
    const int LB = eb_e ? kiln_engine_num_layers(eb_e) : L;
    t[1] = calloc((size_t)LB + 1, sizeof *ms);
    bool *selb = calloc((size_t)LB + 1, sizeof *selb);
    int *amap = calloc((size_t)LB + 1, sizeof *amap);
    if (!t[1] || !selb || !amap) {
        fprintf(stderr, "env_ab: out of memory\n");
        return 1;
    }
    for (int k = 0; k <= two; k++) {
        if (k)
            setenv(var, "1", 1);
        kiln_engine_t ek = k && eb_e ? eb_e : e;
        if (kiln_context_create(ek, &cx[k]) != KILN_OK)
            return fail("creating a context");
        kiln_context_set_threads(cx[k], threads);
        for (int i = 0; i < nin; i++)
            if (kiln_context_set_input(cx[k], kiln_engine_input_name(e, i), &in[i]) != KILN_OK)
                return fail("binding an input");
        for (int i = 0; i < 3; i++)
            if (kiln_context_run(cx[k]) != KILN_OK)
                return fail("running");
        unsetenv(var);
    }
    if (!two)
        cx[1] = cx[0];
    int nsel = 0;
    for (int i = 0; i < L; i++) {
        kiln_layer_info li;
        if (kiln_engine_layer(e, i, &li) != KILN_OK)
            return fail("reading the layers");
        sel[i] = selected(li.name, list);
        nsel += sel[i];
    }
    for (int j = 0; j < LB; j++) {
        kiln_layer_info lb, la_;
        if (kiln_engine_layer(eb_e ? eb_e : e, j, &lb) != KILN_OK)
            return fail("reading the layers");
        selb[j] = selected(lb.name, list);
        amap[j] = -1;
        for (int i = 0; i < L && amap[j] < 0; i++)
            if (kiln_engine_layer(e, i, &la_) == KILN_OK && !strcmp(la_.name, lb.name))
                amap[j] = i;
    }
    if (list && !nsel) {
        fprintf(stderr, "env_ab: no layer matches '%s'\n", list);
        return 2;
    }
    double sum[2][3] = {{0}};
    for (int p = 0; p < pairs; p++) {
        double v[2][3];
        for (int h = 0; h < 2; h++) {
            int b = (p + h) & 1;   /* A B, B A, A B, ... */
            if (b)
                setenv(var, "1", 1);
            else
                unsetenv(var);
            if (kiln_context_profile(cx[b], 1, t[b]) != KILN_OK)
                return fail("running");
            v[b][0] = v[b][1] = 0;
            for (int i = 0; i < (b ? LB : L); i++)
                v[b][(b ? selb[i] : sel[i]) ? 0 : 1] += t[b][i];
            v[b][2] = v[b][0] + v[b][1];
        }
        for (int k = 0; k < 3; k++) {
            q[k][p] = v[0][k] > 0 ? v[1][k] / v[0][k] : 1.0;
            sum[0][k] += v[0][k];
            sum[1][k] += v[1][k];
        }
        for (int j = 0; j < LB; j++) {
            int i = amap[j];
            if (i >= 0 && t[0][i] > 0 && t[1][j] > 0) {
                lg[i] += log(t[1][j] / t[0][i]);
                la[i] += t[0][i];
            }
        }
    }
    unsetenv(var);
    printf("%s: %d ABBA pairs, %d thread(s); B = %s=1%s\n", argv[1], pairs, threads, var,
           two ? " (its own context, planned with it)" : "");
    static const char *names[3] = {"selected", "rest", "total"};
    for (int k = list ? 0 : 1; k < 3; k++) {
        double g = 0;
        int below = 0;
        for (int p = 0; p < pairs; p++) {
            g += log(q[k][p]);
            below += q[k][p] < 1.0;
        }
        qsort(q[k], (size_t)pairs, sizeof *q[k], cmp);
        printf("%-8s A %8.3f ms  B %8.3f ms  B/A geomean %.3f median %.3f (%d/%d pairs below 1)\n", names[k],
               sum[0][k] / pairs, sum[1][k] / pairs, exp(g / pairs), q[k][pairs / 2], below, pairs);
    }
    for (int i = 0; i < L; i++) {
        double g = exp(lg[i] / pairs);
        if (fabs(g - 1.0) > 0.02 && la[i] / pairs >= 0.05) {
            kiln_layer_info li;
            kiln_engine_layer(e, i, &li);
            printf("  %-40s A %.3f ms  B/A %.3f\n", li.name, la[i] / pairs, g);
        }
    }
    kiln_context_free(cx[0]);
    if (two)
        kiln_context_free(cx[1]);
    kiln_engine_free(eb_e);
    for (int i = 0; i < nin; i++)
        kiln_free(in[i].data);
    kiln_engine_free(e);
    free(in), free(ms), free(lg), free(la), free(t[0]), free(t[1]), free(sel), free(selb), free(amap);
    for (int k = 0; k < 3; k++)
        free(q[k]);
    return 0;
}
