/* KServe v2 inference protocol codec: JSON tensors and Triton's binary tensor data extension
 * (a JSON header of Inference-Header-Content-Length bytes followed by the raw tensors, in the
 * order of the inputs/outputs carrying parameters.binary_data_size). */
#include "serve.h"
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BAD(...) (snprintf(err, errlen, __VA_ARGS__), 400)

static const char *kserve_name(kiln_dtype dt) { return sv_dtype_kserve(dt) ? sv_dtype_kserve(dt) : "?"; }

/* UINT64 values past INT64_MAX. jansson's integers are int64: it refuses such a literal while parsing ("too big
 * integer") and cannot print one. Both ways they travel as a string that starts with a NUL byte, "\0u64:<digits>",
 * which nothing a client sends can hold (requests are parsed without JSON_ALLOW_NUL, and mark_big_u64 refuses a
 * header that spells \u0000): the decoder rewrites such literals into it, the encoder writes the digits in its place. */
#define U64_MARK "\0u64:"
#define U64_MARK_LEN 5

/* The value of a U64_MARK string. */
static bool big_u64(const json_t *v, uint64_t *u)
{
    const char *s = json_string_value(v);
    if (!s || json_string_length(v) <= U64_MARK_LEN || memcmp(s, U64_MARK, U64_MARK_LEN))
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s + U64_MARK_LEN, &end, 10);
    *u = x;
    return !errno && !*end;
}

/* A copy of the JSON text s[0, n) with every integer literal in (INT64_MAX, UINT64_MAX] replaced by the string
 * "\u0000u64:<digits>", to be parsed with JSON_ALLOW_NUL; NULL when there is none, when a string of s spells
 * \u0000 (it could pose as one), or when memory runs out. Larger literals stay: jansson refuses them still. */
static char *mark_big_u64(const char *s, size_t n, size_t *out_len)
{
    char *buf = NULL;
    size_t len = 0, from = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    bool in_str = false, any = false, nul = false;
    for (size_t i = 0; i < n && !nul;) {
        char c = s[i];
        if (in_str) {   /* inside a string: skip escapes, note \u0000, stop at the closing quote */
            if (c == '\\') {
                nul = i + 5 < n && !memcmp(s + i + 1, "u0000", 5);
                i += 2;
            } else {
                in_str = c != '"';
                i++;
            }
            continue;
        }
        if (c == '"') {
            in_str = true;
            i++;
            continue;
        }
        if (c != '-' && !isdigit((unsigned char)c)) {
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < n && isdigit((unsigned char)s[j]))
            j++;
        bool plain = c != '-' && c != '0' && (j == n || (s[j] != '.' && s[j] != 'e' && s[j] != 'E'));
        if (plain && (j - i == 19 || j - i == 20)) {
            char digits[24], *end;
            memcpy(digits, s + i, j - i);
            digits[j - i] = 0;
            errno = 0;
            unsigned long long v = strtoull(digits, &end, 10);
            if (!errno && v > (unsigned long long)INT64_MAX) {
                fwrite(s + from, 1, i - from, f);
                fprintf(f, "\"\\u0000u64:%s\"", digits);
                from = j;
                any = true;
            }
        }
        i = j;
    }
    fwrite(s + from, 1, n - from, f);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok && any && !nul;
    if (!ok) {
        free(buf);
        return NULL;
    }
    *out_len = len;
    return buf;
}

