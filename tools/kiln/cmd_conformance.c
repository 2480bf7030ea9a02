/* kiln conformance: runs ONNX backend test directories (model.onnx + test_data_set_N/{input,output}_K.pb).
 * Each test runs in a forked child with a time limit, so a crash or hang is reported, not fatal. */
#include "cli.h"
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { R_PASS = 0, R_FAIL = 1, R_SKIP = 2 };

typedef struct {
    char **v;
    int n, cap;
} strlist;

static void sl_add(strlist *l, const char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->v = realloc(l->v, sizeof(char *) * (size_t)l->cap);
        if (!l->v)
            exit(1);
    }
    l->v[l->n++] = strdup(s);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Collects every directory under root that contains model.onnx. */
static void find_tests(const char *root, strlist *out, int depth)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", root);
    if (exists(p)) {
        sl_add(out, root);
        return;
    }
    if (depth > 6)
        return;
    DIR *d = opendir(root);
    if (!d)
        return;
    strlist subs = {0};
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", root, e->d_name);
            if (is_dir(p))
                sl_add(&subs, p);
        }
    closedir(d);
    if (subs.n)
        qsort(subs.v, (size_t)subs.n, sizeof(char *), cmp_str);
    for (int i = 0; i < subs.n; i++) {
        find_tests(subs.v[i], out, depth + 1);
        free(subs.v[i]);
    }
    free(subs.v);
}

/* Compares like numpy.testing.assert_allclose(expected, actual, rtol, atol) plus dtype/shape. */
static bool compare(const kiln_tensor *exp, const kiln_tensor *act, double rtol, double atol, double *max_abs,
                    double *max_rel, char *why, size_t whylen)
{
    *max_abs = *max_rel = 0;
    if (exp->dtype != act->dtype) {
        snprintf(why, whylen, "dtype %s, expected %s", kiln_dtype_name(act->dtype), kiln_dtype_name(exp->dtype));
        return false;
    }
    bool shape_ok = exp->ndim == act->ndim;
    for (int d = 0; shape_ok && d < exp->ndim; d++)
        shape_ok = exp->dims[d] == act->dims[d];
    if (!shape_ok) {
        char a[128], b[128];
        snprintf(why, whylen, "shape [%s], expected [%s]", cli_dims_text(act->ndim, act->dims, a, sizeof a),
                 cli_dims_text(exp->ndim, exp->dims, b, sizeof b));
        return false;
    }
    int64_t n = kiln_tensor_numel(exp);
    bool ok = true;
    for (int64_t i = 0; i < n; i++) {
        double e, a;
        switch (exp->dtype) {
        case KILN_DT_FLOAT32: e = ((float *)exp->data)[i]; a = ((float *)act->data)[i]; break;
        case KILN_DT_FLOAT64: e = ((double *)exp->data)[i]; a = ((double *)act->data)[i]; break;
        case KILN_DT_INT64: e = (double)((int64_t *)exp->data)[i]; a = (double)((int64_t *)act->data)[i]; break;
        case KILN_DT_UINT64: e = (double)((uint64_t *)exp->data)[i]; a = (double)((uint64_t *)act->data)[i]; break;
        case KILN_DT_INT32: e = ((int32_t *)exp->data)[i]; a = ((int32_t *)act->data)[i]; break;
        case KILN_DT_UINT32: e = ((uint32_t *)exp->data)[i]; a = ((uint32_t *)act->data)[i]; break;
        case KILN_DT_INT16: e = ((int16_t *)exp->data)[i]; a = ((int16_t *)act->data)[i]; break;
        case KILN_DT_UINT16: e = ((uint16_t *)exp->data)[i]; a = ((uint16_t *)act->data)[i]; break;
        case KILN_DT_INT8: e = ((int8_t *)exp->data)[i]; a = ((int8_t *)act->data)[i]; break;
        case KILN_DT_UINT8: case KILN_DT_BOOL: e = ((uint8_t *)exp->data)[i]; a = ((uint8_t *)act->data)[i]; break;
        case KILN_DT_FLOAT16: {
            /* decode via the .npy-independent half conversion */
            uint16_t he = ((uint16_t *)exp->data)[i], ha = ((uint16_t *)act->data)[i];
            float fe, fa;
            uint32_t be = (uint32_t)(he & 0x8000) << 16, ba = (uint32_t)(ha & 0x8000) << 16;
            int ee = (he >> 10) & 31, ea = (ha >> 10) & 31;
            fe = ee == 31 ? ((he & 0x3ff) ? NAN : INFINITY) : ldexpf((float)((he & 0x3ff) | (ee ? 0x400 : 0)), (ee ? ee : 1) - 25);
            fa = ea == 31 ? ((ha & 0x3ff) ? NAN : INFINITY) : ldexpf((float)((ha & 0x3ff) | (ea ? 0x400 : 0)), (ea ? ea : 1) - 25);
            e = be ? -fe : fe;
            a = ba ? -fa : fa;
            break;
        }
        case KILN_DT_BFLOAT16: {
            uint32_t be = (uint32_t)((uint16_t *)exp->data)[i] << 16, ba = (uint32_t)((uint16_t *)act->data)[i] << 16;
            float fe, fa;
            memcpy(&fe, &be, 4);
            memcpy(&fa, &ba, 4);
            e = fe;
            a = fa;
            break;
        }
        default:
            snprintf(why, whylen, "cannot compare dtype %s", kiln_dtype_name(exp->dtype));
            return false;
        }
        if (isnan(e) || isnan(a)) {
            if (!(isnan(e) && isnan(a)))
                ok = false;
            continue;
        }
        if (isinf(e) || isinf(a)) {
            if (e != a)
                ok = false;
            continue;
        }
        double d = fabs(a - e);
        if (d > *max_abs)
            *max_abs = d;
        if (e != 0 && d / fabs(e) > *max_rel)
            *max_rel = d / fabs(e);
        if (d > atol + rtol * fabs(e))
            ok = false;
    }
    if (!ok)
        snprintf(why, whylen, "values differ");
    return ok;
}

