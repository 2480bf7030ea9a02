/* Device modules: finding and opening libkiln_cuda.so (dlopen, never linked), one backend
 * instance per kiln_dev, device memory and copies through the module. The per-node residency
 * logic is in exec_device.c. */
#include "device_impl.h"
#include "../backend/cpu/lowbit.h"
#include "../backend/cpu/qadd.h"
#include "../backend/cpu/qgemm.h"
#include "../core/devtac.h"
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static kiln_status host_err(kiln_status s, const char *msg) { return kiln__err(s, "%s", msg); }
static void host_log(kiln_log_level lvl, const char *msg) { kiln__log(lvl, "%s", msg); }

static const kiln_devmod_host host_services = {
    .err = host_err,
    .log = host_log,
    .attr_i = kiln__attr_i,
    .attr_f = kiln__attr_f,
    .attr_s = kiln__attr_s,
    .attr_ints = kiln__attr_ints,
    .fused_act = kiln__fused_act_of,
    .lowbit_prep = kiln__lowbit_prep,
    .free_blob = kiln__free,
    .attn_perm = kiln__attn_perm,
    .resize_plan = kiln__resize_plan,
    .resize_plan_free = kiln__resize_plan_free,
    .convt_geom = kiln__convt_geom,
    .qepi_setup = kiln__qepi_setup,
    .qadd_params = kiln__qadd_params,
};

/* ---- the module: opened once per process, never closed */

static pthread_mutex_t mod_lock = PTHREAD_MUTEX_INITIALIZER;
static const kiln_devmod *mod_cuda;
static char mod_error[1024];

/* dir of the running executable + "/" + file, or false. */
static bool beside_exe(const char *file, char *out, size_t n)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return false;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = 0;
    return (size_t)snprintf(out, n, "%s/%s", exe, file) < n;
}

static const kiln_devmod *try_open(const char *path, char *why, size_t whylen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, whylen, "%s", e ? e : "dlopen failed");
        return NULL;
    }
    kiln_devmod_entry_fn entry;
    *(void **)&entry = dlsym(h, KILN_DEVMOD_ENTRY);
    const kiln_devmod *m = entry ? entry() : NULL;
    if (!m) {
        snprintf(why, whylen, "%s has no %s entry point", path, KILN_DEVMOD_ENTRY);
        dlclose(h);
        return NULL;
    }
    if (m->abi != KILN_DEVMOD_ABI) {
        snprintf(why, whylen, "%s speaks module ABI %u, this kiln needs %u (rebuild them together)", path, m->abi,
                 KILN_DEVMOD_ABI);
        dlclose(h);
        return NULL;
    }
    return m;
}

/* KILN_CUDA_MODULE, else libkiln_cuda.so beside the executable, else the loader's search path. */
static kiln_status load_cuda_module(const kiln_devmod **out)
{
    pthread_mutex_lock(&mod_lock);
    if (!mod_cuda && !mod_error[0]) {
        char path[PATH_MAX + 32], why[512] = "";
        const char *env = getenv("KILN_CUDA_MODULE");
        if (env && env[0]) {
            mod_cuda = try_open(env, why, sizeof why);
            if (!mod_cuda)
                snprintf(mod_error, sizeof mod_error, "the CUDA module named by KILN_CUDA_MODULE could not be loaded: %s",
                         why);
        } else {
            if (beside_exe("libkiln_cuda.so", path, sizeof path) && access(path, F_OK) == 0) {
                mod_cuda = try_open(path, why, sizeof why);
            } else {
                mod_cuda = try_open("libkiln_cuda.so", why, sizeof why);
                if (!mod_cuda)
                    snprintf(why, sizeof why, "no libkiln_cuda.so beside the executable or on the library path "
                                              "(this kiln was built without CUDA, or set KILN_CUDA_MODULE)");
            }
            if (!mod_cuda)
                snprintf(mod_error, sizeof mod_error, "the CUDA module could not be loaded: %s", why);
        }
    }
    const kiln_devmod *m = mod_cuda;
    pthread_mutex_unlock(&mod_lock);
    *out = m;
    return m ? KILN_OK : kiln__err(KILN_ERR_UNSUPPORTED, "--device cuda: %s", mod_error);
}

bool kiln_device_parse(const char *name, kiln_device *out)
{
    if (!name || !out)
        return false;
    if (!strcmp(name, "cpu"))
        *out = KILN_DEVICE_CPU;
    else if (!strcmp(name, "cuda"))
        *out = KILN_DEVICE_CUDA;
    else
        return false;
    return true;
}

