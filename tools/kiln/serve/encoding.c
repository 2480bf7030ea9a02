/* Request bodies sent with a Content-Encoding (Triton's HTTP request compression: tritonclient's
 * request_compression_algorithm="gzip" or "deflate"), inflated with zlib before the request is read.
 * The inflated body is held to the server's body limit like any other: a few kilobytes that inflate
 * to gigabytes (a zip bomb) cost at most --max-body-mb of memory and get a 413. */
#include "serve.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define ERR(status, ...) (snprintf(err, errlen, __VA_ARGS__), status)

/* The coding named by a Content-Encoding value: 'g' gzip, 'd' deflate, 'i' identity, 0 anything else (a list of
 * codings included). Case and surrounding blanks do not matter. */
static char coding_of(const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    static const struct { const char *name; char c; } K[] = {
        {"gzip", 'g'}, {"x-gzip", 'g'}, {"deflate", 'd'}, {"identity", 'i'}};
    for (size_t k = 0; k < sizeof K / sizeof K[0]; k++)
        if (n == strlen(K[k].name) && !strncasecmp(v, K[k].name, n))
            return K[k].c;
    return 0;
}

/* Inflates in[0, n) with the stream z (already initialized) into a buffer of at most limit bytes. Returns an HTTP
 * status: 200 with *out / *out_len, 400 for a corrupt or truncated stream, 413 past the limit, 500 out of memory. */
static int inflate_all(z_stream *z, bool gzip, const char *in, size_t n, size_t limit, char **out, size_t *out_len,
                       char *err, size_t errlen)
{
    const char *what = gzip ? "gzip" : "deflate";
    size_t max = limit + 1;   /* room for one byte past the limit: a body that reaches it is over the limit */
    size_t cap = n < max / 4 ? 4 * n + 4096 : max;
    cap = cap < max ? cap : max;
    char *buf = malloc(cap);
    if (!buf)
        return ERR(500, "out of memory");
    size_t used = 0, fed = 0;
    int st = 200;
    while (st == 200) {
        if (used == cap) {
            size_t nc = cap > max / 2 ? max : 2 * cap;
            char *nb = cap < max ? realloc(buf, nc) : NULL;
            if (cap == max || !nb) {
                st = cap == max ? 413 : ERR(500, "out of memory");
                break;
            }
            buf = nb;
            cap = nc;
        }
        if (z->avail_in == 0 && fed < n) {
            size_t chunk = n - fed < UINT_MAX ? n - fed : UINT_MAX;
            z->next_in = (Bytef *)(in + fed);
            z->avail_in = (uInt)chunk;
            fed += chunk;
        }
        size_t room = cap - used < UINT_MAX ? cap - used : UINT_MAX;
        z->next_out = (Bytef *)(buf + used);
        z->avail_out = (uInt)room;
        int r = inflate(z, Z_NO_FLUSH);
        used += room - z->avail_out;
        if (r == Z_STREAM_END) {
            if (z->avail_in == 0 && fed == n)
                break;
            if (!gzip || inflateReset(z) != Z_OK)   /* gzip members may follow one another */
                st = ERR(400, "data after the end of the %s stream", what);
        } else if (r == Z_MEM_ERROR) {
            st = ERR(500, "out of memory");
        } else if (r == Z_BUF_ERROR && z->avail_in == 0 && fed == n) {
            st = ERR(400, "the %s stream ends early (truncated body)", what);
        } else if (r != Z_OK && r != Z_BUF_ERROR) {
            st = ERR(400, "corrupt %s data: %s", what, z->msg ? z->msg : "invalid stream");
        }
    }
    if (st == 413 || (st == 200 && used > limit))
        st = ERR(413, "request body inflates (Content-Encoding: %s) past the limit (%zu bytes, --max-body-mb)", what,
                 limit);
    if (st != 200) {
        free(buf);
        return st;
    }
    *out = buf;
    *out_len = used;
    return 200;
}

int sv_content_decode(const char *coding, char **body, size_t *len, int64_t limit, char *err, size_t errlen)
{
    char c = coding_of(coding);
    if (!c)
        return ERR(415, "Content-Encoding '%.100s' is not supported: send gzip, deflate or identity", coding);
    if (c == 'i' || *len == 0)
        return 200;
    /* deflate is the zlib format (RFC 9110); a raw deflate stream, which some clients send, is taken too */
    const unsigned char *b = (const unsigned char *)*body;
    bool zlib_header = *len >= 2 && (b[0] & 0x0f) == 8 && ((b[0] << 8) | b[1]) % 31 == 0;
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, c == 'g' ? 15 + 16 : zlib_header ? 15 : -15) != Z_OK)
        return ERR(500, "out of memory");
    char *out;
    size_t out_len;
    int st = inflate_all(&z, c == 'g', *body, *len, (size_t)limit, &out, &out_len, err, errlen);
    inflateEnd(&z);
    if (st == 200) {
        free(*body);
        *body = out;
        *len = out_len;
    }
    return st;
}
