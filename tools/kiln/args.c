/* Strict parsing of option values, shared by every subcommand: the whole text must be a number
 * (no leading blanks or '+', no trailing text, no NaN/Inf) inside the option's range; anything
 * else is an error that names the option, never a silent default or a saturated value. */
#include "cli.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bool cli_parse_ll(const char *text, long long lo, long long hi, long long *out)
{
    if (!text || !(isdigit((unsigned char)text[0]) || (text[0] == '-' && isdigit((unsigned char)text[1]))))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool cli_int_arg(const char *opt, const char *text, long long lo, long long hi, long long *out)
{
    if (cli_parse_ll(text, lo, hi, out))
        return true;
    fprintf(stderr, "kiln: %s: '%s' is not an integer in [%lld, %lld]\n", opt, cli_esc(text), lo, hi);
    return false;
}

bool cli_int_opt(const char *opt, const char *text, int lo, int hi, int *out)
{
    long long v;
    if (!cli_int_arg(opt, text, lo, hi, &v))
        return false;
    *out = (int)v;
    return true;
}

bool cli_num_arg(const char *opt, const char *text, double lo, double hi, double *out)
{
    const char *t = text ? text : "";
    bool ok = (isdigit((unsigned char)t[0]) || ((t[0] == '-' || t[0] == '.') && t[1])) && !strpbrk(t, "xX");   /* no hex */
    char *end = (char *)t;
    errno = 0;
    double v = ok ? strtod(t, &end) : NAN;
    if (ok && !errno && !*end && isfinite(v) && v >= lo && v <= hi) {
        *out = v;
        return true;
    }
    fprintf(stderr, "kiln: %s: '%s' is not a number in [%g, %g]\n", opt, cli_esc(text), lo, hi);
    return false;
}

bool cli_input_arg(const char *cmd, char *spec, cli_input_opts *o, int cap)
{
    char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1]) {
        fprintf(stderr, "kiln %s: --input expects NAME=FILE, got '%s'\n", cmd, cli_esc(spec));
        return false;
    }
    *eq = 0;
    for (int k = 0; k < o->n_files; k++)
        if (!strcmp(o->file_names[k], spec)) {
            fprintf(stderr, "kiln %s: --input '%s' is given twice\n", cmd, cli_esc(spec));
            return false;
        }
    if (o->n_files >= cap) {
        fprintf(stderr, "kiln %s: too many --input options (at most %d)\n", cmd, cap);
        return false;
    }
    o->file_names[o->n_files] = spec;
    o->file_paths[o->n_files++] = eq + 1;
    return true;
}

bool cli_shapes_parse(const char *opt, const char *spec, kiln_shapes_t *s)
{
    kiln_status st = kiln_shapes_parse(spec, s);
    if (st == KILN_OK)
        return true;
    fprintf(stderr, "kiln: %s: %s\n", opt, kiln_last_error());   /* already escaped by the library */
    return false;
}

int cli_device_arg(const char *cmd, int argc, char **argv, int *i, cli_device_opts *d)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--tf32"))
        d->flags |= KILN_DEVICE_ALLOW_TF32;
    else if (!strcmp(a, "--strict-device"))
        d->flags |= KILN_DEVICE_STRICT;
    else if (strcmp(a, "--device") || *i + 1 >= argc)
        return 0;
    else if (!kiln_device_parse(argv[++*i], &d->device)) {
        fprintf(stderr, "kiln %s: --device takes cpu or cuda, not '%s'\n", cmd, cli_esc(argv[*i]));
        return -1;
    }
    return 1;
}

bool cli_device_flags_ok(const char *cmd, const cli_device_opts *d)
{
    /* both flags change only how the CUDA module runs layers: on the CPU they would be accepted and do nothing
     * (kiln bench then reported a TF32 precision the run never used), so they are refused as kiln build refuses
     * --strict-device */
    if (d->device == KILN_DEVICE_CUDA)
        return true;
    if (d->flags & KILN_DEVICE_ALLOW_TF32)
        fprintf(stderr, "kiln %s: --tf32 applies to --device cuda (the CPU computes float32 exactly)\n", cmd);
    else if (d->flags & KILN_DEVICE_STRICT)
        fprintf(stderr, "kiln %s: --strict-device needs --device cuda\n", cmd);
    return !(d->flags & (KILN_DEVICE_ALLOW_TF32 | KILN_DEVICE_STRICT));
}

int cli_bad_arg(const char *cmd, int argc, char **argv, int i, const char *const *value_opts)
{
    /* an option that takes a value, given last: say the value is missing (this read "unexpected argument '-o'") */
    for (int k = 0; i + 1 >= argc && value_opts[k]; k++)
        if (!strcmp(argv[i], value_opts[k])) {
            fprintf(stderr, "kiln %s: missing value for %s\n", cmd, value_opts[k]);
            return 2;
        }
    fprintf(stderr, "kiln %s: %s '%s'\n", cmd, argv[i][0] == '-' ? "unknown option" : "unexpected argument",
            cli_esc(argv[i]));
    return 2;
}

bool cli_is_help(const char *arg)
{
    return !strcmp(arg, "--help") || !strcmp(arg, "-h");
}

int cli_help(const char *usage)
{
    fputs(usage, stdout);
    return 0;
}
