/* kiln loadgen: a perf_analyzer-like load generator for kiln serve (or any KServe v2 server on
 * this machine). Closed loop over a concurrency sweep, or open loop at a fixed request rate;
 * JSON or binary (Triton extension) payloads from random data or .npy files; prints throughput
 * and p50/p90/p95/p99 latency. Loopback only, bounded in requests and time. HTTP via libcurl. */
#include "serve.h"
#include <curl/curl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LEVELS 32
#define MAX_REQUESTS 10000000LL

typedef struct lg {
    char base[512];            /* http://host:port/v2/models/<m>[/versions/<v>] */
    char *body;
    size_t body_len, header_len;
    int64_t batch;
    /* one level */
    int64_t total;
    double rate;               /* > 0: open loop */
    uint64_t t0, deadline;
    atomic_llong next;
    atomic_llong errors;
    uint64_t *lat_ns;          /* per request index; 0 = not done or failed */
    char first_error[512];
    pthread_mutex_t mu;
} lg;

typedef struct buf { char *p; size_t n; } buf;
static size_t collect(char *p, size_t sz, size_t n, void *user)
{
    buf *b = user;
    size_t k = sz * n;
    if (b->n + k > (64u << 20))
        return 0;
    char *np = realloc(b->p, b->n + k + 1);
    if (!np)
        return 0;
    memcpy(np + b->n, p, k);
    b->p = np;
    b->n += k;
    b->p[b->n] = 0;
    return k;
}

/* GET url -> parsed JSON (NULL with a message on failure). */
static json_t *get_json(const char *url)
{
    CURL *h = curl_easy_init();
    buf b = {0};
    long code = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    json_t *j = rc == CURLE_OK && code == 200 && b.p ? json_loads(b.p, 0, NULL) : NULL;
    if (!j)
        fprintf(stderr, "kiln loadgen: GET %s: %s (HTTP %ld) %s\n", url, curl_easy_strerror(rc), code, b.p ? b.p : "");
    free(b.p);
    return j;
}

/* A response body: kept (its first 4 KB) only when the status is not 200, for the error message; the 200s, which
 * may be large, are dropped as they come. */
typedef struct resp {
    CURL *h;
    char text[4096];
    size_t n;
} resp;
static size_t keep_error(char *p, size_t sz, size_t n, void *user)
{
    resp *r = user;
    long code = 0;
    curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &code);
    size_t k = sz * n, room = sizeof r->text - 1 - r->n;
    if (code != 200 && room) {
        memcpy(r->text + r->n, p, k < room ? k : room);
        r->n += k < room ? k : room;
        r->text[r->n] = 0;
    }
    return k;
}

/* "HTTP 400: <the KServe error body's "error">" (the raw body if it has none), or curl's reason without an answer. */
static void describe_error(char *out, size_t len, CURLcode rc, long code, const resp *r)
{
    if (rc != CURLE_OK) {
        snprintf(out, len, "%s", curl_easy_strerror(rc));
        return;
    }
    json_t *j = json_loadb(r->text, r->n, 0, NULL);
    const char *e = json_string_value(json_object_get(j, "error"));
    snprintf(out, len, "HTTP %ld: %s", code, e ? e : r->n ? r->text : "(empty body)");
    json_decref(j);
}

