/* Calibration images (kiln_image_preprocess_parse, kiln_image_read, kiln_images_read): PNG files
 * written here with libpng (RGB, grey, RGBA with opaque and transparent pixels, odd sizes) and
 * JPEG with libjpeg, read back, resized and normalized, against an independent double-precision
 * bilinear model of the definition (docs/CALIBRATION.md, "Images"); keep-ratio with padding, BGR,
 * NHWC, a directory in name order; malformed specs, corrupt / truncated / foreign files and
 * a PNG claiming a huge size fail cleanly. */
#include "kiln/kiln.h"
#include "test.h"
#include <jpeglib.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char dir[] = "/tmp/kiln_imgtest_XXXXXX";

static const char *path_of(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

/* A w x h RGB image: a pseudo-random pattern (seed) or, with smooth, gradients. */
static unsigned char *make_rgb(int w, int h, unsigned long long seed, bool smooth)
{
    unsigned char *p = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                p[((size_t)y * w + x) * 3 + c] = smooth ? (unsigned char)(x * 3 + y * 4 + c * 20)
                                                        : (unsigned char)(test_rng(&seed) >> 24);
    return p;
}

static void write_png(const char *path, int w, int h, int format, const unsigned char *px)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = (png_uint_32)format;
    CHECK_MSG(png_image_write_to_file(&im, path, 0, px, 0, NULL), "%s", im.message);
}

static bool progressive_jpeg;   /* write_jpeg writes a progressive file */

static void write_jpeg(const char *path, int w, int h, int comps, const unsigned char *px)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    FILE *f = fopen(path, "wb");
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = comps;
    c.in_color_space = comps == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 100, TRUE);
    if (progressive_jpeg)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)px + (size_t)c.next_scanline * w * comps;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

/* Copies JPEG src to dst with the frame header (SOF0/1/2) claiming w x h pixels, cut cut_after
 * bytes after the first scan header, then (eoi) an EOI marker. */
static void jpeg_variant(const char *src, const char *dst, int w, int h, size_t cut_after, bool eoi)
{
    FILE *in = fopen(src, "rb");
    static unsigned char b[1 << 16];
    size_t n = fread(b, 1, sizeof b, in), end = n;
    fclose(in);
    for (size_t i = 2; i + 4 <= n && b[i] == 0xFF;) {
        size_t len = (size_t)b[i + 2] << 8 | b[i + 3];
        if (b[i + 1] >= 0xC0 && b[i + 1] <= 0xC2) {
            b[i + 5] = (unsigned char)(h >> 8), b[i + 6] = (unsigned char)h;
            b[i + 7] = (unsigned char)(w >> 8), b[i + 8] = (unsigned char)w;
        }
        if (b[i + 1] == 0xDA) {
            end = i + 2 + len + cut_after;
            break;
        }
        i += 2 + len;
    }
    FILE *f = fopen(dst, "wb");
    fwrite(b, 1, end, f);
    if (eoi)
        fwrite("\xff\xd9", 1, 2, f);
    fclose(f);
}

/* The definition in double: value of output (y, x, channel c) for an RGB image. */
static double ref_value(const unsigned char *rgb, int w, int h, const kiln_image_preprocess *p, int y, int x, int c)
{
    int H = p->height, W = p->width, rw = W;
    if (p->keep_ratio)
        rw = (int)fmin(W, ceil((double)H * w / h));
    if (x >= rw)
        return 0;
    double sy = fmin(fmax((y + 0.5) * h / H - 0.5, 0), h - 1), sx = fmin(fmax((x + 0.5) * w / rw - 0.5, 0), w - 1);
    int y0 = (int)floor(sy), x0 = (int)floor(sx), y1 = y0 + 1 < h ? y0 + 1 : h - 1, x1 = x0 + 1 < w ? x0 + 1 : w - 1;
    double fy = sy - y0, fx = sx - x0;
    int s = p->bgr ? 2 - c : c;
#define PX(yy, xx) ((double)rgb[((size_t)(yy) * w + (xx)) * 3 + s])
    double v = (PX(y0, x0) * (1 - fx) + PX(y0, x1) * fx) * (1 - fy) + (PX(y1, x0) * (1 - fx) + PX(y1, x1) * fx) * fy;
#undef PX
    return (v / 255 - p->mean[c]) / p->std[c];
}