/* Stores JSON scalar v as element i of t; false with err when it does not fit the dtype. */
static bool store_elem(kiln_tensor *t, size_t i, const json_t *v, char *err, size_t errlen)
{
    kiln_dtype dt = t->dtype;
    if (dt == KILN_DT_BOOL) {
        if (!json_is_boolean(v) && !(json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1)))
            return snprintf(err, errlen, "BOOL data must be true/false"), false;
        ((uint8_t *)t->data)[i] = json_is_true(v) || (json_is_integer(v) && json_integer_value(v) == 1);
        return true;
    }
    if (dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16) {
        if (!json_is_number(v))
            return snprintf(err, errlen, "%s data must be numbers", kserve_name(dt)), false;
        double d = json_number_value(v);
        if (dt == KILN_DT_FLOAT32)
            ((float *)t->data)[i] = (float)d;
        else if (dt == KILN_DT_FLOAT64)
            ((double *)t->data)[i] = d;
        else if (dt == KILN_DT_FLOAT16)
            ((uint16_t *)t->data)[i] = sv_float_to_half((float)d);
        else
            ((uint16_t *)t->data)[i] = sv_float_to_bf16((float)d);
        return true;
    }
    if (dt == KILN_DT_UINT64) {
        uint64_t u;
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            u = (uint64_t)json_integer_value(v);
        else if (!big_u64(v, &u))
            return snprintf(err, errlen, "UINT64 data must be integers in [0, %" PRIu64 "]", UINT64_MAX), false;
        ((uint64_t *)t->data)[i] = u;
        return true;
    }
    static const struct { kiln_dtype dt; long long lo, hi; } R[] = {
        {KILN_DT_UINT8, 0, 255}, {KILN_DT_INT8, -128, 127}, {KILN_DT_UINT16, 0, 65535}, {KILN_DT_INT16, -32768, 32767},
        {KILN_DT_UINT32, 0, 4294967295ll}, {KILN_DT_INT32, INT32_MIN, INT32_MAX}, {KILN_DT_INT64, INT64_MIN, INT64_MAX}};
    for (size_t k = 0; k < sizeof R / sizeof R[0]; k++) {
        if (R[k].dt != dt)
            continue;
        if (!json_is_integer(v) || json_integer_value(v) < R[k].lo || json_integer_value(v) > R[k].hi)
            return snprintf(err, errlen, "%s data must be integers in [%lld, %lld]", kserve_name(dt), R[k].lo, R[k].hi),
                   false;
        long long x = json_integer_value(v);
        size_t es = kiln_dtype_size(dt);
        if (es == 1)
            ((uint8_t *)t->data)[i] = (uint8_t)x;
        else if (es == 2)
            ((uint16_t *)t->data)[i] = (uint16_t)x;
        else if (es == 4)
            ((uint32_t *)t->data)[i] = (uint32_t)x;
        else
            ((uint64_t *)t->data)[i] = (uint64_t)x;
        return true;
    }
    return snprintf(err, errlen, "datatype %s cannot be sent as JSON", kserve_name(dt)), false;
}

/* Stores JSON data into t: either flat (every element a scalar) or nested as the shape, the two forms of the
 * KServe v2 protocol: at depth d an array of dims[d] items, arrays above the last dim and scalars in it. Anything
 * else (ragged rows, numbers beside arrays, a nesting of another shape) is refused, not flattened into some other
 * layout. *n counts the elements stored. */
static bool flatten(const json_t *a, kiln_tensor *t, size_t *n, size_t numel, int depth, char *err, size_t errlen)
{
    size_t i;
    json_t *v;
    bool nested = depth > 0;
    json_array_foreach(a, i, v)
        nested |= json_is_array(v);
    if (nested) {
        if (depth >= t->ndim)
            return snprintf(err, errlen, "data nested deeper than the shape's %d dims", t->ndim), false;
        if (json_array_size(a) != (size_t)t->dims[depth])
            return snprintf(err, errlen, "nested data does not follow the shape: an array at depth %d has %zu items, "
                            "dim %d is %lld", depth, json_array_size(a), depth, (long long)t->dims[depth]), false;
        bool last = depth == t->ndim - 1;
        json_array_foreach(a, i, v) {
            if (json_is_array(v) == last)
                return snprintf(err, errlen, "nested data does not follow the shape: %s at depth %d",
                                last ? "an array" : "a number", depth + 1), false;
            if (!last && !flatten(v, t, n, numel, depth + 1, err, errlen))
                return false;
        }
        if (!last)
            return true;
    }
    json_array_foreach(a, i, v) {
        if (*n >= numel)
            return snprintf(err, errlen, "more data elements than the shape holds (%zu)", numel), false;
        if (!store_elem(t, (*n)++, v, err, errlen))
            return false;
    }
    return true;
}

