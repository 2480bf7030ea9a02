/* Model configuration: the config.pbtxt subset kiln serve reads, Triton-style auto-complete from
 * the engine, and the JSON form shown at GET /v2/models/<m>/config. */
#include "serve.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), false)

/* The single value of field `key` (NULL if absent); false when it is repeated. */
static bool one(json_t *o, const char *key, json_t **v, char *err, size_t errlen)
{
    json_t *a = json_object_get(o, key);
    *v = NULL;
    if (!a)
        return true;
    if (json_array_size(a) != 1)
        return ERR("config.pbtxt: field '%s' must appear once", key);
    *v = json_array_get(a, 0);
    return true;
}

static bool get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *given, char *err,
                    size_t errlen)
{
    json_t *v;
    if (!one(o, key, &v, err, errlen))
        return false;
    if (given)
        *given = v != NULL;
    if (!v)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return ERR("config.pbtxt: '%s' must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return true;
}

static bool get_str(json_t *o, const char *key, const char **out, char *err, size_t errlen)
{
    json_t *v;
    if (!one(o, key, &v, err, errlen))
        return false;
    if (v && !json_is_string(v))
        return ERR("config.pbtxt: '%s' must be a string", key);
    *out = v ? json_string_value(v) : NULL;
    return true;
}

/* Every key of o must be in the NULL-terminated list. */
static bool only_keys(json_t *o, const char *where, const char *const *allowed, char *err, size_t errlen)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++)
            ok = !strcmp(allowed[i], k);
        if (!ok)
            return ERR("config.pbtxt: field '%s' in %s is not supported by kiln serve (see docs/SERVE.md)", k, where);
    }
    return true;
}

static bool read_io(json_t *arr, const char *what, sv_io *io, int *n, char *err, size_t errlen)
{
    static const char *const keys[] = {"name", "data_type", "dims", NULL};
    size_t i;
    json_t *m;
    json_array_foreach(arr, i, m) {
        if (!json_is_object(m))
            return ERR("config.pbtxt: %s must be a message", what);
        if (*n >= SV_MAX_IO)
            return ERR("config.pbtxt: more than %d %ss", SV_MAX_IO, what);
        if (!only_keys(m, what, keys, err, errlen))
            return false;
        sv_io *x = &io[(*n)++];
        memset(x, 0, sizeof *x);
        x->ndim = -1;
        const char *name, *dt;
        if (!get_str(m, "name", &name, err, errlen) || !get_str(m, "data_type", &dt, err, errlen))
            return false;
        if (!name || strlen(name) >= SV_NAME_MAX)
            return ERR("config.pbtxt: every %s needs a name (< %d chars)", what, SV_NAME_MAX);
        for (int k = 0; k < *n - 1; k++)   /* as Triton: one entry per name, never a second one silently ignored */
            if (!strcmp(io[k].name, name))
                return ERR("config.pbtxt: %s '%s' is listed twice", what, name);
        strcpy(x->name, name);
        if (dt && (x->dtype = sv_dtype_from_triton(dt)) == KILN_DT_UNDEFINED)
            return ERR("config.pbtxt: %s '%s': unknown data_type '%s'", what, name, dt);
        json_t *dims = json_object_get(m, "dims");
        if (dims) {
            if (json_array_size(dims) > KILN_MAX_DIMS)
                return ERR("config.pbtxt: %s '%s': more than %d dims", what, name, KILN_MAX_DIMS);
            x->ndim = (int)json_array_size(dims);
            for (int d = 0; d < x->ndim; d++) {
                json_t *v = json_array_get(dims, (size_t)d);
                if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) == 0 ||
                    json_integer_value(v) > (1ll << 31))
                    return ERR("config.pbtxt: %s '%s': dims must be positive integers or -1", what, name);
                x->dims[d] = json_integer_value(v);
            }
        }
    }
    return true;
}

