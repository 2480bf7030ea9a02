/* kiln build --device cuda: which layers the GPU cannot run, found by one run of the new engine on it
 * (synthetic inputs at its first profile's min shapes, else as kiln bench makes them), then one run at each
 * profile's opt shapes; the kernel choices those runs timed on the GPU are stored in the engine (device tactics,
 * docs/CUDA.md). */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

/* Profile p's min (opt = false) or opt shapes as a kiln_shapes_t, or NULL (no such profile, or a name the spec
 * cannot hold). */
static kiln_shapes_t profile_shapes(kiln_engine_t e, int p, bool opt)
{
    if (kiln_engine_num_profiles(e) <= p)
        return NULL;
    char spec[4096] = "";
    size_t o = 0;
    for (int k = 0; k < kiln_engine_profile_num_ranges(e, p); k++) {
        kiln_shape_range r;
        if (kiln_engine_profile_range(e, p, k, &r) != KILN_OK || strpbrk(r.input, ":,") || r.ndim < 1)
            return NULL;
        o += (size_t)snprintf(spec + o, o < sizeof spec ? sizeof spec - o : 0, "%s%s:", k ? "," : "", r.input);
        for (int d = 0; d < r.ndim; d++)
            o += (size_t)snprintf(spec + o, o < sizeof spec ? sizeof spec - o : 0, "%s%lld", d ? "x" : "",
                                  (long long)(opt ? r.opt[d] : r.min[d]));
        if (o >= sizeof spec)
            return NULL;
    }
    kiln_shapes_t s = NULL;
    return kiln_shapes_parse(spec, &s) == KILN_OK ? s : NULL;
}

/* Whether profile p's opt shapes differ from its min shapes */
static bool opt_differs(kiln_engine_t e, int p)
{
    for (int k = 0; k < kiln_engine_profile_num_ranges(e, p); k++) {
        kiln_shape_range r;
        if (kiln_engine_profile_range(e, p, k, &r) != KILN_OK)
            return false;
        for (int d = 0; d < r.ndim; d++)
            if (r.opt[d] != r.min[d])
                return true;
    }
    return false;
}

/* One run of context c on synthetic inputs of the given shapes (NULL: as kiln bench makes them) */
static kiln_status run_at(kiln_engine_t e, kiln_context_t c, kiln_shapes_t shapes)
{
    int nin = kiln_engine_num_inputs(e);
    kiln_tensor *ins = calloc((size_t)nin + 1, sizeof *ins);
    if (!ins)
        return KILN_ERR_NOMEM;
    kiln_synth_options so = {.shapes = shapes};
    kiln_status st = kiln_engine_synth_inputs(e, &so, ins);
    for (int i = 0; i < nin && st == KILN_OK; i++)
        st = kiln_context_set_input(c, kiln_engine_input_name(e, i), &ins[i]);
    if (st == KILN_OK)
        st = kiln_context_run(c);
    for (int i = 0; i < nin; i++)
        kiln_free(ins[i].data);
    free(ins);
    return st;
}

/* Runs e on the GPU in context c; *n_fb: its layers without a CUDA kernel, listed (up to 8) in list. */
static kiln_status run_on_gpu(kiln_engine_t e, kiln_context_t c, kiln_shapes_t shapes, int *n_fb, char *list,
                              size_t cap)
{
    kiln_status st = kiln_context_set_device(c, KILN_DEVICE_CUDA, 0);
    if (st == KILN_OK)
        st = run_at(e, c, shapes);
    *n_fb = 0;
    list[0] = '\0';
    for (int i = 0; st == KILN_OK && i < kiln_engine_num_layers(e); i++) {
        kiln_layer_place p;
        kiln_layer_info L;
        if (kiln_context_layer_place(c, i, &p) != KILN_OK || p != KILN_PLACE_FALLBACK ||
            kiln_engine_layer(e, i, &L) != KILN_OK)
            continue;
        size_t n = strlen(list);
        if (*n_fb < 8)
            snprintf(list + n, cap - n, "%s%s (%s)", n ? ", " : "", L.name[0] ? L.name : "-", L.op);
        else if (*n_fb == 8)
            snprintf(list + n, cap - n, ", ...");
        (*n_fb)++;
    }
    return st;
}

/* The other runs (each profile's opt shapes), then the choices they and the first timed into the engine */
static kiln_status tune(kiln_engine_t e, kiln_context_t c, double t0)
{
    kiln_status st = KILN_OK;
    for (int p = 0; p < kiln_engine_num_profiles(e) && st == KILN_OK; p++) {
        if (p == 0 && !opt_differs(e, 0))
            continue;
        kiln_shapes_t s = profile_shapes(e, p, true);
        st = s ? run_at(e, c, s) : KILN_OK;
        kiln_shapes_free(s);
    }
    if (st == KILN_OK)
        st = kiln_engine_store_device_tactics(e, c);
    char sig[256];
    int n = st == KILN_OK ? kiln_engine_device_tactics(e, sig, sizeof sig) : 0;
    if (st == KILN_OK && n > 0)
        printf("device tactics: %d kernel choice%s timed on %s, stored in the engine (device runs %.1f s)\n", n,
               n == 1 ? "" : "s", cli_esc(sig), (cli_now_ms() - t0) / 1e3);
    return st;
}

int cli_device_check(kiln_engine_t e, bool strict)
{
    double t0 = cli_now_ms();
    kiln_shapes_t shapes = profile_shapes(e, 0, false);
    int n_fb = 0;
    char list[1024];
    kiln_context_t c = NULL;
    kiln_status st = kiln_context_create(e, &c);
    if (st == KILN_OK)
        st = run_on_gpu(e, c, shapes, &n_fb, list, sizeof list);
    kiln_shapes_free(shapes);
    if (st != KILN_OK) {
        kiln_context_free(c);
        fprintf(stderr, "kiln build: %s: the layers were not checked against the GPU (%s)\n",
                strict ? "error" : "note", cli_esc(kiln_last_error()));
        return strict ? 1 : 0;
    }
    if (n_fb == 0)
        printf("device check: every layer runs on the GPU\n");
    else
        fprintf(stderr, "kiln build: %s: %d layer%s without a CUDA kernel will run on the CPU, with copies: %s\n",
                strict ? "error (--strict-device)" : "warning", n_fb, n_fb == 1 ? "" : "s", cli_esc(list));
    if (n_fb && strict) {
        kiln_context_free(c);
        return 1;
    }
    st = tune(e, c, t0);
    kiln_context_free(c);
    if (st != KILN_OK)   /* the engine is still right: its kernels are timed when it first runs */
        fprintf(stderr, "kiln build: note: no device tactics stored (%s)\n", cli_esc(kiln_last_error()));
    return 0;
}