static int find_io(const sv_io *io, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(io[i].name, name))
            return i;
    return -1;
}

/* Checks the request shape against the config and allocates the tensor. */
static int input_shape(const sv_model *m, const sv_io *x, const json_t *shape, kiln_tensor *t, char *err, size_t errlen)
{
    int bd = m->cfg.max_batch_size > 0;
    int nd = (int)json_array_size(shape);
    if (!json_is_array(shape) || nd != x->ndim + bd)
        return BAD("input '%s': shape must have %d dimensions", x->name, x->ndim + bd);
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1ll << 31))
            return BAD("input '%s': shape entries must be non-negative integers", x->name);
        dims[d] = json_integer_value(v);
        int64_t want = d < bd ? -1 : x->dims[d - bd];
        if (want >= 0 && dims[d] != want)
            return BAD("input '%s': dim %d is %lld, the model needs %lld", x->name, d, (long long)dims[d], (long long)want);
    }
    if (bd && (dims[0] < 1 || dims[0] > m->cfg.max_batch_size))
        return BAD("input '%s': batch %lld is outside [1, max_batch_size %d]", x->name, (long long)dims[0],
                   m->cfg.max_batch_size);
    if (!sv_tensor_alloc(t, x->dtype, nd, dims))
        return BAD("input '%s': shape is too large", x->name);
    return 200;
}

/* Shape product with overflow check, before any allocation; SIZE_MAX if absurd. */
static size_t shape_bytes(const json_t *shape, kiln_dtype dt)
{
    size_t n = kiln_dtype_size(dt);
    size_t i;
    json_t *v;
    json_array_foreach(shape, i, v) {
        json_int_t d = json_is_integer(v) ? json_integer_value(v) : -1;
        if (d < 0 || (d > 0 && n > SIZE_MAX / 4 / (size_t)d))
            return SIZE_MAX;
        n *= (size_t)d;
    }
    return n;
}

static int decode_input(const sv_model *m, json_t *in, const char *body, size_t len, size_t *boff, bool binary_ok,
                        sv_req *r, bool *seen, char *err, size_t errlen)
{
    const char *name = json_string_value(json_object_get(in, "name"));
    const char *dts = json_string_value(json_object_get(in, "datatype"));
    json_t *shape = json_object_get(in, "shape"), *data = json_object_get(in, "data");
    json_t *bsz = json_object_get(json_object_get(in, "parameters"), "binary_data_size");
    if (!json_is_object(in) || !name || !dts || !json_is_array(shape))
        return BAD("every input needs \"name\", \"datatype\" and \"shape\"");
    int k = find_io(m->cfg.inputs, m->cfg.n_inputs, name);
    if (k < 0)
        return BAD("model '%s' has no input '%s'", m->name, name);
    if (seen[k])
        return BAD("input '%s' given twice", name);
    seen[k] = true;
    kiln_dtype dt = sv_dtype_from_kserve(dts);
    if (dt == KILN_DT_STRING)
        return BAD("input '%s': BYTES tensors are not supported by kiln", name);
    if (dt == KILN_DT_UNDEFINED)
        return BAD("input '%s': unknown datatype '%s'", name, dts);
    const sv_io *x = &m->cfg.inputs[k];
    if (dt != x->dtype)
        return BAD("input '%s': datatype %s, the model needs %s", name, dts, kserve_name(x->dtype));
    size_t i;
    json_t *v;
    json_array_foreach(shape, i, v)
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return BAD("input '%s': invalid shape: dims must be non-negative integers", name);
    if (bsz && data)
        return BAD("input '%s': give either \"data\" or parameters.binary_data_size, not both", name);
    size_t nbytes = shape_bytes(shape, dt);
    if (bsz) {
        if (!binary_ok)
            return BAD("input '%s': binary_data_size without an Inference-Header-Content-Length header", name);
        if (!json_is_integer(bsz) || json_integer_value(bsz) < 0 || (size_t)json_integer_value(bsz) != nbytes)
            return BAD("input '%s': binary_data_size must be %zu bytes for this shape and datatype", name, nbytes);
        if (nbytes > len - *boff)
            return BAD("input '%s': binary data runs past the end of the body", name);
    } else if (!json_is_array(data)) {
        return BAD("input '%s': needs \"data\" (an array) or parameters.binary_data_size", name);
    } else if (nbytes == SIZE_MAX || nbytes / kiln_dtype_size(dt) > len) {
        return BAD("input '%s': the shape holds more elements than the body carries", name);
    }
    int st = input_shape(m, x, shape, &r->in[k], err, errlen);
    if (st != 200)
        return st;
    kiln_tensor *t = &r->in[k];
    if (bsz) {
        memcpy(t->data, body + *boff, t->nbytes);
        *boff += t->nbytes;
        return 200;
    }
    size_t n = 0, numel = t->nbytes / kiln_dtype_size(dt);
    char why[512];
    if (!flatten(data, t, &n, numel, 0, why, sizeof why))
        return BAD("input '%s': %s", name, why);
    if (n != numel)
        return BAD("input '%s': %zu data elements for a shape of %zu", name, n, numel);
    return 200;
}

