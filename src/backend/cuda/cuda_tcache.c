/* The module's timing cache (KILN_CUDA_TIMING_CACHE=FILE): what each timed choice chose -- the cuDNN engine
 * configuration of a fused convolution graph, the FP8 convolution's kernel, cuBLASLt or cuDNN for a 1x1
 * convolution -- keyed by the choice's kind and the bytes of what it was made for, under the signature of the GPU
 * and library versions (the file's first line; a file of another signature is not read, with a warning). Read when
 * a backend instance is created, written back when it is destroyed if it learned something: merged with what the
 * file holds then, through a temporary file renamed over it. Later processes take the recorded choice instead of
 * timing every candidate at the first run (a fused convolution times up to 16 cuDNN plans, each finalized first:
 * most of the ~50 s a `kiln verify --device cuda` of PP-OCRv4 det spent before its first result on the H200). */
#include "cuda_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TC_MAGIC "kiln cuda timing cache 1"
#define TC_MAX_KEY 256
#define TC_MAX_ENTRIES 65536

typedef struct tc_entry {
    char kind;
    int nkey;
    int choice;
    uint8_t key[TC_MAX_KEY];
} tc_entry;

struct cu_tc {
    char *path;
    char sig[512];
    tc_entry *e;
    int n, cap;
    bool dirty;
};

static tc_entry *find(const struct cu_tc *t, char kind, const void *key, size_t n)
{
    for (int i = 0; i < t->n; i++)
        if (t->e[i].kind == kind && (size_t)t->e[i].nkey == n && !memcmp(t->e[i].key, key, n))
            return &t->e[i];
    return NULL;
}

static bool add(struct cu_tc *t, char kind, const void *key, size_t n, int choice)
{
    tc_entry *x = find(t, kind, key, n);
    if (x) {
        x->choice = choice;
        return true;
    }
    if (n > TC_MAX_KEY || t->n >= TC_MAX_ENTRIES)
        return false;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        tc_entry *ne = realloc(t->e, sizeof *ne * (size_t)cap);
        if (!ne)
            return false;
        t->e = ne;
        t->cap = cap;
    }
    tc_entry *y = &t->e[t->n++];
    y->kind = kind;
    y->nkey = (int)n;
    y->choice = choice;
    memcpy(y->key, key, n);
    return true;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The entries of the file at path into t (when its signature is t's); false when the file is unreadable or of
 * another signature (then nothing is read). Malformed lines are skipped. */
static bool load(struct cu_tc *t, const char *path, bool warn)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[2 * TC_MAX_KEY + 128];
    bool ok = fgets(line, sizeof line, f) != NULL;
    size_t ml = strlen(TC_MAGIC);
    if (ok) {
        line[strcspn(line, "\n")] = 0;
        ok = !strncmp(line, TC_MAGIC, ml) && line[ml] == '\t' && !strcmp(line + ml + 1, t->sig);
        if (!ok && warn)
            fprintf(stderr, "kiln cuda: the timing cache %s is not this GPU's or these libraries' (%s): not read\n",
                    path, t->sig);
    }
    while (ok && fgets(line, sizeof line, f)) {
        char kind, hex[2 * TC_MAX_KEY + 2];
        int choice;
        uint8_t key[TC_MAX_KEY];
        if (sscanf(line, "%c %513s %d", &kind, hex, &choice) != 3 || choice < 0)
            continue;
        size_t len = strlen(hex), n = len / 2;
        bool good = len % 2 == 0 && n > 0 && n <= TC_MAX_KEY;
        for (size_t i = 0; good && i < n; i++) {
            int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
            good = hi >= 0 && lo >= 0;
            if (good)
                key[i] = (uint8_t)(hi * 16 + lo);
        }
        if (good)
            add(t, kind, key, n, choice);
    }
    fclose(f);
    return ok;
}

void cu_tc_open(cu_be *b, const char *signature)
{
    const char *path = getenv("KILN_CUDA_TIMING_CACHE");
    if (!path || !path[0])
        return;
    struct cu_tc *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(t);
        return;
    }
    snprintf(t->sig, sizeof t->sig, "%s", signature);
    for (char *c = t->sig; *c; c++)   /* one line */
        if (*c == '\n' || *c == '\t')
            *c = ' ';
    load(t, path, true);
    b->tc = t;
}

int cu_tc_get(const cu_be *b, char kind, const void *key, size_t n)
{
    const tc_entry *x = b->tc ? find(b->tc, kind, key, n) : NULL;
    return x ? x->choice : -1;
}

void cu_tc_put(cu_be *b, char kind, const void *key, size_t n, int choice)
{
    if (b->tc && choice >= 0 && cu_tc_get(b, kind, key, n) != choice && add(b->tc, kind, key, n, choice))
        b->tc->dirty = true;
}

void cu_tc_close(cu_be *b)
{
    struct cu_tc *t = b->tc;
    if (!t)
        return;
    if (t->dirty) {
        /* what other instances wrote since: their entries first, this instance's over them */
        struct cu_tc merged = {0};
        snprintf(merged.sig, sizeof merged.sig, "%s", t->sig);
        load(&merged, t->path, false);
        for (int i = 0; i < t->n; i++)
            add(&merged, t->e[i].kind, t->e[i].key, (size_t)t->e[i].nkey, t->e[i].choice);
        size_t pl = strlen(t->path) + 32;
        char *tmp = malloc(pl);
        FILE *f = NULL;
        if (tmp) {
            snprintf(tmp, pl, "%s.tmp.%ld", t->path, (long)getpid());
            f = fopen(tmp, "w");
        }
        bool ok = f && fprintf(f, "%s\t%s\n", TC_MAGIC, merged.sig) > 0;
        for (int i = 0; ok && i < merged.n; i++) {
            ok = fprintf(f, "%c ", merged.e[i].kind) > 0;
            for (int k = 0; ok && k < merged.e[i].nkey; k++)
                ok = fprintf(f, "%02x", merged.e[i].key[k]) > 0;
            ok = ok && fprintf(f, " %d\n", merged.e[i].choice) > 0;
        }
        if (f && fclose(f) != 0)
            ok = false;
        if (tmp && (!ok || rename(tmp, t->path) != 0)) {
            fprintf(stderr, "kiln cuda: could not write the timing cache %s\n", t->path);
            remove(tmp);
        }
        free(tmp);
        free(merged.e);
    }
    free(t->e);
    free(t->path);
    free(t);
    b->tc = NULL;
}
