/* A small, strict reader for the subset of protobuf text format that Triton's config.pbtxt uses.
 * protobuf-c has no text-format support, and Triton's schema (model_config.proto) is not shipped
 * by Debian, so this tokenizer covers only what model configs contain:
 *
 *   message := field*            field := NAME (':' value | ':'? '{' message '}' | ':'? '[' list ']')
 *   value   := NUMBER | STRING | IDENT | '{' message '}'       list := [value (',' value)*]
 *   comments: '#' to end of line; field separators ',' or ';' between fields are accepted.
 *
 * The result is a JSON object in which every field maps to an ARRAY of its values (repeated
 * fields and list syntax both append), so readers never confuse a scalar with a repeated field.
 * Anything else (extensions "[a.b]", Any, escapes other than \" \\ \n \t \') is an error. */
#include "serve.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ps {
    const char *p;
    int line, depth;
    char *err;
    size_t errlen;
} ps;

static bool fail(ps *s, const char *what)
{
    if (!s->err[0])
        snprintf(s->err, s->errlen, "config.pbtxt line %d: %s", s->line, what);
    return false;
}

static void skip_ws(ps *s)
{
    for (;;) {
        while (isspace((unsigned char)*s->p)) {
            if (*s->p == '\n')
                s->line++;
            s->p++;
        }
        if (*s->p != '#')
            return;
        while (*s->p && *s->p != '\n')
            s->p++;
    }
}

static bool ident(ps *s, char *out, size_t n)
{
    size_t k = 0;
    if (!isalpha((unsigned char)*s->p) && *s->p != '_')
        return false;
    while (isalnum((unsigned char)*s->p) || *s->p == '_') {
        if (k + 1 >= n)
            return fail(s, "name too long");
        out[k++] = *s->p++;
    }
    out[k] = 0;
    return true;
}

static json_t *string_lit(ps *s)
{
    char q = *s->p++;
    size_t cap = 64, k = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    while (*s->p != q) {
        char c = *s->p++;
        if (!c || c == '\n') {
            free(buf);
            fail(s, "unterminated string");
            return NULL;
        }
        if (c == '\\') {
            char e = *s->p++;
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == '"' || e == '\\' || e == '\'' ? e : 0;
            if (!c) {
                free(buf);
                fail(s, "unsupported escape in string");
                return NULL;
            }
        }
        if (k + 2 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
        }
        buf[k++] = c;
    }
    s->p++;
    json_t *j = json_stringn(buf, k);
    free(buf);
    if (!j)
        fail(s, "string is not valid UTF-8");
    return j;
}

static json_t *number_lit(ps *s)
{
    const char *start = s->p;
    char *end;
    errno = 0;
    long long v = strtoll(start, &end, 10);
    if (end != start && !errno && *end != '.' && *end != 'e' && *end != 'E' && !isalnum((unsigned char)*end)) {
        s->p = end;
        return json_integer(v);
    }
    errno = 0;
    double d = strtod(start, &end);
    if (end == start || errno || isalnum((unsigned char)*end) || *end == '_') {
        fail(s, "malformed number");
        return NULL;
    }
    if (!isfinite(d)) {   /* strtod reads nan and inf; no field of a model config takes them (nor can JSON) */
        fail(s, "not a finite number");
        return NULL;
    }
    s->p = end;
    return json_real(d);
}

static bool message(ps *s, json_t *obj, char close);

static json_t *value(ps *s)
{
    skip_ws(s);
    char c = *s->p;
    if (c == '{') {
        if (++s->depth > 16) {
            fail(s, "nesting too deep");
            return NULL;
        }
        s->p++;
        json_t *o = json_object();
        if (o && !message(s, o, '}')) {
            json_decref(o);
            return NULL;
        }
        s->depth--;
        return o;
    }
    if (c == '"' || c == '\'')
        return string_lit(s);
    if (c == '-' || c == '+' || c == '.' || isdigit((unsigned char)c))
        return number_lit(s);
    char id[128];
    if (ident(s, id, sizeof id))
        return json_string(id);
    fail(s, "expected a value");
    return NULL;
}

static bool append(ps *s, json_t *obj, const char *key, json_t *v)
{
    if (!v)
        return false;
    json_t *arr = json_object_get(obj, key);
    if (!arr) {
        arr = json_array();
        if (!arr || json_object_set_new(obj, key, arr)) {
            json_decref(v);
            return fail(s, "out of memory");
        }
    }
    return json_array_append_new(arr, v) == 0 || fail(s, "out of memory");
}

static bool field(ps *s, json_t *obj)
{
    char key[128];
    if (!ident(s, key, sizeof key))
        return fail(s, "expected a field name");
    skip_ws(s);
    bool colon = *s->p == ':';
    if (colon) {
        s->p++;
        skip_ws(s);
    }
    if (*s->p == '[') {
        s->p++;
        skip_ws(s);
        if (*s->p == ']') {
            s->p++;
            return json_object_get(obj, key) || json_object_set_new(obj, key, json_array()) == 0 || fail(s, "out of memory");
        }
        for (;;) {
            if (!append(s, obj, key, value(s)))
                return false;
            skip_ws(s);
            if (*s->p == ',') {
                s->p++;
                continue;
            }
            if (*s->p == ']') {
                s->p++;
                return true;
            }
            return fail(s, "expected ',' or ']' in list");
        }
    }
    if (!colon && *s->p != '{')
        return fail(s, "expected ':' or '{' after field name");
    return append(s, obj, key, value(s));
}

static bool message(ps *s, json_t *obj, char close)
{
    for (;;) {
        skip_ws(s);
        if (*s->p == close) {
            if (close)
                s->p++;
            return true;
        }
        if (!*s->p)
            return fail(s, "unexpected end of file (missing '}')");
        if (!field(s, obj))
            return false;
        skip_ws(s);
        if (*s->p == ',' || *s->p == ';')
            s->p++;
    }
}

json_t *sv_pbtxt_parse(const char *text, char *err, size_t errlen)
{
    err[0] = 0;
    ps s = {.p = text, .line = 1, .err = err, .errlen = errlen};
    json_t *o = json_object();
    if (!o) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (!message(&s, o, 0)) {
        json_decref(o);
        if (!err[0])
            snprintf(err, errlen, "config.pbtxt: out of memory");
        return NULL;
    }
    return o;
}