static int decode_outputs(const sv_model *m, json_t *req, sv_out_sel *sel, char *err, size_t errlen)
{
    json_t *bo = json_object_get(json_object_get(req, "parameters"), "binary_data_output");
    bool all_binary = json_is_true(bo);
    json_t *outs = json_object_get(req, "outputs");
    if (outs && !json_is_array(outs))
        return BAD("\"outputs\" must be an array");
    for (int o = 0; o < m->cfg.n_outputs; o++) {
        sel->wanted[o] = !outs || json_array_size(outs) == 0;
        sel->binary[o] = all_binary;
    }
    size_t i;
    json_t *o;
    json_array_foreach(outs, i, o) {
        const char *name = json_string_value(json_object_get(o, "name"));
        int k = name ? find_io(m->cfg.outputs, m->cfg.n_outputs, name) : -1;
        if (k < 0)
            return BAD(name ? "model '%s' has no output '%s'" : "model '%s': every requested output needs a name%s",
                       m->name, name ? name : "");
        if (json_object_get(json_object_get(o, "parameters"), "classification"))
            return BAD("output '%s': the classification extension is not supported", name);
        json_t *b = json_object_get(json_object_get(o, "parameters"), "binary_data");
        sel->wanted[k] = true;
        sel->binary[k] = b ? json_is_true(b) : all_binary;
    }
    return 200;
}

