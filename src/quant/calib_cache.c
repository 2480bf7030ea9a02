/* The calibration cache: a text file, a header keyed by what the scales depend on, then one line
 * per tensor.
 *
 *     # kiln calibration cache
 *     version 1
 *     kiln 0.1.0
 *     model 0123456789abcdef
 *     data 0123456789abcdef
 *     method percentile:99.99
 *     samples 500
 *     tensors 2
 *     "input" 0.0078740157 1
 *     "conv1 out" 0.031 4.2
 *
 * Names are quoted ("..." with \\, \" and \xNN for bytes outside printable ASCII), scales and amax
 * printed with 9 significant digits so the floats round-trip. A reader refuses a scale that its amax cannot
 * give (scale_fits_amax) and a tensor named twice. */
#include "quant.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

#define CACHE_MAGIC "# kiln calibration cache"
#define CACHE_VERSION 1

void kiln__calib_quote(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* Parses a quoted name at *p into a new string; advances *p. NULL on malformed text. */
static char *unquote(const char **p)
{
    const char *s = *p;
    if (*s++ != '"')
        return NULL;
    size_t n = 0;
    char *out = kiln__malloc(strlen(s) + 1);
    if (!out)
        return NULL;
    for (; *s && *s != '"'; s++) {
        if (*s != '\\') {
            out[n++] = *s;
            continue;
        }
        s++;
        if (*s == '"' || *s == '\\') {
            out[n++] = *s;
        } else if (*s == 'x' && s[1] && s[2]) {
            char hex[3] = {s[1], s[2], 0}, *end;
            long v = strtol(hex, &end, 16);
            if (*end || v <= 0) {
                kiln__free(out);
                return NULL;
            }
            out[n++] = (char)v;
            s += 2;
        } else {
            kiln__free(out);
            return NULL;
        }
    }
    if (*s != '"') {
        kiln__free(out);
        return NULL;
    }
    out[n] = 0;
    *p = s + 1;
    return out;
}

kiln_status kiln__calib_cache_write(const char *path, const kiln_calib_table *t)
{
    kiln__afile af;
    KILN_TRY(kiln__afile_open(&af, path));
    fprintf(af.f, "%s\nversion %d\nkiln %s\nmodel %016" PRIx64 "\ndata %016" PRIx64 "\nmethod %s\nsamples %" PRId64
            "\ntensors %d\n", CACHE_MAGIC, CACHE_VERSION, KILN_VERSION_STRING, t->model_hash, t->data_hash, t->method,
            t->rows, t->n);
    for (int i = 0; i < t->n; i++) {
        kiln__calib_quote(af.f, t->name[i]);
        fprintf(af.f, " %.9g %.9g\n", (double)t->scale[i], (double)t->amax[i]);
    }
    return kiln__afile_commit(&af);
}

void kiln__calib_table_free(kiln_calib_table *t)
{
    for (int i = 0; t->name && i < t->n; i++)
        kiln__free(t->name[i]);
    kiln__free(t->name);
    kiln__free(t->scale);
    kiln__free(t->amax);
    memset(t, 0, sizeof *t);
}

/* Next line of the buffer (NUL-terminated in place); NULL at the end. */
static char *next_line(char **cur)
{
    char *s = *cur;
    if (!s || !*s)
        return NULL;
    char *nl = strchr(s, '\n');
    if (nl) {
        *nl = 0;
        *cur = nl + 1;
    } else {
        *cur = s + strlen(s);
    }
    return s;
}

static bool header_value(char **cur, const char *key, const char **val)
{
    char *l = next_line(cur);
    size_t k = strlen(key);
    if (!l || strncmp(l, key, k) || l[k] != ' ')
        return false;
    *val = l + k + 1;
    return true;
}

static bool parse_hex64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    if (strlen(s) != 16)
        return false;
    *v = strtoull(s, &end, 16);
    return !errno && !*end;
}

