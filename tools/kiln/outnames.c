/* File names for a run's outputs. Output names are arbitrary strings, so they are mapped
 * injectively onto portable file names:
 *   - bytes in [A-Za-z0-9_-] and '.' (except a leading '.') are kept; every other byte, '%'
 *     included, becomes %XX (so "a/b" -> "a%2Fb", "a_b" -> "a_b", "." -> "%2E", ".." -> "%2E.");
 *   - a name whose encoding is longer than STEM_MAX bytes keeps its first bytes plus "~" and a
 *     64-bit FNV-1a hash of the whole name ('~' never comes out of the encoding);
 *   - any residual clash (a hash collision, or names differing only in letter case, which clash
 *     on case-insensitive file systems) gets a "~2", "~3"... suffix.
 * DIR/outputs.json (name -> file) records the map. */
#include "cli.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define STEM_MAX 200   /* well below NAME_MAX (255) with ".npy" and a collision suffix */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The stem for `name` into out (size > STEM_MAX + 1). */
static void encode(const char *name, char *out)
{
    char enc[3 * 4096 + 1];
    size_t o = 0, cut = 0;
    bool long_name = false;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        unsigned c = *p;
        bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || (c == '.' && p != (const unsigned char *)name);
        size_t w = keep ? 1 : 3;
        if (o + w > STEM_MAX - 17) {   /* room for "~" + 16 hex digits */
            if (!long_name)
                cut = o;   /* the last whole character that fits beside the hash */
            long_name = true;
        }
        if (o + w >= sizeof enc)
            break;
        if (keep)
            enc[o++] = (char)c;
        else
            o += (size_t)snprintf(enc + o, sizeof enc - o, "%%%02X", c);
    }
    enc[o] = 0;
    if (!*name)
        snprintf(out, STEM_MAX + 1, "%%");   /* the empty name: '%' alone never comes out of the encoding */
    else if (!long_name || o <= STEM_MAX)
        snprintf(out, STEM_MAX + 1, "%s", enc);
    else
        snprintf(out, STEM_MAX + 1, "%.*s~%016llx", (int)cut, enc, (unsigned long long)fnv1a(name));
}

char **cli_output_files(int n, const char *const *names)
{
    char **files = calloc((size_t)n + 1, sizeof *files);
    for (int i = 0; files && i < n; i++) {
        char stem[STEM_MAX + 1], file[STEM_MAX + 32];
        encode(names[i], stem);
        snprintf(file, sizeof file, "%s.npy", stem);
        for (int k = 2;; k++) {
            bool clash = false;
            for (int j = 0; j < i && !clash; j++)
                clash = strcasecmp(files[j], file) == 0;
            if (!clash)
                break;
            snprintf(file, sizeof file, "%s~%d.npy", stem, k);
        }
        if (!(files[i] = strdup(file))) {
            for (int j = 0; j < i; j++)
                free(files[j]);
            free(files);
            return NULL;
        }
    }
    return files;
}

int cli_write_output_index(const char *dir, int n, const char *const *names, char *const *files)
{
    json_t *root = json_object();
    for (int i = 0; i < n; i++)
        /* JSON keys must be UTF-8: a name that is not is recorded in its escaped form */
        if (!json_object_get(root, names[i]) && json_object_set_new(root, names[i], json_string(files[i])) != 0)
            json_object_set_new(root, cli_esc(names[i]), json_string(files[i]));
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(root);
    char path[4096], *line = text ? malloc(strlen(text) + 2) : NULL;
    snprintf(path, sizeof path, "%s/outputs.json", dir);
    if (line)
        snprintf(line, strlen(text) + 2, "%s\n", text);
    int rc = 0;
    if (!line) {
        fprintf(stderr, "kiln: writing output index: out of memory writing '%s'\n", cli_esc(path));
        rc = 1;
    } else {
        kiln_status st = kiln_write_file_atomic(path, line, strlen(line));
        rc = st != KILN_OK ? cli_die(st, "writing output index") : 0;
    }
    free(text);
    free(line);
    return rc;
}
