/* Calibration data sets: a directory of .npy files batched along axis 0. The samples are ordered by
 * shape and content hash, never by file name, so any naming or listing order gives the same runs. */
#include "quant.h"
#include <dirent.h>
#include <stdlib.h>

#define MAX_FILES (1 << 20)

typedef struct entry { char *file, *key; int input; } entry;

static int entry_cmp(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : x->input - y->input;
}

/* Input index a file belongs to (the longest NAME with "NAME_" a prefix of the file name), and its
 * KEY; -1 when none. One-input models take any file, its key being the whole name. */
static int match_input(const char *file, int n_inputs, const char *const *names, const char **key)
{
    *key = file;
    if (n_inputs == 1)
        return 0;
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < n_inputs; i++) {
        size_t l = strlen(names[i]);
        if (l >= best_len && !strncmp(file, names[i], l) && file[l] == '_') {
            best = i;
            best_len = l;
        }
    }
    if (best >= 0)
        *key = file + best_len + 1;
    return best;
}

static kiln_status list_dir(const char *dir, int n_inputs, const char *const *names, entry **out, int *count)
{
    DIR *d = opendir(dir);
    if (!d)
        return kiln__err(KILN_ERR_IO, "calibration data '%s': cannot open directory", dir);
    entry *e = NULL;
    int n = 0, cap = 0;
    kiln_status st = KILN_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (de->d_name[0] == '.' || l <= 4 || strcmp(de->d_name + l - 4, ".npy"))
            continue;
        if (n >= MAX_FILES) {
            st = kiln__err(KILN_ERR_LIMIT, "calibration data '%s': more than %d .npy files", dir, MAX_FILES);
            break;
        }
        const char *key;
        int in = match_input(de->d_name, n_inputs, names, &key);
        if (in < 0) {
            st = kiln__err(KILN_ERR_INVALID_ARG,
                           "calibration data '%s': file '%s' does not name an input (NAME_KEY.npy for a model "
                           "with several inputs)", dir, de->d_name);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            entry *ne = kiln__realloc(e, (size_t)cap * sizeof *e);
            if (!ne) {
                st = kiln__err(KILN_ERR_NOMEM, "out of memory");
                break;
            }
            e = ne;
        }
        e[n].file = kiln__strdup(de->d_name);
        e[n].key = e[n].file ? e[n].file + (key - de->d_name) : NULL;
        e[n].input = in;
        if (!e[n].file) {
            st = kiln__err(KILN_ERR_NOMEM, "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (st == KILN_OK && n == 0)
        st = kiln__err(KILN_ERR_INVALID_ARG, "calibration data '%s': no .npy files", dir);
    if (st != KILN_OK) {
        for (int i = 0; i < n; i++)
            kiln__free(e[i].file);
        kiln__free(e);
        return st;
    }
    qsort(e, (size_t)n, sizeof *e, entry_cmp);
    *out = e;
    *count = n;
    return KILN_OK;
}

static char *join(const char *dir, const char *file)
{
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = kiln__malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, file);
    return p;
}

static void sample_free(kiln_calib_sample *s, int n_inputs)
{
    if (s->path)
        for (int i = 0; i < n_inputs; i++)
            kiln__free(s->path[i]);
    kiln__free(s->path);
    kiln__free(s->meta);
}

/* Reads the files of one sample (e[0..n_inputs), one per input, in input order), checks them and
 * hashes their contents. */
static kiln_status sample_load(const char *dir, const entry *e, int n_inputs, const char *const *names,
                               kiln_calib_sample *s)
{
    s->n_inputs = n_inputs;
    s->path = kiln__calloc((size_t)n_inputs, sizeof *s->path);
    s->meta = kiln__calloc((size_t)n_inputs, sizeof *s->meta);
    if (!s->path || !s->meta)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    kiln_tensor *ts = kiln__calloc((size_t)n_inputs, sizeof *ts);
    kiln_status st = ts ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; st == KILN_OK && i < n_inputs; i++) {
        if (!(s->path[i] = join(dir, e[i].file))) {
            st = kiln__err(KILN_ERR_NOMEM, "out of memory");
            break;
        }
        if ((st = kiln_npy_read(s->path[i], &ts[i])) != KILN_OK)
            break;
        s->meta[i] = ts[i];
        s->meta[i].data = NULL;
        if (ts[i].ndim < 1)
            st = kiln__err(KILN_ERR_SHAPE, "calibration file '%s' for input '%s' is a scalar; samples are batched "
                           "along axis 0", s->path[i], names[i]);
        else if (i > 0 && ts[i].dims[0] != ts[0].dims[0])
            st = kiln__err(KILN_ERR_SHAPE, "calibration files '%s' and '%s' hold %lld and %lld samples", s->path[0],
                           s->path[i], (long long)ts[0].dims[0], (long long)ts[i].dims[0]);
    }
    if (st == KILN_OK) {
        s->rows = ts[0].dims[0];
        s->hash = kiln__calib_sample_hash(ts, n_inputs);
    }
    for (int i = 0; ts && i < n_inputs; i++)
        kiln__free(ts[i].data);
    kiln__free(ts);
    return st;
}

