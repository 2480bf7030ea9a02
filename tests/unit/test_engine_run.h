/* Running an engine on the CPU in the unit tests: test_run_cpu binds inputs in[0..], runs one context and copies
 * up to 4 outputs into out (malloc'd data, *nout of them), with CHECK failures for anything that goes wrong;
 * test_same_outputs compares two engines' outputs byte for byte. */
#ifndef KILN_TEST_ENGINE_RUN_H
#define KILN_TEST_ENGINE_RUN_H
#include "kiln/kiln.h"
#include "test.h"
#include <stdlib.h>
#include <string.h>

/* Bytes of e's engine file. */
static inline size_t test_engine_bytes(kiln_engine_t e)
{
    void *buf = NULL;
    size_t len = 0;
    CHECK(kiln_engine_serialize(e, &buf, &len) == KILN_OK);
    kiln_free(buf);
    return len;
}

static inline void test_run_cpu(kiln_engine_t e, const kiln_tensor *in, kiln_tensor *out, int *nout)
{
    kiln_context_t c = NULL;
    *nout = 0;
    CHECK(kiln_context_create(e, &c) == KILN_OK);
    for (int i = 0; c && i < kiln_engine_num_inputs(e); i++)
        CHECK(kiln_context_set_input(c, kiln_engine_input_name(e, i), &in[i]) == KILN_OK);
    CHECK_MSG(c && kiln_context_run(c) == KILN_OK, "%s", kiln_last_error());
    for (int o = 0; c && o < kiln_engine_num_outputs(e) && o < 4; o++) {
        const kiln_tensor *t = kiln_context_output(c, o);
        CHECK(t && t->data);
        out[o] = t ? *t : (kiln_tensor){0};
        out[o].data = t && t->data ? malloc(t->nbytes) : NULL;
        if (out[o].data) {
            memcpy(out[o].data, t->data, t->nbytes);
            (*nout)++;
        }
    }
    kiln_context_free(c);
}

/* Engines a and b (either may be NULL: a CHECK failure) on the same inputs give want outputs, byte for byte the same
 * (what: the message's reason). */
static inline void test_same_outputs(kiln_engine_t a, kiln_engine_t b, const kiln_tensor *in, int want, const char *what)
{
    kiln_tensor y1[4], y2[4];
    int n1 = 0, n2 = 0;
    if (a)
        test_run_cpu(a, in, y1, &n1);
    if (b)
        test_run_cpu(b, in, y2, &n2);
    CHECK(n1 == want && n2 == n1);
    for (int o = 0; o < n1 && o < n2; o++)
        CHECK_MSG(y1[o].nbytes == y2[o].nbytes && !memcmp(y1[o].data, y2[o].data, y1[o].nbytes), "output %d %s", o,
                  what);
    for (int o = 0; o < n1; o++)
        free(y1[o].data);
    for (int o = 0; o < n2; o++)
        free(y2[o].data);
}

#endif
