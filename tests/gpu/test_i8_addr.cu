// The INT8 kernels' addressing (kernels_conv_i8.cuh) against what it replaced, on the host (no GPU; CI runs it where
// nvcc builds the CUDA module): i8_row / i8_tap give every row and reduction step of random convolutions the source
// and validity fp8_row::src gives (the FP8 kernels' addressing, which the INT8 kernels used before session 39);
// tile_pieces enumerates the pieces a thread copies as the per-piece division did; wg_desc_add steps a wgmma
// descriptor as wg_desc of the moved address. A wrong source, bound or descriptor here is a wrong byte on the GPU.
#include "backend/cuda/kernels_conv_i8.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>

static int checks, failed;
#define CHECK(c, ...)                                                                                                  \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(c)) {                                                                                                    \
            if (failed++ < 20) {                                                                                       \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                             \
                printf(__VA_ARGS__);                                                                                   \
                printf("\n");                                                                                          \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int rnd(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

// every row (and a few past M) and every 16-byte piece of the reduction (and a step past it) of geometry d
static void check_geometry(const cuk_conv_desc &d)
{
    const int64_t M = (int64_t)d.n * d.p * d.q, pq = (int64_t)d.p * d.q;
    const int red = d.r * d.s * d.c;
    const bool gemm = fp8_is_gemm(d);
    static const uint8_t base[1] = {0};
    const uint8_t *x = base;
    int bad = 0;
    for (int64_t m = 0; m < M + 3; m++) {
        fp8_row a;
        i8_row b;
        a.init(m, M, gemm, pq, d);
        b.init(m, M, gemm, pq, d);
        for (int k0 = 0; k0 < 64; k0 += 16) {   // a thread's piece k0, advanced a step at a time
            fp8_piece pc;
            pc.init(k0, d);
            for (int kc = k0; kc < red + 64; kc += 64) {
                const bool kok = pc.kc < red;
                bool va, vb;
                const uint8_t *sa = a.src(x, pc, kok, d, &va);
                const uint8_t *sb = b.src(x, i8_tap(pc, kok, d), &vb);
                if (va != vb || (va && sa != sb))
                    bad++;
                pc.advance(64, d);
            }
        }
    }
    CHECK(bad == 0, "n %d c %d h %d w %d k %d r %d s %d stride %d,%d pad %d,%d dil %d,%d: %d sources differ", d.n, d.c,
          d.h, d.w, d.k, d.r, d.s, d.sh, d.sw, d.ph, d.pw, d.dh, d.dw, bad);
}

static cuk_conv_desc geometry(int n, int c, int h, int w, int r, int s, int sh, int sw, int ph, int pw, int dh, int dw)
{
    cuk_conv_desc d = {};
    d.n = n, d.c = c, d.h = h, d.w = w, d.k = 16, d.r = r, d.s = s, d.sh = sh, d.sw = sw, d.ph = ph, d.pw = pw;
    d.dh = dh, d.dw = dw;
    d.p = (h + 2 * ph - dh * (r - 1) - 1) / sh + 1;
    d.q = (w + 2 * pw - dw * (s - 1) - 1) / sw + 1;
    return d;
}

int main()
{
    // ResNet's: 1x1, 1x1 stride 2 (QLinearConvSum's shortcut), 3x3 pad 1 strides 1 and 2, the 7x7 stem
    const int fixed[][12] = {{2, 64, 14, 14, 1, 1, 1, 1, 0, 0, 1, 1}, {2, 32, 14, 14, 1, 1, 2, 2, 0, 0, 1, 1},
                             {2, 16, 13, 11, 3, 3, 1, 1, 1, 1, 1, 1}, {1, 32, 15, 15, 3, 3, 2, 2, 1, 1, 1, 1},
                             {1, 16, 23, 23, 7, 7, 2, 2, 3, 3, 1, 1}, {1, 16, 9, 40, 1, 32, 1, 1, 0, 15, 1, 1}};
    for (const auto &g : fixed)
        check_geometry(geometry(g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11]));
    for (int t = 0; t < 300; t++) {   // random geometries: odd sizes, dilations, asymmetric pads and strides
        const int r = 1 + rnd(5), s = 1 + rnd(5), dh = 1 + rnd(2), dw = 1 + rnd(2);
        const int h = dh * (r - 1) + 1 + rnd(12), w = dw * (s - 1) + 1 + rnd(12);
        check_geometry(geometry(1 + rnd(3), 16 * (1 + rnd(4)), h, w, r, s, 1 + rnd(3), 1 + rnd(3), rnd(r), rnd(s),
                                dh, dw));
    }
    // tile_pieces: the pieces of thread tid among nt, as i = tid, tid + nt, ... < rows * pr give them
    for (int pr : {4, 8, 12, 16, 20, 64, 128, 256, 512})
        for (int tid = 0; tid < 256; tid += 5) {
            const int nt = 256, rows = 128;
            std::vector<std::pair<int, int>> want, got;
            for (int i = tid; i < rows * pr; i += nt)
                want.push_back({i / pr, i % pr});
            const tile_pieces tp(tid, pr, nt);
            if (tp.even)
                for (int rr = tp.r0; rr < rows; rr += tp.rstep)
                    got.push_back({rr, tp.j0});
            CHECK(tp.even == (nt % pr == 0), "pr %d: even", pr);
            CHECK(!tp.even || got == want, "pr %d tid %d: %zu pieces, %zu wanted", pr, tid, got.size(), want.size());
        }
    // wg_desc_add: the descriptor of an address 32, 64, 96 bytes further, for every 16-byte-aligned shared address
    // below 228 KB (the most an SM has) and each swizzle
    int bad = 0;
    for (int row : {32, 64, 128})
        for (uint32_t a = 0; a < 228 * 1024; a += 16)
            for (uint32_t kk = 1; kk < 4; kk++)
                bad += wg_desc_add(wg_desc(a, row), 2 * kk) != wg_desc(a + 32 * kk, row);
    CHECK(bad == 0, "%d descriptors differ", bad);
    printf("test_i8_addr: %d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}
