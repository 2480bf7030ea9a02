/* Images as model inputs (docs/CALIBRATION.md, "Images"): PNG through Debian's libpng (simplified
 * API: palette, grey, 16-bit and alpha converted to 8-bit RGB, alpha composited over white), JPEG
 * through libjpeg-turbo (grey converted to RGB; CMYK refused), then a bilinear resize with
 * half-pixel centres and edge clamping (OpenCV's INTER_LINEAR, no antialiasing), optionally
 * PaddleOCR's keep-ratio rule with zero padding on the right, (x / 255 - mean) / std per channel,
 * RGB or BGR, NCHW or NHWC. Arithmetic follows scripts/ocr_eval_data.py's NumPy reference step for
 * step (coordinates in double, interpolation in float), which tests/cli/test_calib_images.sh checks. */
#include "../core/core.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <jpeglib.h>
#include <jerror.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define MAX_SIDE 32768       /* pixels per side, decoded or resized */
#define MAX_IMAGES 1000000

typedef struct image { int w, h; uint8_t *rgb; } image;   /* 3 bytes per pixel */

/* The decoded size must be within the limits; nothing is allocated yet. */
static kiln_status check_size(const char *path, unsigned long w, unsigned long h)
{
    if (w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE || (size_t)w * (size_t)h * 3 > kiln__max_tensor_bytes())
        return kiln__err(KILN_ERR_LIMIT, "image %s: %lu x %lu pixels is too large (at most %d per side)", path, w, h, MAX_SIDE);
    return KILN_OK;
}

static kiln_status alloc_rgb(const char *path, unsigned long w, unsigned long h, image *im)
{
    KILN_TRY(check_size(path, w, h));
    im->w = (int)w;
    im->h = (int)h;
    im->rgb = kiln__malloc((size_t)w * (size_t)h * 3);
    return im->rgb ? KILN_OK : kiln__err(KILN_ERR_NOMEM, "out of memory");
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Deflate codes at most 258 bytes in 2 bits (a length-258 match and a distance, each a 1-bit
 * Huffman code): the image data holds at least 1/1032 of the filtered pixel bytes it expands to.
 * A header claiming a large image over a few bytes of IDAT (the whole file: a 57-byte PNG
 * asking for 32768 x 32768, 3 GiB decoded) is refused before the pixels are allocated. */
static kiln_status check_png_data(const char *path, const uint8_t *b, size_t len)
{
    if (len < 33 || memcmp(b + 12, "IHDR", 4))   /* libpng checked: IHDR comes first */
        return kiln__err(KILN_ERR_PARSE, "image %s: not a valid PNG (no IHDR)", path);
    uint64_t w = be32(b + 16), h = be32(b + 20), depth = b[24];
    static const uint64_t channels[7] = {1, 0, 3, 1, 2, 0, 4};   /* by colour type */
    uint64_t bits = w * h * depth * (b[25] < 7 ? channels[b[25]] : 4);   /* w, h < 2^31: no overflow */
    uint64_t idat = 0;
    for (size_t off = 8; len - off >= 12;) {
        uint32_t n = be32(b + off);
        if (!memcmp(b + off + 4, "IDAT", 4))
            idat += n < len - off - 12 ? n : len - off - 12;
        if (!memcmp(b + off + 4, "IEND", 4) || n > len - off - 12)
            break;
        off += 12 + (size_t)n;
    }
    uint64_t need = bits / 8 / 1032;
    if (idat < need)
        return kiln__err(KILN_ERR_PARSE,
                         "image %s: PNG data is truncated (%llu bytes of IDAT; %llu x %llu pixels need at least %llu)",
                         path, (unsigned long long)idat, (unsigned long long)w, (unsigned long long)h,
                         (unsigned long long)need);
    return KILN_OK;
}

static kiln_status decode_png(const char *path, const void *buf, size_t len, image *im)
{
    png_image p;
    memset(&p, 0, sizeof p);
    p.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&p, buf, len))
        return kiln__err(KILN_ERR_PARSE, "image %s: not a valid PNG (%s)", path, p.message);
    p.format = PNG_FORMAT_RGB;
    kiln_status st = check_png_data(path, buf, len);
    if (st == KILN_OK)
        st = alloc_rgb(path, p.width, p.height, im);
    if (st != KILN_OK) {
        png_image_free(&p);
        return st;
    }
    png_color white = {255, 255, 255};
    if (!png_image_finish_read(&p, &white, im->rgb, 0, NULL)) {
        kiln__free(im->rgb);
        im->rgb = NULL;
        return kiln__err(KILN_ERR_PARSE, "image %s: PNG data is corrupt (%s)", path, p.message);
    }
    return KILN_OK;
}

