/* Files kiln reads and writes (issue 6): sizes are checked before allocating (.npy claiming more
 * data than it holds, directories), atomic replacement (a reader sees the old file until commit,
 * an aborted or failed write leaves it byte-identical and no temporary behind), file identity,
 * terminal-safe escaping of names in messages, and kiln__malloc_large (the arena's allocation: 2 MB aligned from
 * 2 MB on, through the allocator hooks when they are set). */
#include "core/core.h"
#include "test.h"
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t largest_request;
static void *count_malloc(size_t n, void *u)
{
    (void)u;
    largest_request = n > largest_request ? n : largest_request;
    return n > ((size_t)64 << 20) ? NULL : malloc(n);   /* never actually hand out a huge block */
}
static void *count_realloc(void *p, size_t n, void *u)
{
    (void)u;
    largest_request = n > largest_request ? n : largest_request;
    return n > ((size_t)64 << 20) ? NULL : realloc(p, n);
}
static void count_free(void *p, void *u)
{
    (void)u;
    free(p);
}

static void put(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    if (f)
        fclose(f);
}

static bool has(const char *path, const char *text)
{
    FILE *f = fopen(path, "rb");
    char buf[256] = "";
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    return f && !strcmp(buf, text);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static void test_sizes_before_allocation(const char *dir)
{
    kiln_allocator a = {count_malloc, count_realloc, count_free, NULL};
    kiln_set_allocator(&a);
    /* a 144-byte .npy claiming 2^31-1 float32 elements (8 GiB) */
    char path[512], hdr[118];
    snprintf(path, sizeof path, "%s/huge.npy", dir);
    memset(hdr, ' ', sizeof hdr);
    const char *d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2147483647,), }";
    memcpy(hdr, d, strlen(d));
    hdr[sizeof hdr - 1] = '\n';
    unsigned char file[144] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, sizeof hdr, 0};
    memcpy(file + 10, hdr, sizeof hdr);
    put(path, file, sizeof file);
    kiln_tensor t;
    largest_request = 0;
    kiln_status st = kiln_npy_read(path, &t);
    CHECK_MSG(st == KILN_ERR_PARSE && strstr(kiln_last_error(), "truncated"), "%d %s", st, kiln_last_error());
    CHECK_MSG(largest_request < 4096, "allocated %zu bytes for a 144-byte file", largest_request);
    /* a shape whose byte count overflows */
    const char *d2 = "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 8), }";
    memset(hdr, ' ', sizeof hdr);
    memcpy(hdr, d2, strlen(d2));
    hdr[sizeof hdr - 1] = '\n';
    memcpy(file + 10, hdr, sizeof hdr);
    put(path, file, sizeof file);
    largest_request = 0;
    st = kiln_npy_read(path, &t);
    CHECK_MSG(st != KILN_OK && largest_request < 4096, "%d %zu %s", st, largest_request, kiln_last_error());
    /* a directory is not a file of size 2^63-1 */
    void *buf;
    size_t len;
    largest_request = 0;
    st = kiln__read_file(dir, &buf, &len);
    CHECK_MSG(st == KILN_ERR_IO && strstr(kiln_last_error(), "not a regular file"), "%d %s", st, kiln_last_error());
    CHECK_MSG(largest_request < 4096, "allocated %zu bytes for a directory", largest_request);
    kiln_set_allocator(NULL);
}

