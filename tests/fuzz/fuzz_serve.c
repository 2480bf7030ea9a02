/* libFuzzer harness: what a client sends to `kiln serve` (tools/kiln/serve), without the HTTP layer.
 *
 * Byte 0 picks the target:
 *   bit 7 set:   the bytes after it are a model's config.pbtxt: written to a temporary model directory and read by
 *                sv_config_read (the pbtxt parser, then every field's checks), as the repository loads one;
 *   otherwise:   an infer request for one of four configurations (bits 0-1: a batching model with FP32 / INT64
 *                inputs, a fixed-shape one with FP16 / BOOL / UINT8 inputs, one BF16 input of any shape, eight
 *                INT32 inputs), bytes 1-2 the Inference-Header-Content-Length (0: none; taken modulo the body's
 *                length + 1), the rest the body: decoded by sv_decode_infer, and a decoded request answered by
 *                sv_encode_infer with outputs made from its inputs (the request's id and binary flags echoed).
 * Every outcome must be a clean status with a message; ASan / UBSan judge the rest. */
#include "../../tools/kiln/serve/serve.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void io(sv_io *x, const char *name, kiln_dtype dt, int ndim, const int64_t *dims)
{
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->dtype = dt;
    x->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        x->dims[d] = dims[d];
}

static void model(sv_model *m, int which)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "m%d", which);
    sv_config *c = &m->cfg;
    switch (which) {
    case 0: {   /* batching: x [B, 3, -1] FP32, ids [B, 4] INT64 -> y, z */
        c->max_batch_size = 8;
        io(&c->inputs[0], "x", KILN_DT_FLOAT32, 2, (const int64_t[]){3, -1});
        io(&c->inputs[1], "ids", KILN_DT_INT64, 1, (const int64_t[]){4});
        c->n_inputs = 2;
        io(&c->outputs[0], "y", KILN_DT_FLOAT32, 2, (const int64_t[]){3, -1});
        io(&c->outputs[1], "z", KILN_DT_INT64, 1, (const int64_t[]){4});
        c->n_outputs = 2;
        break;
    }
    case 1: {   /* fixed shapes: h [2, 2] FP16, mask [-1] BOOL, px [2, 3] UINT8 */
        c->max_batch_size = 0;
        io(&c->inputs[0], "h", KILN_DT_FLOAT16, 2, (const int64_t[]){2, 2});
        io(&c->inputs[1], "mask", KILN_DT_BOOL, 1, (const int64_t[]){-1});
        io(&c->inputs[2], "px", KILN_DT_UINT8, 2, (const int64_t[]){2, 3});
        c->n_inputs = 3;
        for (int k = 0; k < 3; k++)
            c->outputs[k] = c->inputs[k];
        snprintf(c->outputs[0].name, SV_NAME_MAX, "out");
        snprintf(c->outputs[1].name, SV_NAME_MAX, "keep");
        snprintf(c->outputs[2].name, SV_NAME_MAX, "img");
        c->n_outputs = 3;
        break;
    }
    case 2:   /* one BF16 input of any rank-3 shape */
        io(&c->inputs[0], "b", KILN_DT_BFLOAT16, 3, (const int64_t[]){-1, -1, -1});
        c->n_inputs = 1;
        c->outputs[0] = c->inputs[0];
        c->n_outputs = 1;
        break;
    default:   /* eight INT32 inputs, batching up to 2 */
        c->max_batch_size = 2;
        for (int k = 0; k < 8; k++) {
            char n[8];
            snprintf(n, sizeof n, "i%d", k);
            io(&c->inputs[k], n, KILN_DT_INT32, 1, (const int64_t[]){-1});
            c->outputs[k] = c->inputs[k];
            snprintf(c->outputs[k].name, SV_NAME_MAX, "o%d", k);
        }
        c->n_inputs = c->n_outputs = 8;
        break;
    }
}

static void request(const uint8_t *data, size_t size)
{
    if (size < 3)
        return;
    sv_model m;
    model(&m, data[0] & 3);
    const char *body = (const char *)data + 3;
    size_t len = size - 3;
    size_t hl = ((size_t)data[1] | (size_t)data[2] << 8) % (len + 1);
    sv_req *r = calloc(1, sizeof *r);
    if (!r)
        return;
    sv_out_sel sel;
    char err[512] = "";
    int st = sv_decode_infer(&m, body, len, hl, r, &sel, err, sizeof err);
    if (getenv("FUZZ_SERVE_VERBOSE"))   /* what a seed exercises (tests/fuzz/make_corpus.sh) */
        fprintf(stderr, "fuzz_serve: model %d: %d %s\n", data[0] & 3, st, err);
    if (st != 200 && !err[0])
        abort();   /* a refusal must say why */
    if (st == 200) {
        /* outputs made from the inputs, as a model that echoes them would return */
        r->n_out = m.cfg.n_outputs;
        for (int k = 0; k < m.cfg.n_outputs && k < m.cfg.n_inputs; k++) {
            kiln_tensor *in = &r->in[k], *out = &r->out[k];
            if (!sv_tensor_alloc(out, in->dtype, in->ndim, in->dims))
                break;
            memcpy(out->data, in->data, in->nbytes);
        }
        char *resp = NULL;
        size_t rlen = 0, jlen = 0;
        if (sv_encode_infer(&m, r, &sel, &resp, &rlen, &jlen, err, sizeof err) && jlen > rlen)
            abort();
        free(resp);
    }
    sv_out_sel_free(&sel);
    sv_req_free(r);
}

static void config(const uint8_t *data, size_t size)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/kiln_fuzz_serve.XXXXXX");
        if (!mkdtemp(dir)) {
            dir[0] = 0;
            return;
        }
    }
    char path[128];
    snprintf(path, sizeof path, "%s/config.pbtxt", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    size_t w = fwrite(data, 1, size, f);
    fclose(f);
    if (w != size)
        return;
    sv_config c;
    char err[512] = "";
    bool ok = sv_config_read(dir, "fuzzed", &c, err, sizeof err);
    if (getenv("FUZZ_SERVE_VERBOSE"))
        fprintf(stderr, "fuzz_serve: config: %s %s\n", ok ? "read" : "refused", err);
    if (!ok && !err[0])
        abort();
    sv_config_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 0x80)
        config(data + 1, size - 1);
    else
        request(data, size);
    return 0;
}