static bool parse_float(const char **p, float *v)
{
    char *end;
    errno = 0;
    double d = strtod(*p, &end);
    float f = (float)d;   /* FLT_MAX prints as 3.40282347e+38, a hair above it, and rounds back */
    if (end == *p || errno || !isfinite(f) || d < 0)
        return false;
    *v = f;
    *p = end;
    return true;
}

/* Whether a scale is one calibration can give for a tensor of this amax: threshold / 127 for a threshold between
 * amax / KILN_CALIB_BINS and amax (every method's threshold is one of the histogram's bin edges over [0, amax]:
 * minmax amax, percentile and mse at least the first edge, entropy at least the 128th), or 1 for amax 0 (an all-zero
 * tensor, kiln__calib_scale). The slack covers the float rounding of both numbers. */
static bool scale_fits_amax(float scale, float amax)
{
    if (amax == 0)
        return scale == 1.0f;
    double hi = (double)amax / (KILN_CALIB_LEVELS - 1), lo = hi / KILN_CALIB_BINS;
    return (double)scale <= hi * (1 + 1e-6) && (double)scale >= lo * (1 - 1e-6);
}

typedef struct name_line {
    const char *name;
    int line;
} name_line;

static int by_name_line(const void *a, const void *b)
{
    const name_line *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* A tensor named on two lines (the first such pair in name order) is an error: which line would hold? */
static kiln_status no_duplicates(const char *path, const kiln_calib_table *t)
{
    name_line *v = kiln__calloc((size_t)t->n + 1, sizeof *v);
    if (!v)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->n; i++)
        v[i] = (name_line){t->name[i], i + 1};
    qsort(v, (size_t)t->n, sizeof *v, by_name_line);
    kiln_status st = KILN_OK;
    for (int i = 1; i < t->n && st == KILN_OK; i++)
        if (!strcmp(v[i - 1].name, v[i].name))
            st = kiln__err(KILN_ERR_PARSE, "calibration cache '%s': tensor lines %d and %d both name \"%s\" (one line "
                           "per tensor); it was left untouched (remove it to calibrate again)", path, v[i - 1].line,
                           v[i].line, v[i].name);
    kiln__free(v);
    return st;
}

/* Parses the tensor lines after the header. */
static kiln_status parse_entries(const char *path, char **cur, kiln_calib_table *t, int n)
{
    t->name = kiln__calloc((size_t)n + 1, sizeof *t->name);
    t->scale = kiln__calloc((size_t)n + 1, sizeof *t->scale);
    t->amax = kiln__calloc((size_t)n + 1, sizeof *t->amax);
    if (!t->name || !t->scale || !t->amax)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        const char *l = next_line(cur);
        if (!l)
            return kiln__err(KILN_ERR_PARSE, "calibration cache '%s': %d tensor lines, header says %d", path, i, n);
        const char *p = l;
        char *name = unquote(&p);
        if (!name)
            return kiln__err(KILN_ERR_PARSE, "calibration cache '%s': tensor line %d: malformed name", path, i + 1);
        t->name[t->n++] = name;
        if (*p != ' ' || !parse_float(&p, &t->scale[i]) || t->scale[i] <= 0 || *p != ' ' ||
            !parse_float(&p, &t->amax[i]) || *p)
            return kiln__err(KILN_ERR_PARSE, "calibration cache '%s': tensor line %d: expected \"NAME\" SCALE AMAX", path,
                             i + 1);
        if (!scale_fits_amax(t->scale[i], t->amax[i]))
            return kiln__err(KILN_ERR_PARSE,
                             "calibration cache '%s': tensor line %d (\"%s\"): scale %.9g does not fit amax %.9g (a "
                             "scale is threshold / 127 for a threshold between amax / %d and amax, or 1 with amax 0): "
                             "the file was edited or damaged; it was left untouched (remove it to calibrate again)",
                             path, i + 1, name, (double)t->scale[i], (double)t->amax[i], KILN_CALIB_BINS);
    }
    if (next_line(cur))
        return kiln__err(KILN_ERR_PARSE, "calibration cache '%s': text after the %d tensor lines", path, n);
    return no_duplicates(path, t);
}