typedef struct jerr {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
    bool eof_ok;   /* every row decoded: what jpeg_finish_decompress reads is not checked (as before) */
} jerr;

static void jpeg_fail(j_common_ptr c)
{
    jerr *e = (jerr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jump, 1);
}

/* Warnings are not printed; a premature end of the data fails the image at once: the file ends
 * (JWRN_JPEG_EOF) or a scan's entropy-coded data ends before its last block (JWRN_HIT_MARKER,
 * "premature end of data segment"). Either is corrupt calibration data, and libjpeg would go on
 * filling every missing block: a few hundred bytes whose header claims 32768 x 32768 pixels filled
 * a progressive file's whole coefficient buffer (2.6 GB resident) or decoded every row of a
 * sequential one (17232 x 26947 pixels: 37 s, 1.8 GB under ASan). Other recoverable warnings
 * (extraneous bytes, common in camera files) are accepted. */
static void jpeg_quiet(j_common_ptr c, int level)
{
    jerr *e = (jerr *)c->err;
    int code = c->err->msg_code;
    if (level < 0 && (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER) && !e->eof_ok) {
        if (code == JWRN_JPEG_EOF)
            snprintf(e->msg, sizeof e->msg, "the file is truncated");
        else
            (*c->err->format_message)(c, e->msg);
        longjmp(e->jump, 1);
    }
}

static kiln_status decode_jpeg(const char *path, const void *buf, size_t len, image *out)
{
    struct jpeg_decompress_struct c;
    jerr e;
    memset(&e, 0, sizeof e);
    c.err = jpeg_std_error(&e.mgr);
    e.mgr.error_exit = jpeg_fail;
    e.mgr.emit_message = jpeg_quiet;   /* warnings (corrupt data recovered) are not printed */
    image *volatile im = out;
    kiln_status volatile st = KILN_OK;
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&c);
        kiln__free(im->rgb);
        im->rgb = NULL;
        return st != KILN_OK ? st : kiln__err(KILN_ERR_PARSE, "image %s: not a valid JPEG (%s)", path, e.msg);
    }
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, (const unsigned char *)buf, (unsigned long)len);
    jpeg_read_header(&c, TRUE);
    if (c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK) {
        snprintf(e.msg, sizeof e.msg, "CMYK JPEG is not supported");
        longjmp(e.jump, 1);
    }
    /* the size is checked before jpeg_start_decompress reserves buffers for it (a multi-scan file's
     * coefficient buffer: 25 GB for 65293 x 65496 pixels, 16 s under ASan before the first row) */
    if ((st = check_size(path, c.image_width, c.image_height)) != KILN_OK)
        longjmp(e.jump, 1);
    int w = (int)c.image_width, h = (int)c.image_height;
    c.out_color_space = JCS_RGB;
    jpeg_start_decompress(&c);   /* a progressive file is read whole here */
    if (c.output_width != (JDIMENSION)w || c.output_height != (JDIMENSION)h || c.output_components != 3) {
        snprintf(e.msg, sizeof e.msg, "unexpected output size");   /* no scaling is asked for */
        longjmp(e.jump, 1);
    }
    im->w = w;
    im->h = h;
    /* The pixels are allocated as the rows decode (doubling): a header claiming a large image over
     * missing data stops at the first missing row (jpeg_quiet) without allocating the claimed size. */
    size_t row_bytes = (size_t)w * 3, rows = 0;
    while (c.output_scanline < c.output_height) {
        if (c.output_scanline == rows) {
            size_t more = rows ? rows : 16, left = (size_t)h - rows;
            uint8_t *nb = kiln__realloc(im->rgb, row_bytes * (rows + (more < left ? more : left)));
            if (!nb) {
                st = kiln__err(KILN_ERR_NOMEM, "out of memory");
                longjmp(e.jump, 1);
            }
            im->rgb = nb;
            rows += more < left ? more : left;
        }
        JSAMPROW row = im->rgb + (size_t)c.output_scanline * row_bytes;
        jpeg_read_scanlines(&c, &row, 1);
    }
    e.eof_ok = true;
    jpeg_finish_decompress(&c);
    jpeg_destroy_decompress(&c);
    return KILN_OK;
}

static kiln_status decode(const char *path, image *im)
{
    void *buf = NULL;
    size_t len = 0;
    memset(im, 0, sizeof *im);
    KILN_TRY(kiln__read_file(path, &buf, &len));
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const uint8_t *b = buf;
    kiln_status st;
    if (len >= 8 && !memcmp(b, png_sig, 8))
        st = decode_png(path, buf, len, im);
    else if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
        st = decode_jpeg(path, buf, len, im);
    else
        st = kiln__err(KILN_ERR_PARSE, "image %s: neither PNG nor JPEG", path);
    kiln__free(buf);
    return st;
}