uint64_t kiln__calib_sample_hash(const kiln_tensor *ts, int n)
{
    uint64_t acc = 0;
    for (int i = 0; i < n; i++) {
        uint64_t th = kiln__tensor_hash(&ts[i]);
        acc = kiln__hash64(&th, sizeof th, acc);
    }
    return acc;
}

static int sample_cmp(const void *a, const void *b)
{
    const kiln_calib_sample *x = a, *y = b;
    for (int i = 0; i < x->n_inputs; i++) {
        const kiln_tensor *p = &x->meta[i], *q = &y->meta[i];
        if (p->dtype != q->dtype)
            return p->dtype < q->dtype ? -1 : 1;
        if (p->ndim != q->ndim)
            return p->ndim < q->ndim ? -1 : 1;
        for (int d = 1; d < p->ndim; d++)
            if (p->dims[d] != q->dims[d])
                return p->dims[d] < q->dims[d] ? -1 : 1;
    }
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->rows < y->rows ? -1 : x->rows > y->rows;
}

kiln_status kiln__calib_set_open(const char *dir, int n_inputs, const char *const *names, kiln_calib_set *out)
{
    memset(out, 0, sizeof *out);
    if (n_inputs < 1)
        return kiln__err(KILN_ERR_INVALID_ARG, "calibration: the model has no inputs");
    out->n_inputs = n_inputs;
    entry *e = NULL;
    int ne = 0;
    KILN_TRY(list_dir(dir, n_inputs, names, &e, &ne));
    kiln_status st = KILN_OK;
    out->s = kiln__calloc((size_t)ne, sizeof *out->s);
    if (!out->s)
        st = kiln__err(KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; st == KILN_OK && i < ne; i += n_inputs) {
        /* entries are sorted by (key, input): a complete sample is inputs 0..n-1 under one key */
        for (int k = 0; k < n_inputs; k++)
            if (i + k >= ne || strcmp(e[i + k].key, e[i].key) || e[i + k].input != k) {
                st = kiln__err(KILN_ERR_INVALID_ARG, "calibration data '%s': sample '%s' has no file %s_%s for input '%s'",
                               dir, e[i].key, names[k], e[i].key, names[k]);
                break;
            }
        if (st == KILN_OK)
            st = sample_load(dir, e + i, n_inputs, names, &out->s[out->n++]);
    }
    for (int i = 0; i < ne; i++)
        kiln__free(e[i].file);
    kiln__free(e);
    if (st != KILN_OK) {
        kiln__calib_set_free(out);
        return st;
    }
    qsort(out->s, (size_t)out->n, sizeof *out->s, sample_cmp);
    uint64_t acc = kiln__hash64(&out->n_inputs, sizeof out->n_inputs, 0);
    for (int i = 0; i < out->n; i++) {
        acc = kiln__hash64(&out->s[i].hash, sizeof out->s[i].hash, acc);
        out->rows += out->s[i].rows;
    }
    out->hash = acc;
    return KILN_OK;
}

void kiln__calib_set_free(kiln_calib_set *set)
{
    for (int i = 0; set->s && i < set->n; i++)
        sample_free(&set->s[i], set->n_inputs);
    kiln__free(set->s);
    memset(set, 0, sizeof *set);
}
