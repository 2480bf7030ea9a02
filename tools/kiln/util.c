/* Helpers shared by the CLI subcommands. */
#include "cli.h"
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t interrupted;

/* SIGINT: cancel the runs in progress (async-signal-safe); a second SIGINT kills as usual. */
static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
    kiln_cancel_all();
}

void cli_catch_sigint(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = (int)SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

bool cli_interrupted(void) { return interrupted != 0; }

kiln_status cli_load_tensor(const char *path, kiln_tensor *t)
{
    size_t l = strlen(path);
    if (l > 3 && strcmp(path + l - 3, ".pb") == 0)
        return kiln_tensor_pb_read(path, t);
    return kiln_npy_read(path, t);
}

void cli_safe_name(const char *in, char *out, size_t n)
{
    size_t i = 0;
    for (; in[i] && i + 1 < n; i++) {
        char c = in[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '-' || c == '_';
        out[i] = ok ? c : '_';
    }
    out[i] = 0;
    if (i == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
        snprintf(out, n, "_%s", i ? out : "");
}

int cli_die(kiln_status st, const char *what)
{
    if (st == KILN_ERR_CANCELLED || interrupted) {
        fprintf(stderr, "kiln: interrupted (%s)\n", what);
        return 130;
    }
    fprintf(stderr, "kiln: %s: %s (%s)\n", what, kiln_last_error(), kiln_status_str(st));
    return 1;
}
