/* Device tactics: a device module's timed choices and their text (devtac.h). */
#include "devtac.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct devtac_entry {
    char kind;
    int nkey;
    int choice;
    uint8_t key[KILN_DEVTAC_MAX_KEY];
} devtac_entry;

struct kiln_devtac {
    char sig[512];
    devtac_entry *e;
    int n, cap;
};

void kiln__devtac_signature_of(const char *signature, char *out, size_t cap)
{
    if (cap == 0)
        return;
    snprintf(out, cap, "%s", signature ? signature : "");
    for (char *c = out; *c; c++)   /* one line */
        if (*c == '\n' || *c == '\t' || *c == '\r')
            *c = ' ';
}

kiln_devtac *kiln__devtac_new(const char *signature)
{
    kiln_devtac *t = calloc(1, sizeof *t);
    if (t)
        kiln__devtac_signature_of(signature, t->sig, sizeof t->sig);
    return t;
}

void kiln__devtac_free(kiln_devtac *t)
{
    if (!t)
        return;
    free(t->e);
    free(t);
}

const char *kiln__devtac_signature(const kiln_devtac *t) { return t->sig; }
int kiln__devtac_count(const kiln_devtac *t) { return t ? t->n : 0; }

static devtac_entry *find(const kiln_devtac *t, char kind, const void *key, size_t n)
{
    for (int i = 0; i < t->n; i++)
        if (t->e[i].kind == kind && (size_t)t->e[i].nkey == n && !memcmp(t->e[i].key, key, n))
            return &t->e[i];
    return NULL;
}

int kiln__devtac_get(const kiln_devtac *t, char kind, const void *key, size_t n)
{
    const devtac_entry *x = t ? find(t, kind, key, n) : NULL;
    return x ? x->choice : -1;
}

bool kiln__devtac_put(kiln_devtac *t, char kind, const void *key, size_t n, int choice)
{
    if (!t || choice < 0 || n == 0 || n > KILN_DEVTAC_MAX_KEY || kind <= ' ' || kind > '~')
        return false;
    devtac_entry *x = find(t, kind, key, n);
    if (x) {
        bool changed = x->choice != choice;
        x->choice = choice;
        return changed;
    }
    if (t->n >= KILN_DEVTAC_MAX_ENTRIES)
        return false;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        devtac_entry *ne = realloc(t->e, sizeof *ne * (size_t)cap);
        if (!ne)
            return false;
        t->e = ne;
        t->cap = cap;
    }
    devtac_entry *y = &t->e[t->n++];
    y->kind = kind;
    y->nkey = (int)n;
    y->choice = choice;
    memcpy(y->key, key, n);
    return true;
}

size_t kiln__devtac_gpu_len(const char *signature)
{
    const char *d = strstr(signature, ", driver");
    return d ? (size_t)(d - signature) : strlen(signature);
}

/* The first line of text: its length (without the newline) and where the next line starts. */
static size_t line_len(const char *s, size_t n, size_t *next)
{
    size_t k = 0;
    while (k < n && s[k] != '\n')
        k++;
    *next = k < n ? k + 1 : n;
    return k;
}