static int count_files(const char *dir, const char *prefix)
{
    int n = 0;
    char p[4096];
    for (;; n++) {
        snprintf(p, sizeof p, "%s/%s_%d.pb", dir, prefix, n);
        if (!exists(p))
            return n;
    }
}

/* What every test of a run shares. */
typedef struct conf_opts {
    int threads, timeout_s;
    bool optimize;
    cli_device_opts dev;
} conf_opts;

/* Runs one test in the current process; writes a one-line verdict to `msg`. */
static int run_test(const char *dir, const conf_opts *co, char *msg, size_t msglen)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    kiln_model_t m;
    kiln_status st = kiln_model_load(p, &m);
    if (st != KILN_OK) {
        snprintf(msg, msglen, "load: %s", kiln_last_error());
        return st == KILN_ERR_UNSUPPORTED ? R_SKIP : R_FAIL;
    }
    st = kiln_model_check_supported(m);
    if (st != KILN_OK) {
        snprintf(msg, msglen, "%s", kiln_last_error());
        kiln_model_free(m);
        return R_SKIP;
    }
    kiln_engine_t eng = NULL;
    if (co->optimize) {
        kiln_build_options bo = {.device = co->dev.device};
        st = kiln_build(m, &bo, &eng);
        kiln_free(bo.report);
        kiln_free(bo.precision_report);
        if (st != KILN_OK) {
            snprintf(msg, msglen, "build: %s", kiln_last_error());
            kiln_model_free(m);
            return R_FAIL;
        }
    }
    int result = R_PASS;
    double worst_abs = 0, worst_rel = 0;
    int nsets = 0;
    for (int s = 0;; s++) {
        char sd[4096];
        snprintf(sd, sizeof sd, "%s/test_data_set_%d", dir, s);
        if (!is_dir(sd))
            break;
        nsets++;
        int nin = count_files(sd, "input"), nexp = count_files(sd, "output");
        kiln_tensor *ins = calloc((size_t)nin + 1, sizeof *ins);
        const char **names = calloc((size_t)nin + 1, sizeof *names);
        kiln_tensor *outs = NULL;
        int nout = 0;
        for (int i = 0; i < nin && result == R_PASS; i++) {
            snprintf(p, sizeof p, "%s/input_%d.pb", sd, i);
            st = kiln_tensor_pb_read(p, &ins[i]);
            if (st != KILN_OK) {
                snprintf(msg, msglen, "input_%d: %s", i, kiln_last_error());
                result = st == KILN_ERR_UNSUPPORTED ? R_SKIP : R_FAIL;
            }
            names[i] = kiln_model_input_name(m, i);
            if (!names[i]) {
                snprintf(msg, msglen, "test has more inputs than the model");
                result = R_FAIL;
            }
        }
        if (result == R_PASS) {
            kiln_run_options opts = {.num_threads = co->threads, .device = co->dev.device, .device_flags = co->dev.flags};
            st = eng ? kiln_engine_run(eng, nin, names, ins, &opts, &nout, &outs)
                     : kiln_model_run(m, nin, names, ins, &opts, &nout, &outs);
            if (st != KILN_OK) {
                snprintf(msg, msglen, "run: %s", kiln_last_error());
                result = st == KILN_ERR_UNSUPPORTED ? R_SKIP : R_FAIL;
            } else if (nout != nexp) {
                snprintf(msg, msglen, "%d outputs, expected %d", nout, nexp);
                result = R_FAIL;
            }
        }
        for (int o = 0; o < nexp && result == R_PASS; o++) {
            kiln_tensor exp;
            snprintf(p, sizeof p, "%s/output_%d.pb", sd, o);
            st = kiln_tensor_pb_read(p, &exp);
            if (st != KILN_OK) {
                snprintf(msg, msglen, "output_%d: %s", o, kiln_last_error());
                result = st == KILN_ERR_UNSUPPORTED ? R_SKIP : R_FAIL;
                break;
            }
            double ma, mr;
            char why[256];
            if (!compare(&exp, &outs[o], 1e-3, 1e-7, &ma, &mr, why, sizeof why)) {
                snprintf(msg, msglen, "set %d output %d (%s): %s, max abs err %.3g, max rel err %.3g", s, o,
                         kiln_model_output_name(m, o), why, ma, mr);
                result = R_FAIL;
            }
            worst_abs = ma > worst_abs ? ma : worst_abs;
            worst_rel = mr > worst_rel ? mr : worst_rel;
            kiln_free(exp.data);
        }
        for (int i = 0; i < nin; i++)
            kiln_free(ins[i].data);
        free(ins);
        free(names);
        kiln_tensors_free(outs, nout);
        if (result != R_PASS)
            break;
    }
    if (result == R_PASS) {
        if (nsets == 0) {
            snprintf(msg, msglen, "no test_data_set_N directory");
            result = R_SKIP;
        } else {
            snprintf(msg, msglen, "max abs err %.3g, max rel err %.3g", worst_abs, worst_rel);
        }
    }
    kiln_engine_free(eng);
    kiln_model_free(m);
    return result;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* A test running in a forked child (so a crash or hang is a verdict, not the end of the run); its
 * one-line message comes back through a pipe (at most 1 KiB: it never fills the pipe, so the child
 * never blocks on it and can be reaped before the pipe is read). */
