/* Symbolic dimensions in canonical polynomial form, hash-consed (see symdim.h).
 *
 * Every node is stored as a key of int64 words in one pool and interned through an open
 * addressing hash table, so structurally equal nodes share an id:
 *   POLY  [K_POLY, nterms, {coeff, natoms, atom ids ascending...}...]  terms sorted, merged, no zero
 *   SYM   [K_SYM, length, name bytes packed 8 per word...]
 *   UNK   [K_UNK, serial]
 *   DIV/MIN/MAX [kind, poly a, poly b]   (MIN/MAX with a < b)
 * Dims handed out are always POLY ids; atoms only appear inside polynomials. */
#include "symdim.h"
#include <stdio.h>
#include <stdlib.h>

enum { K_POLY = 1, K_SYM, K_UNK, K_DIV, K_MIN, K_MAX };

#define MAXT 32   /* terms per polynomial */
#define MAXA 12   /* atoms per monomial */

typedef struct { size_t off; int32_t len; } node_ref;

struct kiln_symtab {
    int64_t *pool;
    size_t npool, cap_pool;
    node_ref *nodes;
    int32_t nn, cap_nodes;
    int32_t *hash;     /* node id + 1, 0 = empty */
    int32_t hcap;
    int64_t n_unknown;
    bool failed;
};

typedef struct { int64_t c; int na; int32_t a[MAXA]; } term;
typedef struct { int n; bool bad; term t[MAXT]; } poly;

kiln_symtab *kiln__symtab_new(void) { return kiln__calloc(1, sizeof(kiln_symtab)); }

void kiln__symtab_free(kiln_symtab *t)
{
    if (!t)
        return;
    kiln__free(t->pool);
    kiln__free(t->nodes);
    kiln__free(t->hash);
    kiln__free(t);
}

bool kiln__symtab_failed(const kiln_symtab *t) { return !t || t->failed; }

static const int64_t *key_of(const kiln_symtab *t, kiln_sdim id) { return t->pool + t->nodes[id].off; }

