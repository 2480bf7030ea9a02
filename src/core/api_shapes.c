/* Named shape sets (kiln_shapes_t) and the one parser of shape specs
 * ("NAME:1x3x224x224,NAME2:8x128") used by every tool that takes shapes. The last ':' of an entry
 * separates the name from the dims, so names may contain ':'; "NAME:" alone is a scalar (rank 0).
 * Every malformed spec gets one error naming the entry and what is wrong with it. */
#include "core.h"
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#define SHAPES_MAX KILN_MAX_SHAPES

typedef struct shape_entry {
    char *name;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
} shape_entry;

struct kiln_shapes {
    int n;
    shape_entry v[SHAPES_MAX];
};

kiln_status kiln_shapes_new(kiln_shapes_t *out)
{
    if (!out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_shapes_new: NULL argument");
    *out = kiln__calloc(1, sizeof **out);
    return *out ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
}

void kiln_shapes_free(kiln_shapes_t s)
{
    for (int i = 0; s && i < s->n; i++)
        kiln__free(s->v[i].name);
    kiln__free(s);
}

int kiln_shapes_count(kiln_shapes_t s)
{
    return s ? s->n : 0;
}

int kiln_shapes_find(kiln_shapes_t s, const char *name)
{
    for (int i = 0; s && name && i < s->n; i++)
        if (!strcmp(s->v[i].name, name))
            return i;
    return -1;
}

kiln_status kiln_shapes_get(kiln_shapes_t s, int i, const char **name, int *ndim, int64_t *dims)
{
    if (!s)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_shapes_get: NULL shape set");
    if (i < 0 || i >= s->n)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_shapes_get: index %d out of range [0, %d)", i, s->n);
    if (name)
        *name = s->v[i].name;
    if (ndim)
        *ndim = s->v[i].ndim;
    if (dims)
        memcpy(dims, s->v[i].dims, sizeof(int64_t) * (size_t)s->v[i].ndim);
    return KILN_OK;
}

kiln_status kiln_shapes_add(kiln_shapes_t s, const char *name, int ndim, const int64_t *dims)
{
    if (!s || !name || (ndim > 0 && !dims))
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_shapes_add: NULL argument");
    if (!name[0])
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_shapes_add: empty input name");
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_shapes_add: rank %d of '%s' is not in [0, %d]", ndim, name,
                         KILN_MAX_DIMS);
    for (int d = 0; d < ndim; d++)
        if (dims[d] < 0)
            return kiln__err(KILN_ERR_INVALID_ARG, "kiln_shapes_add: '%s' dim %d is negative", name, d);
    if (kiln_shapes_find(s, name) >= 0)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_shapes_add: input '%s' named twice", name);
    if (s->n >= SHAPES_MAX)
        return kiln__err(KILN_ERR_LIMIT, "kiln_shapes_add: more than %d entries", SHAPES_MAX);
    shape_entry *e = &s->v[s->n];
    if (!(e->name = kiln__strdup(name)))
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    e->ndim = ndim;
    if (ndim)
        memcpy(e->dims, dims, sizeof(int64_t) * (size_t)ndim);
    s->n++;
    return KILN_OK;
}

static kiln_status fail(const char *entry, const char *why, const char *what)
{
    return kiln__err(KILN_ERR_INVALID_ARG, "bad shape '%s': %s%s%s (want NAME:DIMS, e.g. input:1x3x224x224)", entry,
                     why, what ? " " : "", what ? what : "");
}

/* The whole text a decimal integer in [0, INT64_MAX]: no sign, blanks or trailing text. */
static bool parse_dim(const char *t, int64_t *out)
{
    if (!isdigit((unsigned char)t[0]))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(t, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

/* Parses "1x3x224x224" (already split from the name) into dims. */
static kiln_status parse_dims(const char *entry, char *text, int *ndim, int64_t *dims)
{
    *ndim = 0;
    if (!*text)
        return KILN_OK;   /* a scalar */
    size_t nx = 0;
    for (char *q = text; *q; q++)
        nx += *q == 'x';
    if (text[0] == 'x' || text[strlen(text) - 1] == 'x' || strstr(text, "xx"))
        return fail(entry, "empty dimension", NULL);
    if (nx + 1 > KILN_MAX_DIMS) {
        char m[64];
        snprintf(m, sizeof m, "rank %zu exceeds kiln's maximum of %d", nx + 1, KILN_MAX_DIMS);
        return fail(entry, m, NULL);
    }
    char *save = NULL;
    for (char *tok = strtok_r(text, "x", &save); tok; tok = strtok_r(NULL, "x", &save)) {
        if (!parse_dim(tok, &dims[*ndim]))
            return fail(entry, "dimension is not an integer in [0, 2^63-1]:", tok);
        (*ndim)++;
    }
    return KILN_OK;
}

static kiln_status parse_into(struct kiln_shapes *s, char *copy)
{
    if (!*copy)
        return fail("", "empty spec", NULL);
    for (const char *q = copy; *q; q++)
        if (q[0] == ',' && (q == copy || q[1] == ',' || q[1] == 0))
            return fail(copy, "empty entry", NULL);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char entry[512];
        snprintf(entry, sizeof entry, "%s", tok);
        char *colon = strrchr(tok, ':');
        if (!colon)
            return fail(entry, "no ':' between name and dims", NULL);
        if (colon == tok)
            return fail(entry, "empty input name", NULL);
        if (s->n >= SHAPES_MAX)
            return fail(entry, "too many entries", NULL);
        *colon = 0;
        if (kiln_shapes_find(s, tok) >= 0)
            return fail(entry, "input named twice", NULL);
        shape_entry *e = &s->v[s->n];
        KILN_TRY(parse_dims(entry, colon + 1, &e->ndim, e->dims));
        if (!(e->name = kiln__strdup(tok)))
            return fail(entry, "out of memory", NULL);
        s->n++;
    }
    return KILN_OK;
}

kiln_status kiln_shapes_parse(const char *spec, kiln_shapes_t *out)
{
    if (!out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_shapes_parse: NULL argument");
    *out = NULL;
    struct kiln_shapes *s = kiln__calloc(1, sizeof *s);
    char *copy = kiln__strdup(spec ? spec : "");
    kiln_status st = s && copy ? parse_into(s, copy) : fail(spec ? spec : "", "out of memory", NULL);
    kiln__free(copy);
    if (st != KILN_OK) {
        kiln_shapes_free(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}
