/* Device tactics (src/core/devtac.h): choices round-trip through the text and through a file, two writers of one
 * file merge, a text or file of another signature is not read, malformed lines are skipped, the signature line is
 * checked, and the GPU part of a signature is what precedes its versions. */
#include "core/devtac.h"
#include "test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void text_round_trip(void)
{
    kiln_devtac *a = kiln__devtac_new("GPU X (sm_90), driver 1.0, cuDNN 9");
    long long k1[3] = {1, 2, 3}, k2[3] = {4, 5, 6};
    unsigned char k3[KILN_DEVTAC_MAX_KEY + 1];
    memset(k3, 0xab, sizeof k3);
    CHECK(kiln__devtac_get(a, 'g', k1, sizeof k1) == -1);
    CHECK(kiln__devtac_put(a, 'g', k1, sizeof k1, 7));
    CHECK(!kiln__devtac_put(a, 'g', k1, sizeof k1, 7));   /* nothing changed */
    CHECK(kiln__devtac_put(a, 'm', k1, sizeof k1, 2));   /* another kind, same key */
    CHECK(kiln__devtac_put(a, '8', k2, sizeof k2, 12345));
    CHECK(kiln__devtac_put(a, 'x', k3, KILN_DEVTAC_MAX_KEY, 0));
    CHECK(!kiln__devtac_put(a, 'x', k3, sizeof k3, 1));   /* key too long */
    CHECK(!kiln__devtac_put(a, 'x', k1, 0, 1));           /* empty key */
    CHECK(!kiln__devtac_put(a, 'g', k2, sizeof k2, -1));  /* no choice */
    CHECK(!kiln__devtac_put(a, '\n', k2, sizeof k2, 1));  /* a kind that would break the line */
    CHECK(kiln__devtac_count(a) == 4);
    size_t n = 0;
    char *text = kiln__devtac_text(a, &n);
    CHECK(text && n == strlen(text) && !strncmp(text, KILN_DEVTAC_MAGIC "\tGPU X (sm_90), driver 1.0, cuDNN 9\n",
                                               strlen(KILN_DEVTAC_MAGIC) + 36));
    char sig[64];
    CHECK(kiln__devtac_text_signature(text, n, sig, sizeof sig) && !strcmp(sig, "GPU X (sm_90), driver 1.0, cuDNN 9"));
    CHECK(kiln__devtac_text_signature(text, n, sig, 6) && !strcmp(sig, "GPU X"));   /* cut */
    kiln_devtac *b = kiln__devtac_new("GPU X (sm_90), driver 1.0, cuDNN 9");
    CHECK(kiln__devtac_parse(b, text, n) == 4);
    CHECK(kiln__devtac_get(b, 'g', k1, sizeof k1) == 7 && kiln__devtac_get(b, 'm', k1, sizeof k1) == 2 &&
          kiln__devtac_get(b, '8', k2, sizeof k2) == 12345 && kiln__devtac_get(b, 'x', k3, KILN_DEVTAC_MAX_KEY) == 0);
    size_t n2 = 0;
    char *text2 = kiln__devtac_text(b, &n2);   /* the same text again: same order */
    CHECK(text2 && n2 == n && !memcmp(text, text2, n));
    free(text2);
    /* another signature, no header, a wrong magic: nothing read */
    kiln_devtac *c = kiln__devtac_new("GPU Y");
    CHECK(kiln__devtac_parse(c, text, n) == -1 && kiln__devtac_count(c) == 0);
    CHECK(kiln__devtac_parse(c, "g 01 1\n", 7) == -1);
    CHECK(kiln__devtac_parse(c, "kiln device tactics 2\tGPU Y\ng 01 1\n", 35) == -1);
    CHECK(kiln__devtac_parse(c, NULL, 0) == -1);
    /* malformed lines skipped, good ones kept; CRLF ends, no final newline */
    static const char mixed[] = "kiln device tactics 1\tGPU Y\r\n"
                                "zz\ng nothex 3\nm 0102 -1\ng 010 1\ng 0102\ng 0102 \ng  5\n"
                                "g 0A 1\n\n8 0102 x9\ng 0102 99999999999\n"
                                "g 0102 4\r\nm ff 0";
    int got = kiln__devtac_parse(c, mixed, sizeof mixed - 1);
    unsigned char k12[2] = {1, 2}, kff[1] = {0xff};
    CHECK_MSG(got == 2, "read %d lines of the mixed text", got);
    CHECK(kiln__devtac_get(c, 'g', k12, 2) == 4 && kiln__devtac_get(c, 'm', kff, 1) == 0);
    /* a text cut anywhere reads as a prefix of it (or not at all), never past its end */
    for (size_t cut = 0; cut < n; cut++) {
        char *t = malloc(cut + 1);
        memcpy(t, text, cut);
        kiln_devtac *d = kiln__devtac_new("GPU X (sm_90), driver 1.0, cuDNN 9");
        int r = kiln__devtac_parse(d, t, cut);
        CHECK(r <= 4);
        kiln__devtac_free(d);
        free(t);
    }
    free(text);
    kiln__devtac_free(a);
    kiln__devtac_free(b);
    kiln__devtac_free(c);
}