/* Largest difference between kiln's reading of `path` and the definition on rgb. */
static double max_diff(const char *path, const unsigned char *rgb, int w, int h, const kiln_image_preprocess *p)
{
    size_t n = (size_t)p->height * p->width * 3;
    float *out = malloc(n * sizeof *out);
    kiln_status st = kiln_image_read(path, p, out);
    CHECK_MSG(st == KILN_OK, "%s: %s", path, kiln_last_error());
    double worst = st == KILN_OK ? 0 : INFINITY;
    for (int y = 0; st == KILN_OK && y < p->height; y++)
        for (int x = 0; x < p->width; x++)
            for (int c = 0; c < 3; c++) {
                size_t at = p->nhwc ? ((size_t)y * p->width + x) * 3 + c : ((size_t)c * p->height + y) * p->width + x;
                worst = fmax(worst, fabs(out[at] - ref_value(rgb, w, h, p, y, x, c)));
            }
    free(out);
    return worst;
}

static kiln_image_preprocess spec(const char *s)
{
    kiln_image_preprocess p = {0};
    CHECK_MSG(kiln_image_preprocess_parse(s, &p) == KILN_OK, "%s: %s", s, kiln_last_error());
    return p;
}

static void test_parse(void)
{
    kiln_image_preprocess p = spec("resize=48x320,keep-ratio,pad,mean=0.5,std=0.5,bgr");
    CHECK(p.height == 48 && p.width == 320 && p.keep_ratio && p.bgr && !p.nhwc);
    CHECK(p.mean[0] == 0.5f && p.mean[2] == 0.5f && p.std[1] == 0.5f);
    p = spec("resize=224x224,mean=0.485,0.456,0.406,std=0.229,0.224,0.225,nhwc");
    CHECK(p.mean[1] == 0.456f && p.std[2] == 0.225f && p.nhwc && !p.keep_ratio && !p.bgr);
    p = spec("resize=3x5");
    CHECK(p.mean[0] == 0 && p.std[0] == 1 && p.std[2] == 1);
    const char *bad[] = {"", "keep-ratio,pad", "resize=0x5", "resize=5x", "resize=4x4,keep-ratio", "resize=4x4,pad",
                         "resize=4x4,mean=1,2", "resize=4x4,std=0", "resize=4x4,std=-1", "resize=4x4,bogus",
                         "resize=4x4,mean=nan", "resize=4x4,mean=0x1", "resize=99999x4", "resize=4x4,mean="};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        kiln_image_preprocess q;
        CHECK_MSG(kiln_image_preprocess_parse(bad[k], &q) == KILN_ERR_INVALID_ARG, "'%s' accepted", bad[k]);
    }
    CHECK(kiln_image_preprocess_parse(NULL, &p) == KILN_ERR_INVALID_ARG);
}