static void test_atomic_write(const char *dir)
{
    char path[512], lnk[512], sub[512];
    snprintf(path, sizeof path, "%s/w/data.bin", dir);
    snprintf(sub, sizeof sub, "%s/w", dir);
    CHECK(mkdir(sub, 0755) == 0);
    put(path, "old", 3);
    chmod(path, 0640);
    kiln__afile af;
    CHECK(kiln__afile_open(&af, path) == KILN_OK);
    fputs("new contents", af.f);
    fflush(af.f);
    CHECK(has(path, "old"));                 /* a reader sees the old file until commit */
    CHECK(count_entries(sub) == 2);          /* ... and the temporary next to it */
    kiln__afile_abort(&af);
    CHECK(has(path, "old") && count_entries(sub) == 1);
    CHECK(kiln__afile_open(&af, path) == KILN_OK);
    fputs("new contents", af.f);
    CHECK(kiln__afile_commit(&af) == KILN_OK);
    CHECK(has(path, "new contents") && count_entries(sub) == 1);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0640);   /* permissions kept */
    /* a symlink is written through; a directory is refused and left alone */
    snprintf(lnk, sizeof lnk, "%s/w/lnk.bin", dir);
    CHECK(symlink("data.bin", lnk) == 0);
    CHECK(kiln__write_file_atomic(lnk, "via lnk", 8) == KILN_OK);
    CHECK(has(path, "via lnk"));
    CHECK(lstat(lnk, &sb) == 0 && S_ISLNK(sb.st_mode));
    kiln_status st = kiln__write_file_atomic(sub, "x", 1);
    CHECK_MSG(st == KILN_ERR_IO && strstr(kiln_last_error(), "not a regular file"), "%s", kiln_last_error());
    /* a write that cannot be created leaves nothing */
    snprintf(lnk, sizeof lnk, "%s/nodir/x.bin", dir);
    CHECK(kiln__write_file_atomic(lnk, "x", 1) == KILN_ERR_IO);
    CHECK(count_entries(sub) == 2);
    /* a file name at NAME_MAX still gets a temporary name that fits */
    char longp[600];
    int n = snprintf(longp, sizeof longp, "%s/w/", dir);
    memset(longp + n, 'n', 255);
    longp[n + 255] = 0;
    CHECK_MSG(kiln__write_file_atomic(longp, "l", 1) == KILN_OK, "%s", kiln_last_error());
    /* identity: other spellings, hard links, symlinks */
    snprintf(lnk, sizeof lnk, "%s/w/../w/./data.bin", dir);
    CHECK(kiln__same_file(path, lnk));
    snprintf(lnk, sizeof lnk, "%s/w/lnk.bin", dir);
    CHECK(kiln__same_file(path, lnk));
    snprintf(lnk, sizeof lnk, "%s/w/hard.bin", dir);
    CHECK(link(path, lnk) == 0 && kiln__same_file(path, lnk));
    CHECK(!kiln__same_file(path, longp) && !kiln__same_file(path, "/nonexistent/x"));
}

static void test_escape(void)
{
    char out[256];
    kiln__escape(out, sizeof out, "a\x1b[31mb\n\t\r\x7f\x01");
    CHECK_MSG(!strcmp(out, "a\\x1b[31mb\\n\\t\\r\\x7f\\x01"), "%s", out);
    kiln__escape(out, sizeof out, "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x99\x82");   /* valid UTF-8 stays */
    CHECK(!strcmp(out, "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x99\x82"));
    kiln__escape(out, sizeof out, "\xc2\x9b" "2J \xff \xc3 \xe0\x80\x80 \xed\xa0\x80");   /* C1 CSI, invalid */
    CHECK_MSG(!strcmp(out, "\\xc2\\x9b2J \\xff \\xc3 \\xe0\\x80\\x80 \\xed\\xa0\\x80"), "%s", out);
    char again[256];
    kiln__escape(again, sizeof again, out);
    CHECK(!strcmp(again, out));   /* idempotent */
    CHECK(kiln__escape(out, 4, "\x1b\x1b") == 8 && !strcmp(out, "\\x1"));
    /* error messages quoting names are escaped */
    kiln__err(KILN_ERR_INVALID_ARG, "no input named '%s'", "x\x1b]0;t\x07");
    kiln__err_prefix("%s", "file\x1b");
    CHECK_MSG(!strcmp(kiln_last_error(), "file\\x1b: no input named 'x\\x1b]0;t\\x07'"), "%s", kiln_last_error());
}

static void test_malloc_large(void)
{
    const size_t mb2 = (size_t)2 << 20;
    unsigned char *p = kiln__malloc_large(mb2 + 12345), *q = kiln__malloc_large(1000);
    CHECK(p && q);
    if (p) {
#ifdef MADV_HUGEPAGE
        /* 2 MB aligned (huge-page advised; whether the kernel gives huge pages is its business) */
        CHECK_MSG((uintptr_t)p % mb2 == 0, "%p", (void *)p);
#endif
        p[0] = 1;
        p[mb2 + 12344] = 2;
        CHECK(p[0] + p[mb2 + 12344] == 3);
    }
    kiln__free(p);
    kiln__free(q);
    /* with hooks: their allocation, their failures */
    kiln_allocator a = {count_malloc, count_realloc, count_free, NULL};
    kiln_set_allocator(&a);
    largest_request = 0;
    p = kiln__malloc_large(3 * mb2);
    CHECK_MSG(p && largest_request == 3 * mb2, "%p %zu", (void *)p, largest_request);
    kiln__free(p);
    largest_request = 0;
    CHECK(!kiln__malloc_large((size_t)80 << 20) && largest_request == (size_t)80 << 20);
    kiln_set_allocator(NULL);
}

int main(void)
{
    char dir[] = "/tmp/kiln_test_files_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_sizes_before_allocation(dir);
    test_atomic_write(dir);
    test_escape();
    test_malloc_large();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return TEST_SUMMARY();
}
