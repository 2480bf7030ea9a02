/* Status codes, per-thread last error, log callback. */
#include "core.h"
#include <stdio.h>

static _Thread_local char last_error[1024];
static kiln_log_fn log_fn;
static void *log_user;

const char *kiln_status_str(kiln_status s)
{
    switch (s) {
    case KILN_OK: return "ok";
    case KILN_ERR_INVALID_ARG: return "invalid argument";
    case KILN_ERR_NOMEM: return "out of memory";
    case KILN_ERR_IO: return "I/O error";
    case KILN_ERR_PARSE: return "malformed input";
    case KILN_ERR_UNSUPPORTED: return "unsupported";
    case KILN_ERR_SHAPE: return "shape error";
    case KILN_ERR_DTYPE: return "dtype error";
    case KILN_ERR_LIMIT: return "limit exceeded";
    case KILN_ERR_INTERNAL: return "internal error";
    case KILN_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

const char *kiln_last_error(void) { return last_error; }
void kiln_clear_last_error(void) { last_error[0] = 0; }

void kiln_set_log_callback(kiln_log_fn fn, void *user)
{
    log_fn = fn;
    log_user = user;
}

static void vlog(kiln_log_level lvl, const char *fmt, va_list ap)
{
    if (!log_fn)
        return;
    char raw[1024], buf[1024];
    vsnprintf(raw, sizeof raw, fmt, ap);
    kiln__escape(buf, sizeof buf, raw);   /* messages quote model-supplied names */
    log_fn(lvl, buf, log_user);
}

void kiln__log(kiln_log_level lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(lvl, fmt, ap);
    va_end(ap);
}

kiln_status kiln__err(kiln_status s, const char *fmt, ...)
{
    char raw[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    kiln__escape(last_error, sizeof last_error, raw);   /* messages quote model-supplied names */
    if (log_fn)
        log_fn(KILN_LOG_ERROR, last_error, log_user);
    return s;
}

void kiln__err_prefix(const char *fmt, ...)
{
    char raw[512], pre[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    kiln__escape(pre, sizeof pre, raw);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%s: %s", pre, old);
}