static uint64_t hash_key(const int64_t *k, int len)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < len; i++) {
        h ^= (uint64_t)k[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

static bool rehash(kiln_symtab *t)
{
    int32_t ncap = t->hcap ? t->hcap * 2 : 256;
    int32_t *nh = kiln__calloc((size_t)ncap, sizeof *nh);
    if (!nh)
        return false;
    for (int32_t id = 0; id < t->nn; id++) {
        uint64_t h = hash_key(key_of(t, id), t->nodes[id].len) & (uint64_t)(ncap - 1);
        while (nh[h])
            h = (h + 1) & (uint64_t)(ncap - 1);
        nh[h] = id + 1;
    }
    kiln__free(t->hash);
    t->hash = nh;
    t->hcap = ncap;
    return true;
}

static kiln_sdim fail(kiln_symtab *t)
{
    t->failed = true;
    return KILN_SDIM_NONE;
}

static kiln_sdim intern(kiln_symtab *t, const int64_t *k, int len)
{
    if ((t->nn + 1) * 2 > t->hcap && !rehash(t))
        return fail(t);
    uint64_t h = hash_key(k, len) & (uint64_t)(t->hcap - 1);
    for (; t->hash[h]; h = (h + 1) & (uint64_t)(t->hcap - 1)) {
        kiln_sdim id = t->hash[h] - 1;
        if (t->nodes[id].len == len && !memcmp(key_of(t, id), k, sizeof *k * (size_t)len))
            return id;
    }
    if (t->npool + (size_t)len > t->cap_pool) {
        size_t nc = t->cap_pool ? t->cap_pool * 2 : 1024;
        while (nc < t->npool + (size_t)len)
            nc *= 2;
        int64_t *np = kiln__realloc(t->pool, nc * sizeof *np);
        if (!np)
            return fail(t);
        t->pool = np;
        t->cap_pool = nc;
    }
    if (t->nn == t->cap_nodes) {
        int32_t nc = t->cap_nodes ? t->cap_nodes * 2 : 256;
        node_ref *nn = kiln__realloc(t->nodes, (size_t)nc * sizeof *nn);
        if (!nn)
            return fail(t);
        t->nodes = nn;
        t->cap_nodes = nc;
    }
    memcpy(t->pool + t->npool, k, sizeof *k * (size_t)len);
    t->nodes[t->nn] = (node_ref){t->npool, len};
    t->npool += (size_t)len;
    t->hash[h] = t->nn + 1;
    return t->nn++;
}

/* ---- polynomials ---- */

static void decode(const kiln_symtab *t, kiln_sdim id, poly *p)
{
    const int64_t *k = key_of(t, id);
    p->n = (int)k[1];
    p->bad = false;
    int o = 2;
    for (int i = 0; i < p->n; i++) {
        p->t[i].c = k[o];
        p->t[i].na = (int)k[o + 1];
        for (int j = 0; j < p->t[i].na; j++)
            p->t[i].a[j] = (int32_t)k[o + 2 + j];
        o += 2 + p->t[i].na;
    }
}

static int cmp_atoms(const term *x, const term *y)
{
    if (x->na != y->na)
        return x->na < y->na ? -1 : 1;
    for (int j = 0; j < x->na; j++)
        if (x->a[j] != y->a[j])
            return x->a[j] < y->a[j] ? -1 : 1;
    return 0;
}

static int cmp_term(const void *a, const void *b) { return cmp_atoms(a, b); }

/* Sorts, merges and interns p; a fresh unknown if p overflowed. */
static kiln_sdim encode(kiln_symtab *t, poly *p)
{
    if (p->bad)
        return kiln__sd_unknown(t);
    qsort(p->t, (size_t)p->n, sizeof p->t[0], cmp_term);
    int m = 0;
    for (int i = 0; i < p->n; i++) {
        if (m > 0 && !cmp_atoms(&p->t[m - 1], &p->t[i])) {
            if (__builtin_add_overflow(p->t[m - 1].c, p->t[i].c, &p->t[m - 1].c))
                return kiln__sd_unknown(t);
        } else {
            p->t[m++] = p->t[i];
        }
        if (p->t[m - 1].c == 0)
            m--;
    }
    int64_t k[2 + MAXT * (2 + MAXA)];
    int len = 2;
    k[0] = K_POLY;
    k[1] = m;
    for (int i = 0; i < m; i++) {
        k[len++] = p->t[i].c;
        k[len++] = p->t[i].na;
        for (int j = 0; j < p->t[i].na; j++)
            k[len++] = p->t[i].a[j];
    }
    return intern(t, k, len);
}

static void p_const(poly *p, int64_t c)
{
    p->bad = false;
    p->n = c != 0;
    p->t[0].c = c;
    p->t[0].na = 0;
}

static kiln_sdim atom_dim(kiln_symtab *t, kiln_sdim atom)
{
    if (atom < 0)
        return KILN_SDIM_NONE;
    poly p = {.n = 1};
    p.t[0].c = 1;
    p.t[0].na = 1;
    p.t[0].a[0] = atom;
    return encode(t, &p);
}

kiln_sdim kiln__sd_const(kiln_symtab *t, int64_t c)
{
    poly p;
    p_const(&p, c);
    return encode(t, &p);
}

kiln_sdim kiln__sd_sym(kiln_symtab *t, const char *name)
{
    size_t len = strlen(name);
    if (len > 4096)
        len = 4096;
    int64_t k[2 + 4096 / 8 + 1] = {K_SYM, (int64_t)len};
    memcpy(&k[2], name, len);
    return atom_dim(t, intern(t, k, 2 + (int)((len + 7) / 8)));
}

kiln_sdim kiln__sd_unknown(kiln_symtab *t)
{
    int64_t k[2] = {K_UNK, ++t->n_unknown};
    return atom_dim(t, intern(t, k, 2));
}

bool kiln__sd_is_const(const kiln_symtab *t, kiln_sdim a, int64_t *c)
{
    if (a < 0)
        return false;
    const int64_t *k = key_of(t, a);
    if (k[1] == 0 || (k[1] == 1 && k[3] == 0)) {
        if (c)
            *c = k[1] ? k[2] : 0;
        return true;
    }
    return false;
}

kiln_sdim kiln__sd_add(kiln_symtab *t, kiln_sdim a, kiln_sdim b)
{
    if (a < 0 || b < 0)
        return KILN_SDIM_NONE;
    poly p, q;
    decode(t, a, &p);
    decode(t, b, &q);
    if (p.n + q.n > MAXT)
        return kiln__sd_unknown(t);
    for (int i = 0; i < q.n; i++)
        p.t[p.n++] = q.t[i];
    return encode(t, &p);
}

kiln_sdim kiln__sd_mulc(kiln_symtab *t, kiln_sdim a, int64_t c)
{
    if (a < 0)
        return KILN_SDIM_NONE;
    poly p;
    decode(t, a, &p);
    for (int i = 0; i < p.n; i++)
        if (__builtin_mul_overflow(p.t[i].c, c, &p.t[i].c))
            p.bad = true;
    return encode(t, &p);
}

kiln_sdim kiln__sd_addc(kiln_symtab *t, kiln_sdim a, int64_t c) { return kiln__sd_add(t, a, kiln__sd_const(t, c)); }

kiln_sdim kiln__sd_sub(kiln_symtab *t, kiln_sdim a, kiln_sdim b) { return kiln__sd_add(t, a, kiln__sd_mulc(t, b, -1)); }

kiln_sdim kiln__sd_mul(kiln_symtab *t, kiln_sdim a, kiln_sdim b)
{
    if (a < 0 || b < 0)
        return KILN_SDIM_NONE;
    poly p, q, r = {0};
    decode(t, a, &p);
    decode(t, b, &q);
    if (p.n * q.n > MAXT)
        return kiln__sd_unknown(t);
    for (int i = 0; i < p.n; i++)
        for (int j = 0; j < q.n; j++) {
            term *x = &r.t[r.n++];
            const term *u = &p.t[i], *v = &q.t[j];
            if (__builtin_mul_overflow(u->c, v->c, &x->c) || u->na + v->na > MAXA) {
                r.bad = true;
                continue;
            }
            int iu = 0, iv = 0;
            x->na = 0;
            while (iu < u->na || iv < v->na)
                x->a[x->na++] = iv >= v->na || (iu < u->na && u->a[iu] <= v->a[iv]) ? u->a[iu++] : v->a[iv++];
        }
    return encode(t, &r);
}

static int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static kiln_sdim opaque(kiln_symtab *t, int kind, kiln_sdim a, kiln_sdim b)
{
    int64_t k[3] = {kind, a, b};
    return atom_dim(t, intern(t, k, 3));
}

/* If p is one atom of the given kind with coefficient 1, its key; else NULL. */
static const int64_t *single_atom(const kiln_symtab *t, kiln_sdim a, int kind)
{
    const int64_t *k = key_of(t, a);
    if (k[1] != 1 || k[2] != 1 || k[3] != 1)
        return NULL;
    const int64_t *ak = key_of(t, (kiln_sdim)k[4]);
    return ak[0] == kind ? ak : NULL;
}

/* Exact quotient of term u by monomial v (coefficient and atoms), or false. */
static bool term_div(const term *u, const term *v, term *out)
{
    if (v->c == 0 || u->c % v->c != 0)
        return false;
    out->c = u->c / v->c;
    out->na = 0;
    int iv = 0;
    for (int iu = 0; iu < u->na; iu++) {
        if (iv < v->na && u->a[iu] == v->a[iv])
            iv++;
        else
            out->a[out->na++] = u->a[iu];
    }
    return iv == v->na;
}

kiln_sdim kiln__sd_div(kiln_symtab *t, kiln_sdim a, kiln_sdim b)
{
    if (a < 0 || b < 0)
        return KILN_SDIM_NONE;
    int64_t cb, ca;
    if (kiln__sd_is_const(t, b, &cb)) {
        if (cb == 0)
            return kiln__sd_unknown(t);
        if (kiln__sd_is_const(t, a, &ca))
            return kiln__sd_const(t, ca == INT64_MIN && cb == -1 ? INT64_MIN : floordiv(ca, cb));
        if (cb == 1)
            return a;
        if (cb < 0)
            return cb == INT64_MIN ? kiln__sd_unknown(t) : kiln__sd_div(t, kiln__sd_mulc(t, a, -1), kiln__sd_const(t, -cb));
        /* a = cb*Q + S with every coefficient of S in [0, cb): floor(a/cb) = Q + floor(S/cb) */
        poly p, q = {0}, s = {0};
        decode(t, a, &p);
        for (int i = 0; i < p.n; i++) {
            int64_t qc = floordiv(p.t[i].c, cb), r = p.t[i].c - qc * cb;
            q.t[q.n] = p.t[i];
            q.t[q.n++].c = qc;
            s.t[s.n] = p.t[i];
            s.t[s.n++].c = r;
        }
        kiln_sdim qd = encode(t, &q), sd = encode(t, &s);
        int64_t cs;
        if (kiln__sd_is_const(t, sd, &cs))
            return kiln__sd_addc(t, qd, floordiv(cs, cb));
        /* S = floor(y/c1) + r: floor(S/cb) = floor((y + r*c1)/(c1*cb)) for c1, cb > 0 */
        const int64_t *inner = NULL;
        int64_t r = 0, c1, rc1;
        int n_var = 0;
        for (int i = 0; i < s.n; i++) {
            if (s.t[i].c != 0 && s.t[i].na == 0)
                r = s.t[i].c;
            else if (s.t[i].c != 0 && n_var++ == 0 && s.t[i].c == 1 && s.t[i].na == 1 &&
                     key_of(t, s.t[i].a[0])[0] == K_DIV)
                inner = key_of(t, s.t[i].a[0]);
        }
        if (n_var == 1 && inner && kiln__sd_is_const(t, (kiln_sdim)inner[2], &c1) && c1 > 0 &&
            !__builtin_mul_overflow(r, c1, &rc1) && !__builtin_mul_overflow(c1, cb, &c1))
            return kiln__sd_add(t, qd, kiln__sd_div(t, kiln__sd_addc(t, (kiln_sdim)inner[1], rc1), kiln__sd_const(t, c1)));
        return kiln__sd_add(t, qd, opaque(t, K_DIV, sd, b));
    }
    if (a == b)
        return kiln__sd_const(t, 1);
    poly p, q, r = {0};
    decode(t, a, &p);
    decode(t, b, &q);
    if (q.n == 1 && q.t[0].c > 0) {
        bool exact = true;
        for (int i = 0; i < p.n && exact; i++)
            exact = term_div(&p.t[i], &q.t[0], &r.t[r.n++]);
        if (exact)
            return encode(t, &r);
    }
    return opaque(t, K_DIV, a, b);
}

kiln_sdim kiln__sd_tdiv(kiln_symtab *t, kiln_sdim a, kiln_sdim b)
{
    int64_t ca, cb;
    if (kiln__sd_is_const(t, a, &ca) && kiln__sd_is_const(t, b, &cb) && cb != 0)
        return kiln__sd_const(t, ca == INT64_MIN && cb == -1 ? INT64_MIN : ca / cb);
    if (kiln__sd_nonneg(t, a) && kiln__sd_is_const(t, b, &cb) && cb > 0)
        return kiln__sd_div(t, a, b);
    if (kiln__sd_nonneg(t, a) && kiln__sd_nonneg(t, b))
        return kiln__sd_div(t, a, b);
    return a < 0 || b < 0 ? KILN_SDIM_NONE : kiln__sd_unknown(t);
}

kiln_sdim kiln__sd_cdiv(kiln_symtab *t, kiln_sdim a, kiln_sdim b)
{
    int64_t cb;
    if (kiln__sd_is_const(t, b, &cb) && cb > 0)
        return kiln__sd_div(t, kiln__sd_addc(t, a, cb - 1), b);
    return kiln__sd_mulc(t, kiln__sd_div(t, kiln__sd_mulc(t, a, -1), b), -1);
}

kiln_sdim kiln__sd_mod(kiln_symtab *t, kiln_sdim a, kiln_sdim b)
{
    return kiln__sd_sub(t, a, kiln__sd_mul(t, b, kiln__sd_div(t, a, b)));
}

static bool atom_nonneg(const kiln_symtab *t, kiln_sdim atom)
{
    const int64_t *k = key_of(t, atom);
    switch (k[0]) {
    case K_SYM: case K_UNK:
        return true;
    case K_DIV: case K_MIN:
        return kiln__sd_nonneg(t, (kiln_sdim)k[1]) && kiln__sd_nonneg(t, (kiln_sdim)k[2]);
    case K_MAX:
        return kiln__sd_nonneg(t, (kiln_sdim)k[1]) || kiln__sd_nonneg(t, (kiln_sdim)k[2]);
    default:
        return false;
    }
}

bool kiln__sd_nonneg(const kiln_symtab *t, kiln_sdim a)
{
    if (a < 0)
        return false;
    poly p;
    decode(t, a, &p);
    for (int i = 0; i < p.n; i++) {
        if (p.t[i].c < 0)
            return false;
        for (int j = 0; j < p.t[i].na; j++)
            if (!atom_nonneg(t, p.t[i].a[j]))
                return false;
    }
    return true;
}

int kiln__sd_cmp(kiln_symtab *t, kiln_sdim a, kiln_sdim b)
{
    if (a < 0 || b < 0)
        return 2;
    if (a == b)
        return 0;
    kiln_sdim d = kiln__sd_sub(t, a, b);
    int64_t c;
    if (kiln__sd_is_const(t, d, &c))
        return c == 0 ? 0 : c > 0 ? 1 : -1;
    if (kiln__sd_nonneg(t, d))
        return 1;
    if (kiln__sd_nonneg(t, kiln__sd_mulc(t, d, -1)))
        return -1;
    return 2;
}

static kiln_sdim minmax(kiln_symtab *t, kiln_sdim a, kiln_sdim b, bool is_max)
{
    if (a < 0 || b < 0)
        return KILN_SDIM_NONE;
    int c = kiln__sd_cmp(t, a, b);
    if (c == 0)
        return a;
    if (c != 2)
        return (c > 0) == is_max ? a : b;
    /* absorption: max(a, min(a, x)) = a, min(a, max(a, x)) = a */
    for (int k = 0; k < 2; k++) {
        kiln_sdim x = k ? b : a, y = k ? a : b;
        const int64_t *inner = single_atom(t, y, is_max ? K_MIN : K_MAX);
        if (inner && (inner[1] == x || inner[2] == x))
            return x;
    }
    return opaque(t, is_max ? K_MAX : K_MIN, a < b ? a : b, a < b ? b : a);
}

kiln_sdim kiln__sd_min(kiln_symtab *t, kiln_sdim a, kiln_sdim b) { return minmax(t, a, b, false); }
kiln_sdim kiln__sd_max(kiln_symtab *t, kiln_sdim a, kiln_sdim b) { return minmax(t, a, b, true); }

bool kiln__sd_has_unknown(const kiln_symtab *t, kiln_sdim a)
{
    if (a < 0)
        return true;
    const int64_t *k = key_of(t, a);
    switch (k[0]) {
    case K_UNK:
        return true;
    case K_SYM:
        return false;
    case K_DIV: case K_MIN: case K_MAX:
        return kiln__sd_has_unknown(t, (kiln_sdim)k[1]) || kiln__sd_has_unknown(t, (kiln_sdim)k[2]);
    default: {
        poly p;
        decode(t, a, &p);
        for (int i = 0; i < p.n; i++)
            for (int j = 0; j < p.t[i].na; j++)
                if (kiln__sd_has_unknown(t, p.t[i].a[j]))
                    return true;
        return false;
    }
    }
}

/* ---- printing ---- */

typedef struct { char *buf; size_t n, len; } sbuf;

static void put(sbuf *s, const char *fmt, ...) KILN_PRINTF(2, 3);
static void put(sbuf *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = s->len < s->n ? s->n - s->len : 0;
    int w = vsnprintf(room ? s->buf + s->len : NULL, room, fmt, ap);
    va_end(ap);
    if (w > 0)
        s->len += (size_t)w;
}

static void put_poly(const kiln_symtab *t, kiln_sdim a, sbuf *s, bool paren);

/* A polynomial that prints as one factor (a constant >= 0 or one atom with coefficient 1). */
static bool simple(const kiln_symtab *t, kiln_sdim a)
{
    const int64_t *k = key_of(t, a);
    int64_t c;
    return (kiln__sd_is_const(t, a, &c) && c >= 0) || (k[1] == 1 && k[2] == 1 && k[3] == 1);
}

static void put_atom(const kiln_symtab *t, kiln_sdim atom, sbuf *s)
{
    const int64_t *k = key_of(t, atom);
    switch (k[0]) {
    case K_SYM:
        put(s, "%.*s", (int)k[1], (const char *)&k[2]);
        break;
    case K_UNK:
        put(s, "?%lld", (long long)k[1]);
        break;
    case K_DIV:
        put_poly(t, (kiln_sdim)k[1], s, !simple(t, (kiln_sdim)k[1]));
        put(s, "/");
        put_poly(t, (kiln_sdim)k[2], s, !simple(t, (kiln_sdim)k[2]));
        break;
    default:
        put(s, "%s(", k[0] == K_MIN ? "min" : "max");
        put_poly(t, (kiln_sdim)k[1], s, false);
        put(s, ",");
        put_poly(t, (kiln_sdim)k[2], s, false);
        put(s, ")");
    }
}

static void put_poly(const kiln_symtab *t, kiln_sdim a, sbuf *s, bool paren)
{
    poly p;
    decode(t, a, &p);
    if (p.n == 0) {
        put(s, "0");
        return;
    }
    if (paren)
        put(s, "(");
    /* monomials first (in canonical order), the constant term last */
    for (int pass = 0, first = 1; pass < 2; pass++)
        for (int i = 0; i < p.n; i++) {
            const term *x = &p.t[i];
            if ((x->na == 0) != (pass == 1))
                continue;
            if (x->na == 0) {
                put(s, first ? "%lld" : "%+lld", (long long)x->c);
            } else {
                if (x->c == -1)
                    put(s, "-");
                else if (x->c == 1 && !first)
                    put(s, "+");
                else if (x->c != 1)
                    put(s, first ? "%lld*" : "%+lld*", (long long)x->c);
                for (int j = 0; j < x->na; j++) {
                    if (j)
                        put(s, "*");
                    put_atom(t, x->a[j], s);
                }
            }
            first = 0;
        }
    if (paren)
        put(s, ")");
}

int kiln__sd_str(const kiln_symtab *t, kiln_sdim a, char *buf, size_t n)
{
    sbuf s = {buf, n, 0};
    if (n)
        buf[0] = 0;
    if (a < 0)
        put(&s, "?");
    else
        put_poly(t, a, &s, false);
    if (n && s.len >= n)
        buf[n - 1] = 0;
    return (int)s.len;
}

/* ---- evaluation ---- */

static kiln_status eval_atom(const kiln_symtab *t, kiln_sdim atom, int n, const char *const *names,
                             const int64_t *vals, int64_t *out)
{
    const int64_t *k = key_of(t, atom);
    if (k[0] == K_SYM) {
        for (int i = 0; i < n; i++)
            if (strlen(names[i]) == (size_t)k[1] && !memcmp(names[i], &k[2], (size_t)k[1])) {
                *out = vals[i];
                return KILN_OK;
            }
        return kiln__err(KILN_ERR_SHAPE, "dim '%.*s' has no value", (int)k[1], (const char *)&k[2]);
    }
    if (k[0] == K_UNK)
        return kiln__err(KILN_ERR_SHAPE, "dim ?%lld is data-dependent", (long long)k[1]);
    int64_t x = 0, y = 0;
    KILN_TRY(kiln__sd_eval(t, (kiln_sdim)k[1], n, names, vals, &x));
    KILN_TRY(kiln__sd_eval(t, (kiln_sdim)k[2], n, names, vals, &y));
    if (k[0] == K_DIV) {
        if (y == 0 || (x == INT64_MIN && y == -1))
            return kiln__err(KILN_ERR_LIMIT, "division by zero or overflow in a dim expression");
        *out = floordiv(x, y);
    } else {
        *out = (k[0] == K_MIN) == (x < y) ? x : y;
    }
    return KILN_OK;
}

kiln_status kiln__sd_eval(const kiln_symtab *t, kiln_sdim a, int n, const char *const *names, const int64_t *vals,
                          int64_t *out)
{
    if (a < 0)
        return kiln__err(KILN_ERR_SHAPE, "invalid dim expression");
    poly p;
    decode(t, a, &p);
    int64_t sum = 0;
    for (int i = 0; i < p.n; i++) {
        int64_t v = p.t[i].c;
        for (int j = 0; j < p.t[i].na; j++) {
            int64_t x = 0;
            KILN_TRY(eval_atom(t, p.t[i].a[j], n, names, vals, &x));
            if (__builtin_mul_overflow(v, x, &v))
                return kiln__err(KILN_ERR_LIMIT, "overflow evaluating a dim expression");
        }
        if (__builtin_add_overflow(sum, v, &sum))
            return kiln__err(KILN_ERR_LIMIT, "overflow evaluating a dim expression");
    }
    *out = sum;
    return KILN_OK;
}