bool kiln__devtac_text_signature(const char *text, size_t n, char *sig, size_t cap)
{
    size_t next, len = line_len(text, n, &next), ml = strlen(KILN_DEVTAC_MAGIC);
    if (len && text[len - 1] == '\r')
        len--;
    if (cap == 0 || len < ml + 1 || memcmp(text, KILN_DEVTAC_MAGIC, ml) || text[ml] != '\t')
        return false;
    size_t sl = len - ml - 1;
    if (memchr(text + ml + 1, '\0', sl))
        return false;
    if (sl >= cap)
        sl = cap - 1;
    memcpy(sig, text + ml + 1, sl);
    sig[sl] = '\0';
    return true;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One choice line "<kind> <hex> <choice>" (len bytes, no newline) into t; false when malformed. */
static bool parse_line(kiln_devtac *t, const char *s, size_t len)
{
    if (len < 5 || s[1] != ' ')
        return false;
    size_t h = 2, he = h;
    while (he < len && s[he] != ' ')
        he++;
    size_t hl = he - h, nk = hl / 2;
    if (hl == 0 || hl % 2 || nk > KILN_DEVTAC_MAX_KEY || he + 1 >= len)
        return false;
    uint8_t key[KILN_DEVTAC_MAX_KEY];
    for (size_t i = 0; i < nk; i++) {
        int hi = hexval(s[h + 2 * i]), lo = hexval(s[h + 2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        key[i] = (uint8_t)(hi * 16 + lo);
    }
    long choice = 0;
    for (size_t i = he + 1; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || choice > 100000000)
            return false;
        choice = choice * 10 + (s[i] - '0');
    }
    kiln__devtac_put(t, s[0], key, nk, (int)choice);
    return true;
}

int kiln__devtac_parse(kiln_devtac *t, const char *text, size_t n)
{
    char sig[sizeof t->sig];
    if (!text || !kiln__devtac_text_signature(text, n, sig, sizeof sig) || strcmp(sig, t->sig))
        return -1;
    size_t pos, next;
    line_len(text, n, &pos);
    int got = 0;
    for (; pos < n; pos += next) {
        size_t len = line_len(text + pos, n - pos, &next);
        if (len && text[pos + len - 1] == '\r')
            len--;
        if (parse_line(t, text + pos, len))
            got++;
    }
    return got;
}

char *kiln__devtac_text(const kiln_devtac *t, size_t *n)
{
    size_t cap = strlen(KILN_DEVTAC_MAGIC) + strlen(t->sig) + 3;
    for (int i = 0; i < t->n; i++)
        cap += 2 + 2 * (size_t)t->e[i].nkey + 1 + 11 + 1;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    size_t o = (size_t)snprintf(s, cap, "%s\t%s\n", KILN_DEVTAC_MAGIC, t->sig);
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < t->n; i++) {
        const devtac_entry *x = &t->e[i];
        s[o++] = x->kind;
        s[o++] = ' ';
        for (int k = 0; k < x->nkey; k++) {
            s[o++] = hx[x->key[k] >> 4];
            s[o++] = hx[x->key[k] & 15];
        }
        o += (size_t)snprintf(s + o, cap - o, " %d\n", x->choice);
    }
    *n = o;
    return s;
}

int kiln__devtac_load(kiln_devtac *t, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            if (cap >= (size_t)64 << 20)   /* far beyond any real cache: not one */
                break;
            char *nb = realloc(buf, cap ? 2 * cap : 65536);
            if (!nb)
                break;
            buf = nb;
            cap = cap ? 2 * cap : 65536;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    bool whole = feof(f) && !ferror(f);
    fclose(f);
    int r = whole && buf ? kiln__devtac_parse(t, buf, len) : -1;
    free(buf);
    return r;
}

bool kiln__devtac_save(const kiln_devtac *t, const char *path)
{
    kiln_devtac *m = kiln__devtac_new(t->sig);
    if (!m)
        return false;
    kiln__devtac_load(m, path);   /* what other processes wrote since: theirs first, t's over them */
    for (int i = 0; i < t->n; i++)
        kiln__devtac_put(m, t->e[i].kind, t->e[i].key, (size_t)t->e[i].nkey, t->e[i].choice);
    size_t n = 0, pl = strlen(path) + 32;
    char *text = kiln__devtac_text(m, &n), *tmp = malloc(pl);
    kiln__devtac_free(m);
    bool ok = text && tmp;
    FILE *f = NULL;
    if (ok) {
        snprintf(tmp, pl, "%s.tmp.%ld", path, (long)getpid());
        ok = (f = fopen(tmp, "wb")) != NULL;
    }
    if (ok)
        ok = fwrite(text, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = false;
    if (f && (!ok || rename(tmp, path) != 0)) {
        remove(tmp);
        ok = false;
    }
    free(text);
    free(tmp);
    return ok;
}