static void test_decode(void)
{
    /* RGB PNG, odd sizes, down- and up-sampling, every option */
    int w = 37, h = 23;
    unsigned char *rgb = make_rgb(w, h, 5, false);
    write_png(path_of("a.png"), w, h, PNG_FORMAT_RGB, rgb);
    const char *specs[] = {"resize=11x17", "resize=48x61,mean=0.5,std=0.5,bgr", "resize=9x40,keep-ratio,pad,nhwc",
                           "resize=30x20,keep-ratio,pad,mean=0.1,0.2,0.3,std=0.9,0.8,0.7", "resize=23x37"};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        kiln_image_preprocess p = spec(specs[k]);
        double d = max_diff(path_of("a.png"), rgb, w, h, &p);
        CHECK_MSG(d < 2e-5, "%s: %g", specs[k], d);
    }
    /* grey PNG: replicated to three equal channels */
    unsigned char *grey = malloc((size_t)w * h), *grey3 = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++)
        grey[i] = grey3[3 * i] = grey3[3 * i + 1] = grey3[3 * i + 2] = rgb[3 * i];
    write_png(path_of("g.png"), w, h, PNG_FORMAT_GRAY, grey);
    kiln_image_preprocess p = spec("resize=13x29");
    CHECK_MSG(max_diff(path_of("g.png"), grey3, w, h, &p) < 2e-5, "grey");
    /* RGBA: opaque pixels keep their colour, transparent ones become white */
    unsigned char *rgba = malloc((size_t)w * h * 4), *over = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++) {
        bool clear = i % 3 == 0;
        for (int c = 0; c < 3; c++) {
            rgba[4 * i + c] = rgb[3 * i + c];
            over[3 * i + c] = clear ? 255 : rgb[3 * i + c];
        }
        rgba[4 * i + 3] = clear ? 0 : 255;
    }
    write_png(path_of("t.png"), w, h, PNG_FORMAT_RGBA, rgba);
    CHECK_MSG(max_diff(path_of("t.png"), over, w, h, &p) < 2e-5, "alpha");
    /* JPEG (lossy: smooth images, a few levels of error), colour and grey */
    unsigned char *smooth = make_rgb(w, h, 0, true);
    write_jpeg(path_of("s.jpg"), w, h, 3, smooth);
    double d = max_diff(path_of("s.jpg"), smooth, w, h, &p);
    CHECK_MSG(d < 12.0 / 255, "jpeg: %g", d);
    for (int i = 0; i < w * h; i++)
        grey[i] = grey3[3 * i] = grey3[3 * i + 1] = grey3[3 * i + 2] = smooth[3 * i];
    write_jpeg(path_of("s_grey.JPEG"), w, h, 1, grey);
    d = max_diff(path_of("s_grey.JPEG"), grey3, w, h, &p);
    CHECK_MSG(d < 4.0 / 255, "grey jpeg: %g", d);

    /* a directory: the images in name order, other files skipped */
    FILE *f = fopen(path_of("notes.txt"), "w");
    fputs("not an image", f);
    fclose(f);
    write_png(path_of(".hidden.png"), w, h, PNG_FORMAT_RGB, rgb);
    kiln_tensor t;
    CHECK_MSG(kiln_images_read(dir, &p, &t) == KILN_OK, "%s", kiln_last_error());
    CHECK(t.dtype == KILN_DT_FLOAT32 && t.ndim == 4 && t.dims[0] == 5 && t.dims[1] == 3 && t.dims[2] == 13 && t.dims[3] == 29);
    float *one = malloc(13 * 29 * 3 * sizeof *one);
    CHECK(kiln_image_read(path_of("g.png"), &p, one) == KILN_OK);   /* a.png, g.png, s.jpg, s_grey.JPEG, t.png */
    CHECK(t.data && !memcmp((float *)t.data + 13 * 29 * 3, one, 13 * 29 * 3 * sizeof *one));
    kiln_free(t.data);
    free(one);

    /* bad files: clean errors */
    f = fopen(path_of("x.png"), "w");
    fputs("garbage", f);
    fclose(f);
    float buf[13 * 29 * 3];
    CHECK(kiln_image_read(path_of("x.png"), &p, buf) == KILN_ERR_PARSE);
    CHECK(strstr(kiln_last_error(), "neither PNG nor JPEG"));
    CHECK(kiln_images_read(dir, &p, &t) == KILN_ERR_PARSE && !t.data);   /* one bad file fails the set */
    unlink(path_of("x.png"));
    /* truncated PNG and JPEG */
    const char *srcs[] = {"a.png", "s.jpg"};
    for (int k = 0; k < 2; k++) {
        FILE *in = fopen(path_of(srcs[k]), "rb");
        unsigned char b[4096];
        size_t n = fread(b, 1, sizeof b, in);
        fclose(in);
        f = fopen(path_of("cut.bin"), "wb");
        fwrite(b, 1, n / 2, f);
        fclose(f);
        kiln_clear_last_error();
        CHECK_MSG(kiln_image_read(path_of("cut.bin"), &p, buf) == KILN_ERR_PARSE, "truncated %s: %s", srcs[k], kiln_last_error());
    }
    unlink(path_of("cut.bin"));
    /* a PNG whose header claims 100000 x 23 pixels (valid CRC): refused before decoding */
    FILE *in = fopen(path_of("a.png"), "rb");
    unsigned char b[8192];
    size_t n = fread(b, 1, sizeof b, in);
    fclose(in);
    b[16] = 0, b[17] = 0x01, b[18] = 0x86, b[19] = 0xA0;   /* IHDR width = 100000 */
    uLong crc = crc32(0L, b + 12, 17);
    b[29] = (unsigned char)(crc >> 24), b[30] = (unsigned char)(crc >> 16), b[31] = (unsigned char)(crc >> 8), b[32] = (unsigned char)crc;
    f = fopen(path_of("huge.bin"), "wb");
    fwrite(b, 1, n, f);
    fclose(f);
    kiln_status st = kiln_image_read(path_of("huge.bin"), &p, buf);
    CHECK_MSG(st == KILN_ERR_LIMIT || st == KILN_ERR_PARSE, "huge: %d %s", (int)st, kiln_last_error());
    /* headers claiming 32768 x 32768 pixels (within the side limit, 3 GiB decoded) over a few bytes of
     * data: refused before the pixels are allocated (fuzz_image found the PNG: a 3 GiB malloc) */
    b[16] = 0, b[17] = 0, b[18] = 0x80, b[19] = 0;   /* width */
    b[20] = 0, b[21] = 0, b[22] = 0x80, b[23] = 0;   /* height */
    crc = crc32(0L, b + 12, 17);
    b[29] = (unsigned char)(crc >> 24), b[30] = (unsigned char)(crc >> 16), b[31] = (unsigned char)(crc >> 8), b[32] = (unsigned char)crc;
    f = fopen(path_of("huge.bin"), "wb");
    fwrite(b, 1, n, f);
    fclose(f);
    st = kiln_image_read(path_of("huge.bin"), &p, buf);
    CHECK_MSG(st == KILN_ERR_PARSE && strstr(kiln_last_error(), "PNG data is truncated"), "huge png: %d %s", (int)st,
              kiln_last_error());
    progressive_jpeg = true;
    write_jpeg(path_of("prog.jpg"), w, h, 3, smooth);
    progressive_jpeg = false;
    CHECK(kiln_image_read(path_of("prog.jpg"), &p, buf) == KILN_OK);
    for (int k = 0; k < 4; k++) {   /* sequential, progressive; the file cut, or its scan cut before an EOI */
        bool eoi = k >= 2;
        jpeg_variant(path_of(k % 2 ? "prog.jpg" : "s.jpg"), path_of("huge.bin"), 32768, 32768, 16, eoi);
        st = kiln_image_read(path_of("huge.bin"), &p, buf);
        CHECK_MSG(st == KILN_ERR_PARSE && strstr(kiln_last_error(), eoi ? "premature end of data segment" : "truncated"),
                  "huge jpeg %d: %d %s", k, (int)st, kiln_last_error());
        /* the same at the file's own size (fuzz_image found the EOI case at 17232 x 26947: 1.8 GB, 37 s) */
        jpeg_variant(path_of(k % 2 ? "prog.jpg" : "s.jpg"), path_of("huge.bin"), w, h, 16, eoi);
        st = kiln_image_read(path_of("huge.bin"), &p, buf);
        CHECK_MSG(st == KILN_ERR_PARSE, "cut jpeg %d: %d %s", k, (int)st, kiln_last_error());
    }
    for (int k = 0; k < 2; k++) {   /* over the side limit: refused from the header, before libjpeg's buffers */
        jpeg_variant(path_of(k ? "prog.jpg" : "s.jpg"), path_of("huge.bin"), 65293, 40000, 16, true);
        st = kiln_image_read(path_of("huge.bin"), &p, buf);
        CHECK_MSG(st == KILN_ERR_LIMIT && strstr(kiln_last_error(), "65293 x 40000"), "over the limit %d: %d %s", k,
                  (int)st, kiln_last_error());
    }
    unlink(path_of("prog.jpg"));
    unlink(path_of("huge.bin"));
    CHECK(kiln_image_read(path_of("missing.png"), &p, buf) == KILN_ERR_IO);
    CHECK(kiln_images_read("/nonexistent_dir_kiln", &p, &t) == KILN_ERR_IO);
    CHECK(kiln_image_read(NULL, &p, buf) == KILN_ERR_INVALID_ARG);
    for (const char *const *nm = (const char *const[]){"a.png", "g.png", "t.png", "s.jpg", "s_grey.JPEG", ".hidden.png", "notes.txt", NULL}; *nm; nm++)
        unlink(path_of(*nm));
    CHECK(kiln_images_read(dir, &p, &t) == KILN_ERR_INVALID_ARG);   /* no image left */
    free(rgb), free(grey), free(grey3), free(rgba), free(over), free(smooth);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_parse();
    test_decode();
    rmdir(dir);
    return TEST_SUMMARY();
}