/* ---- preprocessing ---- */

static bool parse_float(const char *s, float *v)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(d) || strpbrk(s, "xX") || isspace((unsigned char)s[0]))
        return false;
    *v = (float)d;
    return isfinite(*v);
}

kiln_status kiln_image_preprocess_parse(const char *spec, kiln_image_preprocess *out)
{
    if (!spec || !out)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_image_preprocess_parse: NULL argument");
    kiln_image_preprocess p = {.std = {1, 1, 1}};
    char buf[512];
    if (strlen(spec) >= sizeof buf)
        return kiln__err(KILN_ERR_INVALID_ARG, "preprocess spec: too long");
    strcpy(buf, spec);
    float *list = NULL;   /* mean / std being filled */
    int nlist = 0;
    bool pad = false;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        float v;
        if (list && nlist < 3 && parse_float(t, &v)) {   /* mean=a,b,c: the values after the first */
            list[nlist++] = v;
            continue;
        }
        if (list && nlist == 1)
            list[1] = list[2] = list[0];   /* one value: every channel */
        else if (list && nlist != 3)
            return kiln__err(KILN_ERR_INVALID_ARG, "preprocess spec: mean/std take 1 or 3 values");
        list = NULL;
        int h, w, n = 0;
        if (sscanf(t, "resize=%dx%d%n", &h, &w, &n) == 2 && !t[n]) {
            if (h < 1 || w < 1 || h > MAX_SIDE || w > MAX_SIDE)
                return kiln__err(KILN_ERR_INVALID_ARG, "preprocess spec: resize=%dx%d out of range [1, %d]", h, w, MAX_SIDE);
            p.height = h;
            p.width = w;
        } else if (!strcmp(t, "keep-ratio"))
            p.keep_ratio = true;
        else if (!strcmp(t, "pad"))
            pad = true;
        else if (!strcmp(t, "bgr") || !strcmp(t, "rgb"))
            p.bgr = t[0] == 'b';
        else if (!strcmp(t, "nchw") || !strcmp(t, "nhwc"))
            p.nhwc = t[1] == 'h';
        else if ((!strncmp(t, "mean=", 5) || !strncmp(t, "std=", 4)) && parse_float(strchr(t, '=') + 1, &v)) {
            list = t[0] == 'm' ? p.mean : p.std;
            list[0] = v;
            nlist = 1;
        } else
            return kiln__err(KILN_ERR_INVALID_ARG,
                             "preprocess spec: '%s' is not one of resize=HxW, keep-ratio, pad, mean=V[,V,V], "
                             "std=V[,V,V], rgb, bgr, nchw, nhwc", t);
    }
    if (list && nlist == 1)
        list[1] = list[2] = list[0];
    else if (list && nlist != 3)
        return kiln__err(KILN_ERR_INVALID_ARG, "preprocess spec: mean/std take 1 or 3 values");
    if (!p.height)
        return kiln__err(KILN_ERR_INVALID_ARG, "preprocess spec: needs resize=HxW");
    if (p.keep_ratio != pad)
        return kiln__err(KILN_ERR_INVALID_ARG, "preprocess spec: keep-ratio and pad go together (height H, width "
                                               "kept in ratio up to W, zero padding on the right)");
    for (int c = 0; c < 3; c++)
        if (!(p.std[c] > 0))
            return kiln__err(KILN_ERR_INVALID_ARG, "preprocess spec: std must be > 0");
    *out = p;
    return KILN_OK;
}

/* Source coordinates of the bilinear resize (cv2 INTER_LINEAR: half-pixel centres, clamped). */
static void coords(int n_out, int n_in, int *i0, int *i1, float *f)
{
    double scale = (double)n_in / n_out;
    for (int i = 0; i < n_out; i++) {
        double x = (i + 0.5) * scale - 0.5;
        x = x < 0 ? 0 : x > n_in - 1 ? n_in - 1 : x;
        i0[i] = (int)floor(x);
        i1[i] = i0[i] + 1 < n_in ? i0[i] + 1 : n_in - 1;
        f[i] = (float)(x - i0[i]);
    }
}

