/* kiln verify: where the samples come from. Synthetic inputs (the library's generator, one seed per
 * sample), --input files (one sample), or a --data directory of .npy files batched along axis 0
 * (one-input models: any *.npy; several inputs: NAME_KEY.npy per input, one KEY = one file group),
 * each file group cut into runs of --batch rows (default: the whole file). */
#include "verify.h"
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static void release_owned(vsrc *s)
{
    for (int i = 0; s->owned && i < s->nin; i++)
        kiln_free(s->owned[i].data);
    if (s->owned)
        memset(s->owned, 0, sizeof *s->owned * (size_t)s->nin);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* f starts with NAME_ */
static bool has_prefix(const char *f, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(f, name, n) && f[n] == '_';
}

/* f belongs to an input whose name extends input 0's ("x" and "x_mask": x_mask_1.npy is x_mask's). */
static bool longer_input(const vsrc *s, const char *f)
{
    for (int i = 1; i < s->nin; i++)
        if (strlen(s->names[i]) > strlen(s->names[0]) && has_prefix(f, s->names[i]))
            return true;
    return false;
}

/* The file group keys of DIR: file names (one input) or the KEY of NAME0_KEY.npy (several). */
static bool list_keys(vsrc *s)
{
    DIR *d = opendir(s->dir);
    if (!d) {
        fprintf(stderr, "kiln verify: --data: cannot open directory '%s'\n", cli_esc(s->dir));
        return false;
    }
    const char *n0 = s->names[0];
    size_t pre = strlen(n0) + 1;
    struct dirent *de;
    bool ok = true;
    while (ok && (de = readdir(d))) {
        const char *f = de->d_name;
        if (f[0] == '.' || !ends_with(f, ".npy"))
            continue;
        if (s->nin > 1 && (!has_prefix(f, n0) || longer_input(s, f)))
            continue;
        char **k = realloc(s->keys, sizeof *k * ((size_t)s->nkeys + 1));
        char *key = strdup(s->nin > 1 ? f + pre : f);
        if (!k || !key) {
            free(key);
            if (k)
                s->keys = k;
            ok = false;
            break;
        }
        s->keys = k;
        if (s->nin > 1)
            key[strlen(key) - 4] = 0;   /* drop .npy */
        s->keys[s->nkeys++] = key;
    }
    closedir(d);
    if (!ok) {
        fprintf(stderr, "kiln verify: out of memory\n");
        return false;
    }
    if (s->nkeys == 0) {
        fprintf(stderr, "kiln verify: --data '%s' holds no %s%s.npy file\n", cli_esc(s->dir),
                s->nin > 1 ? cli_esc(n0) : "*", s->nin > 1 ? "_KEY" : "");
        return false;
    }
    qsort(s->keys, (size_t)s->nkeys, sizeof *s->keys, cmp_str);
    return true;
}

static bool load_group(vsrc *s)
{
    for (int i = 0; i < s->nin; i++)
        kiln_free(s->group[i].data);
    memset(s->group, 0, sizeof *s->group * (size_t)s->nin);
    const char *key = s->keys[s->key];
    for (int i = 0; i < s->nin; i++) {
        size_t len = strlen(s->dir) + strlen(s->names[i]) + strlen(key) + 8;
        char *path = malloc(len);
        if (!path)
            return false;
        if (s->nin > 1)
            snprintf(path, len, "%s/%s_%s.npy", s->dir, s->names[i], key);
        else
            snprintf(path, len, "%s/%s", s->dir, key);
        kiln_status st = kiln_npy_read(path, &s->group[i]);
        if (st != KILN_OK) {
            fprintf(stderr, "kiln verify: --data: %s: %s\n", cli_esc(path), kiln_last_error());
            free(path);
            return false;
        }
        if (s->group[i].ndim < 1 || s->group[i].dims[0] != s->group[0].dims[0]) {
            fprintf(stderr, "kiln verify: --data: %s: %s\n", cli_esc(path),
                    s->group[i].ndim < 1 ? "a scalar has no batch axis (axis 0)"
                                         : "its axis 0 differs from the other inputs' of the same KEY");
            free(path);
            return false;
        }
        free(path);
    }
    s->row = 0;
    return true;
}

bool vsrc_open(vsrc *s)
{
    s->owned = calloc((size_t)s->nin + 1, sizeof *s->owned);
    s->group = calloc((size_t)s->nin + 1, sizeof *s->group);
    if (!s->owned || !s->group) {
        fprintf(stderr, "kiln verify: out of memory\n");
        return false;
    }
    if (s->dir && !list_keys(s))
        return false;
    s->key = -1;
    return true;
}

/* Synthetic (and --input) samples: files are read once per sample, the rest generated. 1, -1 on an error, -2 on a
 * usage error (--shapes contradicting an --input file, whose shape is what runs: the option was silently ignored). */
static int make_synthetic(vsrc *s, int sample, kiln_tensor *ins)
{
    release_owned(s);
    for (int k = 0; k < s->io->n_files; k++) {
        int i = 0;
        while (i < s->nin && strcmp(s->names[i], s->io->file_names[k]))
            i++;
        if (i == s->nin) {
            fprintf(stderr, "kiln verify: --input names '%s', which is not an input of the model\n",
                    cli_esc(s->io->file_names[k]));
            return -1;
        }
        kiln_status st = kiln_tensor_read(s->io->file_paths[k], &s->owned[i]);
        if (st != KILN_OK) {
            cli_die(st, "reading --input");
            return -1;
        }
        if (cli_input_conflicts(s->io, s->io->file_names[k], &s->owned[i]))
            return -2;
    }
    kiln_synth_options so = {.shapes = s->io->shapes, .seed = s->seed + (uint64_t)sample};
    kiln_status st = kiln_engine_synth_inputs(s->e, &so, s->owned);
    if (st != KILN_OK) {
        cli_die(st, "preparing inputs");
        return -1;
    }
    memcpy(ins, s->owned, sizeof *ins * (size_t)s->nin);
    return 1;
}

int vsrc_next(vsrc *s, int sample, kiln_tensor *ins)
{
    if (!s->dir)
        return make_synthetic(s, sample, ins);
    while (s->key < 0 || s->row >= s->group[0].dims[0]) {
        if (++s->key >= s->nkeys)
            return 0;
        if (!load_group(s))
            return -1;
    }
    int64_t rows = s->group[0].dims[0] - s->row;
    if (s->batch > 0 && rows > s->batch)
        rows = s->batch;
    for (int i = 0; i < s->nin; i++) {
        kiln_tensor *g = &s->group[i], *t = &ins[i];
        size_t row_bytes = g->dims[0] ? g->nbytes / (size_t)g->dims[0] : 0;
        *t = *g;
        t->dims[0] = rows;
        t->data = (char *)g->data + row_bytes * (size_t)s->row;
        t->nbytes = row_bytes * (size_t)rows;
        t->flags = KILN_TENSOR_BORROWED;
    }
    s->row += rows;
    return 1;
}

void vsrc_close(vsrc *s)
{
    release_owned(s);
    for (int i = 0; s->group && i < s->nin; i++)
        kiln_free(s->group[i].data);
    for (int k = 0; k < s->nkeys; k++)
        free(s->keys[k]);
    free(s->keys);
    free(s->owned);
    free(s->group);
}