static void *worker(void *p)
{
    lg *g = p;
    CURL *h = curl_easy_init();
    resp body = {.h = h};
    struct curl_slist *hdr = NULL;
    char url[600], hv[64];
    snprintf(url, sizeof url, "%s/infer", g->base);
    hdr = curl_slist_append(hdr, g->header_len ? "Content-Type: application/octet-stream" : "Content-Type: application/json");
    if (g->header_len) {
        snprintf(hv, sizeof hv, "Inference-Header-Content-Length: %zu", g->header_len);
        hdr = curl_slist_append(hdr, hv);
    }
    hdr = curl_slist_append(hdr, "Expect:");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, g->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)g->body_len);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep_error);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    for (;;) {
        long long i = atomic_fetch_add(&g->next, 1);
        if (i >= g->total || sv_now_ns() >= g->deadline)
            break;
        if (g->rate > 0) {
            uint64_t at = g->t0 + (uint64_t)((double)i / g->rate * 1e9), now = sv_now_ns();
            if (at > now) {
                struct timespec ts = {(time_t)((at - now) / 1000000000ull), (long)((at - now) % 1000000000ull)};
                nanosleep(&ts, NULL);
            }
        }
        uint64_t t = sv_now_ns();
        long code = 0;
        body.n = 0;
        body.text[0] = 0;
        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        if (rc == CURLE_OK && code == 200) {
            g->lat_ns[i] = sv_now_ns() - t;
            if (g->lat_ns[i] == 0)
                g->lat_ns[i] = 1;
        } else if (atomic_fetch_add(&g->errors, 1) == 0) {
            pthread_mutex_lock(&g->mu);
            describe_error(g->first_error, sizeof g->first_error, rc, code, &body);
            pthread_mutex_unlock(&g->mu);
        }
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(const uint64_t *s, size_t n, double q)
{
    if (!n)
        return 0;
    size_t k = (size_t)ceil(q * (double)n) - 1;
    return (double)s[k < n ? k : n - 1] / 1e6;
}

/* Runs one level; returns its result object. */
static json_t *run_level(lg *g, int conc)
{
    atomic_store(&g->next, 0);
    atomic_store(&g->errors, 0);
    g->first_error[0] = 0;
    memset(g->lat_ns, 0, sizeof(uint64_t) * (size_t)g->total);
    pthread_t *th = calloc((size_t)conc, sizeof *th);
    int started = 0;
    g->t0 = sv_now_ns();
    uint64_t dur = g->deadline;
    g->deadline = g->t0 + dur;
    for (int i = 0; th && i < conc; i++)
        if (pthread_create(&th[i], NULL, worker, g) == 0)
            started++;
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    double secs = (double)(sv_now_ns() - g->t0) / 1e9;
    g->deadline = dur;
    free(th);
    size_t ok = 0;
    for (int64_t i = 0; i < g->total; i++)
        if (g->lat_ns[i])
            g->lat_ns[ok++] = g->lat_ns[i];
    qsort(g->lat_ns, ok, sizeof(uint64_t), cmp_u64);
    long long errs = atomic_load(&g->errors);
    json_t *r = json_pack("{s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "concurrency", conc, "requests", (json_int_t)ok,
                          "errors", (json_int_t)errs, "seconds", secs, "infer_per_sec",
                          secs > 0 ? (double)ok * (double)g->batch / secs : 0.0, "p50_ms", pct(g->lat_ns, ok, 0.50),
                          "p90_ms", pct(g->lat_ns, ok, 0.90), "p95_ms", pct(g->lat_ns, ok, 0.95), "p99_ms",
                          pct(g->lat_ns, ok, 0.99));
    if (g->rate > 0)
        json_object_set_new(r, "request_rate", json_real(g->rate));
    if (errs)
        json_object_set_new(r, "first_error", json_string(g->first_error));
    return r;
}

static bool loopback_url(const char *url)
{
    static const char *const ok[] = {"http://127.0.0.1:", "http://localhost:", "http://[::1]:"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!strncmp(url, ok[i], strlen(ok[i])))
            return true;
    return false;
}

/* dims of input `name` from "NAME:AxBxC,..." (non-batch dims only); -1 if not given. */
static int shape_opt(const char *spec, const char *name, int64_t *dims)
{
    size_t nl = strlen(name);
    for (const char *p = spec; p && *p;) {
        const char *end = strchr(p, ','), *colon = strrchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (colon && colon < p + len && (size_t)(colon - p) == nl && !strncmp(p, name, nl)) {
            char tmp[256];
            size_t dl = (size_t)(p + len - colon - 1);
            if (dl >= sizeof tmp)
                return -2;
            memcpy(tmp, colon + 1, dl);
            tmp[dl] = 0;
            int nd = 0;
            char *rest = tmp;
            for (char *t = strsep(&rest, "x"); t; t = strsep(&rest, "x"))
                if (nd == KILN_MAX_DIMS || !sv_parse_i64(t, 0, 1 << 30, &dims[nd++]))
                    return -2;
            return nd;
        }
        p = end ? end + 1 : NULL;
    }
    return -1;
}

/* Reads the --input files, by model input (ft[i] for the model's input i; data NULL where none), and settles the
 * batch: a file's first dim is its batch when the model batches (max_batch > 0), as it is sent as is. --batch, when
 * given, must agree with every file's (else the reported infer/s would count inferences that were never sent);
 * without it the files' batch (all the same) is the batch. Returns -1 if fine, else the exit status (message
 * printed). */
static int load_files(lg *g, json_t *meta, int max_batch, bool batch_given, int n_files, char **fnames, char **fpaths,
                      kiln_tensor *ft)
{
    json_t *inputs = json_object_get(meta, "inputs");
    for (int k = 0; k < n_files; k++) {
        size_t i, n = json_array_size(inputs);
        for (i = 0; i < n; i++) {
            const char *name = json_string_value(json_object_get(json_array_get(inputs, i), "name"));
            if (name && !strcmp(fnames[k], name))
                break;
        }
        if (i == n || i >= SV_MAX_IO) {
            fprintf(stderr, "kiln loadgen: --input %s=%s: the model has no input '%s'\n", fnames[k], fpaths[k],
                    fnames[k]);
            return 2;
        }
        kiln_dtype dt = sv_dtype_from_kserve(json_string_value(json_object_get(json_array_get(inputs, i), "datatype")));
        if (ft[i].data) {
            fprintf(stderr, "kiln loadgen: --input %s given twice\n", fnames[k]);
            return 2;
        }
        if (kiln_npy_read(fpaths[k], &ft[i]) != KILN_OK) {
            fprintf(stderr, "kiln loadgen: %s: %s\n", fpaths[k], kiln_last_error());
            return 1;
        }
        if (ft[i].dtype != dt) {
            fprintf(stderr, "kiln loadgen: %s: wrong dtype for input '%s'\n", fpaths[k], fnames[k]);
            return 2;
        }
        if (max_batch <= 0)
            continue;
        if (ft[i].ndim < 1) {
            fprintf(stderr, "kiln loadgen: %s: a scalar, but the model batches (the first dim is the batch)\n",
                    fpaths[k]);
            return 2;
        }
        if (!g->batch) {
            g->batch = ft[i].dims[0];
        } else if (ft[i].dims[0] != g->batch) {
            fprintf(stderr, "kiln loadgen: %s has batch %lld (its first dim) but %s %lld: the file is sent as is, "
                    "so give a file of that batch%s\n", fpaths[k], (long long)ft[i].dims[0],
                    batch_given ? "--batch is" : "another --input file has", (long long)g->batch,
                    batch_given ? " or leave --batch out (the files' batch is then used)" : "");
            return 2;
        }
    }
    if (!g->batch)
        g->batch = 1;
    return -1;
}

/* Builds the request body from the model metadata, --shape, the --input files (ft) and the batch. */
static bool make_body(lg *g, json_t *meta, int max_batch, const char *shapes, const kiln_tensor *ft, bool binary)
{
    json_t *inputs = json_array(), *req = json_pack("{s:o}", "inputs", inputs);
    if (binary)
        json_object_set_new(req, "parameters", json_pack("{s:b}", "binary_data_output", 1));
    size_t i;
    json_t *in;
    kiln_tensor ts[SV_MAX_IO];
    bool owned[SV_MAX_IO] = {0};   /* generated here (the files' data belongs to ft) */
    int nt = 0;
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    bool ok = true;
    json_array_foreach(json_object_get(meta, "inputs"), i, in) {
        const char *name = json_string_value(json_object_get(in, "name"));
        const char *dts = json_string_value(json_object_get(in, "datatype"));
        json_t *shape = json_object_get(in, "shape");
        kiln_dtype dt = sv_dtype_from_kserve(dts);
        kiln_tensor *t = &ts[nt];
        if (!name || nt == SV_MAX_IO || dt == KILN_DT_UNDEFINED || dt == KILN_DT_STRING) {
            fprintf(stderr, "kiln loadgen: input '%s' (%s) cannot be generated\n", name ? name : "?", dts ? dts : "?");
            ok = false;
            break;
        }
        if (ft[i].data) {
            *t = ft[i];
        } else {
            int64_t dims[KILN_MAX_DIMS], given[KILN_MAX_DIMS];
            int nd = (int)json_array_size(shape), bd = max_batch > 0;
            int ng = shapes ? shape_opt(shapes, name, given) : -1;
            if (ng == -2 || (ng >= 0 && ng != nd - bd) || nd > KILN_MAX_DIMS) {
                fprintf(stderr, "kiln loadgen: --shape for '%s' needs %d dims (without the batch)\n", name, nd - bd);
                ok = false;
                break;
            }
            for (int d = 0; d < nd; d++) {
                dims[d] = json_integer_value(json_array_get(shape, (size_t)d));
                if (d < bd)
                    dims[d] = g->batch;
                else if (ng >= 0)
                    dims[d] = given[d - bd];
                if (dims[d] < 0) {
                    fprintf(stderr, "kiln loadgen: input '%s' dim %d is dynamic: give --shape %s:DIMS\n", name, d, name);
                    ok = false;
                    break;
                }
            }
            if (!ok || !sv_tensor_alloc(t, dt, nd, dims)) {
                ok = false;
                break;
            }
            owned[nt] = true;
            sv_fill_random(t, &seed);
        }
        nt++;
        json_t *sh = json_array();
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(sh, json_integer(t->dims[d]));
        json_t *jin = json_pack("{s:s, s:s, s:o}", "name", name, "datatype", dts, "shape", sh);
        if (binary)
            json_object_set_new(jin, "parameters", json_pack("{s:I}", "binary_data_size", (json_int_t)t->nbytes));
        else
            json_object_set_new(jin, "data", sv_tensor_json_data(t));
        json_array_append_new(inputs, jin);
    }
    char *js = ok ? sv_json_dumps(req) : NULL;
    json_decref(req);
    size_t jl = js ? strlen(js) : 0, total = jl;
    for (int k = 0; k < nt && binary; k++)
        total += ts[k].nbytes;
    g->body = js ? realloc(js, total + 1) : NULL;
    if (g->body && binary) {
        size_t off = jl;
        for (int k = 0; k < nt; k++) {
            memcpy(g->body + off, ts[k].data, ts[k].nbytes);
            off += ts[k].nbytes;
        }
    }
    g->body_len = total;
    g->header_len = binary ? jl : 0;
    for (int k = 0; k < nt; k++)
        if (owned[k])
            free(ts[k].data);
    return ok && g->body;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln loadgen --url http://127.0.0.1:PORT -m MODEL [--model-version V]\n"
               "         [--concurrency 1,8,32 | --request-rate R [--concurrency WORKERS]]\n"
               "         [--requests N] [--duration S] [--batch B] [--binary] [--shape NAME:AxB,...]\n"
               "         [--input NAME=FILE.npy ...] [--json]\n"
               "  per level: N requests (default 1000, at most 10^7) or S seconds (default 60, at most 600)\n");
}

