/* Control flow at run time: subgraphs nested inside subgraphs read values of the main graph
 * (unoptimized, optimized, through a saved engine and its memory plan); runs that would not end
 * stop cleanly: the builder's own runs under a time budget, user runs by cancellation (one
 * context, or every run) from another thread. Models: tests/data/gen_control_models.py. */
#include "kiln/kiln.h"
#include "test.h"
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const float X[2] = {1.5f, -2.0f};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void on_alarm(int s)
{
    (void)s;
    static const char msg[] = "test_control: HANG (a run did not stop)\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(3);
    _exit(2);
}

static kiln_tensor f32_2(const float *v)
{
    return (kiln_tensor){.dtype = KILN_DT_FLOAT32, .ndim = 1, .dims = {2}, .data = (void *)v, .nbytes = 8};
}

static kiln_tensor scalar(kiln_dtype dt, void *v)
{
    return (kiln_tensor){.dtype = dt, .ndim = 0, .data = v, .nbytes = kiln_dtype_size(dt)};
}

/* Runs a model (e == NULL) or an engine on (x, flags...) and checks output 0 against want. */
static void check_run(const char *what, kiln_model_t m, kiln_engine_t e, int nflags, const char **flag_names,
                      const bool *flags, const float *want)
{
    const char *names[3] = {"x", flag_names[0], nflags > 1 ? flag_names[1] : NULL};
    kiln_tensor in[3] = {f32_2(X), scalar(KILN_DT_BOOL, (void *)&flags[0]),
                         nflags > 1 ? scalar(KILN_DT_BOOL, (void *)&flags[1]) : scalar(KILN_DT_BOOL, NULL)};
    kiln_tensor *out = NULL;
    int nout = 0;
    kiln_status st = e ? kiln_engine_run(e, 1 + nflags, names, in, NULL, &nout, &out)
                       : kiln_model_run(m, 1 + nflags, names, in, NULL, &nout, &out);
    CHECK_MSG(st == KILN_OK, "%s: %s", what, kiln_last_error());
    if (st != KILN_OK)
        return;
    const float *y = out[0].data;
    CHECK_MSG(out[0].nbytes == 8 && fabsf(y[0] - want[0]) < 1e-5f && fabsf(y[1] - want[1]) < 1e-5f,
              "%s: got [%g, %g], want [%g, %g]", what, y[0], y[1], want[0], want[1]);
    kiln_tensors_free(out, nout);
}

/* The model unoptimized, built (optimized, fixed shapes: calibration run + memory plan), and
 * that engine saved and loaded again, on every combination of the flags. */
static void nested_outer_reads(const char *path, int nflags, const char **flag_names,
                               void (*expect)(const bool *flags, float *want))
{
    kiln_model_t m;
    if (kiln_model_load(path, &m) != KILN_OK) {
        CHECK_MSG(0, "%s: %s", path, kiln_last_error());
        return;
    }
    kiln_engine_t e = NULL, e2 = NULL;
    CHECK_MSG(kiln_build(m, NULL, &e) == KILN_OK, "%s: build: %s", path, kiln_last_error());
    void *buf = NULL;
    size_t len = 0;
    CHECK(e && kiln_engine_serialize(e, &buf, &len) == KILN_OK);
    CHECK_MSG(buf && kiln_engine_load_buffer(buf, len, &e2) == KILN_OK, "%s: load: %s", path, kiln_last_error());
    for (int combo = 0; combo < (1 << nflags); combo++) {
        bool flags[2] = {combo & 1, (combo >> 1) & 1};
        float want[2];
        expect(flags, want);
        char what[256];
        snprintf(what, sizeof what, "%s flags %d%d unoptimized", path, flags[0], flags[1]);
        check_run(what, m, NULL, nflags, flag_names, flags, want);
        snprintf(what, sizeof what, "%s flags %d%d engine", path, flags[0], flags[1]);
        if (e)
            check_run(what, m, e, nflags, flag_names, flags, want);
        snprintf(what, sizeof what, "%s flags %d%d loaded engine", path, flags[0], flags[1]);
        if (e2)
            check_run(what, m, e2, nflags, flag_names, flags, want);
    }
    kiln_free(buf);
    kiln_engine_free(e);
    kiln_engine_free(e2);
    kiln_model_free(m);
}

/* If(c1){ If(c2){ a + x } else { a - x } } else { -a }, a = x * x */
static void expect_nested_if(const bool *c, float *want)
{
    for (int i = 0; i < 2; i++) {
        float a = X[i] * X[i];
        want[i] = c[0] ? (c[1] ? a + X[i] : a - X[i]) : -a;
    }
}

/* v = x; 3 times: v = If(c){ v + a } else { v - a }, a = x * x */
static void expect_loop_if(const bool *c, float *want)
{
    for (int i = 0; i < 2; i++) {
        float a = X[i] * X[i], v = X[i];
        for (int k = 0; k < 3; k++)
            v = c[0] ? v + a : v - a;
        want[i] = v;
    }
}

/* ---- budget and cancellation ---- */

