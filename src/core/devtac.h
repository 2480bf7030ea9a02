/* A device module's timed choices ("device tactics", docs/CUDA.md "Tactics in the engine"): which candidate each
 * decision made by timing on the GPU took -- the cuDNN engine configuration of a fused convolution, the FP8
 * convolution's kernel, cuBLASLt or cuDNN for a 1x1 convolution -- keyed by the decision's kind (one character) and
 * the bytes of what it was made for, under a signature naming the GPU and the library versions they were timed
 * with. As text (an engine's DEVICE_TACTICS section, a timing-cache file):
 *
 *     kiln device tactics 1<TAB><signature>
 *     <kind> <key as lowercase hex> <choice>          one line per choice, in the order they were made
 *
 * Host code only (no CUDA): the CUDA module, the fake device module of the tests and libkiln (which reads an
 * engine's section) each compile it. */
#ifndef KILN_CORE_DEVTAC_H
#define KILN_CORE_DEVTAC_H
#include <stdbool.h>
#include <stddef.h>

#define KILN_DEVTAC_MAGIC "kiln device tactics 1"
#define KILN_DEVTAC_MAX_KEY 256        /* bytes of a key */
#define KILN_DEVTAC_MAX_ENTRIES 65536

typedef struct kiln_devtac kiln_devtac;

/* An empty set under signature (tabs and newlines in it become spaces); NULL when out of memory. */
kiln_devtac *kiln__devtac_new(const char *signature);
void kiln__devtac_free(kiln_devtac *t);
const char *kiln__devtac_signature(const kiln_devtac *t);
int kiln__devtac_count(const kiln_devtac *t);
/* The choice recorded for (kind, the n bytes of key), or -1. */
int kiln__devtac_get(const kiln_devtac *t, char kind, const void *key, size_t n);
/* Records a choice (>= 0) over any earlier one for the same key; false when nothing changed (the same choice was
 * recorded, the key is empty or too long, the set is full, out of memory). */
bool kiln__devtac_put(kiln_devtac *t, char kind, const void *key, size_t n, int choice);
/* The signature of a tactics text (its first line after the magic and the tab) into sig (NUL-terminated, cut to
 * cap - 1 bytes); false when text does not begin with that line. */
bool kiln__devtac_text_signature(const char *text, size_t n, char *sig, size_t cap);
/* The choices of a tactics text into t, over what t holds: how many were read, or -1 when the text is not one or its
 * signature is not t's (then nothing is read). Malformed lines are skipped. */
int kiln__devtac_parse(kiln_devtac *t, const char *text, size_t n);
/* t as a tactics text: malloc()ed and NUL-terminated (*n: its length without the NUL), or NULL (out of memory). */
char *kiln__devtac_text(const kiln_devtac *t, size_t *n);
/* The choices of the file at path into t, as kiln__devtac_parse; -1 also when the file cannot be read. */
int kiln__devtac_load(kiln_devtac *t, const char *path);
/* Writes t to path merged with what the file holds now (another process may have written it since it was read;
 * t's choices over the file's), through a temporary file renamed over it. false on failure (path unchanged). */
bool kiln__devtac_save(const kiln_devtac *t, const char *path);
/* signature as a tactics set holds it (tabs and newlines become spaces; cut to cap - 1 bytes) into out. */
void kiln__devtac_signature_of(const char *signature, char *out, size_t cap);
/* The GPU part of a signature: its length up to ", driver" (the versions that follow), else the whole of it. */
size_t kiln__devtac_gpu_len(const char *signature);

#endif
