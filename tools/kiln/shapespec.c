/* The one parser of shape specs ("NAME:1x3x224x224,NAME2:8x128"), used by build (--shapes,
 * --min/--opt/--max-shapes), bench and inspect (--shapes). The last ':' of an entry separates the
 * name from the dims, so names may contain ':'; "NAME:" alone is a scalar (rank 0). Every malformed
 * spec gets one error naming the option, the entry and what is wrong with it. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>

static bool fail(const char *opt, const char *entry, const char *why, const char *what)
{
    fprintf(stderr, "kiln: %s: bad shape '%s': %s%s%s (want NAME:DIMS, e.g. input:1x3x224x224)\n", opt,
            cli_esc(entry), why, what ? " " : "", what ? cli_esc(what) : "");
    return false;
}

/* Parses "1x3x224x224" (already split from the name) into s. */
static bool parse_dims(const char *opt, const char *entry, char *dims, cli_shape *s)
{
    s->ndim = 0;
    if (!*dims)
        return true;   /* a scalar */
    char *save = NULL, *p = dims;
    size_t nx = 0;
    for (char *q = dims; *q; q++)
        nx += *q == 'x';
    if (dims[0] == 'x' || dims[strlen(dims) - 1] == 'x' || strstr(dims, "xx"))
        return fail(opt, entry, "empty dimension", NULL);
    if (nx + 1 > KILN_MAX_DIMS) {
        char m[64];
        snprintf(m, sizeof m, "rank %zu exceeds kiln's maximum of %d", nx + 1, KILN_MAX_DIMS);
        return fail(opt, entry, m, NULL);
    }
    for (char *tok = strtok_r(p, "x", &save); tok; tok = strtok_r(NULL, "x", &save)) {
        long long v;
        if (!cli_parse_ll(tok, 0, INT64_MAX, &v))
            return fail(opt, entry, "dimension is not an integer in [0, 2^63-1]:", tok);
        s->dims[s->ndim++] = v;
    }
    return true;
}

bool cli_shapes_parse(const char *opt, const char *spec, cli_shape_set *s)
{
    memset(s, 0, sizeof *s);
    char *copy = strdup(spec ? spec : ""), *save = NULL;
    if (!copy)
        return fail(opt, spec, "out of memory", NULL);
    bool ok = true;
    if (!*copy)
        ok = fail(opt, "", "empty spec", NULL);
    for (const char *q = copy; ok && *q; q++)
        if (q[0] == ',' && (q == copy || q[1] == ',' || q[1] == 0))
            ok = fail(opt, copy, "empty entry", NULL);
    for (char *tok = ok ? strtok_r(copy, ",", &save) : NULL; tok && ok; tok = strtok_r(NULL, ",", &save)) {
        char entry[512];
        snprintf(entry, sizeof entry, "%s", tok);
        char *colon = strrchr(tok, ':');
        if (!colon)
            ok = fail(opt, entry, "no ':' between name and dims", NULL);
        else if (colon == tok)
            ok = fail(opt, entry, "empty input name", NULL);
        else if (s->n >= CLI_MAX_SHAPES)
            ok = fail(opt, entry, "too many entries", NULL);
        if (!ok)
            break;
        *colon = 0;
        if (cli_shapes_find(s, tok)) {
            ok = fail(opt, entry, "input named twice", NULL);
            break;
        }
        cli_shape *sh = &s->v[s->n];
        if (!(ok = parse_dims(opt, entry, colon + 1, sh)))
            break;
        if (!(sh->name = strdup(tok))) {
            ok = fail(opt, entry, "out of memory", NULL);
            break;
        }
        s->n++;
    }
    free(copy);
    if (!ok)
        cli_shapes_free(s);
    return ok;
}

const cli_shape *cli_shapes_find(const cli_shape_set *s, const char *name)
{
    for (int i = 0; s && i < s->n; i++)
        if (!strcmp(s->v[i].name, name))
            return &s->v[i];
    return NULL;
}

void cli_shapes_free(cli_shape_set *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->v[i].name);
    s->n = 0;
}
