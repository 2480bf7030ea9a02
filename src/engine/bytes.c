/* Engine byte buffers: little-endian encoding; every read is bounds-checked and a failed
 * read marks the reader bad (and returns zero) so callers check once per structure. */
#include "bytes.h"

static bool grow(kiln_wbuf *w, size_t n)
{
    if (w->oom)
        return false;
    if (w->len + n <= w->cap)
        return true;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->len + n)
        cap *= 2;
    uint8_t *p = kiln__realloc(w->p, cap);
    if (!p) {
        w->oom = true;
        return false;
    }
    w->p = p;
    w->cap = cap;
    return true;
}

void kiln__w_bytes(kiln_wbuf *w, const void *src, size_t n)
{
    if (!n || !grow(w, n))
        return;
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

#define PUT_LE(bits)                                                                               \
    uint8_t b[bits / 8];                                                                           \
    for (int i = 0; i < bits / 8; i++)                                                             \
        b[i] = (uint8_t)(v >> (8 * i));                                                            \
    kiln__w_bytes(w, b, sizeof b)

void kiln__w_u8(kiln_wbuf *w, uint8_t v) { kiln__w_bytes(w, &v, 1); }
void kiln__w_u32(kiln_wbuf *w, uint32_t v) { PUT_LE(32); }
void kiln__w_u64(kiln_wbuf *w, uint64_t v) { PUT_LE(64); }
void kiln__w_i32(kiln_wbuf *w, int32_t v) { kiln__w_u32(w, (uint32_t)v); }
void kiln__w_i64(kiln_wbuf *w, int64_t v) { kiln__w_u64(w, (uint64_t)v); }

void kiln__w_f32(kiln_wbuf *w, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    kiln__w_u32(w, v);
}

void kiln__w_str(kiln_wbuf *w, const char *s)
{
    if (!s) {
        kiln__w_u32(w, 0xffffffffu);
        return;
    }
    size_t n = strlen(s);
    kiln__w_u32(w, (uint32_t)n);
    kiln__w_bytes(w, s, n);
}

void kiln__w_align(kiln_wbuf *w, size_t a)
{
    static const uint8_t zeros[256];
    size_t pad = (a - w->len % a) % a;
    while (pad) {
        size_t k = pad < sizeof zeros ? pad : sizeof zeros;
        kiln__w_bytes(w, zeros, k);
        pad -= k;
    }
}

void kiln__w_free(kiln_wbuf *w)
{
    kiln__free(w->p);
    memset(w, 0, sizeof *w);
}

bool kiln__r_bytes(kiln_rbuf *r, void *dst, size_t n)
{
    if (r->bad || n > r->len - r->pos) {
        r->bad = true;
        if (dst && n)
            memset(dst, 0, n);
        return false;
    }
    if (dst && n)
        memcpy(dst, r->p + r->pos, n);
    r->pos += n;
    return true;
}

#define GET_LE(type, bits)                                                                         \
    uint8_t b[bits / 8];                                                                           \
    if (!kiln__r_bytes(r, b, sizeof b))                                                            \
        return 0;                                                                                  \
    type v = 0;                                                                                    \
    for (int i = 0; i < bits / 8; i++)                                                             \
        v |= (type)b[i] << (8 * i);                                                                \
    return v

uint8_t kiln__r_u8(kiln_rbuf *r) { GET_LE(uint8_t, 8); }
uint32_t kiln__r_u32(kiln_rbuf *r) { GET_LE(uint32_t, 32); }
uint64_t kiln__r_u64(kiln_rbuf *r) { GET_LE(uint64_t, 64); }
int32_t kiln__r_i32(kiln_rbuf *r) { return (int32_t)kiln__r_u32(r); }
int64_t kiln__r_i64(kiln_rbuf *r) { return (int64_t)kiln__r_u64(r); }

float kiln__r_f32(kiln_rbuf *r)
{
    uint32_t v = kiln__r_u32(r);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

char *kiln__r_str(kiln_rbuf *r)
{
    uint32_t n = kiln__r_u32(r);
    if (r->bad || n == 0xffffffffu)
        return NULL;
    if (n > kiln__r_left(r)) {
        r->bad = true;
        return NULL;
    }
    char *s = kiln__strndup((const char *)r->p + r->pos, n);
    if (!s)
        r->bad = r->oom = true;
    r->pos += n;
    return s;
}

uint32_t kiln__r_count(kiln_rbuf *r, size_t min_elem, uint32_t max)
{
    uint32_t n = kiln__r_u32(r);
    if (r->bad)
        return 0;
    if (n > max || (min_elem && n > kiln__r_left(r) / min_elem)) {
        r->bad = true;
        return 0;
    }
    return n;
}

kiln_status kiln__r_error(const kiln_rbuf *r, const char *what)
{
    if (r->oom)
        return kiln__err(KILN_ERR_NOMEM, "out of memory reading the engine's %s section", r->what ? r->what : "?");
    return kiln__err(KILN_ERR_PARSE, "corrupted engine: %s section: invalid %s at byte %zu", r->what ? r->what : "?",
                     what, r->pos);
}
