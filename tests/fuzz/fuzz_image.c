/* libFuzzer harness: calibration images (src/quant/images.c): a PNG (libpng's simplified API) or
 * JPEG (libjpeg-turbo) file read by kiln_image_read through an in-memory file, preprocessed twice:
 * a plain bilinear resize to 16x16 (NCHW, RGB) and PaddleOCR's keep-ratio resize with padding to
 * 8x32 (NHWC, BGR, mean/std). Seeds: small PNGs and JPEGs written by ImageMagick. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    static const char *const spec[2] = {"resize=16x16", "resize=8x32,keep-ratio,pad,bgr,nhwc,mean=0.5,std=0.25"};
    static float out[16 * 16 * 3];
    for (int k = 0; k < 2; k++) {
        kiln_image_preprocess p;
        if (kiln_image_preprocess_parse(spec[k], &p) != KILN_OK)
            __builtin_trap();
        kiln_status st = kiln_image_read(fuzz_memfile(data, size), &p, out);
        fuzz_note(k ? "keep-ratio" : "resize", st);
        if (st != KILN_OK)
            break;   /* the same bytes fail the same way */
    }
    kiln_clear_last_error();
    return 0;
}