kiln_status kiln__dev_check_flags(const char *fn, unsigned flags)
{
    const unsigned known = KILN_DEVICE_ALLOW_TF32 | KILN_DEVICE_STRICT;
    if (flags & ~known)
        return kiln__err(KILN_ERR_INVALID_ARG, "%s: unknown flags 0x%x (KILN_DEVICE_ALLOW_TF32, KILN_DEVICE_STRICT)", fn,
                         flags & ~known);
    return KILN_OK;
}

kiln_status kiln__dev_open(kiln_device kind, unsigned flags, kiln_dev **out)
{
    *out = NULL;
    if (kind != KILN_DEVICE_CUDA)
        return kiln__err(KILN_ERR_INVALID_ARG, "unknown device %d", (int)kind);
    KILN_TRY(kiln__dev_check_flags("device", flags));
    const kiln_devmod *m;
    KILN_TRY(load_cuda_module(&m));
    kiln_dev *d = kiln__calloc(1, sizeof *d);
    if (!d)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    d->mod = m;
    kiln_devmod_opts o = {.device = 0, .allow_tf32 = (flags & KILN_DEVICE_ALLOW_TF32) != 0};
    kiln_status st = m->create(&host_services, &o, &d->be);
    if (st != KILN_OK) {
        kiln__free(d);
        return st;
    }
    m->describe(d->be, d->description, sizeof d->description);
    const char *graphs = getenv("KILN_CUDA_GRAPHS");
    d->graphs = !graphs || strcmp(graphs, "0");
    d->strict = (flags & KILN_DEVICE_STRICT) != 0;
    d->cap_input = -1;
    *out = d;
    return KILN_OK;
}

void kiln__dev_close(kiln_dev *d)
{
    if (!d)
        return;
    kiln__dev_weights_clear(d);
    kiln__dev_graph_drop(d);
    kiln__free(d->key);
    kiln__free(d->up);
    d->mod->destroy(d->be);
    kiln__free(d->fallback_ops);
    kiln__free(d->place);
    kiln__free(d->scratch);
    kiln__free(d);
}

const kiln_backend *kiln__dev_backend(const kiln_dev *d) { return d->be; }

kiln_status kiln__dev_arena_alloc(kiln_dev *d, size_t n, void **p)
{
    d->arena_gen++;
    return d->mod->alloc(d->be, n ? n : 1, p);
}

void kiln__dev_arena_free(kiln_dev *d, void *p)
{
    d->arena_gen++;
    if (p)
        d->mod->free(d->be, p);
}

kiln_status kiln__dev_upload(kiln_dev *d, const kiln_tensor *h, kiln_tensor *out, bool shared)
{
    if (d->cap_open && shared)   /* a weight's first upload: not inside a CUDA graph capture */
        return kiln__err(KILN_ERR_UNSUPPORTED, "a weight upload cannot be captured in a CUDA graph");
    if (d->cap_open)
        return kiln__dev_graph_upload(d, h, out);
    *out = *h;
    out->data = NULL;
    size_t n = h->nbytes ? h->nbytes : 1;
    KILN_TRY(shared ? d->mod->shared_alloc(d->be, n, &out->data) : d->mod->alloc(d->be, n, &out->data));
    kiln_status st = h->nbytes ? d->mod->h2d(d->be, out->data, h->data, h->nbytes) : KILN_OK;
    if (st != KILN_OK) {
        if (shared)
            d->mod->shared_free(out->data);
        else
            d->mod->free(d->be, out->data);
        memset(out, 0, sizeof *out);
        return st;
    }
    out->flags = KILN_TENSOR_BORROWED | KILN_TENSOR_ON_DEVICE;
    d->h2d_bytes += h->nbytes;
    return KILN_OK;
}

void kiln__dev_tensor_free(kiln_dev *d, kiln_tensor *t)
{
    if (t->data && !kiln__dev_graph_keeps(d, t->data))
        d->mod->free(d->be, t->data);
    memset(t, 0, sizeof *t);
}