typedef struct conf_job {
    pid_t pid;
    int fd, test;
} conf_job;

static bool spawn_test(const char *dir, const conf_opts *co, int test, conf_job *j, char *msg, size_t msglen)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(msg, msglen, "pipe: %s", strerror(errno));
        return false;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        alarm((unsigned)co->timeout_s);
        char m[1024] = "";
        int r = run_test(dir, co, m, sizeof m);
        if (write(fds[1], m, strlen(m)) < 0)
            _exit(100);
        _exit(r);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        snprintf(msg, msglen, "fork: %s", strerror(errno));
        return false;
    }
    *j = (conf_job){.pid = pid, .fd = fds[0], .test = test};
    return true;
}

/* The verdict of a job whose child ended with `status`; fills msg and closes the pipe. */
static int finish_test(conf_job *j, int status, int timeout_s, char *msg, size_t msglen)
{
    size_t got = 0;
    ssize_t k;
    while (got + 1 < msglen && (k = read(j->fd, msg + got, msglen - 1 - got)) > 0)
        got += (size_t)k;
    msg[got] = 0;
    close(j->fd);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        snprintf(msg, msglen, sig == SIGALRM ? "HANG: timed out after %d s" : "CRASH: signal %d", sig == SIGALRM ? timeout_s : sig);
        return R_FAIL;
    }
    int code = WEXITSTATUS(status);
    if (code > R_SKIP) {
        snprintf(msg, msglen, "CRASH: exit code %d", code);
        return R_FAIL;
    }
    return code;
}

