/* kiln build: ONNX model -> optimized engine file (.kiln). */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

#define MAX_PROFILES 16
#define MAX_RANGES 64

typedef struct {
    int n;
    char *names[MAX_RANGES];
    int ndim[MAX_RANGES];
    int64_t dims[MAX_RANGES][KILN_MAX_DIMS];
} shape_set;

/* Parses "NAME:1x3x64x64,NAME2:8x128" (the last ':' separates name and shape). */
static bool parse_shapes(const char *spec, shape_set *s)
{
    char *copy = strdup(spec), *save = NULL;
    s->n = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        if (!colon || colon == tok || s->n >= MAX_RANGES) {
            fprintf(stderr, "kiln build: bad shape spec '%s' (want NAME:1x3x224x224)\n", tok);
            free(copy);
            return false;
        }
        *colon = 0;
        int nd = 0;
        char *p = colon + 1;
        while (*p) {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (end == p || v < 0 || nd >= KILN_MAX_DIMS) {
                fprintf(stderr, "kiln build: bad shape '%s' for input '%s'\n", colon + 1, tok);
                free(copy);
                return false;
            }
            s->dims[s->n][nd++] = v;
            p = *end == 'x' ? end + 1 : end;
            if (*end && *end != 'x') {
                fprintf(stderr, "kiln build: bad shape '%s' for input '%s'\n", colon + 1, tok);
                free(copy);
                return false;
            }
        }
        s->names[s->n] = strdup(tok);
        s->ndim[s->n] = nd;
        s->n++;
    }
    free(copy);
    return true;
}

static void free_set(shape_set *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->names[i]);
    s->n = 0;
}

