/* amx_emu_avx512.c — the AMX family's matmul (src/kernels/x86/matmul_tmpl.h with
 * CN_X86_AMX) compiled a second time for the tests, with the AMX tile instructions done
 * in software, so that its tile code runs on any CPU with the AVX-512 family (its vector
 * code is real AVX-512). It checks the AMX family's logic (tile shapes, operand order,
 * the pipeline's buffers, the float finish) bit for bit against ref on machines that
 * have no AMX; a machine with AMX runs the real family as well (test_kernels_simd.c).
 *
 * The software tiles follow Intel's SDM (TILELOADD, TILESTORED, TILEZERO, TDPB[SU][SU]D
 * with palette 1: 8 tiles of at most 16 rows × 64 bytes) and stop the test on what the
 * hardware faults on: a tile used beyond its configured shape, or shapes that do not fit
 * the multiply. Whether they are right was checked by running the 32-element formats'
 * AMX tiles, which passed these tests on an AMX Xeon (2026-12-01), through them.
 * Compiled with the AVX-512 flags (Makefile: tests/unit/%_avx512.c), without AMX's. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t rows[8];
    uint16_t colsb[8];
    _Alignas(64) uint8_t t[8][16][64];
    int configured;
} emu_tiles;
static __thread emu_tiles g_emu;

static void emu_fail(const char *what, int tile) {
    fprintf(stderr, "amx emulation: %s (tile %d): the hardware would fault here\n", what, tile);
    abort();
}

static void emu_loadconfig(const void *cfg) {
    const uint8_t *c = cfg;
    if (c[0] != 1) emu_fail("palette is not 1", -1);
    memset(&g_emu, 0, sizeof g_emu);
    for (int i = 0; i < 8; i++) {
        uint16_t cb;
        memcpy(&cb, c + 16 + 2 * i, 2);
        g_emu.colsb[i] = cb;
        g_emu.rows[i] = c[48 + i];
        if (cb > 64 || g_emu.rows[i] > 16 || (cb == 0) != (g_emu.rows[i] == 0)) emu_fail("bad shape", i);
    }
    g_emu.configured = 1;
}

static void emu_check(int i) {
    if (!g_emu.configured) emu_fail("used before ldtilecfg", i);
    if (i < 0 || i > 7 || !g_emu.rows[i]) emu_fail("tile not configured", i);
}

static void emu_loadd(int i, const void *base, long stride) {
    emu_check(i);
    memset(g_emu.t[i], 0, sizeof g_emu.t[i]);
    for (int r = 0; r < g_emu.rows[i]; r++)
        memcpy(g_emu.t[i][r], (const uint8_t *)base + (long)r * stride, g_emu.colsb[i]);
}

static void emu_stored(int i, void *base, long stride) {
    emu_check(i);
    for (int r = 0; r < g_emu.rows[i]; r++) memcpy((uint8_t *)base + (long)r * stride, g_emu.t[i][r], g_emu.colsb[i]);
}

static void emu_zero(int i) {
    emu_check(i);
    memset(g_emu.t[i], 0, sizeof g_emu.t[i]);
}

/* C[m][n] += sum over k, j < 4 of A[m][4k + j] * B[k][4n + j], A's and B's bytes signed
 * (s) or unsigned (u) as the mnemonic says: tdpb<A><B>d. */
static void emu_dp(int c, int a, int b, int a_signed, int b_signed) {
    emu_check(c), emu_check(a), emu_check(b);
    const int M = g_emu.rows[c], N = g_emu.colsb[c] / 4, K = g_emu.colsb[a] / 4;
    if (g_emu.rows[a] != M || g_emu.rows[b] != K || g_emu.colsb[b] != g_emu.colsb[c] || g_emu.colsb[c] % 4 ||
        g_emu.colsb[a] % 4 || c == a || c == b || a == b)
        emu_fail("shapes do not fit the multiply", c);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int32_t acc;
            memcpy(&acc, &g_emu.t[c][m][4 * n], 4);
            for (int k = 0; k < K; k++)
                for (int j = 0; j < 4; j++) {
                    const uint8_t x = g_emu.t[a][m][4 * k + j], y = g_emu.t[b][k][4 * n + j];
                    const int32_t xv = a_signed ? (int8_t)x : x, yv = b_signed ? (int8_t)y : y;
                    acc = (int32_t)((uint32_t)acc + (uint32_t)(xv * yv)); /* wraps, as the hardware */
                }
            memcpy(&g_emu.t[c][m][4 * n], &acc, 4);
        }
}

#undef _tile_loadd
#undef _tile_stream_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbssd
#undef _tile_dpbsud
#undef _tile_dpbusd
#undef _tile_dpbuud
#define _tile_loadconfig(cfg) emu_loadconfig(cfg)
#define _tile_release() (void)(g_emu.configured = 0)
#define _tile_loadd(t, base, stride) emu_loadd((t), (base), (long)(stride))
#define _tile_stored(t, base, stride) emu_stored((t), (base), (long)(stride))
#define _tile_zero(t) emu_zero(t)
#define _tile_dpbssd(c, a, b) emu_dp((c), (a), (b), 1, 1)
#define _tile_dpbsud(c, a, b) emu_dp((c), (a), (b), 1, 0)
#define _tile_dpbusd(c, a, b) emu_dp((c), (a), (b), 0, 1)
#define _tile_dpbuud(c, a, b) emu_dp((c), (a), (b), 0, 0)

#define CN_X86_AVX512 1
#define CN_X86_AMX 1
#define CN_X86_SUFFIX(name) amxemu_##name
#include "kernels/x86/x86.h"

#include "kernels/x86/matmul_tmpl.h"

#include "amx_emu.h"

/* The AMX family's table as kernels_amx.c makes it, the tiles in software. */
const cn_kernels *cn_test_kernels_amx_emu(void) {
    static cn_kernels k;
    if (!k.name) k = amxemu_table("amx-emulated");
    return &k;
}
#endif