static void files(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_test_devtac.%ld", (long)getpid());
    remove(path);
    long long k1[2] = {1, 2}, k2[2] = {3, 4};
    kiln_devtac *a = kiln__devtac_new("GPU X"), *b = kiln__devtac_new("GPU X");
    CHECK(kiln__devtac_load(a, path) == -1);   /* no file */
    kiln__devtac_put(a, 'g', k1, sizeof k1, 5);
    kiln__devtac_put(b, 'g', k2, sizeof k2, 6);
    kiln__devtac_put(b, 'g', k1, sizeof k1, 9);   /* b's word for k1, written last, wins */
    CHECK(kiln__devtac_save(a, path));
    CHECK(kiln__devtac_save(b, path));   /* merged with a's */
    kiln_devtac *c = kiln__devtac_new("GPU X");
    CHECK(kiln__devtac_load(c, path) == 2);
    CHECK(kiln__devtac_get(c, 'g', k1, sizeof k1) == 9 && kiln__devtac_get(c, 'g', k2, sizeof k2) == 6);
    kiln_devtac *y = kiln__devtac_new("GPU Y");
    CHECK(kiln__devtac_load(y, path) == -1 && kiln__devtac_count(y) == 0);   /* another signature */
    kiln__devtac_put(y, 'g', k1, sizeof k1, 1);
    CHECK(kiln__devtac_save(y, path));   /* replaces a file of another signature */
    kiln_devtac *z = kiln__devtac_new("GPU Y");
    CHECK(kiln__devtac_load(z, path) == 1);
    CHECK(!kiln__devtac_save(z, "/nonexistent-dir/cache"));
    remove(path);
    kiln__devtac_free(a);
    kiln__devtac_free(b);
    kiln__devtac_free(c);
    kiln__devtac_free(y);
    kiln__devtac_free(z);
}

static void signatures(void)
{
    CHECK(kiln__devtac_gpu_len("NVIDIA H200 (sm_90, 132 SMs, 140 GiB), driver 13.0, runtime 13.0") == 37);
    CHECK(kiln__devtac_gpu_len("fake device") == 11);
    char out[16];
    kiln__devtac_signature_of("a\tb\nc\rd", out, sizeof out);
    CHECK(!strcmp(out, "a b c d"));
    kiln_devtac *t = kiln__devtac_new("x\ty");
    CHECK(!strcmp(kiln__devtac_signature(t), "x y"));
    kiln__devtac_free(t);
}

int main(void)
{
    text_round_trip();
    files();
    signatures();
    return TEST_SUMMARY();
}
