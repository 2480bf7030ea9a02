/* --calib-images DIR --preprocess SPEC (kiln calibrate, build, debug precision): the images are
 * read and preprocessed by the library (kiln_images_read) into one .npy file in a temporary
 * directory ($TMPDIR, else /tmp), which then serves as the calibration data directory; removed when
 * the command ends. */
#include "cli.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool cli_images_arg(cli_images *im, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc)
        return false;
    if (!strcmp(argv[*i], "--calib-images"))
        im->dir = argv[++*i];
    else if (!strcmp(argv[*i], "--preprocess"))
        im->spec = argv[++*i];
    else
        return false;
    return true;
}

int cli_calib_arg(const char *cmd, kiln_calib_options *o, cli_images *im, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (cli_images_arg(im, argc, argv, i))
        return 1;
    if (*i + 1 >= argc)
        return 0;
    if (!strcmp(a, "--calib"))
        o->data_dir = argv[++*i];
    else if (!strcmp(a, "--calib-cache"))
        o->cache_path = argv[++*i];
    else if (!strcmp(a, "--calib-method")) {
        if (kiln_calib_method_parse(argv[++*i], &o->method, &o->param) != KILN_OK) {
            fprintf(stderr, "kiln %s: --calib-method: %s\n", cmd, kiln_last_error());
            return -1;
        }
    } else
        return 0;
    return 1;
}

bool cli_images_prepare(const char *cmd, cli_images *im, kiln_calib_options *o)
{
    if (!im->dir && !im->spec)
        return true;
    if (!im->dir || !im->spec || o->data_dir) {
        fprintf(stderr, "kiln %s: %s\n", cmd, o->data_dir ? "--calib and --calib-images exclude each other"
                                                      : "--calib-images DIR and --preprocess SPEC go together");
        return false;
    }
    kiln_image_preprocess p;
    kiln_tensor t;
    if (kiln_image_preprocess_parse(im->spec, &p) != KILN_OK || kiln_images_read(im->dir, &p, &t) != KILN_OK) {
        fprintf(stderr, "kiln %s: --calib-images: %s\n", cmd, kiln_last_error());
        return false;
    }
    const char *td = getenv("TMPDIR");
    int len = snprintf(im->tmp, sizeof im->tmp, "%s/kiln_images_XXXXXX", td && td[0] ? td : "/tmp");
    bool ok = len > 0 && (size_t)len < sizeof im->tmp && mkdtemp(im->tmp) != NULL;
    if (ok) {
        snprintf(im->file, sizeof im->file, "%s/images.npy", im->tmp);
        ok = kiln_npy_write(im->file, &t) == KILN_OK;
        if (!ok)
            im->file[0] = 0;
    }
    kiln_free(t.data);
    if (!ok) {
        fprintf(stderr, "kiln %s: --calib-images: cannot write a temporary file: %s\n", cmd, kiln_last_error());
        cli_images_done(im);
        return false;
    }
    o->data_dir = im->tmp;
    return true;
}

void cli_images_done(cli_images *im)
{
    if (im->file[0])
        unlink(im->file);
    size_t n = strlen(im->tmp);
    if (n > 6 && strcmp(im->tmp + n - 6, "XXXXXX"))   /* mkdtemp made it */
        rmdir(im->tmp);
    im->file[0] = im->tmp[0] = 0;
}