void kiln__dev_stats(const kiln_dev *d, kiln_device_stats *s)
{
    memset(s, 0, sizeof *s);
    s->device = KILN_DEVICE_CUDA;
    s->device_layers = d->n_device;
    s->host_layers = d->n_host;
    s->fallback_layers = d->n_fallback;
    s->fallback_ops = d->fallback_ops ? d->fallback_ops : "";
    s->h2d_bytes = d->h2d_bytes;
    s->d2h_bytes = d->d2h_bytes;
    s->graph_replays = d->replays;
    double cms = 0.0;
    s->graph_ms = d->replayed && d->mod->graph_ms ? d->mod->graph_ms(d->be, &cms) : 0.0;
    if (s->graph_ms < 0 || cms < 0)
        s->graph_ms = cms = 0.0;
    s->graph_compute_ms = cms;
    for (int k = 0; k < 3; k++)
        s->replay_host_ms[k] = d->replayed ? d->replay_host_ms[k] : 0.0;
    snprintf(s->description, sizeof s->description, "%s", d->description);
    s->weight_bytes = kiln__dev_weights_bytes(d) + (d->mod->own_weight_bytes ? d->mod->own_weight_bytes(d->be) : 0);
    unsigned long long c[KILN_FP8_COUNTS];
    kiln__dev_fp8_counts(d, c);
    const unsigned long long *f = d->replayed ? d->g_fp8 : c;   /* a replay repeats its capture's counts */
    s->fp8_quant_passes = f[0];
    s->fp8_fed_inputs = f[1];
    s->fp8_held_outputs = f[2];
    s->fp8_gelu_tanh = f[3];
    for (int i = 0; d->store && i < d->n_place; i++)
        s->half_storage_layers += d->store[i] == KILN_STORE_F16 || d->store[i] == KILN_STORE_BF16;
    s->tactics_loaded = d->tactics_loaded;
    s->tactics_timed = d->mod->tactics_timed ? d->mod->tactics_timed(d->be) : 0;
}

kiln_status kiln__dev_tactics_export(kiln_dev *d, char **text, size_t *n)
{
    *text = NULL;
    *n = 0;
    return d->mod->tactics_export ? d->mod->tactics_export(d->be, text, n) : KILN_OK;
}

kiln_status kiln__dev_tactics_import(kiln_dev *d, const char *text, size_t n)
{
    char sig[512], here[512];
    if (!kiln__devtac_text_signature(text, n, sig, sizeof sig))
        return kiln__err(KILN_ERR_PARSE, "corrupted engine: device tactics section: invalid header");
    kiln__devtac_signature_of(d->description, here, sizeof here);
    size_t gl = kiln__devtac_gpu_len(sig);
    if (gl != kiln__devtac_gpu_len(here) || memcmp(sig, here, gl))
        return kiln__err(KILN_ERR_UNSUPPORTED,
                         "the engine was built for %.*s, this device is %.*s: rebuild it here (kiln build --device "
                         "cuda)", (int)gl, sig, (int)kiln__devtac_gpu_len(here), here);
    int got = d->mod->tactics_import ? d->mod->tactics_import(d->be, text, n) : -1;
    if (got < 0)
        kiln__log(KILN_LOG_WARN, "the engine's device tactics were timed with other driver or library versions (%s; "
                  "here: %s): its layers' kernels are timed again at their first run", sig, here);
    d->tactics_loaded = got;
    return KILN_OK;
}

/* The module's FP8 counts since the instance was created (0 for a module without them). */
static void fp8_counts_total(const kiln_dev *d, unsigned long long c[KILN_FP8_COUNTS])
{
    memset(c, 0, sizeof(unsigned long long) * KILN_FP8_COUNTS);
    if (d->mod->fp8_counts)
        d->mod->fp8_counts(d->be, c);
}

void kiln__dev_fp8_counts(const kiln_dev *d, unsigned long long c[KILN_FP8_COUNTS])
{
    fp8_counts_total(d, c);
    for (int k = 0; k < KILN_FP8_COUNTS; k++)
        c[k] = c[k] >= d->fp8_base[k] ? c[k] - d->fp8_base[k] : 0;
}

int kiln__dev_layer_place(const kiln_dev *d, const kiln_graph *g, int i)
{
    return d->place && d->place_g == g && i >= 0 && i < d->n_place ? d->place[i] : KILN_PLACE_NONE;
}

int kiln__dev_layer_store(const kiln_dev *d, const kiln_graph *g, int i)
{
    return d->store && d->place_g == g && i >= 0 && i < d->n_place ? d->store[i] : KILN_STORE_AS_DTYPE;
}

void kiln__dev_run_begin(kiln_dev *d)
{
    d->place_run = false;
    d->n_device = d->n_host = d->n_fallback = 0;
    d->h2d_bytes = d->d2h_bytes = 0;
    d->replayed = false;
    fp8_counts_total(d, d->fp8_base);
}
