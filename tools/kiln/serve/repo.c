/* Model repository: DIR/<model>/<version>/model.kiln|model.onnx (+ DIR/<model>/config.pbtxt),
 * loading (ONNX built into an engine, cached beside the model), unloading, and reference-counted
 * access for requests. The newest numeric version of a model is served (Triton's default
 * version policy, latest 1). */
#include "serve.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { ST_UNAVAILABLE, ST_LOADING, ST_READY };
static const char *const STATE[] = {"UNAVAILABLE", "LOADING", "READY"};

typedef struct sv_entry {
    char name[SV_NAME_MAX];
    int state;
    int64_t version;
    char reason[512];
    sv_model *m;
    bool wanted;   /* asked to be loaded (at start or by a load request) and not unloaded since */
    bool loading;  /* a load is in progress (a second one is refused) */
    uint64_t unloads;   /* unload requests so far: a load that sees it move drops what it loaded */
} sv_entry;

struct sv_repo {
    char root[2048];
    sv_options opt;
    pthread_mutex_t mu;
    sv_entry *e;
    int n, cap;
};

const sv_options *sv_repo_options(sv_repo *r) { return &r->opt; }

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Entry for `name` (created if absent); call with the lock held. */
static sv_entry *entry(sv_repo *r, const char *name, bool create)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->e[i].name, name))
            return &r->e[i];
    if (!create)
        return NULL;
    if (r->n == r->cap) {
        int nc = r->cap ? r->cap * 2 : 16;
        sv_entry *ne = realloc(r->e, sizeof *ne * (size_t)nc);
        if (!ne)
            return NULL;
        r->e = ne;
        r->cap = nc;
    }
    sv_entry *x = &r->e[r->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->version = -1;
    return x;
}

/* Adds an entry for every model directory, and drops those of directories gone that hold nothing:
 * no model, no load in progress, none asked for (lock held). Scanning loads nothing and changes no
 * model's state, so neither does the index request that scans. */
static void scan(sv_repo *r)
{
    DIR *d = opendir(r->root);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", r->root, de->d_name);
        if (sv_name_ok(de->d_name) && is_dir(p))
            entry(r, de->d_name, true);
    }
    if (d)
        closedir(d);
    for (int i = r->n - 1; i >= 0; i--) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", r->root, r->e[i].name);
        if (!r->e[i].m && !r->e[i].loading && !r->e[i].wanted && !is_dir(p)) {
            memmove(&r->e[i], &r->e[i + 1], sizeof *r->e * (size_t)(r->n - i - 1));
            r->n--;
        }
    }
}

sv_repo *sv_repo_open(const char *root, const sv_options *o, char *err, size_t errlen)
{
    if (!is_dir(root) || strlen(root) >= 2048) {
        snprintf(err, errlen, "model repository '%s' is not a directory", root);
        return NULL;
    }
    sv_repo *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(r->root, sizeof r->root, "%s", root);
    r->opt = *o;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_lock(&r->mu);
    scan(r);
    pthread_mutex_unlock(&r->mu);
    return r;
}