int sv_decode_infer(const sv_model *m, const char *body, size_t len, size_t header_len, sv_req *r, sv_out_sel *sel,
                    char *err, size_t errlen)
{
    memset(sel, 0, sizeof *sel);
    size_t hl = header_len ? header_len : len;
    if (hl > len)
        return BAD("Inference-Header-Content-Length (%zu) exceeds the body (%zu bytes)", hl, len);
    json_error_t je;
    json_t *req = json_loadb(body, hl, JSON_REJECT_DUPLICATES, &je);
    if (!req && json_error_code(&je) == json_error_numeric_overflow) {   /* UINT64 data past INT64_MAX? */
        size_t ml;
        char *marked = mark_big_u64(body, hl, &ml);
        if (marked)
            req = json_loadb(marked, ml, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
        free(marked);
    }
    if (!req)
        return BAD("malformed JSON: %s (line %d)%s", je.text, je.line,
                   json_error_code(&je) == json_error_numeric_overflow
                       ? "; integers must lie in [-9223372036854775808, 18446744073709551615]" : "");
    int st = 200;
    json_t *inputs = json_object_get(req, "inputs"), *id = json_object_get(req, "id");
    if (!json_is_object(req) || !json_is_array(inputs))
        st = BAD("the request must be an object with an \"inputs\" array");
    else if (id && (!json_is_string(id) || json_string_length(id) != strlen(json_string_value(id))))
        st = BAD("\"id\" must be a string");   /* (a UINT64 mark is a string holding a NUL) */
    if (id && st == 200 && !(sel->id = strdup(json_string_value(id))))   /* echoed in full, as Triton does */
        st = (snprintf(err, errlen, "out of memory"), 500);
    bool seen[SV_MAX_IO] = {false};
    size_t boff = hl, i;
    json_t *in;
    json_array_foreach(inputs, i, in) {
        if (st != 200)
            break;
        st = decode_input(m, in, body, len, &boff, header_len > 0, r, seen, err, errlen);
    }
    for (int k = 0; st == 200 && k < m->cfg.n_inputs; k++)
        if (!seen[k])
            st = BAD("missing input '%s'", m->cfg.inputs[k].name);
    if (st == 200 && boff != len)
        st = BAD("%zu bytes of binary data are not claimed by any input's binary_data_size", len - boff);
    r->batch = 1;
    if (st == 200 && m->cfg.max_batch_size > 0) {
        r->batch = r->in[0].dims[0];
        for (int k = 1; k < m->cfg.n_inputs && st == 200; k++)
            if (r->in[k].dims[0] != r->batch)
                st = BAD("inputs disagree on the batch size (%lld vs %lld)", (long long)r->batch,
                         (long long)r->in[k].dims[0]);
    }
    if (st == 200)
        st = decode_outputs(m, req, sel, err, errlen);
    json_decref(req);
    return st;
}

void sv_out_sel_free(sv_out_sel *sel)
{
    free(sel->id);
    sel->id = NULL;
}

static json_t *elem_json(const kiln_tensor *t, size_t i)
{
    double d;
    switch (t->dtype) {
    case KILN_DT_BOOL: return json_boolean(((const uint8_t *)t->data)[i] != 0);
    case KILN_DT_UINT8: return json_integer(((const uint8_t *)t->data)[i]);
    case KILN_DT_INT8: return json_integer(((const int8_t *)t->data)[i]);
    case KILN_DT_UINT16: return json_integer(((const uint16_t *)t->data)[i]);
    case KILN_DT_INT16: return json_integer(((const int16_t *)t->data)[i]);
    case KILN_DT_UINT32: return json_integer(((const uint32_t *)t->data)[i]);
    case KILN_DT_INT32: return json_integer(((const int32_t *)t->data)[i]);
    case KILN_DT_INT64: return json_integer(((const int64_t *)t->data)[i]);
    case KILN_DT_UINT64: {   /* past INT64_MAX: a U64_MARK string (sv_encode_infer writes the digits) */
        uint64_t u = ((const uint64_t *)t->data)[i];
        char mark[32];
        if (u <= INT64_MAX)
            return json_integer((json_int_t)u);
        int w = snprintf(mark + 1, sizeof mark - 1, "u64:%" PRIu64, u);
        mark[0] = 0;
        return json_stringn(mark, (size_t)w + 1);
    }
    case KILN_DT_FLOAT32: d = ((const float *)t->data)[i]; break;
    case KILN_DT_FLOAT64: d = ((const double *)t->data)[i]; break;
    case KILN_DT_FLOAT16: d = sv_half_to_float(((const uint16_t *)t->data)[i]); break;
    case KILN_DT_BFLOAT16: d = sv_bf16_to_float(((const uint16_t *)t->data)[i]); break;
    default: return json_null();
    }
    return isfinite(d) ? json_real(d) : json_null();   /* JSON has no NaN/Inf */
}

char *sv_json_dumps(const json_t *j)
{
    static const char pat[] = "\"\\u0000u64:";   /* how json_dumps writes a U64_MARK string */
    char *js = json_dumps(j, JSON_COMPACT);
    if (!js || !strstr(js, pat))
        return js;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        free(js);
        return NULL;
    }
    const char *p = js, *q;
    while ((q = strstr(p, pat))) {   /* "\u0000u64:<digits>" -> <digits> */
        fwrite(p, 1, (size_t)(q - p), f);
        q += sizeof pat - 1;
        size_t nd = strspn(q, "0123456789");
        fwrite(q, 1, nd, f);
        p = q + nd + (q[nd] == '"');
    }
    fputs(p, f);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    free(js);
    if (!ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

json_t *sv_tensor_json_data(const kiln_tensor *t)
{
    json_t *data = json_array();
    size_t n = kiln_dtype_size(t->dtype) ? t->nbytes / kiln_dtype_size(t->dtype) : 0;
    for (size_t i = 0; data && i < n; i++)
        json_array_append_new(data, elem_json(t, i));
    return data;
}

bool sv_encode_infer(const sv_model *m, const sv_req *r, const sv_out_sel *sel, char **out, size_t *out_len,
                     size_t *json_len, char *err, size_t errlen)
{
    char ver[32];
    snprintf(ver, sizeof ver, "%lld", (long long)m->version);
    json_t *outs = json_array();
    json_t *resp = json_pack("{s:s, s:s, s:o}", "model_name", m->name, "model_version", ver, "outputs", outs);
    if (!resp)
        return snprintf(err, errlen, "out of memory"), false;
    if (sel->id)
        json_object_set_new(resp, "id", json_string(sel->id));
    size_t bin = 0;
    for (int o = 0; o < r->n_out; o++) {
        if (!sel->wanted[o])
            continue;
        const kiln_tensor *t = &r->out[o];
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->dims[d]));
        json_t *jo = json_pack("{s:s, s:s, s:o}", "name", m->cfg.outputs[o].name, "datatype", kserve_name(t->dtype),
                               "shape", shape);
        if (sel->binary[o]) {
            json_object_set_new(jo, "parameters", json_pack("{s:I}", "binary_data_size", (json_int_t)t->nbytes));
            bin += t->nbytes;
        } else {
            json_object_set_new(jo, "data", sv_tensor_json_data(t));
        }
        json_array_append_new(outs, jo);
    }
    char *js = sv_json_dumps(resp);
    json_decref(resp);
    if (!js)
        return snprintf(err, errlen, "out of memory"), false;
    size_t jl = strlen(js);
    char *buf = realloc(js, jl + bin + 1);
    if (!buf) {
        free(js);
        return snprintf(err, errlen, "out of memory"), false;
    }
    size_t off = jl;
    for (int o = 0; o < r->n_out; o++)
        if (sel->wanted[o] && sel->binary[o]) {
            memcpy(buf + off, r->out[o].data, r->out[o].nbytes);
            off += r->out[o].nbytes;
        }
    *out = buf;
    *out_len = off;
    *json_len = jl;
    return true;
}

static json_t *io_meta(const sv_io *x, int batch)
{
    json_t *shape = json_array();
    if (batch)
        json_array_append_new(shape, json_integer(-1));
    for (int d = 0; d < x->ndim; d++)
        json_array_append_new(shape, json_integer(x->dims[d]));
    return json_pack("{s:s, s:s, s:o}", "name", x->name, "datatype", kserve_name(x->dtype), "shape", shape);
}

json_t *sv_model_metadata(const sv_model *m)
{
    char ver[32];
    snprintf(ver, sizeof ver, "%lld", (long long)m->version);
    json_t *ins = json_array(), *outs = json_array();
    for (int i = 0; i < m->cfg.n_inputs; i++)
        json_array_append_new(ins, io_meta(&m->cfg.inputs[i], m->cfg.max_batch_size > 0));
    for (int i = 0; i < m->cfg.n_outputs; i++)
        json_array_append_new(outs, io_meta(&m->cfg.outputs[i], m->cfg.max_batch_size > 0));
    return json_pack("{s:s, s:[s], s:s, s:o, s:o}", "name", m->name, "versions", ver, "platform", "kiln", "inputs", ins,
                     "outputs", outs);
}
