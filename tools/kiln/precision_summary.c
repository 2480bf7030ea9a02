/* What an engine computes in, for kiln bench: the realized precisions of its layers; what a device run held in
 * half storage. */
#include "cli.h"
#include <stdio.h>
#include <string.h>

#define MAX_KINDS 16

void cli_precision_summary(kiln_engine_t e, bool tf32, cli_precision *out)
{
    const char *base = tf32 ? "tf32" : "fp32";
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", base);
    const char *kind[MAX_KINDS];
    int count[MAX_KINDS], nk = 0, nreq = 0;
    const char *req_kind = NULL;
    bool mixed = false;
    int n = kiln_engine_num_layers(e);
    for (int i = 0; i < n; i++) {
        const char *req = NULL, *real = NULL;
        if (kiln_engine_layer_precision(e, i, &req, &real) != KILN_OK || !real || !*real)
            continue;
        if (!strcmp(real, "fp32"))
            real = base;   /* with --tf32 a float32 layer may use TF32 tensor cores */
        int k = 0;
        while (k < nk && strcmp(kind[k], real))
            k++;
        if (k == nk && nk < MAX_KINDS)
            kind[nk] = real, count[nk++] = 0;
        if (k < nk)
            count[k]++;
        if (req && *req) {   /* a layer the build was asked to lower (or keep): what it realized */
            nreq++;
            if (!req_kind)
                req_kind = real;
            else if (strcmp(req_kind, real))
                mixed = true;
        }
    }
    if (nreq)
        snprintf(out->name, sizeof out->name, "%s", mixed ? "mixed" : req_kind);
    /* "fp16 51, fp32 22": most layers first */
    size_t len = 0;
    for (int done = 0; done < nk; done++) {
        int best = -1;
        for (int k = 0; k < nk; k++)
            if (count[k] >= 0 && (best < 0 || count[k] > count[best]))
                best = k;
        int w = snprintf(out->layers + len, sizeof out->layers - len, "%s%s %d", len ? ", " : "", kind[best],
                         count[best]);
        if (w < 0 || (size_t)w >= sizeof out->layers - len)
            break;
        len += (size_t)w;
        out->kinds[out->nkinds].name = kind[best];
        out->kinds[out->nkinds++].layers = count[best];
        count[best] = -1;
    }
}

void cli_print_half_storage(int n, bool always)
{
    if (n > 0 || always)
        printf("half storage: %d layer%s held a float32 output in FP16 / BF16 on the GPU (float32 arithmetic; kiln "
               "inspect --device cuda marks them after the output shape)\n", n, n == 1 ? "" : "s");
}
