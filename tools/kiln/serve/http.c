/* HTTP side of kiln serve on libmicrohttpd (thread pool + epoll, suspend/resume): request bodies
 * with a size limit, routing of the KServe v2 endpoints, JSON error bodies, and graceful drain.
 * An infer request is decoded on an HTTP thread, queued to the model's scheduler, and its
 * connection suspended until an instance thread finishes it (no HTTP thread waits on a model); a
 * load request runs on a thread of its own, its connection suspended the same way. */
#include "serve.h"
#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sv_server {
    struct MHD_Daemon *d, *dm;
    sv_repo *repo;
    int64_t max_body;
    /* The drain waits for `inflight` (requests received in full, until their response is sent: being answered, queued
     * or running), but only a short grace for `receiving` (headers in, body not yet complete): a client that sent part
     * of a body and closed is not always noticed by libmicrohttpd (the socket sits in CLOSE-WAIT until the 30 s
     * connection timeout), so waiting for it held SIGTERM for 30 s. */
    atomic_int inflight, receiving;
    atomic_bool draining;
    atomic_bool closing;   /* the drain no longer waits for uploads: a request completed now is answered 503 */
    int port;
};

typedef struct listener {
    sv_server *s;
    bool metrics_only;
} listener;

/* A load request's thread and outcome. */
typedef struct load_job {
    pthread_t thread;
    bool started;
    int status;
    char name[SV_NAME_MAX];
    char err[1024];
} load_job;

typedef struct conn_ctx {
    sv_server *s;
    char *body;
    size_t len, cap;
    bool too_big, first;
    bool committed;     /* counted in s->inflight (else in s->receiving) */
    atomic_int phase;   /* 0 receiving, 1 queued (suspended), 2 finished by the scheduler */
    struct MHD_Connection *c;
    sv_model *m;
    sv_req *req;
    sv_out_sel sel;
    const char *hname, *hvalue;   /* one more header of the response (static strings), or NULL */
    load_job *load;     /* a load request (phase 1: running on its thread) */
} conn_ctx;