static const char usage[] =
    "usage: kiln conformance DIR... [--expect PASSLIST] [--write-passes FILE] [--filter SUBSTR] [--threads N]\n"
    "                        [--timeout S] [--quiet] [--optimize] [--jobs N] [--device cpu|cuda] [--strict-device]\n"
    "  --jobs N       run N tests at once (each in its own process; default 1)\n"
    "The tests run on --device (float32 as on the CPU, TF32 only with --tf32; tolerances are the same):\n"
    CLI_DEVICE_USAGE;

/* Everything on the command line. */
typedef struct conf_args {
    strlist tests, expected;
    const char *expect_file, *write_file, *filter;
    int jobs;
    bool quiet;
    conf_opts co;
} conf_args;

/* 0 to go on, else the exit status (-1: --help answered, exit 0). */
static int parse_conf_args(int argc, char **argv, conf_args *a)
{
    for (int i = 1; i < argc; i++) {
        int dr;
        if (!strcmp(argv[i], "--expect") && i + 1 < argc)
            a->expect_file = argv[++i];
        else if (!strcmp(argv[i], "--write-passes") && i + 1 < argc)
            a->write_file = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!cli_int_opt("--threads", argv[++i], 0, CLI_MAX_THREADS, &a->co.threads))
                return 2;
        } else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
            if (!cli_int_opt("--timeout", argv[++i], 1, 86400, &a->co.timeout_s))
                return 2;
        } else if (!strcmp(argv[i], "--jobs") && i + 1 < argc) {
            if (!cli_int_opt("--jobs", argv[++i], 1, 256, &a->jobs))
                return 2;
        } else if ((dr = cli_device_arg("conformance", argc, argv, &i, &a->co.dev)) != 0) {
            if (dr < 0)
                return 2;
        } else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
            a->filter = argv[++i];
        else if (!strcmp(argv[i], "--quiet"))
            a->quiet = true;
        else if (!strcmp(argv[i], "--optimize"))
            a->co.optimize = true;
        else if (cli_is_help(argv[i]))
            return cli_help(usage) - 1;
        else if (argv[i][0] == '-') {
            static const char *const value_opts[] = {"--expect", "--write-passes", "--threads", "--timeout", "--jobs",
                                                     "--device", "--filter", NULL};
            return cli_bad_arg("conformance", argc, argv, i, value_opts);
        } else
            find_tests(argv[i], &a->tests, 0);
    }
    if (!cli_device_flags_ok("conformance", &a->co.dev))
        return 2;
    if (a->tests.n == 0) {
        fprintf(stderr, "kiln conformance: no test directories (with model.onnx) found\n");
        return 2;
    }
    if (a->expect_file) {
        FILE *f = fopen(a->expect_file, "r");
        if (!f) {
            fprintf(stderr, "kiln conformance: cannot open '%s'\n", a->expect_file);
            return 2;
        }
        char line[1024];
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = 0;
            if (line[0] && line[0] != '#')
                sl_add(&a->expected, line);
        }
        fclose(f);
    }
    return 0;
}

/* test id: parent-dir/test-name, e.g. node/test_abs */
static void test_id(const char *dir, char *id, size_t n)
{
    const char *name = base_name(dir), *end = name - 1, *start = end;
    while (start > dir && start[-1] != '/')
        start--;
    if (end > dir)
        snprintf(id, n, "%.*s/%s", (int)(end - start), start, name);
    else
        snprintf(id, n, "%s", name);
}

/* Counts, prints and records one finished test; returns the regressions it adds. */
typedef struct conf_tally {
    int pass, fail, skip;
    kiln_atomic_file_t wf;
} conf_tally;

static int tally_test(const conf_args *a, conf_tally *t, const char *id, int r, const char *msg)
{
    int regressions = 0;
    if (r == R_PASS) {
        t->pass++;
        if (t->wf) {   /* a write error is reported by the commit */
            kiln_atomic_file_write(t->wf, id, strlen(id));
            kiln_atomic_file_write(t->wf, "\n", 1);
        }
    } else if (r == R_FAIL)
        t->fail++;
    else
        t->skip++;
    if (!a->quiet || r == R_FAIL)
        printf("%-6s %s: %s\n", r == R_PASS ? "pass" : r == R_FAIL ? "FAIL" : "skip", cli_esc(id), cli_esc(msg));
    if (r != R_PASS)
        for (int e = 0; e < a->expected.n; e++)
            if (!strcmp(a->expected.v[e], id)) {
                printf("REGRESSION %s (expected to pass)\n", cli_esc(id));
                regressions++;
            }
    fflush(stdout);
    return regressions;
}