static bool read_batching(json_t *db, sv_config *c, char *err, size_t errlen)
{
    static const char *const keys[] = {"preferred_batch_size", "max_queue_delay_microseconds", NULL};
    if (!json_is_object(db) || !only_keys(db, "dynamic_batching", keys, err, errlen))
        return json_is_object(db) ? false : ERR("config.pbtxt: dynamic_batching must be a message");
    c->dynamic_batching = true;
    json_t *pref = json_object_get(db, "preferred_batch_size");
    size_t i;
    json_t *v;
    json_array_foreach(pref, i, v) {
        if (c->n_preferred >= SV_MAX_PREFERRED || !json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > 1024)
            return ERR("config.pbtxt: preferred_batch_size: at most %d integers in [1, 1024]", SV_MAX_PREFERRED);
        c->preferred[c->n_preferred++] = (int)json_integer_value(v);
    }
    c->sizes_given = c->n_preferred > 0;
    return get_int(db, "max_queue_delay_microseconds", 0, 10000000, &c->max_queue_delay_us, &c->delay_given, err,
                   errlen);
}

static bool read_instances(json_t *arr, sv_config *c, char *err, size_t errlen)
{
    static const char *const keys[] = {"count", "kind", NULL};
    if (json_array_size(arr) != 1 || !json_is_object(json_array_get(arr, 0)))
        return ERR("config.pbtxt: exactly one instance_group message is supported");
    json_t *g = json_array_get(arr, 0);
    int64_t count = 1;
    const char *kind = NULL;
    if (!only_keys(g, "instance_group", keys, err, errlen) || !get_int(g, "count", 1, 64, &count, NULL, err, errlen) ||
        !get_str(g, "kind", &kind, err, errlen))
        return false;
    if (!kind || !strcmp(kind, "KIND_AUTO"))
        c->kind = SV_KIND_AUTO;
    else if (!strcmp(kind, "KIND_CPU"))
        c->kind = SV_KIND_CPU;
    else if (!strcmp(kind, "KIND_GPU"))
        c->kind = SV_KIND_GPU;
    else
        return ERR("config.pbtxt: instance_group kind %s is not available (use KIND_AUTO, KIND_CPU or KIND_GPU)", kind);
    c->instance_count = (int)count;
    return true;
}

/* kiln's own parameters: { key: "precision" value: { string_value: "fp32" } } */
static bool read_parameters(json_t *arr, sv_config *c, char *err, size_t errlen)
{
    size_t i;
    json_t *p;
    json_array_foreach(arr, i, p) {
        const char *key;
        json_t *val, *sv = NULL;
        if (!json_is_object(p) || !get_str(p, "key", &key, err, errlen) || !one(p, "value", &val, err, errlen))
            return json_is_object(p) ? false : ERR("config.pbtxt: parameters must be messages");
        if (!key || !json_is_object(val) || !one(val, "string_value", &sv, err, errlen) || !json_is_string(sv))
            return ERR("config.pbtxt: parameters need key and value { string_value: ... }");
        const char *s = json_string_value(sv);
        if (!strcmp(key, "precision")) {
            if (strcmp(s, "fp32") && strcmp(s, "fp16") && strcmp(s, "bf16") && strcmp(s, "int8"))
                return ERR("config.pbtxt: precision '%s' is not one of fp32, fp16, bf16, int8", s);
            snprintf(c->precision, sizeof c->precision, "%s", s);
        } else if (!strcmp(key, "calibration")) {
            /* a directory of .npy files inside the model's directory: one name, no path */
            if (!sv_name_ok(s))
                return ERR("config.pbtxt: calibration must name a directory inside the model's directory "
                           "([A-Za-z0-9_.-], not starting with '.')");
            snprintf(c->calibration, sizeof c->calibration, "%s", s);
        } else if (!strcmp(key, "calibration_method")) {
            kiln_calib_method meth;
            double param;
            if (kiln_calib_method_parse(s, &meth, &param) != KILN_OK || strlen(s) >= sizeof c->calibration_method)
                return ERR("config.pbtxt: calibration_method '%s' is not entropy, minmax, percentile[:P] or mse", s);
            snprintf(c->calibration_method, sizeof c->calibration_method, "%s", s);
        } else if (!strcmp(key, "threads")) {
            int64_t t;
            if (!sv_parse_i64(s, 0, 1024, &t))
                return ERR("config.pbtxt: parameter threads must be an integer in [0, 1024]");
            c->threads_per_instance = (int)t;
        } else {
            return ERR("config.pbtxt: unknown parameter '%s' (kiln knows precision, calibration, calibration_method, "
                       "threads)", key);
        }
    }
    bool int8 = !strcmp(c->precision, "int8"), calibrated = c->calibration[0] != 0;
    if (int8 != calibrated)
        return ERR(calibrated ? "config.pbtxt: calibration is only used with precision int8"
                              : "config.pbtxt: precision int8 needs a calibration directory (parameter calibration)");
    if (c->calibration_method[0] && !c->calibration[0])
        return ERR("config.pbtxt: calibration_method without calibration");
    return true;
}

