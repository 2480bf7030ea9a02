/* Little-endian byte writer (growable) and bounds-checked reader for the engine format. */
#ifndef KILN_ENGINE_BYTES_H
#define KILN_ENGINE_BYTES_H
#include "../core/core.h"

typedef struct kiln_wbuf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} kiln_wbuf;

void kiln__w_bytes(kiln_wbuf *w, const void *src, size_t n);
void kiln__w_u8(kiln_wbuf *w, uint8_t v);
void kiln__w_u32(kiln_wbuf *w, uint32_t v);
void kiln__w_i32(kiln_wbuf *w, int32_t v);
void kiln__w_u64(kiln_wbuf *w, uint64_t v);
void kiln__w_i64(kiln_wbuf *w, int64_t v);
void kiln__w_f32(kiln_wbuf *w, float v);
void kiln__w_str(kiln_wbuf *w, const char *s);   /* u32 length + bytes; NULL = 0xffffffff */
void kiln__w_align(kiln_wbuf *w, size_t a);
void kiln__w_free(kiln_wbuf *w);

typedef struct kiln_rbuf {
    const uint8_t *p;
    size_t len, pos;
    const char *what;   /* section name for messages */
    bool bad;
    bool oom;           /* bad because an allocation failed, not the bytes (the error is KILN_ERR_NOMEM) */
    bool lasting;       /* the bytes outlive what is read from them: tensors may point into them
                         * (KILN_TENSOR_BORROWED) instead of copying */
} kiln_rbuf;

bool kiln__r_bytes(kiln_rbuf *r, void *dst, size_t n);
uint8_t kiln__r_u8(kiln_rbuf *r);
uint32_t kiln__r_u32(kiln_rbuf *r);
int32_t kiln__r_i32(kiln_rbuf *r);
uint64_t kiln__r_u64(kiln_rbuf *r);
int64_t kiln__r_i64(kiln_rbuf *r);
float kiln__r_f32(kiln_rbuf *r);
/* Returns a newly allocated NUL-terminated string (NULL for a NULL string or on error: check r->bad, and r->oom for
 * an allocation that failed). */
char *kiln__r_str(kiln_rbuf *r);
/* A count that must fit in the remaining bytes given each element takes at least `min_elem` bytes. */
uint32_t kiln__r_count(kiln_rbuf *r, size_t min_elem, uint32_t max);
static inline size_t kiln__r_left(const kiln_rbuf *r) { return r->len - r->pos; }
/* The reader's error: out of memory where an allocation failed (r->oom), else the bytes are corrupted (what: the item
 * being read) */
kiln_status kiln__r_error(const kiln_rbuf *r, const char *what);
#endif