static kiln_status preprocess(const image *im, const kiln_image_preprocess *p, float *out)
{
    int H = p->height, W = p->width, rw = W;
    if (p->keep_ratio) {
        double r = ceil((double)H * im->w / im->h);
        rw = r < W ? (int)r : W;
        rw = rw < 1 ? 1 : rw;
    }
    int *y0 = kiln__malloc(sizeof(int) * (size_t)(2 * H + 2 * rw));
    float *fy = kiln__malloc(sizeof(float) * (size_t)(H + rw));
    if (!y0 || !fy) {
        kiln__free(y0);
        kiln__free(fy);
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    }
    int *y1 = y0 + H, *x0 = y1 + H, *x1 = x0 + rw;
    float *fx = fy + H;
    coords(H, im->h, y0, y1, fy);
    coords(rw, im->w, x0, x1, fx);
    memset(out, 0, sizeof(float) * (size_t)H * (size_t)W * 3);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < rw; x++)
            for (int c = 0; c < 3; c++) {
                int src = p->bgr ? 2 - c : c;
                const uint8_t *a = im->rgb + ((size_t)y0[y] * (size_t)im->w) * 3 + (size_t)src;
                const uint8_t *b = im->rgb + ((size_t)y1[y] * (size_t)im->w) * 3 + (size_t)src;
                float top = (float)a[3 * x0[x]] * (1 - fx[x]) + (float)a[3 * x1[x]] * fx[x];
                float bot = (float)b[3 * x0[x]] * (1 - fx[x]) + (float)b[3 * x1[x]] * fx[x];
                float v = top * (1 - fy[y]) + bot * fy[y];
                v = (v / 255.f - p->mean[c]) / p->std[c];
                size_t at = p->nhwc ? ((size_t)y * W + x) * 3 + c : ((size_t)c * H + y) * W + x;
                out[at] = v;
            }
    kiln__free(y0);
    kiln__free(fy);
    return KILN_OK;
}

kiln_status kiln_image_read(const char *path, const kiln_image_preprocess *p, float *out)
{
    if (!path || !p || !out || p->height < 1 || p->width < 1)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_image_read: NULL argument or no resize");
    image im;
    KILN_TRY(decode(path, &im));
    kiln_status st = preprocess(&im, p, out);
    kiln__free(im.rgb);
    return st;
}

static bool is_image_name(const char *f)
{
    const char *dot = strrchr(f, '.');
    return f[0] != '.' && dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

kiln_status kiln_images_read(const char *dir, const kiln_image_preprocess *p, kiln_tensor *out)
{
    if (!dir || !p || !out || p->height < 1 || p->width < 1)
        return kiln__err(KILN_ERR_INVALID_ARG, "kiln_images_read: NULL argument or no resize");
    memset(out, 0, sizeof *out);
    DIR *d = opendir(dir);
    if (!d)
        return kiln__err(KILN_ERR_IO, "images: cannot open directory '%s'", dir);
    char **names = NULL;
    int n = 0;
    kiln_status st = KILN_OK;
    for (struct dirent *de; st == KILN_OK && (de = readdir(d));) {
        if (!is_image_name(de->d_name))
            continue;
        char **nn = n < MAX_IMAGES ? kiln__realloc(names, sizeof *names * (size_t)(n + 1)) : NULL;
        if (!nn) {
            st = n < MAX_IMAGES ? kiln__err(KILN_ERR_NOMEM, "out of memory") : kiln__err(KILN_ERR_LIMIT, "images: too many files");
            break;
        }
        names = nn;
        if (!(names[n] = kiln__strdup(de->d_name)))
            st = kiln__err(KILN_ERR_NOMEM, "out of memory");
        else
            n++;
    }
    closedir(d);
    if (st == KILN_OK && n == 0)
        st = kiln__err(KILN_ERR_INVALID_ARG, "images: '%s' holds no .png, .jpg or .jpeg file", dir);
    if (st == KILN_OK) {
        qsort(names, (size_t)n, sizeof *names, cmp_names);   /* file name order: the tensor's rows */
        int64_t dims[4] = {n, 3, p->height, p->width};
        if (p->nhwc)
            dims[1] = p->height, dims[2] = p->width, dims[3] = 3;
        st = kiln__tensor_alloc(out, KILN_DT_FLOAT32, 4, dims);
    }
    size_t per = (size_t)p->height * (size_t)p->width * 3;
    for (int k = 0; st == KILN_OK && k < n; k++) {
        size_t len = strlen(dir) + strlen(names[k]) + 2;
        char *path = kiln__malloc(len);
        if (!path) {
            st = kiln__err(KILN_ERR_NOMEM, "out of memory");
            break;
        }
        snprintf(path, len, "%s/%s", dir, names[k]);
        st = kiln_image_read(path, p, (float *)out->data + per * (size_t)k);
        kiln__free(path);
    }
    for (int k = 0; k < n; k++)
        kiln__free(names[k]);
    kiln__free(names);
    if (st != KILN_OK) {
        kiln__tensor_release(out);
        memset(out, 0, sizeof *out);
    }
    return st;
}
