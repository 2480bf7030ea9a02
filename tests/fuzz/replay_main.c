/* Stand-in for libFuzzer's main in builds without KILN_FUZZ (GCC, ASan): runs a harness once on
 * each file named on the command line (options starting with '-' are ignored), so reproducers in
 * tests/fuzz/regress/ replay in every ctest run. Like libFuzzer's -malloc_limit_mb and -timeout,
 * a single kiln allocation over FUZZ_REPLAY_MALLOC_LIMIT or an input running over
 * FUZZ_REPLAY_TIMEOUT seconds aborts. */
#include "fuzz_common.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FUZZ_REPLAY_MALLOC_LIMIT ((size_t)2 << 30)
#define FUZZ_REPLAY_TIMEOUT 60

static const char *current;

static void *limited_malloc(size_t n, void *user)
{
    (void)user;
    if (n > FUZZ_REPLAY_MALLOC_LIMIT) {
        fprintf(stderr, "replay: %s: malloc(%zu) exceeds the %zu-byte limit\n", current, n, FUZZ_REPLAY_MALLOC_LIMIT);
        abort();
    }
    return malloc(n);
}

static void *limited_realloc(void *p, size_t n, void *user)
{
    if (n > FUZZ_REPLAY_MALLOC_LIMIT)
        limited_malloc(n, user);
    return realloc(p, n);
}

static void std_free(void *p, void *user)
{
    (void)user;
    free(p);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "replay: timeout\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(3);
    abort();
}

int main(int argc, char **argv)
{
    kiln_allocator a = {limited_malloc, limited_realloc, std_free, NULL};
    kiln_set_allocator(&a);
    signal(SIGALRM, on_alarm);
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        current = argv[i];
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 1;
        }
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
            if (len == cap) {
                cap = cap ? cap * 2 : 4096;
                uint8_t *nb = realloc(buf, cap);
                if (!nb)
                    abort();
                buf = nb;
            }
            size_t r = fread(buf + len, 1, cap - len, f);
            if (r == 0)
                break;
            len += r;
        }
        fclose(f);
        alarm(FUZZ_REPLAY_TIMEOUT);
        LLVMFuzzerTestOneInput(buf, len);
        alarm(0);
        free(buf);
        n++;
    }
    printf("replayed %d input%s\n", n, n == 1 ? "" : "s");
    return 0;
}