enum { V_FILTERED = -1, V_PENDING = -2 };

/* Runs the tests, up to a->jobs at once, and reports them in order; returns the regressions. */
static int run_all(const conf_args *a, conf_tally *t)
{
    int n = a->tests.n, jobs = a->jobs > 0 ? a->jobs : 1, running = 0, regressions = 0, next = 0, shown = 0;
    int *verdict = malloc(sizeof(int) * (size_t)n);
    char **msgs = calloc((size_t)n, sizeof *msgs);
    conf_job *slots = calloc((size_t)jobs, sizeof *slots);
    if (!verdict || !msgs || !slots) {
        fprintf(stderr, "kiln conformance: out of memory\n");
        exit(1);
    }
    char msg[1024], id[512];
    while (shown < n) {
        while (running < jobs && next < n) {
            int k = next++;
            test_id(a->tests.v[k], id, sizeof id);
            verdict[k] = V_FILTERED;
            if (a->filter && !strstr(id, a->filter))
                continue;
            verdict[k] = V_PENDING;
            if (!spawn_test(a->tests.v[k], &a->co, k, &slots[running], msg, sizeof msg)) {
                verdict[k] = R_FAIL;
                msgs[k] = strdup(msg);
            } else {
                running++;
            }
        }
        if (running) {
            int status;
            pid_t pid;
            while ((pid = waitpid(-1, &status, 0)) < 0 && errno == EINTR)
                ;
            for (int s = 0; pid > 0 && s < running; s++)
                if (slots[s].pid == pid) {
                    int k = slots[s].test;
                    verdict[k] = finish_test(&slots[s], status, a->co.timeout_s, msg, sizeof msg);
                    msgs[k] = strdup(msg);
                    slots[s] = slots[--running];
                    break;
                }
            if (pid < 0) {
                fprintf(stderr, "kiln conformance: waitpid: %s\n", strerror(errno));
                exit(1);
            }
        }
        for (; shown < next && verdict[shown] != V_PENDING; shown++) {
            if (verdict[shown] == V_FILTERED)
                continue;
            test_id(a->tests.v[shown], id, sizeof id);
            regressions += tally_test(a, t, id, verdict[shown], msgs[shown] ? msgs[shown] : "out of memory");
            free(msgs[shown]);
        }
    }
    free(verdict);
    free(msgs);
    free(slots);
    return regressions;
}

int cmd_conformance(int argc, char **argv)
{
    conf_args a = {.jobs = 1, .co = {.threads = 1, .timeout_s = 120, .dev = {KILN_DEVICE_CPU, 0}}};
    int rc = parse_conf_args(argc, argv, &a);
    if (rc == 0) {
        conf_tally t = {0};
        kiln_status wst = a.write_file ? kiln_atomic_file_open(a.write_file, &t.wf) : KILN_OK;
        if (wst != KILN_OK) {   /* the pass list replaces --write-passes atomically at the end */
            rc = cli_die(wst, "--write-passes");
        } else {
            int regressions = run_all(&a, &t);
            bool write_failed = t.wf && (wst = kiln_atomic_file_commit(t.wf)) != KILN_OK;
            if (write_failed)
                cli_die(wst, "--write-passes");
            printf("%d passed, %d failed, %d skipped\n", t.pass, t.fail, t.skip);
            if (a.expect_file && regressions)
                printf("conformance: %d regression(s) against %s\n", regressions, a.expect_file);
            rc = write_failed ? 1 : a.expect_file ? regressions != 0 : t.fail != 0;
        }
    }
    for (int i = 0; i < a.tests.n; i++)
        free(a.tests.v[i]);
    for (int i = 0; i < a.expected.n; i++)
        free(a.expected.v[i]);
    free(a.tests.v);
    free(a.expected.v);
    return rc < 0 ? 0 : rc;
}
