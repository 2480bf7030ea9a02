/* Mutation test: feeds >= 1,000 corrupted models (truncated, bit-flipped, byte-overwritten, random)
 * derived from the ONNX backend test suite to the importer and the runtime. Every one must come
 * back as KILN_OK or a clean error with a message: no crash, no hang, no unbounded allocation.
 * Under ASan/UBSan (CI) any memory error aborts the test. */
#include "kiln/kiln.h"
#include "test.h"
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUITE "/usr/share/libonnx-testdata/data/node"

static int current_mutation;
static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_mutate: HANG (one mutation took more than 20 s)\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(3);
    _exit(2);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Loads the inputs of test_data_set_0 of a test directory. */
static int load_inputs(const char *dir, kiln_tensor *ins, int max)
{
    int n = 0;
    for (; n < max; n++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/test_data_set_0/input_%d.pb", dir, n);
        struct stat st;
        if (stat(p, &st) != 0 || kiln_tensor_pb_read(p, &ins[n]) != KILN_OK)
            break;
    }
    return n;
}

static void mutate(unsigned char *b, size_t *len, unsigned long long *rng)
{
    /* half of the mutations are small value tweaks, which mostly keep the protobuf decodable and
     * so reach shape checks and kernels with odd dims, indices and attribute values */
    int kind = (int)(test_rng(rng) % 10);
    if (kind > 4)
        kind = 4;
    size_t n = *len;
    if (n == 0)
        return;
    switch (kind) {
    case 0: /* truncate */
        *len = (size_t)(test_rng(rng) % n);
        break;
    case 1: /* flip a few bits */
        for (int k = 0, m = 1 + (int)(test_rng(rng) % 8); k < m; k++)
            b[test_rng(rng) % n] ^= (unsigned char)(1u << (test_rng(rng) % 8));
        break;
    case 2: /* overwrite a run with random bytes */
    {
        size_t at = (size_t)(test_rng(rng) % n), m = 1 + (size_t)(test_rng(rng) % 16);
        for (size_t k = 0; k < m && at + k < n; k++)
            b[at + k] = (unsigned char)test_rng(rng);
        break;
    }
    case 3: /* large varints: 0xff runs make huge lengths / dims */
    {
        size_t at = (size_t)(test_rng(rng) % n);
        for (size_t k = 0; k < 5 && at + k < n; k++)
            b[at + k] = 0xff;
        break;
    }
    default: /* small integer tweak: change a byte by +-1 (dims, indices, attribute values) */
        b[test_rng(rng) % n] += (test_rng(rng) & 1) ? 1 : 0xff;
        break;
    }
}

int main(int argc, char **argv)
{
    int target = argc > 1 ? atoi(argv[1]) : 3000;
    DIR *d = opendir(SUITE);
    if (!d) {
        printf("SKIP: %s not installed (run scripts/bootstrap.sh)\n", SUITE);
        return 77;
    }
    char **names = NULL;
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "test_", 5)) {
            names = realloc(names, sizeof(char *) * (size_t)(nn + 1));
            names[nn++] = strdup(e->d_name);
        }
    closedir(d);
    qsort(names, (size_t)nn, sizeof(char *), cmp);
    signal(SIGALRM, on_alarm);
    kiln_set_max_tensor_bytes((size_t)256 << 20);
    unsigned long long rng = 0x9e3779b97f4a7c15ull;
    int loaded = 0, ran_ok = 0, clean_errors = 0, silent_errors = 0, total = 0;
    for (int i = 0; total < target; i = (i + 7) % nn) {
        char dir[1024], path[1100];
        snprintf(dir, sizeof dir, "%s/%s", SUITE, names[i]);
        snprintf(path, sizeof path, "%s/model.onnx", dir);
        size_t len;
        unsigned char *orig = slurp(path, &len);
        if (!orig)
            continue;
        kiln_tensor ins[16];
        int nin = load_inputs(dir, ins, 16);
        for (int rep = 0; rep < 3 && total < target; rep++, total++) {
            current_mutation = total;
            unsigned char *b = malloc(len + 1);
            memcpy(b, orig, len);
            size_t blen = len;
            if (total % 50 == 49) { /* entirely random bytes */
                for (size_t k = 0; k < blen; k++)
                    b[k] = (unsigned char)test_rng(&rng);
            } else {
                mutate(b, &blen, &rng);
            }
            alarm(20);
            kiln_clear_last_error();
            kiln_model_t m = NULL;
            kiln_status st = kiln_model_load_buffer(b, blen, dir, &m);
            if (st == KILN_OK) {
                loaded++;
                const char *in_names[16];
                int k = 0;
                for (; k < nin && k < kiln_model_num_inputs(m); k++)
                    in_names[k] = kiln_model_input_name(m, k);
                kiln_tensor *outs = NULL;
                int nout = 0;
                kiln_run_options opts = {.num_threads = 2};
                st = kiln_model_run(m, k, in_names, ins, &opts, &nout, &outs);
                if (st == KILN_OK)
                    ran_ok++;
                kiln_tensors_free(outs, nout);
                kiln_model_free(m);
            }
            alarm(0);
            if (st != KILN_OK) {
                if (kiln_last_error()[0])
                    clean_errors++;
                else {
                    silent_errors++;
                    fprintf(stderr, "mutation %d of %s: error %s without a message\n", total, names[i],
                            kiln_status_str(st));
                }
            }
            free(b);
        }
        for (int k = 0; k < nin; k++)
            kiln_free(ins[k].data);
        free(orig);
    }
    printf("%d mutated models: %d imported, %d ran, %d clean errors, %d errors without message\n", total, loaded,
           ran_ok, clean_errors, silent_errors);
    CHECK(total >= 1000);
    CHECK(silent_errors == 0);
    for (int i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    return TEST_SUMMARY();
}