typedef struct lg_opts {
    const char *url, *model, *version, *conc_list, *shapes;
    int64_t requests, duration, batch;
    double rate;
    bool binary, as_json;
    int n_files;
    char **fnames, **fpaths;
    int levels[MAX_LEVELS], n_levels;
} lg_opts;

/* "1,8,32" -> levels; empty items and values outside [1, 1024] are errors. */
static bool parse_levels(const char *list, lg_opts *o)
{
    char tmp[256];
    if (strlen(list) >= sizeof tmp)
        return false;
    strcpy(tmp, list);
    char *rest = tmp;
    o->n_levels = 0;
    for (char *t = strsep(&rest, ","); t; t = strsep(&rest, ",")) {
        int64_t c;
        if (o->n_levels == MAX_LEVELS || !sv_parse_i64(t, 1, 1024, &c))
            return false;
        o->levels[o->n_levels++] = (int)c;
    }
    return true;
}

/* Returns -1 when the options are complete and valid, else the exit status (usage printed). */
static int parse_opts(int argc, char **argv, lg_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--binary") || !strcmp(a, "--json")) {
            *(a[2] == 'b' ? &o->binary : &o->as_json) = true;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "kiln loadgen: '%s' needs a value\n", a);
            return 2;
        }
        i++;
        bool ok = true;
        int64_t r;
        if (!strcmp(a, "--url"))
            o->url = v;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--model-version"))
            o->version = v;
        else if (!strcmp(a, "--concurrency"))
            o->conc_list = v;
        else if (!strcmp(a, "--shape"))
            o->shapes = v;
        else if (!strcmp(a, "--requests"))
            ok = sv_parse_i64(v, 1, MAX_REQUESTS, &o->requests);
        else if (!strcmp(a, "--duration"))
            ok = sv_parse_i64(v, 1, 600, &o->duration);
        else if (!strcmp(a, "--batch"))
            ok = sv_parse_i64(v, 1, 1024, &o->batch);
        else if (!strcmp(a, "--request-rate")) {
            ok = sv_parse_i64(v, 1, 1000000, &r);
            o->rate = (double)r;
        } else if (!strcmp(a, "--input")) {
            char *eq = strchr(argv[i], '=');
            if ((ok = eq != NULL)) {
                *eq = 0;
                o->fnames[o->n_files] = argv[i];
                o->fpaths[o->n_files++] = eq + 1;
            }
        } else {
            fprintf(stderr, "kiln loadgen: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "kiln loadgen: bad value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (!o->url || !o->model) {
        usage(stderr);
        return 2;
    }
    if (!loopback_url(o->url) || strlen(o->url) > 200 || !sv_name_ok(o->model) ||
        (o->version && !sv_name_ok(o->version))) {
        fprintf(stderr, "kiln loadgen: --url must be http://127.0.0.1:PORT, http://localhost:PORT or http://[::1]:PORT "
                        "(loopback only), with a valid model name\n");
        return 2;
    }
    if (!parse_levels(o->conc_list, o)) {
        fprintf(stderr, "kiln loadgen: --concurrency takes up to %d integers in [1, 1024]\n", MAX_LEVELS);
        return 2;
    }
    return -1;
}

static void print_row(const json_t *r, double label)
{
    printf("%-12g %9lld %7lld %11.1f %9.3f %9.3f %9.3f %9.3f\n", label,
           (long long)json_integer_value(json_object_get(r, "requests")),
           (long long)json_integer_value(json_object_get(r, "errors")),
           json_real_value(json_object_get(r, "infer_per_sec")), json_real_value(json_object_get(r, "p50_ms")),
           json_real_value(json_object_get(r, "p90_ms")), json_real_value(json_object_get(r, "p95_ms")),
           json_real_value(json_object_get(r, "p99_ms")));
    if (json_object_get(r, "first_error"))
        printf("  first error: %s\n", json_string_value(json_object_get(r, "first_error")));
    fflush(stdout);
}

int cmd_loadgen(int argc, char **argv)
{
    lg_opts o = {.conc_list = "1", .requests = 1000, .duration = 60};
    kiln_tensor *ft = NULL;
    o.fnames = calloc((size_t)argc, sizeof(char *));
    o.fpaths = calloc((size_t)argc, sizeof(char *));
    lg g;
    memset(&g, 0, sizeof g);
    json_t *results = json_array(), *cfg = NULL, *meta = NULL;
    int rc = o.fnames && o.fpaths ? parse_opts(argc, argv, &o) : 1;
    if (rc >= 0)
        goto done;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *u = o.url + strlen(o.url);
    while (u > o.url && u[-1] == '/')
        u--;
    snprintf(g.base, sizeof g.base, "%.*s/v2/models/%s%s%s", (int)(u - o.url), o.url, o.model,
             o.version ? "/versions/" : "", o.version ? o.version : "");
    char cfg_url[600];
    snprintf(cfg_url, sizeof cfg_url, "%s/config", g.base);
    rc = 1;
    if (!(meta = get_json(g.base)) || !(cfg = get_json(cfg_url)))
        goto done;
    int max_batch = (int)json_integer_value(json_object_get(cfg, "max_batch_size"));
    g.batch = max_batch > 0 ? o.batch : 1;   /* 0: --batch not given, the files' or 1 */
    if (!(ft = calloc(SV_MAX_IO, sizeof *ft)))
        goto done;
    if ((rc = load_files(&g, meta, max_batch, o.batch > 0, o.n_files, o.fnames, o.fpaths, ft)) >= 0)
        goto done;
    rc = 1;
    if (!make_body(&g, meta, max_batch, o.shapes, ft, o.binary))
        goto done;
    g.total = o.requests;
    g.rate = o.rate;
    g.deadline = (uint64_t)o.duration * 1000000000ull;
    if (!(g.lat_ns = calloc((size_t)o.requests, sizeof(uint64_t))))
        goto done;
    pthread_mutex_init(&g.mu, NULL);
    if (!o.as_json)
        printf("%-12s %9s %7s %11s %9s %9s %9s %9s\n", o.rate > 0 ? "rate(req/s)" : "concurrency", "requests", "errors",
               "infer/s", "p50_ms", "p90_ms", "p95_ms", "p99_ms");
    long long total_errors = 0;
    /* request-rate mode: one level, the last --concurrency value (default 64) as the number of workers */
    int n_runs = o.rate > 0 ? 1 : o.n_levels;
    for (int l = 0; l < n_runs; l++) {
        int conc = o.rate > 0 ? (strcmp(o.conc_list, "1") ? o.levels[o.n_levels - 1] : 64) : o.levels[l];
        json_t *r = run_level(&g, conc);
        total_errors += json_integer_value(json_object_get(r, "errors"));
        if (!o.as_json)
            print_row(r, o.rate > 0 ? o.rate : conc);
        json_array_append_new(results, r);
    }
    if (o.as_json) {
        json_t *out = json_pack("{s:s, s:s, s:I, s:O}", "model", o.model, "payload", o.binary ? "binary" : "json",
                                "batch", (json_int_t)g.batch, "levels", results);
        json_dumpf(out, stdout, JSON_INDENT(1));
        printf("\n");
        json_decref(out);
    }
    rc = total_errors ? 1 : 0;
    pthread_mutex_destroy(&g.mu);
done:
    json_decref(results);
    json_decref(cfg);
    json_decref(meta);
    for (int i = 0; ft && i < SV_MAX_IO; i++)
        kiln_free(ft[i].data);
    free(ft);
    free(g.body);
    free(g.lat_ns);
    free(o.fnames);
    free(o.fpaths);
    return rc;
}
