/* kernels_amx.c — the AMX family: the AVX-512 VNNI family with its quantized matmuls
 * doing token tiles on Intel's AMX tile unit (matmul_tmpl.h, CN_X86_AMX): the
 * 32-element-block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) from 8 tokens, the K-quants
 * (Q4_K, Q5_K, Q6_K) per sub-block from 16. Decode (one token) and everything else is
 * the AVX-512 family's code, and the packed weight layout is the same, so a model packed
 * for one runs on the other. Compiled with the AVX-512 flags plus -mamx-tile -mamx-int8;
 * entered only when cn_cpu_get() says the OS granted this process AMX (src/core/cpu.c).
 * Bit-identical to ref like the others: the tile multiply makes the same exact integer
 * dots, and the float steps are the shared ones. The tests run this file's tile code with
 * software tiles where the CPU has no AMX (tests/unit/amx_emu_avx512.c). */
#define CN_X86_AVX512 1
#define CN_X86_AMX 1
#define CN_X86_SUFFIX(name) amx_##name
#include "x86.h"

#include <immintrin.h>
#include <pthread.h>

#include "matmul_tmpl.h"

static cn_kernels g_amx;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init(void) { g_amx = amx_table("amx"); }

const cn_kernels *cn_kernels_amx(void) {
    pthread_once(&g_once, init);
    return &g_amx;
}