int cmd_build(int argc, char **argv)
{
    const char *model_path = NULL, *out_path = NULL, *cache = NULL;
    bool report = false, no_opt = false, no_tactics = false;
    double budget = 0;
    shape_set mins[MAX_PROFILES] = {0}, opts_[MAX_PROFILES] = {0}, maxs[MAX_PROFILES] = {0}, fixed[MAX_PROFILES] = {0};
    int nmin = 0, nopt = 0, nmax = 0, nfixed = 0, rc = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-o") && has)
            out_path = argv[++i];
        else if (!strcmp(a, "--passes-report"))
            report = true;
        else if (!strcmp(a, "--no-optimize"))
            no_opt = true;
        else if (!strcmp(a, "--no-tactics"))
            no_tactics = true;
        else if (!strcmp(a, "--timing-cache") && has)
            cache = argv[++i];
        else if (!strcmp(a, "--build-run-budget") && has) {
            char *end;
            budget = strtod(argv[++i], &end);
            if (*end || end == argv[i] || !(budget > 0) || budget > 1e9) {
                fprintf(stderr, "kiln build: --build-run-budget expects seconds > 0, got '%s'\n", argv[i]);
                goto done;
            }
        }
        else if (!strcmp(a, "--min-shapes") && has && nmin < MAX_PROFILES) {
            if (!parse_shapes(argv[++i], &mins[nmin++]))
                goto done;
        } else if (!strcmp(a, "--opt-shapes") && has && nopt < MAX_PROFILES) {
            if (!parse_shapes(argv[++i], &opts_[nopt++]))
                goto done;
        } else if (!strcmp(a, "--max-shapes") && has && nmax < MAX_PROFILES) {
            if (!parse_shapes(argv[++i], &maxs[nmax++]))
                goto done;
        } else if (!strcmp(a, "--shapes") && has && nfixed < MAX_PROFILES) {
            if (!parse_shapes(argv[++i], &fixed[nfixed++]))
                goto done;
        } else if (a[0] != '-' && !model_path)
            model_path = a;
        else {
            fprintf(stderr, "kiln build: unexpected argument '%s'\n", a);
            goto done;
        }
    }
    if (!model_path || !out_path) {
        fprintf(stderr, "usage: kiln build MODEL.onnx -o OUT.kiln [--passes-report] [--no-optimize] [--no-tactics]\n"
                        "       [--shapes NAME:DIMS,...] [--min-shapes ... --opt-shapes ... --max-shapes ...]\n"
                        "       [--timing-cache FILE] [--build-run-budget SECONDS (default 60)]\n"
                        "       (repeat --min/--opt/--max-shapes or --shapes for more profiles)\n");
        goto done;
    }
    if (nmin != nmax || (nopt && nopt != nmin)) {
        fprintf(stderr, "kiln build: give --min-shapes and --max-shapes (and optionally --opt-shapes) the same number of times\n");
        goto done;
    }
    kiln_profile profiles[2 * MAX_PROFILES];
    kiln_shape_range ranges[2 * MAX_PROFILES][MAX_RANGES];
    int np = 0;
    for (int p = 0; p < nmin; p++, np++) {
        if (mins[p].n != maxs[p].n || (nopt && opts_[p].n != mins[p].n)) {
            fprintf(stderr, "kiln build: profile %d: min/opt/max name different inputs\n", p);
            goto done;
        }
        for (int k = 0; k < mins[p].n; k++) {
            kiln_shape_range *r = &ranges[np][k];
            memset(r, 0, sizeof *r);
            r->input = mins[p].names[k];
            r->ndim = mins[p].ndim[k];
            int km = -1, ko = -1;
            for (int j = 0; j < maxs[p].n; j++)
                if (!strcmp(maxs[p].names[j], r->input))
                    km = j;
            for (int j = 0; nopt && j < opts_[p].n; j++)
                if (!strcmp(opts_[p].names[j], r->input))
                    ko = j;
            if (km < 0 || (nopt && ko < 0) || maxs[p].ndim[km] != r->ndim || (ko >= 0 && opts_[p].ndim[ko] != r->ndim)) {
                fprintf(stderr, "kiln build: input '%s' needs min, opt and max shapes of the same rank\n", r->input);
                goto done;
            }
            for (int d = 0; d < r->ndim; d++) {
                r->min[d] = mins[p].dims[k][d];
                r->max[d] = maxs[p].dims[km][d];
                r->opt[d] = ko >= 0 ? opts_[p].dims[ko][d] : r->max[d];
            }
        }
        profiles[np] = (kiln_profile){mins[p].n, ranges[np]};
    }
    for (int p = 0; p < nfixed; p++, np++) {
        for (int k = 0; k < fixed[p].n; k++) {
            kiln_shape_range *r = &ranges[np][k];
            memset(r, 0, sizeof *r);
            r->input = fixed[p].names[k];
            r->ndim = fixed[p].ndim[k];
            for (int d = 0; d < r->ndim; d++)
                r->min[d] = r->opt[d] = r->max[d] = fixed[p].dims[k][d];
        }
        profiles[np] = (kiln_profile){fixed[p].n, ranges[np]};
    }
    kiln_model_t m = NULL;
    kiln_engine_t e = NULL;
    kiln_status st = kiln_model_load(model_path, &m);
    if (st != KILN_OK) {
        rc = cli_die(st, "loading model");
        goto done;
    }
    kiln_build_options bo = {.no_optimize = no_opt, .num_profiles = np, .profiles = profiles, .timing_cache = cache,
                             .want_report = true, .no_tactics = no_tactics, .run_budget_s = budget};
    st = kiln_build(m, &bo, &e);
    kiln_model_free(m);
    if (st != KILN_OK) {
        rc = cli_die(st, "building engine");
        goto done;
    }
    if (report && bo.report)
        printf("%s", bo.report);
    else if (bo.report && strstr(bo.report, "nodes:"))
        printf("%.*s", (int)strcspn(strstr(bo.report, "nodes:"), "\n") + 1, strstr(bo.report, "nodes:"));
    kiln_free(bo.report);
    st = kiln_engine_save(e, out_path);
    kiln_engine_free(e);
    if (st != KILN_OK) {
        rc = cli_die(st, "saving engine");
        goto done;
    }
    printf("engine written to %s\n", out_path);
    rc = 0;
done:
    for (int p = 0; p < MAX_PROFILES; p++) {
        free_set(&mins[p]);
        free_set(&opts_[p]);
        free_set(&maxs[p]);
        free_set(&fixed[p]);
    }
    return rc;
}
