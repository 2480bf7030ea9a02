/* kiln build --device cuda: which layers the GPU cannot run, found by one run of the new engine on it
 * (synthetic inputs at its first profile's min shapes, else as kiln bench makes them). */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

/* The first profile's min shapes as a kiln_shapes_t, or NULL (no profile, or a name the spec cannot hold). */
static kiln_shapes_t min_shapes(kiln_engine_t e)
{
    if (kiln_engine_num_profiles(e) < 1)
        return NULL;
    char spec[4096] = "";
    size_t o = 0;
    for (int k = 0; k < kiln_engine_profile_num_ranges(e, 0); k++) {
        kiln_shape_range r;
        if (kiln_engine_profile_range(e, 0, k, &r) != KILN_OK || strpbrk(r.input, ":,") || r.ndim < 1)
            return NULL;
        o += (size_t)snprintf(spec + o, o < sizeof spec ? sizeof spec - o : 0, "%s%s:", k ? "," : "", r.input);
        for (int d = 0; d < r.ndim; d++)
            o += (size_t)snprintf(spec + o, o < sizeof spec ? sizeof spec - o : 0, "%s%lld", d ? "x" : "",
                                  (long long)r.min[d]);
        if (o >= sizeof spec)
            return NULL;
    }
    kiln_shapes_t s = NULL;
    return kiln_shapes_parse(spec, &s) == KILN_OK ? s : NULL;
}

/* Runs e once on the GPU; *n_fb: its layers without a CUDA kernel, listed (up to 8) in list. */
static kiln_status run_on_gpu(kiln_engine_t e, kiln_shapes_t shapes, int *n_fb, char *list, size_t cap)
{
    int nin = kiln_engine_num_inputs(e);
    kiln_tensor *ins = calloc((size_t)nin + 1, sizeof *ins);
    kiln_context_t c = NULL;
    if (!ins)
        return KILN_ERR_NOMEM;
    kiln_synth_options so = {.shapes = shapes};
    kiln_status st = kiln_engine_synth_inputs(e, &so, ins);
    if (st == KILN_OK)
        st = kiln_context_create(e, &c);
    if (st == KILN_OK)
        st = kiln_context_set_device(c, KILN_DEVICE_CUDA, 0);
    for (int i = 0; i < nin && st == KILN_OK; i++)
        st = kiln_context_set_input(c, kiln_engine_input_name(e, i), &ins[i]);
    if (st == KILN_OK)
        st = kiln_context_run(c);
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
    kiln_context_free(c);
    for (int i = 0; i < nin; i++)
        kiln_free(ins[i].data);
    free(ins);
    return st;
}

int cli_device_check(kiln_engine_t e, bool strict)
{
    kiln_shapes_t shapes = min_shapes(e);
    int n_fb = 0;
    char list[1024];
    kiln_status st = run_on_gpu(e, shapes, &n_fb, list, sizeof list);
    kiln_shapes_free(shapes);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln build: %s: the layers were not checked against the GPU (%s)\n",
                strict ? "error" : "note", cli_esc(kiln_last_error()));
        return strict ? 1 : 0;
    }
    if (n_fb == 0) {
        printf("device check: every layer runs on the GPU\n");
        return 0;
    }
    fprintf(stderr, "kiln build: %s: %d layer%s without a CUDA kernel will run on the CPU, with copies: %s\n",
            strict ? "error (--strict-device)" : "warning", n_fb, n_fb == 1 ? "" : "s", cli_esc(list));
    return strict ? 1 : 0;
}