typedef struct {
    kiln_context_t c;        /* run this context, or */
    kiln_model_t m;          /* kiln_model_run this model */
    int64_t trips;
    kiln_status st;
    double end;
    float y;
} run_arg;

static void *run_loop(void *p)
{
    run_arg *a = p;
    float x = 0;
    kiln_tensor in[2] = {{.dtype = KILN_DT_FLOAT32, .ndim = 1, .dims = {1}, .data = &x, .nbytes = 4},
                         scalar(KILN_DT_INT64, &a->trips)};
    const char *names[2] = {"x", "trips"};
    if (a->c) {
        a->st = kiln_context_set_input(a->c, "x", &in[0]);
        if (a->st == KILN_OK)
            a->st = kiln_context_set_input(a->c, "trips", &in[1]);
        if (a->st == KILN_OK)
            a->st = kiln_context_run(a->c);
        if (a->st == KILN_OK)
            a->y = *(const float *)kiln_context_output(a->c, 0)->data;
    } else {
        kiln_tensor *out;
        int nout;
        a->st = kiln_model_run(a->m, 2, names, in, NULL, &nout, &out);
        if (a->st == KILN_OK) {
            a->y = *(const float *)out[0].data;
            kiln_tensors_free(out, nout);
        }
    }
    a->end = now_s();
    return NULL;
}

/* Starts a run of 10^15 Loop iterations, cancels it after 0.2 s, and checks it stopped soon. */
static void cancel_while_running(const char *what, run_arg *a, kiln_context_t cancel_ctx)
{
    pthread_t th;
    a->trips = 1000000000000000LL;
    CHECK(pthread_create(&th, NULL, run_loop, a) == 0);
    usleep(200000);
    double t0 = now_s();
    if (cancel_ctx)
        kiln_context_cancel(cancel_ctx);
    else
        kiln_cancel_all();
    pthread_join(th, NULL);
    CHECK_MSG(a->st == KILN_ERR_CANCELLED && strstr(kiln_status_str(a->st), "cancel"), "%s: %s", what,
              kiln_status_str(a->st));
    CHECK_MSG(a->end - t0 < 2.0, "%s: stopped %.2f s after the cancel", what, a->end - t0);
}

static void budget_and_cancel(void)
{
    /* the builder's calibration run of a Loop with 10^15 iterations stops at the budget */
    kiln_model_t m;
    CHECK(kiln_model_load("tests/data/loop_forever.onnx", &m) == KILN_OK);
    kiln_build_options bo = {.run_budget_s = 0.3};
    kiln_engine_t e = NULL;
    double t0 = now_s();
    kiln_status st = kiln_build(m, &bo, &e);
    double took = now_s() - t0;
    CHECK_MSG(st == KILN_ERR_LIMIT && strstr(kiln_last_error(), "budget"), "budget: %s (%s)", kiln_status_str(st),
              kiln_last_error());
    CHECK_MSG(took < 5.0, "over-budget build took %.2f s", took);
    printf("over-budget build: %.2f s: %s\n", took, kiln_last_error());
    kiln_engine_free(e);
    kiln_model_free(m);

    /* user runs: the trip count is an input (the build's calibration runs one iteration) */
    CHECK(kiln_model_load("tests/data/loop_trips.onnx", &m) == KILN_OK);
    CHECK(kiln_build(m, NULL, &e) == KILN_OK);
    kiln_context_t c = NULL;
    CHECK(kiln_context_create(e, &c) == KILN_OK);
    kiln_context_set_threads(c, 2);
    run_arg a = {.c = c};
    cancel_while_running("kiln_context_cancel", &a, c);
    a = (run_arg){.c = c, .trips = 3};
    run_loop(&a);   /* the cancel was consumed: the next run is complete */
    CHECK_MSG(a.st == KILN_OK && a.y == 3.0f, "run after cancel: %s, y = %g", kiln_status_str(a.st), a.y);
    kiln_context_cancel(c);   /* no run in progress: cancels the next one */
    a = (run_arg){.c = c, .trips = 3};
    run_loop(&a);
    CHECK(a.st == KILN_ERR_CANCELLED);
    a = (run_arg){.m = m};
    cancel_while_running("kiln_cancel_all (kiln_model_run)", &a, NULL);
    a = (run_arg){.m = m, .trips = 4};
    run_loop(&a);   /* runs started after kiln_cancel_all are not affected */
    CHECK_MSG(a.st == KILN_OK && a.y == 4.0f, "run after cancel_all: %s, y = %g", kiln_status_str(a.st), a.y);
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
}

int main(void)
{
    signal(SIGALRM, on_alarm);
    alarm(120);
    static const char *nested_flags[] = {"c1", "c2"}, *loop_flags[] = {"c"};
    nested_outer_reads("tests/data/nested_if.onnx", 2, nested_flags, expect_nested_if);
    nested_outer_reads("tests/data/loop_if.onnx", 1, loop_flags, expect_loop_if);
    budget_and_cancel();
    return TEST_SUMMARY();
}
