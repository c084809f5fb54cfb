/* kernels.c — picks the kernel family once and answers format questions for the
 * matmul (which activation format a weight type takes, how big its rows are). Families
 * (ref, the x86 ones in kernels/x86, NEON in kernels/arm) sit behind the same table, so
 * model code never changes when one is added. */
#include "kernels.h"

#include <pthread.h>

#include "core/cpu.h"
#include "kernels/ref/ref.h"
#if defined(__x86_64__)
#include "kernels/x86/x86.h"
#endif
#if defined(__aarch64__)
#include "kernels/arm/arm.h"
#endif

static const cn_kernels g_ref = {
    .name = "ref",
    .rmsnorm = cn_ref_rmsnorm,
    .rope_cache = cn_ref_rope_cache,
    .rope = cn_ref_rope,
    .softmax = cn_ref_softmax,
    .gated_act = cn_ref_gated_act,
    .quantize_rows = cn_ref_quantize_rows,
    .matmul = cn_ref_matmul,
    .attention = cn_ref_attention,
};

const cn_kernels *cn_kernels_ref(void) {
    cn_ref_init();
    return &g_ref;
}

static const cn_kernels *g_chosen;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* The family for cn_cpu_isa(), which already applies CINDER_ISA=ref|avx2|avx512|amx|neon and
 * CINDER_REF=1 (src/core/cpu.c). The x86 families live in kernels/x86 (x86.h), NEON in
 * kernels/arm (arm.h). */
static void choose(void) {
    switch (cn_cpu_isa()) {
#if defined(__x86_64__)
    case CN_ISA_AMX: g_chosen = cn_kernels_amx(); return;
    case CN_ISA_AVX512: g_chosen = cn_kernels_avx512(); return;
    case CN_ISA_AVX2: g_chosen = cn_kernels_avx2(); return;
#endif
#if defined(__aarch64__)
    case CN_ISA_NEON: g_chosen = cn_kernels_neon(); return;
#endif
    default: g_chosen = cn_kernels_ref(); return;
    }
}

const cn_kernels *cn_kernels_get(void) {
    pthread_once(&g_once, choose);
    return g_chosen;
}

const char *cn_kernels_family(void) { return cn_kernels_get()->name; }

uint32_t cn_matmul_act_type(uint32_t w_type) {
    switch (w_type) {
    case CN_TYPE_F32: return CN_TYPE_F32;
    case CN_TYPE_F16: return CN_TYPE_F16;
    case CN_TYPE_BF16: return CN_TYPE_BF16;
    case CN_TYPE_Q4_0:
    case CN_TYPE_Q5_0:
    case CN_TYPE_Q8_0: return CN_TYPE_Q8_0;
    case CN_TYPE_Q4_1:
    case CN_TYPE_Q5_1: return CN_TYPE_Q8_1;
    case CN_TYPE_Q4_K:
    case CN_TYPE_Q5_K:
    case CN_TYPE_Q6_K: return CN_TYPE_Q8_K;
    default: return CN_TYPE_COUNT;
    }
}

bool cn_matmul_supports(uint32_t w_type) { return cn_matmul_act_type(w_type) != CN_TYPE_COUNT; }

size_t cn_act_row_bytes(uint32_t act_type, int64_t k) {
    if (k <= 0) return 0;
    switch (act_type) {
    case CN_TYPE_F32: return (size_t)k * 4;
    case CN_TYPE_F16:
    case CN_TYPE_BF16: return (size_t)k * 2;
    case CN_TYPE_Q8_0: return k % CN_QK8_0 ? 0 : (size_t)(k / CN_QK8_0) * sizeof(cn_block_q8_0);
    case CN_TYPE_Q8_1: return k % CN_QK8_1 ? 0 : (size_t)(k / CN_QK8_1) * sizeof(cn_block_q8_1);
    case CN_TYPE_Q8_K: return k % CN_QK_K ? 0 : (size_t)(k / CN_QK_K) * sizeof(cn_block_q8_K);
    default: return 0;
    }
}