static enum MHD_Result reply(conn_ctx *x, struct MHD_Connection *c, unsigned status, const char *ctype, char *body,
                             size_t len, size_t header_len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    if (ctype)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (header_len) {
        char v[32];
        snprintf(v, sizeof v, "%zu", header_len);
        MHD_add_response_header(r, "Inference-Header-Content-Length", v);
    }
    if (x->hname)
        MHD_add_response_header(r, x->hname, x->hvalue);
    if (atomic_load(&x->s->draining))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_json(conn_ctx *x, struct MHD_Connection *c, unsigned status, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return reply(x, c, 500, "application/json", strdup("{\"error\":\"out of memory\"}"), 25, 0);
    return reply(x, c, status, "application/json", s, strlen(s), 0);
}

static enum MHD_Result reply_err(conn_ctx *x, struct MHD_Connection *c, unsigned status, int unused,
                                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result reply_err(conn_ctx *x, struct MHD_Connection *c, unsigned status, int unused, const char *fmt,
                                 ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return reply_json(x, c, status, json_pack("{s:s}", "error", msg));
}
#define ERROR(status, ...) reply_err(x, c, status, 0, __VA_ARGS__)

/* 405 with the Allow header that RFC 9110 15.5.6 requires (allow: a static string) */
static enum MHD_Result not_allowed(conn_ctx *x, struct MHD_Connection *c, const char *allow)
{
    x->hname = "Allow";
    x->hvalue = allow;
    return ERROR(405, "method not allowed: use %s", allow);
}

static enum MHD_Result reply_metrics(conn_ctx *x, struct MHD_Connection *c)
{
    char *t = sv_metrics_text(x->s->repo);
    if (!t)
        return ERROR(500, "out of memory");
    return reply(x, c, 200, "text/plain; version=0.0.4", t, strlen(t), 0);
}

/* The scheduler finished the request: wake its connection. */
static void on_done(sv_req *r, void *user)
{
    conn_ctx *x = user;
    (void)r;
    atomic_store(&x->phase, 2);
    MHD_resume_connection(x->c);
}

static enum MHD_Result finish_infer(conn_ctx *x, struct MHD_Connection *c)
{
    sv_req *r = x->req;
    if (r->status != KILN_OK) {
        bool client = r->status == KILN_ERR_SHAPE || r->status == KILN_ERR_INVALID_ARG || r->status == KILN_ERR_DTYPE;
        return ERROR(client ? 400 : 500, "inference failed: %s", r->err);
    }
    char *out, err[256];
    size_t len, jl;
    if (!sv_encode_infer(x->m, r, &x->sel, &out, &len, &jl, err, sizeof err))
        return ERROR(500, "%s", err);
    /* binary form when any output goes binary, even one of zero bytes: the header tells the client where they start */
    bool bin = false;
    for (int o = 0; o < r->n_out; o++)
        bin = bin || (x->sel.wanted[o] && x->sel.binary[o]);
    return reply(x, c, 200, bin ? "application/octet-stream" : "application/json", out, len, bin ? jl : 0);
}

static enum MHD_Result start_infer(conn_ctx *x, struct MHD_Connection *c, const char *model, int64_t version)
{
    char err[1024];
    int status;
    x->m = sv_repo_acquire(x->s->repo, model, version, &status, err, sizeof err);
    if (!x->m)
        return ERROR((unsigned)status, "%s", err);
    const char *hl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
    int64_t header_len = 0;
    if (hl && !sv_parse_i64(hl, 1, INT64_MAX, &header_len))
        return ERROR(400, "Inference-Header-Content-Length must be a positive integer");
    if (!(x->req = calloc(1, sizeof *x->req)))
        return ERROR(500, "out of memory");
    status = sv_decode_infer(x->m, x->body ? x->body : "", x->len, (size_t)header_len, x->req, &x->sel, err, sizeof err);
    if (status != 200) {
        atomic_fetch_add(&x->m->metrics.failure, 1);
        return ERROR((unsigned)status, "%s", err);
    }
    x->req->done = on_done;
    x->req->user = x;
    atomic_store(&x->phase, 1);
    MHD_suspend_connection(c);
    sv_sched_submit(x->m, x->req);
    return MHD_YES;
}

static enum MHD_Result model_get(conn_ctx *x, struct MHD_Connection *c, const char *model, int64_t version,
                                 const char *what)
{
    char err[1024];
    int status;
    sv_model *m = sv_repo_acquire(x->s->repo, model, version, &status, err, sizeof err);
    if (!m)
        return ERROR((unsigned)status, "%s", err);
    json_t *j = !*what ? sv_model_metadata(m) : !strcmp(what, "config") ? sv_config_json(&m->cfg, m->device) : json_object();
    sv_model_release(m);
    if (!strcmp(what, "ready")) {
        json_decref(j);
        return reply(x, c, 200, NULL, NULL, 0, 0);
    }
    return reply_json(x, c, 200, j);
}

static void *load_main(void *p)
{
    conn_ctx *x = p;
    x->load->status = sv_repo_load(x->s->repo, x->load->name, x->load->err, sizeof x->load->err);
    atomic_store(&x->phase, 2);
    MHD_resume_connection(x->c);
    return NULL;
}

/* A load (a model build: seconds to minutes) runs on its own thread with the connection suspended,
 * as an infer waits for its instance: an HTTP thread blocked in it would stall every other
 * connection it serves for that long (readiness probes, infers of the model still serving) and
 * could drop them at its 30 s connection timeout. completed() joins the thread. */
static enum MHD_Result start_load(conn_ctx *x, struct MHD_Connection *c, const char *name)
{
    if (!(x->load = calloc(1, sizeof *x->load)))
        return ERROR(500, "out of memory");
    snprintf(x->load->name, sizeof x->load->name, "%s", name);
    atomic_store(&x->phase, 1);
    MHD_suspend_connection(c);
    x->load->started = pthread_create(&x->load->thread, NULL, load_main, x) == 0;
    if (!x->load->started) {
        x->load->status = 500;
        snprintf(x->load->err, sizeof x->load->err, "cannot start a thread for the load");
        atomic_store(&x->phase, 2);
        MHD_resume_connection(c);
    }
    return MHD_YES;
}

static enum MHD_Result finish_load(conn_ctx *x, struct MHD_Connection *c)
{
    if (x->load->status != 200)
        return ERROR((unsigned)x->load->status, "%s", x->load->err);
    return reply(x, c, 200, NULL, NULL, 0, 0);
}

static enum MHD_Result repository(conn_ctx *x, struct MHD_Connection *c, char **seg, int n)
{
    char err[1024];
    json_error_t je;
    json_t *body = x->len ? json_loadb(x->body, x->len, JSON_REJECT_DUPLICATES, &je) : json_object();
    if (!json_is_object(body)) {
        json_decref(body);
        return ERROR(400, "the request body must be a JSON object");
    }
    bool ready_only = json_is_true(json_object_get(body, "ready"));
    bool has_params = json_object_get(body, "parameters") != NULL;
    json_decref(body);
    if (n == 3 && !strcmp(seg[2], "index")) {
        json_t *idx = sv_repo_index(x->s->repo), *out = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(idx, i, e)
            if (!ready_only || !strcmp(json_string_value(json_object_get(e, "state")), "READY"))
                json_array_append(out, e);
        json_decref(idx);
        return reply_json(x, c, 200, out);
    }
    if (n == 5 && !strcmp(seg[2], "models") && (!strcmp(seg[4], "load") || !strcmp(seg[4], "unload"))) {
        if (!sv_name_ok(seg[3]))
            return ERROR(400, "invalid model name");
        if (has_params)
            return ERROR(400, "load parameters (config or file overrides) are not supported");
        if (!strcmp(seg[4], "load"))
            return start_load(x, c, seg[3]);
        int st = sv_repo_unload(x->s->repo, seg[3], err, sizeof err);
        if (st != 200)
            return ERROR((unsigned)st, "%s", err);
        return reply(x, c, 200, NULL, NULL, 0, 0);
    }
    return ERROR(404, "unknown repository endpoint");
}

/* Routes /v2/... split into segments. */
static enum MHD_Result route(conn_ctx *x, struct MHD_Connection *c, const char *method, char **seg, int n)
{
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (n == 1) {
        if (!get)
            return not_allowed(x, c, "GET, HEAD");
        return reply_json(x, c, 200,
                          json_pack("{s:s, s:s, s:[s,s]}", "name", "kiln", "version", KILN_VERSION_STRING, "extensions",
                                    "binary_tensor_data", "model_repository"));
    }
    if (!strcmp(seg[1], "health") && n == 3) {
        if (!get)
            return not_allowed(x, c, "GET, HEAD");
        if (!strcmp(seg[2], "live"))
            return reply(x, c, 200, NULL, NULL, 0, 0);
        if (!strcmp(seg[2], "ready")) {
            if (atomic_load(&x->s->draining) || !sv_repo_all_ready(x->s->repo))
                return ERROR(503, "not ready");
            return reply(x, c, 200, NULL, NULL, 0, 0);
        }
        return ERROR(404, "unknown health endpoint");
    }
    if (!strcmp(seg[1], "repository")) {
        if (!post)
            return not_allowed(x, c, "POST");
        return repository(x, c, seg, n);
    }
    if (strcmp(seg[1], "models") || n < 3)
        return ERROR(404, "unknown endpoint");
    const char *model = seg[2];
    if (!sv_name_ok(model))
        return ERROR(400, "invalid model name");
    int64_t version = -1;
    int k = 3;
    if (n >= 5 && !strcmp(seg[3], "versions")) {
        if (!sv_parse_i64(seg[4], 1, INT32_MAX, &version))
            return ERROR(400, "invalid model version '%s'", seg[4]);
        k = 5;
    } else if (n == 4 && !strcmp(seg[3], "versions")) {
        return ERROR(400, "missing model version");
    }
    const char *what = k < n ? seg[k] : "";
    if (k + 1 < n)
        return ERROR(404, "unknown endpoint");
    if (!strcmp(what, "infer")) {
        if (!post)
            return not_allowed(x, c, "POST");
        return start_infer(x, c, model, version);
    }
    if (strcmp(what, "") && strcmp(what, "ready") && strcmp(what, "config"))
        return ERROR(404, "unknown endpoint '%s'", what);
    if (!get)
        return not_allowed(x, c, "GET, HEAD");
    return model_get(x, c, model, version, what);
}

static enum MHD_Result dispatch(conn_ctx *x, struct MHD_Connection *c, const char *url, const char *method,
                                bool metrics_only)
{
    if (!strcmp(url, "/metrics")) {
        if (strcmp(method, "GET") && strcmp(method, "HEAD"))
            return not_allowed(x, c, "GET, HEAD");
        return reply_metrics(x, c);
    }
    if (metrics_only)
        return ERROR(404, "this port serves /metrics only");
    /* a compressed body (Triton's request compression) is inflated here, within the body limit */
    const char *ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (ce && x->len > 0) {
        char err[512];
        int st = sv_content_decode(ce, &x->body, &x->len, x->s->max_body, err, sizeof err);
        if (st == 415) {   /* RFC 9110 15.5.16: say which codings would do */
            x->hname = "Accept-Encoding";
            x->hvalue = "gzip, deflate";
        }
        if (st != 200)
            return ERROR((unsigned)st, "%s", err);
        x->cap = x->len;
    }
    char path[2048];
    if (strlen(url) >= sizeof path)
        return ERROR(414, "URL too long");
    strcpy(path, url);
    char *seg[16];
    int n = 0;
    for (char *save = NULL, *t = strtok_r(path, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (n == 16)
            return ERROR(404, "unknown endpoint");
        seg[n++] = t;
    }
    if (n == 0 || strcmp(seg[0], "v2"))
        return ERROR(404, "unknown endpoint (the API lives under /v2)");
    return route(x, c, method, seg, n);
}

/* Content-Length as MHD takes it: decimal digits up to UINT64_MAX (MHD answers a larger one with its own 413).
 * Unsigned, so that values from 2^63 on are seen as over the limit too, not skipped as unparsable (MHD then
 * waited for their body until the connection timed out). */
static bool content_length(const char *s, uint64_t *n)
{
    if (*s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *n = v;
    return true;
}

/* The request is received in full (or answered from its headers alone): from now on the drain waits for its response.
 * False once the drain has stopped waiting (closing): the caller answers 503 instead of starting it. inflight is
 * raised before closing is read and the drain sets closing before it reads inflight (both seq_cst), so either the
 * drain sees this request and waits for its answer, or this request sees closing; never a request started (an infer
 * suspended under an instance thread) after the drain decided that nothing is in flight. */
static bool commit(conn_ctx *x)
{
    if (!x->committed) {
        x->committed = true;
        atomic_fetch_add(&x->s->inflight, 1);
        atomic_fetch_sub(&x->s->receiving, 1);
    }
    return !atomic_load(&x->s->closing);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    listener *l = cls;
    conn_ctx *x = *con_cls;
    if (!x) {
        if (!(x = calloc(1, sizeof *x)))
            return MHD_NO;
        x->s = l->s;
        x->c = c;
        x->first = true;
        *con_cls = x;
        atomic_fetch_add(&l->s->receiving, 1);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        uint64_t n;
        if (cl && content_length(cl, &n) && n > (uint64_t)l->s->max_body) {
            x->too_big = true;
            /* up to 4x the limit the body is read and dropped, then answered: an answer queued while the client is
             * still sending makes the server close a socket with unread data, and the client often sees a reset,
             * not the 413 (or waits for the connection's timeout). Past that it is answered now and the connection
             * closed: the client may only see the reset. */
            if (n / 4 > (uint64_t)l->s->max_body) {
                commit(x);   /* answered now from its headers alone: the drain waits for this 413 to be sent */
                return ERROR(413, "request body of %llu bytes is over the limit (%lld bytes, --max-body-mb)",
                             (unsigned long long)n, (long long)l->s->max_body);
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (x->too_big || x->len + n > (size_t)l->s->max_body) {
            x->too_big = true;
            free(x->body);
            x->body = NULL;
            x->len = x->cap = 0;
            return MHD_YES;
        }
        if (x->len + n > x->cap) {
            size_t nc = x->cap ? x->cap : 4096;
            while (nc < x->len + n)
                nc *= 2;
            char *nb = realloc(x->body, nc);
            if (!nb)
                return MHD_NO;
            x->body = nb;
            x->cap = nc;
        }
        memcpy(x->body + x->len, upload, n);
        x->len += n;
        return MHD_YES;
    }
    if (atomic_load(&x->phase) == 2)
        return x->load ? finish_load(x, c) : finish_infer(x, c);
    if (atomic_load(&x->phase) == 1)
        return MHD_YES;   /* spurious call while queued */
    if (!commit(x))
        return ERROR(503, "the server is shutting down");
    if (x->too_big)
        return ERROR(413, "request body over the limit (%lld bytes, --max-body-mb)", (long long)l->s->max_body);
    return dispatch(x, c, url, method, l->metrics_only);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    listener *l = cls;
    conn_ctx *x = *con_cls;
    if (!x)
        return;
    *con_cls = NULL;
    if (x->req && atomic_load(&x->phase) == 1) {
        /* cannot happen: a suspended connection is not completed before it is resumed */
        fprintf(stderr, "kiln serve: internal error: request completed while queued\n");
    } else {
        sv_req_free(x->req);
    }
    if (x->load && x->load->started)
        pthread_join(x->load->thread, NULL);   /* it resumed this connection: it is returning now */
    free(x->load);
    sv_model_release(x->m);
    sv_out_sel_free(&x->sel);
    free(x->body);
    atomic_fetch_sub(x->committed ? &l->s->inflight : &l->s->receiving, 1);
    free(x);
}

static listener L_MAIN, L_METRICS;

/* No MHD_OPTION_LISTENING_ADDRESS_REUSE: its 1 sets SO_REUSEPORT, which lets a second server bind a port in use and
 * split the requests with the first. MHD's default (SO_REUSEADDR) still allows a restart over TIME_WAIT sockets.
 * On failure *why is the bind's reason (errno survives MHD's cleanup), "" if none is known. */
static struct MHD_Daemon *start(listener *l, int port, int threads, const char **why)
{
    errno = 0;
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
                         (uint16_t)port, NULL, NULL, handler, l, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads,
                         MHD_OPTION_NOTIFY_COMPLETED, completed, l, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                         MHD_OPTION_CONNECTION_LIMIT, 4096u, MHD_OPTION_END);
    *why = !d && errno ? strerror(errno) : "";
    return d;
}

sv_server *sv_http_start(sv_repo *repo, int port, int metrics_port, int threads, int64_t max_body, char *err,
                         size_t errlen)
{
    sv_server *s = calloc(1, sizeof *s);
    if (!s)
        return snprintf(err, errlen, "out of memory"), NULL;
    s->repo = repo;
    s->max_body = max_body;
    L_MAIN = (listener){s, false};
    L_METRICS = (listener){s, true};
    const char *why;
    s->d = start(&L_MAIN, port, threads, &why);
    if (!s->d) {
        free(s);
        return snprintf(err, errlen, "cannot listen on HTTP port %d%s%s", port, *why ? ": " : "", why), NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : port;
    if (metrics_port >= 0 && !(s->dm = start(&L_METRICS, metrics_port, 1, &why))) {
        MHD_stop_daemon(s->d);
        free(s);
        return snprintf(err, errlen, "cannot listen on metrics port %d%s%s", metrics_port, *why ? ": " : "", why), NULL;
    }
    if (s->dm) {
        di = MHD_get_daemon_info(s->dm, MHD_DAEMON_INFO_BIND_PORT);
        fprintf(stderr, "kiln serve: metrics on port %d\n", di ? di->port : metrics_port);
    }
    return s;
}

int sv_http_port(const sv_server *s) { return s->port; }

#define DRAIN_UPLOAD_GRACE_MS 1000

void sv_http_drain_and_stop(sv_server *s, int timeout_s)
{
    atomic_store(&s->draining, true);
    MHD_socket fd = MHD_quiesce_daemon(s->d);   /* no new connections: close the listening socket now */
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    /* Requests received in full are waited for (up to timeout_s); uploads still under way get DRAIN_UPLOAD_GRACE_MS
     * to complete (they are then waited for too), after which closing is set and MHD_stop_daemon closes them. */
    int ticks = timeout_s * 100, grace = DRAIN_UPLOAD_GRACE_MS / 10;
    for (int i = 0; i < ticks; i++) {
        if (i >= grace || (atomic_load(&s->receiving) == 0 && atomic_load(&s->inflight) == 0))
            atomic_store(&s->closing, true);
        if (atomic_load(&s->closing) && atomic_load(&s->inflight) == 0)
            break;
        usleep(10000);
    }
    atomic_store(&s->closing, true);
    int left = atomic_load(&s->inflight);
    if (left > 0) {
        /* suspended connections cannot be torn down safely under their instance threads */
        fprintf(stderr, "kiln serve: %d request(s) still in flight after %d s; exiting without draining them\n", left,
                timeout_s);
        _exit(1);
    }
    MHD_stop_daemon(s->d);
    if (s->dm)
        MHD_stop_daemon(s->dm);
    free(s);
}
