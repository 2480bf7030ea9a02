/* Terminal-safe text: model-supplied names (outputs, nodes, op types...) can hold escape
 * sequences; everything kiln prints or puts in an error message goes through kiln__escape. */
#include "core.h"

/* Length of the valid UTF-8 sequence at p (2-4), or 0 when p does not start one. */
static int utf8_len(const unsigned char *p)
{
    unsigned c = p[0];
    int n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!n)
        return 0;
    /* second-byte ranges exclude overlongs, surrogates and code points above U+10FFFF */
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

size_t kiln__escape(char *out, size_t n, const char *in)
{
    const unsigned char *p = (const unsigned char *)(in ? in : "");
    size_t o = 0;
#define PUT(ch) do { if (o + 1 < n) out[o] = (char)(ch); o++; } while (0)
    while (*p) {
        unsigned c = *p;
        int u = c >= 0x80 ? utf8_len(p) : 0;
        if (c >= 0x20 && c != 0x7F && (c < 0x80 || (u && !(c == 0xC2 && p[1] < 0xA0)))) {
            int k = u ? u : 1;   /* printable ASCII, or valid UTF-8 outside the C1 range U+0080-U+009F */
            for (int i = 0; i < k; i++)
                PUT(p[i]);
            p += k;
            continue;
        }
        PUT('\\');
        if (c == '\n' || c == '\t' || c == '\r') {
            PUT(c == '\n' ? 'n' : c == '\t' ? 't' : 'r');
        } else {
            PUT('x');
            PUT("0123456789abcdef"[c >> 4]);
            PUT("0123456789abcdef"[c & 15]);
        }
        p++;
    }
#undef PUT
    if (n)
        out[o < n ? o : n - 1] = 0;
    return o;
}