static kiln_status stale(const char *path, const char *what, const char *cache, const char *want)
{
    return kiln__err(KILN_ERR_INVALID_ARG,
                     "calibration cache '%s' is stale or foreign: %s is %s in the cache but %s now; it was left "
                     "untouched (remove it or name another cache to calibrate again)", path, what, cache, want);
}

static kiln_status parse_cache(const char *path, char *text, uint64_t model_hash, bool data_known, uint64_t data_hash,
                               const char *method, kiln_calib_table *t)
{
    char *cur = text;
    const char *l = next_line(&cur), *ver, *kv, *mh, *dh, *me, *sa, *te;
    if (!l || strcmp(l, CACHE_MAGIC))
        return kiln__err(KILN_ERR_PARSE, "'%s' is not a kiln calibration cache (no '%s' line); it was left untouched",
                         path, CACHE_MAGIC);
    if (!header_value(&cur, "version", &ver) || !header_value(&cur, "kiln", &kv) ||
        !header_value(&cur, "model", &mh) || !header_value(&cur, "data", &dh) ||
        !header_value(&cur, "method", &me) || !header_value(&cur, "samples", &sa) ||
        !header_value(&cur, "tensors", &te))
        return kiln__err(KILN_ERR_PARSE, "calibration cache '%s': malformed header; it was left untouched", path);
    char want[32];
    snprintf(want, sizeof want, "%d", CACHE_VERSION);
    if (strcmp(ver, want))
        return stale(path, "the cache format version", ver, want);
    if (strcmp(kv, KILN_VERSION_STRING))
        return stale(path, "the kiln version", kv, KILN_VERSION_STRING);
    char *end;
    errno = 0;
    long long rows = strtoll(sa, &end, 10), n = 0;
    bool ok = !errno && *sa && !*end && rows >= 0;
    errno = 0;
    if (ok)
        n = strtoll(te, &end, 10);
    if (!ok || errno || !*te || *end || n < 0 || n > (1 << 24) || !parse_hex64(mh, &t->model_hash) ||
        !parse_hex64(dh, &t->data_hash) || strlen(me) >= sizeof t->method)
        return kiln__err(KILN_ERR_PARSE, "calibration cache '%s': malformed header; it was left untouched", path);
    snprintf(t->method, sizeof t->method, "%s", me);
    t->rows = rows;
    if (t->model_hash != model_hash) {
        snprintf(want, sizeof want, "%016" PRIx64, model_hash);
        return stale(path, "the model hash", mh, want);
    }
    if (data_known && t->data_hash != data_hash) {
        snprintf(want, sizeof want, "%016" PRIx64, data_hash);
        return stale(path, "the calibration data hash", dh, want);
    }
    if (strcmp(me, method))
        return stale(path, "the method", me, method);
    return parse_entries(path, &cur, t, (int)n);
}

kiln_status kiln__calib_cache_read(const char *path, uint64_t model_hash, bool data_known, uint64_t data_hash,
                                   const char *method, kiln_calib_table *t, bool *exists)
{
    memset(t, 0, sizeof *t);
    *exists = false;
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT)
        return KILN_OK;
    *exists = true;
    void *text;
    size_t len;
    KILN_TRY(kiln__read_file(path, &text, &len));
    kiln_status st = kiln__calib_cache_parse(path, text, len, model_hash, data_known, data_hash, method, t);
    kiln__free(text);
    return st;
}

kiln_status kiln__calib_cache_parse(const char *path, char *text, size_t len, uint64_t model_hash, bool data_known,
                                    uint64_t data_hash, const char *method, kiln_calib_table *t)
{
    memset(t, 0, sizeof *t);
    kiln_status st = strlen(text) != len
                         ? kiln__err(KILN_ERR_PARSE, "'%s' is not a kiln calibration cache (binary data); it was left "
                                     "untouched", path)
                         : parse_cache(path, text, model_hash, data_known, data_hash, method, t);
    if (st != KILN_OK)
        kiln__calib_table_free(t);
    return st;
}