bool sv_config_read(const char *model_dir, const char *model_name, sv_config *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", model_name);
    c->max_batch_size = -1;   /* -1: not given, auto-complete decides */
    c->instance_count = 1;
    snprintf(c->precision, sizeof c->precision, "fp32");
    char path[4096];
    snprintf(path, sizeof path, "%s/config.pbtxt", model_dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return true;
    c->from_file = true;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {   /* fopen opens a directory too */
        fclose(f);
        return ERR("%s is not a regular file", path);
    }
    char *text = malloc(1 << 20);
    size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    int read_errno = ferror(f) ? errno : 0;
    bool too_big = text && !read_errno && !feof(f);
    fclose(f);
    if (!text || too_big || read_errno) {
        free(text);
        return ERR("%s: %s", path, read_errno ? strerror(read_errno) : too_big ? "larger than 1 MiB" : "out of memory");
    }
    text[n] = 0;
    if (strlen(text) != n) {
        free(text);
        return ERR("%s: contains a NUL byte", path);
    }
    json_t *o = sv_pbtxt_parse(text, err, errlen);
    free(text);
    if (!o)
        return false;
    static const char *const keys[] = {"name", "platform", "backend", "max_batch_size", "input", "output",
                                       "dynamic_batching", "instance_group", "parameters", NULL};
    const char *name = NULL;
    int64_t mbs = -1;
    json_t *db;
    bool ok = only_keys(o, "the model config", keys, err, errlen) && get_str(o, "name", &name, err, errlen) &&
              get_int(o, "max_batch_size", 0, 1024, &mbs, NULL, err, errlen) &&
              read_io(json_object_get(o, "input"), "input", c->inputs, &c->n_inputs, err, errlen) &&
              read_io(json_object_get(o, "output"), "output", c->outputs, &c->n_outputs, err, errlen) &&
              one(o, "dynamic_batching", &db, err, errlen) && (!db || read_batching(db, c, err, errlen)) &&
              (!json_object_get(o, "instance_group") ||
               read_instances(json_object_get(o, "instance_group"), c, err, errlen)) &&
              read_parameters(json_object_get(o, "parameters"), c, err, errlen);
    if (ok && name && strcmp(name, model_name))
        ok = ERR("config.pbtxt: name '%s' differs from the directory name '%s'", name, model_name);
    c->max_batch_size = (int)mbs;
    json_decref(o);
    return ok;
}

/* Finds the config entry for an engine i/o name, appending an empty one if the config omits it. */
static sv_io *io_for(sv_io *arr, int *n, const char *name)
{
    for (int i = 0; i < *n; i++)
        if (!strcmp(arr[i].name, name))
            return &arr[i];
    if (*n >= SV_MAX_IO)
        return NULL;
    sv_io *x = &arr[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ndim = -1;
    return x;
}

/* Merges one engine i/o into the config entry; engine dims (-1 = dynamic) are the truth where fixed. */
/* Declared name, dtype and shape of one engine input or output (ndim -1: rank unknown or above
 * KILN_MAX_DIMS; dims[d] -1: not a fixed size). */
typedef struct io_decl {
    const char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
} io_decl;

static kiln_status io_decl_get(kiln_engine_t e, bool output, int i, io_decl *d)
{
    kiln_type_info t;
    kiln_status st = kiln_engine_io_type(e, output ? KILN_IO_OUTPUT : KILN_IO_INPUT, i, &t);
    if (st != KILN_OK)
        return st;
    memset(d, 0, sizeof *d);
    d->name = output ? kiln_engine_output_name(e, i) : kiln_engine_input_name(e, i);
    d->dtype = t.dtype;
    d->ndim = t.rank > KILN_MAX_DIMS ? -1 : t.rank;
    for (int k = 0; k < d->ndim; k++)
        d->dims[k] = t.dims[k];
    return KILN_OK;
}

static bool merge_io(sv_io *x, const io_decl *inf, int batch_dims, const char *what, char *err, size_t errlen)
{
    kiln_dtype dt = inf->dtype != KILN_DT_UNDEFINED ? inf->dtype : KILN_DT_FLOAT32;
    if (x->dtype != KILN_DT_UNDEFINED && x->dtype != dt)
        return ERR("config: %s '%s' is %s in the model, config says %s", what, x->name, sv_dtype_triton(dt),
                   sv_dtype_triton(x->dtype));
    x->dtype = dt;
    if (!sv_dtype_kserve(dt) || dt == KILN_DT_STRING)
        return ERR("config: %s '%s' has type %s which kiln serve cannot carry", what, x->name, kiln_dtype_name(dt));
    if (inf->ndim < 0) {
        if (x->ndim < 0)
            return ERR("config: %s '%s' has no declared shape: give dims in config.pbtxt", what, x->name);
        return true;
    }
    int nd = inf->ndim - batch_dims;
    if (x->ndim >= 0 && x->ndim != nd)
        return ERR("config: %s '%s' has %d dims (after the batch dim) in the model, config says %d", what, x->name, nd,
                   x->ndim);
    for (int d = 0; d < nd; d++) {
        int64_t md = inf->dims[d + batch_dims], cd = x->ndim >= 0 ? x->dims[d] : -1;
        if (md >= 0 && cd >= 0 && md != cd)
            return ERR("config: %s '%s' dim %d is %lld in the model, config says %lld", what, x->name, d + batch_dims,
                       (long long)md, (long long)cd);
        x->dims[d] = md >= 0 ? md : cd;
    }
    x->ndim = nd;
    return true;
}

/* The largest batch (dim 0) that some optimization profile of e accepts on every input it gives a range; INT64_MAX
 * when e has no profiles (or one without a range on a batched input). *which: the input whose range sets it. */
static int64_t engine_batch_max(kiln_engine_t e, const char **which)
{
    int np = kiln_engine_num_profiles(e);
    int64_t best = np > 0 ? 0 : INT64_MAX;
    *which = "";
    for (int p = 0; p < np; p++) {
        int64_t pmax = INT64_MAX;
        const char *pw = "";
        int nr = kiln_engine_profile_num_ranges(e, p);
        for (int k = 0; k < nr; k++) {
            kiln_shape_range r;
            if (kiln_engine_profile_range(e, p, k, &r) == KILN_OK && r.ndim >= 1 && r.max[0] < pmax) {
                pmax = r.max[0];
                pw = r.input;
            }
        }
        if (pmax > best) {
            best = pmax;
            *which = pw;
        }
    }
    return best;
}

/* max_batch_size against what the engine runs (as Triton's TensorRT backend): without a value, auto-complete takes 8,
 * or the profiles' largest batch when that is less; a configured value above that largest batch is refused (a batch
 * the engine cannot run would fail every request merged into it). */
static bool batch_limit(sv_config *c, kiln_engine_t e, bool all_dyn0, char *err, size_t errlen)
{
    const char *which = "";
    int64_t emax = all_dyn0 ? engine_batch_max(e, &which) : INT64_MAX;
    if (c->max_batch_size < 0)   /* Triton's auto-complete picks a small default too */
        c->max_batch_size = !all_dyn0 ? 0 : emax < 8 ? (int)(emax > 0 ? emax : 0) : 8;
    if (c->max_batch_size > emax)
        return ERR("config: max_batch_size %d is more than the engine runs: its optimization profiles take batches up "
                   "to %lld (input '%s' dim 0); lower max_batch_size, or build the engine with a larger batch in "
                   "--max-shapes", c->max_batch_size, (long long)emax, which);
    return true;
}

/* Copies the engine's optimization profiles into c->ranges, by config input (c->inputs in engine order). */
static bool read_profiles(sv_config *c, kiln_engine_t e, char *err, size_t errlen)
{
    int np = kiln_engine_num_profiles(e), total = 0;
    for (int p = 0; p < np; p++)
        total += kiln_engine_profile_num_ranges(e, p) > 0 ? kiln_engine_profile_num_ranges(e, p) : 0;
    free(c->ranges);
    c->ranges = total ? calloc((size_t)total, sizeof *c->ranges) : NULL;
    c->n_ranges = 0;
    c->n_profiles = np;
    if (total && !c->ranges)
        return ERR("out of memory");
    for (int p = 0; p < np; p++) {
        int nr = kiln_engine_profile_num_ranges(e, p);
        for (int k = 0; k < nr; k++) {
            kiln_shape_range r;
            if (kiln_engine_profile_range(e, p, k, &r) != KILN_OK)
                return ERR("%s", kiln_last_error());
            int j = 0;
            while (j < c->n_inputs && strcmp(c->inputs[j].name, r.input))
                j++;
            if (j == c->n_inputs || r.ndim > KILN_MAX_DIMS)
                continue;   /* not an input the config carries: nothing a request can change */
            sv_range *x = &c->ranges[c->n_ranges++];
            *x = (sv_range){.profile = p, .input = j, .ndim = r.ndim};
            memcpy(x->min, r.min, sizeof x->min);
            memcpy(x->max, r.max, sizeof x->max);
        }
    }
    return true;
}

bool sv_config_complete(sv_config *c, kiln_engine_t e, char *err, size_t errlen)
{
    int ni = kiln_engine_num_inputs(e), no = kiln_engine_num_outputs(e);
    if (ni > SV_MAX_IO || no > SV_MAX_IO)
        return ERR("model has more than %d inputs or outputs", SV_MAX_IO);
    io_decl ii[SV_MAX_IO], oi[SV_MAX_IO];
    bool all_dyn0 = ni > 0;
    for (int k = 0; k < ni + no; k++) {
        bool out = k >= ni;
        io_decl *inf = out ? &oi[k - ni] : &ii[k];
        if (io_decl_get(e, out, out ? k - ni : k, inf) != KILN_OK)
            return ERR("%s", kiln_last_error());
        all_dyn0 = all_dyn0 && inf->ndim >= 1 && inf->dims[0] < 0;
    }
    /* config entries must name real inputs/outputs */
    for (int k = 0; k < c->n_inputs + c->n_outputs; k++) {
        bool out = k >= c->n_inputs;
        const char *nm = out ? c->outputs[k - c->n_inputs].name : c->inputs[k].name;
        bool found = false;
        for (int j = 0; j < (out ? no : ni) && !found; j++)
            found = !strcmp((out ? oi : ii)[j].name, nm);
        if (!found)
            return ERR("config: the model has no %s named '%s'", out ? "output" : "input", nm);
    }
    if (!batch_limit(c, e, all_dyn0, err, errlen))
        return false;
    if (c->max_batch_size > 0 && !all_dyn0)
        return ERR("config: max_batch_size %d needs a dynamic first dimension on every input and output",
                   c->max_batch_size);
    int bd = c->max_batch_size > 0;
    /* reorder into engine order, completing what the config left out */
    sv_io ins[SV_MAX_IO], outs[SV_MAX_IO];
    int nin = c->n_inputs, nout = c->n_outputs;
    memcpy(ins, c->inputs, sizeof ins);
    memcpy(outs, c->outputs, sizeof outs);
    for (int k = 0; k < ni; k++) {
        sv_io *x = io_for(ins, &nin, ii[k].name);
        if (!x || !merge_io(x, &ii[k], bd, "input", err, errlen))
            return x ? false : ERR("too many inputs");
        c->inputs[k] = *x;
    }
    for (int k = 0; k < no; k++) {
        sv_io *x = io_for(outs, &nout, oi[k].name);
        if (!x || !merge_io(x, &oi[k], bd, "output", err, errlen))
            return x ? false : ERR("too many outputs");
        c->outputs[k] = *x;
    }
    c->n_inputs = ni;
    c->n_outputs = no;
    c->merge_max = c->max_batch_size;
    if (!read_profiles(c, e, err, errlen))
        return false;
    if (!c->from_file && c->max_batch_size > 0)
        c->dynamic_batching = true;   /* auto-complete: batch, with sizes derived from the engine */
    for (int i = 0; i < c->n_preferred; i++)
        if (c->preferred[i] > c->max_batch_size)
            return ERR("config: preferred_batch_size %d exceeds max_batch_size %d", c->preferred[i], c->max_batch_size);
    if (c->dynamic_batching && c->max_batch_size == 0)
        return ERR("config: dynamic_batching needs max_batch_size > 0");
    return true;
}

static json_t *io_json(const sv_io *x)
{
    json_t *dims = json_array();
    for (int d = 0; d < x->ndim; d++)
        json_array_append_new(dims, json_integer(x->dims[d]));
    return json_pack("{s:s, s:s, s:o}", "name", x->name, "data_type", sv_dtype_triton(x->dtype), "dims", dims);
}

kiln_device sv_config_device(const sv_config *c, kiln_device server_default)
{
    return c->kind == SV_KIND_GPU ? KILN_DEVICE_CUDA : c->kind == SV_KIND_CPU ? KILN_DEVICE_CPU : server_default;
}

json_t *sv_config_json(const sv_config *c, kiln_device device)
{
    json_t *ins = json_array(), *outs = json_array();
    for (int i = 0; i < c->n_inputs; i++)
        json_array_append_new(ins, io_json(&c->inputs[i]));
    for (int i = 0; i < c->n_outputs; i++)
        json_array_append_new(outs, io_json(&c->outputs[i]));
    json_t *j = json_pack("{s:s, s:s, s:i, s:o, s:o, s:[{s:i, s:s}]}", "name", c->name, "platform", "kiln",
                          "max_batch_size", c->max_batch_size, "input", ins, "output", outs, "instance_group", "count",
                          c->instance_count, "kind", device == KILN_DEVICE_CUDA ? "KIND_GPU" : "KIND_CPU");
    if (j && c->dynamic_batching) {
        json_t *pref = json_array();
        for (int i = 0; i < c->n_preferred; i++)
            json_array_append_new(pref, json_integer(c->preferred[i]));
        json_object_set_new(j, "dynamic_batching",
                            json_pack("{s:o, s:I}", "preferred_batch_size", pref, "max_queue_delay_microseconds",
                                      (json_int_t)c->max_queue_delay_us));
    }
    if (j) {   /* kiln's parameters, as Triton shows parameters: {"key": {"string_value": "..."}} */
        json_t *par = json_object();
        json_object_set_new(par, "precision", json_pack("{s:s}", "string_value", c->precision));
        if (c->calibration[0])
            json_object_set_new(par, "calibration", json_pack("{s:s}", "string_value", c->calibration));
        if (c->calibration_method[0])
            json_object_set_new(par, "calibration_method", json_pack("{s:s}", "string_value", c->calibration_method));
        if (c->threads_per_instance) {
            char t[16];
            snprintf(t, sizeof t, "%d", c->threads_per_instance);
            json_object_set_new(par, "threads", json_pack("{s:s}", "string_value", t));
        }
        json_object_set_new(j, "parameters", par);
    }
    if (j && c->batching_info)
        json_object_set(j, "kiln_batching", c->batching_info);
    return j;
}

void sv_config_free(sv_config *c)
{
    json_decref(c->batching_info);
    c->batching_info = NULL;
    free(c->ranges);
    c->ranges = NULL;
    c->n_ranges = c->n_profiles = 0;
}