static void model_free(sv_model *m)
{
    if (!m)
        return;
    sv_sched_stop(m);
    for (int i = 0; m->ctxs && i < m->cfg.instance_count; i++)
        kiln_context_free(m->ctxs[i]);
    free(m->ctxs);
    kiln_engine_free(m->engine);
    sv_config_free(&m->cfg);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void sv_model_release(sv_model *m)
{
    if (m && atomic_fetch_sub(&m->refs, 1) == 1)
        model_free(m);
}

/* Newest numeric version directory holding model.kiln or model.onnx; -1 if none. */
static int64_t latest_version(const char *mdir)
{
    int64_t best = -1;
    DIR *d = opendir(mdir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int64_t v;
        char p[4096], q[4200];
        if (!sv_parse_i64(de->d_name, 1, INT32_MAX, &v) || v <= best)
            continue;
        snprintf(p, sizeof p, "%s/%s", mdir, de->d_name);
        snprintf(q, sizeof q, "%s/model.kiln", p);
        bool has = sv_is_file(q);
        snprintf(q, sizeof q, "%s/model.onnx", p);
        if (has || sv_is_file(q))
            best = v;
    }
    if (d)
        closedir(d);
    return best;
}

static sv_model *model_open(sv_repo *r, const char *name, char *err, size_t errlen)
{
    char mdir[4096], vdir[4200];
    snprintf(mdir, sizeof mdir, "%s/%s", r->root, name);
    int64_t v = latest_version(mdir);
    if (v < 0) {
        snprintf(err, errlen, "model '%s' has no version directory with model.kiln or model.onnx", name);
        return NULL;
    }
    snprintf(vdir, sizeof vdir, "%s/%lld", mdir, (long long)v);
    sv_model *m = calloc(1, sizeof *m);
    if (!m)
        return snprintf(err, errlen, "out of memory"), NULL;
    snprintf(m->name, sizeof m->name, "%s", name);
    m->version = v;
    atomic_init(&m->refs, 1);
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    bool ok = sv_config_read(mdir, name, &m->cfg, err, errlen);
    m->device = sv_config_device(&m->cfg, r->opt.device);
    ok = ok && sv_open_engine(mdir, vdir, &m->cfg, m->device, &m->engine, err, errlen) && sv_config_complete(&m->cfg, m->engine, err, errlen);
    if (ok && !(m->ctxs = calloc((size_t)m->cfg.instance_count, sizeof *m->ctxs))) {
        snprintf(err, errlen, "out of memory");
        ok = false;
    }
    int threads = m->cfg.threads_per_instance ? m->cfg.threads_per_instance : r->opt.threads;
    for (int i = 0; ok && i < m->cfg.instance_count; i++) {
        ok = kiln_context_create(m->engine, &m->ctxs[i]) == KILN_OK;
        if (!ok)
            snprintf(err, errlen, "creating an execution context: %s", kiln_last_error());
        else if (threads > 0)
            kiln_context_set_threads(m->ctxs[i], threads);
        if (ok && m->device != KILN_DEVICE_CPU && kiln_context_set_device(m->ctxs[i], m->device, 0) != KILN_OK) {
            snprintf(err, errlen, "instance %d on the GPU: %s", i, kiln_last_error());
            ok = false;
        }
    }
    if (ok) {
        sv_autobatch(m);
        ok = sv_sched_start(m, err, errlen);
    }
    if (!ok) {
        model_free(m);
        return NULL;
    }
    return m;
}

int sv_repo_load(sv_repo *r, const char *name, char *err, size_t errlen)
{
    char mdir[4096];
    if (!sv_name_ok(name))
        return snprintf(err, errlen, "invalid model name"), 400;
    snprintf(mdir, sizeof mdir, "%s/%s", r->root, name);
    if (!is_dir(mdir))
        return snprintf(err, errlen, "no model '%s' in the repository", name), 404;
    pthread_mutex_lock(&r->mu);
    sv_entry *x = entry(r, name, true);
    if (!x || x->loading) {
        pthread_mutex_unlock(&r->mu);
        return snprintf(err, errlen, x ? "model '%s' is already loading" : "out of memory", name), x ? 409 : 500;
    }
    /* a reload leaves the loaded version READY, serving, until the new one is ready (as in Triton) */
    int64_t serving = x->m ? x->m->version : -1;
    if (!x->m)
        x->state = ST_LOADING;
    x->wanted = x->loading = true;
    uint64_t unloads = x->unloads;
    pthread_mutex_unlock(&r->mu);
    if (serving >= 0)
        fprintf(stderr, "kiln serve: reloading '%s' (version %lld serves until the new one is ready)\n", name,
                (long long)serving);
    uint64_t t0 = sv_now_ns();
    sv_model *m = model_open(r, name, err, errlen);
    pthread_mutex_lock(&r->mu);
    x = entry(r, name, false);   /* the array may have moved */
    x->loading = false;
    if (x->unloads != unloads) {   /* unloaded meanwhile: the last request wins, as in Triton */
        pthread_mutex_unlock(&r->mu);
        if (m)
            sv_model_release(m);
        fprintf(stderr, "kiln serve: '%s' was unloaded while it was loading; the load is dropped\n", name);
        return snprintf(err, errlen, "model '%s' was unloaded while it was loading", name), 409;
    }
    sv_model *old = x->m;
    x->m = m ? m : old;
    x->state = x->m ? ST_READY : ST_UNAVAILABLE;
    if (m)
        x->version = m->version;
    snprintf(x->reason, sizeof x->reason, "%s", m ? "" : err);
    pthread_mutex_unlock(&r->mu);
    if (!m) {
        fprintf(stderr, "kiln serve: loading '%s' failed%s: %s\n", name, old ? " (the loaded version keeps serving)" : "",
                err);
        return 400;
    }
    if (old)
        sv_model_release(old);
    fprintf(stderr, "kiln serve: loaded '%s' version %lld in %.0f ms (max_batch_size %d, %d instance(s) on the %s, batching %s)\n",
            name, (long long)m->version, (double)(sv_now_ns() - t0) / 1e6, m->cfg.max_batch_size,
            m->cfg.instance_count, m->device == KILN_DEVICE_CUDA ? "GPU" : "CPU", m->cfg.dynamic_batching ? "on" : "off");
    return 200;
}

int sv_repo_unload(sv_repo *r, const char *name, char *err, size_t errlen)
{
    if (!sv_name_ok(name))
        return snprintf(err, errlen, "invalid model name"), 400;
    pthread_mutex_lock(&r->mu);
    sv_entry *x = entry(r, name, false);
    sv_model *m = NULL;
    if (x) {   /* whatever its state: a model that failed to load is no longer asked for, a load in progress is dropped */
        m = x->m;
        x->m = NULL;
        x->state = ST_UNAVAILABLE;
        x->wanted = false;
        x->unloads++;
        snprintf(x->reason, sizeof x->reason, "unloaded");
    }
    pthread_mutex_unlock(&r->mu);
    if (!x)
        return snprintf(err, errlen, "no model '%s' in the repository", name), 404;
    sv_model_release(m);   /* requests in flight keep it alive until they finish */
    return 200;
}

bool sv_repo_load_all(sv_repo *r)
{
    pthread_mutex_lock(&r->mu);
    int n = r->n;
    char (*names)[SV_NAME_MAX] = malloc(sizeof *names * (size_t)(n ? n : 1));
    for (int i = 0; names && i < n; i++)
        memcpy(names[i], r->e[i].name, SV_NAME_MAX);
    pthread_mutex_unlock(&r->mu);
    bool ok = names != NULL;
    for (int i = 0; names && i < n; i++) {
        char err[512];
        ok = sv_repo_load(r, names[i], err, sizeof err) == 200 && ok;
    }
    free(names);
    return ok;
}

json_t *sv_repo_index(sv_repo *r)
{
    json_t *a = json_array();
    pthread_mutex_lock(&r->mu);
    scan(r);
    for (int i = 0; i < r->n; i++) {
        sv_entry *x = &r->e[i];
        json_t *o = json_pack("{s:s, s:s}", "name", x->name, "state", STATE[x->state]);
        if (x->version >= 0) {
            char v[32];
            snprintf(v, sizeof v, "%lld", (long long)x->version);
            json_object_set_new(o, "version", json_string(v));
        }
        if (x->reason[0])
            json_object_set_new(o, "reason", json_string(x->reason));
        json_array_append_new(a, o);
    }
    pthread_mutex_unlock(&r->mu);
    return a;
}

/* Triton's strict readiness: every model asked to be loaded (at start, or by a load request not
 * undone by an unload) is ready. A directory the index found, never loaded, does not count. */
bool sv_repo_all_ready(sv_repo *r)
{
    pthread_mutex_lock(&r->mu);
    bool ok = true;
    for (int i = 0; i < r->n; i++)
        ok = ok && (!r->e[i].wanted || r->e[i].state == ST_READY);
    pthread_mutex_unlock(&r->mu);
    return ok;
}

sv_model *sv_repo_acquire(sv_repo *r, const char *name, int64_t version, int *status, char *err, size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    sv_entry *x = sv_name_ok(name) ? entry(r, name, false) : NULL;
    sv_model *m = x && x->state == ST_READY ? x->m : NULL;
    if (m && version >= 0 && version != m->version)
        m = NULL;
    if (m)
        atomic_fetch_add(&m->refs, 1);
    pthread_mutex_unlock(&r->mu);
    if (!m) {
        *status = x && x->state == ST_READY ? 404 : x ? 400 : 404;
        if (x && x->state == ST_READY)
            snprintf(err, errlen, "model '%s' has no version %lld loaded", name, (long long)version);
        else
            snprintf(err, errlen, x ? "model '%s' is not ready" : "unknown model '%s'", sv_name_ok(name) ? name : "(invalid name)");
    }
    return m;
}

void sv_repo_close(sv_repo *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        sv_model_release(r->e[i].m);
    free(r->e);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void sv_repo_foreach_model(sv_repo *r, void (*fn)(const sv_model *m, void *user), void *user)
{
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++)
        if (r->e[i].m)
            fn(r->e[i].m, user);
    pthread_mutex_unlock(&r->mu);
}
